"""A server killed by the kernel's OOM killer under its own memory limit
(target.resources.memory) is named as such, with the limit, and its run
keeps the cgroup's figures (`resources.*`, the OOM count) and a flag.

Real kills: a managed PostgreSQL in perflab's cgroup, a query that
allocates far past the limit. The OOM killer acts inside that cgroup only
(a memory cgroup's own OOM), so nothing else on the machine is touched.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import cli_command
from perflab.hostctl.cgroups import find_hierarchies

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a cgroup memory limit needs root")

LIMIT = 64 * 2**20


def _memory_controller() -> None:
    if "memory" not in find_hierarchies():
        pytest.skip("this machine mounts no cgroup hierarchy with the memory controller")


def _run(experiment: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli_command("run", str(experiment), "--out", str(out), "--quiet", "--no-report"),
                          capture_output=True, text=True, timeout=600)


def _runs(out: Path) -> list[dict[str, object]]:
    conn = sqlite3.connect(f"file:{out / 'perflab.sqlite'}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        runs = [dict(r) for r in conn.execute("SELECT id, status, error, flags_json FROM run ORDER BY id")]
        for run in runs:
            run["metrics"] = {r["name"]: r["value"] for r in conn.execute(
                "SELECT name, value FROM metric WHERE run_id = ?", (run["id"],))}
    finally:
        conn.close()
    return runs


def _says_oom(error: str) -> None:
    assert error.startswith("the server was killed by the kernel's OOM killer"), error
    assert "64MB" in error and "target.resources.memory" in error, error


def test_a_query_past_the_limit_fails_its_run_naming_the_oom_kill(workdir: Path) -> None:
    _memory_controller()
    experiment = workdir / "oom.toml"
    experiment.write_text(textwrap.dedent("""
        [experiment]
        name = "oom"
        [target]
        kind = "postgres"
        [target.settings]
        shared_buffers = "16MB"
        [target.resources]
        memory = "64MB"
        [workload]
        kind = "sql"
        iterations = 1
        # a few hundred MB of private memory in one backend, with no swap to go to
        statements = ["SELECT array_length(array_agg(repeat('x', 100) || g), 1) FROM generate_series(1, 4000000) g"]
        [collect]
    """))
    out = workdir / "out"
    proc = _run(experiment, out)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a failed run, not a bad input
    (run,) = _runs(out)
    assert run["status"] == "failed"
    _says_oom(str(run["error"]))
    assert "oom-killed" in json.loads(str(run["flags_json"]))
    metrics = run["metrics"]
    assert isinstance(metrics, dict)
    assert metrics.get("resources.memory_oom_kills", 0) >= 1, metrics
    assert metrics.get("resources.memory_limit_bytes") == LIMIT, metrics
    assert "OOM killer" in proc.stdout + proc.stderr  # the console says it too


def test_a_server_that_cannot_start_under_its_limit_fails_that_run_and_the_next_limit_runs(workdir: Path) -> None:
    """The start is OOM-killed: that run fails at once naming the limit, not
    as a start that timed out; the next level of the limit runs as before."""
    _memory_controller()
    experiment = workdir / "start.toml"
    experiment.write_text(textwrap.dedent("""
        [experiment]
        name = "oom-at-start"
        order = "sequential"
        [target]
        kind = "postgres"
        [target.settings]
        shared_buffers = "16MB"
        [workload]
        kind = "sql"
        iterations = 1
        statements = ["SELECT 1"]
        [factors]
        "target.resources.memory" = ["4MB", "512MB"]
        [collect]
    """))
    out = workdir / "out"
    proc = _run(experiment, out)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    small, large = _runs(out)
    assert small["status"] == "failed" and large["status"] == "done", (small, large)
    error = str(small["error"])
    assert error.startswith("the server was killed by the kernel's OOM killer"), error
    assert "4MB" in error and "target.resources.memory" in error and "did not start" in error, error
    assert "oom-killed" in json.loads(str(small["flags_json"]))
    metrics = small["metrics"]
    assert isinstance(metrics, dict) and metrics.get("resources.memory_oom_kills", 0) >= 1, metrics
