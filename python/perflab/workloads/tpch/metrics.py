"""TPC-H's reported metrics, computed from timed intervals only.

References are to the TPC-H specification, revision 3.0.1, clause 5.4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

QUERIES_PER_STREAM = 22
# Clause 5.4.1.4: when the longest power-test interval is more than 1000 times
# the shortest, intervals below longest/1000 are raised to longest/1000.
POWER_INTERVAL_RATIO_CAP = 1000.0

# Clause 5.3.4, "the minimum required number of streams" for a throughput test.
MIN_STREAMS = ((1, 2), (10, 3), (30, 4), (100, 5), (300, 6), (1000, 7), (3000, 8), (10000, 9),
               (30000, 10), (100000, 11))


def min_streams(scale_factor: float) -> int:
    """The spec's minimum number of query streams at `scale_factor`; scale
    factors below 1 (not valid for a reported result) use SF 1's."""
    streams = MIN_STREAMS[0][1]
    for sf, s in MIN_STREAMS:
        if scale_factor >= sf:
            streams = s
    return streams


def adjusted_power_intervals(intervals_s: Sequence[float]) -> list[float]:
    """Clause 5.4.1.4's floor on the power test's intervals."""
    longest = max(intervals_s)
    floor = longest / POWER_INTERVAL_RATIO_CAP
    return [max(t, floor) for t in intervals_s]


def power_at_size(query_s: Sequence[float], refresh_s: Sequence[float], scale_factor: float) -> float:
    """Clause 5.4.1: Power@Size = 3600 * SF / (prod QI(i,0) * prod RI(j,0))^(1/24),
    over the 22 query intervals and the 2 refresh intervals of the power test,
    in seconds."""
    if len(query_s) != QUERIES_PER_STREAM or len(refresh_s) != 2:
        raise ValueError("Power@Size needs the 22 query and the 2 refresh function intervals")
    intervals = adjusted_power_intervals([*query_s, *refresh_s])
    if min(intervals) <= 0:
        raise ValueError("a timing interval is zero")
    log_mean = sum(math.log(t) for t in intervals) / len(intervals)
    return 3600.0 * scale_factor / math.exp(log_mean)


def throughput_at_size(streams: int, interval_s: float, scale_factor: float) -> float:
    """Clause 5.4.2: Throughput@Size = (S * 22 * 3600 / Ts) * SF, Ts the
    throughput test's measurement interval in seconds."""
    return streams * QUERIES_PER_STREAM * 3600.0 / interval_s * scale_factor


def qphh_at_size(power: float, throughput: float) -> float:
    """Clause 5.4.3: QphH@Size, the geometric mean of Power@Size and Throughput@Size."""
    return math.sqrt(power * throughput)
