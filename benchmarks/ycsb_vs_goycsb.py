"""perflab's YCSB against PingCAP's go-ycsb v1.0.3, on a managed PostgreSQL and a managed MariaDB.

For each server (--servers): starts one managed server with perflab's own target (TCP on
127.0.0.1, as go-ycsb has no unix-socket option for either; always stopped at the end),
builds go-ycsb on first use into perflab's cache (PERFLAB_CACHE/tools/go-ycsb-v1.0.3,
as go-tpc is: `go install` refuses the module for its replace directives, so the module
is downloaded from the Go module proxy with `go mod download -json`, copied to a
writable directory there and `go build ./cmd/go-ycsb` run inside it), loads
--records rows into two databases of the one server (go-ycsb's in `goycsb`, perflab's in
the target's own: both name their table usertable), timing `go-ycsb load` against
perflab's load (the workload's prepare), then runs them alternately: for each workload
letter, --pairs pairs of runs of --seconds each at --threads connections, go-ycsb then
perflab. Both run YCSB's own definition of the letter (workloads/workloada..f of
brianfrankcooper/YCSB: zipfian requests, latest for d, scans of 1..100 rows for e),
given to go-ycsb as -p properties, since go-ycsb's shipped workload files differ
(uniform requests, e's scans of one row); readallfields=true, 10 fields of 100 bytes.

Throughput is operations per second: go-ycsb's counts over its measured time (its
`Takes(s)`), perflab's `ops` over its whole measured window (`window = "measured"`, as
go-ycsb reports its whole run). Driver CPU per operation:
go-ycsb's whole process (the child's rusage from os.wait4) over its operations;
perflab's growth of this process's getrusage around the run (driver threads,
coordinator and connection set-up included, as go-ycsb's figure includes them) over its
operations. Both drivers share the machine's cores with the server, so a cheaper driver
leaves the server more CPU. Ratios are perflab / go-ycsb, the mean of the per-pair
ratios with their spread. The load's CPU floor: the server's CPU (MariaDB: its process;
PostgreSQL: not measurable from outside, its backends exit with their CPU) and perflab's
own over the cores.

    .venv/bin/python benchmarks/ycsb_vs_goycsb.py [--servers postgres mariadb] [--records 100000]
        [--seconds 15] [--pairs 3] [--threads 16] [--workloads a] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import cores, go_tool, mariadb_cpu_s, run_child, run_main, spread
from perflab.context import RunContext
from perflab.targets.mariadb import MariadbSettings, MariadbTarget, MysqlEndpoint
from perflab.targets.postgres import PostgresEndpoint, PostgresSettings, PostgresTarget
from perflab.workloads.ycsb import YcsbSettings, YcsbWorkload

GOYCSB_VERSION = "v1.0.3"
GOYCSB_MODULE = f"github.com/pingcap/go-ycsb@{GOYCSB_VERSION}"
GOYCSB_DB = "goycsb"
# YCSB's core workloads (brianfrankcooper/YCSB workloads/workloada..f), as -p properties
CORE: dict[str, dict[str, str]] = {
    "a": {"readproportion": "0.5", "updateproportion": "0.5", "requestdistribution": "zipfian"},
    "b": {"readproportion": "0.95", "updateproportion": "0.05", "requestdistribution": "zipfian"},
    "c": {"readproportion": "1", "requestdistribution": "zipfian"},
    "d": {"readproportion": "0.95", "insertproportion": "0.05", "requestdistribution": "latest"},
    "e": {"scanproportion": "0.95", "insertproportion": "0.05", "requestdistribution": "zipfian",
          "maxscanlength": "100", "scanlengthdistribution": "uniform"},
    "f": {"readproportion": "0.5", "readmodifywriteproportion": "0.5", "requestdistribution": "zipfian"},
}
NO_MIX = {"readproportion": "0", "updateproportion": "0", "insertproportion": "0", "scanproportion": "0",
          "readmodifywriteproportion": "0"}

# The issue's targets.
TARGET_OPS_RATIO = 1.1
TARGET_CPU_RATIO = 1.0
TARGET_LOAD_RATIO = 0.5


def goycsb_binary() -> Path:
    """go-ycsb v1.0.3, built once into perflab's cache (about 3.5 CPU-minutes)."""
    def build(home: Path) -> None:
        # `go install` refuses its replace directives: download the module and build inside it
        got = subprocess.run(["go", "mod", "download", "-json", GOYCSB_MODULE], capture_output=True, text=True,
                             cwd="/tmp")
        if got.returncode != 0:
            raise SystemExit(f"go mod download {GOYCSB_MODULE} failed: {(got.stderr or got.stdout).strip()[-2000:]}")
        source = home / "src"
        shutil.rmtree(source, ignore_errors=True)
        # the module cache is read-only: build in a writable copy
        shutil.copytree(json.loads(got.stdout)["Dir"], source)
        for path in (source, *source.rglob("*")):
            path.chmod(path.stat().st_mode | 0o200)
        partial = home / "go-ycsb.partial"
        built = subprocess.run(["go", "build", "-o", str(partial), "./cmd/go-ycsb"], capture_output=True, text=True,
                               cwd=source)
        if built.returncode != 0 or not partial.is_file():
            raise SystemExit(f"go build ./cmd/go-ycsb failed: {built.stderr.strip()[-2000:]}")
        partial.rename(home / "go-ycsb")

    return go_tool("go-ycsb", GOYCSB_VERSION, build)


def goycsb_args(binary: Path, command: str, ep: PostgresEndpoint | MysqlEndpoint, letter: str, records: int,
                threads: int) -> list[str]:
    if isinstance(ep, MysqlEndpoint):
        db = ["mysql", "-p", f"mysql.host={ep.host}", "-p", f"mysql.port={ep.port}", "-p", f"mysql.user={ep.user}",
              "-p", f"mysql.password={ep.password or ''}", "-p", f"mysql.db={GOYCSB_DB}"]
    else:
        db = ["pg", "-p", f"pg.host={ep.host}", "-p", f"pg.port={ep.port}", "-p", f"pg.user={ep.user}",
              "-p", f"pg.password={ep.password or ''}", "-p", f"pg.db={GOYCSB_DB}", "-p", "pg.sslmode=disable"]
    props = {"workload": "core", "recordcount": str(records), "fieldcount": "10", "fieldlength": "100",
             "readallfields": "true", "threadcount": str(threads), **NO_MIX, **CORE[letter]}
    return [str(binary), command, *db, *[a for k, v in props.items() for a in ("-p", f"{k}={v}")],
            "--threads", str(threads), "--interval", "100000"]


def goycsb_counts(text: str) -> tuple[int, int, float]:
    """(operations done, operations failed, seconds measured) from go-ycsb's last summary."""
    lines = re.findall(r"^(\w+)\s+- Takes\(s\): ([0-9.]+), Count: (\d+)", text, re.M)
    final: dict[str, tuple[float, int]] = {op: (float(s), int(n)) for op, s, n in lines}  # the last wins
    done = sum(n for op, (_, n) in final.items() if not op.endswith("_ERROR") and op != "TOTAL")
    failed = sum(n for op, (_, n) in final.items() if op.endswith("_ERROR"))
    seconds = max((s for s, _ in final.values()), default=0.0)
    return done, failed, seconds


def run_goycsb(binary: Path, ep: PostgresEndpoint | MysqlEndpoint, letter: str, records: int, threads: int,
               seconds: int) -> dict[str, float]:
    """go-ycsb as a child whose rusage is read with os.wait4 (no other child runs meanwhile),
    stopped by SIGINT after `seconds`: v1.0.3 declares maxexecutiontime but never reads it, and
    on SIGINT it cancels its workers and prints its summary."""
    args = [*goycsb_args(binary, "run", ep, letter, records, threads), "-p", "operationcount=1000000000"]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(args, stdout=out, stderr=err, text=True)
        stop = threading.Timer(seconds, child.send_signal, (signal.SIGINT,))
        stop.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            stop.cancel()
        child.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, error = out.read(), err.read()
    done, failed, measured = goycsb_counts(text)
    if code != 0 or not done:
        raise RuntimeError(f"go-ycsb run failed ({code}): {(error.strip() or text)[-2000:]}")
    cpu_s = usage.ru_utime + usage.ru_stime
    return {"ops": done / measured, "operations": done, "failed": failed, "cpu_per_op_us": cpu_s / done * 1e6}


def run_perflab(ep: PostgresEndpoint | MysqlEndpoint, letter: str, records: int, threads: int, seconds: int,
                workdir: Path) -> dict[str, Any]:
    w = YcsbWorkload(YcsbSettings.model_validate({
        "kind": "ycsb", "window": "measured", "workload": letter, "record_count": records, "clients": threads,
        "duration": float(seconds)}))
    ctx = RunContext(run_number=0, run_dir=workdir, t0_ns=time.monotonic_ns())
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = w.run(ep, ctx)
    after = resource.getrusage(resource.RUSAGE_SELF)
    m = {k: v.value for k, v in result.metrics.items()}
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"ops": m["ops"], "operations": m["operations"], "failed": m["failed"],
            "cpu_per_op_us": cpu_s / max(1.0, m["operations"]) * 1e6,
            "engine_cpu_per_op_us": m.get("driver_cpu_per_op_us", 0.0), "flags": ",".join(result.flags)}


def verdict(value: float, target: float, at_least: bool) -> str:
    ok = value >= target if at_least else value <= target
    return f"{value:.3f} {'meets' if ok else 'MISSES'} {'>=' if at_least else '<='} {target}"


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def bench_server(server: str, args: argparse.Namespace, binary: Path, base: Path) -> dict[str, Any]:
    """Both loads and the alternating runs on one managed server."""
    target: PostgresTarget | MariadbTarget
    if server == "mariadb":
        target = MariadbTarget(MariadbSettings.model_validate({
            "kind": "mariadb", "listen": "tcp",
            "settings": {"max_connections": 2 * args.threads + 20, "innodb_buffer_pool_size": "1G",
                         "innodb_flush_log_at_trx_commit": 2, "innodb_log_file_size": "512M"},
        }), base / server)
        durability = "innodb_flush_log_at_trx_commit=2"
    else:
        target = PostgresTarget(PostgresSettings.model_validate({
            "kind": "postgres", "listen": "tcp",
            "settings": {"max_connections": 2 * args.threads + 20, "shared_buffers": "512MB",
                         "synchronous_commit": "off"},
        }), base / server)
        durability = "synchronous_commit=off"
    out: dict[str, Any] = {"server": server, "runs": []}
    try:
        ep = target.provision()
        assert isinstance(ep, PostgresEndpoint | MysqlEndpoint)
        print(f"{server}: {target.describe().get('version', '?')}, {durability}; go-ycsb {GOYCSB_VERSION}; "
              f"{cores()} cores, load average {os.getloadavg()[0]:.1f} at start", flush=True)
        with ep.connect(**({"database": ""} if isinstance(ep, MysqlEndpoint) else {})) as conn:
            if isinstance(ep, MysqlEndpoint):
                conn.execute(f"CREATE DATABASE IF NOT EXISTS `{GOYCSB_DB}`")
            else:
                conn.execute(f'CREATE DATABASE "{GOYCSB_DB}"')
        server_before = mariadb_cpu_s(target) if isinstance(target, MariadbTarget) else None
        started = time.monotonic()
        code, text, error, usage = run_child(goycsb_args(binary, "load", ep, "a", args.records, args.threads))
        out["goycsb_load_s"] = time.monotonic() - started
        if code != 0:
            raise RuntimeError(f"go-ycsb load failed ({code}): {(error.strip() or text)[-2000:]}")
        server_s = "" if server_before is None else f"server CPU {mariadb_cpu_s(target) - server_before:.1f} s, "
        print(f"  load {args.records} rows: go-ycsb load ({args.threads} threads) {out['goycsb_load_s']:.1f} s; "
              f"{server_s}go-ycsb's CPU {usage.ru_utime + usage.ru_stime:.1f} s", flush=True)
        w = YcsbWorkload(YcsbSettings.model_validate({"kind": "ycsb", "record_count": args.records,
                                                      "load_jobs": cores()}))
        server_before = mariadb_cpu_s(target) if isinstance(target, MariadbTarget) else None
        own_before = own_cpu_s()
        load = w.prepare(ep, RunContext(run_number=0, run_dir=base, t0_ns=time.monotonic_ns()))
        own_s = own_cpu_s() - own_before
        out["perflab_load_s"] = load.total_s
        steps = ", ".join(f"{k} {v:.2f}" for k, v in load.steps.items())
        line = (f"  perflab {load.total_s:.1f} s ({steps}); ratio {load.total_s / out['goycsb_load_s']:.3f}; "
                f"perflab's CPU {own_s:.1f} s")
        if server_before is not None:
            server_cpu = mariadb_cpu_s(target) - server_before
            floor_s = (server_cpu + own_s) / cores()
            out["cpu_floor_s"] = floor_s
            line += (f", server's {server_cpu:.1f} s: CPU floor {floor_s:.1f} s, "
                     f"{floor_s / out['goycsb_load_s']:.3f}x go-ycsb's time")
        print(line, flush=True)
        for letter in args.workloads:
            for pair in range(args.pairs):
                a = run_goycsb(binary, ep, letter, args.records, args.threads, args.seconds)
                b = run_perflab(ep, letter, args.records, args.threads, args.seconds, base)
                out["runs"].append({"workload": letter, "pair": pair + 1, "goycsb": a, "perflab": b,
                                    "load_average": os.getloadavg()[0]})
                print(f"  {letter} pair {pair + 1}: go-ycsb {a['ops']:9.0f} ops/s {a['cpu_per_op_us']:7.1f} us/op "
                      f"({a['failed']:.0f} failed) | perflab {b['ops']:9.0f} ops/s {b['cpu_per_op_us']:7.1f} us/op "
                      f"(engine {b['engine_cpu_per_op_us']:.1f}), {b['failed']:.0f} failed {b['flags']}", flush=True)
    finally:
        target.teardown()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", nargs="+", default=["postgres", "mariadb"], choices=["postgres", "mariadb"])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--workloads", nargs="+", default=["a"], choices=sorted(CORE))
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args()
    binary = goycsb_binary()
    base = Path(tempfile.mkdtemp(prefix="perflab-ycsb-goycsb-", dir="/tmp"))
    base.chmod(0o755)  # the servers run as an unprivileged user when we are root
    results = []
    try:
        for server in args.servers:
            results.append(bench_server(server, args, binary, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print()
    print("| server | workload | go-ycsb ops/s | perflab ops/s | ops ratio (pairs) | go-ycsb us/op | perflab us/op "
          "| cpu ratio (pairs) | load go-ycsb s | load perflab s | load ratio |")
    print("| --- | --- | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: | --- |")
    verdicts = []
    for res in results:
        load_ratio = res["perflab_load_s"] / res["goycsb_load_s"]
        verdicts.append(f"{res['server']} load: ratio {verdict(load_ratio, TARGET_LOAD_RATIO, False)}")
        for letter in args.workloads:
            group = [r for r in res["runs"] if r["workload"] == letter]
            ops = [r["perflab"]["ops"] / r["goycsb"]["ops"] for r in group]
            cpu = [r["perflab"]["cpu_per_op_us"] / r["goycsb"]["cpu_per_op_us"] for r in group]
            print(f"| {res['server']} | {letter} | {statistics.mean(r['goycsb']['ops'] for r in group):.0f} "
                  f"| {statistics.mean(r['perflab']['ops'] for r in group):.0f} "
                  f"| {statistics.mean(ops):.3f} ({spread(ops, 3)}) "
                  f"| {statistics.mean(r['goycsb']['cpu_per_op_us'] for r in group):.1f} "
                  f"| {statistics.mean(r['perflab']['cpu_per_op_us'] for r in group):.1f} "
                  f"| {statistics.mean(cpu):.3f} ({spread(cpu, 3)}) | {res['goycsb_load_s']:.1f} "
                  f"| {res['perflab_load_s']:.1f} | {load_ratio:.3f} |")
            verdicts.append(f"{res['server']} {letter}: ops ratio {verdict(statistics.mean(ops), TARGET_OPS_RATIO, True)}"
                            f"; cpu ratio {verdict(statistics.mean(cpu), TARGET_CPU_RATIO, False)}")
    print()
    print("\n".join(verdicts))
    print(f"load average at end {os.getloadavg()[0]:.1f} (other work on this machine moves every figure)")
    if args.json:
        with contextlib.suppress(OSError):
            args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    # Ctrl-C and SIGTERM run main's `finally`, which stops the servers it started
    run_main(main)
