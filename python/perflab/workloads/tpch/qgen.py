"""Query generation: substitution parameters and query order, as qgen does.

Follows the TPC-H specification (revision 3.0.1):
- Each query's substitution parameters are drawn uniformly from the domains
  of clause 2.4.N.3 ("Substitution Parameters") of that query; the domains are
  written out in `_PARAMETERS` below, one function per query.
- Validation mode uses the values of clause 2.4.N.4 ("Query Validation").
- Each stream draws from its own generator, seeded from the base seed plus
  the stream number. The spec's default base seed is the time stamp of the
  end of the load test, as mmddhhmmss (`default_seed`).
- The order of the 22 queries in stream s is row s mod 41 of the table in
  Appendix A ("Ordered Sets"); stream 0 is the power test's stream.

The random generator is Python's Mersenne Twister, not qgen's: parameters
follow the spec's domains and are reproducible from the seed, but are not the
same values `qgen -r seed` would print.
"""

from __future__ import annotations

import datetime as dt
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources

# TPC-H Appendix A, "Ordered Sets": the query order of stream 0 (power test)
# and of throughput streams 1..40; stream s uses row s mod 41.
QUERY_ORDER: tuple[tuple[int, ...], ...] = (
    (14, 2, 9, 20, 6, 17, 18, 8, 21, 13, 3, 22, 16, 4, 11, 15, 1, 10, 19, 5, 7, 12),
    (21, 3, 18, 5, 11, 7, 6, 20, 17, 12, 16, 15, 13, 10, 2, 8, 14, 19, 9, 22, 1, 4),
    (6, 17, 14, 16, 19, 10, 9, 2, 15, 8, 5, 22, 12, 7, 13, 18, 1, 4, 20, 3, 11, 21),
    (8, 5, 4, 6, 17, 7, 1, 18, 22, 14, 9, 10, 15, 11, 20, 2, 21, 19, 13, 16, 12, 3),
    (5, 21, 14, 19, 15, 17, 12, 6, 4, 9, 8, 16, 11, 2, 10, 18, 1, 13, 7, 22, 3, 20),
    (21, 15, 4, 6, 7, 16, 19, 18, 14, 22, 11, 13, 3, 1, 2, 5, 8, 20, 12, 17, 10, 9),
    (10, 3, 15, 13, 6, 8, 9, 7, 4, 11, 22, 18, 12, 1, 5, 16, 2, 14, 19, 20, 17, 21),
    (18, 8, 20, 21, 2, 4, 22, 17, 1, 11, 9, 19, 3, 13, 5, 7, 10, 16, 6, 14, 15, 12),
    (19, 1, 15, 17, 5, 8, 9, 12, 14, 7, 4, 3, 20, 16, 6, 22, 10, 13, 2, 21, 18, 11),
    (8, 13, 2, 20, 17, 3, 6, 21, 18, 11, 19, 10, 15, 4, 22, 1, 7, 12, 9, 14, 5, 16),
    (6, 15, 18, 17, 12, 1, 7, 2, 22, 13, 21, 10, 14, 9, 3, 16, 20, 19, 11, 4, 8, 5),
    (15, 14, 18, 17, 10, 20, 16, 11, 1, 8, 4, 22, 5, 12, 3, 9, 21, 2, 13, 6, 19, 7),
    (1, 7, 16, 17, 18, 22, 12, 6, 8, 9, 11, 4, 2, 5, 20, 21, 13, 10, 19, 3, 14, 15),
    (21, 17, 7, 3, 1, 10, 12, 22, 9, 16, 6, 11, 2, 4, 5, 14, 8, 20, 13, 18, 15, 19),
    (2, 9, 5, 4, 18, 1, 20, 15, 16, 17, 7, 21, 13, 14, 19, 8, 22, 11, 10, 3, 12, 6),
    (16, 9, 17, 8, 14, 11, 10, 12, 6, 21, 7, 3, 15, 5, 22, 20, 1, 13, 19, 2, 4, 18),
    (1, 3, 6, 5, 2, 16, 14, 22, 17, 20, 4, 9, 10, 11, 15, 8, 12, 19, 18, 13, 7, 21),
    (3, 16, 5, 11, 21, 9, 2, 15, 10, 18, 17, 7, 8, 19, 14, 13, 1, 4, 22, 20, 6, 12),
    (14, 4, 13, 5, 21, 11, 8, 6, 3, 17, 2, 20, 1, 19, 10, 9, 12, 18, 15, 7, 22, 16),
    (4, 12, 22, 14, 5, 15, 16, 2, 8, 10, 17, 9, 21, 7, 3, 6, 13, 18, 11, 20, 19, 1),
    (16, 15, 14, 13, 4, 22, 18, 19, 7, 1, 12, 17, 5, 10, 20, 3, 9, 21, 11, 2, 6, 8),
    (20, 14, 21, 12, 15, 17, 4, 19, 13, 10, 11, 1, 16, 5, 18, 7, 8, 22, 9, 6, 3, 2),
    (16, 14, 13, 2, 21, 10, 11, 4, 1, 22, 18, 12, 19, 5, 7, 8, 6, 3, 15, 20, 9, 17),
    (18, 15, 9, 14, 12, 2, 8, 11, 22, 21, 16, 1, 6, 17, 5, 10, 19, 4, 20, 13, 3, 7),
    (7, 3, 10, 14, 13, 21, 18, 6, 20, 4, 9, 8, 22, 15, 2, 1, 5, 12, 19, 17, 11, 16),
    (18, 1, 13, 7, 16, 10, 14, 2, 19, 5, 21, 11, 22, 15, 8, 17, 20, 3, 4, 12, 6, 9),
    (13, 2, 22, 5, 11, 21, 20, 14, 7, 10, 4, 9, 19, 18, 6, 3, 1, 8, 15, 12, 17, 16),
    (14, 17, 21, 8, 2, 9, 6, 4, 5, 13, 22, 7, 15, 3, 1, 18, 16, 11, 10, 12, 20, 19),
    (10, 22, 1, 12, 13, 18, 21, 20, 2, 14, 16, 7, 15, 3, 4, 17, 5, 19, 6, 8, 9, 11),
    (10, 8, 9, 18, 12, 6, 1, 5, 20, 11, 17, 22, 16, 3, 13, 2, 15, 21, 14, 19, 7, 4),
    (7, 17, 22, 5, 3, 10, 13, 18, 9, 1, 14, 15, 21, 19, 16, 12, 8, 6, 11, 20, 4, 2),
    (2, 9, 21, 3, 4, 7, 1, 11, 16, 5, 20, 19, 18, 8, 17, 13, 10, 12, 15, 6, 14, 22),
    (15, 12, 8, 4, 22, 13, 16, 17, 18, 3, 7, 5, 6, 1, 9, 11, 21, 10, 14, 20, 19, 2),
    (15, 16, 2, 11, 17, 7, 5, 14, 20, 4, 21, 3, 10, 9, 12, 8, 13, 6, 18, 19, 22, 1),
    (1, 13, 11, 3, 4, 21, 6, 14, 15, 22, 18, 9, 7, 5, 10, 20, 12, 16, 17, 8, 19, 2),
    (14, 17, 22, 20, 8, 16, 5, 10, 1, 13, 2, 21, 12, 9, 4, 18, 3, 7, 6, 19, 15, 11),
    (9, 17, 7, 4, 5, 13, 21, 18, 11, 3, 22, 1, 6, 16, 20, 14, 15, 10, 8, 2, 12, 19),
    (13, 14, 5, 22, 19, 11, 9, 6, 18, 15, 8, 10, 7, 4, 17, 16, 3, 1, 12, 2, 21, 20),
    (20, 5, 4, 14, 11, 1, 6, 16, 8, 22, 7, 3, 2, 12, 21, 19, 17, 13, 10, 15, 18, 9),
    (3, 7, 14, 15, 6, 5, 21, 20, 18, 10, 4, 16, 19, 1, 13, 9, 8, 17, 11, 12, 22, 2),
    (13, 15, 17, 1, 22, 11, 3, 4, 7, 20, 14, 21, 9, 8, 2, 18, 16, 6, 10, 12, 5, 19),
)

# Word lists of the data set (spec clause 4.2.2.13 and 4.2.3): the values the
# parameters are drawn from.
REGIONS = ("AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST")
# N_NAME -> N_REGIONKEY (clause 4.2.3), in N_NATIONKEY order 0..24.
NATIONS: tuple[tuple[str, int], ...] = (
    ("ALGERIA", 0), ("ARGENTINA", 1), ("BRAZIL", 1), ("CANADA", 1), ("EGYPT", 4),
    ("ETHIOPIA", 0), ("FRANCE", 3), ("GERMANY", 3), ("INDIA", 2), ("INDONESIA", 2),
    ("IRAN", 4), ("IRAQ", 4), ("JAPAN", 2), ("JORDAN", 4), ("KENYA", 0),
    ("MOROCCO", 0), ("MOZAMBIQUE", 0), ("PERU", 1), ("CHINA", 2), ("ROMANIA", 3),
    ("SAUDI ARABIA", 4), ("VIETNAM", 2), ("RUSSIA", 3), ("UNITED KINGDOM", 3), ("UNITED STATES", 1),
)
SEGMENTS = ("AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY")
TYPE_SYLLABLE_1 = ("STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO")
TYPE_SYLLABLE_2 = ("ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED")
TYPE_SYLLABLE_3 = ("TIN", "NICKEL", "BRASS", "STEEL", "COPPER")
CONTAINER_SYLLABLE_1 = ("SM", "LG", "MED", "JUMBO", "WRAP")
CONTAINER_SYLLABLE_2 = ("CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM")
SHIP_MODES = ("REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB")
Q13_WORD_1 = ("special", "pending", "unusual", "express")
Q13_WORD_2 = ("packages", "requests", "accounts", "deposits")
# P_NAME words (clause 4.2.3, the 92 colours).
COLORS = (
    "almond", "antique", "aquamarine", "azure", "beige", "bisque", "black", "blanched", "blue",
    "blush", "brown", "burlywood", "burnished", "chartreuse", "chiffon", "chocolate", "coral",
    "cornflower", "cornsilk", "cream", "cyan", "dark", "deep", "dim", "dodger", "drab", "firebrick",
    "floral", "forest", "frosted", "gainsboro", "ghost", "goldenrod", "green", "grey", "honeydew",
    "hot", "indian", "ivory", "khaki", "lace", "lavender", "lawn", "lemon", "light", "lime", "linen",
    "magenta", "maroon", "medium", "metallic", "midnight", "mint", "misty", "moccasin", "navajo",
    "navy", "olive", "orange", "orchid", "pale", "papaya", "peach", "peru", "pink", "plum", "powder",
    "puff", "purple", "red", "rose", "rosy", "royal", "saddle", "salmon", "sandy", "seashell",
    "sienna", "sky", "slate", "smoke", "snow", "spring", "steel", "tan", "thistle", "tomato",
    "turquoise", "violet", "wheat", "white", "yellow",
)

Params = dict[str, str]


def _first_of_month(rng: random.Random, first: tuple[int, int], last: tuple[int, int]) -> str:
    """The first day of a month drawn uniformly from first..last (year, month)."""
    months = (last[0] - first[0]) * 12 + (last[1] - first[1])
    k = rng.randint(0, months)
    year, month = first[0] + (first[1] - 1 + k) // 12, (first[1] - 1 + k) % 12 + 1
    return f"{year:04d}-{month:02d}-01"


def _jan_first(rng: random.Random) -> str:
    return f"{rng.randint(1993, 1997)}-01-01"


def _brand(rng: random.Random) -> str:
    return f"Brand#{rng.randint(1, 5)}{rng.randint(1, 5)}"


def _nation(rng: random.Random) -> str:
    return rng.choice(NATIONS)[0]


def _q1(rng: random.Random, sf: float) -> Params:
    return {"DELTA": str(rng.randint(60, 120))}


def _q2(rng: random.Random, sf: float) -> Params:
    return {"SIZE": str(rng.randint(1, 50)), "TYPE": rng.choice(TYPE_SYLLABLE_3), "REGION": rng.choice(REGIONS)}


def _q3(rng: random.Random, sf: float) -> Params:
    return {"SEGMENT": rng.choice(SEGMENTS), "DATE": f"1995-03-{rng.randint(1, 31):02d}"}


def _q4(rng: random.Random, sf: float) -> Params:
    return {"DATE": _first_of_month(rng, (1993, 1), (1997, 10))}


def _q5(rng: random.Random, sf: float) -> Params:
    return {"REGION": rng.choice(REGIONS), "DATE": _jan_first(rng)}


def _q6(rng: random.Random, sf: float) -> Params:
    return {
        "DATE": _jan_first(rng),
        "DISCOUNT": f"0.0{rng.randint(2, 9)}",
        "QUANTITY": str(rng.randint(24, 25)),
    }


def _q7(rng: random.Random, sf: float) -> Params:
    n1, n2 = rng.sample(NATIONS, 2)
    return {"NATION1": n1[0], "NATION2": n2[0]}


def _q8(rng: random.Random, sf: float) -> Params:
    name, region = rng.choice(NATIONS)
    type_ = " ".join((rng.choice(TYPE_SYLLABLE_1), rng.choice(TYPE_SYLLABLE_2), rng.choice(TYPE_SYLLABLE_3)))
    return {"NATION": name, "REGION": REGIONS[region], "TYPE": type_}


def _q9(rng: random.Random, sf: float) -> Params:
    return {"COLOR": rng.choice(COLORS)}


def _q10(rng: random.Random, sf: float) -> Params:
    return {"DATE": _first_of_month(rng, (1993, 2), (1995, 1))}


def _q11(rng: random.Random, sf: float) -> Params:
    return {"NATION": _nation(rng), "FRACTION": _fraction(sf)}


def _fraction(sf: float) -> str:
    # Clause 2.4.11.3: FRACTION is 0.0001 / SF.
    return f"{0.0001 / sf:.10f}".rstrip("0")


def _q12(rng: random.Random, sf: float) -> Params:
    m1, m2 = rng.sample(SHIP_MODES, 2)
    return {"SHIPMODE1": m1, "SHIPMODE2": m2, "DATE": _jan_first(rng)}


def _q13(rng: random.Random, sf: float) -> Params:
    return {"WORD1": rng.choice(Q13_WORD_1), "WORD2": rng.choice(Q13_WORD_2)}


def _q14(rng: random.Random, sf: float) -> Params:
    return {"DATE": _first_of_month(rng, (1993, 1), (1997, 12))}


def _q15(rng: random.Random, sf: float) -> Params:
    return {"DATE": _first_of_month(rng, (1993, 1), (1997, 10))}


def _q16(rng: random.Random, sf: float) -> Params:
    sizes = rng.sample(range(1, 51), 8)
    params = {"BRAND": _brand(rng), "TYPE": f"{rng.choice(TYPE_SYLLABLE_1)} {rng.choice(TYPE_SYLLABLE_2)}"}
    params |= {f"SIZE{i + 1}": str(size) for i, size in enumerate(sizes)}
    return params


def _q17(rng: random.Random, sf: float) -> Params:
    return {"BRAND": _brand(rng), "CONTAINER": f"{rng.choice(CONTAINER_SYLLABLE_1)} {rng.choice(CONTAINER_SYLLABLE_2)}"}


def _q18(rng: random.Random, sf: float) -> Params:
    return {"QUANTITY": str(rng.randint(312, 315))}


def _q19(rng: random.Random, sf: float) -> Params:
    return {
        "QUANTITY1": str(rng.randint(1, 10)),
        "QUANTITY2": str(rng.randint(10, 20)),
        "QUANTITY3": str(rng.randint(20, 30)),
        "BRAND1": _brand(rng),
        "BRAND2": _brand(rng),
        "BRAND3": _brand(rng),
    }


def _q20(rng: random.Random, sf: float) -> Params:
    return {"COLOR": rng.choice(COLORS), "DATE": _jan_first(rng), "NATION": _nation(rng)}


def _q21(rng: random.Random, sf: float) -> Params:
    return {"NATION": _nation(rng)}


def _q22(rng: random.Random, sf: float) -> Params:
    # Clause 2.4.22.3: seven distinct country codes, from the 25 nation keys + 10.
    codes = rng.sample(range(10, 35), 7)
    return {f"I{i + 1}": str(code) for i, code in enumerate(codes)}


_PARAMETERS: dict[int, Callable[[random.Random, float], Params]] = {
    1: _q1, 2: _q2, 3: _q3, 4: _q4, 5: _q5, 6: _q6, 7: _q7, 8: _q8, 9: _q9, 10: _q10, 11: _q11,
    12: _q12, 13: _q13, 14: _q14, 15: _q15, 16: _q16, 17: _q17, 18: _q18, 19: _q19, 20: _q20,
    21: _q21, 22: _q22,
}

# Clause 2.4.N.4, "Query Validation": the parameters of the validation answers.
VALIDATION_PARAMETERS: dict[int, Params] = {
    1: {"DELTA": "90"},
    2: {"SIZE": "15", "TYPE": "BRASS", "REGION": "EUROPE"},
    3: {"SEGMENT": "BUILDING", "DATE": "1995-03-15"},
    4: {"DATE": "1993-07-01"},
    5: {"REGION": "ASIA", "DATE": "1994-01-01"},
    6: {"DATE": "1994-01-01", "DISCOUNT": "0.06", "QUANTITY": "24"},
    7: {"NATION1": "FRANCE", "NATION2": "GERMANY"},
    8: {"NATION": "BRAZIL", "REGION": "AMERICA", "TYPE": "ECONOMY ANODIZED STEEL"},
    9: {"COLOR": "green"},
    10: {"DATE": "1993-10-01"},
    11: {"NATION": "GERMANY", "FRACTION": "0.0001"},
    12: {"SHIPMODE1": "MAIL", "SHIPMODE2": "SHIP", "DATE": "1994-01-01"},
    13: {"WORD1": "special", "WORD2": "requests"},
    14: {"DATE": "1995-09-01"},
    15: {"DATE": "1996-01-01"},
    16: {"BRAND": "Brand#45", "TYPE": "MEDIUM POLISHED",
         **{f"SIZE{i + 1}": str(s) for i, s in enumerate((49, 14, 23, 45, 19, 3, 36, 9))}},
    17: {"BRAND": "Brand#23", "CONTAINER": "MED BOX"},
    18: {"QUANTITY": "300"},
    19: {"QUANTITY1": "1", "QUANTITY2": "10", "QUANTITY3": "20",
         "BRAND1": "Brand#12", "BRAND2": "Brand#23", "BRAND3": "Brand#34"},
    20: {"COLOR": "forest", "DATE": "1994-01-01", "NATION": "CANADA"},
    21: {"NATION": "SAUDI ARABIA"},
    22: {f"I{i + 1}": str(c) for i, c in enumerate((13, 31, 23, 29, 30, 18, 17))},
}


@dataclass(frozen=True)
class StreamQuery:
    """One query of a stream: its place, number, parameters and text as run."""

    stream: int
    seq: int
    number: int
    params: Params
    text: str

    @property
    def name(self) -> str:
        return f"Q{self.number}"


@cache
def template(number: int, dialect: str) -> string.Template:
    """The query's text with ${NAME} placeholders; a dialect may override a
    query with qNN.<dialect>.sql (the 22 texts run as written on PostgreSQL
    and DuckDB; MySQL's dialect has its own Q13)."""
    base = resources.files("perflab.workloads.tpch") / "queries"
    override = base / f"q{number:02d}.{dialect}.sql"
    source = override if override.is_file() else base / f"q{number:02d}.sql"
    return string.Template(source.read_text())


def render(number: int, params: Params, dialect: str) -> str:
    return template(number, dialect).substitute(params)


def stream_seed(base_seed: int, stream: int) -> int:
    return base_seed + stream


def query_order(stream: int) -> tuple[int, ...]:
    return QUERY_ORDER[stream % len(QUERY_ORDER)]


def stream_queries(
    stream: int,
    base_seed: int,
    scale_factor: float,
    dialect: str,
    validation: bool = False,
    only: tuple[int, ...] | None = None,
) -> list[StreamQuery]:
    """The queries of stream `stream` in Appendix A order, parameters drawn
    in that order from the stream's own generator (as qgen draws them)."""
    rng = random.Random(stream_seed(base_seed, stream))
    out = []
    for seq, number in enumerate(query_order(stream), start=1):
        params = VALIDATION_PARAMETERS[number] if validation else _PARAMETERS[number](rng, scale_factor)
        if only is not None and number not in only:
            continue
        out.append(StreamQuery(stream, seq, number, params, render(number, params, dialect)))
    return out


def default_seed(load_end: dt.datetime) -> int:
    """The spec's default base seed: the end of the load test as mmddhhmmss."""
    return int(load_end.strftime("%m%d%H%M%S"))
