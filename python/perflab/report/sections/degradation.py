"""Degradation: the trend and change points of each combination's runs in plan order, and
the OSDL-style run-by-run tables of those that changed."""

from __future__ import annotations

from typing import Any

from perflab.analysis import degradation
from perflab.analysis.degradation import Degradation
from perflab.report import figures
from perflab.report import html as h
from perflab.report.data import Combination
from perflab.report.sections.base import MARK_MEANING, ReportContext, SectionHtml, register

# OSDL-style run-by-run tables at most (those that changed first).
MAX_DEGRADATION_DETAILS = 4
DEGRADATION_MIN_RUNS = degradation.MIN_RUNS


@register(rank=90)
class DegradationSection:
    def render(self, ctx: ReportContext) -> list[SectionHtml]:
        d = ctx.data
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
                combo.index, combo.label(), name, degradation_runs(ctx, combo, ids), r.values[0], r.values[-1],
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
            detail_rows = degradation_rows(ctx, combo, name, ids, r)
            parts.append(h.table(["run", "repetition", f"{name} ({info.unit})", "change from first", "note"],
                                 detail_rows))
            parts.append(h.note(r.verdict, "warn" if r.change_points or (r.trend and r.trend.significant) else "note"))
            fig = figures.degradation_figure(r, [f"#{i}" for i in ids], ctx.metric_label(name),
                                             f"#{combo.index} {combo.label()}: {name} run after run")
            parts.append(ctx.figure(fig, f"degradation-{combo.index}-{name}",
                                     "Metric per run in order, its OLS trend, and change points (dotted)."))
        return [("degradation", "Degradation", "".join(parts))]


def degradation_runs(ctx: ReportContext, combo: Combination, ids: list[int]) -> Any:
    """The runs a degradation row stands on: their count, the runs of the
    combination without a value (failed, not run), and the marked ones."""
    d = ctx.data
    same = [x for x in d.runs if x["combination"] == d.runs_by_id[ids[0]]["combination"]]
    missing = [f"#{x['id']} ({x['status']})" for x in same if x["id"] not in ids]
    notes = [f"no value: {', '.join(missing)}"] if missing else []
    marks = ctx.run_marks()
    for mark in MARK_MEANING:
        marked = [f"#{x['id']}" for x in same if mark in marks.get(x["id"], [])]
        if marked:
            notes.append(f"{mark}: {', '.join(marked)}")
    if not notes:
        return len(ids)
    return h.td(f"{len(ids)} ({'; '.join(notes)})", "warn")


def degradation_rows(ctx: ReportContext, combo: Combination, name: str, ids: list[int],
                     r: Degradation) -> list[list[Any]]:
    """The OSDL-style rows of one combination: every run of it in plan
    order at its repetition number, those without a value (failed, not
    run yet) too, each marked when it was resumed, retried or on a fresh load."""
    d = ctx.data
    by_id = dict(zip(ids, zip(r.values, r.change_pct, strict=True), strict=True))
    marks = ctx.run_marks()
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
