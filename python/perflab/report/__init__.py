"""The report: one self-contained HTML file and its figures, from the store only.

`write_report(out_dir)` reads OUT/perflab.sqlite and writes OUT/report.html
(figures inline as SVG, the data embedded as JSON, nothing fetched) and
OUT/figures/*.svg and *.png. Sections: results (mean, 95% CI, n, CV and
warnings per factor combination), scaling, latency, telemetry, degradation,
the workloads' own sections, and the experiment itself (file, host, versions,
server settings, plan, failures).
"""

from __future__ import annotations

import os
from pathlib import Path

from perflab.report.builder import ReportBuilder
from perflab.report.data import load
from perflab.store import Store

__all__ = ["REPORT_NAME", "write_report"]

REPORT_NAME = "report.html"


def write_report(out_dir: Path) -> Path:
    """Write OUT/report.html and OUT/figures/ from the store in `out_dir`."""
    out_dir = Path(out_dir)
    store = Store.open(out_dir)
    try:
        data = load(store)
        text = ReportBuilder(store, data, out_dir / "figures").render()
    finally:
        store.close()
    path = out_dir / REPORT_NAME
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)  # a reader never sees half a report
    return path
