"""The plan: every run in plan order with its status, headline figure, flags and error."""

from __future__ import annotations

from perflab.model import fmt_level
from perflab.report import html as h
from perflab.report.sections.base import ReportContext, SectionHtml, limit_notes, register, short


@register(rank=130)
class Plan:
    def render(self, ctx: ReportContext) -> list[SectionHtml]:
        d = ctx.data
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
        headers = ["run", "#", "rep", *[short(f) for f in factor_names], "status", "started (UTC)", "seconds",
                   *[ctx.metric_label(n) for n in d.headline[:1]], "flags", "error"]
        table = h.table(headers, rows, row_classes=classes)
        body = h.details(f"all {len(rows)} runs in plan order", table, open_=len(rows) <= 30)
        return [("plan", "Plan", body)]
