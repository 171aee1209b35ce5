"""The ycsb workload: settings refused at `check`, the load through the engine's
loaders and YCSB's operations on a real managed PostgreSQL and MariaDB (the
generators' distributions are the engine's own tests: crates/engine/src/ycsb/gen.rs)."""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from conftest import _tempdir
from perflab.context import RunContext
from perflab.errors import UserError
from perflab.workloads import WORKLOADS
from perflab.workloads.ycsb import MIXES, OPERATIONS, YcsbSettings, YcsbWorkload

ROWS = 2_000
# go-ycsb's key of key number 0: "user" and FNV-1a 64 of its 8 bytes (0xa8c7f832281a39c5, its
# absolute value as a signed number)
FIRST_KEY = "user6284781860667377211"


def workload(**settings: Any) -> YcsbWorkload:
    return YcsbWorkload(YcsbSettings.model_validate(
        {"kind": "ycsb", "record_count": ROWS, "field_count": 4, "field_length": 20, "io": "epoll", "seed": 7,
         **settings}))


def context(tmp_path: Path) -> RunContext:
    return RunContext(run_number=1, run_dir=tmp_path, t0_ns=time.monotonic_ns())


def _experiment(path: Path, **workload_keys: str) -> Path:
    keys = "".join(f"{k} = {v}\n" for k, v in workload_keys.items())
    path.write_text('[experiment]\nname = "ycsb-bad"\n\n[target]\nkind = "postgres"\n\n'
                    f'[workload]\nkind = "ycsb"\nclients = 1\nduration = "1s"\n{keys}')
    return path


@pytest.mark.parametrize(("key", "value", "allowed"), [
    ("workload", '"g"', "'a'"),
    ("distribution", '"pareto"', "'zipfian'"),
    ("record_count", "0", "1"),
])
def test_bad_settings_are_refused_at_check_with_exit_2(workdir: Path, run_cli, key: str, value: str,
                                                       allowed: str) -> None:
    out = run_cli("check", _experiment(workdir / f"{key}.toml", **{key: value}), check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"workload.{key}" in out.stderr and allowed in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    ok = run_cli("check", _experiment(workdir / "ok.toml", workload='"e"', record_count="10"), check=False)
    assert "workload." not in ok.stderr, ok.stderr


def test_registered_with_ycsbs_defaults() -> None:
    assert WORKLOADS.get("ycsb") is YcsbWorkload
    s = YcsbSettings.model_validate({"kind": "ycsb"})
    assert (s.workload, s.record_count, s.field_count, s.field_length, s.distribution) == ("a", 100_000, 10, 100,
                                                                                           None)
    with pytest.raises(ValidationError, match="both duration and operation_count"):
        YcsbSettings.model_validate({"kind": "ycsb", "duration": "5s", "operation_count": 10})
    assert not workload(workload="c").writes() and workload(workload="a").writes()
    # 10 operations over 3 clients: 4 each (the harness counts per client)
    assert workload(operation_count=10, clients=3).settings.per_client() == 4
    assert set(MIXES) == set("abcdef") and all(set(m) <= set(OPERATIONS) for m in MIXES.values())


def test_default_threads_give_a_postgres_client_a_driver_thread_and_mysql_two(monkeypatch) -> None:
    from perflab.workloads import harness
    from perflab.workloads.ycsb import CLIENTS_PER_THREAD, THREADS_WHY

    monkeypatch.setattr(harness, "cores", lambda: 2)
    s = YcsbSettings.model_validate({"kind": "ycsb", "clients": 16})
    assert s.effective_threads(CLIENTS_PER_THREAD["postgres"]) == 16
    assert s.effective_threads(CLIENTS_PER_THREAD["mysql"]) == 8
    why = s.threads_reason(16, THREADS_WHY["postgres"])
    assert why is not None and why.startswith("16 clients on 16 driver threads"), why
    given = YcsbSettings.model_validate({"kind": "ycsb", "clients": 16, "threads": 2})
    assert given.effective_threads(CLIENTS_PER_THREAD["postgres"]) == 2  # a count the user set is theirs


@pytest.fixture(scope="module")
def pg_db(pg_target) -> Iterator[Any]:
    """A scratch database of the session's managed PostgreSQL."""
    _, endpoint = pg_target
    name = "t_ycsb_module"
    with endpoint.connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    from psycopg.conninfo import make_conninfo

    yield dataclasses.replace(endpoint, dbname=name, conninfo=make_conninfo(endpoint.conninfo, dbname=name))
    with endpoint.connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _run(w: YcsbWorkload, endpoint: Any, tmp_path: Path) -> tuple[Any, dict[str, float]]:
    ctx = context(tmp_path)
    result = w.run(endpoint, ctx)
    checks = w.check(endpoint, ctx)
    assert checks.passed and "row_count" in checks.checks, checks
    return result, {name: m.value for name, m in result.metrics.items()}


def _assert_operations(result: Any, metrics: dict[str, float], letter: str, operations: int) -> None:
    mix = MIXES[letter]
    assert metrics["operations"] == operations and metrics["failed"] == 0 and metrics["ops"] > 0
    done = {op: metrics.get(f"operations.{op}", 0) for op in OPERATIONS}
    assert sum(done.values()) == operations
    # only the letter's operations, each near its share (binomial, 400 draws: 5 sigma is 0.125)
    assert {op for op, n in done.items() if n} <= set(mix)
    for op, share in mix.items():
        assert abs(done[op] / operations - share) < 0.13, (op, done)
    # one latency histogram per operation type that ran, and its percentiles
    names = {h.name for h in result.histograms}
    assert {f"latency.{op}" for op, n in done.items() if n} <= names
    for op in (op for op, n in done.items() if n):
        assert 0 < metrics[f"latency.{op}.p50_ms"] <= metrics[f"latency.{op}.p99_ms"]
    # the harness's figures come with it
    assert "driver_cpu_per_op_us" in metrics and metrics["clients"] == 2


def test_postgres_load_and_workloads_a_d_e(pg_db, tmp_path: Path) -> None:
    load = workload().prepare(pg_db, context(tmp_path))
    assert load.rows == {"usertable": ROWS} and set(load.steps) == {"rows", "primary key"}
    with pg_db.connect() as conn:
        count, shortest, longest = conn.execute(
            "SELECT count(*), min(length(field3)), max(length(field3)) FROM usertable").fetchone()
        assert (count, shortest, longest) == (ROWS, 20, 20)
        assert conn.execute("SELECT count(*) FROM usertable WHERE ycsb_key = %s", (FIRST_KEY,)).fetchone()[0] == 1
        pkey = conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'usertable'").fetchall()
        assert [p[0].split(" USING ")[1] for p in pkey] == ["btree (ycsb_key)"]
    for letter in ("a", "d", "e"):
        result, metrics = _run(workload(workload=letter, operation_count=400, clients=2), pg_db, tmp_path)
        _assert_operations(result, metrics, letter, 400)
    with pg_db.connect() as conn:
        # d's and e's inserts: new key numbers after the loaded ones, each one row
        inserted = conn.execute("SELECT count(*) FROM usertable").fetchone()[0] - ROWS
        assert 0 < inserted < 100


def test_a_run_on_a_table_not_loaded_fails_clearly(pg_target, tmp_path: Path) -> None:
    _, endpoint = pg_target
    with pytest.raises(Exception, match="usertable"):
        workload(operation_count=10).run(endpoint, context(tmp_path))


@pytest.fixture(scope="module")
def mariadb() -> Iterator[Any]:
    """One managed MariaDB for the module, skipped where there is none."""
    try:
        from perflab.targets.mariadb import MariadbSettings, MariadbTarget, find_binaries

        find_binaries(None)
        import pymysql  # noqa: F401
    except (UserError, ImportError) as exc:
        pytest.skip(f"no MariaDB here ({exc}): apt-get install mariadb-server and pip install PyMySQL "
                    "(./dev setup does both)")
    d = _tempdir("perflab-ycsb-mariadb-")
    target = MariadbTarget(MariadbSettings(kind="mariadb", settings={"innodb_buffer_pool_size": "64M"}), d)
    try:
        yield target.provision()
    finally:
        target.teardown()
        subprocess.run(["rm", "-rf", str(d)], check=False)


def test_a_mariadb_run_on_a_table_of_other_fields_fails_clearly(mariadb, tmp_path: Path) -> None:
    # a database of the test's own on the module's server, whose usertable has one field of the run's four:
    # the engine's statements, prepared in one round trip, fail, and the run says so
    import dataclasses

    with mariadb.connect() as conn:
        conn.execute("CREATE DATABASE IF NOT EXISTS ycsb_other_fields")
        conn.execute("CREATE TABLE IF NOT EXISTS ycsb_other_fields.usertable "
                     "(YCSB_KEY VARCHAR(255) PRIMARY KEY, FIELD0 TEXT)")
        conn.execute("INSERT IGNORE INTO ycsb_other_fields.usertable VALUES ('user1', 'x')")
    other = dataclasses.replace(mariadb, database="ycsb_other_fields")
    for letter in ("a", "e"):  # read and update statements; scan and insert
        # the engine's prepare failed (not the workload's row count before it: usertable is there)
        with pytest.raises(Exception, match="usertable loaded, with 4 fields"):
            workload(workload=letter, operation_count=10).run(other, context(tmp_path))


def test_mariadb_load_and_workloads_a_f_e(mariadb, tmp_path: Path) -> None:
    load = workload().prepare(mariadb, context(tmp_path))
    assert load.rows == {"usertable": ROWS} and set(load.steps) == {"rows", "analyze"}
    with mariadb.connect() as conn:
        assert conn.execute("SELECT count(*) FROM usertable").fetchone()[0] == ROWS
        assert conn.execute("SELECT length(FIELD0) FROM usertable WHERE YCSB_KEY = %s",
                            (FIRST_KEY,)).fetchone()[0] == 20
    for letter in ("a", "f", "e"):
        result, metrics = _run(workload(workload=letter, operation_count=400, clients=2), mariadb, tmp_path)
        _assert_operations(result, metrics, letter, 400)
