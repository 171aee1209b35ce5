"""The `queries` workload on a real PostgreSQL and a real DuckDB: a directory
set with parameters, streams and repetitions stores per-query times; a
failing query is stored with its error and `on_error` decides; bad query
files, an empty directory and unknown parameters are refused with exit 2."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from perflab.context import RunContext
from perflab.errors import RunFailure, UserError
from perflab.model import RunResult
from perflab.workloads.queries import (
    QueriesSettings,
    QueriesWorkload,
    load_queries,
    stream_executions,
    writes_data,
)

PREPARE = """
create table sales (id integer, region varchar, amount integer);
insert into sales select i, case when i % 3 = 0 then 'north' when i % 3 = 1 then 'south' else 'east' end, i % 100
from generate_series(1, 20000) as g(i);
"""


@pytest.fixture(params=["postgres", "duckdb"])
def endpoint(request: pytest.FixtureRequest) -> Any:
    name = "scratch_db" if request.param == "postgres" else "duckdb_endpoint"
    return request.getfixturevalue(name)


def query_dir(root: Path) -> Path:
    d = root / "set"
    d.mkdir()
    (d / "a_count.sql").write_text("-- rows in a region\nselect count(*) from sales where region = '${region}'\n")
    (d / "b_sum.sql").write_text("select sum(amount) from sales where amount between ${low} and ${low} + 10")
    (d / "c_top.sql").write_text("select region, max(amount) from sales group by region order by region")
    (d / "notes.txt").write_text("not a query: ignored")
    (root / "prepare.sql").write_text(PREPARE)
    return d


def settings(**extra: Any) -> QueriesSettings:
    return QueriesSettings.model_validate({
        "kind": "queries", "queries": "set", "prepare": "prepare.sql",
        "params": {"a_count": {"region": ["north", "south", "east"]}, "b_sum": {"low": {"min": 0, "max": 80}}},
        **extra,
    })


def context(root: Path) -> RunContext:
    return RunContext(run_number=1, run_dir=root / "run", t0_ns=time.monotonic_ns(), base_dir=root)


def test_a_directory_set_with_parameters_streams_and_repetitions(endpoint: Any, workdir: Path) -> None:
    query_dir(workdir)
    w = QueriesWorkload(settings(streams=2, repetitions=3, seed=11))
    load = w.prepare(endpoint, context(workdir))
    assert load.steps["prepare script"] > 0
    result = w.run(endpoint, context(workdir))
    by_stream: dict[int, list[Any]] = {}
    for q in result.queries:
        by_stream.setdefault(q.stream, []).append(q)
    assert sorted(by_stream) == [0, 1]
    for qs in by_stream.values():
        assert [q.seq for q in qs] == list(range(1, 10))
        assert all(q.status == "ok" and q.seconds > 0 and q.started_s is not None for q in qs)
        assert sorted(q.query for q in qs) == sorted(["a_count", "b_sum", "c_top"] * 3)
    # stream 0 runs in name order
    assert [q.query for q in by_stream[0][:3]] == ["a_count", "b_sum", "c_top"]
    # parameters were substituted from their lists and ranges
    texts = [q.text for q in result.queries if q.query == "a_count"]
    assert all("${" not in t for t in texts)
    assert {t.split("'")[1] for t in texts} <= {"north", "south", "east"}
    lows = {int(q.text.split("between ")[1].split(" ")[0]) for q in result.queries if q.query == "b_sum"}
    assert all(0 <= x <= 80 for x in lows) and len(lows) > 1
    metrics = {name: m.value for name, m in result.metrics.items()}
    assert metrics["queries_ok"] == 18 and metrics["queries_failed"] == 0
    # seeded: the same seed gives the same texts
    again = w.run(endpoint, context(workdir))
    assert [q.text for q in again.queries] == [q.text for q in result.queries]


def test_a_failing_query_is_stored_and_on_error_decides(endpoint: Any, workdir: Path) -> None:
    query_dir(workdir)
    (workdir / "set" / "b_sum.sql").write_text("select no_such_column from sales")
    go_on = QueriesWorkload(settings(params={"a_count": {"region": ["north"]}}))
    go_on.prepare(endpoint, context(workdir))
    result = go_on.run(endpoint, context(workdir))
    statuses = {q.query: q.status for q in result.queries}
    assert statuses == {"a_count": "ok", "b_sum": "error", "c_top": "ok"}
    failed = next(q for q in result.queries if q.status == "error")
    assert "no_such_column" in (failed.error or "")
    stop = QueriesWorkload(settings(params={"a_count": {"region": ["north"]}}, on_error="fail"))
    with pytest.raises(RunFailure, match="b_sum") as failed:
        stop.run(endpoint, context(workdir))
    # what it completed before it failed goes with the failure, for the runner to store with the failed run
    assert [(q.query, q.status) for q in failed.value.partial.queries] == [("a_count", "ok"), ("b_sum", "error")]


@pytest.mark.parametrize(("text", "writes"), [
    ("select count(*) from t", False),
    ("-- a comment\n  SELECT 1; select 2", False),
    ("with x as (select 1) select * from x", False),
    ("values (1), (2)", False),
    ("explain select 1", False),
    ("insert into t values (1)", True),
    ("-- first\nUPDATE t SET x = 1", True),
    ("select 1; delete from t", True),
    ("with gone as (delete from t returning *) select count(*) from gone", True),
    ("select * into t2 from t", True),
    ("create table t2 (x int)", True),
    ("(insert into t values (1))", True),
    ("truncate t", True),
    ("call refresh_all()", True),
])
def test_statements_that_change_data_are_told_from_reads(text: str, writes: bool) -> None:
    assert writes_data(text) is writes


def test_a_run_records_its_writing_queries_and_a_rerun_asks_for_a_reload(workdir: Path) -> None:
    """The effect is recorded before any query runs; an earlier attempt's
    record makes a rerun load the data again when the workload makes it, and
    only be said when it does not."""
    recorded: list[tuple[str, dict[str, Any]]] = []
    ctx = RunContext(run_number=2, run_dir=workdir / "run", t0_ns=time.monotonic_ns(), base_dir=workdir,
                     record_effect=lambda kind, data: recorded.append((kind, data)))
    (workdir / "prepare.sql").write_text("create table t (x int)")
    made = QueriesWorkload(QueriesSettings.model_validate({
        "kind": "queries", "prepare": "prepare.sql", "repetitions": 3,
        "queries": {"add": "insert into t values (1)", "read": "select count(*) from t"}}))
    queries = load_queries(made.settings, workdir, "postgres")
    plans = {0: stream_executions(queries, made.settings, 0)}

    made._record_writes(queries, plans, ctx, RunResult())
    assert recorded == [("queries.writes", {"queries": ["add"], "executions": 3, "reloadable": True})]
    earlier = [{"attempt": 1, "kind": "queries.writes", "data": recorded[0][1]}]
    assert "attempt 1 ran queries that change the data (add)" in (made.reload_for_rerun(earlier) or "")
    assert made.reload_for_rerun([]) is None
    assert made.reload_for_rerun([{"attempt": 1, "kind": "load", "data": {}}]) is None

    as_is = QueriesWorkload(QueriesSettings.model_validate({"kind": "queries", "queries": {"add": "insert into t values (1)"}}))
    recorded.clear()
    result = RunResult()
    warned: list[str] = []
    ctx.warn = warned.append
    as_is._record_writes(load_queries(as_is.settings, workdir, "postgres"), {0: []}, ctx, result)
    assert recorded[0][1]["reloadable"] is False
    no_load = [{"attempt": 1, "kind": "queries.writes", "data": recorded[0][1]}]
    assert as_is.reload_for_rerun(no_load) is None  # nothing to load it from: the rerun says the writes stay
    ctx.earlier_effects = no_load
    as_is._record_writes(load_queries(as_is.settings, workdir, "postgres"), {0: []}, ctx, result)
    assert any(e.kind == "earlier-writes" and "what they wrote stays" in e.message for e in result.events)
    assert warned and "what they wrote stays" in warned[0]


def test_a_query_over_the_timeout_is_stored_as_timeout(scratch_db: Any, workdir: Path) -> None:
    w = QueriesWorkload(QueriesSettings.model_validate({
        "kind": "queries", "queries": {"slow": "select pg_sleep(2)", "quick": "select 1"}, "query_timeout": "200ms"}))
    result = w.run(scratch_db, context(workdir))
    statuses = {q.query: q.status for q in result.queries}
    assert statuses == {"slow": "timeout", "quick": "ok"}
    slow = next(q for q in result.queries if q.query == "slow")
    assert slow.seconds < 2.0  # cut at its timeout: pg_sleep(2) would take 2 s


@pytest.mark.parametrize("case, expected", [
    ("empty_dir", "holds no .sql files"),
    ("empty_file", "holds no SQL"),
    ("bad_dollar", "not a ${name} placeholder"),
    ("undefined", "uses ${region}, which workload.params.a does not define"),
    ("unknown_param", "workload.params.a.zone: unknown parameter"),
    ("unknown_query", "workload.params.zz: there is no query"),
    ("binary_file", "not UTF-8 text"),
])
def test_bad_query_sets_are_named(workdir: Path, case: str, expected: str) -> None:
    d = workdir / "set"
    d.mkdir()
    params: dict[str, Any] = {}
    if case == "empty_file":
        (d / "a.sql").write_text("-- only a comment\n\n")
    elif case == "bad_dollar":
        (d / "a.sql").write_text("select 5$ from t")
    elif case == "undefined":
        (d / "a.sql").write_text("select '${region}'")
    elif case == "unknown_param":
        (d / "a.sql").write_text("select 1")
        params = {"a": {"zone": [1]}}
    elif case == "unknown_query":
        (d / "a.sql").write_text("select 1")
        params = {"zz": {"x": [1]}}
    elif case == "binary_file":
        (d / "a.sql").write_bytes(b"select \xff\xfe")
    s = QueriesSettings.model_validate({"kind": "queries", "queries": "set", "params": params})
    with pytest.raises(UserError) as info:
        load_queries(s, workdir, "postgres")
    assert expected in str(info.value)


def test_check_refuses_a_bad_set_with_exit_2(run_cli: Any, workdir: Path) -> None:
    (workdir / "set").mkdir()
    (workdir / "set" / "q1.sql").write_text("select ${x}")
    exp = workdir / "bad.toml"
    exp.write_text('[experiment]\nname = "bad"\n\n[target]\nkind = "duckdb"\n\n'
                   '[workload]\nkind = "queries"\nqueries = "set"\n\n[workload.params.q1]\ny = [1]\n')
    proc = run_cli("check", exp, check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text
    assert "uses ${x}" in text and "Traceback" not in text
    exp.write_text('[experiment]\nname = "bad"\n\n[target]\nkind = "duckdb"\n\n'
                   '[workload]\nkind = "queries"\nqueries = "nowhere"\n')
    proc = run_cli("check", exp, check=False)
    assert proc.returncode == 2 and "is not a directory" in proc.stdout + proc.stderr


def test_a_run_stores_each_execution(run_cli: Any, workdir: Path) -> None:
    query_dir(workdir)
    exp = workdir / "q.toml"
    exp.write_text(
        '[experiment]\nname = "own-set"\n\n[target]\nkind = "duckdb"\n\n'
        '[workload]\nkind = "queries"\nqueries = "set"\nprepare = "prepare.sql"\nrepetitions = 2\n\n'
        '[workload.params.a_count]\nregion = ["north", "east"]\n\n[workload.params.b_sum]\nlow = { min = 1, max = 50 }\n'
    )
    out = workdir / "out"
    run_cli("run", exp, "--out", out, "--quiet")
    db = sqlite3.connect(out / "perflab.sqlite")
    rows = db.execute("select stream, seq, query, status, seconds from query order by seq").fetchall()
    metric = dict(db.execute("select name, value from metric").fetchall())
    db.close()
    assert [r[2] for r in rows] == ["a_count", "b_sum", "c_top"] * 2
    assert all(r[3] == "ok" and r[4] > 0 for r in rows)
    assert metric["load.prepare script_s"] > 0
    html = (out / "report.html").read_text()
    assert "Query set" in html and "c_top" in html


def test_the_w22_like_example_runs_every_query(endpoint: Any, workdir: Path) -> None:
    """examples/w22-like.toml's 22 queries, on TPC-H at SF 0.01 generated by
    the workload's own load phase: every one completes on both databases."""
    import tomllib

    example = Path(__file__).resolve().parents[1] / "examples" / "w22-like.toml"
    spec = tomllib.loads(example.read_text())["workload"]
    spec |= {"scale_factor": 0.01, "query_timeout": "60s", "load_jobs": 2}
    w = QueriesWorkload(QueriesSettings.model_validate(spec))
    ctx = RunContext(run_number=1, run_dir=workdir / "run", t0_ns=time.monotonic_ns(), base_dir=example.parent)
    load = w.prepare(endpoint, ctx)
    assert load.rows["lineitem"] > 50_000
    result = w.run(endpoint, ctx)
    assert len(result.queries) == 22
    bad = [(q.query, q.error) for q in result.queries if q.status != "ok"]
    assert not bad


def test_built_in_sets_bring_their_data(duckdb_endpoint: Any, workdir: Path) -> None:
    """"@ssb" generates SSB data and runs its 13 queries; "@tpch" TPC-H's 22."""
    for name, count, table in (("@ssb", 13, "lineorder"), ("@tpch", 22, "lineitem")):
        w = QueriesWorkload(QueriesSettings.model_validate(
            {"kind": "queries", "queries": name, "scale_factor": 0.01, "load_jobs": 2}))
        assert w.writes()
        load = w.prepare(duckdb_endpoint, context(workdir))
        assert load.rows[table] > 50_000
        result = w.run(duckdb_endpoint, context(workdir))
        assert len(result.queries) == count
        assert all(q.status == "ok" for q in result.queries), [(q.query, q.error) for q in result.queries]


def test_a_built_in_set_takes_the_endpoints_dialect(workdir: Path) -> None:
    """"@tpch" runs each query's text as the tpch workload runs it on that
    dialect (qgen.render): MySQL's has its own Q13 (a MariaDB run:
    test_tpch_mariadb.py)."""
    from perflab.workloads.tpch import qgen

    s = QueriesSettings.model_validate({"kind": "queries", "queries": "@tpch"})
    texts = {}
    for dialect in ("postgres", "duckdb", "mysql"):
        texts[dialect] = {e.name: e.text for e in stream_executions(load_queries(s, workdir, dialect), s, 0)}
        assert texts[dialect] == {f"Q{n}": qgen.render(n, qgen.VALIDATION_PARAMETERS[n], dialect) for n in range(1, 23)}
    assert texts["mysql"]["Q13"] != texts["postgres"]["Q13"]
    assert {n: t for n, t in texts["mysql"].items() if n != "Q13"} == {
        n: t for n, t in texts["postgres"].items() if n != "Q13"}


def test_a_set_file_gives_data_and_default_parameters(workdir: Path) -> None:
    d = query_dir(workdir)
    (d / "set.toml").write_text('dataset = "ssb"\n[params.a_count]\nregion = ["north"]\n'
                                '[params.b_sum]\nlow = [7]\n')
    s = QueriesSettings.model_validate({"kind": "queries", "queries": "set",
                                        "params": {"b_sum": {"low": [9]}}})
    from perflab.workloads.queries import set_dataset, stream_executions

    assert set_dataset(s, workdir) == "ssb"
    texts = {e.name: e.text for e in stream_executions(load_queries(s, workdir, "postgres"), s, 0)}
    assert "'north'" in texts["a_count"] and "between 9 and 9" in texts["b_sum"]  # the experiment's value wins
    (d / "set.toml").write_text('dataset = "tpcx"\n')
    with pytest.raises(UserError, match="set.toml: dataset"):
        set_dataset(s, workdir)


def test_an_existing_database_is_only_read(scratch_db: Any, workdir: Path) -> None:
    """No dataset, no prepare: the queries run on the database as it is; an
    external target is read-only unless allow_destructive says otherwise, so
    a query that writes fails and is stored with the server's error."""
    from perflab.targets.postgres import PostgresSettings, PostgresTarget

    with scratch_db.connect() as conn:
        conn.execute("create table kept (a integer)")
        conn.execute("insert into kept values (1), (2)")
    target = PostgresTarget(PostgresSettings.model_validate({"kind": "postgres", "dsn": scratch_db.conninfo}),
                            workdir / "external")
    endpoint = target.provision()
    try:
        w = QueriesWorkload(QueriesSettings.model_validate({
            "kind": "queries", "queries": {"read": "select count(*) from kept", "write": "insert into kept values (3)"}}))
        assert not w.writes()
        assert w.prepare(endpoint, context(workdir)).steps == {}
        result = w.run(endpoint, context(workdir))
    finally:
        target.teardown()
    statuses = {q.query: (q.status, q.error or "") for q in result.queries}
    assert statuses["read"][0] == "ok"
    assert statuses["write"][0] == "error" and "read-only" in statuses["write"][1]
    with scratch_db.connect() as conn:
        assert conn.execute("select count(*) from kept").fetchone() == (2,)
