"""The harness's per-second series as stored, and stalls named.

A second in which nothing completed has no latency: its latency figures are
stored as NULL (None), not 0, which would read as the fastest second of the
run. Under a rate (open loop) a stalled server shows as latency, measured
from each transaction's intended start; in closed loop the clients simply
wait, nothing completes and no percentile can show it. So a closed-loop run
is checked second by second: a second with no completions, or throughput
below STALL_FRACTION of the run's median for more than a second, flags the
run `stalled`, with an event naming those seconds and the longest gap.
"""

from __future__ import annotations

import statistics
from typing import Any

from perflab.model import Event, Flag, RunResult

# Throughput below this share of the run's median per-second throughput...
STALL_FRACTION = 0.1
# ...for more than this many consecutive seconds is a stall (a second with
# no completion at all is one by itself).
STALL_SECONDS = 1
# Figures that are means or percentiles over the second's completions.
LATENCY_FIELDS = ("latency_mean_ms", "latency_p99_ms", "latency_p50_ms")


def interval_value(interval: Any, name: str) -> float | None:
    """The stored value of one per-second field: None for a latency of a
    second with no completions, or a lag of a second with no scheduled start."""
    if name in LATENCY_FIELDS and not interval.transactions:
        return None
    if name == "lag_mean_ms" and not getattr(interval, "lag_count", 1):
        return None
    return float(getattr(interval, name))


class StallWatch:
    """Collects the measured seconds (warm-up excluded) of one run."""

    def __init__(self, closed_loop: bool) -> None:
        self.closed_loop = closed_loop
        self.seconds: list[tuple[float, float]] = []  # (end of the second on the run's clock, completions per s)

    def add(self, interval: Any) -> None:
        if not interval.warmup and interval.interval_s >= 0.5:  # a last partial second says little
            self.seconds.append((float(interval.t_s), interval.transactions / interval.interval_s))

    def annotate(self, result: RunResult) -> None:
        """Flag the run `stalled` and say where, when it stalled in closed loop."""
        if not self.closed_loop or len(self.seconds) < 3:
            return
        median = statistics.median(tps for _, tps in self.seconds)
        floor = STALL_FRACTION * median
        stretches: list[list[tuple[float, float]]] = []
        current: list[tuple[float, float]] = []
        for second in self.seconds:
            if second[1] == 0 or second[1] < floor:
                current.append(second)
            elif current:
                stretches.append(current)
                current = []
        if current:
            stretches.append(current)
        stalls = [s for s in stretches if any(tps == 0 for _, tps in s) or len(s) > STALL_SECONDS]
        if not stalls:
            return
        longest = max(stalls, key=len)
        where = "; ".join(f"{s[0][0] - 1:.0f}-{s[-1][0]:.0f} s" for s in stalls)
        if Flag.STALLED not in result.flags:
            result.flags.append(Flag.STALLED)
        result.add_metric("stall.longest_s", float(len(longest)), "s",
                          "longest stretch of seconds with no completions or below "
                          f"{STALL_FRACTION:.0%} of the median throughput", higher_is_better=False)
        result.events.append(Event(
            longest[0][0] - 1, Flag.STALLED.value,
            f"closed loop stalled: {sum(len(s) for s in stalls)} s with no completions or below "
            f"{STALL_FRACTION:.0%} of the median {median:.1f}/s (at {where} on the run's clock); the longest gap "
            f"{len(longest)} s from {longest[0][0] - 1:.0f} s. Closed-loop percentiles cannot show a stall "
            "(the clients wait): see max latency and the per-second throughput"))
