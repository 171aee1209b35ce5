"""The two ways a generated data set goes into MariaDB, in alternating pairs
on one server (issue 32: "LOAD DATA LOCAL INFILE streamed, or multi-row
INSERT: measure both"): the target's `load_method` "load-data" (the engine's
text rows through a pipe that LOAD DATA LOCAL INFILE reads) against
"insert" (the engine's multi-row INSERTs of 1,000 rows, sent by the same
PyMySQL sessions as they are made).

    .venv/bin/python benchmarks/mysql_load_methods.py [--workload tpcc] [--warehouses 10] [--sf 0.1]
        [--pairs 3] [--jobs 2]

Each load is the workload's whole `prepare` (create, generate and load,
indexes, ANALYZE) into a fresh database of one managed MariaDB 10.11
(innodb_flush_log_at_trx_commit = 2, a buffer pool that holds the data),
timed by the workload's own steps, with MariaDB's CPU seconds over the load
beside it (on 2 cores the server's share bounds the wall time). The methods
take turns going first. Ratios are insert / load-data per pair.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import run_main, spread
from perflab import proc
from perflab.context import RunContext
from perflab.targets.mariadb import MariadbSettings, MariadbTarget, MysqlEndpoint
from perflab.workloads.tpcc import TpccSettings, TpccWorkload
from perflab.workloads.tpch import TpchSettings, TpchWorkload

METHODS = ("load-data", "insert")


def workload(args: argparse.Namespace) -> TpccWorkload | TpchWorkload:
    if args.workload == "tpcc":
        return TpccWorkload(TpccSettings.model_validate({
            "kind": "tpcc", "warehouses": args.warehouses, "load_jobs": args.jobs, "duration": 1.0}))
    return TpchWorkload(TpchSettings.model_validate({
        "kind": "tpch", "scale_factor": args.sf, "load_jobs": args.jobs}))


def one_load(target: MariadbTarget, endpoint: MysqlEndpoint, method: str, args: argparse.Namespace,
             scratch: Path) -> dict[str, Any]:
    database = f"perflab_load_{method.replace('-', '_')}"
    with endpoint.connect(database="") as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database}")
        conn.execute(f"CREATE DATABASE {database}")
    ep = dataclasses.replace(endpoint, database=database, load_method=method)
    cpu_before = sum(proc.cpu_seconds(pid) or 0.0 for pid in target.processes())
    started = time.perf_counter()
    load = workload(args).prepare(ep, RunContext(run_number=0, run_dir=scratch, t0_ns=time.monotonic_ns()))
    wall = time.perf_counter() - started
    cpu = sum(proc.cpu_seconds(pid) or 0.0 for pid in target.processes()) - cpu_before
    with endpoint.connect(database="") as conn:
        conn.execute(f"DROP DATABASE {database}")
    return {"method": method, "wall_s": wall, "server_cpu_s": cpu, "steps": load.steps,
            "rows": sum(load.rows.values())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["tpcc", "tpch"], default="tpcc")
    ap.add_argument("--warehouses", type=int, default=10)
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="perflab-load-methods-", dir="/tmp"))
    base.chmod(0o755)
    target = MariadbTarget(MariadbSettings(kind="mariadb", settings={
        "innodb_buffer_pool_size": "2G", "innodb_log_file_size": "1G", "innodb_flush_log_at_trx_commit": 2}),
        base / "target")
    runs: list[dict[str, Any]] = []
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, MysqlEndpoint)
        size = f"{args.warehouses} warehouses" if args.workload == "tpcc" else f"SF {args.sf:g}"
        print(f"{args.workload} {size}, {args.jobs} sessions, {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f} at start", flush=True)
        for pair in range(args.pairs):
            for method in (METHODS if pair % 2 == 0 else METHODS[::-1]):
                r = one_load(target, endpoint, method, args, base)
                r["pair"] = pair + 1
                runs.append(r)
                steps = ", ".join(f"{k} {v:.2f}" for k, v in r["steps"].items())
                print(f"  pair {pair + 1} {method:9s}: {r['wall_s']:7.2f} s, server CPU {r['server_cpu_s']:6.2f} s "
                      f"({steps}; {r['rows']:,} rows)", flush=True)
    finally:
        target.teardown()
        shutil.rmtree(base, ignore_errors=True)

    def side(method: str, key: str) -> list[float]:
        return [r[key] for r in runs if r["method"] == method]

    print("\n| method | load s (pairs) | server CPU s | generate-and-load step s |")
    print("| --- | --- | --- | --- |")
    for method in METHODS:
        step = [r["steps"].get("generate_and_load", r["steps"].get("load", 0.0)) for r in runs if r["method"] == method]
        print(f"| {method} | {statistics.mean(side(method, 'wall_s')):.2f} ({spread(side(method, 'wall_s'))}) "
              f"| {statistics.mean(side(method, 'server_cpu_s')):.2f} | {statistics.mean(step):.2f} |")
    ratios = [i / d for d, i in zip(side("load-data", "wall_s"), side("insert", "wall_s"), strict=True)]
    cpu = [i / d for d, i in zip(side("load-data", "server_cpu_s"), side("insert", "server_cpu_s"), strict=True)]
    print(f"\ninsert / load-data: wall {statistics.mean(ratios):.3f} ({spread(ratios)}), "
          f"server CPU {statistics.mean(cpu):.3f} ({spread(cpu)}) over {len(ratios)} pairs; "
          f"load average at end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    run_main(main)
