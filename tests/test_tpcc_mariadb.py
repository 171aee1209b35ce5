"""The tpcc workload on a real managed MariaDB: the load (InnoDB tables, the
engine's rows through LOAD DATA LOCAL INFILE), the same rows as PostgreSQL's
load of the same seed, the twelve consistency conditions in MySQL's SQL (each
caught when a row breaks it), and a run through the engine's MySQL client
whose New-Orders match the database's own count.

One warehouse, loaded once for the module; runs of a few seconds. The
comparison with go-tpc is a benchmark (benchmarks/tpcc_vs_gotpc.py).
"""

from __future__ import annotations

import dataclasses
import shutil
import sqlite3
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from conftest import _tempdir
from perflab.errors import UserError
from perflab.model import LoadResult
from perflab.targets.mariadb import MariadbSettings, MariadbTarget, MysqlEndpoint, find_binaries
from perflab.workloads.tpcc import checks, constants, mix, read_meta, schema
from test_tpcc import CORRUPTIONS, ListSink, context, workload

try:
    find_binaries(None)
    import pymysql  # noqa: F401
except (UserError, ImportError) as exc:
    pytest.skip(f"no MariaDB here ({exc}): apt-get install mariadb-server and pip install PyMySQL "
                "(./dev setup does both)", allow_module_level=True)

# PostgreSQL's corruptions pick "one history row" by ctid; MySQL's by LIMIT 1.
MY_CORRUPTIONS = {
    **CORRUPTIONS,
    8: ("UPDATE history SET h_amount = h_amount + 1 WHERE h_w_id = 1 AND h_d_id = 3 LIMIT 1", {8, 9, 10},
        "warehouse 1"),
    9: ("UPDATE history SET h_d_id = 4 WHERE h_w_id = 1 AND h_d_id = 3 LIMIT 1", {9}, "warehouse 1 district 3"),
}

REPO = Path(__file__).resolve().parents[1]

# Every table's key, to read the first rows of each in the same order on both servers.
ORDER = {**dict(schema.PRIMARY_KEYS), "history": "h_c_w_id, h_c_d_id, h_c_id"}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MysqlEndpoint, LoadResult]]:
    """One managed MariaDB, one warehouse loaded by the workload."""
    d = _tempdir("perflab-tpcc-mariadb-")
    target = MariadbTarget(MariadbSettings(kind="mariadb", settings={
        "innodb_buffer_pool_size": "256M", "innodb_flush_log_at_trx_commit": 2}), d)
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, MysqlEndpoint)
        load = workload(load_seed=7, load_jobs=2).prepare(endpoint, context(tmp_path_factory.mktemp("load")))
        yield endpoint, load
    finally:
        target.teardown()
        shutil.rmtree(d, ignore_errors=True)


def test_load_steps_rows_keys_and_meta(loaded) -> None:
    db, load = loaded
    assert list(load.steps) == ["create", "generate_and_load", "indexes", "analyze"]
    fixed = {"warehouse": 1, "district": 10, "customer": 30_000, "history": 30_000, "new_order": 9_000,
             "orders": 30_000, "item": 100_000, "stock": 100_000}
    assert {t: n for t, n in load.rows.items() if t != "order_line"} == fixed
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM order_line").fetchone()[0] == load.rows["order_line"]
        assert 250_000 < load.rows["order_line"] < 350_000  # 5..15 lines per order, 10 on average
        meta = read_meta(conn)
        assert meta is not None and (meta.warehouses, meta.load_seed, meta.delivered) == (1, 7, False)
        assert meta.c_last_load == constants.load_c_last(7)
        engines = dict(conn.execute("SELECT table_name, engine FROM information_schema.tables "
                                    "WHERE table_schema = DATABASE()").fetchall())
        assert all(engines[t] == "InnoDB" for t in schema.TABLES), engines
        keys = {(t, i) for t, i in conn.execute(
            "SELECT DISTINCT table_name, index_name FROM information_schema.statistics "
            "WHERE table_schema = DATABASE()").fetchall()}
    assert {(t, "PRIMARY") for t, _ in schema.PRIMARY_KEYS} <= keys
    assert {(t, name) for name, t, _ in schema.INDEXES} <= keys


def test_the_rows_are_those_postgresql_gets_from_the_same_seed(loaded, scratch_db) -> None:
    """The text rows through LOAD DATA are the rows binary COPY stores in
    PostgreSQL (each server stamps its own load time, so timestamps apart)."""
    from perflab import _engine

    db, _ = loaded
    with scratch_db.connect() as pg:
        for sql in (*schema.drop_sql(), *schema.create_sql()):
            pg.execute(sql)
    _engine.tpcc_load(scratch_db.conninfo, warehouses=1, jobs=2, seed=7, c_last=constants.load_c_last(7))

    def first_rows(conn: Any, table: str, columns: list[str]) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.execute(
            f"SELECT {', '.join(columns)} FROM {table} ORDER BY {ORDER[table]} LIMIT 300").fetchall()]

    with db.connect() as my, scratch_db.connect() as pg:
        for table in schema.TABLES:
            columns = [c.split()[0] for c in schema.COLUMNS[table].strip().split(",\n")
                       if " timestamp" not in c]
            assert first_rows(my, table, columns) == first_rows(pg, table, columns), table
            sums = ", ".join(f"sum({c})" for c in columns if c.split("_", 1)[1] in (
                "ytd", "balance", "amount", "price", "quantity", "o_id", "next_o_id", "ol_cnt", "i_id"))
            if sums:
                mine = [Decimal(v) for v in my.execute(f"SELECT count(*), {sums} FROM {table}").fetchone()]
                theirs = [Decimal(v) for v in pg.execute(f"SELECT count(*), {sums} FROM {table}").fetchone()]
                assert mine == theirs, table


def test_multi_row_inserts_load_the_rows_load_data_loads(loaded, tmp_path) -> None:
    """load_method = "insert" (for a server that refuses LOAD DATA LOCAL):
    every row of every table, all columns but the load's timestamps, equal to
    LOAD DATA's from the same seed, compared by count and a checksum of rows."""
    db, load = loaded
    with db.connect() as conn:
        conn.execute("DROP DATABASE IF EXISTS perflab_insert_test")
        conn.execute("CREATE DATABASE perflab_insert_test")
    other = dataclasses.replace(db, database="perflab_insert_test", load_method="insert")

    def statements() -> dict[str, int]:  # this module's own server: nothing else runs statements on it
        with db.connect() as conn:
            return {k: int(v) for k, v in conn.execute(
                "SHOW GLOBAL STATUS WHERE variable_name IN ('Com_load', 'Com_insert')").fetchall()}

    try:
        before = statements()
        again = workload(load_seed=7, load_jobs=2).prepare(other, context(tmp_path))
        after = statements()
        assert again.rows == load.rows
        # no LOAD DATA ran, and at least one INSERT per 1,000 rows did
        assert after["Com_load"] == before["Com_load"]
        assert after["Com_insert"] - before["Com_insert"] >= sum(load.rows.values()) // 1000
        with db.connect() as a, other.connect() as b:
            for table in schema.TABLES:
                columns = [c.split()[0] for c in schema.COLUMNS[table].strip().split(",\n")
                           if " timestamp" not in c]
                row = ", ".join(f"ifnull({c}, '<null>')" for c in columns)
                digest = f"SELECT count(*), sum(crc32(concat_ws('|', {row}))) FROM {table}"
                assert a.execute(digest).fetchone() == b.execute(digest).fetchone(), table
    finally:
        with db.connect() as conn:
            conn.execute("DROP DATABASE IF EXISTS perflab_insert_test")


def test_every_condition_holds_after_the_load(loaded, tmp_path) -> None:
    db, _ = loaded
    check = workload().check(db, context(tmp_path))
    assert sorted(check.checks) == [c.name for c in checks.CONDITIONS], "all 12, 11 included: no Delivery yet"
    assert check.passed, check.checks


@pytest.mark.parametrize("number", sorted(MY_CORRUPTIONS))
def test_a_broken_row_fails_its_condition_by_name_and_place(loaded, number) -> None:
    db, _ = loaded
    sql, expected, where = MY_CORRUPTIONS[number]
    failed = {}
    with db.connect() as conn:
        conn.execute("START TRANSACTION")  # one transaction, rolled back
        try:
            for statement in sql.split(";"):
                conn.execute(statement)
            for condition in checks.CONDITIONS:
                ok, detail = checks.run_condition(conn, condition, "mysql")
                if not ok:
                    failed[condition.number] = detail
        finally:
            conn.execute("ROLLBACK")
    assert set(failed) == expected, failed
    assert f"condition {number} " in failed[number] and f"fails first at {where}" in failed[number], failed[number]


def test_a_district_with_no_outstanding_order_keeps_condition_2(loaded) -> None:
    """Clause 3.3.2.2 on MariaDB: no NEW-ORDER rows in a district, and
    condition 2 asks only its ORDER part (test_tpcc.py says why)."""
    db, _ = loaded
    by_number = {c.number: c for c in checks.CONDITIONS}
    with db.connect() as conn:
        conn.execute("START TRANSACTION")  # one transaction, rolled back
        try:
            conn.execute("DELETE FROM new_order WHERE no_w_id = 1 AND no_d_id = 3")
            assert checks.run_condition(conn, by_number[2], "mysql")[0]
            assert checks.run_condition(conn, by_number[3], "mysql")[0]
            conn.execute("UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = 1 AND d_id = 3")
            ok, detail = checks.run_condition(conn, by_number[2], "mysql")
        finally:
            conn.execute("ROLLBACK")
    assert not ok and "fails first at warehouse 1 district 3" in detail, detail


def test_procedures_mode_is_refused_with_the_fix(loaded, tmp_path) -> None:
    db, _ = loaded
    for call in (workload(mode="procedures").prepare, workload(mode="procedures", duration="1s").run):
        with pytest.raises(UserError, match="statements") as caught:
            call(db, context(tmp_path))
        assert "PL/pgSQL" in str(caught.value)
    with db.connect() as conn:  # nothing was dropped or loaded again
        assert read_meta(conn) is not None


def test_a_run_counts_what_the_database_counts_and_keeps_every_condition(loaded, tmp_path) -> None:
    """Closed loop, 4 clients for 5 s through the engine's MySQL client: the
    driver's New-Orders per minute match the database's NOPM (sum(d_next_o_id)
    over the same window) within 1%; every type ran; rollbacks are the
    expected 1%; every condition holds afterwards."""
    db, _ = loaded
    sink = ListSink()
    ctx = context(tmp_path, sink)
    w = workload(clients=4, threads=2, duration="5s", warmup="1s", seed=11, max_tries=20)
    result = w.run(db, ctx)
    m = {k: v.value for k, v in result.metrics.items()}
    assert m["transactions"] > 200, m
    assert m["failed"] < 0.01 * m["transactions"], m
    assert m["nopm"] == pytest.approx(m["new_orders_per_min"], rel=0.01)
    for t in mix.TYPES:
        assert m[f"{t}.committed"] > 0, t
    orders = m["new_order.committed"] + m["new_order_rollback.committed"]
    assert abs(m["rollbacks"] - 0.01 * orders) <= 4 * (0.01 * 0.99 * orders) ** 0.5 + 1, m["rollbacks"]
    assert m["tpm_server"] >= 0.9 * m["tps"] * 60 * m["measured_s"] / (m["measured_s"] + 1.5)
    assert "Com_commit" in result.metrics["tpm_server"].description
    tpmc_points = [v for s, name, _, v in sink.points if (s, name) == ("tpcc", "tpmC")]
    assert len(tpmc_points) >= 3 and sum(tpmc_points) > 0
    check = w.check(db, ctx)
    assert check.passed, check.checks
    assert "consistency_11" not in check.checks, "a Delivery ran: condition 11 no longer applies"


def test_the_server_as_a_factor_example_checks(run_cli) -> None:
    done = run_cli("check", REPO / "examples" / "mariadb-vs-postgres.toml")
    assert "8 runs (4 combinations x 2 repetitions)" in done.stdout


def test_an_experiment_runs_tpcc_on_a_managed_mariadb_end_to_end(workdir: Path, run_cli) -> None:
    """`perflab run` with the report: load, a short run, the twelve conditions
    stored as checks, NOPM and the server's TPM stored, the server stopped."""
    experiment = workdir / "tpcc-mariadb.toml"
    experiment.write_text("""
[experiment]
name = "tpcc-mariadb"

[target]
kind = "mariadb"
settings = { innodb_buffer_pool_size = "128M", innodb_flush_log_at_trx_commit = 2 }

[workload]
kind = "tpcc"
warehouses = 1
clients = 2
duration = "2s"
warmup = "0.5s"
""")
    out = workdir / "out"
    run_cli("run", experiment, "--out", out, "--quiet", timeout=400)
    db = sqlite3.connect(out / "perflab.sqlite")
    assert db.execute("SELECT status FROM run").fetchall() == [("done",)]
    metrics = dict(db.execute("SELECT name, value FROM metric").fetchall())
    assert metrics["nopm"] > 0 and metrics["tpm_server"] > 0, metrics
    checks_stored = {n: v for n, v in metrics.items() if n.startswith("check.consistency_")}
    assert len(checks_stored) == 11 and all(v == 1.0 for v in checks_stored.values()), checks_stored
    report = (out / "report.html").read_text()
    assert "tpmC" in report and "NOPM" in report
