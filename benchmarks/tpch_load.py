"""TPC-H load test at SF 1: perflab against the classic pipeline, on the same
managed PostgreSQL, plus DuckDB's load and the power test on both engines.

    .venv/bin/python benchmarks/tpch_load.py [--sf 1] [--skip-power]

Classic pipeline (what DBT-3-style kits do): tpchgen-cli (PyPI) writes .tbl
files, `sed` strips dbgen's trailing '|', `psql \\copy` loads table by table,
then the same keys and indexes as perflab's load test, one statement at a
time, then ANALYZE. perflab: generation streamed into parallel COPY, keys,
indexes and ANALYZE in parallel sessions. Both into fresh databases of one
server with the same settings. Target: perflab <= 0.7x the classic total.

Then, on PostgreSQL and DuckDB: the 22 queries with the spec's validation
parameters, checked against the TPC's SF 1 answers (at SF 1 only), and a
power test (RF1, stream 0, RF2) with its Power@Size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import run_main
from perflab.context import RunContext
from perflab.targets.duckdb import DuckDbSettings, DuckDbTarget
from perflab.targets.postgres import PostgresSettings, PostgresTarget
from perflab.workloads.tpch import TpchSettings, TpchWorkload, schema

SERVER_SETTINGS = {"shared_buffers": "1GB", "maintenance_work_mem": "512MB", "max_wal_size": "8GB",
                   "checkpoint_timeout": "30min", "work_mem": "64MB"}


def psql(bin_dir: Path, conninfo: str, *args: str) -> None:
    subprocess.run([str(bin_dir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", conninfo, *args],
                   check=True, capture_output=True, text=True)


def classic_load(bin_dir: Path, conninfo: str, sf: float, scratch: Path) -> dict[str, float]:
    steps: dict[str, float] = {}
    tbl = scratch / "tbl"
    tbl.mkdir()
    t = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "tpchgen-cli"), "-s", f"{sf:g}", "--output-dir", str(tbl)],
                   check=True, capture_output=True)
    steps["generate .tbl (tpchgen-cli)"] = time.perf_counter() - t
    t = time.perf_counter()
    for table in schema.TABLES:
        subprocess.run(["sed", "-i", "s/|$//", str(tbl / f"{table}.tbl")], check=True)
    steps["strip trailing | (sed)"] = time.perf_counter() - t
    t = time.perf_counter()
    for sql in schema.drop_tables():
        psql(bin_dir, conninfo, "-c", sql)
    for table in schema.TABLES:
        psql(bin_dir, conninfo, "-c", schema.create_table(table))
    steps["create tables"] = time.perf_counter() - t
    t = time.perf_counter()
    for table in schema.TABLES:
        psql(bin_dir, conninfo, "-c", f"\\copy {table} from '{tbl / (table + '.tbl')}' with (delimiter '|')")
    steps["load (psql \\copy)"] = time.perf_counter() - t
    for step in schema.load_steps("postgres"):
        t = time.perf_counter()
        for sql in step.statements:
            psql(bin_dir, conninfo, "-c", sql)
        steps[step.name] = time.perf_counter() - t
    shutil.rmtree(tbl)
    return steps


def queries_and_power(endpoint, sf: float, run_dir: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    ctx = RunContext(run_number=1, run_dir=run_dir, t0_ns=time.monotonic_ns())
    if sf == 1:
        v = TpchWorkload(TpchSettings(kind="tpch", scale_factor=sf, seed=1, tests=["power"], validation=True))
        r = v.run(endpoint, ctx)
        out["validation queries s"] = sum(q.seconds or 0 for q in r.queries)
        failed = [k for k, (ok, _) in v.check(endpoint, ctx).checks.items() if not ok]
        out["answers vs TPC SF1"] = f"{int(r.metrics['answers.matched'].value)}/22" + (f" failed {failed}" if failed else "")
    p = TpchWorkload(TpchSettings(kind="tpch", scale_factor=sf, seed=20260101, tests=["power"]))
    r = p.run(endpoint, ctx)
    out["power test s"] = r.metrics["power_test_s"].value
    out["Power@Size"] = r.metrics.get("power_at_size").value if "power_at_size" in r.metrics else "invalid"
    slow = sorted((q for q in r.queries if q.query.startswith("Q")), key=lambda q: -(q.seconds or 0))[:3]
    out["slowest queries"] = ", ".join(f"{q.query} {q.seconds:.1f}s" for q in slow)
    return out


def add_steps(rows: list[tuple[str, str, str]], what: str, steps: dict[str, float], digits: int = 1) -> float:
    """One table row per timed step, then the total; returns the total."""
    for step, seconds in steps.items():
        rows.append((what, step, f"{seconds:.{digits}f}"))
    total = sum(steps.values())
    rows.append((what, "TOTAL", f"{total:.1f}"))
    return total


def add_figures(rows: list[tuple[str, str, str]], what: str, figures: dict[str, object]) -> None:
    for name, value in figures.items():
        rows.append((what, name, f"{value:.1f}" if isinstance(value, float) else str(value)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--skip-power", action="store_true")
    args = ap.parse_args()
    sf = args.sf
    scratch = Path(tempfile.mkdtemp(prefix="perflab-bench-tpch-", dir="/tmp"))
    scratch.chmod(0o755)
    rows: list[tuple[str, str, str]] = []
    target = PostgresTarget(PostgresSettings.model_validate(
        {"kind": "postgres", "settings": SERVER_SETTINGS}), scratch / "pg")
    try:
        endpoint = target.provision()
        from psycopg.conninfo import make_conninfo

        with endpoint.connect() as conn:
            conn.execute("create database classic")
        classic_conninfo = make_conninfo(endpoint.conninfo, dbname="classic")
        ctx = RunContext(run_number=1, run_dir=scratch, t0_ns=time.monotonic_ns())

        load = TpchWorkload(TpchSettings(kind="tpch", scale_factor=sf, tests=["power"])).prepare(endpoint, ctx)
        perflab_total = add_steps(rows, "perflab -> PostgreSQL", load.steps)
        classic_total = add_steps(rows, "classic -> PostgreSQL", classic_load(target.bin_dir, classic_conninfo,
                                                                              sf, scratch))
        rows.append(("ratio", "perflab / classic", f"{perflab_total / classic_total:.2f}x (target <= 0.70x)"))
        if not args.skip_power:
            add_figures(rows, "PostgreSQL", queries_and_power(endpoint, sf, scratch))
    finally:
        target.teardown()

    duck = DuckDbTarget(DuckDbSettings(kind="duckdb"), scratch / "duckdb")
    try:
        dep = duck.provision()
        ctx = RunContext(run_number=1, run_dir=scratch, t0_ns=time.monotonic_ns())
        dload = TpchWorkload(TpchSettings(kind="tpch", scale_factor=sf, tests=["power"])).prepare(dep, ctx)
        add_steps(rows, "perflab -> DuckDB", dload.steps, digits=2)
        if not args.skip_power:
            add_figures(rows, "DuckDB", queries_and_power(dep, sf, scratch))
    finally:
        duck.teardown()
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"TPC-H SF {sf:g} on {os.cpu_count()} CPUs")
    print(f"| {'what':22} | {'step':28} | {'seconds / value':40} |")
    print(f"|{'-' * 24}|{'-' * 30}|{'-' * 42}|")
    for what, step, value in rows:
        print(f"| {what:22} | {step:28} | {value:40} |")
    return 0


if __name__ == "__main__":
    # Ctrl-C and SIGTERM run main's `finally`, which stops the server it started
    run_main(main)
