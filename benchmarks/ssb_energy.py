"""The Star Schema Benchmark on PostgreSQL and DuckDB: the load (generated in
the engine, COPY on PostgreSQL, Arrow on DuckDB), one power-style round of the
13 queries with the standard parameters, and each query's energy from the
energy collector (RAPL, perf, or the labelled model: the source is printed).

    .venv/bin/python benchmarks/ssb_energy.py [--sf 1] [--idle 5]

On PostgreSQL the model counts the server's own CPU (cpu_scope = "target");
on DuckDB, embedded, the target's process is perflab itself.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import run_main
from perflab.collectors.base import CollectorContext
from perflab.collectors.energy import EnergyCollector, EnergySettings
from perflab.context import RunContext
from perflab.targets.duckdb import DuckDbSettings, DuckDbTarget
from perflab.targets.postgres import PostgresSettings, PostgresTarget
from perflab.workloads.ssb import SsbSettings, SsbWorkload

SERVER_SETTINGS = {"shared_buffers": "1GB", "maintenance_work_mem": "512MB", "max_wal_size": "8GB",
                   "checkpoint_timeout": "30min", "work_mem": "64MB"}


def measure(name: str, target: Any, endpoint: Any, sf: float, idle_s: float, scratch: Path) -> list[str]:
    lines = []
    ctx = RunContext(run_number=1, run_dir=scratch, t0_ns=time.monotonic_ns())
    workload = SsbWorkload(SsbSettings(kind="ssb", scale_factor=sf))
    load = workload.prepare(endpoint, ctx)
    for step, seconds in load.steps.items():
        lines.append(f"| {name} | load: {step} | {seconds:.2f} s | |")
    lines.append(f"| {name} | load: total | {load.total_s:.2f} s | lineorder {load.rows['lineorder']} rows |")
    collector = EnergyCollector("energy", EnergySettings(interval=0.1, idle_baseline=idle_s, cpu_scope="target"))
    ctx = RunContext(run_number=1, run_dir=scratch, t0_ns=time.monotonic_ns())
    collector.start(CollectorContext(run=ctx, endpoint=endpoint, target=target))
    try:
        result = workload.run(endpoint, ctx)
    finally:
        summary = collector.stop()
    result.merge(summary)
    collector.annotate(result)
    source = collector.meter.source if collector.meter is not None else "?"
    for q in result.queries:
        parts = ", ".join(f"{c} {j:.2f}" for c, j in (q.energy or {}).items())
        lines.append(f"| {name} | {q.query} | {q.seconds:.3f} s | {q.energy_j or 0:.2f} J ({source}: {parts}); "
                     f"above idle {q.energy_above_idle_j or 0:.2f} J |")
    m = result.metrics
    lines.append(f"| {name} | round total | {m['round_mean_s'].value:.2f} s | {m['energy.joules'].value:.1f} J "
                 f"({source}), idle {m['energy.idle_watts'].value:.2f} W, in queries "
                 f"{m['energy.queries.joules'].value:.1f} J, gaps {m['energy.gaps.joules'].value:.2f} J |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--idle", type=float, default=5.0, help="idle baseline, seconds")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="perflab-bench-ssb-", dir="/tmp"))
    scratch.chmod(0o755)
    lines: list[str] = []
    target = PostgresTarget(PostgresSettings.model_validate({"kind": "postgres", "settings": SERVER_SETTINGS}),
                            scratch / "pg")
    try:
        endpoint = target.provision()
        lines += measure("PostgreSQL", target, endpoint, args.sf, args.idle, scratch)
    finally:
        target.teardown()
    duck = DuckDbTarget(DuckDbSettings(kind="duckdb"), scratch / "duckdb")
    try:
        lines += measure("DuckDB", duck, duck.provision(), args.sf, args.idle, scratch)
    finally:
        duck.teardown()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"SSB SF {args.sf:g} on {os.cpu_count()} CPUs")
    print("| engine | step or query | time | energy |")
    print("| --- | --- | ---: | --- |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    # Ctrl-C and SIGTERM run main's `finally`, which stops the server it started
    run_main(main)
