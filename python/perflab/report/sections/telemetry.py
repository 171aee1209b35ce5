"""Telemetry: the collectors' own sections and each combination's per-run panel figure."""

from __future__ import annotations

from perflab.model import Flag, fmt_factors
from perflab.report import html as h
from perflab.report.data import representative_run
from perflab.report.sections.base import ReportContext, SectionHtml, register

# Per-run panel figures at most (one per combination).
MAX_RUN_PANELS = 8


@register(rank=80)
class Telemetry:
    def render(self, ctx: ReportContext) -> list[SectionHtml]:
        d = ctx.data
        parts = []
        for anchor, _, sections in ctx.collector_section_list():
            if isinstance(sections, str):
                parts.append(sections)
                continue
            for i, section in enumerate(sections, start=1):
                parts.append(f'<h3 id="{h.esc(anchor)}-{i}">{h.esc(section.title)}</h3>' + ctx.render_section(section))
        bound = [r for r in d.runs if Flag.CLIENT_BOUND in r["flags"]]
        if bound:
            parts.append(h.note(
                f"{len(bound)} run(s) flagged client-bound (the driver, not the server, was the bottleneck; "
                "their throughput understates the server): " + ", ".join(f"#{r['id']}" for r in bound),
                "warn",
            ))
        parts += run_panels(ctx)
        if not parts:
            parts = [h.note("No telemetry: the experiment had no collectors ([collect]) or they stored nothing.")]
        return [("telemetry", "Telemetry", "".join(parts))]


def run_panels(ctx: ReportContext) -> list[str]:
    """The collectors' per-run panel figure (perflab.report.telemetry) for
    the run nearest the median of each combination."""
    from perflab.report.telemetry import build_run_figure

    d = ctx.data
    chosen = [representative_run(d, c) for c in d.combinations]
    run_ids = [r for r in chosen if r is not None][:MAX_RUN_PANELS]
    parts = []
    for run_id in run_ids:
        fig = build_run_figure(ctx.store, run_id)
        if fig is None:
            continue
        run = d.runs_by_id[run_id]
        label = fmt_factors(run["factors"], ", ") or "the run"
        parts.append(ctx.figure(fig, f"run-{run_id:03d}-telemetry",
                                 f"run #{run_id} ({label}): telemetry on the run's clock."))
    if not parts:
        return []
    total = sum(1 for c in d.combinations if c.run_ids)
    metric = d.headline[0] if d.headline else "its metric"
    more = f"; the first {MAX_RUN_PANELS} of {total} combinations" if total > MAX_RUN_PANELS else ""
    head = "<h3>Per-run panels</h3>" + h.note(f"One run per combination, the one nearest the median of {metric}{more}.")
    return [head, *parts]
