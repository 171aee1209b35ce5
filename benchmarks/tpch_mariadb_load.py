"""TPC-H load on a managed MariaDB: perflab's streamed load against the
classic pipeline, in alternating pairs, on one server (issue 32).

    .venv/bin/python benchmarks/tpch_mariadb_load.py [--sf 0.1] [--pairs 3] [--jobs 2] [--power [--query-timeout 120]]

perflab: the engine generates each part of each table into a pipe that
LOAD DATA LOCAL INFILE reads as the rows are made, `--jobs` sessions at once
(MysqlEndpoint.bulk_load), then the secondary indexes, the foreign keys and
ANALYZE TABLE (tpch.schema.load_steps("mysql")). Classic: tpchgen-cli (PyPI,
the same generator) writes '|'-separated CSV files, then one LOAD DATA LOCAL
INFILE per table, one after another, then the same statements one at a
time. Both into their own database of one server, with the same tables
(InnoDB, primary keys in CREATE TABLE). The sides take turns going first.

With --power, a power test (RF1, the 22 queries, RF2) runs on perflab's
data afterwards and prints each query's time: where MariaDB is slow.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from _common import run_main
from perflab.context import RunContext
from perflab.targets.mariadb import MariadbSettings, MariadbTarget
from perflab.workloads.tpch import TpchSettings, TpchWorkload, schema

SERVER_SETTINGS = {"innodb_buffer_pool_size": "2G", "innodb_log_file_size": "1G",
                   "innodb_flush_log_at_trx_commit": 2}


def classic_load(endpoint, sf: float, scratch: Path) -> dict[str, float]:
    steps: dict[str, float] = {}
    started = time.perf_counter()
    csv = scratch / "csv"
    csv.mkdir()
    subprocess.run([str(Path(sys.executable).parent / "tpchgen-cli"), "csv", "--delimiter", "|", "-s", f"{sf:g}",
                    "--output-dir", str(csv)], check=True, capture_output=True)
    steps["generate CSV (tpchgen-cli)"] = time.perf_counter() - started
    with endpoint.connect(local_infile=True) as conn:
        mark = time.perf_counter()
        for sql in [*schema.drop_tables(None, "mysql"), *(schema.create_table(t, "mysql") for t in schema.TABLES)]:
            conn.execute(sql)
        steps["create tables"] = time.perf_counter() - mark
        mark = time.perf_counter()
        conn.execute("SET SESSION unique_checks = 0, foreign_key_checks = 0")
        for table in schema.TABLES:
            conn.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE {table} CHARACTER SET latin1 "
                         "FIELDS TERMINATED BY '|' OPTIONALLY ENCLOSED BY '\"' IGNORE 1 LINES", (str(csv / f"{table}.csv"),))
        steps["load"] = time.perf_counter() - mark
        for step in schema.load_steps("mysql"):
            mark = time.perf_counter()
            for sql in step.statements:
                conn.execute(sql)
            steps[step.name] = time.perf_counter() - mark
    subprocess.run(["rm", "-rf", str(csv)], check=True)
    return steps


def perflab_load(endpoint, sf: float, jobs: int, run_dir: Path) -> dict[str, float]:
    w = TpchWorkload(TpchSettings(kind="tpch", scale_factor=sf, seed=1, load_jobs=jobs))
    return dict(w.prepare(endpoint, RunContext(run_number=1, run_dir=run_dir, t0_ns=time.monotonic_ns())).steps)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--power", action="store_true")
    ap.add_argument("--query-timeout", type=float, default=120.0, help="seconds per query of the power test")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="perflab-bench-my-tpch-", dir="/tmp"))
    target = MariadbTarget(MariadbSettings(kind="mariadb", settings=SERVER_SETTINGS), scratch / "target")
    try:
        endpoint = target.provision()
        with endpoint.connect() as conn:
            for name in ("perflab_side", "classic_side"):
                conn.execute(f"create database {name}")
        mine_ep, classic_ep = replace(endpoint, database="perflab_side"), replace(endpoint, database="classic_side")
        totals: dict[str, list[float]] = {"perflab": [], "classic": []}
        last: dict[str, dict[str, float]] = {}
        for i in range(args.pairs):
            order = ["perflab", "classic"] if i % 2 == 0 else ["classic", "perflab"]
            for side in order:
                if side == "perflab":
                    steps = perflab_load(mine_ep, args.sf, args.jobs, scratch / f"run{i}")
                else:
                    steps = classic_load(classic_ep, args.sf, scratch)
                last[side] = steps
                totals[side].append(sum(steps.values()))
                print(f"pair {i + 1} {side}: {sum(steps.values()):.2f} s "
                      + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()), flush=True)
        print(f"\nTPC-H SF {args.sf:g} load on MariaDB, {args.pairs} pairs, perflab load_jobs = {args.jobs}")
        print("\n| step | perflab s (last pair) | classic s (last pair) |\n|---|---:|---:|")
        for step in dict.fromkeys([*last["classic"], *last["perflab"]]):
            cells = [f"{last[s][step]:.2f}" if step in last[s] else "-" for s in ("perflab", "classic")]
            print(f"| {step} | {cells[0]} | {cells[1]} |")
        med = {s: statistics.median(v) for s, v in totals.items()}
        print(f"| **total, median of {args.pairs}** | **{med['perflab']:.2f}** | **{med['classic']:.2f}** |")
        print(f"\nperflab / classic = {med['perflab'] / med['classic']:.2f}x (per pair: "
              + ", ".join(f"{a / b:.2f}" for a, b in zip(totals["perflab"], totals["classic"], strict=True)) + ")")
        if args.power:
            w = TpchWorkload(TpchSettings(kind="tpch", scale_factor=args.sf, seed=20260101, tests=["power"],
                                          query_timeout=args.query_timeout))
            r = w.run(mine_ep, RunContext(run_number=1, run_dir=scratch / "power", t0_ns=time.monotonic_ns()))
            power = f"{r.metrics['power_at_size'].value:.1f}" if "power_at_size" in r.metrics else "invalid"
            print(f"\npower test: {r.metrics['power_test_s'].value:.1f} s; Power@Size {power}")
            for q in sorted(r.queries, key=lambda q: -(q.seconds or 0)):
                print(f"  {q.query} {q.status} {q.seconds or 0:.2f} s")
    finally:
        target.teardown()
        subprocess.run(["rm", "-rf", str(scratch)], check=False)
    return 0


if __name__ == "__main__":
    run_main(main)
