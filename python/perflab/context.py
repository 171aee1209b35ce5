"""What a run hands the code that measures it: the run's clock, its
directory, where live series go, and how to stop it.

Shared by workloads, collectors, the store and the runner; it sits below
all of them and imports none.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class SeriesSink(abc.ABC):
    """Where live series go as they are sampled (batched into the store)."""

    @abc.abstractmethod
    def add(self, source: str, name: str, t: float, value: float | None) -> None: ...


class NullSink(SeriesSink):
    def add(self, source: str, name: str, t: float, value: float | None) -> None:
        pass


@dataclass
class RunContext:
    """What a workload (and the collectors) get for one run.

    `t0_ns` is the run's origin on CLOCK_MONOTONIC (time.monotonic_ns()); every
    series timestamp is seconds since it, for driver and telemetry alike.
    """

    run_number: int
    run_dir: Path
    t0_ns: int
    # Relative paths in the experiment file are relative to its directory.
    base_dir: Path = field(default_factory=Path.cwd)
    series: SeriesSink = field(default_factory=NullSink)
    cancel: threading.Event = field(default_factory=threading.Event)
    status: Callable[[str], None] = lambda text: None
    # Each measured second of a harness run (an _engine.Interval, or a merged
    # one with its fields): `run --progress` prints them.
    second: Callable[[Any], None] = lambda interval: None
    warn: Callable[[str], None] = lambda text: None
    # One line the user should read, not a warning ("cache: added 1.2GB ...").
    note: Callable[[str], None] = lambda text: None
    # The measured window on the run's clock, set by the workload when its
    # warm-up ends and when it stops measuring; everything outside it (warm-up,
    # connection set-up, checks) is excluded from figures. The runner records
    # both as events ("measure-start", "measure-end") for the report.
    measure_start_s: float | None = None
    measure_end_s: float | None = None
    # Where the engine's harness runs ([driver]): a perflab.drivers.EngineDriver;
    # None: in this process (perflab.drivers.engine_run).
    driver: object | None = None
    # What earlier attempts of this run recorded they would change in the
    # target's data (the store's effect rows: {"attempt", "kind", "data"}), so
    # a run run again can first undo what a killed or failed attempt did.
    earlier_effects: list[dict[str, Any]] = field(default_factory=list)
    # Records what this attempt is about to change (kind, data), committed
    # before the change is made; the runner stores it.
    record_effect: Callable[[str, dict[str, Any]], None] = lambda kind, data: None
    # Each query's record (a model.QueryTime) as it completes: the runner
    # stores it at once, so a run killed on day 2 of 3 keeps what it measured
    # (the run's final list replaces these when it ends).
    query_done: Callable[[Any], None] = lambda record: None

    def now_s(self) -> float:
        return (time.monotonic_ns() - self.t0_ns) / 1e9
