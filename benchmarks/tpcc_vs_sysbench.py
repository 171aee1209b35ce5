"""perflab's TPC-C against Percona's sysbench-tpcc, on one server.

Starts one managed PostgreSQL with perflab's own PostgresTarget (and always
stops it), loads both data sets into its one database at --warehouses
(sysbench-tpcc's tables carry a suffix, warehouse1, district1, ..., so they
live beside perflab's), timing `sysbench ... prepare` against perflab's load,
then runs them alternately: for each client count, --pairs pairs of runs of
--seconds each, sysbench then perflab in statements mode then perflab in
procedures mode. Both at read committed (sysbench --trx_level=RC), no
keying or think times (sysbench-tpcc has none), sysbench without foreign
keys (--use_fk=0; perflab has none), synchronous_commit=off unless
--synchronous-commit on (a shared disk's fsync times otherwise drown the
drivers' difference).

The drivers count differently (sysbench-tpcc counts its intended rollbacks
as errors, draws a random warehouse per transaction and has no deck), so
they are compared on what both leave in the database: NOPM, New-Orders per
minute from the change of sum(d_next_o_id), as HammerDB computes it. For
sysbench over its whole run (its `total time`); perflab's `nopm` metric over
its measured window (read every 20 ms and interpolated). Ratios are perflab
/ sysbench, the mean of the per-pair ratios with their spread.

Driver CPU per New-Order: sysbench's whole process (the child's rusage from
os.wait4) over the New-Orders it made; perflab's growth of this process's
getrusage around the run (driver threads, coordinator, the NOPM sampler
thread and connection set-up included, as sysbench's figure includes them)
over its New-Orders, with its stored driver_cpu_per_new_order_us (driver
threads, measured window) beside it. Both drivers share the machine's cores
with the server, so a cheaper driver leaves the server more CPU.

    .venv/bin/python benchmarks/tpcc_vs_sysbench.py [--warehouses 10] [--seconds 20] [--pairs 3]
        [--clients 8 32] [--json out.json]

sysbench 1.0.20 from Debian has the pgsql driver (apt-get install sysbench);
the Lua scripts are ../shared/anchors/sysbench-tpcc (--sysbench-tpcc).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import cores, run_child, run_main, spread
from perflab.context import RunContext
from perflab.targets.postgres import PostgresEndpoint, PostgresSettings, PostgresTarget
from perflab.workloads.tpcc import TpccSettings, TpccWorkload

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LUA = REPO.parent / "shared" / "anchors" / "sysbench-tpcc" / "tpcc.lua"


def sysbench_args(lua: Path, ep: PostgresEndpoint, warehouses: int, threads: int) -> list[str]:
    return ["sysbench", str(lua), "--db-driver=pgsql", f"--pgsql-host={ep.host}", f"--pgsql-port={ep.port}",
            f"--pgsql-user={ep.user}", f"--pgsql-db={ep.dbname}", "--tables=1", f"--scale={warehouses}",
            "--use_fk=0", "--trx_level=RC", f"--threads={threads}"]


def next_order_sum(ep: PostgresEndpoint, table: str) -> int:
    with ep.connect() as conn:
        return int(conn.execute(f"SELECT sum(d_next_o_id) FROM {table}").fetchone()[0])


def run_sysbench(lua: Path, ep: PostgresEndpoint, warehouses: int, clients: int, seconds: int) -> dict[str, float]:
    """sysbench as a child whose rusage is read with os.wait4 (no other child runs meanwhile)."""
    before = next_order_sum(ep, "district1")
    args = [*sysbench_args(lua, ep, warehouses, clients), f"--time={seconds}", "--report-interval=0", "run"]
    code, text, error, usage = run_child(args, cwd=lua.parent)
    if code != 0:
        raise RuntimeError(f"sysbench run failed ({code}): {error.strip() or text[-2000:]}")
    orders = next_order_sum(ep, "district1") - before
    total_s = float(re.search(r"total time:\s+([0-9.]+)s", text).group(1))  # type: ignore[union-attr]
    tx = int(re.search(r"transactions:\s+(\d+)", text).group(1))  # type: ignore[union-attr]
    errors = int(re.search(r"ignored errors:\s+(\d+)", text).group(1))  # type: ignore[union-attr]
    cpu_s = usage.ru_utime + usage.ru_stime
    return {"nopm": orders / total_s * 60, "orders": orders, "transactions": tx, "ignored_errors": errors,
            "cpu_per_new_order_us": cpu_s / max(1, orders) * 1e6}


def run_perflab(ep: PostgresEndpoint, warehouses: int, clients: int, seconds: int, mode: str,
                workdir: Path) -> dict[str, Any]:
    w = TpccWorkload(TpccSettings.model_validate({
        "kind": "tpcc", "window": "measured", "warehouses": warehouses, "clients": clients, "threads": min(clients, cores()),
        "duration": float(seconds), "mode": mode,
    }))
    ctx = RunContext(run_number=0, run_dir=workdir, t0_ns=time.monotonic_ns())
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = w.run(ep, ctx)
    after = resource.getrusage(resource.RUSAGE_SELF)
    m = {k: v.value for k, v in result.metrics.items()}
    orders = m.get("nopm_orders", 0.0)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"nopm": m.get("nopm", 0.0), "tpmC": m["tpmC"], "orders": orders,
            "cpu_per_new_order_us": cpu_s / max(1.0, m["new_order.committed"]) * 1e6,
            "engine_cpu_per_new_order_us": m.get("driver_cpu_per_new_order_us", 0.0),
            "failed": m["failed"], "new_order_p90_ms": m.get("new_order.latency_p90_ms", 0.0),
            "flags": ",".join(result.flags)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouses", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--clients", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--modes", nargs="+", default=["statements", "procedures"],
                    choices=["statements", "procedures"], help="perflab's modes, one run of each per pair")
    ap.add_argument("--synchronous-commit", default="off", choices=["on", "off"])
    ap.add_argument("--sysbench-tpcc", type=Path, default=DEFAULT_LUA, help="path of tpcc.lua")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args()
    lua = args.sysbench_tpcc.resolve()
    if shutil.which("sysbench") is None or not lua.is_file():
        print(f"needs sysbench on PATH (apt-get install sysbench) and {lua}")
        return 2

    base = Path(tempfile.mkdtemp(prefix="perflab-tpcc-bench-", dir="/tmp"))
    base.chmod(0o755)  # the server runs as `nobody` when we are root
    target = PostgresTarget(PostgresSettings.model_validate({
        "kind": "postgres", "settings": {"max_connections": max(args.clients) + 20, "shared_buffers": "512MB",
                                         "synchronous_commit": args.synchronous_commit,
                                         "max_wal_size": "4GB"},
    }), base / "target")
    rows: list[dict[str, Any]] = []
    try:
        ep = target.provision()
        assert isinstance(ep, PostgresEndpoint)
        print(f"server: {target.describe().get('version', '?')}, synchronous_commit={args.synchronous_commit}, "
              f"{cores()} cores, load average {os.getloadavg()[0]:.1f} at start", flush=True)
        started = time.monotonic()
        prep = subprocess.run([*sysbench_args(lua, ep, args.warehouses, cores()), "prepare"],
                              capture_output=True, text=True, cwd=lua.parent)
        sysbench_load_s = time.monotonic() - started
        if prep.returncode != 0:
            raise RuntimeError(f"sysbench prepare failed: {prep.stderr.strip() or prep.stdout[-2000:]}")
        w = TpccWorkload(TpccSettings.model_validate({"kind": "tpcc", "warehouses": args.warehouses}))
        load = w.prepare(ep, RunContext(run_number=0, run_dir=base, t0_ns=time.monotonic_ns()))
        steps = ", ".join(f"{k} {v:.2f}" for k, v in load.steps.items())
        print(f"load {args.warehouses} warehouses: sysbench prepare ({cores()} threads) {sysbench_load_s:.1f} s; "
              f"perflab {load.total_s:.1f} s ({steps}); ratio {load.total_s / sysbench_load_s:.3f}", flush=True)
        for clients in args.clients:
            for pair in range(args.pairs):
                a = run_sysbench(lua, ep, args.warehouses, clients, args.seconds)
                print(f"  c={clients:<3d} pair {pair + 1}: sysbench NOPM {a['nopm']:9.0f} "
                      f"{a['cpu_per_new_order_us']:8.1f} us/New-Order ({a['ignored_errors']} ignored errors)",
                      flush=True)
                for mode in args.modes:
                    b = run_perflab(ep, args.warehouses, clients, args.seconds, mode, base)
                    rows.append({"clients": clients, "pair": pair + 1, "mode": mode, "sysbench": a, "perflab": b,
                                 "load_average": os.getloadavg()[0]})
                    print(f"  {'':5s} {mode:>11s}: perflab NOPM {b['nopm']:9.0f} (tpmC {b['tpmC']:.0f}) "
                          f"{b['cpu_per_new_order_us']:8.1f} us/New-Order (engine "
                          f"{b['engine_cpu_per_new_order_us']:.1f}), New-Order p90 {b['new_order_p90_ms']:.1f} ms, "
                          f"{b['failed']:.0f} failed {b['flags']}", flush=True)
    finally:
        target.teardown()
        shutil.rmtree(base, ignore_errors=True)

    print()
    print(f"{'clients':>7s} {'mode':>11s} | {'sysbench NOPM':>13s} {'perflab NOPM':>12s} {'ratio':>6s} "
          f"{'(pairs)':>11s} | {'sysbench us/NO':>14s} {'perflab us/NO':>13s} {'cpu ratio':>9s} {'(pairs)':>11s}")
    for clients in args.clients:
        for mode in args.modes:
            group = [r for r in rows if r["clients"] == clients and r["mode"] == mode]
            if not group:
                continue
            nopm = [r["perflab"]["nopm"] / r["sysbench"]["nopm"] for r in group]
            cpu = [r["perflab"]["cpu_per_new_order_us"] / r["sysbench"]["cpu_per_new_order_us"] for r in group]
            print(f"{clients:7d} {mode:>11s} | {statistics.mean(r['sysbench']['nopm'] for r in group):13.0f} "
                  f"{statistics.mean(r['perflab']['nopm'] for r in group):12.0f} {statistics.mean(nopm):6.3f} "
                  f"{spread(nopm, 3):>11s} | "
                  f"{statistics.mean(r['sysbench']['cpu_per_new_order_us'] for r in group):14.1f} "
                  f"{statistics.mean(r['perflab']['cpu_per_new_order_us'] for r in group):13.1f} "
                  f"{statistics.mean(cpu):9.3f} {spread(cpu, 3):>11s}")
        if set(args.modes) == {"statements", "procedures"}:
            st = [r for r in rows if r["clients"] == clients and r["mode"] == "statements"]
            pr = [r for r in rows if r["clients"] == clients and r["mode"] == "procedures"]
            ratios = [p["perflab"]["nopm"] / s["perflab"]["nopm"] for s, p in zip(st, pr, strict=False)
                      if s["perflab"]["nopm"]]
            if ratios:
                print(f"{clients:7d} procedures / statements NOPM: {statistics.mean(ratios):.3f} "
                      f"({spread(ratios, 3)})")
    print(f"load average at end {os.getloadavg()[0]:.1f} (other work on this machine moves every figure)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    # Ctrl-C and SIGTERM run main's `finally`, which stops the server it started
    run_main(main)
