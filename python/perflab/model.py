"""RunResult: the one contract between measuring, storing and reporting.

Everything a run produces is a `RunResult`. Workloads fill it, collectors add
series, the store writes it whole when the run ends, and the report reads it
back from the store only. Every field is plain data so it serialises to JSON.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

# A factor level that leaves the setting at its default ("" for a wal_dir,
# say) is shown as this word, never as an empty cell or "wal_dir=".
DEFAULT_LEVEL = "default"


def fmt_level(value: Any) -> str:
    """A factor level as people read it: booleans as in the file, an empty or
    unset value as `default`."""
    if value is None or value == "":
        return DEFAULT_LEVEL
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def fmt_factors(factors: dict[str, Any], sep: str = " ") -> str:
    """name=level for each factor (the last part of its path)."""
    return sep.join(f"{k.rsplit('.', 1)[-1]}={fmt_level(v)}" for k, v in factors.items())


@dataclass
class Metric:
    """One figure of a run. `higher_is_better` lets reports and comparisons
    say which way is good; `method` says how a figure was estimated rather
    than measured ("measured" when it was measured)."""

    name: str
    value: float
    unit: str
    description: str = ""
    higher_is_better: bool | None = None
    method: str = "measured"


@dataclass
class SeriesPoint:
    """One sample on the run's monotonic clock: `t` is seconds since the run's
    t0 (CLOCK_MONOTONIC), the same clock for driver and telemetry."""

    source: str
    name: str
    t: float
    value: float


@dataclass
class Histogram:
    """An HDR histogram, encoded by the engine (V2 compressed, base64-free bytes),
    mergeable across runs and drivers."""

    name: str
    unit: str
    encoding: str
    data: bytes


@dataclass
class QueryTime:
    """One statement or query execution: its stream, its place in the stream,
    its text as run, when it started and how long it took."""

    stream: int
    seq: int
    query: str
    seconds: float | None
    status: str = "ok"  # ok | error | timeout
    text: str | None = None
    error: str | None = None
    started_s: float | None = None  # on the run's clock (seconds since its t0)
    # Energy over [started_s, started_s + seconds], set by the energy collector:
    # by component (J), in total, above the idle baseline, and its source.
    energy: dict[str, float] | None = None
    energy_j: float | None = None
    energy_above_idle_j: float | None = None
    energy_source: str | None = None


@dataclass
class Event:
    t: float
    kind: str
    message: str


class Flag(str, Enum):
    """A short mark a report shows beside a run, defined once here; stored
    as its value. Compare against these members, never a free string."""

    # The driver, not the server, was the bottleneck (driver CPU above 0.8
    # of what its threads could use).
    CLIENT_BOUND = "client-bound"
    # Some clients lost their connection during the run.
    LOST_CONNECTIONS = "lost-connections"
    # A figure of the run is not valid by its spec's rules (TPC-H: a failed query).
    INVALID_METRICS = "invalid-metrics"
    # The server's data or WAL was on a filesystem over a loop device (a file
    # on another filesystem), not on a disk of its own.
    LOOP_BACKED = "loop-backed"
    # The server ran under a cgroup memory limit, which counts its page cache.
    MEMORY_LIMITED = "memory-limited"
    # The transaction mix achieved is below its spec's minimums (TPC-C
    # clause 5.2.3: Payment 43%, Order-Status, Delivery, Stock-Level 4% each).
    MIX_BELOW_SPEC = "mix-below-spec"
    # The driver ran in a network namespace over a shaped veth link
    # (driver.network): its latency includes the link's delay.
    SHAPED_LINK = "shaped-link"

    def __str__(self) -> str:
        return self.value


@dataclass
class RunResult:
    """What a run produced. `flags` are short machine-readable marks that
    reports show beside the run (`Flag`)."""

    metrics: dict[str, Metric] = field(default_factory=dict)
    series: list[SeriesPoint] = field(default_factory=list)
    histograms: list[Histogram] = field(default_factory=list)
    queries: list[QueryTime] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)
    headline: list[str] = field(default_factory=list)

    def add_metric(
        self,
        name: str,
        value: float,
        unit: str,
        description: str = "",
        higher_is_better: bool | None = None,
        method: str = "measured",
    ) -> Metric:
        m = Metric(name, float(value), unit, description, higher_is_better, method)
        self.metrics[name] = m
        return m

    def merge(self, other: RunResult) -> None:
        """Fold another partial result (a check, a collector) into this one."""
        self.metrics.update(other.metrics)
        self.series.extend(other.series)
        self.histograms.extend(other.histograms)
        self.queries.extend(other.queries)
        self.events.extend(other.events)
        for flag in other.flags:
            if flag not in self.flags:
                self.flags.append(flag)
        for name in other.headline:
            if name not in self.headline:
                self.headline.append(name)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for h in d["histograms"]:
            h["data"] = h["data"].hex()
        return d


@dataclass
class LoadResult:
    """The load phase (`Workload.prepare`): each step timed, as DBT-3 reports it.
    `steps` maps step name to seconds, in the order they ran."""

    steps: dict[str, float] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    reused: bool = False

    @property
    def total_s(self) -> float:
        return sum(self.steps.values())


@dataclass
class CheckResult:
    """Consistency checks after a run: name -> (passed, detail)."""

    checks: dict[str, tuple[bool, str]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(ok for ok, _ in self.checks.values())

    def add(self, name: str, passed: bool, detail: str = "") -> None:
        self.checks[name] = (passed, detail)
