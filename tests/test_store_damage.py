"""A damaged store is named and refused, and never written; a read-only store is read.

Each test damages its own copy of a synthetic store (random bytes over pages
of one table, or a truncation), runs the real CLI on it, and checks the exit
status, that the message names the damage and the way to recover, and that
not one byte of the output directory changed. The read-only store is a bind
mount made read-only inside a private mount namespace (`unshare -m`), so the
host's mounts never change and nothing is left to undo.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from synthetic_store import build_store

STORE = "perflab.sqlite"


def _cli(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-m", "perflab.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=240)


def _snapshot(directory: Path) -> dict[str, str]:
    """Every file under `directory` by its content: any write shows."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = build_store(tmp_path_factory.mktemp("damage") / "out", clients=[1, 2], sync=["on", "off"],
                      repetitions=3, series_points=60, queries=3, histograms=False)
    conn = sqlite3.connect(out / STORE)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every row in the file itself, none in the log
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    for extra in ("-wal", "-shm"):
        Path(f"{out / STORE}{extra}").unlink(missing_ok=True)
    (out / "experiment.toml").write_text(_spec_text(out))
    return out


def _spec_text(out: Path) -> str:
    conn = sqlite3.connect(f"file:{out / STORE}?mode=ro", uri=True)
    try:
        return str(conn.execute("SELECT spec_text FROM experiment").fetchone()[0])
    finally:
        conn.close()


def _pages_of(path: Path, table: str) -> list[int]:
    """The b-tree leaf pages holding `table`'s rows (SQLite's dbstat)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' "
                                           "ORDER BY pageno", (table,))]
    except sqlite3.OperationalError:
        pytest.skip("this SQLite has no dbstat table to find a table's pages with")
    finally:
        conn.close()


@pytest.fixture
def damaged(pristine: Path, tmp_path: Path) -> Path:
    """A copy with 4 KiB of random bytes over one page of the series table."""
    out = tmp_path / "out"
    shutil.copytree(pristine, out)
    pages = _pages_of(out / STORE, "series")
    assert len(pages) > 4
    page = pages[len(pages) // 2]
    with open(out / STORE, "r+b") as f:
        f.seek((page - 1) * 4096)
        f.write(random.Random(44).randbytes(4096))
    return out


def _says_damaged(stderr: str, store_dir: Path) -> None:
    assert "damaged" in stderr and "series" in stderr, stderr
    assert "nothing was changed" in stderr, stderr
    assert ".recover" in stderr and "perflab export" in stderr, stderr
    assert "Traceback" not in stderr, stderr


def test_show_and_report_refuse_a_damaged_store_and_change_nothing(damaged: Path) -> None:
    before = _snapshot(damaged)
    for args in (("show", damaged), ("report", damaged), ("report", damaged, "--output", damaged.parent / "rep")):
        proc = _cli(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        _says_damaged(proc.stderr, damaged)
        assert proc.stdout == "", proc.stdout
    assert _snapshot(damaged) == before
    assert not (damaged / "report.html").exists() and not (damaged.parent / "rep" / "report.html").exists()


def test_resume_refuses_a_damaged_store_and_writes_no_session_nor_lock(damaged: Path) -> None:
    (damaged / "perflab.lock").unlink(missing_ok=True)
    before = _snapshot(damaged)
    proc = _cli("resume", damaged, "--quiet", "--no-report")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    _says_damaged(proc.stderr, damaged)
    assert _snapshot(damaged) == before  # no session row, no lock, no -wal beside the store
    assert not (damaged / "perflab.lock").exists()


def test_export_of_the_damaged_table_writes_nothing_and_the_intact_ones_export(damaged: Path) -> None:
    before = _snapshot(damaged)
    proc = _cli("export", damaged, "--table", "series")
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""  # not half the rows, then a traceback
    _says_damaged(proc.stderr, damaged)
    assert "metrics" in proc.stderr  # the message names the tables that still export
    metrics = _cli("export", damaged, "--table", "metrics")
    assert metrics.returncode == 0, metrics.stderr
    assert len(metrics.stdout.splitlines()) > 12 * 3  # 12 runs' metrics, besides the header
    queries = _cli("export", damaged, "--table", "queries", "--format", "json")
    assert queries.returncode == 0, queries.stderr
    assert _snapshot(damaged) == before


def test_a_truncated_store_is_named_damaged_not_a_wrong_directory(pristine: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(pristine, out)
    size = (out / STORE).stat().st_size
    os.truncate(out / STORE, size // 2)
    before = _snapshot(out)
    for args in (("show", out), ("resume", out, "--quiet")):
        proc = _cli(*args)
        assert proc.returncode == 2, proc.stderr
        assert "damaged" in proc.stderr and ".recover" in proc.stderr, proc.stderr
        assert "give a perflab output directory" not in proc.stderr
    assert _snapshot(out) == before


def test_an_empty_store_is_named_truncated(pristine: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(pristine, out)
    os.truncate(out / STORE, 0)
    proc = _cli("show", out)
    assert proc.returncode == 2 and "damaged" in proc.stderr and "truncated" in proc.stderr, proc.stderr
    assert (out / STORE).stat().st_size == 0


def _read_only_mount(directory: Path) -> tuple[str, ...]:
    """A command prefix that runs the CLI with `directory` bind-mounted
    read-only over itself in a private mount namespace of its own."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a read-only bind mount in a private mount namespace needs root and unshare")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m is not allowed here: {probe.stderr.decode().strip()}")
    d = str(directory)
    return ("unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"', d)


def test_a_read_only_store_is_shown_exported_and_reported_elsewhere(pristine: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(pristine, out)
    ro = _read_only_mount(out)
    before = _snapshot(out)
    show = _cli("show", out, prefix=ro)
    assert show.returncode == 0, show.stderr
    assert "read-only" in show.stdout and "12 runs" in show.stdout, show.stdout
    export = _cli("export", out, "--table", "series", prefix=ro)
    assert export.returncode == 0, export.stderr
    assert len(export.stdout.splitlines()) > 100
    elsewhere = tmp_path / "report"
    report = _cli("report", out, "--output", elsewhere, prefix=ro)
    assert report.returncode == 0, report.stderr
    assert (elsewhere / "report.html").stat().st_size > 0
    here = _cli("report", out, prefix=ro)
    assert here.returncode == 2, here.stderr
    assert "read-only" in here.stderr and "--output" in here.stderr, here.stderr
    resume = _cli("resume", out, "--quiet", prefix=ro)
    assert resume.returncode == 2, resume.stderr
    assert "read-only" in resume.stderr and "not a readable perflab store" not in resume.stderr, resume.stderr
    assert _snapshot(out) == before

