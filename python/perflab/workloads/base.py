"""The Workload interface: data set, load phase, run phase, checks, metrics."""

from __future__ import annotations

import abc
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from perflab.model import CheckResult, LoadResult, RunResult
from perflab.settings_model import StrictModel
from perflab.targets.base import Endpoint

if TYPE_CHECKING:
    from perflab.report.section import Section
    from perflab.store import Store


class WorkloadSettings(StrictModel):
    kind: str


class SeriesSink(abc.ABC):
    """Where live series go as they are sampled (batched into the store)."""

    @abc.abstractmethod
    def add(self, source: str, name: str, t: float, value: float) -> None: ...


class NullSink(SeriesSink):
    def add(self, source: str, name: str, t: float, value: float) -> None:
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
    warn: Callable[[str], None] = lambda text: None
    # The measured window on the run's clock, set by the workload when its
    # warm-up ends and when it stops measuring; everything outside it (warm-up,
    # connection set-up, checks) is excluded from figures. The runner records
    # both as events ("measure-start", "measure-end") for the report.
    measure_start_s: float | None = None
    measure_end_s: float | None = None

    def now_s(self) -> float:
        return (time.monotonic_ns() - self.t0_ns) / 1e9


class Workload(abc.ABC):
    Settings: ClassVar[type[WorkloadSettings]]
    # Settings fields that define the data set: prepared data is reused across
    # runs while these (and the target) are unchanged.
    data_fields: ClassVar[tuple[str, ...]] = ()
    # Target dialects this workload can drive.
    dialects: ClassVar[tuple[str, ...]] = ("postgres",)
    # Headline metric names, in the order `show` and the progress line print them.
    headline: ClassVar[tuple[str, ...]] = ()

    def __init__(self, settings: Any) -> None:
        self.settings = settings

    def data_key(self) -> str:
        return json.dumps(
            {"kind": self.settings.kind} | {f: getattr(self.settings, f) for f in self.data_fields},
            sort_keys=True,
            default=str,
        )

    @classmethod
    def preflight(cls, settings: Any, base_dir: Path) -> list[tuple[str, str]]:
        """Problems (dotted path, text) the workload would meet, found without
        starting anything (files it names that cannot be read, relative to
        `base_dir`, the experiment file's directory). Default: none."""
        return []

    def writes(self) -> bool:
        """Whether this workload writes to the target (then an external target
        needs allow_destructive = true)."""
        return True

    @abc.abstractmethod
    def prepare(self, endpoint: Endpoint, ctx: RunContext) -> LoadResult:
        """Create and load the data set (the timed load test)."""

    @abc.abstractmethod
    def run(self, endpoint: Endpoint, ctx: RunContext) -> RunResult:
        """Drive the target for one run."""

    def check(self, endpoint: Endpoint, ctx: RunContext) -> CheckResult:
        """Consistency checks after a run. Default: none."""
        return CheckResult()

    @classmethod
    def report_sections(cls, store: Store, runs: list[dict[str, Any]]) -> list[Section]:
        """Sections this workload adds to the report (TPC-H: per-query bars per
        stream; TPC-B: TPS and latency), built from the store only. `runs` are
        the run rows (Store.runs()) of this workload, every status. Default: none."""
        return []
