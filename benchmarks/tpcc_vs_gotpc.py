"""perflab's TPC-C against PingCAP's go-tpc v1.0.7, on one managed MariaDB.

Starts one managed MariaDB with perflab's own MariadbTarget (TCP on
127.0.0.1, as go-tpc has no unix-socket option; always stopped at the end),
installs go-tpc on first use (`go install github.com/pingcap/go-tpc/cmd/
go-tpc@v1.0.7` with GOBIN in perflab's cache, PERFLAB_CACHE/tools/
go-tpc-v1.0.7; the Go toolchain and its module proxy do the work), loads both
data sets at --warehouses into two databases of the one server (go-tpc's in
`gotpc`, perflab's in the target's `perflab`: both name their tables
warehouse, district, ...), timing `go-tpc tpcc prepare --no-check` (its
load alone: by default it then runs its consistency checks) against
perflab's load, then runs them alternately: for each thread count, --pairs pairs of
runs of --seconds each, go-tpc then perflab. Both at read committed
(go-tpc --isolation 2), no keying or think times, innodb_flush_log_at_trx_commit
= 2 unless --flush-log-at-commit 1 (a shared disk's fsync times otherwise
drown the drivers' difference).

The drivers count differently (go-tpc counts New-Orders it sent, its intended
rollbacks apart), so they are compared on what both leave in the database:
NOPM, New-Orders per minute from the change of sum(d_next_o_id). For go-tpc
over its --time (its clock starts before it connects, so this is its whole
run); perflab's `nopm` metric over its measured window.

Driver CPU per New-Order: go-tpc's whole process (the child's rusage from
os.wait4) over the orders the database took; perflab's growth of this
process's getrusage around the run (driver threads, coordinator, the NOPM
sampler and connection set-up included, as go-tpc's figure includes them)
over its New-Orders. Both drivers share the machine's cores with the server,
so a cheaper driver leaves the server more CPU. Ratios are perflab / go-tpc,
the mean of the per-pair ratios with their spread.

perflab's side is the tpcc workload on the target's MysqlEndpoint: its
load through LOAD DATA LOCAL INFILE (or multi-row INSERT, or each in turn:
--load-methods), its run through the engine's MySQL
client (--gotpc-only skips it; where it cannot run, the table holds go-tpc's
figures alone and says why).

    .venv/bin/python benchmarks/tpcc_vs_gotpc.py [--warehouses 10] [--seconds 20] [--pairs 3]
        [--threads 8 32] [--gotpc-only] [--load-methods load-data insert] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
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

from _common import cores, go_tool, mariadb_cpu_s, run_child, run_main, spread
from perflab.context import RunContext
from perflab.errors import RunFailure, UserError
from perflab.targets.mariadb import MariadbSettings, MariadbTarget, MysqlEndpoint
from perflab.workloads.tpcc import TpccSettings, TpccWorkload

GOTPC_VERSION = "v1.0.7"
GOTPC_MODULE = f"github.com/pingcap/go-tpc/cmd/go-tpc@{GOTPC_VERSION}"
GOTPC_DB = "gotpc"

# The targets.
TARGET_NOPM_RATIO = 1.1
TARGET_CPU_RATIO = 0.8
TARGET_LOAD_RATIO = 0.5


def gotpc_binary() -> Path:
    """go-tpc v1.0.7, built once into perflab's cache."""
    def build(home: Path) -> None:
        built = subprocess.run(["go", "install", GOTPC_MODULE], env={**os.environ, "GOBIN": str(home)},
                               capture_output=True, text=True, cwd="/tmp")
        if built.returncode != 0:
            raise SystemExit(f"go install {GOTPC_MODULE} failed: {built.stderr.strip()[-2000:]}")

    return go_tool("go-tpc", GOTPC_VERSION, build)


def gotpc_args(binary: Path, ep: MysqlEndpoint, warehouses: int, threads: int) -> list[str]:
    return [str(binary), "tpcc", "-d", "mysql", "-H", ep.host, "-P", str(ep.port), "-U", ep.user,
            "-p", ep.password or "", "-D", GOTPC_DB, f"--warehouses={warehouses}", f"--threads={threads}",
            "--isolation=2"]


def next_order_sum(ep: MysqlEndpoint, database: str) -> int:
    with ep.connect(database=database) as conn:
        return int(conn.execute("SELECT sum(d_next_o_id) FROM district").fetchone()[0])


def run_gotpc(binary: Path, ep: MysqlEndpoint, warehouses: int, threads: int, seconds: int) -> dict[str, float]:
    """go-tpc as a child whose rusage is read with os.wait4 (no other child runs meanwhile)."""
    before = next_order_sum(ep, GOTPC_DB)
    args = [*gotpc_args(binary, ep, warehouses, threads), f"--time={seconds}s", "--interval=1000s", "run"]
    code, text, error, usage = run_child(args)
    if code != 0:
        raise RuntimeError(f"go-tpc run failed ({code}): {(error.strip() or text)[-2000:]}")
    orders = next_order_sum(ep, GOTPC_DB) - before
    tpmc = re.search(r"tpmC:\s+([0-9.]+)", text)
    errors = sum(int(n) for n in re.findall(r"\[Summary\] \w+_ERR - .*?Count: (\d+)", text))
    cpu_s = usage.ru_utime + usage.ru_stime
    return {"nopm": orders / seconds * 60, "orders": orders, "tpmC": float(tpmc.group(1)) if tpmc else 0.0,
            "errors": errors, "cpu_per_new_order_us": cpu_s / max(1, orders) * 1e6}


def run_perflab(ep: MysqlEndpoint, warehouses: int, threads: int, seconds: int, workdir: Path) -> dict[str, Any]:
    w = TpccWorkload(TpccSettings.model_validate({
        "kind": "tpcc", "window": "measured", "warehouses": warehouses, "clients": threads, "threads": min(threads, cores()),
        "duration": float(seconds),
    }))
    ctx = RunContext(run_number=0, run_dir=workdir, t0_ns=time.monotonic_ns())
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = w.run(ep, ctx)
    after = resource.getrusage(resource.RUSAGE_SELF)
    m = {k: v.value for k, v in result.metrics.items()}
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"nopm": m.get("nopm", 0.0), "tpmC": m["tpmC"], "orders": m.get("nopm_orders", 0.0),
            "cpu_per_new_order_us": cpu_s / max(1.0, m["new_order.committed"]) * 1e6,
            "engine_cpu_per_new_order_us": m.get("driver_cpu_per_new_order_us", 0.0),
            "failed": m["failed"], "flags": ",".join(result.flags)}


def perflab_load(ep: MysqlEndpoint, warehouses: int, workdir: Path) -> tuple[float | None, str]:
    """perflab's load into the target's database: (seconds, its steps), or
    (None, why it cannot run here)."""
    w = TpccWorkload(TpccSettings.model_validate({"kind": "tpcc", "warehouses": warehouses,
                                                  "load_jobs": cores()}))
    try:
        load = w.prepare(ep, RunContext(run_number=0, run_dir=workdir, t0_ns=time.monotonic_ns()))
    except (UserError, RunFailure) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return load.total_s, ", ".join(f"{k} {v:.2f}" for k, v in load.steps.items())


def verdict(value: float, target: float, at_least: bool) -> str:
    ok = value >= target if at_least else value <= target
    return f"{value:.3f} {'meets' if ok else 'MISSES'} {'>=' if at_least else '<='} {target}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouses", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--flush-log-at-commit", type=int, default=2, choices=[0, 1, 2],
                    help="innodb_flush_log_at_trx_commit")
    ap.add_argument("--buffer-pool", default="3G", help="innodb_buffer_pool_size (both data sets fit)")
    ap.add_argument("--gotpc-only", action="store_true", help="run go-tpc's side alone")
    ap.add_argument("--load-methods", nargs="+", default=["load-data"], choices=["load-data", "insert"],
                    help="perflab's load by LOAD DATA LOCAL INFILE (the default), by multi-row INSERT, or each "
                         "in turn (the target's load_method); the runs use the last one's data")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args()
    binary = gotpc_binary()

    base = Path(tempfile.mkdtemp(prefix="perflab-tpcc-gotpc-", dir="/tmp"))
    base.chmod(0o755)  # the server runs as `mysql` when we are root
    target = MariadbTarget(MariadbSettings.model_validate({
        "kind": "mariadb", "listen": "tcp",
        "settings": {"max_connections": max(args.threads) + 20, "innodb_buffer_pool_size": args.buffer_pool,
                     "innodb_flush_log_at_trx_commit": args.flush_log_at_commit,
                     "innodb_log_file_size": "1G"},
    }), base / "target")
    rows: list[dict[str, Any]] = []
    gotpc_load_s = perflab_load_s = None
    perflab_loads: dict[str, float] = {}
    why_not = "--gotpc-only"
    try:
        ep = target.provision()
        assert isinstance(ep, MysqlEndpoint)
        print(f"server: MariaDB {target.describe().get('version', '?')}, innodb_flush_log_at_trx_commit="
              f"{args.flush_log_at_commit}; go-tpc {GOTPC_VERSION}; "
              f"{cores()} cores, load average {os.getloadavg()[0]:.1f} at start", flush=True)
        with ep.connect(database="") as conn:
            conn.execute(f"CREATE DATABASE IF NOT EXISTS `{GOTPC_DB}`")
        started, server_before = time.monotonic(), mariadb_cpu_s(target)
        code, text, error, usage = run_child([*gotpc_args(binary, ep, args.warehouses, cores()), "prepare",
                                              "--no-check"])
        gotpc_load_s = time.monotonic() - started
        if code != 0:
            raise RuntimeError(f"go-tpc prepare failed ({code}): {(error.strip() or text)[-2000:]}")
        print(f"load {args.warehouses} warehouses: go-tpc tpcc prepare ({cores()} threads) {gotpc_load_s:.1f} s; "
              f"server CPU {mariadb_cpu_s(target) - server_before:.1f} s, go-tpc's "
              f"{usage.ru_utime + usage.ru_stime:.1f} s", flush=True)
        for method in [] if args.gotpc_only else args.load_methods:
            server_before, own_before = mariadb_cpu_s(target), resource.getrusage(resource.RUSAGE_SELF)
            perflab_load_s, steps = perflab_load(dataclasses.replace(ep, load_method=method), args.warehouses, base)
            if perflab_load_s is None:
                why_not = steps
                print(f"  perflab's tpcc cannot run on MariaDB here, go-tpc's side alone: {steps}", flush=True)
                break
            server_s, own = mariadb_cpu_s(target) - server_before, resource.getrusage(resource.RUSAGE_SELF)
            own_s = own.ru_utime + own.ru_stime - own_before.ru_utime - own_before.ru_stime
            perflab_loads[method] = perflab_load_s
            # with nothing idle, no client loads faster than the CPU both sides spent, over the cores
            floor_s = (server_s + own_s) / cores()
            print(f"  perflab, {method} {perflab_load_s:.1f} s ({steps}); ratio {perflab_load_s / gotpc_load_s:.3f}; "
                  f"server CPU {server_s:.1f} s, perflab's {own_s:.1f} s: CPU floor {floor_s:.1f} s, "
                  f"{floor_s / gotpc_load_s:.3f}x go-tpc's time", flush=True)
        for threads in args.threads:
            for pair in range(args.pairs):
                a = run_gotpc(binary, ep, args.warehouses, threads, args.seconds)
                row: dict[str, Any] = {"threads": threads, "pair": pair + 1, "gotpc": a,
                                       "load_average": os.getloadavg()[0]}
                line = (f"  t={threads:<3d} pair {pair + 1}: go-tpc NOPM {a['nopm']:9.0f} (its tpmC {a['tpmC']:.0f}) "
                        f"{a['cpu_per_new_order_us']:8.1f} us/New-Order ({a['errors']} errors)")
                if perflab_load_s is not None:
                    b = run_perflab(ep, args.warehouses, threads, args.seconds, base)
                    row["perflab"] = b
                    line += (f" | perflab NOPM {b['nopm']:9.0f} (tpmC {b['tpmC']:.0f}) "
                             f"{b['cpu_per_new_order_us']:8.1f} us/New-Order (engine "
                             f"{b['engine_cpu_per_new_order_us']:.1f}), {b['failed']:.0f} failed {b['flags']}")
                rows.append(row)
                print(line, flush=True)
    finally:
        target.teardown()
        shutil.rmtree(base, ignore_errors=True)

    print()
    print("| threads | go-tpc NOPM | perflab NOPM | NOPM ratio (pairs) | go-tpc us/New-Order | perflab us/New-Order "
          "| cpu ratio (pairs) |")
    print("| ---: | ---: | ---: | --- | ---: | ---: | --- |")
    verdicts = []
    for method, seconds in perflab_loads.items() if gotpc_load_s else ():
        verdicts.append(f"load, {method}: ratio {verdict(seconds / gotpc_load_s, TARGET_LOAD_RATIO, False)}")
    for threads in args.threads:
        group = [r for r in rows if r["threads"] == threads]
        g_nopm = statistics.mean(r["gotpc"]["nopm"] for r in group)
        g_cpu = statistics.mean(r["gotpc"]["cpu_per_new_order_us"] for r in group)
        if perflab_load_s is None:
            print(f"| {threads} | {g_nopm:.0f} | - | - | {g_cpu:.1f} | - | - |")
            continue
        nopm = [r["perflab"]["nopm"] / r["gotpc"]["nopm"] for r in group]
        cpu = [r["perflab"]["cpu_per_new_order_us"] / r["gotpc"]["cpu_per_new_order_us"] for r in group]
        print(f"| {threads} | {g_nopm:.0f} | {statistics.mean(r['perflab']['nopm'] for r in group):.0f} "
              f"| {statistics.mean(nopm):.3f} ({spread(nopm, 3)}) | {g_cpu:.1f} "
              f"| {statistics.mean(r['perflab']['cpu_per_new_order_us'] for r in group):.1f} "
              f"| {statistics.mean(cpu):.3f} ({spread(cpu, 3)}) |")
        verdicts.append(f"t={threads}: NOPM ratio {verdict(statistics.mean(nopm), TARGET_NOPM_RATIO, True)}; "
                        f"cpu ratio {verdict(statistics.mean(cpu), TARGET_CPU_RATIO, False)}")
    print()
    if perflab_load_s is None:
        print(f"perflab's side did not run ({why_not})")
    print("\n".join(verdicts))
    print(f"load average at end {os.getloadavg()[0]:.1f} (other work on this machine moves every figure)")
    if args.json:
        with contextlib.suppress(OSError):
            args.json.write_text(json.dumps({"load": {"gotpc_s": gotpc_load_s, "perflab_s": perflab_loads},
                                             "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    # Ctrl-C and SIGTERM run main's `finally`, which stops the server it started
    run_main(main)
