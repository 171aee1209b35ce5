"""A run killed mid-way keeps what it measured until then (issue 48, item 4):
its per-second series and its query records reach the store as they are
taken, so a SIGKILL on day 2 of a three-day run loses only the last second;
the resume keeps them as the killed attempt's partial figures
(runs/NNN/attempt-K/) before the run is run again, and stores no duplicate."""

from __future__ import annotations

import csv
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import cli_command
from test_serve import Served

pytestmark = pytest.mark.slow

EXPERIMENT = """\
[experiment]
name = "partial"
[target]
kind = "duckdb"
[workload]
kind = "queries"
repetitions = {repetitions}
queries = {{ sum = "SELECT sum(i) FROM range(8000000) t(i)" }}
"""


def _count(out: Path, sql: str) -> int:
    path = out / "perflab.sqlite"
    if not path.is_file():
        return 0
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return int(conn.execute(sql).fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:  # the store being created
        return 0


def test_a_sigkilled_run_keeps_its_series_and_query_records(tmp_path: Path, run_cli) -> None:
    tmp_path.chmod(0o755)
    f = tmp_path / "e.toml"
    f.write_text(EXPERIMENT.format(repetitions=600))
    out = tmp_path / "out"
    proc = subprocess.Popen(cli_command("run", f, "--out", out, "--quiet", "--no-report"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180  # tells a hang from a slow machine, no more
        while _count(out, "SELECT count(*) FROM query WHERE run_id = 1") < 20:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "no query record reached the store while the run ran"
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        if proc.stderr:
            proc.stderr.close()
    # what the killed perflab measured is in the store: its queries, one row each, and its series
    queries = _count(out, "SELECT count(*) FROM query WHERE run_id = 1")
    assert queries >= 20
    assert _count(out, "SELECT count(DISTINCT seq) FROM query WHERE run_id = 1") == queries
    samples = _count(out, "SELECT count(*) FROM series WHERE run_id = 1 AND source = 'vmstat'")
    assert samples > 0
    assert _count(out, "SELECT count(*) FROM run WHERE status = 'running'") == 1
    with Served(out) as served:  # the live view shows what the dead perflab left
        state = served.json("/api/state")
        assert state["writing"] is False and state["current"] == 1 and state["runs"][0]["status"] == "running"
        series = served.json("/api/series?run=1")["series"]
        assert series["vmstat.free_kib"]["samples"] == _count(
            out, "SELECT count(*) FROM series WHERE run_id = 1 AND source = 'vmstat' AND name = 'free_kib'")

    run_cli("resume", out, "--no-report", timeout=400)
    conn = sqlite3.connect(out / "perflab.sqlite")
    try:
        attempt = conn.execute("SELECT attempt, status, files FROM attempt WHERE run_id = 1").fetchall()
        assert attempt == [(1, "killed", "runs/001/attempt-1")]
        # the finished run's own queries, each once: the killed attempt's are not among them
        assert conn.execute("SELECT count(*), count(DISTINCT seq) FROM query WHERE run_id = 1").fetchone() == (600, 600)
    finally:
        conn.close()
    kept = out / "runs" / "001" / "attempt-1"
    with (kept / "queries.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == queries and {r["query"] for r in rows} == {"sum"}
    with (kept / "series.csv").open() as fh:
        assert sum(1 for r in csv.DictReader(fh) if r["source"] == "vmstat") == samples
    # the report shows them as the killed attempt's partial figures, and the time lost
    run_cli("report", out)
    html = (out / "report.html").read_text()
    assert f"{queries:,} queries" in html and "partial: " in html
    assert "Time lost to attempts that did not finish" in html
    with Served(out) as served:
        (earlier,) = served.json("/api/state")["runs"][0]["earlier_attempts"]
        assert earlier["status"] == "killed" and earlier["files"] == "runs/001/attempt-1"
        assert f"{queries:,} queries" in earlier["partial"]
