"""vmstat: the system's CPU, memory, swap, block I/O and scheduler figures.

The same numbers procps `vmstat` prints (procps-ng 4, `new_format()` in
vmstat.c), read from /proc/stat, /proc/meminfo, /proc/vmstat and
/proc/loadavg, but as floats and over the measured monotonic interval rather
than vmstat's nominal one:

- us = user + nice - guest - guest_nice; sy = system + irq + softirq;
  id = idle; wa = iowait; st = steal; each over their sum (guest time is
  already counted in user, proc(5)). irq and softirq are also given apart.
- cache = Cached + SReclaimable (procps counts reclaimable slab as cache);
  used = MemTotal - free - buff - cache, as free(1) gives it.
- bi/bo = pgpgin/pgpgout per second, in KiB (the kernel counts them in KiB);
  si/so = pswpin/pswpout pages per second, in KiB.
- in = interrupts, cs = context switches, per second.
"""

from __future__ import annotations

import time
from typing import Any

from perflab.collectors.base import (
    CollectorContext,
    CollectorSettings,
    PanelPart,
    SamplingCollector,
    TelemetryPanel,
    counter_stalled,
)
from perflab.collectors.procfs import (
    CPU_FIELDS,
    PAGE_SIZE_KIB,
    parse_kib_table,
    parse_name_values,
    parse_stat,
    read_text,
    require_readable,
)
from perflab.model import RunResult
from perflab.section import RunGroup, Section

# Panels in the every-run figure; beyond, the runs are in runs/NNN/telemetry.png.
MAX_RUN_PANELS = 48
# Points per run in the every-run figure (bucket means): a small multiple is 2 inches wide.
EVERY_RUN_BUCKETS = 300
# Over a run this long, /proc/stat's CPU ticks, interrupts and context
# switches must have advanced (a tick is 10 ms of one CPU).
MUST_ADVANCE_S = 1.0
CPU_PARTS = (("us_pct", "us (user)", "#2e8b57"), ("sy_pct", "sy (system)", "#c0392b"),
             ("wa_pct", "wa (I/O wait)", "#f39c12"), ("st_pct", "st (steal)", "#8e44ad"))

PROC_FILES = ("/proc/stat", "/proc/meminfo", "/proc/vmstat", "/proc/loadavg")
VMSTAT_COUNTERS = ("pgpgin", "pgpgout", "pswpin", "pswpout")


class VmstatSettings(CollectorSettings):
    pass


def cpu_shares_pct(before: dict[str, int], after: dict[str, int]) -> dict[str, float]:
    """vmstat's us/sy/id/wa/st (and irq, softirq apart) between two /proc/stat readings."""

    def d(field: str) -> int:
        return after.get(f"cpu.{field}", 0) - before.get(f"cpu.{field}", 0)

    guest = d("guest") + d("guest_nice")
    use = max(0, d("user") + d("nice") - guest)
    sys = d("system") + d("irq") + d("softirq")
    # idle can run backwards for a moment on some kernels (vmstat.c says so too)
    idle = max(0, d("idle"))
    parts = {"us": use, "sy": sys, "id": idle, "wa": d("iowait"), "st": d("steal")}
    total = sum(parts.values())
    if total <= 0:
        return {}
    out = {f"{k}_pct": 100.0 * v / total for k, v in parts.items()}
    out["irq_pct"] = 100.0 * d("irq") / total
    out["softirq_pct"] = 100.0 * d("softirq") / total
    return out


class Reading:
    """One read of the four files, stamped on CLOCK_MONOTONIC."""

    __slots__ = ("t_ns", "stat", "mem", "vm", "load1")

    def __init__(self) -> None:
        self.t_ns = time.monotonic_ns()
        self.stat = parse_stat(read_text("/proc/stat"))
        self.mem = parse_kib_table(read_text("/proc/meminfo"))
        self.vm = parse_name_values(read_text("/proc/vmstat"), VMSTAT_COUNTERS)
        self.load1 = float(read_text("/proc/loadavg").split()[0])


def rates(before: Reading, after: Reading) -> dict[str, float]:
    """Per-second figures between two readings, over the measured interval."""
    dt_s = (after.t_ns - before.t_ns) / 1e9
    if dt_s <= 0:
        return {}

    def per_s(table: dict[str, int], old: dict[str, int], key: str) -> float:
        return (table.get(key, 0) - old.get(key, 0)) / dt_s

    out = cpu_shares_pct(before.stat, after.stat)
    out["bi_kib_per_s"] = per_s(after.vm, before.vm, "pgpgin")
    out["bo_kib_per_s"] = per_s(after.vm, before.vm, "pgpgout")
    out["si_kib_per_s"] = per_s(after.vm, before.vm, "pswpin") * PAGE_SIZE_KIB
    out["so_kib_per_s"] = per_s(after.vm, before.vm, "pswpout") * PAGE_SIZE_KIB
    out["in_per_s"] = per_s(after.stat, before.stat, "intr")
    out["cs_per_s"] = per_s(after.stat, before.stat, "ctxt")
    out["forks_per_s"] = per_s(after.stat, before.stat, "processes")
    return out


def _stalled(first: Reading, last: Reading) -> list[str]:
    """The counters of /proc/stat that did not advance from `first` to
    `last`, when that is long enough (MUST_ADVANCE_S) that they must have:
    the sampling thread alone sleeps, wakes and is ticked."""
    if (last.t_ns - first.t_ns) / 1e9 < MUST_ADVANCE_S:
        return []
    stalled = []
    if not any(last.stat.get(f"cpu.{f}", 0) > first.stat.get(f"cpu.{f}", 0) for f in CPU_FIELDS):
        stalled.append("/proc/stat cpu")
    for key in ("intr", "ctxt"):
        if last.stat.get(key, 0) <= first.stat.get(key, 0):
            stalled.append(f"/proc/stat {key}")
    return stalled


def gauges(r: Reading) -> dict[str, float]:
    mem = r.mem
    return {
        "r": float(r.stat.get("procs_running", 0)),
        "b": float(r.stat.get("procs_blocked", 0)),
        "swpd_kib": float(mem.get("SwapTotal", 0) - mem.get("SwapFree", 0)),
        "free_kib": float(mem.get("MemFree", 0)),
        "buff_kib": float(mem.get("Buffers", 0)),
        "cache_kib": float(mem.get("Cached", 0) + mem.get("SReclaimable", 0)),
        # free(1)'s "used": what is neither free nor buffers nor cache
        "used_kib": float(
            mem.get("MemTotal", 0) - mem.get("MemFree", 0) - mem.get("Buffers", 0)
            - mem.get("Cached", 0) - mem.get("SReclaimable", 0)
        ),
        "avail_kib": float(mem.get("MemAvailable", 0)),
        "dirty_kib": float(mem.get("Dirty", 0)),
        "writeback_kib": float(mem.get("Writeback", 0)),
        "load1": r.load1,
    }


class VmstatCollector(SamplingCollector):
    Settings = VmstatSettings
    settings: VmstatSettings
    default_on = True
    # The OSDL DBT-3 durability graphs plotted vmstat's us/sy/id/wa,
    # free/buff/cache and bi/bo for each run; in the colours people read
    # vmstat graphs with: user green, system red, wait amber.
    panels = (
        TelemetryPanel("CPU (vmstat, all CPUs)", "% of CPU", parts=(
            PanelPart("us_pct", "us (user)", "#2e8b57"),
            PanelPart("sy_pct", "sy (system)", "#c0392b"),
            PanelPart("wa_pct", "wa (I/O wait)", "#f39c12"),
            PanelPart("st_pct", "st (steal)", "#8e44ad"),
            PanelPart("id_pct", "id (idle)", "#dfe6e9"),
        ), stacked=True, ymax=100),
        # stacked to the machine's memory: at a glance, how much is page cache
        TelemetryPanel("memory (vmstat)", "GiB", parts=(
            PanelPart("used_kib", "used", "#c0392b"),
            PanelPart("buff_kib", "buff", "#e67e22"),
            PanelPart("cache_kib", "cache", "#27ae60"),
            PanelPart("free_kib", "free", "#d6eaf8"),
        ), stacked=True, divisor=2**20),
        TelemetryPanel("block I/O (vmstat bi/bo)", "MiB/s", parts=(
            PanelPart("bi_kib_per_s", "bi (read)", "#2980b9"),
            PanelPart("bo_kib_per_s", "bo (written)", "#c0392b"),
        ), divisor=1024),
    )

    def __init__(self, name: str, settings: VmstatSettings) -> None:
        super().__init__(name, settings)
        self._first: Reading | None = None
        self._last: Reading | None = None
        self._min_free_kib = float("inf")
        self._min_avail_kib = float("inf")
        self._max_dirty_kib = 0.0

    def open(self, ctx: CollectorContext) -> None:
        require_readable(*PROC_FILES)
        self._first = self._last = None

    def sample(self) -> dict[str, float]:
        now = Reading()
        values = gauges(now)
        if self._last is not None:
            values.update(rates(self._last, now))
        else:
            self._first = now
        self._last = now
        self._min_free_kib = min(self._min_free_kib, values["free_kib"])
        self._min_avail_kib = min(self._min_avail_kib, values["avail_kib"])
        self._max_dirty_kib = max(self._max_dirty_kib, values["dirty_kib"])
        return values

    def summary(self) -> RunResult:
        """Run means from the first reading to the last, taken at stop (exact,
        not a mean of per-interval figures), and memory extremes."""
        result = RunResult()
        if self._first is None or self._last is None:
            return result
        whole = rates(self._first, self._last)
        if not whole:
            return result
        p = self.name
        stalled = _stalled(self._first, self._last)
        if "/proc/stat cpu" not in stalled:
            for key, text in (("us", "user"), ("sy", "system (incl. irq, softirq)"), ("id", "idle"),
                              ("wa", "I/O wait"), ("st", "steal")):
                result.add_metric(f"{p}.{key}_pct", whole.get(f"{key}_pct", 0.0), "%",
                                  f"CPU {text} time over the run, all CPUs")
        for key, unit, text, counter in (
            ("bi_kib_per_s", "KiB/s", "blocks read from block devices", None),
            ("bo_kib_per_s", "KiB/s", "blocks written to block devices", None),
            ("si_kib_per_s", "KiB/s", "swapped in", None),
            ("so_kib_per_s", "KiB/s", "swapped out", None),
            ("in_per_s", "1/s", "interrupts", "/proc/stat intr"),
            ("cs_per_s", "1/s", "context switches", "/proc/stat ctxt"),
        ):
            if counter not in stalled:
                result.add_metric(f"{p}.{key}", whole[key], unit, f"mean over the run: {text}")
        if stalled:
            counter_stalled(result, p, stalled, (self._last.t_ns - self._first.t_ns) / 1e9,
                            "a running host's CPU ticks, context switches and interrupts always do")
        result.add_metric(f"{p}.free_kib_min", self._min_free_kib, "KiB", "least free memory sampled")
        result.add_metric(f"{p}.avail_kib_min", self._min_avail_kib, "KiB", "least available memory sampled")
        result.add_metric(f"{p}.dirty_kib_max", self._max_dirty_kib, "KiB", "most dirty page cache sampled")
        return result

    @classmethod
    def report_sections(cls, groups: list[RunGroup]) -> list[Section]:
        """vmstat's CPU shares for every run, a small multiple each on one
        time axis and one 0-100% scale, in the order the runs ran (the
        DBT-3 durability study read each run's vmstat side by side), so a run
        that drifts shows beside the others rather than only in its own
        runs/NNN/telemetry.png."""
        runs = sorted(((run, g) for g in groups for run in g.runs if g.read_series is not None),
                      key=lambda pair: pair[0]["id"])
        if len(runs) < 2:
            return []
        series: list[tuple[dict[str, Any], RunGroup, dict[str, tuple[list[float], list[float]]]]] = []
        for run, g in runs[:MAX_RUN_PANELS]:
            assert g.read_series is not None
            lines: dict[str, tuple[list[float], list[float]]] = {}
            if g.read_envelope is not None:  # each part's mean per bucket: a three-day run draws as a short one
                for name, _, _ in CPU_PARTS:
                    buckets = g.read_envelope(run["id"], "vmstat", name, EVERY_RUN_BUCKETS)
                    if len(buckets):
                        lines[name] = ([float(b[0]) for b in buckets], [float(b[3]) for b in buckets])
            else:
                for row in g.read_series(run["id"], "vmstat"):
                    if row["name"] in {p for p, _, _ in CPU_PARTS}:
                        ts, vs = lines.setdefault(row["name"], ([], []))
                        ts.append(float(row["t"]))
                        vs.append(float(row["value"]))
            if lines and min(len(ts) for ts, _ in lines.values()) >= 2:  # one sample draws no area
                series.append((run, g, lines))
        if len(series) < 2:
            return []
        import matplotlib

        matplotlib.use("Agg")
        import numpy as np
        from matplotlib.figure import Figure as MplFigure

        from perflab.section import Figure, Text

        cols = min(6, len(series))
        nrows = (len(series) + cols - 1) // cols
        fig = MplFigure(figsize=(2.1 * cols + 1.4, 1.5 * nrows + 0.6), layout="constrained")
        axes = fig.subplots(nrows, cols, sharex=True, sharey=True, squeeze=False)
        for i, (run, g, lines) in enumerate(series):
            ax = axes[i // cols][i % cols]
            first = next(iter(lines.values()))[0]
            bottom = np.zeros(len(first))
            for name, label, colour in CPU_PARTS:
                ts, vs = lines.get(name, (first, [0.0] * len(first)))
                if len(vs) != len(first):
                    continue
                top = bottom + np.asarray(vs)
                ax.fill_between(first, bottom, top, color=colour, linewidth=0, label=label if i == 0 else None)
                bottom = top
            ax.set_ylim(0, 100)
            ax.set_title(f"#{run['id']} {g.label}"[:48], fontsize=6)
            ax.tick_params(labelsize=6)
        for j in range(len(series), nrows * cols):
            axes[j // cols][j % cols].set_visible(False)
        fig.supxlabel("seconds since the run's start", fontsize=7)
        fig.supylabel("% of CPU (all CPUs)", fontsize=7)
        fig.legend(loc="outside upper center", ncol=len(CPU_PARTS), fontsize=7)
        blocks: list[Any] = [Figure("vmstat-every-run", fig,
                                    "vmstat CPU for every run (stacked us, sy, wa, st; the rest is idle), one "
                                    "panel per run in the order they ran, on shared axes")]
        if len(series) < min(len(runs), MAX_RUN_PANELS):
            blocks.append(Text("Runs with fewer than two vmstat samples are left out."))
        if len(runs) > MAX_RUN_PANELS:
            blocks.append(Text(f"The first {MAX_RUN_PANELS} of {len(runs)} runs are drawn; every run's own "
                               "figure is in runs/NNN/telemetry.png."))
        return [Section("vmstat, every run", blocks)]
