"""TPC-H and SSB at SF 0.01 on a real managed MariaDB: the load streamed
from the engine's generators through LOAD DATA LOCAL INFILE, the keys and
indexes InnoDB gets, every TPC-H answer equal to PostgreSQL's (the stored
PostgreSQL answers of tests/data/tpch/answers/sf0.01, which test_tpch.py
checks PostgreSQL against), the queries workload's "@tpch" set in MySQL's
dialect, the refresh functions, SSB's 13 answers equal
to a PostgreSQL's loaded in the same test, and the run's cancel stopping the
load on MariaDB and on PostgreSQL.

Every query runs under QUERY_TIMEOUT (stated in the README): at SF 0.01
MariaDB runs each of them in well under a second, so a timeout is a failure
here, never a skip.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perflab import _engine
from perflab.errors import RunFailure
from perflab.workloads.queries import QueriesSettings, QueriesWorkload
from perflab.workloads.ssb import SsbSettings, SsbWorkload, queries
from perflab.workloads.tpch import TpchSettings, TpchWorkload, refresh, schema
from test_mariadb import server  # noqa: F401  (the module's managed MariaDB)
from test_ssb import _answers
from test_tpch import ANSWERS, ROWS_SF001, context, count

SF = 0.01
QUERY_TIMEOUT = 60.0  # seconds, per query; the README states it


def tpch(**settings: Any) -> TpchWorkload:
    return TpchWorkload(TpchSettings.model_validate(
        {"kind": "tpch", "scale_factor": SF, "seed": 42, "query_timeout": QUERY_TIMEOUT, "load_jobs": 2, **settings}))


def own_database(endpoint: Any, name: str) -> Any:
    """A database of the test's own on the module's server, made empty."""
    with endpoint.connect() as conn:
        conn.execute(f"drop database if exists {name}")
        conn.execute(f"create database {name}")
    return replace(endpoint, database=name)


@pytest.fixture(scope="module")
def tpch_loaded(server: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:  # noqa: F811
    _, endpoint = server
    endpoint = own_database(endpoint, "tpch_test")
    load = tpch().prepare(endpoint, context(tmp_path_factory.mktemp("tpch-load")))
    return endpoint, load


def test_the_load_streams_every_row_and_builds_the_keys(tpch_loaded: tuple[Any, Any]) -> None:
    endpoint, load = tpch_loaded
    assert load.rows == ROWS_SF001
    for table, rows in ROWS_SF001.items():
        assert count(endpoint, f"select count(*) from {table}") == rows
    assert list(load.steps) == ["create tables", "load", "secondary indexes", "foreign keys", "analyze"]
    where = "where table_schema = 'tpch_test'"
    assert count(endpoint, "select count(*) from information_schema.table_constraints "
                           f"{where} and constraint_type = 'PRIMARY KEY'") == 8
    assert count(endpoint, "select count(*) from information_schema.referential_constraints "
                           "where constraint_schema = 'tpch_test'") == len(schema.FOREIGN_KEYS)
    assert count(endpoint, "select count(distinct table_name, index_name) from information_schema.statistics "
                           f"{where} and index_name like '%_idx'") == len(schema.SECONDARY_INDEXES)
    assert count(endpoint, f"select count(*) from information_schema.tables {where} and engine = 'InnoDB' "
                           "and table_collation = 'latin1_bin'") == len(schema.TABLES)
    # the foreign keys hold, though InnoDB added them without reading the rows
    assert count(endpoint, "select count(*) from lineitem left join partsupp on l_partkey = ps_partkey "
                           "and l_suppkey = ps_suppkey where ps_partkey is null") == 0


def test_every_answer_equals_postgres(tpch_loaded: tuple[Any, Any], workdir: Path) -> None:
    endpoint, _ = tpch_loaded
    w = tpch(tests=["power"], validation=True, answers=str(ANSWERS / "postgres"))
    result = w.run(endpoint, context(workdir))
    checks = w.check(endpoint, context(workdir)).checks
    assert len(checks) == 22
    assert all(ok for ok, _ in checks.values()), {k: d for k, (ok, d) in checks.items() if not ok}
    assert result.metrics["answers.matched"].value == 22
    assert all(q.status == "ok" for q in result.queries)
    q13 = next(q for q in result.queries if q.query == "Q13")
    assert "as c_count" in (q13.text or "")  # MySQL's dialect of it


def test_the_queries_workloads_tpch_set_runs_in_mysqls_dialect(tpch_loaded: tuple[Any, Any], workdir: Path) -> None:
    endpoint, _ = tpch_loaded
    w = QueriesWorkload(QueriesSettings.model_validate(
        {"kind": "queries", "queries": "@tpch", "scale_factor": SF, "query_timeout": QUERY_TIMEOUT}))
    result = w.run(endpoint, context(workdir))  # on the module's load: the set's data
    assert [q.query for q in result.queries] == [f"Q{n}" for n in range(1, 23)]
    assert all(q.status == "ok" for q in result.queries), [(q.query, q.error) for q in result.queries]
    q13 = next(q for q in result.queries if q.query == "Q13")
    assert "as c_count" in (q13.text or "")  # MySQL's dialect of it, as the tpch workload runs it


def test_power_and_throughput_tests_run_the_refresh_functions(tpch_loaded: tuple[Any, Any], workdir: Path) -> None:
    endpoint, _ = tpch_loaded
    result = tpch(tests=["power", "throughput"]).run(endpoint, context(workdir))
    assert not result.flags, [e.detail for e in result.events]
    assert result.metrics["power_at_size"].value > 0 and result.metrics["qphh_at_size"].value > 0
    refreshes = [q for q in result.queries if q.query in ("RF1", "RF2")]
    assert len(refreshes) == 2 + 2 * 2 and all(q.status == "ok" for q in refreshes)
    assert count(endpoint, "select count(*) from orders") == ROWS_SF001["orders"]


def test_a_refresh_pair_is_undone(tpch_loaded: tuple[Any, Any]) -> None:
    endpoint, _ = tpch_loaded
    seed, pair = 7, 900  # a pair no run of this module claims
    with endpoint.connect() as conn:
        inserted = refresh.rf1(conn, "mysql", SF, pair, seed)
        assert inserted.orders == 15
        assert count(endpoint, "select count(*) from orders") == ROWS_SF001["orders"] + 15
        done = refresh.undo_pair(conn, "mysql", SF, pair, seed)
        assert done is not None and "deleted the 15 orders" in done
        assert count(endpoint, "select count(*) from orders") == ROWS_SF001["orders"]
        assert count(endpoint, "select count(*) from lineitem") == ROWS_SF001["lineitem"]
        assert refresh.undo_pair(conn, "mysql", SF, pair, seed) is None  # nothing left to undo


def test_ssb_answers_equal_postgres(server: Any, scratch_db: Any, workdir: Path) -> None:  # noqa: F811
    _, endpoint = server
    endpoint = own_database(endpoint, "ssb_test")
    with endpoint.connect() as conn:  # TPC-H's orders names a customer table, as when TPC-H was loaded here
        conn.execute("create table customer (c_custkey bigint primary key) engine=InnoDB")
        conn.execute("create table orders (o_custkey bigint, foreign key (o_custkey) references customer (c_custkey)) "
                     "engine=InnoDB")
    loads = {}
    for name, target in (("mariadb", endpoint), ("postgres", scratch_db)):
        w = SsbWorkload(SsbSettings.model_validate({"kind": "ssb", "scale_factor": SF, "load_jobs": 2}))
        loads[name] = w.prepare(target, context(workdir / name)).rows
    assert loads["mariadb"] == loads["postgres"]
    for qs in (queries.round_queries(0, False, 1), queries.round_queries(0, True, 7)):
        mine, theirs = _answers(endpoint, qs), _answers(scratch_db, qs)
        for q in qs:
            assert mine[q.name] == theirs[q.name], f"{q.name} differs:\n{q.text}"
    result = SsbWorkload(SsbSettings.model_validate(
        {"kind": "ssb", "scale_factor": SF, "query_timeout": QUERY_TIMEOUT})).run(endpoint, context(workdir))
    assert len(result.queries) == 13 and all(q.status == "ok" for q in result.queries)


def test_a_server_without_local_infile_is_named_and_a_cancel_stops_the_load(server: Any) -> None:  # noqa: F811
    _, endpoint = server
    endpoint = own_database(endpoint, "tpch_stop")
    with endpoint.connect() as conn:
        conn.execute(schema.create_table("lineitem", "mysql"))
        conn.execute("set global local_infile = 0")
    try:
        with pytest.raises(RunFailure, match="local_infile = ON"):
            endpoint.bulk_load(schema.DATA, SF, ["lineitem"], 1)
    finally:
        with endpoint.connect() as conn:
            conn.execute("set global local_infile = 1")
    assert count(endpoint, "select count(*) from lineitem") == 0
    # SF 20's lineitem is 120 million rows: only the cancel ends the call
    cancel = threading.Event()
    timer = threading.Timer(1.0, cancel.set)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(RunFailure, match="cancelled"):
            endpoint.bulk_load(schema.DATA, 20.0, ["lineitem"], 2, cancel=cancel)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 30


def test_the_postgres_loader_takes_the_runs_cancel_too(scratch_db: Any) -> None:
    # load_generated hands ctx.cancel to every target's bulk_load (issue 31)
    with scratch_db.connect() as conn:
        conn.execute(schema.create_table("lineitem"))
    cancel = threading.Event()
    timer = threading.Timer(1.0, cancel.set)
    timer.start()
    try:
        with pytest.raises(_engine.Interrupted):
            scratch_db.bulk_load(schema.DATA, 20.0, ["lineitem"], 2, cancel=cancel)
    finally:
        timer.cancel()
