"""The Star Schema Benchmark's 13 queries in four flights (SSB specification
Revision 3, section 3.1; O'Neil, O'Neil, Chen, Revilak, TPCTC 2009), their
standard parameters, and randomized parameters within each flight's domain.

Randomized parameters (`params = "random"`) are drawn per query from a
generator seeded with `seed + round`, within the domain the specification
gives each flight, keeping each query's selectivity near the standard one:

- Flight 1 (restriction on the fact table): the year (Q1.1) is one of
  1992..1997, the month of Q1.2 any month of 1992..1997, the week of Q1.3
  one of 1..52; the discount range is d..d+2 with d in 1..8 (standard 1, 4, 5);
  the quantity bound of Q1.1 is 25 ± 5, Q1.2's and Q1.3's range q..q+9 with q
  in 1..41 (standard 26).
- Flight 2 (part and supplier): a category MFGR#mn (m, n in 1..5) and a
  region (Q2.1); a range of 8 brands of a category (Q2.2); one brand (Q2.3).
- Flight 3 (customer, supplier, time): one region (Q3.1), one nation (Q3.2),
  two cities of one nation (Q3.3, Q3.4); a six-year range starting in 1992 or
  1993 (Q3.1-Q3.3) or one month (Q3.4).
- Flight 4 (profit): a region and two adjacent manufacturers (Q4.1), two
  adjacent years (Q4.2, Q4.3), a nation of the region and a category (Q4.3).
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

NAMES = ("Q1.1", "Q1.2", "Q1.3", "Q2.1", "Q2.2", "Q2.3", "Q3.1", "Q3.2", "Q3.3", "Q3.4", "Q4.1", "Q4.2", "Q4.3")

_FLIGHT_2 = """select sum(lo_revenue) as revenue, d_year, p_brand1
from lineorder, date, part, supplier
where lo_orderdate = d_datekey and lo_partkey = p_partkey and lo_suppkey = s_suppkey
  and {part} and s_region = '${REGION}'
group by d_year, p_brand1
order by d_year, p_brand1"""

_FLIGHT_3 = """select c_{level}, s_{level}, d_year, sum(lo_revenue) as revenue
from customer, lineorder, supplier, date
where lo_custkey = c_custkey and lo_suppkey = s_suppkey and lo_orderdate = d_datekey
  and {where}
group by c_{level}, s_{level}, d_year
order by d_year asc, revenue desc"""

_CITIES = ("(c_city = '${CITY1}' or c_city = '${CITY2}') and (s_city = '${CITY1}' or s_city = '${CITY2}')")



def _fill(template: str, **parts: str) -> str:
    """A flight's shared text with its {part}s filled in (str.format would
    take the ${PARAMETER} placeholders for fields)."""
    for key, value in parts.items():
        template = template.replace("{" + key + "}", value)
    return template


TEMPLATES: dict[str, str] = {
    "Q1.1": """select sum(lo_extendedprice * lo_discount) as revenue
from lineorder, date
where lo_orderdate = d_datekey and d_year = ${YEAR}
  and lo_discount between ${DLO} and ${DHI} and lo_quantity < ${QUANTITY}""",
    "Q1.2": """select sum(lo_extendedprice * lo_discount) as revenue
from lineorder, date
where lo_orderdate = d_datekey and d_yearmonthnum = ${YEARMONTHNUM}
  and lo_discount between ${DLO} and ${DHI} and lo_quantity between ${QLO} and ${QHI}""",
    "Q1.3": """select sum(lo_extendedprice * lo_discount) as revenue
from lineorder, date
where lo_orderdate = d_datekey and d_weeknuminyear = ${WEEK} and d_year = ${YEAR}
  and lo_discount between ${DLO} and ${DHI} and lo_quantity between ${QLO} and ${QHI}""",
    "Q2.1": _fill(_FLIGHT_2, part="p_category = '${CATEGORY}'"),
    "Q2.2": _fill(_FLIGHT_2, part="p_brand1 between '${BRAND1}' and '${BRAND2}'"),
    "Q2.3": _fill(_FLIGHT_2, part="p_brand1 = '${BRAND1}'"),
    "Q3.1": _fill(_FLIGHT_3, level="nation", where="c_region = '${REGION}' and s_region = '${REGION}'\n"
                             "  and d_year >= ${YEAR1} and d_year <= ${YEAR2}"),
    "Q3.2": _fill(_FLIGHT_3, level="city", where="c_nation = '${NATION}' and s_nation = '${NATION}'\n"
                             "  and d_year >= ${YEAR1} and d_year <= ${YEAR2}"),
    "Q3.3": _fill(_FLIGHT_3, level="city", where=_CITIES + "\n  and d_year >= ${YEAR1} and d_year <= ${YEAR2}"),
    "Q3.4": _fill(_FLIGHT_3, level="city", where=_CITIES + "\n  and d_yearmonth = '${YEARMONTH}'"),
    "Q4.1": """select d_year, c_nation, sum(lo_revenue - lo_supplycost) as profit
from date, customer, supplier, part, lineorder
where lo_custkey = c_custkey and lo_suppkey = s_suppkey and lo_partkey = p_partkey and lo_orderdate = d_datekey
  and c_region = '${REGION}' and s_region = '${REGION}' and (p_mfgr = '${MFGR1}' or p_mfgr = '${MFGR2}')
group by d_year, c_nation
order by d_year, c_nation""",
    "Q4.2": """select d_year, s_nation, p_category, sum(lo_revenue - lo_supplycost) as profit
from date, customer, supplier, part, lineorder
where lo_custkey = c_custkey and lo_suppkey = s_suppkey and lo_partkey = p_partkey and lo_orderdate = d_datekey
  and c_region = '${REGION}' and s_region = '${REGION}' and (d_year = ${YEAR1} or d_year = ${YEAR2})
  and (p_mfgr = '${MFGR1}' or p_mfgr = '${MFGR2}')
group by d_year, s_nation, p_category
order by d_year, s_nation, p_category""",
    "Q4.3": """select d_year, s_city, p_brand1, sum(lo_revenue - lo_supplycost) as profit
from date, customer, supplier, part, lineorder
where lo_custkey = c_custkey and lo_suppkey = s_suppkey and lo_partkey = p_partkey and lo_orderdate = d_datekey
  and c_region = '${REGION}' and s_nation = '${NATION}' and (d_year = ${YEAR1} or d_year = ${YEAR2})
  and p_category = '${CATEGORY}'
group by d_year, s_city, p_brand1
order by d_year, s_city, p_brand1""",
}

# The specification's parameters (section 3.1).
STANDARD: dict[str, dict[str, str]] = {
    "Q1.1": {"YEAR": "1993", "DLO": "1", "DHI": "3", "QUANTITY": "25"},
    "Q1.2": {"YEARMONTHNUM": "199401", "DLO": "4", "DHI": "6", "QLO": "26", "QHI": "35"},
    "Q1.3": {"WEEK": "6", "YEAR": "1994", "DLO": "5", "DHI": "7", "QLO": "26", "QHI": "35"},
    "Q2.1": {"CATEGORY": "MFGR#12", "REGION": "AMERICA"},
    "Q2.2": {"BRAND1": "MFGR#2221", "BRAND2": "MFGR#2228", "REGION": "ASIA"},
    "Q2.3": {"BRAND1": "MFGR#2239", "REGION": "EUROPE"},
    "Q3.1": {"REGION": "ASIA", "YEAR1": "1992", "YEAR2": "1997"},
    "Q3.2": {"NATION": "UNITED STATES", "YEAR1": "1992", "YEAR2": "1997"},
    "Q3.3": {"CITY1": "UNITED KI1", "CITY2": "UNITED KI5", "YEAR1": "1992", "YEAR2": "1997"},
    "Q3.4": {"CITY1": "UNITED KI1", "CITY2": "UNITED KI5", "YEARMONTH": "Dec1997"},
    "Q4.1": {"REGION": "AMERICA", "MFGR1": "MFGR#1", "MFGR2": "MFGR#2"},
    "Q4.2": {"REGION": "AMERICA", "YEAR1": "1997", "YEAR2": "1998", "MFGR1": "MFGR#1", "MFGR2": "MFGR#2"},
    "Q4.3": {"REGION": "AMERICA", "NATION": "UNITED STATES", "YEAR1": "1997", "YEAR2": "1998",
             "CATEGORY": "MFGR#14"},
}

# TPC-H's nations and their regions (the generator's, crates/engine/src/ssb).
NATIONS: dict[str, str] = {
    "ALGERIA": "AFRICA", "ARGENTINA": "AMERICA", "BRAZIL": "AMERICA", "CANADA": "AMERICA",
    "EGYPT": "MIDDLE EAST", "ETHIOPIA": "AFRICA", "FRANCE": "EUROPE", "GERMANY": "EUROPE", "INDIA": "ASIA",
    "INDONESIA": "ASIA", "IRAN": "MIDDLE EAST", "IRAQ": "MIDDLE EAST", "JAPAN": "ASIA",
    "JORDAN": "MIDDLE EAST", "KENYA": "AFRICA", "MOROCCO": "AFRICA", "MOZAMBIQUE": "AFRICA",
    "PERU": "AMERICA", "CHINA": "ASIA", "ROMANIA": "EUROPE", "SAUDI ARABIA": "MIDDLE EAST",
    "VIETNAM": "ASIA", "RUSSIA": "EUROPE", "UNITED KINGDOM": "EUROPE", "UNITED STATES": "AMERICA",
}
REGIONS = sorted(set(NATIONS.values()))
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def city(nation: str, digit: int) -> str:
    """SSB's city: the nation's name cut or padded to 9 characters, and a digit."""
    return f"{nation[:9]:<9}{digit}"


def _discount(rng: random.Random) -> dict[str, str]:
    low = rng.randint(1, 8)
    return {"DLO": str(low), "DHI": str(low + 2)}


def _quantity(rng: random.Random) -> dict[str, str]:
    low = rng.randint(1, 41)
    return {"QLO": str(low), "QHI": str(low + 9)}


def _category(rng: random.Random) -> tuple[int, int]:
    return rng.randint(1, 5), rng.randint(1, 5)


def _cities(rng: random.Random) -> dict[str, str]:
    nation = rng.choice(sorted(NATIONS))
    first, second = rng.sample(range(10), 2)
    return {"CITY1": city(nation, first), "CITY2": city(nation, second)}


def _years(rng: random.Random, span: int) -> dict[str, str]:
    first = rng.randint(1992, 1998 - span)
    return {"YEAR1": str(first), "YEAR2": str(first + span)}


def random_params(name: str, rng: random.Random) -> dict[str, str]:
    """Parameters of query `name` drawn within its flight's domain."""
    if name == "Q1.1":
        return {"YEAR": str(rng.randint(1992, 1997)), **_discount(rng), "QUANTITY": str(rng.randint(20, 30))}
    if name == "Q1.2":
        return {"YEARMONTHNUM": f"{rng.randint(1992, 1997)}{rng.randint(1, 12):02d}", **_discount(rng),
                **_quantity(rng)}
    if name == "Q1.3":
        return {"WEEK": str(rng.randint(1, 52)), "YEAR": str(rng.randint(1992, 1997)), **_discount(rng),
                **_quantity(rng)}
    if name == "Q2.1":
        m, n = _category(rng)
        return {"CATEGORY": f"MFGR#{m}{n}", "REGION": rng.choice(REGIONS)}
    if name == "Q2.2":
        m, n = _category(rng)
        first = rng.randint(1, 33)
        return {"BRAND1": f"MFGR#{m}{n}{first}", "BRAND2": f"MFGR#{m}{n}{first + 7}", "REGION": rng.choice(REGIONS)}
    if name == "Q2.3":
        m, n = _category(rng)
        return {"BRAND1": f"MFGR#{m}{n}{rng.randint(1, 40)}", "REGION": rng.choice(REGIONS)}
    if name == "Q3.1":
        return {"REGION": rng.choice(REGIONS), **_years(rng, 5)}
    if name == "Q3.2":
        return {"NATION": rng.choice(sorted(NATIONS)), **_years(rng, 5)}
    if name == "Q3.3":
        return {**_cities(rng), **_years(rng, 5)}
    if name == "Q3.4":
        return {**_cities(rng), "YEARMONTH": f"{rng.choice(MONTHS)}{rng.randint(1992, 1997)}"}
    mfgr = rng.randint(1, 4)
    region = rng.choice(REGIONS)
    if name == "Q4.1":
        return {"REGION": region, "MFGR1": f"MFGR#{mfgr}", "MFGR2": f"MFGR#{mfgr + 1}"}
    if name == "Q4.2":
        return {"REGION": region, **_years(rng, 1), "MFGR1": f"MFGR#{mfgr}", "MFGR2": f"MFGR#{mfgr + 1}"}
    if name == "Q4.3":
        m, n = _category(rng)
        nation = rng.choice(sorted(k for k, v in NATIONS.items() if v == region))
        return {"REGION": region, "NATION": nation, **_years(rng, 1), "CATEGORY": f"MFGR#{m}{n}"}
    raise ValueError(f"{name!r} is not an SSB query; allowed: {', '.join(NAMES)}")


@dataclass(frozen=True)
class SsbQuery:
    """One query of a round: its place, name, parameters and text as run."""

    stream: int
    seq: int
    name: str
    params: dict[str, str]
    text: str


def round_queries(round_: int, randomized: bool, seed: int, only: tuple[str, ...] | None = None) -> list[SsbQuery]:
    """The 13 queries in flight order (or `only` those), for round `round_`
    (stored as its stream): the standard parameters, or drawn from a generator
    seeded with seed + round."""
    rng = random.Random(seed + round_)
    out = []
    for seq, name in enumerate(NAMES, start=1):
        params = random_params(name, rng) if randomized else STANDARD[name]
        if only is not None and name not in only:
            continue
        out.append(SsbQuery(round_, seq, name, params, string.Template(TEMPLATES[name]).substitute(params)))
    return out
