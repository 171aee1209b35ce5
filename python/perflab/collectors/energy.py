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
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from perflab.collectors.base import (
    CollectorContext,
    CollectorSettings,
    CollectorUnavailable,
    SamplingCollector,
)
from perflab.collectors.diskstats import SECTOR_BYTES, parse_diskstats, whole_disks
from perflab.collectors.process import read_proc
from perflab.collectors.procfs import (
    CLOCK_TICKS_PER_S,
    cpu_busy_fraction,
    parse_kib_table,
    parse_stat,
    read_text,
)
from perflab.endpoints import Capability
from perflab.model import Event, Flag, Metric, QueryTime, RunResult
from perflab.section import RunGroup, Section
from perflab.units import Duration

# A rough mid-range figure for a server CPU's TDP per hardware thread, for the
# Fan et al. model when tdp_watts is not given but idle_fraction is used.
DEFAULT_TDP_WATTS_PER_CPU = 6.0
DEFAULT_IDLE_FRACTION = 0.3
POWERCAP_ROOT = "/sys/class/powercap"
PERF_POWER_EVENTS = "/sys/bus/event_source/devices/power/events"
# Cloud Carbon Footprint, Methodology, Appendix I: Energy Coefficients (AWS):
# average minimum watts (0% CPU) and maximum watts (100% CPU) per vCPU, and
# memory at 0.000392 kWh per GB-hour.
CCF_MIN_WATTS_PER_VCPU = 0.74
CCF_MAX_WATTS_PER_VCPU = 3.5
CCF_MEMORY_WATTS_PER_GB = 0.392
# perflab's assumption, not a published figure (see the module's notes).
ASSUMED_DISK_JOULES_PER_BYTE = 5e-9
ASSUMED_DISK_JOULES_PER_OP = 25e-6
DEFAULT_IDLE_BASELINE_S = 5.0
# perf's power events and the component each measures.
PERF_COMPONENTS = {"energy-pkg": "package", "energy-cores": "core", "energy-gpu": "uncore",
                   "energy-ram": "dram", "energy-psys": "psys"}
MEASURED_TOTAL = ("package", "dram")


class EnergySettings(CollectorSettings):
    source: Literal["auto", "rapl", "perf", "model"] = "auto"
    tdp_watts: float | None = Field(default=None, gt=0, le=100_000, description="CPU packages' TDP for the model (W)")
    idle_fraction: float = Field(default=DEFAULT_IDLE_FRACTION, ge=0, le=1)
    min_watts_per_cpu: float = Field(default=CCF_MIN_WATTS_PER_VCPU, ge=0, le=1000)
    max_watts_per_cpu: float = Field(default=CCF_MAX_WATTS_PER_VCPU, gt=0, le=1000)
    dram_watts_per_gb: float = Field(default=CCF_MEMORY_WATTS_PER_GB, ge=0, le=100)
    disk_joules_per_byte: float = Field(default=ASSUMED_DISK_JOULES_PER_BYTE, ge=0, le=1)
    disk_joules_per_op: float = Field(default=ASSUMED_DISK_JOULES_PER_OP, ge=0, le=1)
    # Seconds measured idle before the run (0: none, and no above-idle figures).
    idle_baseline: Duration = Field(default=DEFAULT_IDLE_BASELINE_S, ge=0, le=3600)
    # The model's CPU utilisation: the whole host's, or the target's processes'.
    cpu_scope: Literal["host", "target"] = "host"
    rapl_root: str = POWERCAP_ROOT
    perf_events: str = PERF_POWER_EVENTS


@dataclass
class RaplZone:
    label: str  # "package-0", "core-0", "uncore-0", "dram-0", "psys"
    energy_path: Path
    max_range_uj: int
    counted: bool  # summed into the total (package and dram)

    @property
    def component(self) -> str:
        return self.label.split("-")[0]


def find_rapl_zones(root: Path) -> list[RaplZone]:
    """Package, core, uncore and DRAM zones (and psys) under a powercap root.
    Raises PermissionError when a counter exists but cannot be read."""
    zones: list[RaplZone] = []
    if not root.is_dir():
        return zones
    for zone in sorted(root.glob("intel-rapl:*")):
        try:
            name = read_text(zone / "name").strip()
        except OSError:
            continue
        depth = zone.name.count(":")
        socket = zone.name.split(":")[1]
        if depth == 1 and name.startswith("package"):
            label, counted = name, True
        elif depth == 2 and name in ("dram", "core", "uncore"):
            label, counted = f"{name}-{socket}", name == "dram"
        elif depth == 1 and name == "psys":
            label, counted = "psys", False
        else:
            continue
        energy = zone / "energy_uj"
        int(read_text(energy))  # PermissionError when root-only
        max_range_uj = int(read_text(zone / "max_energy_range_uj"))
        zones.append(RaplZone(label, energy, max_range_uj, counted))
    return zones


def counter_delta_uj(before: int, after: int, max_range_uj: int) -> int:
    """Energy between two readings of a counter that wraps at max_range_uj
    (at most one wrap: a package drawing 200 W wraps a 2^32 uJ range in ~6 h,
    a 2^36 range in days, far longer than a sampling interval)."""
    if after >= before:
        return after - before
    return max_range_uj - before + after


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


# ------------------------------------------------------------------ meters


class Meter:
    """One source of power figures: `read()` a state, `watts(before, after,
    dt_s)` the power of each label between two states (None: nothing to say
    for that span), each label's component, and which components make the
    total."""

    source = ""
    method = ""
    total_of: tuple[str, ...] = ()

    def read(self) -> Any:
        raise NotImplementedError

    def watts(self, before: Any, after: Any, dt_s: float) -> dict[str, float] | None:
        raise NotImplementedError

    def component(self, label: str) -> str:
        return label

    def close(self) -> None:
        pass


class RaplMeter(Meter):
    source = "rapl"
    method = "rapl"
    total_of = MEASURED_TOTAL

    def __init__(self, zones: list[RaplZone]) -> None:
        self.zones = zones

    def read(self) -> dict[str, int]:
        return {z.label: int(read_text(z.energy_path)) for z in self.zones}

    def watts(self, before: dict[str, int], after: dict[str, int], dt_s: float) -> dict[str, float]:
        return {z.label: counter_delta_uj(before[z.label], after[z.label], z.max_range_uj) / 1e6 / dt_s
                for z in self.zones}

    def component(self, label: str) -> str:
        return label.split("-")[0]


def perf_power_events(events_dir: Path) -> list[str]:
    """The power PMU's energy events perf can count (energy-pkg, ...)."""
    if not events_dir.is_dir():
        return []
    return sorted(p.name for p in events_dir.iterdir() if p.name in PERF_COMPONENTS)


def parse_perf_interval_line(line: str) -> tuple[float, str, float] | None:
    """One line of `perf stat -I ms -x,`: (seconds since perf started, event,
    joules); None for anything else (headers, "<not counted>")."""
    fields = line.strip().split(",")
    if len(fields) < 4:
        return None
    try:
        t = float(fields[0])
        value = float(fields[1])
    except ValueError:
        return None
    event = fields[3].removeprefix("power/").rstrip("/")
    if event not in PERF_COMPONENTS or fields[2] != "Joules":
        return None
    return t, event, value


class PerfMeter(Meter):
    """`perf stat -a -I interval -x,` running beside the run; its interval
    counts are summed per event into cumulative joules that `read` returns."""

    source = "perf"
    method = "perf"
    total_of = MEASURED_TOTAL

    def __init__(self, events: list[str], interval_s: float) -> None:
        self.events = events
        self._joules = dict.fromkeys(events, 0.0)
        self._lock = threading.Lock()
        argv = ["perf", "stat", "-a", "-x,", "-I", str(max(10, int(interval_s * 1000))),
                "-e", ",".join(f"power/{e}/" for e in events)]
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True)
        self._thread = threading.Thread(target=self._pump, name="energy-perf", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            parsed = parse_perf_interval_line(line)
            if parsed is not None:
                with self._lock:
                    self._joules[parsed[1]] += parsed[2]

    def read(self) -> dict[str, float]:
        with self._lock:
            return dict(self._joules)

    def watts(self, before: dict[str, float], after: dict[str, float], dt_s: float) -> dict[str, float]:
        return {PERF_COMPONENTS[e]: (after[e] - before[e]) / dt_s for e in self.events}

    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._thread.join(timeout=5)


@dataclass
class _ModelReading:
    stat: dict[str, int]
    used_gb: float
    disk_bytes: int
    disk_ops: int
    # cpu_scope "target": pid -> (start time, utime + stime) in clock ticks
    procs: dict[int, tuple[int, int]]


def _target_cpu_ticks(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> int:
    """CPU ticks the processes used between two readings; a process new since
    the first (or a reused pid) counts from its start."""
    ticks = 0
    for pid, (start, used) in after.items():
        old = before.get(pid)
        ticks += used - old[1] if old is not None and old[0] == start else used
    return max(0, ticks)


class ModelMeter(Meter):
    source = "model"
    total_of = ("cpu", "dram", "disk")

    def __init__(self, s: EnergySettings, cpus: int, processes: Callable[[], dict[int, str]] | None = None) -> None:
        self.s = s
        self.cpus = cpus
        self.disks = whole_disks()
        self.busy: float | None = None
        self.processes = processes if s.cpu_scope == "target" else None
        if s.cpu_scope == "target" and processes is None:
            raise CollectorUnavailable("cpu_scope = \"target\" needs a target whose processes perflab knows")
        u_text = ("u = CPU time of the target's processes (/proc/PID/stat) over all CPUs"
                  if self.processes is not None else "u = busy CPU share from /proc/stat")
        if s.tdp_watts is not None:
            self._cpu_max = s.tdp_watts
            self._cpu_min = s.idle_fraction * s.tdp_watts
            cpu_text = (f"cpu = P_idle + (TDP - P_idle) x u, {u_text}, "
                        f"P_idle = {s.idle_fraction:g} x TDP, TDP {s.tdp_watts:g} W (given); CPU packages only "
                        "(Fan et al., ISCA 2007)")
        else:
            self._cpu_min = s.min_watts_per_cpu * cpus
            self._cpu_max = s.max_watts_per_cpu * cpus
            given = (s.min_watts_per_cpu, s.max_watts_per_cpu) != (CCF_MIN_WATTS_PER_VCPU, CCF_MAX_WATTS_PER_VCPU)
            cite = "given" if given else "Cloud Carbon Footprint, Appendix I, AWS average per vCPU"
            cpu_text = (f"cpu = {cpus} CPUs x ({s.min_watts_per_cpu:g} W + ({s.max_watts_per_cpu:g} - "
                        f"{s.min_watts_per_cpu:g}) W x u), {u_text} ({cite})")
        dram_cite = ("given" if s.dram_watts_per_gb != CCF_MEMORY_WATTS_PER_GB
                     else "Cloud Carbon Footprint, Appendix I: 0.000392 kWh/GB-h")
        disk_cite = ("given" if (s.disk_joules_per_byte, s.disk_joules_per_op)
                     != (ASSUMED_DISK_JOULES_PER_BYTE, ASSUMED_DISK_JOULES_PER_OP)
                     else "assumed by perflab, not published: set collect.energy.disk_joules_per_byte/_per_op")
        self.method = (f"model: {cpu_text}; dram = {s.dram_watts_per_gb:g} W/GB x memory in use "
                       f"(MemTotal - MemAvailable) ({dram_cite}); disk = {s.disk_joules_per_byte:g} J/byte x bytes "
                       f"+ {s.disk_joules_per_op:g} J/op x operations on {', '.join(self.disks) or 'no disks'} "
                       f"({disk_cite})")

    def read(self) -> _ModelReading:
        mem = parse_kib_table(read_text("/proc/meminfo"))
        used_kib = mem.get("MemTotal", 0) - mem.get("MemAvailable", mem.get("MemFree", 0))
        disks = parse_diskstats(read_text("/proc/diskstats"))
        nbytes = ops = 0
        for name in self.disks:
            d = disks.get(name)
            if d is not None:
                nbytes += (d.get("rd_sectors", 0) + d.get("wr_sectors", 0)) * SECTOR_BYTES
                ops += d.get("rd_ios", 0) + d.get("wr_ios", 0)
        procs: dict[int, tuple[int, int]] = {}
        if self.processes is not None:
            for pid in self.processes():
                p = read_proc(pid, False)
                if p is not None:
                    procs[pid] = (p.start_ticks, p.user_ticks + p.system_ticks)
        return _ModelReading(parse_stat(read_text("/proc/stat")), used_kib / 2**20, nbytes, ops, procs)

    def watts(self, before: _ModelReading, after: _ModelReading, dt_s: float) -> dict[str, float] | None:
        busy = cpu_busy_fraction(before.stat, after.stat)
        if busy is not None and self.processes is not None:
            used_s = _target_cpu_ticks(before.procs, after.procs) / CLOCK_TICKS_PER_S
            busy = min(1.0, used_s / dt_s / self.cpus)
        if busy is None:
            # no clock tick since the last sample (the stop sample can come a
            # moment after a regular one): keep the last reading as the
            # baseline rather than count this span with no energy in it
            return None
        self.busy = busy
        disk_j = ((after.disk_bytes - before.disk_bytes) * self.s.disk_joules_per_byte
                  + (after.disk_ops - before.disk_ops) * self.s.disk_joules_per_op)
        return {
            "cpu": self._cpu_min + (self._cpu_max - self._cpu_min) * busy,
            "dram": after.used_gb * self.s.dram_watts_per_gb,
            "disk": max(0.0, disk_j) / dt_s,
        }


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


class EnergyCollector(SamplingCollector):
    Settings = EnergySettings
    settings: EnergySettings

    def __init__(self, name: str, settings: EnergySettings) -> None:
        super().__init__(name, settings)
        self.meter: Meter | None = None
        self.method = ""
        self._notes: list[str] = []
        self._reset()

    def _reset(self) -> None:
        self._last: Any = None
        self._last_t_ns = 0
        self._first_t_ns = 0
        self._joules: dict[str, float] = {}
        self._measured_j = 0.0
        self._measured_s = 0.0
        self.spans: list[Span] = []
        self.idle_watts: dict[str, float] | None = None
        self._idle_label_watts: dict[str, float] = {}
        self._idle_s = 0.0

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
        self._reset()
        self.meter = self._choose_meter(s)
        self.method = self.meter.method
        if s.idle_baseline > 0:
            self._idle_baseline(float(s.idle_baseline))

    def _choose_meter(self, s: EnergySettings) -> Meter:
        if s.source in ("auto", "rapl"):
            zones, reason, denied = _read_rapl(s)
            if reason is None:
                return RaplMeter(zones)
            if s.source == "rapl":
                raise CollectorUnavailable(reason)
            if denied:
                self._notes.append(reason)
        if s.source in ("auto", "perf"):
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
        target = self._ctx.target if self._ctx is not None else None
        return ModelMeter(s, os.cpu_count() or 1, target.processes if target is not None else None)

    def _idle_baseline(self, seconds: float) -> None:
        assert self.meter is not None
        before, t0 = self.meter.read(), time.monotonic_ns()
        time.sleep(seconds)
        watts = self.meter.watts(before, self.meter.read(), (time.monotonic_ns() - t0) / 1e9)
        if watts is None:
            return
        self._idle_label_watts = watts
        self.idle_watts = self._by_component(watts)
        self._idle_s = seconds

    def _by_component(self, watts: dict[str, float]) -> dict[str, float]:
        assert self.meter is not None
        out: dict[str, float] = {}
        for label, w in watts.items():
            c = self.meter.component(label)
            out[c] = out.get(c, 0.0) + w
        return out

    def close(self) -> None:
        if self.meter is not None:
            self.meter.close()

    def sample(self) -> dict[str, float]:
        assert self.meter is not None
        t_ns = time.monotonic_ns()
        now = self.meter.read()
        values: dict[str, float] = {}
        if self._last_t_ns:
            dt_s = (t_ns - self._last_t_ns) / 1e9
            watts = self.meter.watts(self._last, now, dt_s)
            # A run shorter than the kernel's clock tick (a few fast queries)
            # has no tick between its first and its stop sample, so the
            # model sees no CPU time at all. Rather than give such a run no
            # energy, wait for the next tick (at most 0.1 s): its span then
            # ends a moment after the run and its mean power is diluted by
            # that moment of idle, which is the estimate's stated limit.
            deadline_ns = t_ns + 100_000_000
            while watts is None and self.stopping and not self.spans and time.monotonic_ns() < deadline_ns:
                time.sleep(0.005)
                t_ns, now = time.monotonic_ns(), self.meter.read()
                dt_s = (t_ns - self._last_t_ns) / 1e9
                watts = self.meter.watts(self._last, now, dt_s)
            if watts is None:
                return values
            for label, w in watts.items():
                self._joules[label] = self._joules.get(label, 0.0) + w * dt_s
                values[f"{label}.watts"] = w
            components = self._by_component(watts)
            total_w = sum(components.get(c, 0.0) for c in self.meter.total_of)
            values["watts"] = total_w
            if isinstance(self.meter, ModelMeter) and self.meter.busy is not None:
                values["cpu_busy_pct"] = 100.0 * self.meter.busy
            t0_ns = self._ctx.run.t0_ns if self._ctx is not None else 0
            self.spans.append(Span((self._last_t_ns - t0_ns) / 1e9, (t_ns - t0_ns) / 1e9, components))
            self._count_measured(total_w, dt_s)
        else:
            self._first_t_ns = t_ns
            # the idle baseline's interval ends at this first sample: its
            # power is this point's, so the series starts with the idle power
            for label, w in self._idle_label_watts.items():
                values[f"{label}.watts"] = w
            if self.idle_watts is not None:
                values["watts"] = sum(self.idle_watts.get(c, 0.0) for c in self.meter.total_of)
        self._last = now
        self._last_t_ns = t_ns
        return values

    def _count_measured(self, watts: float, dt_s: float) -> None:
        """Energy inside the workload's measured window (warm-up excluded), for
        the mean power that joules per transaction are computed from."""
        run = self._ctx.run if self._ctx is not None else None
        if run is None or run.measure_start_s is None:
            return
        t = run.now_s()
        if t - dt_s >= run.measure_start_s and (run.measure_end_s is None or t <= run.measure_end_s + dt_s / 2):
            self._measured_j += watts * dt_s
            self._measured_s += dt_s

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
        seconds = (self._last_t_ns - self._first_t_ns) / 1e9
        if seconds <= 0 or self.meter is None:
            return result
        p, method = self.name, self.method
        components = self.component_joules()
        joules = sum(components.get(c, 0.0) for c in self.meter.total_of)
        result.add_metric(f"{p}.joules", joules, "J", f"energy over the run ({' + '.join(self.meter.total_of)})",
                          higher_is_better=False, method=method)
        result.headline.append(f"{p}.joules")  # Results and Effects show it, with its interval
        result.add_metric(f"{p}.seconds", seconds, "s", "the span the energy figures cover", method=method)
        if self._measured_s > 0:
            result.add_metric(f"{p}.watts_mean", self._measured_j / self._measured_s, "W",
                              "mean power over the measured window (warm-up excluded)",
                              higher_is_better=False, method=method)
        else:
            result.add_metric(f"{p}.watts_mean", joules / seconds, "W", "mean power over the run",
                              higher_is_better=False, method=method)
        for c, j in sorted(components.items()):
            result.add_metric(f"{p}.component.{c}.joules", j, "J", f"{c} energy over the run ({self.meter.source})",
                              higher_is_better=False, method=method)
        if isinstance(self.meter, RaplMeter):
            for label, j in sorted(self._joules.items()):
                result.add_metric(f"{p}.{label}.joules", j, "J", f"RAPL {label} energy over the run",
                                  higher_is_better=False, method=method)
        if self.idle_watts is not None:
            idle_w = sum(self.idle_watts.get(c, 0.0) for c in self.meter.total_of)
            result.add_metric(f"{p}.idle_baseline_s", self._idle_s, "s", "idle baseline measured before the run",
                              method=method)
            result.add_metric(f"{p}.idle_watts", idle_w, "W", "power at idle (baseline before the run)",
                              higher_is_better=False, method=method)
            for c, w in sorted(self.idle_watts.items()):
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
                    f"(measured over {self._idle_s:g} s before the run): energy above idle {above:.3f} J. The baseline "
                    "measured more than the run: other work ran during it, or the machine's power varies by more "
                    "than the run adds; lengthen idle_baseline, or run on a quieter host")))
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
