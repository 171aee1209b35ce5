"""The durability study's first screen (OSDL's DBT-3 durability runs): when
the experiment is repetitions of one combination back to back, enough for a
degradation verdict, the report opens with the run-by-run table, every run's
memory, I/O and CPU figures in OSDL's panels on one time axis, and, for a run
of two hours or more, its rate in whole hours with a trend over them
(perflab.report.durability reads the series as SQLite aggregates)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from perflab.analysis import degradation
from perflab.collectors import COLLECTORS
from perflab.report import html as h
from perflab.report.data import Combination
from perflab.report.durability import BUCKETS_PER_RUN, WITHIN_RUN_MIN_S, bucket_stats, osdl_figure
from perflab.report.sections.base import ReportContext, SectionHtml, register
from perflab.report.sections.degradation import degradation_rows


def durability_combination(ctx: ReportContext) -> tuple[Combination, str, list[int]] | None:
    """The study's one combination, its headline metric and the runs with
    that metric, when the experiment is a durability study: one combination
    only, with enough runs for the report's degradation verdict."""
    d = ctx.data
    if len(d.combinations) != 1:
        return None
    combo = d.combinations[0]
    for name in d.headline:
        ids = [r for r in combo.run_ids if name in d.values.get(r, {})]
        if len(ids) >= degradation.MIN_RUNS:
            return combo, name, ids
    return None

@register(rank=10)
class Durability:
    def render(self, ctx: ReportContext) -> list[SectionHtml]:
        """The durability section, first in the report, or nothing when the
        experiment is no durability study."""
        found = durability_combination(ctx)
        if found is None:
            return []
        combo, name, ids = found
        d = ctx.data
        r = degradation.assess([d.values[i][name] for i in ids], d.metrics[name].higher_is_better,
                               seed=d.experiment["seed"], positions=[d.runs_by_id[i]["repetition"] for i in ids])
        info = d.metrics[name]
        real = bool(r.change_points) or (r.trend is not None and r.trend.significant)
        parts = [
            h.note(f"{len(ids)} runs of one set-up back to back: {name} run after run, its change from run 1, and "
                   "whether a trend or change point says the change is real (the Degradation section has the test)."),
            h.table(["run", "repetition", f"{name} ({info.unit})", "change from run 1", "note"],
                    degradation_rows(ctx, combo, name, ids, r)),
            h.note(f"Trend verdict: {r.verdict}", "warn" if real else "note"),
        ]
        runs = [ctx.data.runs_by_id[i] for i in sorted({*combo.run_ids, *combo.failed_ids})]
        fig = osdl_figure(ctx.store, [run["id"] for run in runs])
        if fig is not None:
            parts.append("<h3>Memory, I/O and CPU, run after run</h3>")
            parts.append(ctx.figure(fig, "durability-osdl-panels",
                                  "OSDL's durability panels from the vmstat collector's series: free, buff and cache; "
                                  "bi and bo; us, sy, id and wa, every run on one time axis in the order they ran "
                                  "(dotted lines part the runs). Each line is its mean per interval, the band its min "
                                  f"to max ({BUCKETS_PER_RUN} intervals per run), so a one-second spike stays visible."))
        parts += within_runs(ctx, runs)
        return [("durability", "Durability", "".join(parts))]

def within_runs(ctx: ReportContext, runs: list[dict[str, Any]]) -> list[str]:
    """Each run of two hours or more: the driver's series in whole hours,
    each hour's mean and change from the first, and the trend verdict."""
    from perflab.serve.views import series_names

    collectors = set(COLLECTORS.names())
    long_runs = [r for r in runs if (r.get("seconds") or 0.0) >= WITHIN_RUN_MIN_S]
    rows = []
    for run in long_runs:
        for source, name in series_names(ctx.store.conn, run["id"]):
            if source in collectors:
                continue
            # each whole hour's mean from SQLite, then within_run's trend over the hours: one value per
            # window gives within_run the same windows and means as the series' every sample would
            hours = bucket_stats(ctx.store, run["id"], source, name, width_s=degradation.WINDOW_S)
            with np.errstate(invalid="ignore", divide="ignore"):
                means = np.where(hours[:, 4] > 0, hours[:, 3] / np.maximum(hours[:, 4], 1), np.nan)
            # each window's start: its first sample's t, down to the whole window from the run's first sample
            index = np.floor((hours[:, 0] - hours[:1, 0]) / degradation.WINDOW_S + 1e-9)
            starts = hours[:1, 0] + degradation.WINDOW_S * index
            info = ctx.data.metrics.get(name)
            w = degradation.within_run(starts, means, info.higher_is_better if info else None)
            if not w.means:
                continue
            per_hour = ", ".join(f"{h.fmt(m)} ({h.fmt_pct(c)})" if math.isfinite(m) else "–"
                                 for m, c in zip(w.means, w.change_pct, strict=True))
            real = w.trend is not None and w.trend.significant
            rows.append([f"#{run['id']}", f"{source}.{name}", len(w.means), h.td(per_hour),
                         h.td(w.verdict, "warn" if real else "")])
    if not rows:
        return []
    return ["<h3>Within each run, hour by hour</h3>",
            h.table(["run", "series", "hours", "mean per whole hour (change from the first)", "verdict"], rows,
                    caption="Runs of two hours or more: each driver series cut into whole hours from its first "
                    "sample (a last part hour left out), and an OLS trend over the hours whose interval allows "
                    "for autocorrelated hours (Santer et al. 2000).")]
