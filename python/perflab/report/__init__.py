"""The report: one self-contained HTML file and its figures, from the store only.

`write_report(out_dir)` reads OUT/perflab.sqlite and writes OUT/report.html
(figures inline as SVG, the data embedded as JSON, nothing fetched) and
OUT/figures/*.svg and *.png. Sections: results (mean, 95% CI, n, CV and
warnings per factor combination), scaling, latency, telemetry, degradation,
the workloads' own sections, and the experiment itself (file, host, versions,
server settings, plan, failures).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from perflab.errors import UserError
from perflab.report.builder import ReportBuilder
from perflab.report.data import load
from perflab.store import Store

__all__ = ["REPORT_NAME", "write_report"]

REPORT_NAME = "report.html"


def write_report(out_dir: Path, output: Path | None = None) -> Path:
    """Write OUT/report.html and OUT/figures/ from the store in `out_dir`
    (OUT is `output` when given: a read-only store's report goes elsewhere)."""
    out_dir = Path(out_dir)
    dest = Path(output) if output is not None else out_dir
    store = Store.open(out_dir, write=False)
    try:
        try:
            dest.mkdir(parents=True, exist_ok=True)
            if not os.access(dest, os.W_OK):
                code = errno.EROFS if os.statvfs(dest).f_flag & os.ST_RDONLY else errno.EACCES
                raise OSError(code, os.strerror(code))
        except OSError as exc:
            ro = f"; the store is read-only ({store.read_only})" if store.read_only else ""
            raise UserError(f"cannot write the report into {dest}: {exc.strerror}{ro}; nothing was changed",
                            f"give another directory: `perflab report {out_dir} --output OTHER_DIR`") from None
        data = load(store)
        text = ReportBuilder(store, data, dest / "figures").render()
    finally:
        store.close()
    path = dest / REPORT_NAME
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)  # a reader never sees half a report
    return path
