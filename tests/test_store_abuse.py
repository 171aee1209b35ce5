"""The store under abuse: SIGKILL mid-write, readers beside the writer, a full
disk, two perflab runs on one output directory.

Real parts only: `perflab run` as a process (a DuckDB target, so no server is
needed), perflab's own SeriesWriter, a real full filesystem (a small tmpfs
named perflab-*, always unmounted).
"""

from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import cli_command
from perflab.store import STORE_NAME, writer_alive

EXPERIMENT = """
[experiment]
name = "abuse"
repetitions = {repetitions}
[target]
kind = "duckdb"
[workload]
kind = "sql"
statements = ["SELECT 1"]
duration = "{duration}"
[collect]
vmstat = {{ interval = "10ms" }}
"""


def experiment(tmp: Path, repetitions: int, duration: str) -> Path:
    path = tmp / "abuse.toml"
    path.write_text(EXPERIMENT.format(repetitions=repetitions, duration=duration))
    return path


def query(store: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(store, timeout=10)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except sqlite3.Error:  # the store is not there yet
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def processes() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start processes that are always gone when the test ends."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str | Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen(cli_command(*map(str, args)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def integrity(store: Path) -> str:
    return query(store, "PRAGMA integrity_check")[0][0]


def test_sigkill_while_series_are_written_leaves_a_sound_store(tmp_path: Path, processes, run_cli) -> None:
    out = tmp_path / "out"
    store = out / STORE_NAME
    run = processes("run", experiment(tmp_path, 2, "4s"), "--out", out, "--quiet", "--no-report")
    wait_until(lambda: query(store, "SELECT count(*) FROM series s JOIN run r ON r.id = s.run_id "
                                    "WHERE r.status = 'running'")[0][0] > 50, 60, "series of the running run")
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert integrity(store) == "ok"
    assert query(store, "SELECT status FROM run ORDER BY id") == [("running",), ("planned",)]
    assert run_cli("show", out).returncode == 0
    proc = run_cli("resume", out, "--quiet", "--no-report")
    assert "run 1 was in flight" in proc.stdout
    assert query(store, "SELECT id, status, attempts FROM run ORDER BY id") == [(1, "done", 2), (2, "done", 1)]
    assert integrity(store) == "ok"


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from perflab.plan import PlannedRun
    from perflab.store import SeriesWriter, Store
    store = Store.create(Path(sys.argv[1]), name="w", spec_text="", spec_path=None, seed=1, factors=[], host={})
    store.add_plan([PlannedRun(1, 1, 1, {})])
    store.start_run(1, time.monotonic_ns())
    writer = SeriesWriter(store.path, 1, flush_interval_s=0.001)
    print("writing", flush=True)
    t = 0.0
    while True:
        for i in range(500):
            writer.add("fuzz", f"s{i % 7}", t, t * 2)
            t += 0.001
        time.sleep(0.0005)
""")


def test_sigkill_of_a_busy_series_writer_at_random_moments(tmp_path: Path) -> None:
    """perflab's SeriesWriter committing every millisecond, killed mid-stream:
    each time the store is sound and keeps what was committed."""
    rng = random.Random(17)
    for attempt in range(5):
        out = tmp_path / f"w{attempt}"
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
            time.sleep(rng.uniform(0.05, 0.6))
        finally:
            proc.kill()
            proc.communicate(timeout=30)
        store = out / STORE_NAME
        assert integrity(store) == "ok"
        assert query(store, "SELECT count(*) FROM series")[0][0] > 0
        assert query(store, "SELECT name FROM experiment") == [("w",)]


def test_show_and_report_while_a_run_writes(tmp_path: Path, processes, run_cli) -> None:
    out = tmp_path / "out"
    store = out / STORE_NAME
    run = processes("run", experiment(tmp_path, 2, "6s"), "--out", out, "--quiet", "--no-report")
    wait_until(lambda: query(store, "SELECT status FROM run ORDER BY id") == [("done",), ("running",)]
               and query(store, "SELECT count(*) FROM series WHERE run_id = 2")[0][0] > 20,
               90, "run 1 done and run 2 writing series")
    readers = [processes("show", out), processes("report", out), processes("export", out, "--table", "series")]
    outputs = [reader.communicate(timeout=120) for reader in readers]
    for reader, (_, stderr) in zip(readers, outputs, strict=True):
        assert reader.returncode == 0, stderr
        assert "Traceback" not in stderr
    # Run 2 is most likely still running; on a loaded machine it may have ended.
    assert re.search(r"abuse: 2 runs, [12] done", outputs[0][0]), outputs[0][0]
    assert (out / "report.html").is_file()
    assert outputs[2][0].count("\n") > 20  # the series written so far
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 0, stderr
    assert query(store, "SELECT status FROM run ORDER BY id") == [("done",), ("done",)]
    assert integrity(store) == "ok"


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 24 MB tmpfs named perflab-*, unmounted whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mountpoint = Path(tempfile.mkdtemp(prefix="perflab-full-", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m,mode=0755", mountpoint.name, str(mountpoint)],
                   check=True)
    try:
        yield mountpoint
    finally:
        if subprocess.run(["umount", str(mountpoint)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(mountpoint)], check=True)
        mountpoint.rmdir()


def fill(directory: Path) -> Path:
    filler = directory / "filler"
    # unbuffered: a buffered file would hold the part of a chunk the full disk
    # refused, and raise again when closed
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_is_a_clear_error_that_loses_no_finished_run(tmp_path: Path, small_disk: Path, processes,
                                                                 run_cli) -> None:
    out = small_disk / "out"
    store = out / STORE_NAME
    run = processes("run", experiment(tmp_path, 3, "2s"), "--out", out, "--quiet", "--no-report")
    wait_until(lambda: query(store, "SELECT count(*) FROM run WHERE status = 'done'")[0][0] >= 1, 300, "run 1 done")  # a hang, not a busy machine
    done_before = query(store, "SELECT run_id, name, value FROM metric ORDER BY run_id, name")
    filler = fill(small_disk)
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 2, stdout + stderr
    assert "Traceback" not in stderr
    assert f"perflab: error: {out}: the disk is full" in stderr
    assert f"perflab resume {out}" in stderr
    assert integrity(store) == "ok"
    finished = {r[0] for r in query(store, "SELECT id FROM run WHERE status = 'done'")}
    assert finished and query(store, "SELECT run_id, name, value FROM metric WHERE run_id IN "
                                     f"({', '.join(map(str, finished))}) ORDER BY run_id, name")[:len(done_before)] \
        == done_before
    filler.unlink()
    run_cli("resume", out, "--quiet", "--no-report")
    assert query(store, "SELECT status FROM run ORDER BY id") == [("done",)] * 3


def test_a_second_run_on_the_same_output_directory_is_refused(tmp_path: Path, processes, run_cli) -> None:
    out = tmp_path / "out"
    store = out / STORE_NAME
    # Runs long enough that the two refused perflabs start inside them, on a
    # busy machine too.
    path = experiment(tmp_path, 2, "6s")
    first = processes("run", path, "--out", out, "--quiet", "--no-report")
    # The state the refusal rests on: the first holds the lock of a store
    # with its plan (a busy machine gets there late: a generous deadline).
    wait_until(lambda: writer_alive(out) and query(store, "SELECT count(*) FROM run")[0][0] == 2, 180,
               "the first perflab to hold the store")
    for args in (("run", path, "--out", out, "--quiet"), ("resume", out, "--quiet")):
        proc = run_cli(*args, check=False)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        assert f"{out} is in use by another perflab (pid {first.pid})" in proc.stderr
    stdout, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    # Each run once: the refused second perflab changed nothing.
    assert query(store, "SELECT status, attempts FROM run ORDER BY id") == [("done", 1), ("done", 1)]
    proc = run_cli("run", path, "--out", out, "--quiet", check=False)
    assert proc.returncode == 2 and "already holds an experiment's store" in proc.stderr


def test_series_rows_survive_a_flush_that_found_the_disk_full(small_disk: Path) -> None:
    from perflab.errors import DiskFull
    from perflab.plan import PlannedRun
    from perflab.store import SeriesWriter, Store

    store = Store.create(small_disk / "out", name="w", spec_text="", spec_path=None, seed=1, factors=[], host={})
    try:
        store.add_plan([PlannedRun(1, 1, 1, {})])
        store.start_run(1, time.monotonic_ns())
        writer = SeriesWriter(store.path, 1, flush_interval_s=3600)  # flushed here only
        for i in range(100_000):
            writer.add("disk", "full", i / 1000, float(i))
        filler = fill(small_disk)
        with pytest.raises(DiskFull, match="the disk is full"):
            writer._flush()
        filler.unlink()
        writer.close()
        assert query(store.path, "SELECT count(*) FROM series")[0][0] == 100_000
    finally:
        store.close()
