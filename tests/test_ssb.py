"""The Star Schema Benchmark at SF 0.01 on a real PostgreSQL and a real DuckDB:
the generator's counts, the 13 queries' answers cross-checked between the
two databases (one loaded by COPY, the other by Arrow), randomized
parameters, and a run through the CLI that stores per-query times."""

from __future__ import annotations

import decimal
import sqlite3
import time
from pathlib import Path
from typing import Any

from perflab.context import RunContext
from perflab.workloads.ssb import SsbSettings, SsbWorkload, queries

SF = 0.01


def workload(**settings: Any) -> SsbWorkload:
    return SsbWorkload(SsbSettings.model_validate({"kind": "ssb", "scale_factor": SF, **settings}))


def context(run_dir: Path) -> RunContext:
    return RunContext(run_number=1, run_dir=run_dir, t0_ns=time.monotonic_ns())


def _answers(endpoint: Any, qs: list[queries.SsbQuery]) -> dict[str, list[tuple[Any, ...]]]:
    """Each query's rows, values normalised (sums are exact integers in both
    databases; DuckDB returns HUGEINT, PostgreSQL numeric), rows sorted so
    that ties in ORDER BY revenue do not count as differences."""
    def norm(v: Any) -> Any:
        return int(v) if isinstance(v, (int, decimal.Decimal)) else v

    out = {}
    with endpoint.connect() as conn:
        for q in qs:
            rows = conn.execute(q.text).fetchall()
            out[q.name] = sorted(tuple(norm(v) for v in row) for row in rows)
    return out


def test_counts_and_answers_agree_between_postgres_and_duckdb(scratch_db: Any, duckdb_endpoint: Any,
                                                                 workdir: Path) -> None:
    loads = {}
    for name, endpoint in (("postgres", scratch_db), ("duckdb", duckdb_endpoint)):
        load = workload().prepare(endpoint, context(workdir / name))
        loads[name] = load.rows
        assert load.steps["load"] > 0
    assert loads["postgres"] == loads["duckdb"]
    rows = loads["postgres"]
    assert rows["customer"] == 300 and rows["supplier"] == 20 and rows["part"] == 2000
    assert rows["date"] == 2556
    assert 58_000 < rows["lineorder"] < 62_000  # 15,000 orders of 1..7 lines
    standard = queries.round_queries(0, False, 1)
    randomized = queries.round_queries(0, True, 7)
    for qs in (standard, randomized):
        pg_rows = _answers(scratch_db, qs)
        duck_rows = _answers(duckdb_endpoint, qs)
        for q in qs:
            assert pg_rows[q.name] == duck_rows[q.name], f"{q.name} differs:\n{q.text}"
    # the standard queries select something at SF 0.01 (flight 1 sums, flight 2-4 groups)
    std = _answers(duckdb_endpoint, standard)
    assert all(std[name] for name in ("Q1.1", "Q2.1", "Q3.1", "Q4.1", "Q4.2"))
    assert std["Q1.1"][0][0] > 0


def test_revenue_and_supplycost_follow_the_formulas(duckdb_endpoint: Any, workdir: Path) -> None:
    workload().prepare(duckdb_endpoint, context(workdir))
    with duckdb_endpoint.connect() as conn:
        bad = conn.execute(
            "select count(*) from lineorder join part on lo_partkey = p_partkey where "
            "lo_revenue <> lo_extendedprice * (100 - lo_discount) // 100 "
            "or lo_supplycost <> 6 * (90000 + ((p_partkey // 10) % 20001) + 100 * (p_partkey % 1000)) // 10 "
            "or lo_extendedprice <> lo_quantity * (90000 + ((p_partkey // 10) % 20001) + 100 * (p_partkey % 1000))"
        ).fetchall()[0][0]
        orphans = conn.execute(
            "select count(*) from lineorder left join date on lo_orderdate = d_datekey "
            "left join customer on lo_custkey = c_custkey where d_datekey is null or c_custkey is null"
        ).fetchall()[0][0]
    assert bad == 0 and orphans == 0


def test_randomized_parameters_stay_in_the_flight_domains() -> None:
    seen_regions = set()
    for seed in range(50):
        for q in queries.round_queries(0, True, seed):
            p = q.params
            if "DLO" in p:
                assert 1 <= int(p["DLO"]) <= 8 and int(p["DHI"]) == int(p["DLO"]) + 2
            if q.name == "Q4.3":
                assert queries.NATIONS[p["NATION"]] == p["REGION"]
            if q.name in ("Q3.3", "Q3.4"):
                assert p["CITY1"][:9] == p["CITY2"][:9] and p["CITY1"] != p["CITY2"]
            if "REGION" in p:
                seen_regions.add(p["REGION"])
            assert "$" not in q.text
    assert seen_regions == set(queries.REGIONS)
    # seeded: the same seed gives the same texts; rounds differ
    assert [q.text for q in queries.round_queries(1, True, 3)] == [q.text for q in queries.round_queries(1, True, 3)]
    assert [q.text for q in queries.round_queries(0, True, 3)] != [q.text for q in queries.round_queries(1, True, 3)]
    assert queries.round_queries(0, False, 1)[0].text == queries.round_queries(5, False, 99)[0].text


def test_power_rounds_store_per_query_times(run_cli: Any, workdir: Path) -> None:
    exp = workdir / "ssb.toml"
    exp.write_text(
        '[experiment]\nname = "ssb-small"\n\n[target]\nkind = "duckdb"\n\n'
        '[workload]\nkind = "ssb"\nscale_factor = 0.01\nrounds = 2\nparams = "random"\nseed = 5\n'
    )
    out = workdir / "out"
    run_cli("run", exp, "--out", out, "--quiet")
    db = sqlite3.connect(out / "perflab.sqlite")
    rows = db.execute("select stream, seq, query, seconds, status, started_s from query order by stream, seq").fetchall()
    metric = dict(db.execute("select name, value from metric").fetchall())
    db.close()
    assert [(s, q) for s, _, q, _, _, _ in rows] == [(r, n) for r in (0, 1) for n in queries.NAMES]
    assert all(status == "ok" and seconds > 0 for _, _, _, seconds, status, _ in rows)
    starts = [start for *_, start in rows]
    assert starts == sorted(starts)
    assert metric["round.0.total_s"] >= sum(sec for s, _, _, sec, _, _ in rows if s == 0)
    assert metric["load.rows.date"] == 2556
    html = (out / "report.html").read_text()
    assert "Star Schema Benchmark" in html and "Q4.3" in html


def test_bad_ssb_settings_are_named(run_cli: Any, workdir: Path) -> None:
    exp = workdir / "bad.toml"
    exp.write_text(
        '[experiment]\nname = "bad"\n\n[target]\nkind = "duckdb"\n\n'
        '[workload]\nkind = "ssb"\nscale_factor = 0.01\nqueries = ["Q5.1"]\nparams = "wild"\n'
    )
    proc = run_cli("check", exp, check=False)
    assert proc.returncode == 2
    text = proc.stderr + proc.stdout
    assert "workload.queries" in text and "workload.params" in text
    assert "Traceback" not in text
