"""Units as experiment files write them. Durations parse in the engine (one
implementation for Rust and Python); sizes here."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

from pydantic import BeforeValidator

# One rule for every duration in an experiment file, said the same way in
# every refusal: a bare number is seconds (as pgbench's -T and BenchBase's
# <time>), a string carries a unit.
DURATION_ALLOWED = (
    'allowed: a number of seconds (60, 2.5) or a string with a unit of us, ms, s, m, h or d '
    '("250ms", "60s", "1h30m")'
)


def parse_duration_s(value: Any) -> float:
    """Seconds in "90s", "1h30m", "250ms", or a bare number of seconds."""
    from perflab import _engine

    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    if isinstance(value, str):
        try:
            return float(_engine.parse_duration_s(value))
        except ValueError:
            pass
    shown = json.dumps(value) if isinstance(value, (str, bool, int, float)) else repr(value)
    raise ValueError(f"{shown} is not a duration; {DURATION_ALLOWED}")


def _duration(value: Any) -> float:
    return parse_duration_s(value)


# A duration field: accepts "60s", "1h30m", 60, 2.5; holds seconds as float.
Duration = Annotated[float, BeforeValidator(_duration)]


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s"
    minutes, s = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{s:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
