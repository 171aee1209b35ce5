"""energy's meters: where power figures come from (RAPL's powercap counters,
perf's power events, or the model from /proc), each read the same way
(`Meter`), and the collector's settings, which choose and tune them. The
collector and what it stores are in energy.py, whose notes say what each
source measures and how the model estimates."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from perflab.collectors.base import CollectorSettings, CollectorUnavailable
from perflab.collectors.diskstats import SECTOR_BYTES, parse_diskstats, whole_disks
from perflab.collectors.process import read_proc
from perflab.collectors.procfs import (
    CLOCK_TICKS_PER_S,
    cpu_busy_fraction,
    parse_kib_table,
    parse_stat,
    read_text,
)
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
    # Where joules come from: "rapl" (the CPU's energy counters in sysfs), "perf" (perf's power events),
    # "model" (estimated from CPU use and TDP), or "auto": the first that works.
    source: Literal["auto", "rapl", "perf", "model"] = "auto"
    tdp_watts: float | None = Field(default=None, gt=0, le=100_000, description="CPU packages' TDP for the model (W)")
    # The model's power at idle, as a share of full power.
    idle_fraction: float = Field(default=DEFAULT_IDLE_FRACTION, ge=0, le=1)
    # The model's watts per CPU at idle (Cloud Carbon Footprint's coefficient).
    min_watts_per_cpu: float = Field(default=CCF_MIN_WATTS_PER_VCPU, ge=0, le=1000)
    # The model's watts per CPU at full use (Cloud Carbon Footprint's coefficient).
    max_watts_per_cpu: float = Field(default=CCF_MAX_WATTS_PER_VCPU, gt=0, le=1000)
    # The model's watts per GB of memory.
    dram_watts_per_gb: float = Field(default=CCF_MEMORY_WATTS_PER_GB, ge=0, le=100)
    # The model's joules per byte read or written (an assumed figure, said so with the result).
    disk_joules_per_byte: float = Field(default=ASSUMED_DISK_JOULES_PER_BYTE, ge=0, le=1)
    # The model's joules per disk I/O operation (an assumed figure, said so with the result).
    disk_joules_per_op: float = Field(default=ASSUMED_DISK_JOULES_PER_OP, ge=0, le=1)
    # Seconds measured idle before the run (0: none, and no above-idle figures).
    idle_baseline: Duration = Field(default=DEFAULT_IDLE_BASELINE_S, ge=0, le=3600)
    # The model's CPU utilisation: the whole host's, or the target's processes'.
    cpu_scope: Literal["host", "target"] = "host"
    # Where the RAPL counters are read (powercap in sysfs).
    rapl_root: str = POWERCAP_ROOT
    # Where perf's power events are read.
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

    def counter(self, label: str) -> str:
        """Where a label's figure is read, as a user would look it up."""
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

    def counter(self, label: str) -> str:
        zone = next(z for z in self.zones if z.label == label)
        return f"RAPL {label} ({zone.energy_path})"


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
    total_of: tuple[str, ...] = MEASURED_TOTAL

    def __init__(self, events: list[str], interval_s: float) -> None:
        self.events = events
        # package + dram where perf has them; else what it has (a VM's
        # energy-psys alone covers the platform)
        present = tuple(PERF_COMPONENTS[e] for e in events)
        self.total_of = tuple(c for c in MEASURED_TOTAL if c in present) or present
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

    def counter(self, label: str) -> str:
        event = next(e for e, c in PERF_COMPONENTS.items() if c == label)
        return f"perf power/{event}/"

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
        if self._proc.stderr is not None and not self._thread.is_alive():
            self._proc.stderr.close()  # else a ResourceWarning lands in whatever runs next


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

