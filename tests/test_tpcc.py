"""The tpcc workload against a real PostgreSQL: load, the twelve consistency
conditions (each caught when a row breaks it), runs in both modes, tpmC
against the database's own count, the mix, the rollbacks, a killed server,
and bad settings.

One warehouse, loaded once for the module; runs of a few seconds. The
comparison with sysbench-tpcc is a benchmark (benchmarks/tpcc_vs_sysbench.py).
"""

from __future__ import annotations

import math
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from conftest import server_stalled
from perflab.context import RunContext, SeriesSink
from perflab.errors import RunFailure
from perflab.model import Flag
from perflab.targets.postgres import PostgresEndpoint, PostgresSettings, PostgresTarget
from perflab.workloads import WORKLOADS
from perflab.workloads.tpcc import (
    TpccSettings,
    TpccWorkload,
    checks,
    constants,
    mix,
    read_meta,
    schema,
)

REPO = Path(__file__).resolve().parents[1]


class ListSink(SeriesSink):
    def __init__(self) -> None:
        self.points: list[tuple[str, str, float, float]] = []

    def add(self, source: str, name: str, t: float, value: float) -> None:
        self.points.append((source, name, t, value))


def workload(**settings: Any) -> TpccWorkload:
    return TpccWorkload(TpccSettings.model_validate({"kind": "tpcc", "warehouses": 1, **settings}))


def context(tmp_path: Path, sink: SeriesSink | None = None) -> RunContext:
    return RunContext(run_number=1, run_dir=tmp_path, t0_ns=time.monotonic_ns(), series=sink or ListSink())


_NAME = "({0})[({1})/100+1] || ({0})[({1})/10%10+1] || ({0})[({1})%10+1]".format(
    "ARRAY['BAR','OUGHT','ABLE','PRI','PRES','ESE','ANTI','CALLY','ATION','EING']", "{n}")


@pytest.fixture(scope="module")
def loaded(pg_target, tmp_path_factory) -> Iterator[tuple[PostgresEndpoint, Any]]:
    """One warehouse, loaded once by the workload (the engine's generator and COPY)."""
    from psycopg.conninfo import make_conninfo

    _, endpoint = pg_target
    name = f"tpcc_{uuid.uuid4().hex[:10]}"
    with endpoint.connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    db = replace(endpoint, dbname=name, conninfo=make_conninfo(endpoint.conninfo, dbname=name))
    load = workload(load_seed=7, load_jobs=2).prepare(db, context(tmp_path_factory.mktemp("load")))
    yield db, load
    with endpoint.connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# ------------------------------------------------------------ settings and constants


def test_registered_and_settings_say_what_is_allowed() -> None:
    assert WORKLOADS.get("tpcc") is TpccWorkload
    with pytest.raises(ValidationError, match="at most 10 clients"):
        TpccSettings.model_validate({"kind": "tpcc", "warehouses": 2, "keying": True, "clients": 21})
    assert TpccSettings.model_validate({"kind": "tpcc", "warehouses": 3, "keying": True}).effective_clients() == 30
    assert TpccSettings.model_validate({"kind": "tpcc"}).effective_clients() == 1
    with pytest.raises(ValidationError, match="sum to 99"):
        TpccSettings.model_validate({"kind": "tpcc", "weights": {
            "new_order": 44, "payment": 43, "order_status": 4, "delivery": 4, "stock_level": 4}})
    with pytest.raises(ValidationError, match="both duration and transactions"):
        TpccSettings.model_validate({"kind": "tpcc", "duration": "5s", "transactions": 10})
    with pytest.raises(ValidationError, match="keying = true and a rate"):
        TpccSettings.model_validate({"kind": "tpcc", "keying": True, "rate": 100})
    with pytest.raises(ValidationError):
        TpccSettings.model_validate({"kind": "tpcc", "isolation": "read uncommitted"})


BAD = {
    'keying = true\nclients = 11': "at most 10 clients (terminals) per warehouse",
    'weights = { new_order = 45, payment = 43, delivery = 4, stock_level = 8 }': "missing ['order_status']",
    'clients = 2\nthreads = 3': "threads = 3 is more than clients = 2",
    'warehouses = 0': "workload.warehouses",
    'mode = "functions"': "workload.mode",
}


def test_bad_settings_exit_2_with_a_clear_message(run_cli, tmp_path) -> None:
    for i, (lines, message) in enumerate(BAD.items()):
        path = tmp_path / f"bad{i}.toml"
        path.write_text('[experiment]\nname = "bad"\n[target]\nkind = "postgres"\n'
                        f'[workload]\nkind = "tpcc"\n{lines}\n')
        done = run_cli("check", path, check=False)
        assert done.returncode == 2, done.stdout + done.stderr
        assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_examples_check(run_cli) -> None:
    for name in ("tpcc.toml", "tpcc-kernel-features.toml"):
        done = run_cli("check", REPO / "examples" / name)
        assert "tpcc" in (REPO / "examples" / name).read_text()
        assert done.returncode == 0


def test_the_run_constants_keep_the_delta_rule() -> None:
    assert [d for d in range(0, 256) if constants.delta_ok(d, 0)] == [
        d for d in range(65, 120) if d not in (96, 112)]
    for c_load in range(256):
        seen = set()
        for seed in range(40):
            c = constants.run_constants(c_load, seed)
            delta = abs(c.c_last - c_load)
            assert 65 <= delta <= 119 and delta not in (96, 112), (c_load, c)
            assert 0 <= c.c_last <= 255 and 0 <= c.c_id <= 1023 and 0 <= c.ol_i_id <= 8191
            seen.add(c.c_last)
        assert len(seen) > 5, "drawn, not fixed"
    assert constants.run_constants(100, 1) == constants.run_constants(100, 1)


def test_mix_arithmetic() -> None:
    deck = {"new_order": 9, "new_order_rollback": 1, "payment": 10, "order_status": 1, "delivery": 1,
            "stock_level": 1}
    shares = mix.shares_pct(deck)
    assert shares["new_order"] == pytest.approx(1000 / 23) and shares["payment"] == pytest.approx(1000 / 23)
    assert mix.below_spec(shares) == []
    assert mix.below_spec(mix.shares_pct({"new_order": 50, "payment": 42, "order_status": 4, "delivery": 4,
                                          "stock_level": 0})) == ["Payment 42.00% < 43%", "Stock-Level 0.00% < 4%"]


# ------------------------------------------------------------ load and the consistency conditions


def test_load_steps_rows_and_meta(loaded) -> None:
    db, load = loaded
    # statements mode (the fixture's): no PL/pgSQL functions are installed, none would be called
    assert list(load.steps) == ["create", "generate_and_copy", "keys", "indexes", "analyze"]
    assert all(v >= 0 for v in load.steps.values())
    assert load.rows["warehouse"] == 1 and load.rows["district"] == 10
    for table, n in (("customer", 30_000), ("history", 30_000), ("orders", 30_000), ("new_order", 9_000),
                     ("item", 100_000), ("stock", 100_000)):
        assert load.rows[table] == n, table
    assert 250_000 <= load.rows["order_line"] <= 350_000
    with db.connect() as conn:
        meta = read_meta(conn)
        assert meta is not None and meta.warehouses == 1 and meta.load_seed == 7
        assert meta.c_last_load == constants.load_c_last(7)
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}
        assert {"customer_by_last_name", "orders_by_customer", "order_line_pkey", "stock_pkey"} <= indexes
        # Customers 1..1000 of each district carry the 1000 names in order; the
        # rest NURand(255, 0, 999) with the load's C: its most frequent name.
        names = conn.execute("SELECT count(DISTINCT c_last) FROM customer").fetchone()[0]
        assert names == 1000


# Each corruption, done in a transaction that is rolled back, and the
# conditions it breaks: some conditions imply others (1 follows from 8 and 9,
# 4 from 6), so one changed row can break more than one.
CORRUPTIONS = {
    1: ("UPDATE warehouse SET w_ytd = w_ytd + 1 WHERE w_id = 1", {1, 8}, "warehouse 1"),
    2: ("UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = 1 AND d_id = 3", {2},
        "warehouse 1 district 3"),
    3: ("INSERT INTO new_order VALUES (5, 3, 1)", {3, 5, 11}, "warehouse 1 district 3"),
    4: ("DELETE FROM order_line WHERE ol_w_id = 1 AND ol_d_id = 3 AND ol_o_id = 10 AND ol_number = 1", {4, 6},
        "warehouse 1 district 3"),
    5: ("UPDATE orders SET o_carrier_id = NULL WHERE o_w_id = 1 AND o_d_id = 3 AND o_id = 10", {5, 7},
        "warehouse 1 district 3"),
    6: ("UPDATE orders SET o_ol_cnt = o_ol_cnt + 1 WHERE o_w_id = 1 AND o_d_id = 3 AND o_id = 10", {4, 6},
        "warehouse 1 district 3"),
    7: ("UPDATE order_line SET ol_delivery_d = NULL WHERE ol_w_id = 1 AND ol_d_id = 3 AND ol_o_id = 10"
        " AND ol_number = 1", {7}, "warehouse 1 district 3"),
    8: ("UPDATE history SET h_amount = h_amount + 1 WHERE ctid = (SELECT min(ctid) FROM history"
        " WHERE h_w_id = 1 AND h_d_id = 3)", {8, 9, 10}, "warehouse 1"),
    9: ("UPDATE history SET h_d_id = 4 WHERE ctid = (SELECT min(ctid) FROM history WHERE h_w_id = 1 AND h_d_id = 3)",
        {9}, "warehouse 1 district 3"),
    10: ("UPDATE customer SET c_balance = c_balance + 1, c_ytd_payment = c_ytd_payment - 1"
         " WHERE c_w_id = 1 AND c_d_id = 3 AND c_id = 5", {10}, "warehouse 1 district 3: customer 5"),
    11: ("DELETE FROM order_line WHERE ol_w_id = 1 AND ol_d_id = 3 AND ol_o_id = 10;"
         " DELETE FROM orders WHERE o_w_id = 1 AND o_d_id = 3 AND o_id = 10", {11}, "warehouse 1 district 3"),
    12: ("UPDATE customer SET c_ytd_payment = c_ytd_payment + 1 WHERE c_w_id = 1 AND c_d_id = 3 AND c_id = 5",
         {12}, "warehouse 1 district 3: customer 5"),
}


def test_every_condition_holds_after_the_load(loaded, tmp_path) -> None:
    db, _ = loaded
    check = workload().check(db, context(tmp_path))
    assert sorted(check.checks) == [c.name for c in checks.CONDITIONS], "all 12, 11 included: no Delivery yet"
    assert check.passed, check.checks


def test_each_condition_finds_its_offenders_before_sorting_them(loaded) -> None:
    """Every condition's join is planned apart from its ORDER BY ... LIMIT (a
    materialized CTE): sorted output invited merge joins on the warehouse
    alone, which took minutes once a few runs had grown the tables."""
    db, _ = loaded
    with db.connect() as conn:
        for condition in checks.CONDITIONS:
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + condition.sql).fetchall())
            assert "CTE Scan on bad" in plan, (condition.number, plan)
            top, _, below = plan.partition("CTE bad")
            assert "Join" not in top, (condition.number, plan)


@pytest.mark.parametrize("number", sorted(CORRUPTIONS))
def test_a_broken_row_fails_its_condition_by_name_and_place(loaded, number) -> None:
    import psycopg

    db, _ = loaded
    sql, expected, where = CORRUPTIONS[number]
    with psycopg.connect(db.conninfo) as conn:  # not autocommit: one transaction, rolled back
        for statement in sql.split(";"):
            conn.execute(statement)
        failed = {}
        for condition in checks.CONDITIONS:
            ok, detail = checks.run_condition(conn, condition)
            if not ok:
                failed[condition.number] = detail
        conn.rollback()
    assert set(failed) == expected, failed
    assert f"condition {number} " in failed[number] and f"fails first at {where}" in failed[number], failed[number]


def test_a_district_with_no_outstanding_order_keeps_condition_2(loaded) -> None:
    """Clause 3.3.2.2: condition 2's NEW-ORDER part does not apply to a
    district with no NEW-ORDER rows (every order delivered, which long
    closed-loop runs reach: warehouse 3 district 7 after 62 runs of the
    kernel-features example failed the run); its ORDER part still does."""
    import psycopg

    db, _ = loaded
    by_number = {c.number: c for c in checks.CONDITIONS}
    with psycopg.connect(db.conninfo) as conn:  # not autocommit: one transaction, rolled back
        conn.execute("DELETE FROM new_order WHERE no_w_id = 1 AND no_d_id = 3")
        assert checks.run_condition(conn, by_number[2])[0]
        assert checks.run_condition(conn, by_number[3])[0]
        conn.execute("UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = 1 AND d_id = 3")
        ok, detail = checks.run_condition(conn, by_number[2])
        conn.rollback()
    assert not ok and "fails first at warehouse 1 district 3" in detail, detail


# ------------------------------------------------------------ runs


def test_a_run_counts_what_the_database_counts(loaded, tmp_path) -> None:
    """Closed loop, 4 clients for 6 s: the driver's New-Orders per minute
    match the database's NOPM (sum(d_next_o_id) over the same window) within
    1%; the mix is the deck's 10/10/1/1/1 of 23; rollbacks are 1% of
    New-Orders; every condition holds afterwards."""
    db, _ = loaded
    sink = ListSink()
    ctx = context(tmp_path, sink)
    w = workload(clients=4, threads=2, duration="6s", warmup="1s", seed=11, io="epoll")
    result = w.run(db, ctx)
    m = {k: v.value for k, v in result.metrics.items()}
    assert m["failed"] == 0 or m["failed"] < 0.01 * m["transactions"], m
    assert m["nopm"] == pytest.approx(m["new_orders_per_min"], rel=0.01)
    assert m["tpmC"] == pytest.approx((m["new_order.committed"] + m["new_order_rollback.committed"])
                                      / m["measured_s"] * 60)
    n = m["transactions"]
    assert n > 1000, "enough for the bounds below"
    # Each share within 4 standard deviations of the deck's (a multinomial
    # bound; the deck deals exactly, so the true spread is smaller).
    for t in mix.TYPES:
        p = mix.DECK[t] / mix.DECK_SIZE
        assert abs(m[f"mix.{t}_pct"] / 100 - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1 / n, (t, m[f"mix.{t}_pct"])
    assert Flag.MIX_BELOW_SPEC not in result.flags
    # Rollbacks: binomial(New-Orders, 1%), within 4 standard deviations.
    orders = m["new_order.committed"] + m["new_order_rollback.committed"]
    assert abs(m["rollbacks"] - 0.01 * orders) <= 4 * math.sqrt(0.01 * 0.99 * orders) + 1, m["rollbacks"]
    # The server's own count moved at least as much as ours (warm-up included there).
    assert m["tpm_server"] >= 0.9 * m["tps"] * 60 * m["measured_s"] / (m["measured_s"] + 1.5)
    assert {h.name for h in result.histograms} >= {f"latency.{t}" for t in mix.ENGINE_TYPES}
    assert all(m[f"limit.{t}_p90_ok"] == 1.0 for t in mix.TYPES)
    tpmc_points = [v for s, name, _, v in sink.points if (s, name) == ("tpcc", "tpmC")]
    assert len(tpmc_points) >= 4 and sum(tpmc_points) > 0
    assert any(e.kind == "constants" and "delta" in e.message for e in result.events)
    assert constants.delta_ok(int(m["constants.c_last_run"]), int(m["constants.c_last_load"]))
    check = w.check(db, ctx)
    assert check.passed, check.checks
    assert "consistency_11" not in check.checks, "a Delivery ran: condition 11 no longer applies"
    with db.connect() as conn:
        assert read_meta(conn).delivered  # type: ignore[union-attr]


def test_procedures_mode_runs_and_keeps_every_condition(loaded, tmp_path) -> None:
    db, _ = loaded
    ctx = context(tmp_path)
    w = workload(mode="procedures", clients=3, threads=2, duration="3s", isolation="repeatable read",
                 max_tries=20, seed=5)
    result = w.run(db, ctx)
    m = {k: v.value for k, v in result.metrics.items()}
    assert m["procedures"] == 1.0 and m["new_order.committed"] > 50
    assert m["nopm"] == pytest.approx(m["new_orders_per_min"], rel=0.05)
    for t in mix.TYPES:
        assert m[f"{t}.committed" if t != "new_order" else "new_order.committed"] > 0
    check = w.check(db, ctx)
    assert check.passed, check.checks


def test_a_skewed_mix_is_flagged(loaded, tmp_path) -> None:
    db, _ = loaded
    w = workload(clients=2, duration="2s", weights={"new_order": 60, "payment": 40, "order_status": 0,
                                                    "delivery": 0, "stock_level": 0})
    result = w.run(db, context(tmp_path))
    assert Flag.MIX_BELOW_SPEC in result.flags
    assert result.metrics["mix.delivery_pct"].value == 0
    assert any(e.kind == "mix-below-spec" and "Payment" in e.message for e in result.events)


@pytest.mark.slow
def test_open_loop_latency_shows_a_stalled_server(pg_target, loaded, tmp_path) -> None:
    """As tpcb's: SIGSTOP the server for 2 s under a rate; transactions
    scheduled meanwhile are late by up to 2 s, and latency from the intended
    start says so, per type."""
    target, _ = pg_target
    db, _ = loaded
    w = workload(clients=4, threads=2, duration="5s", rate=100.0, seed=3, io="epoll")
    with server_stalled(target.processes):
        result = w.run(db, context(tmp_path))
    m = {k: v.value for k, v in result.metrics.items()}
    assert m["payment.latency_max_ms"] > 1500 and m["new_order.latency_max_ms"] > 1500, "the stall shows in full"
    # About 2 s of the 5 s schedule is stalled: p99 sits in seconds, not milliseconds.
    assert m["payment.latency_p99_ms"] > 1000 and m["new_order.latency_p99_ms"] > 1000
    assert m["lag_p99_ms"] > 1000
    assert m["tps"] == pytest.approx(100, rel=0.25)  # the backlog drains after SIGCONT


@pytest.mark.slow
def test_killing_the_server_fails_the_run_quickly(workdir, tmp_path) -> None:
    import os

    target = PostgresTarget(PostgresSettings.model_validate({"kind": "postgres"}), workdir / "target")
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, PostgresEndpoint)
        w = workload(clients=4, threads=2, duration="20s", load_jobs=2)
        ctx = context(tmp_path)
        w.prepare(endpoint, ctx)
        pids = list(target.processes())
        assert pids

        def kill() -> None:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

        threading.Timer(1.5, kill).start()
        started = time.monotonic()
        with pytest.raises(RunFailure, match="connections were lost|server|terminat|closed"):
            w.run(endpoint, ctx)
        assert time.monotonic() - started < 15, "no hang on a dead server: ended long before its 20 s"
    finally:
        target.teardown()
        shutil.rmtree(workdir / "target", ignore_errors=True)


def test_schema_is_what_the_engine_copies_into() -> None:
    """The column order the engine's COPY relies on (PROCEDURES.md, load.rs)."""
    stock = [c.split()[0] for c in schema.COLUMNS["stock"].strip().split(",\n")]
    assert stock[:3] == ["s_i_id", "s_w_id", "s_quantity"] and stock[3:13] == [f"s_dist_{i:02d}" for i in range(1, 11)]
    assert stock[13:] == ["s_ytd", "s_order_cnt", "s_remote_cnt", "s_data"]
    orders = [c.split()[0] for c in schema.COLUMNS["orders"].strip().split(",\n")]
    assert orders == ["o_id", "o_d_id", "o_w_id", "o_c_id", "o_entry_d", "o_carrier_id", "o_ol_cnt", "o_all_local"]


def _tpcc_digests(db: PostgresEndpoint) -> dict[str, tuple[int, str, int]]:
    """Per table: rows, an md5 over every row's columns but the timestamps
    (each load stamps its own time), and how many timestamps are NULL."""
    out = {}
    with db.connect() as conn:
        for table in schema.TABLES:
            cols = conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s"
                " ORDER BY ordinal_position", (table,)).fetchall()
            plain = ", ".join(c for c, t in cols if not t.startswith("timestamp"))
            stamps = [c for c, t in cols if t.startswith("timestamp")]
            nulls = " + ".join(f"count(*) FILTER (WHERE {c} IS NULL)" for c in stamps) or "0"
            out[table] = conn.execute(
                f"SELECT count(*), md5(string_agg(row({plain})::text, E'\\n' ORDER BY row({plain})::text)),"
                f" {nulls} FROM {table}").fetchone()
    return out


def _create_tpcc_tables(db: PostgresEndpoint) -> None:
    with db.connect() as conn:
        for sql in (*schema.drop_sql(), *schema.create_sql()):
            conn.execute(sql)


def test_binary_copy_stores_the_rows_text_copy_stores(scratch_db) -> None:
    # TPC-C loads through the engine's one parallel loader, binary COPY by
    # default: the server must end up with the rows the text format gives.
    from perflab import _engine

    digests = {}
    for fmt in ("text", "binary"):
        _create_tpcc_tables(scratch_db)
        report = _engine.tpcc_load(scratch_db.conninfo, warehouses=1, jobs=2, seed=5, c_last=100,
                                   copy_format=fmt)
        digests[fmt] = _tpcc_digests(scratch_db)
        assert dict(report.rows) == {t: n for t, (n, _, _) in digests[fmt].items()}
    assert digests["binary"] == digests["text"]
    # every order has its entry date; the undelivered ones' lines have no delivery date
    assert digests["text"]["orders"][2] == 0 and digests["text"]["order_line"][2] > 0
    with pytest.raises(_engine.ConfigError, match='"binary", "text"'):
        _engine.tpcc_load(scratch_db.conninfo, warehouses=1, jobs=1, seed=5, c_last=100, copy_format="csv")


def test_a_cancelled_load_stops_and_leaves_no_copy_running(scratch_db) -> None:
    from perflab import _engine

    warehouses = 20  # several seconds of loading on any machine
    _create_tpcc_tables(scratch_db)
    cancel = threading.Event()
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    try:
        with pytest.raises(_engine.Interrupted):
            _engine.tpcc_load(scratch_db.conninfo, warehouses=warehouses, jobs=2, seed=5, c_last=100,
                              cancel=cancel)
    finally:
        timer.cancel()
    # Interrupted is the mechanism (a load that never saw the cancel returns
    # instead, and leaves every warehouse: both checked below); how soon it
    # stops is a machine's figure, not a unit test's. The wait only tells a
    # COPY left running from a busy machine.
    deadline = time.monotonic() + 60
    with scratch_db.connect() as conn:
        while True:
            copying = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND query LIKE 'COPY%%' AND state <> 'idle'").fetchone()[0]
            if copying == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert copying == 0
        # The COPYs in flight were rolled back: only whole warehouses remain,
        # and not all of them.
        stock = conn.execute("SELECT count(*) FROM stock").fetchone()[0]
        customer = conn.execute("SELECT count(*) FROM customer").fetchone()[0]
    assert stock % 100_000 == 0 and customer % 30_000 == 0
    assert stock < warehouses * 100_000 and customer < warehouses * 30_000
