"""Units as experiment files write them. Durations parse in the engine (one
implementation for Rust and Python); sizes here."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator

# The longest duration an experiment file may give (a run, a warm-up, a
# timeout, an interval): 31 days. Durability runs last days, not months, and
# the engine holds durations as 64-bit nanoseconds and timers, which a
# larger value would overflow.
MAX_DURATION_S = 31 * 86400.0
DURATION_BOUND = "at most 31d (31 days)"


def parse_duration_s(value: Any) -> float:
    """Seconds in "90s", "1h30m", "250ms", or a bare number of seconds."""
    from perflab import _engine

    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; allowed: e.g. \"60s\", \"250ms\", \"1h30m\"")
    if isinstance(value, (int, float)):
        if value < 0 or value != value:
            raise ValueError(f"{value!r} is not a duration; allowed: a non-negative number of seconds")
        seconds = float(min(value, MAX_DURATION_S * 2))  # an int beyond a float's range compares exactly
    elif isinstance(value, str):
        seconds = float(_engine.parse_duration_s(value))
    else:
        raise ValueError(f"{value!r} is not a duration; allowed: e.g. \"60s\", \"250ms\", \"1h30m\"")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"got {value!r}; allowed: a duration of {DURATION_BOUND}")
    return seconds


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
