"""The progress display: `--progress SECONDS` lines and the live line's width."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

from rich.console import Console

from perflab.progress import LiveProgress, Progress


def _second(t: float, transactions: int, p99: float, failed: int = 0) -> SimpleNamespace:
    return SimpleNamespace(t_s=t, interval_s=1.0, transactions=transactions, latency_p99_ms=p99, failed=failed,
                           skipped=0)


def test_a_line_per_interval_with_the_rate_the_highest_p99_and_errors() -> None:
    out = io.StringIO()
    p = Progress(1, out=out, every=2)
    for t, n, p99, failed in ((1, 100, 2.0, 0), (2, 300, 5.0, 1), (3, 200, 1.0, 0), (4, 200, 1.5, 0)):
        p.second(_second(t, n, p99, failed), "req/s")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "200.0 req/s" in lines[0] and "p99     5.00 ms" in lines[0] and "1 errors" in lines[0]
    assert lines[1].split()[0] == "4.0" and "0 errors" in lines[1]
    quiet = io.StringIO()
    Progress(1, out=quiet).second(_second(1, 1, 1.0))  # without --progress: nothing
    assert quiet.getvalue() == ""


def test_the_live_line_fits_80_columns() -> None:
    screen = io.StringIO()
    console = Console(file=screen, width=80, force_terminal=True, color_system=None)
    live = LiveProgress(12, console=console)
    try:
        live.status("progress: 12.0 s, 123456 req/s, p99 12.34 ms, 0 errors, and a good deal more text")
        console.print(live.bar.get_renderable())
    finally:
        live.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    lines = [line for line in text.splitlines() if "progress:" in line]
    assert lines, screen.getvalue()
    for line in lines:
        assert len(line) <= 80, line
        assert "0:00:0" in line and "…" in line, line  # the elapsed time whole; the status cut
