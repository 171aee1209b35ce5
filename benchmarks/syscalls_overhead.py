"""What tracing the server's system calls costs: TPC-B-like TPS with the
syscalls collector (bpftrace, and strace) against without, round by round.

One managed PostgreSQL is started (and always stopped), synchronous_commit
on (every commit is a WAL fdatasync: the calls the collector exists for),
pgbench's tables loaded once. Each round runs the tpcb-like script at
--clients clients for --seconds once per side: "none" (no collector),
"bpftrace" and "strace" (the collector with that mechanism), the order
rotated every round so a machine that slows down during a round does not
always hurt the same side. Overhead = 1 - TPS(side) / TPS(none) of the same
round; the table gives the mean and range over rounds, and the tracer's own
CPU (the bpftrace or strace process; the probes themselves run in the
server's processes and show only as lost TPS).

    .venv/bin/python benchmarks/syscalls_overhead.py [--rounds 3] [--seconds 10] [--clients 8] [--scale 5]
        [--sides none bpftrace strace]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import cores, run_main, spread
from perflab.collectors.base import CollectorContext
from perflab.collectors.syscalls import SyscallsCollector, SyscallsSettings
from perflab.context import RunContext
from perflab.targets.postgres import PostgresEndpoint, PostgresSettings, PostgresTarget
from perflab.workloads.tpcb import TpcbSettings, TpcbWorkload

# the bound for bpftrace
LIMIT = 0.03


def one_run(side: str, target: PostgresTarget, ep: PostgresEndpoint, settings: dict[str, Any],
            base: Path) -> dict[str, float]:
    ctx = RunContext(run_number=0, run_dir=base, t0_ns=time.monotonic_ns())
    collector = None
    if side != "none":
        collector = SyscallsCollector("syscalls", SyscallsSettings(mechanism=side, interval=1.0))
        collector.start(CollectorContext(run=ctx, endpoint=ep, target=target))
    try:
        result = TpcbWorkload(TpcbSettings.model_validate(settings)).run(ep, ctx)
    finally:
        traced = collector.stop() if collector is not None else None
    out = {"tps": result.metrics["tps"].value}
    if traced is not None:
        m = traced.metrics
        out["tracer_cpu_s"] = m["syscalls.tracer_cpu_s"].value
        out["wal_syncs"] = m["syscalls.wal_syncs"].value if "syscalls.wal_syncs" in m else 0.0
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--scale", type=int, default=5)
    ap.add_argument("--sides", nargs="+", default=["none", "bpftrace", "strace"],
                    choices=["none", "bpftrace", "strace"])
    args = ap.parse_args()
    sides = ["none", *[s for s in args.sides if s != "none"]]

    base = Path(tempfile.mkdtemp(prefix="perflab-syscalls-overhead-", dir="/tmp"))
    base.chmod(0o755)  # the server runs as `nobody` when we are root
    target = PostgresTarget(PostgresSettings.model_validate({
        "kind": "postgres", "settings": {"max_connections": args.clients + 20, "shared_buffers": "256MB",
                                         "synchronous_commit": "on"},
    }), base / "target")
    rows: list[dict[str, dict[str, float]]] = []
    try:
        ep = target.provision()
        assert isinstance(ep, PostgresEndpoint)
        print(f"server: {target.describe().get('version', '?')}, {cores()} cores, "
              f"load average {os.getloadavg()[0]:.1f} at start", flush=True)
        TpcbWorkload(TpcbSettings.model_validate({"kind": "tpcb", "scale": args.scale})).prepare(
            ep, RunContext(run_number=0, run_dir=base, t0_ns=time.monotonic_ns()))
        settings = {"kind": "tpcb", "script": "tpcb-like", "clients": args.clients,
                    "threads": min(args.clients, cores()), "duration": float(args.seconds), "protocol": "prepared",
                    "vacuum": False, "seed": 1}
        for r in range(args.rounds):
            order = sides[r % len(sides):] + sides[:r % len(sides)]
            got = {side: one_run(side, target, ep, settings, base) for side in order}
            rows.append(got)
            text = " | ".join(f"{s} {got[s]['tps']:8.1f} tps" for s in order)
            print(f"  round {r + 1} ({', '.join(order)}): {text}  load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        target.teardown()
        shutil.rmtree(base, ignore_errors=True)

    print()
    print("| side | TPS (mean) | TPS / none (mean) | range over rounds | overhead | tracer CPU (% of one core) |")
    print("| --- | --- | --- | --- | --- | --- |")
    verdict = 0
    for side in sides:
        tps = [row[side]["tps"] for row in rows]
        ratios = [row[side]["tps"] / row["none"]["tps"] for row in rows]
        cpu = [row[side].get("tracer_cpu_s", 0.0) / args.seconds * 100 for row in rows]
        overhead = 1 - statistics.mean(ratios)
        print(f"| {side} | {statistics.mean(tps):.1f} | {statistics.mean(ratios):.3f} | {spread(ratios, 3)} | "
              f"{overhead * 100:.1f}% | {statistics.mean(cpu):.1f} |")
        if side == "bpftrace" and overhead > LIMIT:
            verdict = 1
    if "bpftrace" in sides:
        print(f"\nbpftrace overhead {'above' if verdict else 'within'} the {LIMIT:.0%} bound")
    return verdict


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    run_main(main)
