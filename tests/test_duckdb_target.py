"""The DuckDB target never writes to a database file it did not create, unless told to."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from perflab.targets.duckdb import DuckDbSettings, DuckDbTarget


def foreign_database(path: Path) -> Path:
    """A DuckDB file someone else made, holding one table of theirs."""
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE theirs AS SELECT 42 AS answer")
    conn.close()
    return path


def test_a_foreign_database_is_opened_read_only(tmp_path: Path) -> None:
    path = foreign_database(tmp_path / "theirs.duckdb")
    target = DuckDbTarget(DuckDbSettings(kind="duckdb", path=str(path), threads=1), tmp_path / "t")
    ep = target.provision()
    try:
        assert ep.read_only and not ep.fresh
        conn = ep.connect()
        assert conn.execute("SELECT answer FROM theirs").fetchall() == [(42,)]
        with pytest.raises(duckdb.Error):
            conn.execute("DROP TABLE theirs")
    finally:
        target.teardown()
    assert duckdb.connect(str(path)).execute("SELECT answer FROM theirs").fetchall() == [(42,)]


def test_allow_destructive_lets_perflab_write_to_it(tmp_path: Path) -> None:
    path = foreign_database(tmp_path / "theirs.duckdb")
    target = DuckDbTarget(DuckDbSettings(kind="duckdb", path=str(path), allow_destructive=True), tmp_path / "t")
    ep = target.provision()
    try:
        assert not ep.read_only
        ep.connect().execute("CREATE TABLE ours (a int)")
    finally:
        target.teardown()


def test_a_database_perflab_created_stays_writable(tmp_path: Path) -> None:
    path = tmp_path / "ours.duckdb"
    for fresh in (True, False):
        target = DuckDbTarget(DuckDbSettings(kind="duckdb", path=str(path)), tmp_path / "t")
        ep = target.provision()
        try:
            assert ep.fresh is fresh and not ep.read_only
            ep.connect().execute("CREATE OR REPLACE TABLE ours (a int)")
        finally:
            target.teardown()


def test_a_writing_workload_on_a_foreign_database_is_refused_before_anything_runs(tmp_path: Path, run_cli) -> None:
    path = foreign_database(tmp_path / "theirs.duckdb")
    f = tmp_path / "e.toml"
    f.write_text(
        f'[experiment]\nname = "x"\n[target]\nkind = "duckdb"\npath = "{path}"\n'
        '[workload]\nkind = "tpch"\nscale_factor = 0.01\ntests = ["power"]\n'
    )
    proc = run_cli("check", f, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "target.allow_destructive" in proc.stderr and "did not create" in proc.stderr
    f.write_text(f.read_text().replace(f'path = "{path}"\n', f'path = "{path}"\nallow_destructive = true\n'))
    assert run_cli("check", f).returncode == 0
