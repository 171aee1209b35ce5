"""RunResult: the one contract between measuring, storing and reporting.

Everything a run produces is a `RunResult`. Workloads fill it, collectors add
series, the store writes it whole when the run ends, and the report reads it
back from the store only. Every field is plain data so it serialises to JSON.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

# A factor level that leaves the setting at its default ("" for a wal_dir,
# say) is shown as this word, never as an empty cell or "wal_dir=".
DEFAULT_LEVEL = "default"


# A factor level that is a table may carry this key: its label in every
# table, figure, legend, `show` and `export`. It is removed before the level
# is applied (spec.set_path), so it never reaches the target's settings.
LABEL_KEY = "label"
# A level that is not a table carries a label as { value = ..., label = "..." }
# and applies as its value: how perflab names a server's bin_dir or version
# by the version it runs ("PostgreSQL 18.6"), and a file may write one too.
VALUE_KEY = "value"
# Leaf keys whose value says enough alone ("ext4 1GB", not "type=ext4 size=1GB").
VALUE_ONLY_KEYS = frozenset({"kind", "type", "size", "fs", "name", "version", "image"})

# A target's description (Target.describe(), stored with every run) says what
# was applied; two runs are one set-up only when their descriptions are equal.
# What is not part of the set-up is declared where the value is defined, under
# this key: the dotted keys (relative to the dict that holds the list; a key
# covers its subtree) of values perflab chose for itself (a pid, a port, a
# socket directory, a path it picked), timings, notes, and values that did
# not change what ran. Never a name pattern: a `wal_dir` the user gave is the
# set-up, the one perflab picked is not.
SETUP_IGNORES = "setup_ignores"


def not_setup(info: dict[str, Any], *keys: str) -> dict[str, Any]:
    """Declare `keys` of the description `info` as no part of the set-up
    (SETUP_IGNORES); returns `info`."""
    listed = info.setdefault(SETUP_IGNORES, [])
    listed += [k for k in keys if k not in listed]
    return info


def fmt_level(value: object) -> str:
    """A factor level as people read it, the one function every table, figure,
    legend, `show` and `export` uses: booleans as in the file, an empty or
    unset value as `default`, a table as its label (`level_labels` gives one
    to every table level when the file is loaded; a table stored without one
    reads as its leaves, key=value), never a Python repr."""
    if value is None or value == "":
        return DEFAULT_LEVEL
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        label = value.get(LABEL_KEY)
        if isinstance(label, str) and label.strip():
            return label
        return " ".join(_leaf_text(k, v, {}) for k, v in _leaves(without_label(value)).items()) or DEFAULT_LEVEL
    if isinstance(value, (list, tuple)):
        return ",".join(fmt_level(v) for v in value) or "[]"
    return str(value)


def without_label(value: Any) -> Any:
    """A level as it is applied: a table without its `label` key (a labelled
    value, its value)."""
    if labelled_value(value):
        return value[VALUE_KEY]
    if isinstance(value, dict) and LABEL_KEY in value:
        return {k: v for k, v in value.items() if k != LABEL_KEY}
    return value


def labelled_value(value: object) -> bool:
    """A level that is a value with a label: { value = ..., label = "..." }."""
    return isinstance(value, dict) and set(value) == {VALUE_KEY, LABEL_KEY}


def _leaves(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in value.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):  # an empty table sets nothing: no leaf
            out.update(_leaves(v, key))
        else:
            out[key] = v
    return out


def _short_paths(paths: list[str]) -> dict[str, str]:
    """Each path as its last component, or as many trailing components as it
    takes to tell the paths apart (`pg17/bin`, `pg18/bin`)."""
    distinct = list(dict.fromkeys(paths))
    parts = {p: [x for x in p.split("/") if x] or [p] for p in distinct}
    for n in range(1, max(len(v) for v in parts.values()) + 1):
        short = {p: "/".join(v[-n:]) for p, v in parts.items()}
        if len(set(short.values())) == len(distinct):
            return short
    return {p: p for p in distinct}


# Names a leaf by what it is rather than what it says ("PostgreSQL 18.6" for
# a bin_dir, "prefork" for an Apache target's settings.mpm), or None: given by
# the caller that can ask (spec, at load time). Its arguments: the leaf's key,
# its value, and the other leaves of its level ({} for a level that is a value).
LeafNamer = Callable[[str, Any, "dict[str, Any]"], "str | None"]


def _leaf_text(key: str, value: object, paths: dict[str, str], namer: LeafNamer | None = None,
               level: dict[str, Any] | None = None) -> str:
    name = key.rsplit(".", 1)[-1]
    named = namer(key, value, level or {}) if namer is not None else None
    if named:
        return named
    if isinstance(value, str) and "/" in value:
        return paths.get(value) or _short_paths([value])[value]
    text = fmt_level(value)
    return text if name in VALUE_ONLY_KEYS else f"{name}={text}"


def level_labels(levels: list[Any], namer: LeafNamer | None = None) -> list[str]:
    """The label of each level of one factor, in order. A table level's own
    `label` is kept; other table levels are named by what differs between the
    factor's table levels: only the leaf keys whose values differ, a value
    alone where its key says what it is (kind, type, size, ...), else
    key=value, paths shortened to the components that tell them apart
    ("ext4 1GB", "io_method=worker", "pg18/bin sendfile=off"). A factor with
    one table level, or levels that differ only in their labels, shows every
    leaf. `namer` may name a leaf by what it is (a server's version for its
    bin_dir). Other levels read as fmt_level says."""
    tables = [_leaves(without_label(v)) for v in levels if isinstance(v, dict) and not labelled_value(v)]
    keys = list(dict.fromkeys(k for t in tables for k in t))
    missing = object()

    def differs(key: str) -> bool:
        return len({repr(t.get(key, missing)) for t in tables}) > 1

    shown = [k for k in keys if differs(k)] or keys
    paths = {k: _short_paths([t[k] for t in tables if isinstance(t.get(k), str) and "/" in t[k]] or [""])
             for k in shown}
    # A value shown alone ("ext4 1GB") must still say which table it is in
    # when that table is missing from some levels (a WAL filesystem beside
    # the data's) or another table has the same key (data_fs.type and
    # wal_fs.type): "wal_fs ext4 1GB", never "ext4 ext4 1GB".
    parent = {k: k.rsplit(".", 1)[0] if "." in k else "" for k in shown}
    present = {p: all(any(k.startswith(p + ".") for k in t) for t in tables) for p in set(parent.values()) if p}
    alone = [k for k in shown if parent[k] and k.rsplit(".", 1)[-1] in VALUE_ONLY_KEYS]
    named = {k for k in alone if not present[parent[k]]}
    leaf_parents: dict[str, set[str]] = {}
    for k in alone:
        if k not in named:
            leaf_parents.setdefault(k.rsplit(".", 1)[-1], set()).add(parent[k])
    named |= {k for k in alone if len(leaf_parents.get(k.rsplit(".", 1)[-1], ())) > 1}
    labels = []
    for value in levels:
        own = value.get(LABEL_KEY) if isinstance(value, dict) else None
        if isinstance(own, str) and own.strip():
            labels.append(own)
        elif isinstance(value, dict):
            leaves = _leaves(without_label(value))
            chunks: list[str] = []
            last = None
            for k in shown:
                if k not in leaves:
                    continue
                text = _leaf_text(k, leaves[k], paths[k], namer, leaves)
                if k in named and parent[k] == last:
                    chunks[-1] += " " + text
                else:
                    chunks.append(f"{parent[k].rsplit('.', 1)[-1]} {text}" if k in named else text)
                last = parent[k] if k in named else None
            text = (", " if named else " ").join(chunks)
            if not text and leaves:  # it lacks the tables the others add: say so, not "default"
                text = ", ".join(f"no {p.rsplit('.', 1)[-1]}" for p in dict.fromkeys(parent[k] for k in named)
                                 if not any(x.startswith(p + ".") for x in leaves))
            labels.append(text or DEFAULT_LEVEL)
        else:
            labels.append(fmt_level(value))
    # two levels whose leaves print alike (1 and "1"): told apart by their place
    twice = {label for label in labels if labels.count(label) > 1}
    for i, label in enumerate(labels):
        if label in twice and isinstance(levels[i], dict) and not isinstance(levels[i].get(LABEL_KEY), str):
            labels[i] = f"{label} (level {i + 1})"
    return labels


def labelled_levels(levels: list[Any], namer: LeafNamer | None = None, path: str | None = None) -> list[Any]:
    """A factor's levels with each table level's `label` set (its own, else
    derived by level_labels): what the plan runs and the store keeps, so every
    reader shows one label through fmt_level. A value that `namer` names as
    the factor's `path` becomes a labelled value, where no two names are alike."""
    labels = level_labels(levels, namer)
    out = [{**without_label(v), LABEL_KEY: label} if isinstance(v, dict) and not labelled_value(v) else v
           for v, label in zip(levels, labels, strict=True)]
    if namer is None or path is None:
        return out
    names = [None if isinstance(v, dict) else namer(path, v, {}) for v in levels]
    return [{VALUE_KEY: v, LABEL_KEY: name} if name and names.count(name) == 1 else v
            for v, name in zip(out, names, strict=True)]


_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[Any, ...]:
    """A sort key that orders the numbers in names by value: Q2 before Q10,
    Q1.2 before Q1.10, q9.sql before q10.sql; case is ignored first."""
    parts = _DIGITS.split(str(name))
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in parts if p), str(name)


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
    # The server's cgroup memory limit bound during the run: its memory
    # (page cache counted) reached 90% of the limit, the limit was hit
    # (failcnt, memory.events max/high, OOM kills) or reclaim was counted
    # (hostrun.memory_bound).
    MEMORY_LIMITED = "memory-limited"
    # The kernel's OOM killer killed a process in the server's cgroup (its
    # target.resources.memory was reached): the run failed, naming it, with
    # the cgroup's figures as `resources.*` (hostctl.cgroups.oom_cause).
    OOM_KILLED = "oom-killed"
    # The transaction mix achieved is below its spec's minimums (TPC-C
    # clause 5.2.3: Payment 43%, Order-Status, Delivery, Stock-Level 4% each).
    MIX_BELOW_SPEC = "mix-below-spec"
    # An HTTP server ended its connection after most responses (Connection:
    # close or HTTP/1.0): each request paid a connect (workloads/http.py).
    SERVER_CLOSES = "server-closes"
    # Most of an HTTP server's responses were HTTP/1.0.
    HTTP10 = "http/1.0"
    # More than 1% of an HTTP run's requests failed (4xx, 5xx, timeouts,
    # resets, closes: workloads/http.py, its event names the classes).
    HTTP_ERRORS = "http-errors"
    # The driver ran in a network namespace over a shaped veth link
    # (driver.network): its latency includes the link's delay.
    SHAPED_LINK = "shaped-link"
    # The run's per-second rate never settled: MSER-5 put the end of its
    # warm-up in the second half of the measured window
    # (analysis.steady; workloads/harness.steady_window).
    NO_STEADY_STATE = "no-steady-state"
    # A closed-loop run had a second with no completions, or throughput below
    # a tenth of its median for more than a second (workloads/stalls.py):
    # its percentiles cannot show that; its events say where.
    STALLED = "stalled"
    # Processes neither perflab's nor the target's, and steal time, took more
    # than 5% of one core while the workload ran (collectors/hostnoise.py).
    NOISY_HOST = "noisy-host"
    # The CPUs perflab and the target's processes share were under 5% idle
    # while the workload ran (collectors/hostnoise.py).
    CPU_SATURATED = "cpu-saturated"
    # The run's mean power was below the idle power measured before it, so
    # its energy above idle is negative (collectors/energy.py).
    ENERGY_BELOW_IDLE = "energy-below-idle"
    # A hardware, firmware or cumulative counter read zero or did not advance
    # over the run where it must (RAPL, perf power events, a busy server's CPU
    # time): not a measurement; its figures fell back or were left out, and
    # the run's "counter-stalled" event says which counter and how.
    COUNTER_STALLED = "counter-stalled"

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
