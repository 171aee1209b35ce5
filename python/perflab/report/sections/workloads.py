"""The workloads' own sections (and a capacity search's answer first), as they declare them."""

from __future__ import annotations

from perflab.report.sections.base import ReportContext, SectionHtml, register


@register(rank=100)
class WorkloadSections:
    def render(self, ctx: ReportContext) -> list[SectionHtml]:
        out = []
        for anchor, kind, sections in ctx.workload_section_list():
            if isinstance(sections, str):
                out.append((anchor, f"{kind}: error", sections))
                continue
            for i, section in enumerate(sections, start=1):
                out.append((f"{anchor}-{i}", section.title, ctx.render_section(section)))
        return out
