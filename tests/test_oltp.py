"""The oltp workload (sysbench's OLTP scripts) against a real PostgreSQL.

Two tables of 10,000 rows and a few hundred events per run keep this short;
the comparison with sysbench itself is a benchmark (benchmarks/oltp_vs_sysbench.py).
The statement mix is checked against the server's own counters
(pg_stat_user_tables, pg_stat_user_indexes), not against the driver's claims.
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from perflab import _engine
from perflab.context import RunContext
from perflab.errors import UserError
from perflab.workloads import WORKLOADS
from perflab.workloads.harness import engine_settings_of
from perflab.workloads.oltp import STATEMENTS, OltpSettings, OltpWorkload

TABLES, ROWS = 2, 10_000
EVENTS = 60
_READS = {"point_select": 10, "simple_range": 1, "sum_range": 1, "order_range": 1, "distinct_range": 1}
_WRITES = {"index_update": 1, "non_index_update": 1, "delete": 1, "insert": 1}
_TX = {"begin": 1, "commit": 1}
# sysbench's oltp_*.lua: the statements of one event, by kind (written out
# here, not taken from the engine, so that the histograms are checked against the scripts)
STATEMENT_KINDS: dict[str, dict[str, int]] = {
    "point_select": {"point_select": 1},
    "read_only": {**_TX, **_READS},
    "read_write": {**_TX, **_READS, **_WRITES},
    "write_only": {**_TX, **_WRITES},
    "update_index": {"index_update": 1},
    "update_non_index": {"non_index_update": 1},
    "insert": {"insert": 1},
}


def workload(**settings: Any) -> OltpWorkload:
    return OltpWorkload(OltpSettings.model_validate(
        {"kind": "oltp", "tables": TABLES, "table_size": ROWS, "io": "epoll", **settings}))


def context(tmp_path: Path) -> RunContext:
    return RunContext(run_number=1, run_dir=tmp_path, t0_ns=time.monotonic_ns())


@pytest.fixture(scope="module")
def loaded(pg_target) -> Any:
    """A database holding sbtest1..2 as the loader left them."""
    _, endpoint = pg_target
    name = "t_oltp_module"
    with endpoint.connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    from psycopg.conninfo import make_conninfo

    db = dataclasses.replace(endpoint, dbname=name, conninfo=make_conninfo(endpoint.conninfo, dbname=name))
    load = workload().prepare(db, RunContext(run_number=1, run_dir=Path("/tmp"), t0_ns=time.monotonic_ns()))
    yield db, load
    with endpoint.connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_registered_and_settings_say_what_is_allowed() -> None:
    assert WORKLOADS.get("oltp") is OltpWorkload
    s = OltpSettings.model_validate({"kind": "oltp"})
    assert (s.script, s.tables, s.table_size, s.rand_type) == ("read_write", 10, 100_000, "special")
    with pytest.raises(ValidationError, match="point_select"):
        OltpSettings.model_validate({"kind": "oltp", "script": "oltp_read_write"})
    with pytest.raises(ValidationError, match="zipfian|uniform"):
        OltpSettings.model_validate({"kind": "oltp", "rand_type": "zipfian"})
    with pytest.raises(ValidationError, match="both duration and transactions"):
        OltpSettings.model_validate({"kind": "oltp", "duration": "5s", "transactions": 10})
    # read_write = 10 point selects + 4 range selects + 2 updates + 1 delete + 1 insert (+ BEGIN, COMMIT)
    assert STATEMENTS["read_write"] == {"point_selects": 10, "range_selects": 4, "updates": 2, "deletes": 1,
                                        "inserts": 1, "other": 2}
    assert not workload(script="read_only").writes() and workload(script="write_only").writes()


def test_default_threads_give_a_mysql_driver_thread_at_most_two_connections(monkeypatch) -> None:
    from perflab.workloads import harness
    from perflab.workloads.oltp import MYSQL_CLIENTS_PER_THREAD, MYSQL_THREADS_WHY

    assert MYSQL_CLIENTS_PER_THREAD == 2
    monkeypatch.setattr(harness, "cores", lambda: 2)

    def threads(clients: int, given: int | None = None, per: int | None = MYSQL_CLIENTS_PER_THREAD) -> int:
        return OltpSettings.model_validate({"kind": "oltp", "clients": clients, "threads": given}
                                           ).effective_threads(per)

    # PostgreSQL (no per-thread bound): min(clients, cores), as before
    assert [threads(n, per=None) for n in (1, 2, 8, 32)] == [1, 2, 2, 2]
    # MySQL wire: at least ceil(clients / 2) threads, never fewer than the plain default
    assert [threads(n) for n in (1, 2, 3, 4, 5, 8, 32, 33)] == [1, 2, 2, 2, 3, 4, 16, 17]
    # up to MAX_DEFAULT_THREADS: 10,000 clients do not start 5,000 threads and rings
    assert threads(128) == harness.MAX_DEFAULT_THREADS == 64 and threads(10_000) == 64
    assert threads(10_000, given=500) == 500
    # a thread count the user set is theirs
    assert threads(32, given=2) == 2 and threads(8, given=8) == 8
    s = OltpSettings.model_validate({"kind": "oltp", "clients": 32})
    why = s.threads_reason(16, MYSQL_THREADS_WHY)
    assert why is not None and why.startswith("32 clients on 16 driver threads, at most 2 per thread (threads not "
                                              "set): a driver thread with more MySQL connections"), why
    assert s.threads_reason(2, MYSQL_THREADS_WHY) is None  # the plain default says nothing
    assert OltpSettings.model_validate({"kind": "oltp", "clients": 32, "threads": 16}).threads_reason(
        16, MYSQL_THREADS_WHY) is None  # nor does a count the user set
    monkeypatch.setattr(harness, "cores", lambda: 64)  # a big machine: the plain default is already more
    assert threads(32) == 32 and s.threads_reason(32, MYSQL_THREADS_WHY) is None


def test_loader_leaves_sysbenchs_tables_and_k_index(loaded) -> None:
    db, load = loaded
    assert load.rows == {"sbtest1": ROWS, "sbtest2": ROWS} and load.steps["tables"] > 0
    with db.connect() as conn:
        for t in (1, 2):
            count, low, high, kmin, kmax = conn.execute(
                f"SELECT count(*), min(id), max(id), min(k), max(k) FROM sbtest{t}").fetchone()
            assert (count, low, high) == (ROWS, 1, ROWS) and 1 <= kmin <= kmax <= ROWS
            indexes = dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s",
                                        (f"sbtest{t}",)).fetchall())
            assert indexes[f"k_{t}"].endswith(f"ON public.sbtest{t} USING btree (k)")
            # sysbench's PRIMARY KEY (id), under the name CREATE TABLE gives it (the loader adds it after the rows)
            assert indexes[f"sbtest{t}_pkey"].endswith(f"ON public.sbtest{t} USING btree (id)")
            assert conn.execute("SELECT contype FROM pg_constraint WHERE conname = %s",
                                (f"sbtest{t}_pkey",)).fetchone() == ("p",)
            # the insert script's ids follow the loaded ones
            assert conn.execute(f"SELECT nextval('sbtest{t}_id_seq')").fetchone()[0] == ROWS + 1
            conn.execute(f"SELECT setval('sbtest{t}_id_seq', {ROWS})")
        columns = conn.execute("SELECT column_name, data_type, character_maximum_length FROM "
                               "information_schema.columns WHERE table_name = 'sbtest1' ORDER BY ordinal_position"
                               ).fetchall()
        assert columns == [("id", "integer", None), ("k", "integer", None), ("c", "character", 120),
                           ("pad", "character", 60)]
        c, pad = conn.execute("SELECT c, pad FROM sbtest1 WHERE id = 7").fetchone()
        assert re.fullmatch(r"(\d{11}-){9}\d{11} ", c) and re.fullmatch(r"(\d{11}-){4}\d{11} ", pad)
        # special: 75% of k values in the middle 1% of the range
        middle = conn.execute("SELECT count(*) FROM sbtest1 WHERE k BETWEEN 4951 AND 5050").fetchone()[0]
        assert 0.7 * ROWS < middle < 0.85 * ROWS


def _counters(db: Any) -> dict[str, int]:
    with db.connect() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        ins, upd, dele = conn.execute(
            "SELECT sum(n_tup_ins), sum(n_tup_upd), sum(n_tup_del) FROM pg_stat_user_tables"
            " WHERE relname LIKE 'sbtest%'").fetchone()
        scans = conn.execute("SELECT sum(idx_scan) FROM pg_stat_user_indexes WHERE indexrelname LIKE 'sbtest%_pkey'"
                             ).fetchone()[0]
    return {"inserts": int(ins), "updates": int(upd), "deletes": int(dele), "pkey_scans": int(scans)}


def assert_statement_histograms(result: Any, script: str, committed: int) -> None:
    """One histogram per statement kind of the script, holding the script's
    count of it per committed event (only the last try of a retried event
    counts), each with p50 <= p99 <= max."""
    stats = {h.name.removeprefix("latency.statement."): h.data for h in result.histograms
             if h.name.startswith("latency.statement.")}
    counts = {kind: _engine.hdr_summary(data).count for kind, data in stats.items()}
    assert counts == {kind: n * committed for kind, n in STATEMENT_KINDS[script].items()}
    for kind, data in stats.items():
        p50, p99 = _engine.hdr_quantile_us(data, 0.5), _engine.hdr_quantile_us(data, 0.99)
        assert 0 < p50 <= p99 <= _engine.hdr_summary(data).max_us, (kind, p50, p99)


@pytest.mark.parametrize("script", list(STATEMENTS))
def test_each_script_runs_sysbenchs_statement_mix(loaded, tmp_path, script) -> None:
    db, _ = loaded
    before = _counters(db)
    w = workload(script=script, clients=1, transactions=EVENTS)
    result = w.run(db, context(tmp_path))
    metrics = {k: m.value for k, m in result.metrics.items()}
    assert metrics["transactions"] == EVENTS and metrics["failed"] == 0
    mix = STATEMENTS[script]
    expected = {
        "inserts": mix.get("inserts", 0) * EVENTS,
        "updates": mix.get("updates", 0) * EVENTS,
        "deletes": mix.get("deletes", 0) * EVENTS,
        # every read, update and delete finds its rows by the primary key
        "pkey_scans": sum(mix.get(k, 0) for k in ("point_selects", "range_selects", "updates", "deletes")) * EVENTS,
    }
    # the server's counters arrive when the clients' sessions end
    deadline = time.monotonic() + 10
    while True:
        after = _counters(db)
        change = {k: after[k] - before[k] for k in after}
        if change == expected or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert change == expected
    for kind, per_event in mix.items():
        assert metrics[f"statements.{kind}"] == per_event * EVENTS
    assert [h.name for h in result.histograms][0] == f"latency.{script}"
    assert_statement_histograms(result, script, committed=EVENTS)
    check = w.check(db, context(tmp_path))
    assert check.passed and len(check.checks) == 1, check


def test_statement_histograms_hold_the_measured_windows_committed_events(loaded, tmp_path) -> None:
    """Four clients on two threads for a while after a warm-up: the threads'
    statement histograms merge, and hold the statements of exactly the
    committed events of the measured window (none of the warm-up's, none of a
    failed or retried try's)."""
    db, _ = loaded
    result = workload(script="read_write", clients=4, threads=2, duration="2s", warmup="1s").run(db, context(tmp_path))
    metrics = {k: m.value for k, m in result.metrics.items()}
    assert metrics["transactions"] > 0
    assert_statement_histograms(result, "read_write", committed=int(metrics["transactions"]))


def test_two_drivers_statement_histograms_merge(loaded) -> None:
    """Two drivers' results (as Ray's workers ship them) merge statement by statement."""
    from perflab.drivers import merge

    db, _ = loaded
    outs = [_engine.oltp_run(db.conninfo, script="read_only", tables=TABLES, table_size=ROWS, rand_type="special",
                             t0_ns=time.monotonic_ns(), harness=engine_settings_of(
                                 clients=1, threads=1, transactions=n, io="epoll", seed=n, pin="off", follow=False))
            for n in (5, 7)]
    merged = merge.merge([merge.WorkerResult.of(i, "here", out) for i, out in enumerate(outs)])
    counts = {op.name: (op.committed, op.latency.count) for op in merged.operations if op.committed}
    assert counts == {kind: (n * 12, n * 12) for kind, n in STATEMENT_KINDS["read_only"].items()}


def test_report_has_a_statement_table(loaded, workdir, run_cli) -> None:
    db, _ = loaded
    experiment = _experiment(workdir / "stmt.toml", db.conninfo, "read_only")
    run_cli("run", experiment, "--out", workdir / "out", "--quiet")
    html = (workdir / "out" / "report.html").read_text()
    statements = html[html.index("Statements"):]
    for kind in STATEMENT_KINDS["read_only"]:
        assert f"<td>{kind}</td>" in statements, kind


def test_read_only_target_runs_read_scripts_and_refuses_writes(loaded, tmp_path) -> None:
    db, _ = loaded
    read_only = dataclasses.replace(db, read_only=True)
    w = workload(script="read_only", clients=2, duration="1s")
    assert w.prepare(read_only, context(tmp_path)).rows == {}  # nothing loaded: the tables are used as found
    metrics = {k: m.value for k, m in w.run(read_only, context(tmp_path)).metrics.items()}
    assert metrics["tps"] > 0 and metrics["failed"] == 0
    with pytest.raises(UserError, match="writes and the target is read-only"):
        workload(script="read_write", clients=1, transactions=1).run(read_only, context(tmp_path))
    with pytest.raises(UserError, match="no sbtest3"):
        workload(script="point_select", tables=3).prepare(read_only, context(tmp_path))


def _experiment(path: Path, dsn: str, script: str) -> Path:
    path.write_text(f'[experiment]\nname = "oltp-external"\n\n[target]\nkind = "postgres"\ndsn = "{dsn}"\n\n'
                    f'[workload]\nkind = "oltp"\nscript = "{script}"\ntables = {TABLES}\ntable_size = {ROWS}\n'
                    'clients = 1\nduration = "1s"\n')
    return path


def test_external_target_allows_read_only_and_refuses_writes_at_check(loaded, workdir, run_cli) -> None:
    db, _ = loaded
    ok = run_cli("check", _experiment(workdir / "ro.toml", db.conninfo, "read_only"), check=False)
    assert ok.returncode == 0, ok.stderr
    refused = run_cli("check", _experiment(workdir / "rw.toml", db.conninfo, "read_write"), check=False)
    assert refused.returncode == 2 and "allow_destructive" in refused.stderr and "Traceback" not in refused.stderr
