"""energy: joules and watts by component, measured by RAPL or perf, or
estimated by a labelled model; an idle baseline; each query's share.

Sources, in the order `source = "auto"` tries them; every stored figure says
which one made it (the metrics' method, the query table's energy_source):

- `rapl`: the Linux powercap interface to Intel/AMD RAPL
  (Documentation/power/powercap/powercap.rst). Zones intel-rapl:N are
  packages ("package-N"), their sub-zones intel-rapl:N:M "core", "uncore"
  and "dram", and intel-rapl:N "psys" the platform. Each has a cumulative
  `energy_uj` counter that wraps at `max_energy_range_uj`. Components:
  package, core, uncore, dram, psys; the total is package + dram (core and
  uncore are inside their package; psys covers the whole platform).
- `perf`: `perf stat -a -e power/energy-pkg/,...` where the kernel's `power`
  PMU has the events (/sys/bus/event_source/devices/power/events): the same
  RAPL counters read through perf_event_open, which needs no root when
  perf_event_paranoid allows it. Components as RAPL's (energy-pkg: package,
  energy-cores: core, energy-gpu: uncore, energy-ram: dram, energy-psys:
  psys); the total is package + dram.
- `model`, where neither exists, from what /proc says (the method spells out
  every coefficient):
  - cpu = n_cpus x (min_watts + (max_watts - min_watts) x u), u the busy
    share of all CPUs (/proc/stat; with `cpu_scope = "target"`, the CPU time
    of the target's processes, utime + stime from /proc/PID/stat, over all
    CPUs: on a shared host only the server's own use is counted above idle,
    and CPU of processes that ended between two samples is missed), with
    min/max watts per vCPU from Cloud
    Carbon Footprint's methodology, Appendix I (AWS averages: 0.74 W at 0%,
    3.5 W at 100%); SPECpower_ssj2008 results give a server's own figures
    (watts at active idle and at 100% over its threads): set
    min_watts_per_cpu and max_watts_per_cpu from them. With `tdp_watts`, the
    earlier model stands: Fan, Weber and Barroso, "Power provisioning for a
    warehouse-sized computer" (ISCA 2007), P = P_idle + (TDP - P_idle) x u,
    P_idle = idle_fraction x TDP;
  - dram = memory in use (MemTotal - MemAvailable, /proc/meminfo) x 0.392 W
    per GB (Cloud Carbon Footprint, Appendix I: 0.000392 kWh per GB-hour);
  - disk = bytes moved x disk_joules_per_byte + operations x
    disk_joules_per_op over the whole disks of /proc/diskstats. No published
    per-byte or per-operation figure is used: the defaults are perflab's
    assumption for a SATA SSD (about 2.5 W above idle while it moves 500 MB/s,
    5 nJ per byte; or serves 100,000 operations per second, 25 uJ each), and
    the method says "assumed". Set them for the disks at hand.

Idle baseline: before the run, the collector measures `idle_baseline`
seconds with nothing driven (the server up and idle) and stores the idle
power by component; energy is then reported in total and above idle.

Per query: every sample interval's power, on the run's clock, is shared out
among the queries running in it (equally among concurrent ones), by
component. A query's energy is the sum over its interval; the run's total is
the queries' sum plus what fell in the gaps between them. The resolution is
the sampling interval: set `interval` below the shortest query of interest.
"""

from __future__ import annotations

import bisect
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.collectors.base import (
    CollectorContext,
    CollectorUnavailable,
    SamplingCollector,
)
from perflab.collectors.energy_meters import (
    EnergySettings,
    Meter,
    ModelMeter,
    PerfMeter,
    RaplMeter,
    RaplZone,
    find_rapl_zones,
    parse_perf_interval_line,
    perf_power_events,
)
from perflab.context import RunContext
from perflab.endpoints import Capability
from perflab.model import Event, Flag, Metric, QueryTime, RunResult, SeriesPoint
from perflab.section import RunGroup, Section

__all__ = ["EnergyCollector", "EnergySettings", "Span", "parse_perf_interval_line", "per_work_metrics", "share_out"]



def per_work_metrics(metrics: dict[str, Metric], prefix: str = "energy") -> dict[str, Metric]:
    """Joules per transaction and per query from the run's merged metrics.

    Uses the workload's rate when it gives one ("tps", "qps": J/tx = W / tps,
    the steady-state figure), else its count ("transactions", "queries") over
    the collector's joules. The method is the energy's ("rapl" or the model).
    """
    joules = metrics.get(f"{prefix}.joules")
    watts = metrics.get(f"{prefix}.watts_mean")
    if joules is None or watts is None:
        return {}
    out: dict[str, Metric] = {}
    for unit_name, rate_name, count_name in (("transaction", "tps", "transactions"), ("query", "qps", "queries")):
        name = f"{prefix}.joules_per_{unit_name}"
        rate, count = metrics.get(rate_name), metrics.get(count_name)
        if rate is not None and rate.value > 0:
            value, how = watts.value / rate.value, f"mean watts / {rate_name}"
        elif count is not None and count.value > 0:
            value, how = joules.value / count.value, f"joules over the run / {count_name}"
        else:
            continue
        out[name] = Metric(name, value, "J", f"energy per {unit_name} ({how})", higher_is_better=False,
                           method=joules.method)
    return out


# ------------------------------------------------------------------ per query


@dataclass(frozen=True)
class Span:
    """Power by component over (t0, t1] on the run's clock."""

    t0: float
    t1: float
    watts: dict[str, float]


def share_out(spans: Sequence[Span], intervals: Sequence[tuple[float, float]], total_of: Sequence[str],
              idle_watts: dict[str, float] | None = None) -> list[tuple[dict[str, float], float | None]]:
    """Each interval's energy by component, and above idle (None without a
    baseline): the spans' power integrated over the interval, shared equally
    among the intervals that overlap at each moment."""
    points = sorted({p for s in spans for p in (s.t0, s.t1)} | {p for iv in intervals for p in iv})
    starts = [s.t0 for s in spans]
    order = sorted(range(len(intervals)), key=lambda i: intervals[i][0])
    out: list[dict[str, float]] = [{} for _ in intervals]
    above: list[float] = [0.0 for _ in intervals]
    active: list[int] = []
    nxt = 0
    for a, b in zip(points, points[1:], strict=False):
        while nxt < len(order) and intervals[order[nxt]][0] <= a:
            active.append(order[nxt])
            nxt += 1
        active = [i for i in active if intervals[i][1] > a]
        here = [i for i in active if intervals[i][0] <= a and intervals[i][1] >= b]
        if not here:
            continue
        k = bisect.bisect_right(starts, a) - 1
        if k < 0 or spans[k].t1 < b:
            continue  # outside every span: no power known there
        span = spans[k]
        share = (b - a) / len(here)
        total_w = sum(span.watts.get(c, 0.0) for c in total_of)
        idle_w = sum((idle_watts or {}).get(c, 0.0) for c in total_of)
        for i in here:
            for c, w in span.watts.items():
                out[i][c] = out[i].get(c, 0.0) + w * share
            above[i] += (total_w - idle_w) * share
    return [(e, above[i] if idle_watts is not None else None) for i, e in enumerate(out)]


# ------------------------------------------------------------------ the collector


def _read_rapl(s: EnergySettings) -> tuple[list[RaplZone], str | None, bool]:
    """The RAPL zones; why they cannot be counted (None if they can); and
    whether that is for want of permission."""
    try:
        zones = find_rapl_zones(Path(s.rapl_root))
    except PermissionError as exc:
        return [], f"RAPL counters are not readable ({exc.filename}): run as root to measure energy", True
    except (OSError, ValueError) as exc:
        return [], f"RAPL not readable under {s.rapl_root}: {exc}", False
    if not any(z.counted for z in zones):
        return zones, f"no RAPL package zone under {s.rapl_root}; use source = \"model\"", False
    return zones, None, False


def _perf_reason(s: EnergySettings) -> str | None:
    if shutil.which("perf") is None:
        return "perf is not installed"
    if not perf_power_events(Path(s.perf_events)):
        return f"the kernel's power PMU has no energy events ({s.perf_events} is missing)"
    return None


@dataclass
class _Track:
    """One meter over a run: its power by component in spans on the run's
    clock, its joules by label, its idle baseline, and its energy inside the
    measured window."""

    meter: Meter
    last: Any = None
    first_t_ns: int = 0
    last_t_ns: int = 0
    spans: list[Span] = field(default_factory=list)
    joules: dict[str, float] = field(default_factory=dict)
    measured_j: float = 0.0
    measured_s: float = 0.0
    idle_watts: dict[str, float] | None = None
    idle_label_watts: dict[str, float] = field(default_factory=dict)
    idle_s: float = 0.0

    def by_component(self, watts: dict[str, float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for label, w in watts.items():
            c = self.meter.component(label)
            out[c] = out.get(c, 0.0) + w
        return out

    def total(self, components: dict[str, float]) -> float:
        return sum(components.get(c, 0.0) for c in self.meter.total_of)

    def end_idle(self, before: Any, t0_ns: int, seconds: float) -> None:
        watts = self.meter.watts(before, self.meter.read(), (time.monotonic_ns() - t0_ns) / 1e9)
        if watts is not None:
            self.idle_label_watts = watts
            self.idle_watts = self.by_component(watts)
            self.idle_s = seconds

    def step(self, t_ns: int, stopping: bool, run: RunContext | None) -> dict[str, float] | None:
        """Read the meter at `t_ns`: the power by label since the last reading.
        None at the first reading, and while the meter has nothing to say
        (the last reading stays the baseline)."""
        now = self.meter.read()
        if not self.last_t_ns:
            self.first_t_ns = self.last_t_ns = t_ns
            self.last = now
            return None
        dt_s = (t_ns - self.last_t_ns) / 1e9
        watts = self.meter.watts(self.last, now, dt_s)
        # A run shorter than the kernel's clock tick (a few fast queries)
        # has no tick between its first and its stop sample, so the model
        # sees no CPU time at all. Rather than give such a run no energy,
        # wait for the next tick (at most 0.1 s): its span then ends a moment
        # after the run and its mean power is diluted by that moment of idle,
        # which is the estimate's stated limit.
        deadline_ns = t_ns + 100_000_000
        while watts is None and stopping and not self.spans and time.monotonic_ns() < deadline_ns:
            time.sleep(0.005)
            t_ns, now = time.monotonic_ns(), self.meter.read()
            dt_s = (t_ns - self.last_t_ns) / 1e9
            watts = self.meter.watts(self.last, now, dt_s)
        if watts is None:
            return None
        for label, w in watts.items():
            self.joules[label] = self.joules.get(label, 0.0) + w * dt_s
        components = self.by_component(watts)
        t0_ns = run.t0_ns if run is not None else 0
        self.spans.append(Span((self.last_t_ns - t0_ns) / 1e9, (t_ns - t0_ns) / 1e9, components))
        self._count_measured(self.total(components), dt_s, run)
        self.last, self.last_t_ns = now, t_ns
        return watts

    def _count_measured(self, watts: float, dt_s: float, run: RunContext | None) -> None:
        """Energy inside the workload's measured window (warm-up excluded), for
        the mean power that joules per transaction are computed from."""
        if run is None or run.measure_start_s is None:
            return
        t = run.now_s()
        if t - dt_s >= run.measure_start_s and (run.measure_end_s is None or t <= run.measure_end_s + dt_s / 2):
            self.measured_j += watts * dt_s
            self.measured_s += dt_s

    def watts_series(self, name: str, prefix: str) -> list[SeriesPoint]:
        """The total power, and each component's under `prefix`, at the end
        of each span; the idle power at the first reading."""
        points: list[SeriesPoint] = []
        if self.spans and self.idle_watts is not None:
            points.append(SeriesPoint(name, "watts", self.spans[0].t0, self.total(self.idle_watts)))
        for span in self.spans:
            points.append(SeriesPoint(name, "watts", span.t1, self.total(span.watts)))
            points += [SeriesPoint(name, f"{prefix}{c}.watts", span.t1, w) for c, w in span.watts.items()]
        return points


class EnergyCollector(SamplingCollector):
    Settings = EnergySettings
    settings: EnergySettings

    def __init__(self, name: str, settings: EnergySettings) -> None:
        super().__init__(name, settings)
        self.track: _Track | None = None
        # Beside a counter (RAPL, perf), the model runs too: a counter that
        # does not advance over the run is no measurement, and the run falls
        # back to the model's figures (`_judge_counters`).
        self.shadow: _Track | None = None
        self._shadow_missing = ""
        self._advanced = False
        self._held: list[tuple[float, float]] = []
        self.method = ""
        self._notes: list[str] = []

    @property
    def meter(self) -> Meter | None:
        return self.track.meter if self.track is not None else None

    @property
    def spans(self) -> list[Span]:
        return self.track.spans if self.track is not None else []

    @property
    def idle_watts(self) -> dict[str, float] | None:
        return self.track.idle_watts if self.track is not None else None

    @classmethod
    def preflight(cls, settings: EnergySettings, provided: frozenset[Capability]) -> str | None:
        if settings.source == "rapl":
            return _read_rapl(settings)[1]
        if settings.source == "perf":
            return _perf_reason(settings)
        return None

    def open(self, ctx: CollectorContext) -> None:
        s = self.settings
        self._notes = []
        self.shadow, self._shadow_missing = None, ""
        self._advanced, self._held = False, []
        meter = self._choose_meter(s)
        self.track = _Track(meter)
        self.method = meter.method
        if not isinstance(meter, ModelMeter):
            try:
                self.shadow = _Track(self._model(s))
            except CollectorUnavailable as exc:
                self._shadow_missing = str(exc)
        if s.idle_baseline > 0:
            tracks = [t for t in (self.track, self.shadow) if t is not None]
            before, t0 = [t.meter.read() for t in tracks], time.monotonic_ns()
            time.sleep(float(s.idle_baseline))
            for t, b in zip(tracks, before, strict=True):
                t.end_idle(b, t0, float(s.idle_baseline))

    def _model(self, s: EnergySettings) -> ModelMeter:
        target = self._ctx.target if self._ctx is not None else None
        return ModelMeter(s, os.cpu_count() or 1, target.processes if target is not None else None)

    def _choose_meter(self, s: EnergySettings) -> Meter:
        if s.source == "model":
            self._notes.append('source = "model" was asked: energy is estimated (model), not measured')
            return self._model(s)
        zones, reason, denied = _read_rapl(s)
        if reason is None:
            return RaplMeter(zones)
        if s.source == "rapl":
            raise CollectorUnavailable(reason)
        if denied:
            self._notes.append(reason)
        reason = _perf_reason(s)
        if reason is None:
            meter = PerfMeter(perf_power_events(Path(s.perf_events)), float(s.interval))
            time.sleep(min(1.0, 2 * float(s.interval)) + 0.05)
            if meter.alive():
                return meter
            meter.close()
            reason = "perf stat could not count the power events (perf_event_paranoid, or no permission)"
        if s.source == "perf":
            raise CollectorUnavailable(reason)
        self._notes.append(reason)
        self._notes.append(f"no RAPL under {s.rapl_root} and no perf power events: energy is estimated (model)")
        return self._model(s)

    def close(self) -> None:
        if self.meter is not None:
            self.meter.close()

    def sample(self) -> dict[str, float]:
        assert self.track is not None
        t_ns = time.monotonic_ns()
        run = self._ctx.run if self._ctx is not None else None
        first = not self.track.last_t_ns
        watts = self.track.step(t_ns, self.stopping, run)
        if self.shadow is not None:
            self.shadow.step(t_ns, self.stopping, run)
        values: dict[str, float] = {}
        if first:
            # the idle baseline's interval ends at this first sample: its
            # power is this point's, so the series starts with the idle power
            for label, w in self.track.idle_label_watts.items():
                values[f"{label}.watts"] = w
            if self.track.idle_watts is not None:
                self._total_point(values, self.track.total(self.track.idle_watts), t_ns)
            return values
        if watts is None:
            return values
        for label, w in watts.items():
            values[f"{label}.watts"] = w
        self._total_point(values, self.track.total(self.track.spans[-1].watts), t_ns)
        meter = self.track.meter
        if isinstance(meter, ModelMeter) and meter.busy is not None:
            values["cpu_busy_pct"] = 100.0 * meter.busy
        return values

    def _total_point(self, values: dict[str, float], total_w: float, t_ns: int) -> None:
        """The run's power at this sample, live; a counter's is held back until
        one of its total's counters has advanced (its zeros are not the run's
        power: `_judge_counters` stores the model's then)."""
        if self.shadow is None or self._advanced:
            values["watts"] = total_w
            return
        assert self.track is not None and self._ctx is not None
        run = self._ctx.run
        self._held.append(((t_ns - run.t0_ns) / 1e9, total_w))
        meter = self.track.meter
        if any(j > 0 for label, j in self.track.joules.items() if meter.component(label) in meter.total_of):
            self._advanced = True
            for t, w in self._held:
                run.series.add(self.name, "watts", t, w)
            self._held.clear()

    def _judge_counters(self, result: RunResult) -> None:
        """A counter that does not advance over the run is not a measurement:
        the run falls back to the model (which ran beside it), says which
        counter and why, and is flagged. A counter of the total that stayed
        while the others advanced is named and flagged too."""
        track, p = self.track, self.name
        if track is None or self.shadow is None:
            return
        meter = track.meter
        counted = {label: j for label, j in track.joules.items() if meter.component(label) in meter.total_of}
        dead = [label for label, j in sorted(counted.items()) if j <= 0]
        if counted and not dead:
            return
        seconds = (self.shadow.last_t_ns - self.shadow.first_t_ns) / 1e9
        names = ", ".join(meter.counter(label) for label in dead) or f"{meter.source} (no reading)"
        result.flags.append(Flag.COUNTER_STALLED)
        if len(dead) < len(counted):
            result.events.append(Event(0.0, "counter-stalled", (
                f"{p}: {names} read 0 J over the run ({seconds:.3g} s) while the other counters advanced: a counter "
                f"that does not advance is not a measurement; the total ({' + '.join(meter.total_of)}) holds "
                "only the counters that did")))
            return
        if self.shadow.spans:
            fallback = "energy is estimated by the model instead (each figure's method says how)"
            self.track, self.shadow = self.shadow, None
            self.method = self.track.meter.method
            result.series += self.track.watts_series(p, prefix="model.")
        else:
            fallback = f"no energy figure: the model cannot stand in ({self._shadow_missing or 'no reading'})"
            track.spans.clear()
        result.events.append(Event(0.0, "counter-stalled", (
            f"{p}: {names} read 0 J over the run ({seconds:.3g} s): a counter that does not advance is not a "
            f"measurement; {fallback}. Set collect.{p}.source to choose the source")))

    def component_joules(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for span in self.spans:
            for c, w in span.watts.items():
                out[c] = out.get(c, 0.0) + w * (span.t1 - span.t0)
        return out

    def summary(self) -> RunResult:
        result = RunResult()
        for note in self._notes:
            result.events.append(Event(0.0, "collector-info", f"{self.name}: {note}"))
        self._judge_counters(result)
        track = self.track
        if track is None:
            return result
        seconds = (track.last_t_ns - track.first_t_ns) / 1e9
        if seconds <= 0 or not track.spans:
            return result
        meter = track.meter
        p, method = self.name, self.method
        components = self.component_joules()
        joules = sum(components.get(c, 0.0) for c in meter.total_of)
        result.add_metric(f"{p}.joules", joules, "J", f"energy over the run ({' + '.join(meter.total_of)})",
                          higher_is_better=False, method=method)
        result.headline.append(f"{p}.joules")  # Results and Effects show it, with its interval
        result.add_metric(f"{p}.seconds", seconds, "s", "the span the energy figures cover", method=method)
        if track.measured_s > 0:
            result.add_metric(f"{p}.watts_mean", track.measured_j / track.measured_s, "W",
                              "mean power over the measured window (warm-up excluded)",
                              higher_is_better=False, method=method)
        else:
            result.add_metric(f"{p}.watts_mean", joules / seconds, "W", "mean power over the run",
                              higher_is_better=False, method=method)
        for c, j in sorted(components.items()):
            result.add_metric(f"{p}.component.{c}.joules", j, "J", f"{c} energy over the run ({meter.source})",
                              higher_is_better=False, method=method)
        if isinstance(meter, RaplMeter):
            for label, j in sorted(track.joules.items()):
                result.add_metric(f"{p}.{label}.joules", j, "J", f"RAPL {label} energy over the run",
                                  higher_is_better=False, method=method)
        if track.idle_watts is not None:
            idle_w = track.total(track.idle_watts)
            result.add_metric(f"{p}.idle_baseline_s", track.idle_s, "s", "idle baseline measured before the run",
                              method=method)
            result.add_metric(f"{p}.idle_watts", idle_w, "W", "power at idle (baseline before the run)",
                              higher_is_better=False, method=method)
            for c, w in sorted(track.idle_watts.items()):
                result.add_metric(f"{p}.idle.{c}.watts", w, "W", f"{c} power at idle", higher_is_better=False,
                                  method=method)
            above = joules - idle_w * seconds
            result.add_metric(f"{p}.joules_above_idle", above, "J",
                              "energy over the run less the idle power x its length", higher_is_better=False,
                              method=method)
            if above < 0:
                # the idle baseline measured more power than the run drew: the
                # baseline caught other work, or the power moved by more than the
                # run adds to it; the figure stays, flagged, with both powers
                result.flags.append(Flag.ENERGY_BELOW_IDLE)
                result.events.append(Event(0.0, "energy-below-idle", (
                    f"{p}: the run's mean power {joules / seconds:.3f} W is below the idle baseline's {idle_w:.3f} W "
                    f"(measured over {track.idle_s:g} s before the run): energy above idle {above:.3f} J. The "
                    "baseline measured more than the run: other work ran during it, or the machine's power varies by "
                    "more than the run adds; lengthen idle_baseline, or run on a quieter host")))
        return result

    def annotate(self, result: RunResult) -> None:
        """Each query's energy over its interval on the run's clock, by
        component, in total and above idle; and the run's share in gaps."""
        if self.meter is None or not self.spans:
            return
        timed = [q for q in result.queries if q.started_s is not None and q.seconds is not None]
        if not timed:
            return
        shares = share_out(self.spans, [(q.started_s or 0.0, (q.started_s or 0.0) + (q.seconds or 0.0))
                                        for q in timed], self.meter.total_of, self.idle_watts)
        in_queries = 0.0
        for q, (components, above) in zip(timed, shares, strict=True):
            _set_query_energy(q, components, above, self.meter)
            in_queries += q.energy_j or 0.0
        p = self.name
        total = result.metrics.get(f"{p}.joules")
        result.add_metric(f"{p}.queries.joules", in_queries, "J", "energy inside the queries' intervals",
                          higher_is_better=False, method=self.method)
        if f"{p}.queries.joules" not in result.headline:  # the query set's energy: in Results and Effects
            result.headline.append(f"{p}.queries.joules")
        if total is not None:
            result.add_metric(f"{p}.gaps.joules", total.value - in_queries, "J",
                              "energy outside every query (between, before and after them)",
                              higher_is_better=False, method=self.method)

    def derive(self, all_metrics: dict[str, Metric]) -> dict[str, Metric]:
        return per_work_metrics(all_metrics, self.name)

    @classmethod
    def report_sections(cls, groups: list[RunGroup]) -> list[Section]:
        from perflab.collectors import energy_report

        return energy_report.sections(groups)


def _set_query_energy(q: QueryTime, components: dict[str, float], above: float | None, meter: Meter) -> None:
    q.energy = {c: round(j, 9) for c, j in sorted(components.items())}
    q.energy_j = sum(components.get(c, 0.0) for c in meter.total_of)
    q.energy_above_idle_j = above
    q.energy_source = meter.source
