"""Units as experiment files write them. Durations parse in the engine (one
implementation for Rust and Python); sizes here."""

from __future__ import annotations

import json
import math
import numbers
from typing import Annotated

from pydantic import BeforeValidator, ValidationInfo, WithJsonSchema

# One rule for every duration in an experiment file, said the same way in
# every refusal: a string with its unit. A bare number (5000, "5000") is
# refused with the fix ("5000s"): a user who meant seconds can say so, and
# one who meant milliseconds is not given 83 minutes. Zero needs no unit.
DURATION_ALLOWED = 'allowed: a string with a unit of us, ms, s, m, h or d ("250ms", "60s", "1h30m")'
# What an editor is told (the JSON Schema of `perflab schema`): the engine's grammar.
DURATION_PATTERN = r"^\s*(0+(\.0*)?|([0-9]*\.?[0-9]+\s*(us|µs|ms|s|sec|m|min|h|d)\s*)+)$"
DURATION_SCHEMA = {"anyOf": [{"type": "string", "pattern": DURATION_PATTERN}, {"const": 0}],
                   "format": "duration"}
# The validation context under which a bare number is refused: an experiment
# file's (perflab.spec). Settings made in Python, and experiments stored before
# the rule (resumed, cleaned), take seconds as numbers still.
FILE_CONTEXT = {"file": True}
# The longest duration an experiment file may give (a run, a warm-up, a
# timeout, an interval): 31 days. Durability runs last days, not months, and
# the engine holds durations as 64-bit nanoseconds and timers, which a
# larger value would overflow.
MAX_DURATION_S = 31 * 86400.0
DURATION_BOUND = "at most 31d (31 days)"


def _bare_number(value: object) -> bool:
    """A duration given without a unit: 5000, 2.5 or "5000" (zero needs none)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return False
    return isinstance(value, int | float) and 0 < value < math.inf  # the rest is no duration at all


def parse_duration_s(value: object, bare_numbers: bool = True) -> float:
    """Seconds in "90s", "1h30m", "250ms"; a bare number is seconds only with
    `bare_numbers` (an experiment file's durations carry their unit)."""
    from perflab import _engine

    if not bare_numbers and _bare_number(value) and isinstance(value, int | float | str):
        if float(value) > MAX_DURATION_S:
            raise ValueError(f"got {value!r:.60}; allowed: a duration of {DURATION_BOUND}, with its unit")
        number = value.strip() if isinstance(value, str) else f"{value:.6f}".rstrip("0").rstrip(".")
        raise ValueError(f"got {json.dumps(value)[:60]}, a number without a unit; {DURATION_ALLOWED}; "
                       f"fix: \"{number}s\" if you meant seconds")
    seconds: float | None = None
    if isinstance(value, bool):
        pass  # true/false are no durations (bool is an int in Python)
    elif isinstance(value, int) and value >= 0:
        seconds = float(min(value, MAX_DURATION_S * 2))  # an int beyond a float's range compares exactly
    elif isinstance(value, float) and math.isfinite(value) and value >= 0:
        seconds = value
    elif isinstance(value, str):
        try:
            seconds = float(_engine.parse_duration_s(value))
        except ValueError:
            pass
    shown = json.dumps(value) if isinstance(value, (str, bool, int, float)) else repr(value)
    if seconds is None:
        raise ValueError(f"{shown[:60]} is not a duration; {DURATION_ALLOWED}")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"got {value!r:.60}; allowed: a duration of {DURATION_BOUND}")
    return seconds


def _duration(value: object, info: ValidationInfo) -> float:
    return parse_duration_s(value, bare_numbers=not (info.context or {}).get("file"))


# A duration field: accepts "60s", "1h30m" (and, outside an experiment file,
# 60 or 2.5 seconds); holds seconds as float.
Duration = Annotated[float, BeforeValidator(_duration), WithJsonSchema(DURATION_SCHEMA)]


# Sizes as experiment files write them: "2GB", "512MiB", "64kB", or a bare
# number of bytes. PostgreSQL's rule for kB/MB/GB/TB (powers of 1024, as
# postgresql.conf reads them), and the IEC names for the same.
_SIZE_UNITS = {"": 1, "b": 1, "kb": 2**10, "kib": 2**10, "k": 2**10, "mb": 2**20, "mib": 2**20, "m": 2**20,
               "gb": 2**30, "gib": 2**30, "g": 2**30, "tb": 2**40, "tib": 2**40, "t": 2**40}
SIZE_ALLOWED = 'allowed: a number of bytes or a string with a unit of B, kB, MB, GB or TB (powers of 1024: "512MB", "2GB")'
MAX_SIZE_BYTES = 2**50  # 1 PiB: past that a size is a typo


def parse_size_bytes(value: object) -> int:
    """Bytes in "2GB", "512MiB", "64kB" or a bare non-negative integer."""
    nbytes: float | None = None
    if isinstance(value, bool):
        pass
    elif isinstance(value, int) and value >= 0:
        nbytes = value
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        number = text.rstrip("kKmMgGtTiIbB")
        unit = text[len(number):].lower()
        try:
            n = float(number)
        except ValueError:
            n = math.nan
        if unit in _SIZE_UNITS and math.isfinite(n) and n >= 0:
            nbytes = n * _SIZE_UNITS[unit]
    shown = json.dumps(value) if isinstance(value, (str, bool, int, float)) else repr(value)
    if nbytes is None:
        raise ValueError(f"{shown[:60]} is not a size; {SIZE_ALLOWED}")
    if nbytes > MAX_SIZE_BYTES:
        raise ValueError(f"got {shown[:60]}; allowed: a size of at most 1 PB")
    return int(nbytes)


# What an editor is told of a size (the JSON Schema of `perflab schema`).
SIZE_SCHEMA = {"anyOf": [{"type": "integer", "minimum": 0},
                         {"type": "string", "pattern": r"^\s*[0-9]*\.?[0-9]+\s*([kKmMgGtT][iI]?[bB]?|[bB])?\s*$"}],
               "format": "size"}
# A size field: accepts "2GB", "512MB", 1048576; holds bytes as int.
Size = Annotated[int, BeforeValidator(parse_size_bytes), WithJsonSchema(SIZE_SCHEMA)]


def format_size(nbytes: float) -> str:
    for unit, factor in (("TB", 2**40), ("GB", 2**30), ("MB", 2**20), ("kB", 2**10)):
        if nbytes >= factor:
            return f"{nbytes / factor:.3g}{unit}"
    return f"{nbytes:.0f}B"


def format_number(value: object, digits: int = 4) -> str:
    """A number as people read it (the report, `show`, the study tables):
    thousands separated from 10^(digits-1), `digits` significant digits below;
    '–' for missing or not finite. numpy's scalars count as numbers."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    value = float(value)
    if not math.isfinite(value):
        return "–"
    if value == 0:
        return "0"
    if abs(value) >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def plural(n: int, word: str, words: str | None = None) -> str:
    """A count with its noun: "1 run", "3 runs" (`words`: an irregular plural)."""
    return f"{n} {word if n == 1 else words or word + 's'}"
