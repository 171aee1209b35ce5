"""Builds the report's HTML from ReportData: the page (its header, navigation
and embedded data) as the composite of the registered sections
(perflab.report.sections: one module and one class each, in rank order)."""

from __future__ import annotations

import math
from typing import Any

from perflab.report import html as h
from perflab.report import sections
from perflab.report.sections.base import ReportContext, SectionHtml


def _finite(value: Any) -> Any:
    """JSON-safe: NaN and infinities become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class ReportBuilder(ReportContext):
    def render(self) -> str:
        """The page: its header, then every registered section in rank order."""
        parts: list[SectionHtml] = []
        for section in sections.ordered():
            parts += section.render(self)
        body = "".join(f'<section id="{h.esc(a)}"><h2>{h.esc(t)}</h2>{b}</section>' for a, t, b in parts)
        nav = [(a, t) for a, t, _ in parts]
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
