"""energy: joules and watts, measured by RAPL or estimated from CPU use.

Measured: the Linux powercap interface to Intel/AMD RAPL
(Documentation/power/powercap/powercap.rst): each zone under
/sys/class/powercap named intel-rapl:N ("package-N") or a sub-zone
intel-rapl:N:M named "dram" has a cumulative `energy_uj` counter that wraps at
`max_energy_range_uj`. Package and DRAM zones are summed; "core" and "uncore"
are inside their package and "psys" covers the whole platform, so they are not
added (psys is reported apart when present). method = "rapl".

Estimated, when RAPL is missing or unreadable (energy_uj is root-only on most
kernels since 2020): the linear utilisation model of Fan, Weber and Barroso,
"Power provisioning for a warehouse-sized computer" (ISCA 2007),
P = P_idle + (P_max - P_idle) * u, with P_max the TDP the experiment gives
(`tdp_watts`) or DEFAULT_TDP_WATTS_PER_CPU per logical CPU, P_idle =
`idle_fraction` * P_max, and u the busy share of all CPUs from /proc/stat.
It covers the CPU packages only, like RAPL's package domain, and the metric's
method says all of this.
"""

from __future__ import annotations

import os
import time
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
from perflab.collectors.procfs import cpu_busy_fraction, parse_stat, read_text
from perflab.endpoints import Capability
from perflab.model import Event, Metric, RunResult

# A rough mid-range figure for a server CPU's TDP per hardware thread (e.g. a
# 32-thread 165 W part is ~5 W/thread, a 16-thread 125 W desktop part ~8 W).
# Only used when the experiment gives no tdp_watts, and said so in the method.
DEFAULT_TDP_WATTS_PER_CPU = 6.0
DEFAULT_IDLE_FRACTION = 0.3
POWERCAP_ROOT = "/sys/class/powercap"


class EnergySettings(CollectorSettings):
    source: Literal["auto", "rapl", "model"] = "auto"
    tdp_watts: float | None = Field(default=None, gt=0, le=100_000, description="CPU packages' TDP for the model (W)")
    idle_fraction: float = Field(default=DEFAULT_IDLE_FRACTION, ge=0, le=1)
    rapl_root: str = POWERCAP_ROOT


@dataclass
class RaplZone:
    label: str  # "package-0", "dram-0", "psys"
    energy_path: Path
    max_range_uj: int
    counted: bool  # summed into the total (package and dram)


def find_rapl_zones(root: Path) -> list[RaplZone]:
    """Package and DRAM zones (and psys apart) under a powercap root.
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
        if depth == 1 and name.startswith("package"):
            label, counted = name, True
        elif depth == 2 and name == "dram":
            label, counted = f"dram-{zone.name.split(':')[1]}", True
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


class EnergyCollector(SamplingCollector):
    Settings = EnergySettings

    def __init__(self, name: str, settings: Any) -> None:
        super().__init__(name, settings)
        self.zones: list[RaplZone] = []
        self.method = ""
        self._tdp_watts = 0.0
        self._last_t_ns = 0
        self._first_t_ns = 0
        self._last_uj: dict[str, int] = {}
        self._last_stat: dict[str, int] = {}
        self._joules: dict[str, float] = {}
        self._notes: list[str] = []

    @classmethod
    def preflight(cls, settings: Any, provided: frozenset[Capability]) -> str | None:
        return _read_rapl(settings)[1] if settings.source == "rapl" else None

    def open(self, ctx: CollectorContext) -> None:
        s = self.settings
        self._notes = []
        self.zones = []
        if s.source in ("auto", "rapl"):
            self.zones, reason, denied = _read_rapl(s)
            if reason and s.source == "rapl":
                raise CollectorUnavailable(reason)
            if denied:
                self._notes.append(f"{reason}; estimating from CPU use instead")
        if any(z.counted for z in self.zones):
            self.method = "rapl"
        else:
            self.zones = []
            cpus = os.cpu_count() or 1
            if s.tdp_watts is not None:
                self._tdp_watts, tdp_text = s.tdp_watts, f"TDP {s.tdp_watts:g} W (given)"
            else:
                self._tdp_watts = DEFAULT_TDP_WATTS_PER_CPU * cpus
                tdp_text = (f"TDP {self._tdp_watts:g} W (assumed: {DEFAULT_TDP_WATTS_PER_CPU:g} W x {cpus} CPUs; "
                            "give collect.energy.tdp_watts)")
            self.method = (
                f"model: P = P_idle + (TDP - P_idle) * u, u = busy CPU share from /proc/stat, "
                f"P_idle = {s.idle_fraction:g} x TDP, {tdp_text}; CPU packages only (Fan et al., ISCA 2007)"
            )
            if s.source == "auto" and not self._notes:
                self._notes.append(f"no RAPL under {s.rapl_root}: energy is estimated")
        self._last_t_ns = 0
        self._joules = {}
        self._measured_j = 0.0
        self._measured_s = 0.0

    def _read_uj(self) -> dict[str, int]:
        return {z.label: int(read_text(z.energy_path)) for z in self.zones}

    def sample(self) -> dict[str, float]:
        t_ns = time.monotonic_ns()
        values: dict[str, float] = {}
        if self.zones:
            now_uj = self._read_uj()
            if self._last_t_ns:
                dt_s = (t_ns - self._last_t_ns) / 1e9
                total_w = 0.0
                for z in self.zones:
                    joules = counter_delta_uj(self._last_uj[z.label], now_uj[z.label], z.max_range_uj) / 1e6
                    self._joules[z.label] = self._joules.get(z.label, 0.0) + joules
                    values[f"{z.label}.watts"] = joules / dt_s
                    if z.counted:
                        total_w += joules / dt_s
                values["watts"] = total_w
                self._count_measured(total_w, dt_s)
            self._last_uj = now_uj
        else:
            now_stat = parse_stat(read_text("/proc/stat"))
            if self._last_t_ns:
                dt_s = (t_ns - self._last_t_ns) / 1e9
                busy = cpu_busy_fraction(self._last_stat, now_stat)
                if busy is None:
                    # no clock tick since the last sample (the stop sample
                    # can come a moment after a regular one): keep the last
                    # sample as the baseline rather than count this span
                    # with no energy in it
                    return values
                watts = self._model_watts(busy)
                self._joules["model"] = self._joules.get("model", 0.0) + watts * dt_s
                values["watts"] = watts
                values["cpu_busy_pct"] = 100.0 * busy
                self._count_measured(watts, dt_s)
            self._last_stat = now_stat
        if not self._last_t_ns:
            self._first_t_ns = t_ns
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

    def _model_watts(self, busy: float) -> float:
        idle_w = self.settings.idle_fraction * self._tdp_watts
        return idle_w + (self._tdp_watts - idle_w) * busy

    def summary(self) -> RunResult:
        result = RunResult()
        for note in self._notes:
            result.events.append(Event(0.0, "collector-info", f"{self.name}: {note}"))
        seconds = (self._last_t_ns - self._first_t_ns) / 1e9
        if seconds <= 0:
            return result
        counted = {z.label for z in self.zones if z.counted} or {"model"}
        joules = sum(j for label, j in self._joules.items() if label in counted)
        p = self.name
        result.add_metric(f"{p}.joules", joules, "J", "energy over the run", higher_is_better=False,
                          method=self.method)
        if self._measured_s > 0:
            result.add_metric(f"{p}.watts_mean", self._measured_j / self._measured_s, "W",
                              "mean power over the measured window (warm-up excluded)",
                              higher_is_better=False, method=self.method)
        else:
            result.add_metric(f"{p}.watts_mean", joules / seconds, "W", "mean power over the run",
                              higher_is_better=False, method=self.method)
        for label, j in sorted(self._joules.items()):
            if label != "model":
                result.add_metric(f"{p}.{label}.joules", j, "J", f"RAPL {label} energy over the run",
                                  higher_is_better=False, method=self.method)
        return result

    def derive(self, all_metrics: dict[str, Metric]) -> dict[str, Metric]:
        return per_work_metrics(all_metrics, self.name)
