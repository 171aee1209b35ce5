"""Builds the report's HTML from ReportData: one method per section."""

from __future__ import annotations

import json
import math
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflab.analysis import degradation, effects, scaling
from perflab.analysis.degradation import Degradation
from perflab.analysis.stats import (
    BOOTSTRAP_MIN_N,
    BOOTSTRAP_RESAMPLES,
    HIGH_CV,
    MIN_INTERVAL_N,
    MIN_VERDICT_N,
    MODIFIED_Z_THRESHOLD,
    REPETITIONS_NOTE,
    SIGNIFICANCE,
    TARGET_HALF_WIDTH,
    WIDE_FACTOR,
    NoiseFloor,
    Summary,
    repetitions_for,
)
from perflab.collectors import COLLECTORS
from perflab.collectors.hostnoise import NOISY_HOST_CORES, SATURATED_IDLE_PCT
from perflab.model import Flag, fmt_factors, fmt_level, natural_key, without_label
from perflab.report import durability, effects_table, figures, latency
from perflab.report import html as h
from perflab.report.data import Combination, ReportData, applied, flatten, representative_run
from perflab.section import Figure, RunGroup, Section, Table, Text
from perflab.store import Store
from perflab.targets.confine import format_bytes
from perflab.workloads import WORKLOADS

if TYPE_CHECKING:
    from matplotlib.figure import Figure as MplFigure

# Bounds that keep a report of hundreds of runs readable and quick to write;
# every run is still in the tables and the embedded data.
MAX_LINES_PER_FIGURE = 10
MAX_SERIES_FIGURES = 6
MAX_RUN_PANELS = 8
MAX_DEGRADATION_DETAILS = 4
DEGRADATION_MIN_RUNS = degradation.MIN_RUNS
LATENCY_TABLE_PERCENTILES = (50.0, 90.0, 99.0, 99.9, 99.99)

SectionHtml = tuple[str, str, str]  # anchor, title, body


def _finite(value: Any) -> Any:
    """JSON-safe: NaN and infinities become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


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


def _short(factor: str) -> str:
    return factor.rsplit(".", 1)[-1]


class ReportBuilder:
    def __init__(self, store: Store, data: ReportData, figures_dir: Path) -> None:
        self.store = store
        self.data = data
        self.figures_dir = figures_dir
        self._figure_names: set[str] = set()

    # ------------------------------------------------------------------ helpers

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

    # ------------------------------------------------------------------ page

    def render(self) -> str:
        builders: list[Callable[[], list[SectionHtml]]] = [
            lambda: durability.section(self),  # a durability study's own first screen
            self.summary,
            self.factor_effects,
            self.results,
            self.failures,
            self.scaling,
            self.latency,
            self.telemetry,
            self.degradation,
            self.workload_sections,
            self.history,
            self.experiment,
            self.plan,
        ]
        sections: list[SectionHtml] = []
        for build in builders:
            sections += build()
        body = "".join(f'<section id="{h.esc(a)}"><h2>{h.esc(t)}</h2>{b}</section>' for a, t, b in sections)
        nav = [(a, t) for a, t, _ in sections]
        exp = self.data.experiment
        return h.page(f"perflab: {exp['name']}", self.header(), nav, body, self.embedded_data())

    def header(self) -> str:
        exp, runs = self.data.experiment, self.data.runs
        counts: dict[str, int] = {}
        for r in runs:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        host = exp["host"]
        host_line = " · ".join(
            str(x)
            for x in (
                host.get("hostname"),
                host.get("cpu_model"),
                f"{host.get('cores')} cores" if host.get("cores") else None,
                f"{host['memory_bytes'] / 2**30:.1f} GiB" if host.get("memory_bytes") else None,
                host.get("kernel"),
            )
            if x
        )
        description = self.data.spec.get("experiment", {}).get("description", "")
        count_html = "".join(
            f'<a href="#failures" style="color:#ffb3b3">{n} failed</a>' if s == "failed" else
            f"<span>{h.esc(n)} {h.esc(s)}</span>"
            for s, n in sorted(counts.items()) if n
        )
        return (
            f"<h1>{h.esc(exp['name'])}</h1>"
            + (f'<div class="sub">{h.esc(description)}</div>' if description else "")
            + f'<div class="sub">created {h.esc(exp["created_at"])} · perflab {h.esc(host.get("perflab", "?"))}'
            f" · {h.esc(host_line)}</div>"
            f'<div class="sub counts">runs: {count_html}</div>'
            f'<div class="sub counts">{h.esc(self.flag_counts())}</div>'
        )

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

    def embedded_data(self) -> dict[str, Any]:
        d = self.data
        exp = d.experiment
        return _finite(
            {
                "experiment": {
                    k: exp[k] for k in ("name", "created_at", "seed", "factors", "host", "spec_path")
                },
                "headline": d.headline,
                "metrics": {
                    m.name: {
                        "unit": m.unit,
                        "higher_is_better": m.higher_is_better,
                        "methods": sorted(m.methods),
                        "description": m.description,
                    }
                    for m in d.metrics.values()
                },
                "runs": [
                    {
                        "id": r["id"],
                        "combination": r["combination"],
                        "repetition": r["repetition"],
                        "factors": r["factors"],
                        "status": r["status"],
                        "seconds": r["seconds"],
                        "flags": r["flags"],
                        "metrics": d.values.get(r["id"], {}),
                    }
                    for r in d.runs
                ],
                "combinations": [
                    {
                        "index": c.index,
                        "factors": c.factors,
                        "runs": c.run_ids,
                        "summaries": {
                            name: {
                                "n": s.n,
                                "mean": s.mean,
                                "ci_low": s.interval.low if s.interval.shown else None,
                                "ci_high": s.interval.high if s.interval.shown else None,
                                "ci_method": s.interval.method,
                                "ci_too_wide": s.interval.too_wide,
                                "values": s.values,
                                "cv": s.cv,
                                "warnings": s.warnings,
                            }
                            for name, s in c.summaries.items()
                        },
                    }
                    for c in d.combinations
                ],
            }
        )

    # ------------------------------------------------------------------ summary

    def headline_sections(self) -> list[tuple[str, Section]]:
        """The study's headline sections, with their anchors: the first a
        workload marks `headline`, then the first each collector marks (the
        storage study's fsync table beside its TPS, the energy study's
        joules beside its queries)."""
        def first_headlines(listing: list[tuple[str, str, list[Section] | str]]) -> list[tuple[str, Section]]:
            found = []
            for anchor, _, sections in listing:
                if isinstance(sections, str):
                    continue
                found += [(f"{anchor}-{i}", section) for i, section in enumerate(sections, start=1)
                          if section.headline][:1]
            return found

        return first_headlines(self.workload_section_list())[:1] + first_headlines(self.collector_section_list())

    def summary(self) -> list[SectionHtml]:
        """The first screen answers the question: what was varied (each
        factor's levels by label, in the file's order), the study's headline
        table (a workload's headline section, else one row per combination
        of the Results), and the flags (failed, noisy or otherwise marked runs)."""
        d = self.data
        meta = d.spec.get("experiment", {}) if isinstance(d.spec.get("experiment"), dict) else {}
        reps = meta.get("repetitions", 1)
        varied = {f: levels for f, levels in d.factor_values.items() if len(levels) >= 2}
        if d.factor_values:
            items = "".join(
                f"<li><b>{h.esc(f)}</b>: {h.esc(' | '.join(fmt_level(v) for v in levels))}"
                + (" (one level: fixed)" if len(levels) < 2 else "") + "</li>"
                for f, levels in d.factor_values.items())
            what = (f"<p>Varied: {len(varied)} factor(s), {len(d.combinations)} combination(s) x {reps} "
                    f"repetition(s), run in {h.esc(effects_table.design_words(d))}.</p>"
                    f"<ul class=\"varied\">{items}</ul>")
        else:
            what = f"<p>Nothing varied: {reps} repetition(s) of one set-up.</p>"
        servers = self.server_names()
        if servers:
            what += f"<p>Server{'s' if len(servers) > 1 else ''} that ran: {h.esc(', '.join(servers))}.</p>"
        parts = [what]
        shown_table = False
        for anchor, section in self.headline_sections():
            blocks: list[Text | Table | Figure] = [b for b in section.blocks if isinstance(b, (Table, Text))]
            shown_table = shown_table or any(isinstance(b, Table) for b in blocks)
            parts.append(f"<h3>{h.esc(section.title)}</h3>" + self.render_section(Section(section.title, blocks)))
            if any(isinstance(b, Figure) for b in section.blocks):
                parts.append(f'<p class="note">Its figures: <a href="#{h.esc(anchor)}">{h.esc(section.title)}</a>.</p>')
        if not shown_table:
            parts.append("<h3>Results</h3>" + self.summary_table())
        parts.append("<h3>Flags</h3>" + self.summary_flags())
        return [("summary", "Summary", "".join(parts))]

    def server_names(self) -> list[str]:
        """Each server version the runs used, as its target described it
        ("PostgreSQL 18.6"), in natural order."""
        names = set()
        for r in self.data.runs:
            t = r.get("target")
            if not isinstance(t, dict):
                continue
            name = t.get("server")
            if not name and t.get("server_version") and t.get("kind") == "postgres":
                name = f"PostgreSQL {str(t['server_version']).split()[0]}"
            if name:
                names.add(str(name))
        return sorted(names, key=natural_key)

    def summary_table(self) -> str:
        """One row per combination: the varied factors' levels and each
        headline metric's mean with its interval (or the runs' values)."""
        d = self.data
        if not d.combinations:
            return h.note("The plan is empty.")
        shown = [f for f, levels in d.factor_values.items() if len(levels) >= 2] or list(d.factor_values)
        headers = [*[_short(f) for f in shown], "runs"]
        for name in d.headline:
            headers += [self.metric_label(name), "95% CI"]
        rows = []
        for combo in d.combinations:
            row: list[Any] = [*[fmt_level(combo.factors.get(f)) for f in shown],
                              f"{len(combo.run_ids)}" + (f" ({len(combo.failed_ids)} failed)" if combo.failed_ids else "")]
            for name in d.headline:
                s = combo.summaries.get(name)
                row += ["–", "–"] if s is None else [s.mean, h.td(self.ci_text(s), "num")]
            rows.append(row)
        return h.table(headers, rows, caption="Each row is one combination of the factors over its finished "
                       "repetitions (Results has the CV, warnings and noise floor; Effects tests each level against "
                       "its baseline).")

    def summary_flags(self) -> str:
        """Failed runs and each flag, with the combinations that carry it."""
        d = self.data
        failed = [r for r in d.runs if r["status"] == "failed"]
        items = []
        if failed:
            items.append(f'<li class="bad">{len(failed)} failed run(s): '
                         + ", ".join(f"#{r['id']}" for r in failed) + ' (<a href="#failures">Failures</a>)</li>')
        by_flag: dict[str, list[int]] = {}
        for combo in d.combinations:
            for r in combo.run_ids:
                for flag in d.runs_by_id[r]["flags"]:
                    by_flag.setdefault(flag, [])
                    if combo.index not in by_flag[flag]:
                        by_flag[flag].append(combo.index)
        for flag, combos in sorted(by_flag.items()):
            n = sum(1 for r in d.runs if r["status"] == "done" and flag in r["flags"])
            items.append(f'<li class="warn">{h.esc(flag)}: {n} run(s), in combination(s) '
                         + h.esc(", ".join(f"#{c}" for c in combos)) + "</li>")
        listing = f"<ul>{''.join(items)}</ul>" if items else "<p>No run failed and no run is flagged.</p>"
        return listing + h.note(self.flag_counts() + ". What each flag means is under Results.")

    # ------------------------------------------------------------------ effects

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

    def effect_rows(self) -> list[tuple[str, Any, Any, dict[str, Any], str, effects.Effect, float, float, int, int]]:
        """(factor, level, baseline, other factors' levels, metric, effect,
        mean at baseline, mean at level, n baseline, n level) for every factor
        with two or more levels, each level against the baseline, at each
        combination of the other factors (an effect may differ between them)."""
        d = self.data
        out = []
        # levels that resolve to one set-up are no effect: their runs are the noise floor's
        setup_of = {r: i for i, group in enumerate(d.setups()) for c in group for r in c.run_ids}
        for factor, level, base, context, a_ids, b_ids in effects_table.comparisons(d, self.baseline_level):
            for name in d.headline:
                a = [d.values[r][name] for r in a_ids if name in d.values.get(r, {})]
                b = [d.values[r][name] for r in b_ids if name in d.values.get(r, {})]
                if not a or not b:
                    continue
                found = effects.effect(a, b, d.metrics[name].higher_is_better, seed=d.experiment["seed"],
                                       pairs=effects_table.pairs(d, a_ids, b_ids, name),
                                       pilot=effects_table.pilot(d))
                if found.verdict != effects.UNDEFINED and \
                        len({setup_of.get(r) for r in a_ids + b_ids}) == 1 and a_ids[0] in setup_of:
                    found = effects.same_setup(found)
                out.append((factor, level, base, context, name, found, sum(a) / len(a), sum(b) / len(b),
                            len(a), len(b)))
        # one report, many comparisons: Benjamini-Hochberg over all of them,
        # and no change called within the metric's noise floor
        floors = self.noise_floors()  # a paired comparison's: that of its blocks' mean ratio
        settled = effects.settle([row[5] for row in out],
                                 [effects_table.within_block_floor(d, row[4], row[5].paired) if row[5].paired
                                  else floors.get(row[4]) for row in out])
        return [(*row[:5], found, *row[6:]) for row, found in zip(out, settled, strict=True)]

    def factor_effects(self) -> list[SectionHtml]:
        """The answer to "does this factor matter?": each level against the
        baseline level, as a ratio with its CI and a verdict, as `compare`
        gives between two experiments."""
        d = self.data
        varied = [f for f, levels in d.factor_values.items() if len(levels) >= 2]
        if not varied:
            return []
        from perflab import search

        searched = search.settings_of(self.store.experiment()["spec_text"])
        if searched is not None:  # a search's rates are probes, not treatments: no effect between them is asked
            return [("effects", "Effects", h.note(
                f"A capacity search varies {searched.over} to find the highest value that meets {searched.goal}: its "
                "levels are probes, not treatments, so no level is compared with another here. The answer and "
                "every probe are under Capacity search."))]
        rows_found = self.effect_rows()
        if not rows_found:
            return [("effects", "Effects", h.note("No factor level has finished runs beside its baseline's."))]
        answers, rows, classes = [], [], []
        untested: dict[tuple[str, str], int] = {}
        # The metric each answer is about: each run's first headline metric it
        # has, so an experiment of several workloads (TPC-B's tps beside TPC-H's
        # power_at_size) answers for each, not only for the first run's.
        leads = [name for name in d.headline
                 if any(next((m for m in r["headline"] if m in d.values.get(r["id"], {})), None) == name
                        for r in d.runs)] or d.headline[:1]
        for factor, level, base, context, name, found, mean_a, mean_b, n_a, n_b in rows_found:
            where = fmt_factors(context, ", ") or "all runs"
            ratio = found.ratio
            ci = (f"[{ratio.low:.3f}, {ratio.high:.3f}]" if ratio.shown else
                  f"too wide (over x{WIDE_FACTOR:g}): too few runs" if ratio.too_wide else "–")
            estimate = "undefined" if found.verdict == effects.UNDEFINED else f"{ratio.estimate:.3f}"
            if name in leads:
                if not found.tested:
                    untested[name, found.verdict] = untested.get((name, found.verdict), 0) + 1
                else:
                    verdict = {"better": "better", "worse": "worse", "differs": "different",
                               effects.NO_DIFFERENCE: "no significant change",
                               effects.WITHIN_NOISE: "within the noise floor, no change called"}.get(
                                   found.verdict, found.verdict)
                    if found.verdict == effects.NO_DIFFERENCE and ratio.too_wide:
                        verdict = "no significant change, and too few runs to rule one out"
                    if found.verdict in (effects.NO_DIFFERENCE, effects.WITHIN_NOISE) and found.power_note():
                        verdict += f" ({found.power_note()})"
                    if found.budget_note:
                        verdict += f" ({found.budget_note})"
                    answers.append(
                        f"{_short(factor)} = {fmt_level(level)} against {fmt_level(base)}"
                        + (f" (at {where})" if context else "")
                        + f": {name} x{estimate}, "
                        + (f"95% CI wider than x{WIDE_FACTOR:g}" if ratio.too_wide else f"95% CI {ci}")
                        + f": {verdict}"
                    )
            verdict_class = {"better": "good", "worse": "bad"}.get(found.verdict, "")
            rows.append([
                _short(factor), fmt_level(level), fmt_level(base), where, f"{name} ({d.metrics[name].unit})",
                h.td(f"{estimate} {ci}" if found.verdict != effects.UNDEFINED else "undefined", "num"),
                h.td(found.verdict, verdict_class),
                mean_a, mean_b, f"{n_a}/{n_b}", found.method,
                "–" if found.p_value is None or found.q_value is None else f"{found.p_value:.3g} ({found.q_value:.3g})",
            ])
            classes.append("changed" if found.verdict in ("better", "worse", "differs") else "")
        untested_why = {
            effects.UNDEFINED: "with a ratio undefined (a side is 0 or not a number)",
            effects.TOO_FEW: f"with fewer than {MIN_VERDICT_N} runs a side",
            effects.SAME_SETUP: "between levels that ran one set-up (their spread is in the noise floor)",
        }
        for lead in leads:
            said = {v: n for (m, v), n in untested.items() if m == lead}
            if said:
                answers.append(
                    f"{lead}: not tested: "
                    + "; ".join(f"{n} comparison(s) {untested_why[v]}" for v, n in sorted(said.items()))
                    + (f" ({REPETITIONS_NOTE})" if effects.TOO_FEW in said else "")
                )
        listing = "".join(f"<li>{h.esc(a)}</li>" for a in answers)
        named = self.data.spec.get("experiment", {}).get("baseline")
        how = ("the baseline is the level named in [experiment.baseline]" if named else
               "the baseline is each factor's first level (name another in [experiment.baseline])")
        changed = sum(1 for c in classes if c)
        body = (
            f'<ul class="answers">{listing}</ul>'
            # the full list of pairwise comparisons, folded: the answers above say what it found
            + h.details(
                f"all {len(rows)} pairwise comparisons (each level against its baseline, per metric; "
                f"{changed} changed)",
                h.table(
                    ["factor", "level", "baseline", "other factors", "metric", "ratio [95% CI]", "verdict",
                     "baseline mean", "level mean", "n", "test", "p (q, BH)"],
                    rows, row_classes=classes,
                    caption=f"Each level of each factor against the baseline (ratio = level / baseline), at each "
                    f"combination of the other factors; {how}. better/worse follow the metric's direction. "
                    f"{effects.LEGEND}",
                ))
            + effects_table.query_section(d, self.store, self.baseline_level)
            + (h.note(effects_table.blocking_note(d, leads)) if d.blocks() else "")
            + h.note(f"{sum(1 for r in rows_found if r[5].tested)} comparisons were tested in this report; their "
                     "p-values are adjusted for the false discovery rate (Benjamini & Hochberg 1995) and a change "
                     f"is called where q < {SIGNIFICANCE} and the ratio is outside the metric's noise floor "
                     "(Results: Noise floor).")
        )
        # A memory limit or a scratch filesystem as a factor: what its levels mean, beside their effects.
        conditions = [n for n in self.condition_notes()
                      if any(("resources.memory" in f) if "memory-limited" in n else ("storage." in f and "_fs" in f)
                             for f in varied)]
        return [("effects", "Effects of the factors", body + "".join(conditions))]

    # ------------------------------------------------------------------ results

    def combination_warnings(self, combo: Combination) -> list[str]:
        """Short warnings, one per metric ("tps: CV 5.3%, outlier #6"), then failures."""
        out = []
        many = len(self.data.headline) > 1
        for name, s in combo.summaries.items():
            found = []
            if math.isfinite(s.cv) and s.cv > HIGH_CV:
                found.append(f"CV {s.cv * 100:.1f}%")
            if s.outlier_indices:
                ids = [r for r in combo.run_ids if name in self.data.values.get(r, {})]
                found.append("outlier " + ", ".join(f"#{ids[i]}" for i in s.outlier_indices))
            if found:
                out.append((f"{name}: " if many else "") + ", ".join(found))
        if combo.failed_ids:
            out.append("failed " + ", ".join(f"#{i}" for i in combo.failed_ids))
        if 0 < len(combo.run_ids) < MIN_INTERVAL_N:
            # the summaries say how many repetitions their CV asks for; the most any asks
            needed = max((repetitions_for(self.data.values_of(combo, name)) for name in combo.summaries),
                         default=MIN_INTERVAL_N)
            out.append(f"n={len(combo.run_ids)}: no interval (needs {MIN_INTERVAL_N} runs); about {needed} "
                       f"repetitions for +-{TARGET_HALF_WIDTH * 100:.0f}%")
        elif any(s.interval.too_wide for s in combo.summaries.values()):
            out.append(f"too few runs: an interval spans more than x{WIDE_FACTOR:g}")
        return out

    def results(self) -> list[SectionHtml]:
        d = self.data
        if not d.combinations:
            return [("results", "Results", h.note("The plan is empty."))]
        factor_names = list(d.factor_values)
        headers = ["#", *[_short(f) for f in factor_names], "runs"]
        for name in d.headline:
            info = d.metrics[name]
            tag = " [estimated]" if info.estimated else ""
            headers += [f"{name} ({info.unit}){tag}", "95% CI", "CV"]
        headers += ["flags", "warnings"]
        rows = []
        classes = []
        for combo in d.combinations:
            row: list[Any] = [combo.index, *[fmt_level(combo.factors.get(f)) for f in factor_names],
                              len(combo.run_ids)]
            for name in d.headline:
                s = combo.summaries.get(name)
                if s is None:
                    row += ["–", "–", "–"]
                    continue
                # a metric measured in fewer of the runs (a load, done once and
                # reused) says its own n, not the combination's
                ci_text = self.ci_text(s)
                if s.n >= MIN_INTERVAL_N and s.n < len(combo.run_ids):
                    ci_text += f" (n={s.n})"
                if s.n < MIN_INTERVAL_N:
                    title = f"the runs' values: an interval needs {MIN_INTERVAL_N} runs ({s.interval.method})"
                elif s.interval.too_wide:
                    title = f"{s.interval.method}: spans more than x{WIDE_FACTOR:g}, so not printed; n={s.n}"
                else:
                    title = f"{s.interval.method}, n={s.n}"
                row += [
                    s.mean,
                    h.td(ci_text, "" if s.n < MIN_INTERVAL_N else "num", title=title),
                    h.td(h.fmt_pct(s.cv * 100, 1, signed=False), "num warn" if s.cv > HIGH_CV else "num"),
                ]
            row.append(h.td(", ".join(sorted(combo.flags)), "flag") if combo.flags else "")
            warnings = self.combination_warnings(combo)
            row.append(h.td("; ".join(warnings), "warn") if warnings else "")
            rows.append(row)
            classes.append("failed" if not combo.run_ids and combo.failed_ids else "")
        notes = [
            h.note(
                f"Each row is one factor combination over its finished repetitions. {self.ci_note()}; "
                "hover an interval for its method. "
                f"CV = sample standard deviation / mean; above {HIGH_CV * 100:.0f}% it is flagged. "
                f"Outliers (run numbers): modified z-score 0.6745 (x - median) / MAD above {MODIFIED_Z_THRESHOLD} "
                "(Iglewicz & Hoaglin 1993)."
            )
        ]
        for name in d.headline:
            info = d.metrics[name]
            if info.estimated:
                methods = ", ".join(sorted(m for m in info.methods if m != "measured"))
                notes.append(h.note(f"{name} is estimated, not measured: {methods}", "warn"))
            elif info.description:
                notes.append(h.note(f"{name}: {info.description}"))
        notes += self.condition_notes()
        table = h.table(headers, rows, row_classes=classes)
        return [("results", "Results", table + "".join(notes) + self.noise_section())]

    def noise_section(self) -> str:
        """The experiment's own noise floor: the spread of runs of identical
        set-ups (repetitions, and levels that resolve to one set-up)."""
        d = self.data
        floors = self.noise_floors()
        rows: list[list[Any]] = []
        for name, floor in floors.items():
            if floor is None:
                positive = all(v > 0 for r in d.values.values() if (v := r.get(name)) is not None)
                rows.append([name, "–", "–", "–", "–", "no two runs of one set-up: the noise is not measured"
                             if positive else "values of 0 or below: no relative floor (the tests alone decide)"])
                continue
            rows.append([name, h.td(f"{floor.sd_log * 100:.2f}%", "num"), floor.df, floor.groups,
                         h.td(f"x{floor.largest_ratio:.3f}", "num"),
                         h.td(f"x{1 / floor.factor:.3f} - x{floor.factor:.3f}", "num")])
        parts = ["<h3>Noise floor</h3>", h.table(
            ["metric", "run-to-run spread (SD of ln)", "df", "set-ups", "largest max/min in one set-up",
             "noise floor (no change called within)"], rows,
            caption="Runs of identical set-ups: each combination's repetitions, pooled with those of combinations "
            "that resolve to the same set-up. Spread: the pooled standard deviation of ln(value) (ISO 5725-2 "
            "repeatability, on the log scale: about the CV). Noise floor: the repeatability limit exp(2.8 s) "
            "(ISO 5725-6), the ratio two runs of one set-up exceed only 5% of the time; an effect within it is "
            "not called a change, whatever its test says.")]
        equivalent = d.equivalent_levels()
        if equivalent:
            items = []
            for group in equivalent:
                labels = "; ".join(f"#{c.index} {c.label()}" for c in group)
                spread = []
                for name in d.headline:
                    means = [s.interval.estimate for c in group if (s := c.summaries.get(name)) is not None]
                    if len(means) > 1 and min(means) > 0:
                        spread.append(f"{name} x{max(means) / min(means):.3f}")
                items.append(f"<li>{h.esc(labels)}" + (f": largest ratio {h.esc(', '.join(spread))}" if spread else "")
                             + "</li>")
            parts.append(h.note(
                f"{len(equivalent)} group(s) of combinations resolve to the same set-up (their runs stored the same "
                "target description and the same other factors), so their runs are pooled as repetitions:"))
            parts.append(f"<ul>{''.join(items)}</ul>")
        return "".join(parts)

    def condition_notes(self) -> list[str]:
        """What flagged conditions mean, once, where the figures are."""
        flags = {f for r in self.data.runs for f in r["flags"]}
        notes = []
        if Flag.MEMORY_LIMITED in flags:
            notes.append(h.note(
                "memory-limited: the server's cgroup memory limit (target.resources.memory or memory_high) bound "
                "during the run: its memory reached 90% of the limit, the limit was hit (failcnt, memory.events), "
                "or reclaim was counted; each such run has an event with the figures. A run under a limit that did "
                "not bind is not flagged. The limit counts the page cache the server's reads and writes bring in, not only "
                "its private memory: a limit of 1 GB leaves the server less than 1 GB of cache beyond shared "
                "memory, and reading beyond it is reclaimed within the cgroup. Huge pages are not charged to it (they are "
                "the hugetlb controller's): with huge_pages on, shared memory is outside the limit.", "warn"))
        if Flag.NOISY_HOST in flags or Flag.CPU_SATURATED in flags:
            notes.append(h.note(
                f"noisy-host: while the workload ran, processes neither perflab's nor the target's (kernel threads "
                f"and interrupts aside), plus steal time, took more than {NOISY_HOST_CORES} of a core "
                "(host.noise_cores; the run's host-noise event names the busiest). cpu-saturated: the CPUs perflab "
                f"and the server share were under {SATURATED_IDLE_PCT:g}% idle (host.shared_idle_pct): the driver "
                "and the server competed for them. Either makes a run's figures depend on the machine's state as "
                "much as on its factors.", "warn"))
        marked = [m for m in MARK_MEANING if m in flags]
        if marked:
            notes.append(h.note(
                "; ".join(f"{m}: {MARK_MEANING[m]}" for m in marked) + ". The Experiment history section lists "
                "every attempt and what it changed in the data.", "warn"))
        if Flag.NO_STEADY_STATE in flags:
            notes.append(h.note(
                "no-steady-state: the run's per-second rate had not settled by half its measured window (MSER-5, "
                "White 1997, on batch means of 5 seconds: the truncation that minimises the standard error of what "
                "is left lay in the second half). Its figures include a warm-up still under way: give it a longer "
                "warm-up or duration. Each harness run stores where its rate settled (steady_start_s) and a "
                "steady-state event.", "warn"))
        if Flag.LOOP_BACKED in flags:
            notes.append(h.note(
                "loop-backed: the server's data or WAL was on a scratch filesystem over a loop device, a file "
                "on another filesystem (target.storage.data_fs, wal_fs). Its figures measure that filesystem "
                "over the disk holding the file, through the loop driver, not a disk of its own.", "warn"))
        if Flag.SHAPED_LINK in flags:
            mechanisms = set()
            for values in self.data.values.values():
                if values.get("driver.network.netem"):
                    mechanisms.add("netem (delay, jitter, loss, rate)")
                elif values.get("driver.network.relay"):
                    mechanisms.add("perflab's delay relay (delay, jitter) with tbf for the rate")
                elif "driver.network.netem" in values:
                    mechanisms.add("no delay; tbf for the rate")
            notes.append(h.note(
                "shaped-link: the driver ran in a network namespace of perflab's own and reached the server over a "
                "veth pair, shaped as driver.network says (a remote client on this machine). Its latency includes "
                "the link's delay twice per round trip. The link was shaped by: "
                + ("; ".join(sorted(mechanisms)) or "unknown") + ". netem is used where the kernel has it; else "
                "perflab's delay relay, a TCP relay inside the namespace that holds each chunk for the delay "
                "(its CPU is counted in the driver's). Each run's events say how its link was shaped.", "warn"))
        if Flag.SERVER_CLOSES in flags or Flag.HTTP10 in flags:
            closing = [r for r in self.data.runs if Flag.SERVER_CLOSES in r["flags"]]
            per_req = [self.data.values.get(r["id"], {}).get("connections_per_req") for r in closing]
            seen = sorted({f"{v:.2f}" for v in per_req if v is not None}, key=float)
            span = "" if not seen else f", {seen[0]}{f' to {seen[-1]}' if len(seen) > 1 else ''} connections " \
                "opened per request"
            notes.append(h.note(
                "server-closes: the HTTP server ended its connection after more than half of the responses "
                "(Connection: close, or an HTTP/1.0 answer; http/1.0: more than half were HTTP/1.0), in "
                f"{len(closing)} run(s){span}. Each such request paid a connect: "
                "perflab's latency counts the reconnection inside the request (connect_mean_ms is stored apart), "
                "while wrk starts its clock after the connect, so the two tools' percentiles differ on such a "
                "server (README: how perflab counts latency).", "warn"))
        return notes

    def failures(self) -> list[SectionHtml]:
        failed = [r for r in self.data.runs if r["status"] == "failed"]
        if not failed:
            return []
        parts = []
        for r in failed:
            factors = fmt_factors(r["factors"], ", ") or "no factors"
            marks = "".join(f", {m}" for m in self.run_marks().get(r["id"], []))
            parts.append(f"<h3>run #{r['id']} ({h.esc(factors)}, repetition {r['repetition']}{h.esc(marks)})</h3>")
            parts.append(h.pre(r["error"] or "(no error recorded)"))
            if r["log_tail"]:
                parts.append(h.details("server log tail", h.pre(r["log_tail"]), open_=len(failed) <= 3))
        return [("failures", f"Failures ({len(failed)})", "".join(parts))]

    # ------------------------------------------------------------------ scaling

    def scaling(self) -> list[SectionHtml]:
        d = self.data
        numeric = scaling.numeric_factors(d.factor_values)
        if not numeric:
            text = (
                "No numeric factor takes two or more values, so there is no scaling curve. "
                'Vary one, e.g. [factors] "workload.clients" = [1, 4, 16, 64].'
            )
            return [("scaling", "Scaling", h.note(text))]
        parts = []
        peak_rows = []
        for factor in numeric:
            for name in d.headline:
                rows = [
                    (r["factors"], d.values[r["id"]][name])
                    for r in self.done_runs()
                    if name in d.values.get(r["id"], {})
                ]
                curves = scaling.scaling_curves(rows, factor, seed=d.experiment["seed"])
                if not curves:
                    continue
                shown = curves[:MAX_LINES_PER_FIGURE]
                label = self.metric_label(name)
                fig = figures.scaling_figure(shown, factor, label, f"95% CI, from {MIN_INTERVAL_N} runs")
                caption = f"{label} against {factor}; one line per value of the other factors; band: {self.ci_note()}."
                if len(curves) > len(shown):
                    caption += f" {len(curves) - len(shown)} more lines are in the results table."
                parts.append(self.figure(fig, f"scaling-{name}-vs-{_short(factor)}", caption))
                info = d.metrics[name]
                for curve in curves:
                    best = curve.peak(info.higher_is_better)
                    if best is None:
                        continue
                    eff = scaling.scaling_efficiency(curve) if info.higher_is_better else []
                    peak_rows.append(
                        [name, _short(factor), curve.label, f"{best.x:g}", best.summary.mean,
                         eff[-1] if eff else "–"]
                    )
        table = h.table(
            ["metric", "factor", "line", "best at", "best mean", "efficiency at largest value"],
            peak_rows,
            caption="Best point of each curve; efficiency = mean / (first mean x value / first value), "
            "1.0 is linear scaling (for throughput against clients or cores).",
        )
        return [("scaling", "Scaling", "".join(parts) + table)]

    # ------------------------------------------------------------------ latency

    def latency(self) -> list[SectionHtml]:
        spectrum = self.latency_spectrum()
        series = self.driver_series()
        parts = spectrum + series
        if not parts:
            parts = [h.note("No latency histograms and no driver series were stored by this workload.")]
        # the title says what is in it: the driver's series are throughput (goodput, req/s) as well as latency
        title = "Latency and the driver's series" if series else "Latency"
        return [("latency", title, "".join(parts))]

    def latency_spectrum(self) -> list[str]:
        d = self.data
        by_name: dict[str, dict[int, list[bytes]]] = {}
        units: dict[str, str] = {}
        encodings: dict[str, str] = {}
        for combo in d.combinations:
            for run_id in combo.run_ids:
                for hist in self.store.histograms(run_id):
                    by_name.setdefault(hist["name"], {}).setdefault(combo.index, []).append(hist["data"])
                    units[hist["name"]] = hist["unit"]
                    encodings[hist["name"]] = hist["encoding"]
        if not by_name:
            return []
        parts = []
        combos = {c.index: c for c in d.combinations}
        for name, per_combo in sorted(by_name.items()):
            # latency in ms, as every other table and the export say it (histograms hold µs)
            scale, unit = (1e-3, "ms") if units[name] == "us" else (1.0, units[name])
            lines, rows = [], []
            try:
                for index, blobs in sorted(per_combo.items()):
                    combo = combos[index]
                    values, count = latency.merged_percentiles(blobs, figures.SPECTRUM_PERCENTILES, encodings[name])
                    values = [v * scale for v in values]
                    lines.append((combo.label(), figures.SPECTRUM_PERCENTILES, values))
                    at = dict(zip(figures.SPECTRUM_PERCENTILES, values, strict=True))
                    rows.append([index, combo.label(), len(blobs), count,
                                 *[at[p] for p in LATENCY_TABLE_PERCENTILES]])
            except latency.HistogramsUnavailable as exc:
                return [h.note(f"Latency percentile spectrum skipped: {exc}", "warn")]
            shown = lines[:MAX_LINES_PER_FIGURE]
            fig = figures.spectrum_figure(shown, unit, f"{name}: percentile spectrum (all repetitions merged)")
            caption = (
                f"{name}: latency at p50..p99.99 per combination, from the HDR histograms of all its "
                "repetitions merged exactly."
            )
            if len(lines) > len(shown):
                caption += f" {len(lines) - len(shown)} more combinations are in the table."
            parts.append(f"<h3>{h.esc(name)}</h3>")
            parts.append(self.figure(fig, f"latency-spectrum-{name}", caption))
            headers = ["#", "combination", "runs", "values",
                       *[f"p{p:g} ({unit})" for p in LATENCY_TABLE_PERCENTILES]]
            parts.append(h.table(headers, rows))
        return parts

    def driver_series(self) -> list[str]:
        """Series the workload itself recorded (any source that is not a
        collector), over time, for one representative run per combination."""
        d = self.data
        collector_sources = set(COLLECTORS.names())
        per_name: dict[tuple[str, str], list[tuple[str, list[float], list[float]]]] = {}
        settled: dict[str, float | None] = {}  # line label -> where its run's rate settled (MSER-5)
        for combo in d.combinations[:MAX_LINES_PER_FIGURE]:
            run_id = representative_run(d, combo)
            if run_id is None:
                continue
            settled[f"{combo.label()} (run #{run_id})"] = next(
                (e["t"] for e in self.store.events(run_id) if e["kind"] == "steady-state"), None)
            # the measured seconds only: a harness run stores its warm-up's too (the export labels them)
            start = max((e["t"] for e in self.store.events(run_id) if e["kind"] == "measure-start"
                         and e["t"] is not None), default=None)
            # a long run's series (a three-day run's 259,200 seconds) as bucket means, not every row
            points = durability.driver_points(self.store, run_id, collector_sources, start)
            for key, (t, v) in points.items():
                if any(math.isfinite(x) for x in v):
                    per_name.setdefault(key, []).append((f"{combo.label()} (run #{run_id})", t, v))
        parts = []
        # A series that is 0 throughout (failed transactions, say) says so in a line, not a figure.
        flat = sorted(k for k, lines in per_name.items() if all(x == 0 for _, _, v in lines for x in v))
        if flat:
            parts.append(h.note("0 throughout, in every run shown: " + ", ".join(f"{s}.{n}" for s, n in flat)))
        # latency series first: that is what this section is about
        keys = sorted((k for k in per_name if k not in flat), key=lambda k: (0 if "latency" in k[1] else 1, k))
        for source, name in keys[:MAX_SERIES_FIGURES]:
            # the workload's own name for the series (an HTTP run's "tps" is req/s)
            shown = (WORKLOADS.get(source).series_labels if source in WORKLOADS else {}).get(name, name)
            lines = per_name[(source, name)]
            marks = [settled.get(label) for label, _, _ in lines]
            marked = {"marks": marks} if any(m is not None for m in marks) else {}
            fig = figures.series_figure(lines, shown, f"{source}: {shown} over time", **marked)
            caption = (
                f"{source}.{name}" + (f" ({shown})" if shown != name else "") + " over the run, after warm-up, for "
                "the run of each combination nearest its median (the others are in the store: perflab export "
                "--table series). A gap in a line is a second in which nothing completed (a stall): it has no "
                f"latency (a series of more than {durability.DRIVER_POINTS:,} samples is drawn as its mean over "
                f"{durability.DRIVER_BUCKETS:,} equal intervals, a gap an interval with none)."
                + (" Dotted: where the run's rate settled (MSER-5, White 1997; its steady-state event)."
                              if any(m is not None for m in marks) else "")
            )
            parts.append(self.figure(fig, f"series-{source}-{name}", caption))
        if len(keys) > MAX_SERIES_FIGURES:
            rest = ", ".join(f"{s}.{n}" for s, n in keys[MAX_SERIES_FIGURES:])
            parts.append(h.note(f"Not drawn (in the store): {rest}"))
        return parts

    # ------------------------------------------------------------------ telemetry

    def run_groups(self) -> list[RunGroup]:
        """The combinations as plain data for collectors' report sections."""
        d = self.data
        return [RunGroup(combo.index, combo.label(),
                         [{**d.runs_by_id[r], "metrics": d.values.get(r, {})} for r in combo.run_ids],
                         read_series=self.store.series, read_queries=self.store.queries,
                         read_envelope=lambda *a: durability.envelope(self.store, *a))
                for combo in d.combinations]

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

    def telemetry(self) -> list[SectionHtml]:
        d = self.data
        parts = []
        for anchor, _, sections in self.collector_section_list():
            if isinstance(sections, str):
                parts.append(sections)
                continue
            for i, section in enumerate(sections, start=1):
                parts.append(f'<h3 id="{h.esc(anchor)}-{i}">{h.esc(section.title)}</h3>' + self.render_section(section))
        bound = [r for r in d.runs if Flag.CLIENT_BOUND in r["flags"]]
        if bound:
            parts.append(h.note(
                f"{len(bound)} run(s) flagged client-bound (the driver, not the server, was the bottleneck; "
                "their throughput understates the server): " + ", ".join(f"#{r['id']}" for r in bound),
                "warn",
            ))
        parts += self.run_panels()
        if not parts:
            parts = [h.note("No telemetry: the experiment had no collectors ([collect]) or they stored nothing.")]
        return [("telemetry", "Telemetry", "".join(parts))]

    def run_panels(self) -> list[str]:
        """The collectors' per-run panel figure (perflab.report.telemetry) for
        the run nearest the median of each combination."""
        from perflab.report.telemetry import build_run_figure

        d = self.data
        chosen = [representative_run(d, c) for c in d.combinations]
        run_ids = [r for r in chosen if r is not None][:MAX_RUN_PANELS]
        parts = []
        for run_id in run_ids:
            fig = build_run_figure(self.store, run_id)
            if fig is None:
                continue
            run = d.runs_by_id[run_id]
            label = fmt_factors(run["factors"], ", ") or "the run"
            parts.append(self.figure(fig, f"run-{run_id:03d}-telemetry",
                                     f"run #{run_id} ({label}): telemetry on the run's clock."))
        if not parts:
            return []
        total = sum(1 for c in d.combinations if c.run_ids)
        metric = d.headline[0] if d.headline else "its metric"
        more = f"; the first {MAX_RUN_PANELS} of {total} combinations" if total > MAX_RUN_PANELS else ""
        head = "<h3>Per-run panels</h3>" + h.note(f"One run per combination, the one nearest the median of {metric}{more}.")
        return [head, *parts]

    # ------------------------------------------------------------------ degradation

    def degradation(self) -> list[SectionHtml]:
        d = self.data
        eligible = [c for c in d.combinations if len(c.run_ids) >= DEGRADATION_MIN_RUNS]
        if not eligible:
            text = (
                f"Degradation needs {DEGRADATION_MIN_RUNS} or more finished runs of one combination "
                "(experiment.repetitions, order = \"sequential\" for a durability run)."
            )
            return [("degradation", "Degradation", h.note(text))]
        assessed = []
        for combo in eligible:
            for name in d.headline:
                ids = [r for r in combo.run_ids if name in d.values.get(r, {})]
                if len(ids) < DEGRADATION_MIN_RUNS:
                    continue
                values = [d.values[r][name] for r in ids]
                result = degradation.assess(values, d.metrics[name].higher_is_better, seed=d.experiment["seed"],
                                            positions=[d.runs_by_id[r]["repetition"] for r in ids])
                assessed.append((combo, name, ids, result))
        rows = []
        for combo, name, ids, r in assessed:
            tr = r.trend
            slope = "–" if tr is None else f"{h.fmt(tr.slope)} [{h.fmt(tr.slope_low)}, {h.fmt(tr.slope_high)}]"
            cps = "; ".join(f"before run #{ids[cp.index]} ({cp.change_pct:+.2f}%, p={cp.p_value:.3f})"
                            for cp in r.change_points) or "none"
            real = (tr is not None and tr.significant) or bool(r.change_points)
            rows.append([
                combo.index, combo.label(), name, self.degradation_runs(combo, ids), r.values[0], r.values[-1],
                h.td(h.fmt_pct(r.change_pct[-1]), "num"),
                h.td(slope, "num"), h.td(cps), h.td(r.verdict, "warn" if real else ""),
            ])
        parts = [
            h.table(
                ["#", "combination", "metric", "runs", "first", "last", "last vs first", "slope per run (95% CI)",
                 "change points", "verdict"],
                rows,
                caption="Repetitions of each combination in plan order, each at its repetition number (a run "
                "resumed after an interruption, or retried, keeps its place; a failed run leaves a gap). Trend: OLS "
                "slope per repetition with "
                "its Student t 95% CI (real when it excludes 0). Change points: E-divisive (Matteson & James "
                f"2014, as Apache Otava), permutation test with {degradation.PERMUTATIONS} permutations, "
                f"kept at p < {degradation.SIGNIFICANCE}.",
            )
        ]
        # The OSDL-style table for the combinations that matter most: those that
        # changed, else the first ones.
        ranked = sorted(assessed, key=lambda a: (not (a[3].change_points or (a[3].trend and a[3].trend.significant)),
                                                 a[0].index))
        for combo, name, ids, r in ranked[:MAX_DEGRADATION_DETAILS]:
            info = d.metrics[name]
            parts.append(f"<h3>#{combo.index} {h.esc(combo.label())}: {h.esc(name)}</h3>")
            detail_rows = self.degradation_rows(combo, name, ids, r)
            parts.append(h.table(["run", "repetition", f"{name} ({info.unit})", "change from first", "note"],
                                 detail_rows))
            parts.append(h.note(r.verdict, "warn" if r.change_points or (r.trend and r.trend.significant) else "note"))
            fig = figures.degradation_figure(r, [f"#{i}" for i in ids], self.metric_label(name),
                                             f"#{combo.index} {combo.label()}: {name} run after run")
            parts.append(self.figure(fig, f"degradation-{combo.index}-{name}",
                                     "Metric per run in order, its OLS trend, and change points (dotted)."))
        return [("degradation", "Degradation", "".join(parts))]

    def degradation_runs(self, combo: Combination, ids: list[int]) -> Any:
        """The runs a degradation row stands on: their count, the runs of the
        combination without a value (failed, not run), and the marked ones."""
        d = self.data
        same = [x for x in d.runs if x["combination"] == d.runs_by_id[ids[0]]["combination"]]
        missing = [f"#{x['id']} ({x['status']})" for x in same if x["id"] not in ids]
        notes = [f"no value: {', '.join(missing)}"] if missing else []
        marks = self.run_marks()
        for mark in MARK_MEANING:
            marked = [f"#{x['id']}" for x in same if mark in marks.get(x["id"], [])]
            if marked:
                notes.append(f"{mark}: {', '.join(marked)}")
        if not notes:
            return len(ids)
        return h.td(f"{len(ids)} ({'; '.join(notes)})", "warn")

    def run_marks(self) -> dict[int, list[str]]:
        """By run: resumed, retried, fresh load (the store's attempts and effects)."""
        if not hasattr(self, "_run_marks"):
            self._run_marks = self.store.run_marks()
        return self._run_marks

    def degradation_rows(self, combo: Combination, name: str, ids: list[int],
                         r: Degradation) -> list[list[Any]]:
        """The OSDL-style rows of one combination: every run of it in plan
        order at its repetition number, those without a value (failed, not
        run yet) too, each marked when it was resumed, retried or on a fresh load."""
        d = self.data
        by_id = dict(zip(ids, zip(r.values, r.change_pct, strict=True), strict=True))
        marks = self.run_marks()
        rows = []
        for run in sorted((x for x in d.runs if x["combination"] == d.runs_by_id[ids[0]]["combination"]),
                          key=lambda x: x["id"]):
            note = marks.get(run["id"], [])
            if run["id"] in by_id:
                v, c = by_id[run["id"]]
                rows.append([f"#{run['id']}", run["repetition"], v, h.td(h.fmt_pct(c), "num"),
                             h.td(", ".join(note), "warn" if note else "")])
            else:
                why = {"failed": "failed: no value", "done": f"no {name}"}.get(run["status"], f"{run['status']}: no value")
                rows.append([f"#{run['id']}", run["repetition"], "–", "–", h.td(", ".join([why, *note]), "warn")])
        return rows

    # ------------------------------------------------------------------ history

    def history(self) -> list[SectionHtml]:
        """The sessions that ran the experiment (start, stop, how it stopped,
        what a resume found and did) and every earlier attempt of a run."""
        sessions = self.store.sessions()
        attempts = self.store.attempts()
        if not sessions and not attempts:
            return []
        rows = [[s["id"], s["command"], s["pid"], s["started_at"], s["ended_at"] or "–",
                 h.td(s["ended"] or ("running" if s["ended_at"] is None else ""),
                      "" if (s["ended"] or "").startswith("finished") else "warn"),
                 s["note"] or ""] for s in sessions]
        parts = [h.table(["session", "command", "pid", "started (UTC)", "ended (UTC)", "how it ended", "what it did"],
                         rows, caption="Each perflab process that ran part of the experiment. A killed one has no "
                         "end time: it was found dead by the next resume.")]
        if attempts:
            from perflab.report.partial import attempt_partial, lost_seconds

            partials = [attempt_partial(self.store.dir, a) for a in attempts]
            arows = [[f"#{a['run_id']}", a["attempt"], a["status"], a["started_at"] or "–", a["ended_at"] or "–",
                      "–" if a["seconds"] is None else f"{a['seconds']:.1f}",
                      (a["error"] or "").splitlines()[0][:160] if a["error"] else "",
                      h.td(p.describe(), "warn") if p is not None else "–", a["files"] or "–"]
                     for a, p in zip(attempts, partials, strict=True)]
            lost = lost_seconds(attempts)
            parts.append("<h3>Earlier attempts</h3>" + h.table(
                ["run", "attempt", "status", "started (UTC)", "ended (UTC)", "seconds", "cause",
                 "what it measured", "files"], arows,
                caption="Attempts that did not finish (killed, interrupted) or failed and were run again; each "
                "run's figures are from its last attempt. A killed attempt's end is its last sign of life "
                "(its newest file). What an attempt measured before it stopped (its per-second series and "
                "query records) is kept in its files as partial figures, in no other table or figure."
                + (f" Time lost to attempts that did not finish: {lost:,.0f} s." if lost else "")))
        effects = [e for e in self.store.effects() if e["kind"] != "load" or e["data"].get("reload")]
        if effects:
            erows = [[f"#{e['run_id']}", e["attempt"], e["kind"], json.dumps(e["data"], sort_keys=True), e["at"]]
                     for e in effects]
            parts.append("<h3>Changes to the data</h3>" + h.details(
                f"what runs recorded they would change in the target's data ({len(erows)})",
                h.table(["run", "attempt", "kind", "what", "at (UTC)"], erows,
                        caption="Recorded before the change was made: a run run again first undoes what its "
                        "earlier attempt changed (TPC-H refresh pairs), has the data loaded again (a query "
                        "set that writes), or records what it left (tpcb's history, TPC-C's orders)."),
                open_=len(erows) <= 12))
        return [("history", "Experiment history", "".join(parts))]

    # ------------------------------------------------------------------ workloads

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

    def workload_sections(self) -> list[SectionHtml]:
        out = []
        for anchor, kind, sections in self.workload_section_list():
            if isinstance(sections, str):
                out.append((anchor, f"{kind}: error", sections))
                continue
            for i, section in enumerate(sections, start=1):
                out.append((f"{anchor}-{i}", section.title, self.render_section(section)))
        return out

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

    # ------------------------------------------------------------------ experiment

    def experiment(self) -> list[SectionHtml]:
        d = self.data
        exp = d.experiment
        parts = [f"<h3>Experiment file</h3>{h.note(exp['spec_path'] or '(given on stdin)')}{h.pre(exp['spec_text'])}"]
        host = exp["host"]
        host_rows = [[k, v] for k, v in host.items() if k != "memory_bytes"]
        if host.get("memory_bytes"):
            host_rows.append(["memory", f"{host['memory_bytes'] / 2**30:.1f} GiB"])
        parts.append("<h3>Host</h3>" + h.table(["fact", "value"], host_rows, css_class="kv"))
        targets = [(r, r["target"]) for r in d.runs if isinstance(r.get("target"), dict)]
        versions = sorted({str(t.get("version")) for _, t in targets if t.get("version")})
        version_rows = [["perflab", host.get("perflab", "?")], ["engine", f"{host.get('engine')} ({host.get('engine_profile')})"],
                        ["python", host.get("python", "?")]]
        version_rows += [["server", v] for v in versions]
        parts.append("<h3>Versions</h3>" + h.table(["component", "version"], version_rows, css_class="kv"))
        parts.append(self.settings_tables(targets))
        seed = exp["seed"]
        parts.append(h.note(f"Plan: {effects_table.design_words(d)} (seed {seed}); "
                            f"factors: {', '.join(exp['factors']) or 'none'}."))
        parts.append(self.left_behind())
        return [("experiment", "Experiment", "".join(parts))]

    def left_behind(self) -> str:
        """What the experiment made outside its output directory (perflab's
        schemas in databases it did not create), and how to remove it."""
        rows = self.store.leftovers(removed=True)
        if not rows:
            return ""
        table = h.table(
            ["what", "name", "where", "size", "contents", "measured", "state"],
            [[r["kind"], r["name"], r["location"], format_bytes(r["bytes"]), r["detail"], r["measured_at"] or "-",
              f"removed {r['removed_at']}" if r["removed_at"] else "left"] for r in rows], css_class="kv")
        left = [r for r in rows if not r["removed_at"]]
        say = (f"{len(left)} left: remove with `perflab clean {self.store.dir}`." if left
               else "All of it was removed by `perflab clean`.")
        return ("<h3>Left outside the output directory</h3>"
                + h.note("Schemas of perflab's own (marked as this experiment's) in databases it did not create; "
                         "nothing else there was created, changed or dropped. " + say) + table)

    def settings_tables(self, targets: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
        """Effective server settings as target.describe() recorded them: the
        settings that differ between runs per combination, then the whole set."""
        if not targets:
            return "<h3>Server settings</h3>" + h.note("No run recorded its target's description.")
        # what was applied: pids, paths perflab picked and how it reaches the
        # server (a fresh socket directory per start) are declared apart by their targets
        flat_by_run = {r["id"]: applied(t) for r, t in targets}
        keys = sorted({k for flat in flat_by_run.values() for k in flat})
        varying = [k for k in keys if len({json.dumps(f.get(k), default=str) for f in flat_by_run.values()}) > 1]
        # key_settings repeat effective_settings: show a setting once
        varying = [k for k in varying
                   if not (k.startswith("key_settings.") and f"effective_settings.{k[13:]}" in varying)]
        parts = ["<h3>Server settings</h3>"]
        first_run, first = targets[0]
        key_settings = first.get("key_settings") or first.get("effective_settings")
        if isinstance(key_settings, dict):
            parts.append(h.table(["setting", "value"], sorted(key_settings.items()), css_class="kv",
                                 caption=f"Key settings as the server reported them (run #{first_run['id']})."))
        if varying:
            by_combo: dict[int, dict[str, Any]] = {}
            for r, _ in targets:
                by_combo.setdefault(r["combination"], flat_by_run[r["id"]])
            rows = [[c, *[flat.get(k, "–") for k in varying]] for c, flat in sorted(by_combo.items())]
            parts.append(h.table(["#", *varying], rows, caption="Settings that differ between combinations."))
        everything = sorted(flatten("", first, {}).items())
        parts.append(h.details(f"everything the target described (run #{first_run['id']}, {len(everything)} entries)",
                               h.table(["key", "value"], everything, css_class="kv")))
        return "".join(parts)

    def plan(self) -> list[SectionHtml]:
        d = self.data
        factor_names = list(d.factor_values)
        rows, classes = [], []
        for r in d.runs:
            error = (r["error"] or "").splitlines()[0][:120] if r["error"] else ""
            rows.append([
                r["id"], r["combination"], r["repetition"], *[fmt_level(r["factors"].get(f)) for f in factor_names],
                r["status"], r["started_at"] or "", r["seconds"] if r["seconds"] is not None else "–",
                *[d.values.get(r["id"], {}).get(n, "–") for n in d.headline[:1]],
                h.td(", ".join([*r["flags"], *limit_notes(d.values.get(r["id"], {}))]), "flag")
                if r["flags"] or limit_notes(d.values.get(r["id"], {})) else "", error,
            ])
            classes.append("failed" if r["status"] == "failed" else "")
        headers = ["run", "#", "rep", *[_short(f) for f in factor_names], "status", "started (UTC)", "seconds",
                   *[self.metric_label(n) for n in d.headline[:1]], "flags", "error"]
        table = h.table(headers, rows, row_classes=classes)
        body = h.details(f"all {len(rows)} runs in plan order", table, open_=len(rows) <= 30)
        return [("plan", "Plan", body)]

