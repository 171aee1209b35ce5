"""What every report section shares: the context it renders from (the store,
its data, the figures directory and the helpers more than one section uses)
and the registry a section joins by declaration.

A section is one class with one method, `render(ctx)`, returning its parts as
(anchor, title, body HTML), none when it has nothing to say; `@register(rank=N)`
in the section's own module puts it in the report, the lowest rank first (as
criterion's `Report` trait: the report is the composite of its sections)."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from perflab.analysis.stats import (
    BOOTSTRAP_MIN_N,
    BOOTSTRAP_RESAMPLES,
    MIN_INTERVAL_N,
    WIDE_FACTOR,
    NoiseFloor,
    Summary,
)
from perflab.collectors import COLLECTORS
from perflab.collectors.hostnoise import NOISY_HOST_CORES, SATURATED_IDLE_PCT
from perflab.model import Flag, without_label
from perflab.report import durability, figures
from perflab.report import html as h
from perflab.report.data import ReportData
from perflab.section import Figure, RunGroup, Section, Table, Text
from perflab.store import Store
from perflab.workloads import WORKLOADS

if TYPE_CHECKING:
    from matplotlib.figure import Figure as MplFigure

SectionHtml = tuple[str, str, str]  # anchor, title, body

# Bounds that keep a report of hundreds of runs readable and quick to write;
# every run is still in the tables and the embedded data.
MAX_LINES_PER_FIGURE = 10

# What each of a run's marks (store.RUN_MARKS: Store.run_marks) means, as the report explains it.
MARK_MEANING = {
    "resumed": "an earlier attempt of the run was interrupted or killed, and the run was run again (undoing "
               "what that attempt changed in the data, or recording what it left)",
    "retried": "an earlier attempt of the run failed, and `resume --retry-failed` ran it again",
    "fresh load": "the data set was loaded again for the run (other runs had used it, or an earlier attempt "
                  "changed it beyond undoing): its figures are from fresh data, not from the data the runs "
                  "before it left",
}


def limit_notes(values: dict[str, Any]) -> list[str]:
    """A run's late and skipped transactions (latency_limit), where any: "late 12"."""
    return [f"{name} {values[name]:.0f}" for name in ("late", "skipped") if values.get(name)]


def short(factor: str) -> str:
    """A factor's last part, as table headers name it: "clients" for workload.clients."""
    return factor.rsplit(".", 1)[-1]


class ReportSection(Protocol):
    rank: int

    def render(self, ctx: ReportContext) -> list[SectionHtml]: ...


SECTIONS: list[type[ReportSection]] = []


def register(rank: int) -> Callable[[type], type]:
    """Declare a report section: the class joins the report at `rank` (the
    lowest first); two sections may not share a rank."""
    def add(cls: type) -> type:
        taken = {s.rank: s for s in SECTIONS}
        if rank in taken:
            raise ValueError(f"report sections {taken[rank].__name__} and {cls.__name__} share rank {rank}")
        cls.rank = rank  # type: ignore[attr-defined]
        SECTIONS.append(cls)
        return cls
    return add


class ReportContext:
    """The store and its data as the sections read them, the figures they
    write, and what more than one section asks (asked once per report)."""

    def __init__(self, store: Store, data: ReportData, figures_dir: Path) -> None:
        self.store = store
        self.data = data
        self.figures_dir = figures_dir
        self._figure_names: set[str] = set()

    def figure(self, fig: MplFigure, name: str, caption: str) -> str:
        name = figures.file_name(name)
        base, n = name, 2
        while name in self._figure_names:  # two workloads may pick one name
            name, n = f"{base}-{n}", n + 1
        self._figure_names.add(name)
        try:
            svg = figures.save(fig, self.figures_dir, name)
        finally:
            fig.clear()
            # a workload's figure made with pyplot stays in pyplot's list until closed (past 20,
            # matplotlib warns); closing one pyplot never had is a no-op
            pyplot = sys.modules.get("matplotlib.pyplot")
            if pyplot is not None:
                pyplot.close(fig)
        return h.figure(svg, caption, name)

    def metric_label(self, name: str) -> str:
        info = self.data.metrics.get(name)
        return info.label if info else name

    def ci_note(self) -> str:
        return (
            f"95% CI: none below {MIN_INTERVAL_N} runs (the runs' values are shown instead). Positive figures "
            "(rates, latencies, energy): the interval of the geometric mean, the Student t interval of the mean "
            "of the logarithms exponentiated (Limpert, Stahel & Abbt 2001; Bland & Altman 1996), never below "
            f"zero. Figures that can be 0 or negative: Student t when n < {BOOTSTRAP_MIN_N} (cut at 0 when no "
            f"value is negative), else percentile bootstrap ({BOOTSTRAP_RESAMPLES:,} resamples, seed "
            f"{self.data.experiment['seed']}). An interval whose upper bound is more than x{WIDE_FACTOR:g} its "
            f"lower (or wider than x{WIDE_FACTOR:g} the values' range) reads \"too few runs\""
        )

    def ci_text(self, s: Summary) -> str:
        """A summary's interval as the tables print it: the values themselves
        below MIN_INTERVAL_N, "too few runs" when it is too wide to inform."""
        if s.n < MIN_INTERVAL_N:
            return f"n={s.n}: " + "; ".join(h.fmt(v) for v in s.values)
        if s.interval.too_wide:
            return "too few runs"
        return h.fmt_interval(s.interval)

    def noise_floors(self) -> dict[str, NoiseFloor | None]:
        return {name: self.data.noise_floor(name) for name in self.data.headline}

    def done_runs(self) -> list[dict[str, Any]]:
        return [r for r in self.data.runs if r["status"] == "done"]

    def flag_counts(self) -> str:
        """How many finished runs carry each flag, with the figure behind the
        measured ones (host noise, idle, energy below idle)."""
        done = self.done_runs()
        counts: dict[str, int] = {}
        for r in done:
            for f in r["flags"]:
                counts[f] = counts.get(f, 0) + 1
        values = self.data.values

        def extreme(flag: str, metric: str, pick: Callable[..., float]) -> float | None:
            found = [values[r["id"]][metric] for r in done if flag in r["flags"] and metric in values.get(r["id"], {})]
            return pick(found) if found else None

        figures = {
            Flag.NOISY_HOST.value: (extreme(Flag.NOISY_HOST, "host.noise_cores", max),
                                    f"other processes + steal up to {{:.2f}} cores; threshold {NOISY_HOST_CORES}"),
            Flag.CPU_SATURATED.value: (extreme(Flag.CPU_SATURATED, "host.shared_idle_pct", min),
                                       f"idle down to {{:.1f}}%; threshold {SATURATED_IDLE_PCT:g}%"),
            Flag.ENERGY_BELOW_IDLE.value: (extreme(Flag.ENERGY_BELOW_IDLE, "energy.joules_above_idle", min),
                                           "above idle down to {:.3g} J"),
        }
        parts = []
        for flag, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            value, text = figures.get(flag, (None, ""))
            parts.append(f"{flag} {n} of {len(done)}" + (f" ({text.format(value)})" if value is not None else ""))
        noise = [values[r["id"]]["host.noise_cores"] for r in done if "host.noise_cores" in values.get(r["id"], {})]
        quiet = (f"; host noise in every run: at most {max(noise):.3f} cores (noisy-host above {NOISY_HOST_CORES})"
                 if noise and Flag.NOISY_HOST.value not in counts else "")
        return "flags on finished runs: " + ("; ".join(parts) if parts else "none") + quiet

    def baseline_level(self, factor: str) -> Any:
        """The level a factor's other levels are compared with: the one the
        file names in [experiment.baseline], else the first."""
        named = self.data.spec.get("experiment", {}).get("baseline", {})
        levels = self.data.factor_values[factor]
        if isinstance(named, dict) and factor in named:
            # a table level is stored with its label; the file may name it without one
            for level in levels:
                if without_label(level) == without_label(named[factor]):
                    return level
        return levels[0]

    def run_marks(self) -> dict[int, list[str]]:
        """By run: resumed, retried, fresh load (the store's attempts and effects)."""
        if not hasattr(self, "_run_marks"):
            self._run_marks = self.store.run_marks()
        return self._run_marks

    def run_groups(self) -> list[RunGroup]:
        """The combinations as plain data for collectors' report sections."""
        d = self.data
        return [RunGroup(combo.index, combo.label(),
                         [{**d.runs_by_id[r], "metrics": d.values.get(r, {})} for r in combo.run_ids],
                         read_series=self.store.series, read_queries=self.store.queries,
                         read_envelope=lambda *a: durability.envelope(self.store, *a))
                for combo in d.combinations]

    def workload_section_list(self) -> list[tuple[str, str, list[Section] | str]]:
        """(anchor, kind, its sections or the error body) per workload kind,
        asked once: the summary shows the headline section, the workload's
        place below shows them all."""
        if "_workload_sections" in self.__dict__:
            return list(self.__dict__["_workload_sections"])
        d = self.data
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for run in d.runs:
            kind = d.workload_kind(run)
            if kind is not None:
                by_kind.setdefault(kind, []).append(run)
        out: list[tuple[str, str, list[Section] | str]] = []
        for kind, runs in sorted(by_kind.items()):
            if kind not in WORKLOADS:
                continue
            try:
                out.append((f"workload-{kind}", kind, WORKLOADS.get(kind).report_sections(self.store, runs)))
            except Warning:  # a warning made an error (the tests' filter): not the section's to swallow
                raise
            except Exception as exc:  # the rest of the report is still worth writing
                body = h.note(f"the {kind} workload's report section failed: {type(exc).__name__}: {exc}", "bad")
                body += h.details("traceback", h.pre(traceback.format_exc()))
                out.append((f"workload-{kind}", kind, body))
        from perflab import search

        found = search.report_sections(self.store)  # a capacity search's answer leads: the experiment's question
        if found:
            out.insert(0, ("search", "capacity search", found))
        self.__dict__["_workload_sections"] = out
        return list(out)

    def collector_section_list(self) -> list[tuple[str, str, list[Section] | str]]:
        """(anchor, collector, its sections or the error note) per collector, asked once."""
        if "_collector_sections" in self.__dict__:
            return list(self.__dict__["_collector_sections"])
        groups = self.run_groups()
        out: list[tuple[str, str, list[Section] | str]] = []
        for name in COLLECTORS.in_registration_order():
            try:
                out.append((f"telemetry-{name}", name, COLLECTORS.get(name).report_sections(groups)))
            except Warning:  # a warning made an error (the tests' filter): not the section's to swallow
                raise
            except Exception as exc:  # the rest of the report is still worth writing
                out.append((f"telemetry-{name}", name, h.note(
                    f"the {name} collector's report section failed: {type(exc).__name__}: {exc}", "bad")))
        self.__dict__["_collector_sections"] = out
        return list(out)

    def render_section(self, section: Section) -> str:
        parts = []
        for block in section.blocks:
            if isinstance(block, Text):
                parts.append(f"<p>{h.esc(block.text)}</p>")
            elif isinstance(block, Table):
                parts.append(h.table(block.headers, block.rows, caption=block.caption))
            elif isinstance(block, Figure):
                parts.append(self.figure(block.figure, block.name, block.caption))
        return "".join(parts)
