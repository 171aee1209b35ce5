"""The Collector interface: a sampler of telemetry during a run.

A collector samples on its own thread at its own interval, on the run's
monotonic clock, and pushes samples to the live series sink as it goes, so a
crash keeps what was sampled. It never blocks the driver.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from perflab.context import RunContext
from perflab.endpoints import Capability, Endpoint
from perflab.model import Event, Flag, Metric, RunResult
from perflab.section import RunGroup, Section
from perflab.settings_model import StrictModel
from perflab.targets.base import Target
from perflab.units import Duration

# Server processes that serve perflab's own sampling (pgstat's backend), so
# the process collector gives them the role "monitor", not "backend".
MONITOR_PIDS: set[int] = set()


# A shorter interval samples /proc and the server faster than either changes,
# and spends the CPU the run is measuring.
MIN_INTERVAL_S = 0.01


class CollectorOptions(StrictModel):
    """What every collector's settings are; one that samples has an interval (CollectorSettings)."""


class CollectorSettings(CollectorOptions):
    # Time between samples.
    interval: Duration = Field(default=1.0, ge=MIN_INTERVAL_S)


@dataclass
class CollectorContext:
    run: RunContext
    endpoint: Endpoint | None
    target: Target | None

    @property
    def run_dir(self) -> Path:
        return self.run.run_dir


@dataclass(frozen=True)
class PanelPart:
    """One series of a panel: its name in the store, its legend label, and
    the colour people read it in (None: matplotlib's next)."""

    name: str
    label: str
    colour: str | None = None


@dataclass(frozen=True)
class TelemetryPanel:
    """A panel of a run's telemetry figure, drawn from the collector's own
    series. The report draws what collectors declare here and names none.

    With `parts`, exactly those series; without, every series whose name
    matches `name_like` (SQL LIKE), labelled by `label_of`, the `top`
    largest by sum when set, series that stay at zero left out when
    `drop_zero`."""

    title: str
    ylabel: str
    parts: tuple[PanelPart, ...] = ()
    name_like: str = "%"
    label_of: Callable[[str], str] = str
    top: int | None = None
    drop_zero: bool = False
    stacked: bool = False
    # Stored values are divided by this before drawing (KiB -> GiB: 2**20).
    divisor: float = 1.0
    ymax: float | None = None


def counter_stalled(result: RunResult, collector: str, counters: list[str], seconds: float, must: str) -> None:
    """A cumulative counter that did not advance over the run where it must
    (`must` says why) is not a measurement: the caller leaves its figures
    out; this flags the run and names the counters (`collectors/energy.py`
    falls back to its model instead, and says so itself)."""
    if Flag.COUNTER_STALLED not in result.flags:
        result.flags.append(Flag.COUNTER_STALLED)
    result.events.append(Event(0.0, "counter-stalled", (
        f"{collector}: {', '.join(counters)} did not advance over the run ({seconds:.3g} s), though {must}: a "
        "counter that does not advance is not a measurement, so its figures are left out")))


class CollectorUnavailable(Exception):
    """This collector cannot work here (no permission, file missing, a server
    without the view): it is skipped with this reason, said once."""


class Collector(abc.ABC):
    Settings: ClassVar[type[CollectorOptions]] = CollectorSettings
    # Collectors on by default when an experiment has no [collect] table
    # (where the target provides what they need).
    default_on: ClassVar[bool] = False
    # What the collector needs of the target's endpoint; `perflab check`
    # refuses it on a target without (empty: it samples the host only).
    needs: ClassVar[frozenset[Capability]] = frozenset()
    # Panels this collector adds to each run's telemetry figure, in order.
    panels: ClassVar[tuple[TelemetryPanel, ...]] = ()

    @classmethod
    def report_sections(cls, groups: list[RunGroup]) -> list[Section]:
        """Sections this collector adds to the report's telemetry, from the
        stored metrics of each group of runs. Default: none."""
        return []

    def __init__(self, name: str, settings: CollectorOptions) -> None:
        self.name = name
        self.settings = settings

    @classmethod
    def preflight(cls, settings: Any, provided: frozenset[Capability]) -> str | None:
        """Why this collector would be skipped on a target whose endpoint
        provides `provided`, found without starting anything (a counter that
        cannot be read); None when it should work. `perflab check` says so as
        a warning; a run skips it as before. (A capability it `needs` and the
        target lacks is an error of check, not a warning.) Default: None."""
        return None

    @abc.abstractmethod
    def start(self, ctx: CollectorContext) -> None:
        """Begin sampling; raise CollectorUnavailable when it cannot work here."""

    @abc.abstractmethod
    def stop(self) -> RunResult:
        """Stop sampling; return summary metrics (series went to the sink)."""

    def derive(self, all_metrics: dict[str, Metric]) -> dict[str, Metric]:
        """Metrics derived from the run's merged metrics (the workload's and
        every collector's), e.g. joules per transaction. The runner calls it
        for each collector after merging; default: none."""
        return {}

    def annotate(self, result: RunResult) -> None:  # noqa: B027 - optional hook
        """Add what needs the workload's own records to the run's merged
        result, e.g. each query's energy over its interval. The runner calls
        it after `derive`; default: nothing."""


class SamplingCollector(Collector):
    """A collector that calls `sample()` every `interval` seconds on a thread.

    Subclasses implement `open(ctx)` (raise CollectorUnavailable if they can't
    work), `sample() -> dict[name, value]` and optionally `summary()`.
    Samples are timestamped on the run's clock at the moment reading starts;
    a rate is the delta since the previous sample over that interval, so its
    point at `t` covers the interval that ends at `t`. `tick_s()` may be
    shorter than the interval (pgstat samples wait events at 10 Hz and its
    views every second); `sample()` then returns {} on ticks with nothing due.
    A last sample is taken when the run stops (`self.stopping` is True then).
    The sampling thread's own CPU time is reported as `<name>.sampling_cpu_s`.
    """

    settings: CollectorSettings  # a sampling collector's have its interval

    def __init__(self, name: str, settings: CollectorSettings) -> None:
        super().__init__(name, settings)
        self._thread: threading.Thread | None = None
        # Stop is signalled by releasing a held lock: waiting on it with a
        # timeout costs the sampling thread about half the CPU of an
        # Event.wait per tick (measured on a 2-vCPU VM: ~45-80 us vs 60-140 us
        # per wake-up), and pgstat wakes ten times a second.
        self._stop_requested = False
        self._wake = threading.Lock()
        self._ctx: CollectorContext | None = None
        self.samples = 0
        self.errors: list[str] = []
        self.sampling_cpu_s = 0.0
        # True during the last sample, taken when the run stops
        self.stopping = False

    def open(self, ctx: CollectorContext) -> None:  # noqa: B027 - optional hook
        pass

    @abc.abstractmethod
    def sample(self) -> dict[str, float]: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        pass

    def summary(self) -> RunResult:
        return RunResult()

    def tick_s(self) -> float:
        """Seconds between calls of `sample()`; default: the interval."""
        return float(self.settings.interval)

    def start(self, ctx: CollectorContext) -> None:
        self._ctx = ctx
        try:
            self.open(ctx)
        except CollectorUnavailable:
            raise
        except Exception as exc:
            # telemetry must never fail a run: whatever stops a collector from
            # opening (an odd /sys, a refused query) skips it with the reason
            try:
                self.close()
            except Exception:
                pass
            raise CollectorUnavailable(f"could not start: {type(exc).__name__}: {exc}") from exc
        self._stop_requested = False
        self._wake = threading.Lock()
        self._wake.acquire()
        # The first sample (the baseline every rate and counter delta starts
        # from) is taken here, before start() returns: everything the caller
        # does after start() is inside the sampled span, however late the
        # thread is first scheduled on a busy machine.
        self.stopping = False
        cpu_start_s = time.thread_time()
        first_ns = time.monotonic_ns()
        self._tick(ctx.run)
        self.sampling_cpu_s = time.thread_time() - cpu_start_s
        self._thread = threading.Thread(target=self._loop, args=(first_ns,), name=f"collector-{self.name}",
                                        daemon=True)
        self._thread.start()

    def _loop(self, first_ns: int) -> None:
        assert self._ctx is not None
        ctx = self._ctx.run
        interval_ns = int(self.tick_s() * 1e9)
        next_ns = first_ns
        cpu_before_s = self.sampling_cpu_s
        cpu_start_s = time.thread_time()
        while not self._stop_requested:
            next_ns += interval_ns
            delay = (next_ns - time.monotonic_ns()) / 1e9
            if delay <= 0:  # fell behind: skip missed ticks rather than burst
                next_ns = time.monotonic_ns()
                if self._wake.acquire(blocking=False):
                    break
            elif self._wake.acquire(timeout=delay):
                break
            self._tick(ctx)
            self.sampling_cpu_s = cpu_before_s + time.thread_time() - cpu_start_s
        # one last sample at the moment of stopping, so the series and the
        # summaries cover the whole run, not up to the last whole interval
        self.stopping = True
        self._tick(ctx)
        self.sampling_cpu_s = cpu_before_s + time.thread_time() - cpu_start_s

    def _tick(self, ctx: RunContext) -> None:
        t = ctx.now_s()
        try:
            values = self.sample()
        except Exception as exc:  # a broken sample must never stop the run
            if len(self.errors) < 5:
                self.errors.append(f"{type(exc).__name__}: {exc}")
            values = {}
        for key, value in values.items():
            ctx.series.add(self.name, key, t, value)
        self.samples += 1

    def stop(self) -> RunResult:
        self._stop_requested = True
        if self._wake.locked():
            self._wake.release()
        if self._thread is not None:
            self._thread.join(timeout=10)
        try:
            self.close()
        finally:
            self._thread = None
        result = self.summary()
        result.add_metric(
            f"{self.name}.sampling_cpu_s",
            self.sampling_cpu_s,
            "s",
            f"CPU time of the {self.name} collector's sampling thread ({self.samples} ticks)",
            higher_is_better=False,
        )
        for err in self.errors:
            result.events.append(
                Event(0.0, "collector-error", f"{self.name}: {err}")
            )
        return result
