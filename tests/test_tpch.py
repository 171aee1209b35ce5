"""TPC-H workload at SF 0.01 on a real PostgreSQL and a real DuckDB.

Reference answers (tests/data/tpch/answers/sf0.01/) were made by
tests/data/tpch/make_answers.py: the DuckDB answers are the reference for the
PostgreSQL runs and the other way round.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest

from perflab import _engine
from perflab.context import RunContext
from perflab.workloads.tpch import TpchSettings, TpchWorkload, metrics, qgen

SF = 0.01
ANSWERS = Path(__file__).parent / "data" / "tpch" / "answers" / "sf0.01"
# dbgen's row counts at SF 0.01 (LINEITEM's count is dbgen's, not a formula).
ROWS_SF001 = {"region": 5, "nation": 25, "part": 2000, "supplier": 100, "partsupp": 8000,
              "customer": 1500, "orders": 15000, "lineitem": 60175}


@pytest.fixture(params=["postgres", "duckdb"])
def endpoint(request: pytest.FixtureRequest) -> Any:
    name = "scratch_db" if request.param == "postgres" else "duckdb_endpoint"
    return request.getfixturevalue(name)


def workload(**settings: Any) -> TpchWorkload:
    return TpchWorkload(TpchSettings.model_validate({"kind": "tpch", "scale_factor": SF, "seed": 42, **settings}))


def context(run_dir: Path) -> RunContext:
    return RunContext(run_number=1, run_dir=run_dir, t0_ns=time.monotonic_ns())


def count(endpoint: Any, sql: str) -> int:
    conn = endpoint.connect()
    try:
        return int(conn.execute(sql).fetchall()[0][0])
    finally:
        conn.close()


# ------------------------------------------------------------------ qgen, metrics


def test_stream_order_table_is_appendix_a() -> None:
    assert len(qgen.QUERY_ORDER) == 41
    assert all(sorted(row) == list(range(1, 23)) for row in qgen.QUERY_ORDER)
    assert qgen.QUERY_ORDER[0][:4] == (14, 2, 9, 20)
    assert qgen.query_order(41) == qgen.QUERY_ORDER[0]


def test_parameters_stay_in_the_spec_domains_and_differ_by_stream() -> None:
    for stream in range(8):
        queries = {q.number: q for q in qgen.stream_queries(stream, 1234, 1.0, "postgres")}
        assert [q.number for q in sorted(queries.values(), key=lambda q: q.seq)] == list(qgen.query_order(stream))
        assert 60 <= int(queries[1].params["DELTA"]) <= 120
        assert queries[7].params["NATION1"] != queries[7].params["NATION2"]
        assert len({queries[16].params[f"SIZE{i}"] for i in range(1, 9)}) == 8
        assert len({queries[22].params[f"I{i}"] for i in range(1, 8)}) == 7
        assert 312 <= int(queries[18].params["QUANTITY"]) <= 315
        assert "${" not in queries[16].text
    one = qgen.stream_queries(1, 1234, 1.0, "postgres")
    assert one == qgen.stream_queries(1, 1234, 1.0, "postgres")  # reproducible from the seed
    assert [q.params for q in one] != [q.params for q in qgen.stream_queries(2, 1234, 1.0, "postgres")]


def test_power_at_size_is_the_geometric_mean_formula() -> None:
    times = [float(i) for i in range(1, 25)]
    expected = 3600 * 10 / math.exp(sum(math.log(t) for t in times) / 24)
    assert metrics.power_at_size(times[:22], times[22:], 10) == pytest.approx(expected)
    # clause 5.4.1.4: intervals below max/1000 count as max/1000
    capped = metrics.power_at_size([1000.0] + [0.001] * 21, [1.0, 1.0], 1)
    assert capped == pytest.approx(metrics.power_at_size([1000.0] + [1.0] * 21, [1.0, 1.0], 1))
    assert metrics.min_streams(0.01) == 2 and metrics.min_streams(100) == 5


# ------------------------------------------------------------------ load and answers


def test_load_counts_and_validation_answers(endpoint: Any, workdir: Path) -> None:
    other = "duckdb" if endpoint.dialect == "postgres" else "postgres"
    w = workload(tests=["power"], validation=True, answers=str(ANSWERS / other))
    ctx = context(workdir)
    load = w.prepare(endpoint, ctx)
    assert load.rows == ROWS_SF001
    for table, rows in ROWS_SF001.items():
        assert count(endpoint, f"select count(*) from {table}") == rows
    assert {"create tables", "load", "analyze"} <= set(load.steps)
    if endpoint.dialect == "postgres":
        assert {"primary keys", "secondary indexes", "foreign keys"} <= set(load.steps)
        # statistics before the keys are validated (a plan over unanalysed tables took twice as long)
        order = list(load.steps)
        assert order.index("analyze") < order.index("foreign keys")
        # The steps overlapped (generated.run_overlapped), and everything is there, valid.
        assert count(endpoint, "select count(*) from pg_constraint c join pg_class t on t.oid = c.conrelid "
                               "where t.relnamespace = 'public'::regnamespace and c.contype = 'p'") == 8
        assert count(endpoint, "select count(*) from pg_constraint c join pg_class t on t.oid = c.conrelid "
                               "where t.relnamespace = 'public'::regnamespace and c.contype = 'f' "
                               "and c.convalidated") == 8
        assert count(endpoint, "select count(*) from pg_indexes where schemaname = 'public' "
                               "and indexname like '%_idx'") == 8
    result = w.run(endpoint, ctx)
    checks = w.check(endpoint, ctx).checks
    assert len(checks) == 22
    assert all(ok for ok, _ in checks.values()), {k: d for k, (ok, d) in checks.items() if not ok}
    assert result.metrics["answers.matched"].value == 22
    q6 = next(q for q in result.queries if q.query == "Q6")
    assert "date '1994-01-01'" in (q6.text or "") and "0.06 - 0.01" in (q6.text or "")


@pytest.mark.parametrize("dataset", ["tpch", "ssb"])
def test_binary_copy_stores_the_rows_text_copy_stores(scratch_db: Any, dataset: str) -> None:
    # The loader's default is COPY's binary format; the server must end up
    # with the very rows the text format gives, column by column.
    from perflab.workloads.ssb import schema as ssb_schema
    from perflab.workloads.tpch import schema as tpch_schema

    schema = tpch_schema if dataset == "tpch" else ssb_schema
    loader = _engine.tpch_load_postgres if dataset == "tpch" else _engine.ssb_load_postgres
    digests = {}
    for fmt in ("text", "binary"):
        with scratch_db.connect() as conn:
            for table in schema.TABLES:
                conn.execute(f'drop table if exists "{table}"')
                conn.execute(schema.create_table(table))
            conn.commit()
        loads = loader(scratch_db.conninfo, SF, list(schema.TABLES), 2, fmt)
        with scratch_db.connect() as conn:
            digests[fmt] = {
                t: conn.execute(f'select count(*), md5(string_agg(r::text, E\'\\n\' order by r::text)) from "{t}" r')
                .fetchone() for t in schema.TABLES}
        assert {t.table: t.rows for t in loads} == {t: n for t, (n, _) in digests[fmt].items()}
    assert digests["binary"] == digests["text"]
    assert all(n > 0 for n, _ in digests["text"].values())
    with pytest.raises(_engine.ConfigError, match='"binary", "text"'):
        loader(scratch_db.conninfo, SF, ["region" if dataset == "tpch" else "date"], 1, "csv")


@pytest.mark.parametrize("dataset", ["tpch", "ssb"])
def test_a_set_cancel_stops_the_load(scratch_db: Any, dataset: str) -> None:
    # SF 20's fact table is hundreds of millions of rows: far more than the
    # test waits for, so only the cancel can end the call (with Interrupted).
    import threading

    from perflab.workloads.ssb import schema as ssb_schema
    from perflab.workloads.tpch import schema as tpch_schema

    schema, loader, table = ((tpch_schema, _engine.tpch_load_postgres, "lineitem") if dataset == "tpch"
                             else (ssb_schema, _engine.ssb_load_postgres, "lineorder"))
    with scratch_db.connect() as conn:
        conn.execute(schema.create_table(table))
    cancel = threading.Event()
    timer = threading.Timer(1.0, cancel.set)
    timer.start()
    try:
        with pytest.raises(_engine.Interrupted):
            loader(scratch_db.conninfo, 20.0, [table], 2, "binary", cancel=cancel)
    finally:
        timer.cancel()
    assert cancel.is_set()


def test_a_wrong_answer_is_reported_per_query(duckdb_endpoint: Any, workdir: Path) -> None:
    answers = workdir / "answers"
    answers.mkdir()
    for f in (ANSWERS / "postgres").glob("q*.out"):
        (answers / f.name).write_text(f.read_text())
    q6 = (answers / "q06.out").read_text().splitlines()
    q6[1] = str(float(q6[1]) + 1000)
    (answers / "q06.out").write_text("\n".join(q6) + "\n")
    w = workload(tests=["power"], validation=True, answers=str(answers))
    ctx = context(workdir)
    w.prepare(duckdb_endpoint, ctx)
    w.run(duckdb_endpoint, ctx)
    checks = w.check(duckdb_endpoint, ctx).checks
    assert [k for k, (ok, _) in checks.items() if not ok] == ["answer.Q6"]
    assert "sum off by more than 100" in checks["answer.Q6"][1]


# ------------------------------------------------------------------ power, throughput, refresh


def test_power_and_throughput_metrics_recomputed_from_stored_times(endpoint: Any, workdir: Path) -> None:
    w = workload(tests=["power", "throughput"], streams=2)
    ctx = context(workdir)
    w.prepare(endpoint, ctx)
    result = w.run(endpoint, ctx)
    assert result.flags == []
    power_queries = [q for q in result.queries if q.stream == 0]
    assert [q.query for q in sorted(power_queries, key=lambda q: q.seq)] == (
        ["RF1"] + [f"Q{n}" for n in qgen.QUERY_ORDER[0]] + ["RF2"]
    )
    q_times = [q.seconds for q in power_queries if q.query.startswith("Q")]
    rf_times = [q.seconds for q in power_queries if q.query.startswith("RF")]
    by_hand = 3600 * SF / math.prod(metrics.adjusted_power_intervals(q_times + rf_times)) ** (1 / 24)
    assert result.metrics["power_at_size"].value == pytest.approx(by_hand, rel=1e-9)

    ts = result.metrics["throughput_test_s"].value
    for stream in (1, 2):
        times = [q for q in result.queries if q.stream == stream]
        assert sorted(q.query for q in times) == sorted(f"Q{n}" for n in range(1, 23))
        assert sum(q.seconds for q in times) <= ts
    refresh_stream = [q for q in result.queries if q.stream == 3]
    assert [q.query for q in sorted(refresh_stream, key=lambda q: q.seq)] == ["RF1", "RF2", "RF1", "RF2"]
    assert result.metrics["throughput_at_size"].value == pytest.approx(2 * 22 * 3600 / ts * SF)
    qphh = math.sqrt(result.metrics["power_at_size"].value * result.metrics["throughput_at_size"].value)
    assert result.metrics["qphh_at_size"].value == pytest.approx(qphh)
    assert result.metrics["query.Q1.min_s"].value <= result.metrics["query.Q1.max_s"].value
    # three refresh pairs ran and each left the database at its size
    assert count(endpoint, "select count(*) from orders") == ROWS_SF001["orders"]


def test_refresh_pairs_change_rows_and_use_fresh_keys(endpoint: Any, workdir: Path) -> None:
    from perflab.workloads.tpch import refresh

    w = workload(tests=["power"])
    w.prepare(endpoint, context(workdir))
    conn = endpoint.connect()
    try:
        inserted = refresh.rf1(conn, endpoint.dialect, SF, 1, 42)
        assert inserted.orders == 15  # 0.1% of ORDERS (clause 2.5.2)
        assert count(endpoint, "select count(*) from orders") == 15000 + 15
        assert count(endpoint, "select count(*) from lineitem") == 60175 + inserted.lineitems
        deleted = refresh.rf2(conn, endpoint.dialect, SF, 1, 42)
        assert (deleted.orders, deleted.lineitems) != (0, 0) and deleted.orders == 15
        assert count(endpoint, "select count(*) from orders") == 15000
        first_keys = set(_engine.tpch_rf2_keys(SF, 1, 42))
        second_keys = set(_engine.tpch_rf2_keys(SF, 2, 42))
        assert first_keys.isdisjoint(second_keys)
        refresh.rf1(conn, endpoint.dialect, SF, 2, 42)
        refresh.rf2(conn, endpoint.dialect, SF, 2, 42)
        keys = ",".join(map(str, first_keys | second_keys))
        assert count(endpoint, f"select count(*) from orders where o_orderkey in ({keys})") == 0
        assert count(endpoint, "select count(*) from orders") == 15000
    finally:
        conn.close()


def test_next_run_continues_with_fresh_pairs_after_maintenance(scratch_db: Any, workdir: Path) -> None:
    first = workload(tests=["power"])
    ctx = context(workdir)
    first.prepare(scratch_db, ctx)
    first.run(scratch_db, ctx)
    second = workload(tests=["power"])
    result = second.run(scratch_db, ctx)  # a new run on the same data
    assert "maintenance_s" in result.metrics  # VACUUM ANALYZE between runs
    texts = [q.text for q in result.queries if q.query == "RF1"]
    assert texts and "pair 2:" in (texts[0] or "")


def test_a_query_over_the_timeout_invalidates_the_metrics(endpoint: Any, workdir: Path) -> None:
    w = workload(tests=["power"], query_timeout=0.001)
    ctx = context(workdir)
    w.prepare(endpoint, ctx)
    result = w.run(endpoint, ctx)
    statuses = {q.status for q in result.queries if q.query.startswith("Q")}
    assert "timeout" in statuses
    assert "invalid-metrics" in result.flags
    assert "power_at_size" not in result.metrics and "qphh_at_size" not in result.metrics


def test_a_failure_after_the_queries_keeps_them_on_a_run_failure(scratch_db: Any, workdir: Path) -> None:
    """A failure that is not perflab's own (here the server refuses the state's
    last write) reaches the runner as a RunFailure caused by it, carrying the
    rows the run completed: only a RunFailure carries them (issue 31)."""
    import psycopg

    from perflab.errors import RunFailure
    from perflab.workloads.tpch import schema

    w = workload(tests=["power"])
    ctx = context(workdir)
    w.prepare(scratch_db, ctx)
    with scratch_db.connect() as conn:  # the claim of the refresh pair passes, the run's end does not
        conn.execute("create function refuse_state() returns trigger language plpgsql as $$ begin "
                     "if new.runs_since_load > 0 then raise exception 'the state stays as loaded'; end if; "
                     "return new; end $$")
        conn.execute(f"create trigger refuse_state before insert on {schema.STATE_TABLE} "
                     "for each row execute function refuse_state()")
    with pytest.raises(RunFailure, match="the state stays as loaded") as failed:
        w.run(scratch_db, ctx)
    assert isinstance(failed.value.__cause__, psycopg.Error)
    kept = failed.value.partial
    assert kept is not None
    assert [q.query for q in sorted(kept.queries, key=lambda q: q.seq)] == (
        ["RF1"] + [f"Q{n}" for n in qgen.QUERY_ORDER[0]] + ["RF2"])
    assert all(q.status == "ok" for q in kept.queries)


def _run_small_experiment(run_cli: Any, workdir: Path, workload_lines: str, *run_args: str) -> Path:
    """`perflab run` of an SF 0.01 TPC-H experiment on DuckDB; its output directory."""
    exp = workdir / "tpch.toml"
    exp.write_text(
        '[experiment]\nname = "tpch-small"\n\n[target]\nkind = "duckdb"\n\n'
        f'[workload]\nkind = "tpch"\nscale_factor = 0.01\nseed = 1\n{workload_lines}\n'
    )
    out = workdir / "out"
    run_cli("run", exp, "--out", out, "--quiet", *run_args)
    return out


def test_experiment_run_stores_times_that_give_its_power_metric(run_cli: Any, workdir: Path) -> None:
    import sqlite3

    out = _run_small_experiment(run_cli, workdir, 'tests = ["load", "power"]', "--no-report")
    db = sqlite3.connect(out / "perflab.sqlite")
    metric = dict(db.execute("select name, value from metric").fetchall())
    times = [t for (t,) in db.execute("select seconds from query where stream = 0 and status = 'ok'")]
    db.close()
    assert len(times) == 24 and "qphh_at_size" not in metric  # no throughput test: no QphH
    by_hand = 3600 * SF / math.prod(metrics.adjusted_power_intervals(times)) ** (1 / 24)
    assert metric["power_at_size"] == pytest.approx(by_hand, rel=1e-9)
    assert metric["load.total_s"] > 0
    run_cli("report", out)
    html = (out / "report.html").read_text()
    assert "TPC-H" in html and "Power@Size" in html
    assert ">None<" not in html  # metrics a power-only run has not are shown as missing


def test_report_of_a_throughput_test_draws_each_stream(run_cli: Any, workdir: Path) -> None:
    import sqlite3

    out = _run_small_experiment(run_cli, workdir, 'tests = ["load", "throughput"]\nstreams = 2')
    # Ts and Throughput@Size by hand from the stored start and time of each query
    db = sqlite3.connect(out / "perflab.sqlite")
    metric = dict(db.execute("select name, value from metric").fetchall())
    rows = db.execute("select stream, query, started_s, seconds from query where status = 'ok'").fetchall()
    db.close()
    assert len(rows) == 2 * 22 + 2 * 2  # two query streams, one refresh stream of two pairs
    first_start = min(start for stream, _, start, _ in rows if stream in (1, 2))
    ts = max(start + seconds for _, _, start, seconds in rows) - first_start
    assert metric["throughput_test_s"] == pytest.approx(ts, rel=1e-12)
    assert metric["throughput_at_size"] == pytest.approx(2 * 22 * 3600 / ts * SF, rel=1e-12)
    html = (out / "report.html").read_text()
    assert (out / "figures" / "tpch-throughput-streams.png").stat().st_size > 0
    assert "throughput test of run 1" in html and "no power test in these runs" in html
    assert ">None<" not in html


def test_bad_settings_are_named(run_cli: Any, workdir: Path) -> None:
    exp = workdir / "bad.toml"
    exp.write_text(
        '[experiment]\nname = "bad"\n\n[target]\nkind = "duckdb"\n\n'
        '[workload]\nkind = "tpch"\nscale_factor = 0.001\ntests = ["power", "speed"]\nqueries = [23]\n'
    )
    proc = run_cli("check", exp, check=False)
    assert proc.returncode == 2
    assert "workload.scale_factor" in proc.stderr + proc.stdout
    assert "workload.tests" in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
