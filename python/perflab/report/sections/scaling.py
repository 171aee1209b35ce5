"""Scaling: each headline metric against each numeric factor, and each curve's best point."""

from __future__ import annotations

from perflab.analysis import scaling
from perflab.analysis.stats import MIN_INTERVAL_N
from perflab.report import figures
from perflab.report import html as h
from perflab.report.sections.base import (
    MAX_LINES_PER_FIGURE,
    ReportContext,
    SectionHtml,
    register,
    short,
)


@register(rank=60)
class Scaling:
    def render(self, ctx: ReportContext) -> list[SectionHtml]:
        d = ctx.data
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
                    for r in ctx.done_runs()
                    if name in d.values.get(r["id"], {})
                ]
                curves = scaling.scaling_curves(rows, factor, seed=d.experiment["seed"])
                if not curves:
                    continue
                shown = curves[:MAX_LINES_PER_FIGURE]
                label = ctx.metric_label(name)
                fig = figures.scaling_figure(shown, factor, label, f"95% CI, from {MIN_INTERVAL_N} runs")
                caption = f"{label} against {factor}; one line per value of the other factors; band: {ctx.ci_note()}."
                if len(curves) > len(shown):
                    caption += f" {len(curves) - len(shown)} more lines are in the results table."
                parts.append(ctx.figure(fig, f"scaling-{name}-vs-{short(factor)}", caption))
                info = d.metrics[name]
                for curve in curves:
                    best = curve.peak(info.higher_is_better)
                    if best is None:
                        continue
                    eff = scaling.scaling_efficiency(curve) if info.higher_is_better else []
                    peak_rows.append(
                        [name, short(factor), curve.label, f"{best.x:g}", best.summary.mean,
                         eff[-1] if eff else "–"]
                    )
        table = h.table(
            ["metric", "factor", "line", "best at", "best mean", "efficiency at largest value"],
            peak_rows,
            caption="Best point of each curve; efficiency = mean / (first mean x value / first value), "
            "1.0 is linear scaling (for throughput against clients or cores).",
        )
        return [("scaling", "Scaling", "".join(parts) + table)]
