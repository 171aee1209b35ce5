"""End to end through the CLI: run, show, export, failures, SIGINT, SIGKILL + resume."""

from __future__ import annotations

import csv as csvlib
import io
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import cli_command, postmasters_under
from perflab.runner import interrupt_on_signals

EXPERIMENT = """
[experiment]
name = "e2e"
repetitions = {reps}

[target]
kind = "postgres"
{target}

[workload]
kind = "sql"
setup = ["DROP TABLE IF EXISTS t", "CREATE TABLE t (id serial PRIMARY KEY, v int)"]
statements = [{{ name = "ins", sql = "INSERT INTO t (v) VALUES (1)" }}, "SELECT count(*) FROM t"]
{workload}

[collect]

[factors]
{factors}
"""


def experiment(workdir: Path, reps: int = 1, target: str = "", workload: str = 'iterations = 20',
               factors: str = '"target.settings.synchronous_commit" = ["on", "off"]') -> Path:
    f = workdir / "e.toml"
    f.write_text(EXPERIMENT.format(reps=reps, target=target, workload=workload, factors=factors))
    return f


def runs(out: Path) -> list[dict]:
    conn = sqlite3.connect(out / "perflab.sqlite")
    conn.row_factory = sqlite3.Row
    return [dict(r) for r in conn.execute("SELECT * FROM run ORDER BY id")]


def wait_for(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except sqlite3.Error:
            pass
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def start_in_background(f: Path, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(cli_command("run", f, "--out", out, "--quiet", "--no-report"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_until_running(out: Path, index: int) -> None:
    """Until run `index` (0-based) of the store in `out` is running (the store
    may exist before its plan is written: no rows yet is not running)."""
    def running() -> bool:
        rows = runs(out) if (out / "perflab.sqlite").exists() else []
        return len(rows) > index and rows[index]["status"] == "running"

    wait_for(running)


def timed_experiment(workdir: Path) -> Path:
    return experiment(workdir, reps=3, workload='duration = "3s"', factors='"workload.warmup" = ["0s"]')


def test_run_show_export(workdir: Path, run_cli) -> None:
    out = workdir / "out"
    proc = run_cli("run", experiment(workdir, reps=2), "--out", out, "--no-report")
    assert f"output: {out}" in proc.stdout
    rows = runs(out)
    assert [r["status"] for r in rows] == ["done"] * 4
    conn = sqlite3.connect(out / "perflab.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # the data set is prepared once and reused: load metrics only in run 1
    loads = conn.execute("SELECT run_id FROM metric WHERE name = 'load.total_s'").fetchall()
    assert loads == [(1,)]
    # 20 inserts per run, 4 runs, one table that was never reloaded
    counts = conn.execute("SELECT value FROM metric WHERE name = 'ins.count'").fetchall()
    assert counts == [(20.0,)] * 4
    # the settings of each run are the effective ones
    targets = [json.loads(r["target_json"]) for r in rows]
    levels = [json.loads(r["factors_json"])["target.settings.synchronous_commit"] for r in rows]
    assert sorted(levels) == ["off", "off", "on", "on"]  # two blocks of both levels, in the plan's order
    assert [t["effective_settings"]["synchronous_commit"] for t in targets] == levels
    host = json.loads(conn.execute("SELECT host_json FROM experiment").fetchone()[0])
    assert host["cores"] and host["memory_bytes"] and host["kernel"].startswith("Linux")
    assert (out / "runs" / "001" / "server.log").exists()
    assert postmasters_under(workdir) == []

    shown = run_cli("show", out).stdout
    assert "4 runs, 4 done" in shown and "statements_per_s" in shown
    exported = list(csvlib.DictReader(io.StringIO(run_cli("export", out, "--format", "csv").stdout)))
    assert {"experiment", "run", "combination", "repetition", "status", "target.settings.synchronous_commit",
            "metric", "value", "unit"} <= set(exported[0])
    off = next(r for r, level in zip(rows, levels, strict=True) if level == "off")
    assert any((x["run"], x["combination"], x["repetition"], x["status"], x["target.settings.synchronous_commit"],
                x["metric"], x["value"], x["unit"])
               == (str(off["id"]), str(off["combination"]), str(off["repetition"]), "done", "off", "ins.count", "20.0",
                   "count") for x in exported)
    data = json.loads(run_cli("export", out, "--format", "json").stdout)
    assert {d["run"] for d in data} == {1, 2, 3, 4}

    again = run_cli("run", experiment(workdir), "--out", out, check=False)
    assert again.returncode == 2 and "already holds" in again.stderr
    assert [r["status"] for r in runs(out)] == ["done"] * 4


def test_a_failed_run_is_stored_and_the_experiment_goes_on(workdir: Path, run_cli) -> None:
    out = workdir / "out"
    # 3000GB passes `check` (a size with a unit) and is beyond work_mem's range: the start fails
    f = experiment(workdir, factors='"target.settings.work_mem" = ["4MB", "3000GB", "8MB"]')
    proc = run_cli("run", f, "--out", out, "--no-report", check=False)
    assert proc.returncode == 1, proc.stderr
    rows = runs(out)
    assert [r["status"] for r in rows] == ["done", "failed", "done"]
    # the server's own reason, not only pg_ctl's "could not start server"
    assert 'did not start: LOG: invalid value for parameter "work_mem": "3000GB"' in rows[1]["error"]
    assert "FATAL:" in rows[1]["error"] and "invalid value" in proc.stdout
    assert "work_mem" in rows[1]["log_tail"]
    error_txt = (out / "runs" / "002" / "error.txt").read_text()
    assert error_txt.startswith("PostgreSQL did not start") and "Traceback" not in error_txt
    assert not (out / "runs" / "002" / "traceback.txt").exists()
    # every run keeps its part of the server log: the start lines, or the failed start's words
    assert "ready to accept connections" in (out / "runs" / "001" / "server.log").read_text()
    assert "3000GB" in (out / "runs" / "002" / "server.log").read_text()
    assert postmasters_under(workdir) == []


def test_the_cluster_and_wal_dir_are_removed_unless_keep_data(workdir: Path, run_cli) -> None:
    wal = workdir / "wal"
    f = experiment(workdir, target=f'[target.storage]\nwal_dir = "{wal}"', workload="iterations = 2")
    proc = run_cli("run", f, "--out", workdir / "out", "--no-report")
    assert "removed the target's data" in proc.stdout and "keep_data = true" in proc.stdout
    assert not wal.exists()
    assert list((workdir / "out").rglob("PG_VERSION")) == []
    assert sum(p.stat().st_size for p in (workdir / "out").rglob("*") if p.is_file()) < 5 * 2**20

    # a relative wal_dir is beside the experiment file, wherever perflab is started from
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    f = experiment(workdir, target='keep_data = true\n[target.storage]\nwal_dir = "wal"', workload="iterations = 2")
    proc = run_cli("run", f, "--out", workdir / "kept", "--no-report", cwd=elsewhere)
    assert "kept the target's data" in proc.stdout and str(wal) in proc.stdout
    assert any(wal.iterdir()) and len(list((workdir / "kept").glob("targets/*/pgdata/PG_VERSION"))) == 1
    assert list(elsewhere.iterdir()) == []
    assert postmasters_under(workdir) == []


def test_a_server_killed_mid_run_fails_that_run_only(workdir: Path, run_cli) -> None:
    f = experiment(workdir, reps=2, workload='duration = "4s"', factors='"workload.warmup" = ["0s"]')
    # the output directory given relative to the working directory, as users type it
    proc = subprocess.Popen(cli_command("run", f, "--out", "out", "--quiet", "--no-report"), cwd=workdir,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = workdir / "out"
    wait_until_running(out, 0)
    wait_for(lambda: postmasters_under(workdir))
    time.sleep(1.5)
    for pid in postmasters_under(workdir):
        subprocess.run(["kill", "-9", str(pid)], check=True)
    stdout, stderr = proc.communicate(timeout=120)
    rows = runs(out)
    assert rows[0]["status"] == "failed", stdout + stderr
    first_error = rows[0]["error"]
    assert "not running" in first_error or "connection" in first_error.lower()
    assert rows[1]["status"] == "done", rows[1]["error"]
    assert postmasters_under(workdir) == []

    # a plain resume leaves the failed run alone and says how to run it again
    again = run_cli("resume", "out", "--no-report", cwd=workdir, check=False)
    assert again.returncode == 1 and "--retry-failed" in again.stdout
    assert [r["status"] for r in runs(out)] == ["failed", "done"]

    # by a relative path, from the same directory: the server finds its data
    run_cli("resume", "out", "--retry-failed", "--no-report", cwd=workdir)
    rows = runs(out)
    assert [r["status"] for r in rows] == ["done", "done"], rows[0]["error"]
    assert [r["attempts"] for r in rows] == [2, 1]
    conn = sqlite3.connect(out / "perflab.sqlite")
    kept = conn.execute("SELECT run_id, attempt, status, error, files FROM attempt").fetchall()
    assert kept == [(1, 1, "failed", first_error, "runs/001/attempt-1")]
    assert (out / "runs" / "001" / "attempt-1" / "error.txt").read_text().startswith(first_error)
    assert not (out / "runs" / "001" / "error.txt").exists()
    assert postmasters_under(workdir) == []


def test_sigint_stops_the_server_and_keeps_finished_runs(workdir: Path, run_cli) -> None:
    out = workdir / "out"
    proc = start_in_background(timed_experiment(workdir), out)
    wait_until_running(out, 1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    t = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert time.monotonic() - t < 15
    assert "perflab resume" in stderr and "Traceback" not in stderr
    assert postmasters_under(workdir) == []
    assert [r["status"] for r in runs(out)] == ["done", "planned", "planned"]

    run_cli("resume", out, "--no-report")
    rows = runs(out)
    assert [r["status"] for r in rows] == ["done"] * 3
    assert [r["attempts"] for r in rows] == [1, 2, 1]
    assert postmasters_under(workdir) == []
    # the interrupted attempt is kept: its row, its server log in runs/002/attempt-1/
    conn = sqlite3.connect(out / "perflab.sqlite")
    kept = conn.execute("SELECT run_id, attempt, status, error, ended_at, files FROM attempt").fetchall()
    assert [k[:3] for k in kept] == [(2, 1, "interrupted")] and kept[0][3].startswith("interrupted: SIGINT")
    assert kept[0][4] is not None and (out / kept[0][5] / "server.log").is_file()
    sessions = conn.execute("SELECT command, ended FROM session ORDER BY id").fetchall()
    assert sessions == [("run", "interrupted (SIGINT)"), ("resume", "finished (2 done, 0 failed)")]


def test_sigkill_then_resume_loses_and_duplicates_nothing(workdir: Path, run_cli) -> None:
    out = workdir / "out"
    proc = start_in_background(timed_experiment(workdir), out)
    wait_until_running(out, 1)
    time.sleep(1.5)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 5  # perflab's guardian stops the server it left
    while postmasters_under(workdir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert postmasters_under(workdir) == [], "the server outlived a SIGKILLed perflab by 5 s"
    conn = sqlite3.connect(out / "perflab.sqlite")
    partial = conn.execute("SELECT count(*) FROM series WHERE run_id = 2").fetchone()[0]
    assert [r["status"] for r in runs(out)] == ["done", "running", "planned"]

    proc = run_cli("resume", out, "--no-report")
    assert "run 2 was in flight" in proc.stdout
    rows = runs(out)
    assert [r["status"] for r in rows] == ["done"] * 3
    assert [r["attempts"] for r in rows] == [1, 2, 1]
    assert postmasters_under(workdir) == []
    # run 2's samples are from its second attempt only: one per second at most, no duplicates
    ts = conn.execute("SELECT t FROM series WHERE run_id = 2 AND name = 'qps'").fetchall()
    assert len(ts) == len(set(ts)) and partial >= 0
    assert conn.execute("SELECT count(*) FROM metric WHERE run_id = 2 AND name = 'ins.count'").fetchone()[0] == 1


def test_passwords_never_reach_the_store(workdir: Path, run_cli, scratch_db) -> None:
    out = workdir / "out"
    target = f'dsn = "{scratch_db.conninfo} password=top-secret-9"\nallow_destructive = true'
    f = experiment(workdir, target=target, factors='"workload.iterations" = [3]')
    proc = run_cli("run", f, "--out", out, "--no-report")
    assert "top-secret-9" not in proc.stdout + proc.stderr
    assert b"top-secret-9" not in (out / "perflab.sqlite").read_bytes()
    for p in out.rglob("*"):
        if p.is_file():
            assert b"top-secret-9" not in p.read_bytes(), p
    assert [r["status"] for r in runs(out)] == ["done"]
    # resume needs the password: taken from the unchanged original file
    assert run_cli("resume", out, "--no-report").returncode == 0


def test_a_restart_for_new_settings_is_an_event_of_that_run(workdir: Path, run_cli) -> None:
    out = workdir / "out"
    run_cli("run", experiment(workdir, workload="iterations = 2"), "--out", out, "--no-report")
    conn = sqlite3.connect(out / "perflab.sqlite")
    restarts = conn.execute("SELECT run_id FROM event WHERE kind = 'restart'").fetchall()
    assert restarts == [(2,)]  # synchronous_commit on -> off before run 2


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_signal_whose_exception_python_drops_still_requests_the_stop() -> None:
    """A signal handled inside __del__ (or a weakref callback) has its
    Interrupted printed and dropped by Python; the stop must still be seen."""

    class SignalledDuringDel:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100_000):  # the handler runs here, and its exception is dropped
                pass

    with interrupt_on_signals() as stop:
        obj = SignalledDuringDel()
        del obj
        assert stop.is_set()
