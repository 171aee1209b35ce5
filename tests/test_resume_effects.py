"""A resumed experiment equals an uninterrupted one (issue 34), with real
servers and real signals: a DBT-3 durability study SIGKILLed during a run's
refresh functions and resumed uses the refresh pairs an uninterrupted copy
uses, keeps the killed attempt, and says so in `show` and in the report; a
retried run keeps its pairs and its repetition number on a fresh load. TPC-C
and tpcb runs killed midway record what their killed attempt committed; a
query set that writes is loaded again before its killed run runs again."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import psycopg

from conftest import cli_command, postmasters_under
from perflab import _engine

SF = 0.01
REPETITIONS = 6  # the issue's: and 5 finished runs are what the report's degradation table needs
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
    if not (out / "perflab.sqlite").is_file():  # not made here: perflab would find a store it cannot read
        raise sqlite3.OperationalError(f"{out} holds no store yet")
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


def degradation_rows(out: Path) -> list[tuple[int, int, str]]:
    """The report's per-run degradation table (Throughput@Size): (run, its
    repetition, the rest of the row's text: value, change, note)."""
    html = (out / "report.html").read_text()
    section = html[html.find('id="degradation"'):]
    section = section[:section.find("</table>", section.find("<h3>"))]
    rows = re.findall(r"<tr><td>#(\d+)</td><td[^>]*>(\d+)</td>(.*?)</tr>", section[section.find("<h3>"):])
    return [(int(run), int(rep), re.sub(r"<[^>]+>", " ", rest)) for run, rep, rest in rows]


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
    kept = out / "runs" / "003" / "attempt-1"
    assert killed[0]["files"] == "runs/003/attempt-1"
    if (kept / "series.csv").exists():
        assert (kept / "series.csv").read_text().startswith("source,name,t,value")
    # its part of the server log, copied at resume from where it started to where the server stopped
    assert "shutting down" in (kept / "server.log").read_text() and not (kept / "log-slices.json").exists()
    assert "shutting down" not in (out / "runs" / "002" / "server.log").read_text()
    assert killed[0]["started_at"] < killed[0]["ended_at"] < conn.execute(
        "SELECT started_at FROM run WHERE id = 3").fetchone()[0]
    sessions = [dict(r) for r in conn.execute("SELECT * FROM session ORDER BY id")]
    assert [(s["command"], s["ended"]) for s in sessions] == [
        ("run", "killed"), ("resume", f"finished ({REPETITIONS - 2} done, 0 failed)")]

    run_cli("report", out)
    html = (out / "report.html").read_text()
    assert "Experiment history" in html and "killed" in html
    # the report's degradation table: every run at its repetition, run 3 (and only it) marked resumed
    rows = degradation_rows(out)
    assert [(run, rep) for run, rep, _ in rows] == [(n, n) for n in range(1, REPETITIONS + 1)]
    assert [run for run, _, rest in rows if "resumed" in rest] == [3]
    assert "run 3 (resumed)" in html  # the TPC-H section's columns, a run each
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
    assert [r["status"] for r in conn.execute("SELECT status FROM run ORDER BY id")] == [
        "failed" if n == 3 else "done" for n in range(1, REPETITIONS + 1)]
    # the failed run keeps what it completed before it failed: the RF1 that committed among them
    completed = [(r["query"], r["text"], r["status"]) for r in conn.execute("SELECT * FROM query WHERE run_id = 3")]
    assert ("RF1", f"RF1 pair {2 * 3 - 1}: ", "ok") in [(q, t[:len(f"RF1 pair {2 * 3 - 1}: ")], st)
                                                         for q, t, st in completed]
    # the report shows where the failed run is missing, the others at their repetitions
    run_cli("report", out)
    rows = degradation_rows(out)
    assert [(run, rep) for run, rep, _ in rows] == [(n, n) for n in range(1, REPETITIONS + 1)]
    assert [run for run, _, rest in rows if "failed: no value" in rest] == [3]
    run_cli("resume", out, "--retry-failed", "--no-report", timeout=600)
    # ... and its rows and files stay beside the new attempt's, as attempt 1's
    kept = out / "runs" / "003" / "attempt-1"
    with (kept / "queries.csv").open(newline="") as rows:
        assert [(r["query"], r["text"], r["status"]) for r in csv.DictReader(rows)] == completed
    assert (kept / "server.log").stat().st_size > 0 and (kept / "error.txt").is_file()
    assert [r["status"] for r in conn.execute("SELECT status FROM run ORDER BY id")] == ["done"] * REPETITIONS
    pairs = {run: sorted({int(text.split()[2].rstrip(":")) for r, text in refresh_sequence(out) if r == run})
             for run in range(1, REPETITIONS + 1)}
    assert pairs == {run: [2 * run - 1, 2 * run] for run in range(1, REPETITIONS + 1)}
    from perflab.store import Store

    store = Store.open(out)
    assert store.run_marks() == {3: ["retried", "fresh load"]}
    assert [(a["run_id"], a["status"]) for a in store.attempts()] == [(3, "failed")]
    store.close()
    # the report keeps run 3 at repetition 3 (it ran last), and says it ran retried, on a fresh load
    run_cli("report", out)
    rows = degradation_rows(out)
    assert [(run, rep) for run, rep, _ in rows] == [(n, n) for n in range(1, REPETITIONS + 1)]
    assert [(run, " ".join(rest.split()[-3:])) for run, _, rest in rows if "retried" in rest] == [
        (3, "retried, fresh load")]
    assert postmasters_under(workdir) == []


def wait_gone(out: Path) -> None:
    """The guardian stops the server a killed perflab left."""
    deadline = time.monotonic() + 10
    while postmasters_under(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert postmasters_under(out) == []


def server_of_run_1(out: Path) -> psycopg.Connection | None:
    """The experiment's server, reached as run 1 recorded it; None until then."""
    try:
        row = db(out).execute("SELECT target_json FROM run WHERE id = 1").fetchone()
        if row is None or row[0] is None:
            return None
        return psycopg.connect(json.loads(row[0])["endpoint"], autocommit=True, connect_timeout=5)
    except (sqlite3.Error, psycopg.Error):
        return None


def kill_when(f: Path, out: Path, ready) -> None:
    """`perflab run` SIGKILLed as soon as ready(server) holds, run 2 in flight."""
    log = out.parent / f"{out.name}.log"
    proc = start(f, out, log)
    pg: list[psycopg.Connection] = []

    def check() -> bool:
        if not pg:
            conn = server_of_run_1(out)
            if conn is None:
                return False
            pg.append(conn)
        try:
            return bool(ready(pg[0]))
        except psycopg.Error:
            return False

    try:
        wait_for(check, proc, log)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        for conn in pg:
            conn.close()
    assert db(out).execute("SELECT status FROM run WHERE id = 2").fetchone()[0] == "running"
    wait_gone(out)


TPCC = """
[experiment]
name = "tpcc-resume"
repetitions = 2
order = "sequential"

[target]
kind = "postgres"

[workload]
kind = "tpcc"
warehouses = 1
clients = 2
duration = "8s"
load_jobs = 2
"""


def test_tpcc_run_killed_midway_records_what_it_committed_and_stays_consistent(workdir: Path, run_cli) -> None:
    """Run 2 of a TPC-C experiment is SIGKILLed while its transactions
    commit; resumed, it records the New-Orders and Payments the killed
    attempt committed (they stay: the data only grows, each transaction is
    atomic), and its consistency conditions hold."""
    f = workdir / "tpcc.toml"
    f.write_text(TPCC)
    out = workdir / "out"

    def run_2_committed(pg: psycopg.Connection) -> bool:
        rows = db(out).execute("SELECT data_json FROM effect WHERE run_id = 2 AND kind = 'tpcc.orders'").fetchall()
        if not rows:
            return False
        start_sum = json.loads(rows[0][0])["next_o_id_sum"]
        return pg.execute("SELECT sum(d_next_o_id) FROM district").fetchone()[0] > start_sum + 20

    kill_when(f, out, run_2_committed)
    run_cli("resume", out, "--no-report", timeout=600)
    conn = db(out)
    assert [r["status"] for r in conn.execute("SELECT status FROM run ORDER BY id")] == ["done", "done"]
    effects = [(r["attempt"], json.loads(r["data_json"])) for r in conn.execute(
        "SELECT attempt, data_json FROM effect WHERE run_id = 2 AND kind = 'tpcc.orders' ORDER BY rowid")]
    assert [a for a, _ in effects] == [1, 2]
    first, second = effects[0][1], effects[1][1]
    assert first["load_seed"] == second["load_seed"] and first["districts"] == 10
    left = second["earlier_attempt"]
    assert left["attempt"] == 1 and left["orders"] == second["next_o_id_sum"] - first["next_o_id_sum"] > 20
    said = [r["message"] for r in conn.execute("SELECT message FROM event WHERE run_id = 2 AND kind = 'earlier-attempt'")]
    assert len(said) == 1 and f"attempt 1 committed {left['orders']} New-Orders" in said[0]
    checks = {r["name"]: r["value"] for r in conn.execute("SELECT name, value FROM metric WHERE run_id = 2 "
                                                          "AND name LIKE 'check.%'")}
    assert len(checks) >= 11 and set(checks.values()) == {1.0}, checks
    assert [(r["run_id"], r["status"]) for r in conn.execute("SELECT * FROM attempt")] == [(2, "killed")]


QUERIES = """
[experiment]
name = "queries-writes-resume"
repetitions = 2
order = "sequential"

[target]
kind = "postgres"

[workload]
kind = "queries"
prepare = "prepare.sql"

[workload.queries]
a_add = "insert into perflab_t select 1"
b_wait = "select pg_sleep(4)"
"""


def test_queries_that_write_killed_midway_run_again_on_a_fresh_load(workdir: Path, run_cli) -> None:
    """A query set with an INSERT: run 2 is SIGKILLed after its insert
    committed; resumed, its data is loaded again first (its prepare script),
    and the run is marked resumed and on a fresh load."""
    f = workdir / "queries.toml"
    f.write_text(QUERIES)
    (workdir / "prepare.sql").write_text("drop table if exists perflab_t; create table perflab_t (x int);")
    out = workdir / "out"
    kill_when(f, out, lambda pg: pg.execute("SELECT count(*) FROM perflab_t").fetchone()[0] >= 2)
    resumed = run_cli("resume", out, "--no-report", timeout=600)
    assert "loading the data again" in resumed.stdout + resumed.stderr
    conn = db(out)
    assert [r["status"] for r in conn.execute("SELECT status FROM run ORDER BY id")] == ["done", "done"]
    effects = [(r["attempt"], r["kind"], json.loads(r["data_json"])) for r in conn.execute(
        "SELECT * FROM effect WHERE run_id = 2 ORDER BY rowid")]
    assert [(a, k) for a, k, _ in effects] == [(1, "queries.writes"), (2, "load"), (2, "queries.writes")]
    assert effects[0][2] == {"queries": ["a_add"], "executions": 1, "reloadable": True}
    assert effects[1][2]["reload"] is True and "cannot be undone" in effects[1][2]["why"]
    metrics = {r["name"] for r in conn.execute("SELECT name FROM metric WHERE run_id = 2")}
    assert "load.prepare script_s" in metrics
    from perflab.store import Store

    store = Store.open(out)
    assert store.run_marks() == {2: ["resumed", "fresh load"]}
    store.close()


TPCB = """
[experiment]
name = "tpcb-resume"
repetitions = 2
order = "sequential"

[target]
kind = "postgres"

[workload]
kind = "tpcb"
scale = 1
clients = 2
duration = "8s"
"""


def test_tpcb_run_killed_midway_records_the_history_its_killed_attempt_left(workdir: Path, run_cli) -> None:
    """Run 2 of a tpcb experiment is SIGKILLed while its transactions
    commit; resumed, it records and says how many history rows (committed
    transactions) the killed attempt left, counted before its own vacuum
    empties pgbench_history, and its consistency check holds."""
    f = workdir / "tpcb.toml"
    f.write_text(TPCB)
    out = workdir / "out"
    seen: list[int] = []

    def run_2_committed(pg: psycopg.Connection) -> bool:
        if not db(out).execute("SELECT 1 FROM effect WHERE run_id = 2 AND kind = 'tpcb.history'").fetchall():
            return False
        seen.append(pg.execute("SELECT count(*) FROM pgbench_history").fetchone()[0])
        return seen[-1] > 50

    kill_when(f, out, run_2_committed)
    run_cli("resume", out, "--no-report", timeout=600)
    conn = db(out)
    assert [r["status"] for r in conn.execute("SELECT status FROM run ORDER BY id")] == ["done", "done"]
    effects = [(r["attempt"], json.loads(r["data_json"])) for r in conn.execute(
        "SELECT attempt, data_json FROM effect WHERE run_id = 2 AND kind = 'tpcb.history' ORDER BY rowid")]
    assert [a for a, _ in effects] == [1, 2]
    first, second = effects[0][1], effects[1][1]
    assert first["emptied"] and first["rows_before"] == 0 and second["rows_before"] == 0  # vacuum, as pgbench
    left = second["earlier_attempt"]
    assert left == {"attempt": 1, "history_rows": second["rows_found"]} and left["history_rows"] >= seen[-1] > 50
    said = [r["message"] for r in conn.execute("SELECT message FROM event WHERE run_id = 2 AND kind = 'earlier-attempt'")]
    assert len(said) == 1 and said[0].startswith(f"attempt 1 committed {left['history_rows']} transactions")
    checks = {r["name"]: r["value"] for r in conn.execute("SELECT name, value FROM metric WHERE run_id = 2 "
                                                          "AND name LIKE 'check.%'")}
    assert checks and set(checks.values()) == {1.0}, checks
    assert [(r["run_id"], r["status"]) for r in conn.execute("SELECT * FROM attempt")] == [(2, "killed")]
