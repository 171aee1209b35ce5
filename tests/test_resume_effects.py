"""A resumed experiment equals an uninterrupted one (issue 34), with real
servers and real signals: a DBT-3 durability study SIGKILLed during a run's
refresh functions and resumed uses the refresh pairs an uninterrupted copy
uses, keeps the killed attempt, and says so in `show` and in the report; a
retried run keeps its pairs and its repetition number on a fresh load."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import psycopg

from conftest import cli_command, postmasters_under
from perflab import _engine

SF = 0.01
REPETITIONS = 4
STREAMS = 2
SEED = 7  # the workload's seed: its refresh pairs' blocks, the same in every copy

EXPERIMENT = f"""
[experiment]
name = "dbt3-durability-small"
repetitions = {REPETITIONS}
order = "sequential"

[target]
kind = "postgres"

[workload]
kind = "tpch"
scale_factor = {SF}
tests = ["throughput"]
streams = {STREAMS}
seed = {SEED}
maintenance = "VACUUM ANALYZE"
query_timeout = "5min"

[collect]
vmstat = {{ interval = "1s" }}
"""


def experiment(workdir: Path) -> Path:
    f = workdir / "dbt3.toml"
    f.write_text(EXPERIMENT)
    return f


def db(out: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(out / "perflab.sqlite")
    conn.row_factory = sqlite3.Row
    return conn


def refresh_sequence(out: Path) -> list[tuple[int, str]]:
    """(run, "RF1 pair 5: inserted 15 orders, 65 lineitems") in run and stream order."""
    rows = db(out).execute("SELECT run_id, text FROM query WHERE query IN ('RF1', 'RF2') ORDER BY run_id, seq")
    return [(r["run_id"], r["text"]) for r in rows]


def start(f: Path, out: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(cli_command("run", f, "--out", out, "--quiet", "--no-report"), stdout=sink,
                                stderr=subprocess.STDOUT)


def wait_for(predicate, proc: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"perflab exited {proc.returncode} first:\n{log.read_text()}"
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


class RefreshWatch:
    """Whether run 3's first RF1 has committed: its orders are in the server's
    database, reached as run 1 recorded it, over one connection kept open.
    Its keys are made before (generating them takes seconds on a busy machine):
    run 3's first pair is 2 * STREAMS + 1, the seed the experiment's."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.pg: psycopg.Connection | None = None
        orders, _, _, _ = _engine.tpch_rf1_rows(SF, 2 * STREAMS + 1, SEED)
        self.keys = [int(line.split(b"|")[0]) for line in orders.splitlines()]

    def __call__(self) -> bool:
        try:
            if self.pg is None:
                endpoint = db(self.out).execute("SELECT target_json FROM run WHERE id = 1").fetchone()
                if endpoint is None or endpoint[0] is None:
                    return False
                self.pg = psycopg.connect(json.loads(endpoint[0])["endpoint"], autocommit=True, connect_timeout=5)
            return self.pg.execute("SELECT count(*) FROM orders WHERE o_orderkey = any(%s)",
                                   (self.keys,)).fetchone()[0] > 0
        except (sqlite3.Error, psycopg.Error):
            return False

    def close(self) -> None:
        if self.pg is not None:
            self.pg.close()


def run_3_status(out: Path) -> str:
    return db(out).execute("SELECT status FROM run WHERE id = 3").fetchone()[0]


def test_sigkill_in_a_refresh_then_resume_equals_an_uninterrupted_study(workdir: Path, run_cli) -> None:
    f = experiment(workdir)
    plain = workdir / "plain"
    run_cli("run", f, "--out", plain, "--no-report", timeout=600)
    expected = refresh_sequence(plain)
    assert [run for run, _ in expected] == [r for r in range(1, REPETITIONS + 1) for _ in range(2 * STREAMS)]

    out = workdir / "killed"
    log = workdir / "killed.log"
    proc = start(f, out, log)
    watch = RefreshWatch(out)
    try:
        wait_for(watch, proc, log)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        watch.close()
    assert run_3_status(out) == "running", "killed during run 3"
    deadline = time.monotonic() + 10  # the guardian stops the server the killed perflab left
    while postmasters_under(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert postmasters_under(out) == []

    shown = run_cli("show", out).stdout
    assert "interrupted" in shown and "running" not in shown.replace("was running", "")
    assert f"{REPETITIONS - 2} to run" in shown  # run 3 (interrupted) and run 4

    resumed = run_cli("resume", out, "--no-report", timeout=600)
    assert "run 3 was in flight" in resumed.stdout
    conn = db(out)
    assert [r["status"] for r in conn.execute("SELECT status FROM run ORDER BY id")] == ["done"] * REPETITIONS
    # the same refresh pairs, with the same rows, run by run, as without the kill
    assert refresh_sequence(out) == expected
    undone = [r["message"] for r in conn.execute("SELECT message FROM event WHERE run_id = 3 AND kind = 'refresh-undone'")]
    assert undone, "run 3's committed refresh functions were undone before it ran again"
    killed = [dict(r) for r in conn.execute("SELECT * FROM attempt")]
    assert [(a["run_id"], a["attempt"], a["status"]) for a in killed] == [(3, 1, "killed")]
    assert killed[0]["error"].startswith("killed")
    # what it stored (vmstat samples, once a second, if it lived that long) is kept beside
    # it; its end is its last sign of life (a sample, its claim of refresh pairs)
    if killed[0]["files"] is not None:
        assert (out / killed[0]["files"] / "series.csv").read_text().startswith("source,name,t,value")
    assert killed[0]["started_at"] < killed[0]["ended_at"] < conn.execute(
        "SELECT started_at FROM run WHERE id = 3").fetchone()[0]
    sessions = [dict(r) for r in conn.execute("SELECT * FROM session ORDER BY id")]
    assert [(s["command"], s["ended"]) for s in sessions] == [("run", "killed"), ("resume", "finished (2 done, 0 failed)")]

    run_cli("report", out)
    html = (out / "report.html").read_text()
    assert "Experiment history" in html and "killed" in html
    from perflab.store import Store

    store = Store.open(out)
    assert store.run_marks() == {3: ["resumed"]}
    store.close()
    assert postmasters_under(workdir) == []


def test_retry_failed_keeps_pairs_and_repetitions_on_a_fresh_load(workdir: Path, run_cli) -> None:
    """Run 3 fails (its server is SIGKILLed during its run); the experiment
    goes on and finishes (its data is removed); `resume --retry-failed` runs
    run 3 again on a fresh load with its own refresh pairs, and the report
    keeps it at repetition 3, marked retried and on a fresh load."""
    f = experiment(workdir)
    out = workdir / "out"
    log = workdir / "run.log"
    proc = start(f, out, log)
    watch = RefreshWatch(out)
    try:
        wait_for(watch, proc, log)
    finally:
        watch.close()
    assert run_3_status(out) == "running"
    for pid in postmasters_under(out):
        os.kill(pid, signal.SIGKILL)
    assert proc.wait(timeout=600) == 1  # a failed run
    conn = db(out)
    assert [r["status"] for r in conn.execute("SELECT status FROM run ORDER BY id")] == ["done", "done", "failed",
                                                                                            "done"]
    run_cli("resume", out, "--retry-failed", "--no-report", timeout=600)
    assert [r["status"] for r in conn.execute("SELECT status FROM run ORDER BY id")] == ["done"] * REPETITIONS
    pairs = {run: sorted({int(text.split()[2].rstrip(":")) for r, text in refresh_sequence(out) if r == run})
             for run in range(1, REPETITIONS + 1)}
    assert pairs == {run: [2 * run - 1, 2 * run] for run in range(1, REPETITIONS + 1)}
    from perflab.store import Store

    store = Store.open(out)
    assert store.run_marks() == {3: ["retried", "fresh load"]}
    assert [(a["run_id"], a["status"]) for a in store.attempts()] == [(3, "failed")]
    store.close()
    assert postmasters_under(workdir) == []
