"""The failed runs: each one's error and its server's log tail."""

from __future__ import annotations

from perflab.model import fmt_factors
from perflab.report import html as h
from perflab.report.sections.base import ReportContext, SectionHtml, register


@register(rank=50)
class Failures:
    def render(self, ctx: ReportContext) -> list[SectionHtml]:
        failed = [r for r in ctx.data.runs if r["status"] == "failed"]
        if not failed:
            return []
        parts = []
        for r in failed:
            factors = fmt_factors(r["factors"], ", ") or "no factors"
            marks = "".join(f", {m}" for m in ctx.run_marks().get(r["id"], []))
            parts.append(f"<h3>run #{r['id']} ({h.esc(factors)}, repetition {r['repetition']}{h.esc(marks)})</h3>")
            parts.append(h.pre(r["error"] or "(no error recorded)"))
            if r["log_tail"]:
                parts.append(h.details("server log tail", h.pre(r["log_tail"]), open_=len(failed) <= 3))
        return [("failures", f"Failures ({len(failed)})", "".join(parts))]
