"""Shared fixtures: a real managed PostgreSQL, scratch databases, the CLI.

The server is started by perflab's own PostgresTarget, so the tests exercise
the same code users run. As root, PostgreSQL runs as `nobody`, so every
directory a server uses must be traversable by it: `workdir` makes sure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perflab.proc import cmdline
from perflab.targets.postgres import PostgresEndpoint, PostgresSettings, PostgresTarget
from perflab.targets.postgres.postmaster import PID_FILE, live_postmaster

REPO = Path(__file__).resolve().parents[1]


def remove_test_cluster_homes(base: Path) -> list[Path]:
    """Remove the cluster homes under /tmp that a test made and left.

    Where managed clusters go when the server's user cannot reach the output
    directory (a pytest tmp_path, 0700 as root): /tmp/perflab-<12 hex>
    (PostgresTarget._home), kept for reuse and marked with the output
    directory and the perflab process that used it. A home goes only when its
    mark proves it a test's: its output directory lies under `base` (the
    session's temporary directory) or is gone, the perflab that used it is
    dead or is this process, no server runs in it and nothing is mounted
    there. Another experiment's home, even between two of its runs, is never
    touched. Returns those removed."""
    from perflab.targets.postgres import sweep_orphan_homes

    base = base.resolve()
    return [home for home, _ in sweep_orphan_homes(
        mine_too=True, done_with=lambda owner: owner.is_relative_to(base) or not owner.exists())]


@pytest.fixture(scope="session", autouse=True)
def _no_stray_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    yield
    remove_test_cluster_homes(tmp_path_factory.getbasetemp())


def _tempdir(prefix: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o755)
    return d


@pytest.fixture
def workdir() -> Iterator[Path]:
    d = _tempdir("perflab-test-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_target() -> Iterator[tuple[PostgresTarget, PostgresEndpoint]]:
    d = _tempdir("perflab-pg-session-")
    target = PostgresTarget(
        PostgresSettings.model_validate({"kind": "postgres", "settings": {"max_connections": 200}}), d / "target"
    )
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, PostgresEndpoint)
        yield target, endpoint
    finally:
        target.teardown()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def duckdb_endpoint(workdir: Path) -> Iterator[Any]:
    """An embedded DuckDB database in `workdir`, two threads, closed afterwards."""
    from perflab.targets.duckdb import DuckDbSettings, DuckDbTarget

    target = DuckDbTarget(DuckDbSettings(kind="duckdb", threads=2), workdir / "duckdb")
    try:
        yield target.provision()
    finally:
        target.teardown()


@pytest.fixture
def scratch_db(pg_target: tuple[PostgresTarget, PostgresEndpoint]) -> Iterator[PostgresEndpoint]:
    """A new, empty database on the session server, dropped afterwards."""
    from psycopg.conninfo import make_conninfo

    _, endpoint = pg_target
    name = f"t_{uuid.uuid4().hex[:12]}"
    with endpoint.connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield replace(endpoint, dbname=name, conninfo=make_conninfo(endpoint.conninfo, dbname=name))
    with endpoint.connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "perflab.cli", *map(str, args)]


@pytest.fixture
def run_cli():
    def run(*args: str, check: bool = True, timeout: float = 240, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            cli_command(*args), capture_output=True, text=True, timeout=timeout, cwd=cwd,
            env={**os.environ, **(env or {})},
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"perflab {' '.join(map(str, args))} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        # matplotlib warned while drawing a report's figure (perflab.report.figures.FigureWarning):
        # a bug of the figure, in every test that writes a report through the CLI
        if "FigureWarning" in proc.stderr:
            raise AssertionError(f"perflab {' '.join(map(str, args))}: a report figure made matplotlib warn\n"
                                 f"stderr:\n{proc.stderr}")
        return proc

    return run


def start_run_until(experiment: Path, out: Path, ready: Callable[[], object],
                    env: dict[str, str] | None = None, timeout_s: float = 120) -> subprocess.Popen[bytes]:
    """`perflab run experiment --out out` in the background (its output in
    out's sibling perflab.log), returned once `ready()` is true; fails with
    that log if perflab exits first or ready() stays false for timeout_s."""
    log = out.parent / "perflab.log"
    with log.open("wb") as f:
        run = subprocess.Popen(cli_command("run", experiment, "--out", out, "--quiet", "--no-report"),
                               stdout=f, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout_s
    while not ready():
        if run.poll() is not None:
            raise AssertionError(f"perflab exited {run.returncode} first:\n{log.read_text()}")
        if time.monotonic() > deadline:
            run.kill()
            run.wait()  # reaped here, not warned about in whichever test runs next
            raise AssertionError(f"not ready after {timeout_s} s:\n{log.read_text()}")
        time.sleep(0.05)
    return run


@pytest.fixture
def namespaces_as_found() -> Iterator[set[str]]:
    """perflab's network namespaces and devices before the test. After it, what
    the test left (a failing one) is removed, and only that, proven by a
    journal: this process's own entries made during the test, and the
    journals of perflab processes that are dead (their guardian's work, when
    the guardian died too). Another experiment's namespace, made meanwhile,
    is never touched."""
    from perflab.guardian import journal, recover_orphans
    from perflab.hostctl import netns

    before = set(netns.leftovers())
    own_before = {e["key"] for e in journal().entries()}
    yield before
    for entry in reversed(journal().entries()):
        if entry["key"] not in own_before and entry["kind"] in ("netns", "link"):
            (netns.delete_netns if entry["kind"] == "netns" else netns.delete_link)(entry["args"]["name"])
    if set(netns.leftovers()) - before:
        recover_orphans()


def journaled_network_objects(out: Path) -> set[str]:
    """The namespaces and root-namespace devices journaled by the perflab
    running the experiment in `out`, as `netns.leftovers()` names them
    ("netns NAME", "link NAME"): that run's own objects, never another
    experiment's."""
    import json

    from perflab.guardian import state_dir

    found: set[str] = set()
    for path in state_dir().glob("journal-*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not record.get("out_dir") or Path(record["out_dir"]).resolve() != out.resolve():
            continue
        found |= {f"{e['kind']} {e['args']['name']}" for e in record.get("entries", [])
                  if isinstance(e, dict) and e.get("kind") in ("netns", "link")}
    return found


def postgres_processes(path_fragment: str) -> list[int]:
    """Live postmasters whose command line names a path containing `path_fragment`."""
    pids = []
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmd.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "postgres" in text and path_fragment in text:
            pids.append(int(cmd.parent.name))
    return pids


def postmasters_under(directory: Path) -> list[int]:
    """Postmasters whose data directory lies under `directory` (from postmaster.pid files)."""
    pids = [live_postmaster(pidfile.parent) for pidfile in directory.rglob(PID_FILE)]
    return [pid for pid in pids if pid is not None and "postgres" in cmdline(pid)]


@contextlib.contextmanager
def server_stalled(processes: Callable[[], Iterable[int]], after_s: float = 1.5,
                   for_s: float = 2.0) -> Iterator[None]:
    """SIGSTOP the server's processes (`processes()`, asked at that moment, so
    the clients' backends are among them) `after_s` into the block, for
    `for_s`, then SIGCONT; every process is continued on the way out."""
    stopped: list[int] = []

    def stall() -> None:
        stopped.extend(processes())
        assert stopped, "the server has processes"
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        time.sleep(for_s)
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    timer = threading.Timer(after_s, stall)
    timer.start()
    try:
        yield
    finally:
        timer.join()
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
