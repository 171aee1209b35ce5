"""End to end through the CLI: run, show, export, failures, SIGINT, SIGKILL + resume."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from conftest import cli_command, postmasters_under

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
    """Until run `index` (0-based) of the store in `out` is running."""
    wait_for(lambda: (out / "perflab.sqlite").exists() and runs(out)[index]["status"] == "running")


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
    assert [t["effective_settings"]["synchronous_commit"] for t in targets] == ["on", "on", "off", "off"]
    host = json.loads(conn.execute("SELECT host_json FROM experiment").fetchone()[0])
    assert host["cores"] and host["memory_bytes"] and host["kernel"].startswith("Linux")
    assert (out / "runs" / "001" / "server.log").exists()
    assert postmasters_under(workdir) == []

    shown = run_cli("show", out).stdout
    assert "4 runs, 4 done" in shown and "statements_per_s" in shown
    csv = run_cli("export", out, "--format", "csv").stdout.splitlines()
    assert csv[0].startswith("run,combination,repetition,status,target.settings.synchronous_commit,metric,value,unit")
    assert any(line.startswith("3,2,1,done,off,ins.count,20.0,count") for line in csv)
    data = json.loads(run_cli("export", out, "--format", "json").stdout)
    assert {d["run"] for d in data} == {1, 2, 3, 4}

    again = run_cli("run", experiment(workdir), "--out", out, check=False)
    assert again.returncode == 2 and "already holds" in again.stderr
    assert [r["status"] for r in runs(out)] == ["done"] * 4


def test_a_failed_run_is_stored_and_the_experiment_goes_on(workdir: Path, run_cli) -> None:
    out = workdir / "out"
    f = experiment(workdir, factors='"target.settings.work_mem" = ["4MB", "lots", "8MB"]')
    proc = run_cli("run", f, "--out", out, "--no-report", check=False)
    assert proc.returncode == 1, proc.stderr
    rows = runs(out)
    assert [r["status"] for r in rows] == ["done", "failed", "done"]
    assert "did not start" in rows[1]["error"]
    assert "work_mem" in rows[1]["log_tail"]
    assert postmasters_under(workdir) == []


def test_a_server_killed_mid_run_fails_that_run_only(workdir: Path, run_cli) -> None:
    out = workdir / "out"
    f = experiment(workdir, reps=2, workload='duration = "4s"', factors='"workload.warmup" = ["0s"]')
    proc = start_in_background(f, out)
    wait_until_running(out, 0)
    wait_for(lambda: postmasters_under(workdir))
    time.sleep(1.5)
    for pid in postmasters_under(workdir):
        subprocess.run(["kill", "-9", str(pid)], check=True)
    stdout, stderr = proc.communicate(timeout=120)
    rows = runs(out)
    assert rows[0]["status"] == "failed", stdout + stderr
    assert "not running" in rows[0]["error"] or "connection" in rows[0]["error"].lower()
    assert rows[1]["status"] == "done", rows[1]["error"]
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
