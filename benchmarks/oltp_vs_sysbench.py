"""perflab's `oltp` workload against sysbench 1.0.20's oltp_* scripts, on one server.

--server postgres (the default; sysbench's pgsql driver) or mariadb (its mysql
driver, against a managed MariaDB over its unix socket, perflab's own MySQL
client on the other side; innodb_flush_log_at_trx_commit=2 in the place of
synchronous_commit=off, and the loader timed both ways: LOAD DATA LOCAL
INFILE streamed and multi-row INSERT).

Starts one managed PostgreSQL with perflab's own PostgresTarget (and always
stops it), times `sysbench oltp_common prepare` (--threads 2, so it loads two
tables at once) against perflab's loader (binary COPY, load_jobs 2) at the same
--tables and --table-size, --load-pairs times alternately, each from no sbtest
tables (sysbench's cleanup, untimed), with MariaDB's own CPU time beside each
load (the server's share: on 2 cores it bounds the wall time from below);
perflab's data, loaded last, is what the runs use (sysbench runs on it as on
its own). Then it runs them alternately: for each
script and thread count, --pairs pairs of runs of --seconds each, sysbench then
perflab, the same script, the same key distribution (sysbench's default
--rand-type=special), prepared statements on both sides.
synchronous_commit=off: a shared disk's fsync times otherwise drown the
drivers' difference.

TPS: sysbench's "transactions ... per sec." against perflab's tps (committed
events). Driver CPU per transaction: sysbench's whole process (the child's
rusage, os.wait4) over its transactions; perflab's growth of this process's
getrusage around the run (driver threads, coordinator, polling thread and
connection set-up included, as sysbench's figure includes them) over its
transactions, with its stored driver_cpu_per_tx_us (driver threads, measured
window) beside it. sysbench runs one OS thread per connection; perflab runs
the connections on the workload's default runtime threads (min(threads,
cores) on PostgreSQL; on MariaDB at most 2 connections per thread, the oltp
workload's default there), or on --perflab-threads N (several: one perflab
run of each per pair, rows labelled SCRIPT/tN). Ratios are perflab /
sysbench, the mean of the per-pair ratios with their spread.

With --floor (--server mariadb only), each pair also runs the cheapest
drivers we know how to write, on epoll and on io_uring, after sysbench and
perflab: crates/engine/examples/driver_floor.rs in `mysqlwire` mode (built
here with cargo, CARGO_TARGET_DIR honoured), the same script, tables, key
distribution and connections (--threads), on the driver threads of
perflab's first variant in the pair, every statement prepared once and run
as one COM_STMT_EXECUTE round trip as perflab's are, replies framed but not
decoded, no clock, no histogram: what the kernel's side of those round
trips costs on this machine, the CPU per transaction no driver of this
design goes below (its own getrusage over its measured window, connecting
excluded). driver_floor's `pgwire` mode runs
pgbench's SELECT, not sysbench's, so PostgreSQL has no floor here.

    .venv/bin/python benchmarks/oltp_vs_sysbench.py [--server postgres|mariadb] [--tables 10]
        [--table-size 100000] [--seconds 10] [--pairs 3] [--threads 8 32]
        [--scripts point_select read_only read_write] [--load-pairs 1] [--pin auto off]
        [--perflab-threads default 2 16] [--floor] [--json out.json]
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (
    cores,
    driver_floor,
    factor_table,
    floor_factor,
    follow_moves,
    machine_cpu,
    machine_figures,
    mariadb_cpu_s,
    mean_spread,
    pair_table,
    pinned,
    run_child,
    run_floor,
    run_main,
    spread,
)
from perflab import _engine
from perflab.context import RunContext
from perflab.endpoints import MysqlWireEndpoint
from perflab.targets.mariadb import MariadbSettings, MariadbTarget
from perflab.targets.postgres import PostgresEndpoint, PostgresSettings, PostgresTarget
from perflab.workloads.oltp import OltpSettings, OltpWorkload

Endpoint = PostgresEndpoint | MysqlWireEndpoint

# The targets.
TARGET_TPS_RATIO = 1.05
TARGET_CPU_RATIO = 0.8
TARGET_LOAD_RATIO = 0.5
# driver_floor.rs's loops, in this order in each pair
FLOORS = ("epoll", "uring")


def sysbench_args(ep: Endpoint, script: str, tables: int, table_size: int, threads: int) -> list[str]:
    if isinstance(ep, MysqlWireEndpoint):
        where = [f"--mysql-socket={ep.unix_socket}"] if ep.unix_socket else [f"--mysql-host={ep.host}",
                                                                              f"--mysql-port={ep.port}"]
        driver = ["--db-driver=mysql", *where, f"--mysql-user={ep.user}", f"--mysql-db={ep.database}",
                  *([f"--mysql-password={ep.password}"] if ep.password else [])]
    else:
        driver = ["--db-driver=pgsql", f"--pgsql-host={ep.host}", f"--pgsql-port={ep.port}",
                  f"--pgsql-user={ep.user}", f"--pgsql-db={ep.dbname}"]
    return ["sysbench", f"oltp_{script}" if script != "common" else "oltp_common", *driver,
            f"--tables={tables}", f"--table-size={table_size}", f"--threads={threads}"]


def sysbench_prepare(ep: Endpoint, tables: int, table_size: int) -> None:
    # --threads 2: sysbench's prepare loads a table per thread at once
    code, text, error, _ = run_child([*sysbench_args(ep, "common", tables, table_size, 2), "prepare"])
    if code != 0:
        raise RuntimeError(f"sysbench prepare failed: {error.strip() or text[-500:]}")


def server_cpu_s(target: PostgresTarget | MariadbTarget) -> float | None:
    """MariaDB's CPU seconds so far (one process, its threads); None on
    PostgreSQL, whose backends take their CPU time with them when they exit."""
    if not isinstance(target, MariadbTarget):
        return None
    return mariadb_cpu_s(target)


def client_cpu_s() -> float:
    """This process's CPU seconds (perflab's loader runs in its threads) plus
    its waited-for children's (sysbench prepare)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed_load(target: PostgresTarget | MariadbTarget, ep: Endpoint, args: argparse.Namespace, name: str,
               loads: dict[str, list[float]], server_cpu: dict[str, list[float]], client_cpu: dict[str, list[float]],
               load: Callable[[], object]) -> float:
    """One load from no sbtest tables (sysbench's cleanup first, untimed), its
    wall time, the server's CPU time and the client's kept under `name`."""
    code, text, error, _ = run_child([*sysbench_args(ep, "common", args.tables, args.table_size, 2), "cleanup"])
    if code != 0:
        raise RuntimeError(f"sysbench cleanup failed: {error.strip() or text[-500:]}")
    cpu_before = server_cpu_s(target)
    client_before = client_cpu_s()
    started = time.monotonic()
    load()
    took = time.monotonic() - started
    cpu_after = server_cpu_s(target)
    client = client_cpu_s() - client_before
    loads.setdefault(name, []).append(took)
    client_cpu.setdefault(name, []).append(client)
    cpu = f"; server CPU {cpu_after - cpu_before:.2f} s" if cpu_before is not None and cpu_after is not None else ""
    cpu += f"; client CPU {client:.2f} s"
    if cpu_before is not None and cpu_after is not None:
        server_cpu.setdefault(name, []).append(cpu_after - cpu_before)
    print(f"  load {len(loads[name])}: {name} {took:.2f} s{cpu}; load average {os.getloadavg()[0]:.1f}", flush=True)
    return took


def run_sysbench(ep: Endpoint, script: str, tables: int, table_size: int, threads: int,
                 seconds: int) -> dict[str, Any]:
    args = [*sysbench_args(ep, script, tables, table_size, threads), f"--time={seconds}", "run"]
    machine_before = machine_cpu()
    code, text, error, usage = run_child(args)
    if code != 0:
        raise RuntimeError(f"sysbench failed: {error.strip() or text.strip()[-500:]}")
    found = re.search(r"transactions:\s+(\d+)\s+\(([0-9.]+) per sec", text)
    ignored = re.search(r"ignored errors:\s+(\d+)", text)
    assert found, text
    done = int(found.group(1))
    return {"tps": float(found.group(2)), "transactions": done,
            "cpu_per_tx_us": (usage.ru_utime + usage.ru_stime) / done * 1e6,
            "ignored_errors": int(ignored.group(1)) if ignored else 0, **machine_figures(machine_before, done)}


def run_perflab(ep: Endpoint, script: str, tables: int, table_size: int, threads: int, seconds: int,
                workdir: Path, pin: str = "auto", driver_threads: str = "default",
                follow: str = "on") -> dict[str, Any]:
    """One perflab run of `threads` clients (sysbench's --threads) on the
    workload's default driver threads, or `driver_threads` of them; clients
    follow their server processes unless `follow` is off."""
    w = OltpWorkload(OltpSettings.model_validate({
        "kind": "oltp", "window": "measured", "script": script, "tables": tables, "table_size": table_size, "clients": threads,
        **({} if driver_threads == "default" else {"threads": min(int(driver_threads), threads)}),
        "duration": float(seconds), "pin": pin, "follow": follow == "on"}))
    before, machine_before = resource.getrusage(resource.RUSAGE_SELF), machine_cpu()
    result = w.run(ep, RunContext(run_number=0, run_dir=workdir, t0_ns=time.monotonic_ns()))
    after = resource.getrusage(resource.RUSAGE_SELF)
    m = result.metrics
    done = m["transactions"].value
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"tps": m["tps"].value, "transactions": done, "cpu_per_tx_us": cpu_s / done * 1e6,
            "engine_cpu_per_tx_us": m["driver_cpu_per_tx_us"].value, "retries": m["retries"].value,
            "failed": m["failed"].value, "io": next((e.message for e in result.events if e.kind == "io"), "io: ?"),
            "pinned": pinned(result.events), "driver_threads": int(m["threads"].value),
            "off_cpu_share": m["server_off_cpu_share"].value if "server_off_cpu_share" in m else None,
            "moves": follow_moves((e.kind, e.message) for e in result.events),
            **machine_figures(machine_before, done)}


def off_cpu(run: dict[str, Any]) -> str:
    """The share of samples that found a client's server process off its
    driver thread's CPU, and the moves that following made, when sampled."""
    if run["off_cpu_share"] is None:
        return ""
    return f"; server off CPU {run['off_cpu_share']:.2f}" + ("" if run["moves"] is None else f", {run['moves']} moves")


def labelled(script: str, pin: str, pins: list[str], driver_threads: str = "default",
             all_threads: tuple[str, ...] = ("default",), follow: str = "on",
             follows: tuple[str, ...] = ("on",)) -> str:
    """A script's row label: with several --pin values, the value too; with
    several --perflab-threads, the thread count (tN, or t=default); with both
    --follow values, follow=on or off."""
    return (script + ("" if len(pins) == 1 else f"/pin={pin}")
            + ("" if len(all_threads) == 1 else f"/t{'=default' if driver_threads == 'default' else driver_threads}")
            + ("" if len(follows) == 1 else f"/follow={follow}"))


def floor_table(floors: list[dict[str, Any]], scripts: list[str], threads_list: list[int]) -> list[str]:
    """Print the floors against sysbench and perflab in the same pairs;
    return a verdict per floor: where sysbench's 0.8x sits against it."""
    print("\n| script | threads | floor | floor tps | floor us/tx (user, system) | floor cs/tx "
          "| sysbench/floor CPU (pairs) | perflab/floor CPU (pairs) | floor/sysbench CPU (pairs) "
          "| the floor's driver factor: the most a driver this cheap gains at sysbench's server cost (pairs) |")
    print("| --- | ---: | --- | ---: | --- | ---: | --- | --- | --- | --- |")
    verdicts = []
    for script, threads, io in ((s, t, i) for s in scripts for t in threads_list for i in FLOORS):
        group = [r for r in floors if r["script"] == script and r["threads"] == threads and r["io"] == io]
        if not group:
            continue
        floor_cpu = [r["floor"]["cpu_per_req_us"] for r in group]
        sysbench_cpu = [r["sysbench"]["cpu_per_tx_us"] for r in group]
        perflab_cpu = [r["perflab"]["cpu_per_tx_us"] for r in group]

        def mean(key: str, group: list[dict[str, Any]] = group) -> float:
            return statistics.mean(r["floor"][key] for r in group)

        under = [f / s for f, s in zip(floor_cpu, sysbench_cpu, strict=True)]
        print(f"| {script} | {threads} | {'io_uring' if io == 'uring' else io} | {mean('req_per_s'):.0f} "
              f"| {mean('cpu_per_req_us'):.1f} ({mean('user_per_req_us'):.1f}, {mean('system_per_req_us'):.1f}) "
              f"| {mean('cs_per_req'):.2f} "
              f"| {mean_spread([s / f for s, f in zip(sysbench_cpu, floor_cpu, strict=True)], 3)} "
              f"| {mean_spread([p / f for p, f in zip(perflab_cpu, floor_cpu, strict=True)], 3)} "
              f"| {mean_spread(under, 3)} | {floor_factor(group, 'sysbench')} |")
        level = statistics.mean(under)
        verdicts.append(f"{script} t={threads} floor {io}: floor/sysbench CPU {level:.3f}: the {TARGET_CPU_RATIO}x "
                        f"target is {'BELOW' if level > TARGET_CPU_RATIO else 'above'} this floor")
    return verdicts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=["postgres", "mariadb"], default="postgres")
    ap.add_argument("--tables", type=int, default=10)
    ap.add_argument("--table-size", type=int, default=100_000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--scripts", nargs="+", default=["point_select", "read_only", "read_write"])
    ap.add_argument("--load-pairs", type=int, default=1,
                    help="times to alternate sysbench prepare and perflab's loader (default 1)")
    ap.add_argument("--pin", nargs="+", default=["auto"], choices=["auto", "on", "off"],
                    help="perflab's pin parameter (driver threads on CPUs of their own); several: one perflab run "
                         "of each per pair, their order reversed every other pair, rows labelled SCRIPT/pin=VALUE")
    ap.add_argument("--perflab-threads", nargs="+", default=["default"], metavar="N",
                    help="perflab's driver threads: default (the workload's own choice) or a number; several: one "
                         "perflab run of each per pair, rows labelled SCRIPT/tN")
    ap.add_argument("--follow", nargs="+", default=["on"], choices=["on", "off"],
                    help="perflab's follow parameter (clients move to the driver thread on their server "
                         "process's CPU); both: one perflab run of each per pair, rows labelled SCRIPT/follow=VALUE")
    ap.add_argument("--floor", action="store_true",
                    help="also run driver_floor.rs's mysqlwire mode on epoll and io_uring in each pair "
                         "(--server mariadb)")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args()
    if args.floor and args.server != "mariadb":
        ap.error("--floor needs --server mariadb: driver_floor's pgwire mode runs pgbench's SELECT, "
                 "not sysbench's statements, so PostgreSQL has no floor here")
    for n in args.perflab_threads:
        if n != "default" and not (n.isdigit() and int(n) >= 1):
            ap.error(f"--perflab-threads {n}: allowed: default or a whole number of at least 1")
    if shutil.which("sysbench") is None:
        raise SystemExit("sysbench is not installed (apt-get install sysbench)")
    floor = driver_floor() if args.floor else None
    pts = tuple(args.perflab_threads)
    follows = tuple(dict.fromkeys(args.follow))  # each value once
    variants = [(pin, n, f) for pin in args.pin for n in pts for f in follows]  # perflab's runs per pair

    base = Path(tempfile.mkdtemp(prefix="perflab-oltp-bench-", dir="/tmp"))
    base.chmod(0o755)  # the server runs as `nobody` when we are root
    target: PostgresTarget | MariadbTarget
    if args.server == "mariadb":
        target = MariadbTarget(MariadbSettings.model_validate({
            "kind": "mariadb", "settings": {"max_connections": max(args.threads) + 20,
                                            "innodb_buffer_pool_size": "512M",
                                            "innodb_flush_log_at_trx_commit": 2},
        }), base / "target")
        durability = "innodb_flush_log_at_trx_commit=2"
    else:
        target = PostgresTarget(PostgresSettings.model_validate({
            "kind": "postgres", "settings": {"max_connections": max(args.threads) + 20, "shared_buffers": "256MB",
                                             "synchronous_commit": "off"},
        }), base / "target")
        durability = "synchronous_commit=off"
    rows: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    loads: dict[str, list[float]] = {}
    try:
        ep = target.provision()
        assert isinstance(ep, PostgresEndpoint | MysqlWireEndpoint)
        version = subprocess.run(["sysbench", "--version"], capture_output=True, text=True).stdout.strip()
        print(f"server: {target.describe().get('version', '?')}; {version}; {durability}; "
              f"{cores()} cores, load average {os.getloadavg()[0]:.1f} at start", flush=True)
        server_cpu: dict[str, list[float]] = {}
        client_cpu: dict[str, list[float]] = {}
        ratios: list[float] = []
        w = OltpWorkload(OltpSettings.model_validate({"kind": "oltp", "tables": args.tables,
                                                      "table_size": args.table_size, "load_jobs": 2}))
        workload_load = "perflab" + (", LOAD DATA LOCAL" if isinstance(ep, MysqlWireEndpoint) else ", binary COPY")
        for _ in range(args.load_pairs):
            sysbench_load_s = timed_load(target, ep, args, "sysbench prepare", loads, server_cpu, client_cpu, lambda: sysbench_prepare(
                ep, args.tables, args.table_size))
            if isinstance(ep, MysqlWireEndpoint):
                # the other way to send the rows, timed; the workload's own (LOAD DATA LOCAL) loads last
                timed_load(target, ep, args, "perflab, multi-row INSERT", loads, server_cpu, client_cpu, lambda: _engine.oltp_load(
                    ep.wire_conninfo(), tables=args.tables, table_size=args.table_size, rand_type="special",
                    workers=2, server="mysql", mysql_method="insert"))
            load_s = timed_load(target, ep, args, workload_load, loads, server_cpu, client_cpu, lambda: w.prepare(
                ep, RunContext(run_number=0, run_dir=base, t0_ns=time.monotonic_ns())))
            ratios.append(load_s / sysbench_load_s)
        load_ratio = statistics.mean(ratios)
        print(f"load {args.tables} x {args.table_size} rows, {args.load_pairs} alternating pair(s), mean "
              + ("(server CPU s) " if server_cpu else "")
              + "; ".join(f"{k} {statistics.mean(v):.2f} s"
                          + (f" ({statistics.mean(server_cpu[k]):.2f})" if k in server_cpu else "")
                          for k, v in loads.items())
              + f"; ratio {load_ratio:.3f} ({spread(ratios, 3)})", flush=True)
        if workload_load in server_cpu:
            # The CPU floor of perflab's load: its server's and its own CPU spread over every core
            # with nothing idle; no client reaches below it without the server doing less work.
            cpu_floor_s = (statistics.mean(server_cpu[workload_load])
                           + statistics.mean(client_cpu[workload_load])) / cores()
            print(f"load CPU floor: ({statistics.mean(server_cpu[workload_load]):.2f} s server + "
                  f"{statistics.mean(client_cpu[workload_load]):.2f} s perflab) / {cores()} cores = "
                  f"{cpu_floor_s:.2f} s, {cpu_floor_s / statistics.mean(loads['sysbench prepare']):.3f}x "
                  "sysbench prepare's mean", flush=True)
        for script in args.scripts:
            for threads in args.threads:
                for pair in range(args.pairs):
                    a = run_sysbench(ep, script, args.tables, args.table_size, threads, args.seconds)
                    for pin, n, follow in (variants if pair % 2 == 0 else variants[::-1]):
                        b = run_perflab(ep, script, args.tables, args.table_size, threads, args.seconds, base, pin, n,
                                        follow)
                        label = labelled(script, pin, args.pin, n, pts, follow, follows)
                        rows.append({"script": label, "threads": threads, "pair": pair + 1,
                                     "sysbench": a, "perflab": b, "load_average": os.getloadavg()[0]})
                        print(f"  {label:12s} t={threads:<3d} pair {pair + 1}: sysbench "
                              f"{a['tps']:8.1f} tps {a['cpu_per_tx_us']:7.1f} us/tx ({a['ignored_errors']} ignored "
                              f"errors) | perflab {b['tps']:8.1f} tps {b['cpu_per_tx_us']:7.1f} us/tx (engine "
                              f"{b['engine_cpu_per_tx_us']:.1f}; {b['retries']:.0f} retries, {b['failed']:.0f} "
                              f"failed; {b['driver_threads']} threads; {b['io']}{', pinned' if b['pinned'] else ''}"
                              f"{off_cpu(b)})",
                              flush=True)
                    if floor is not None:
                        # the floors stand beside the first variant's run of this pair, on its threads
                        b = next(r for r in rows[-len(variants):]
                                 if r["script"] == labelled(script, variants[0][0], args.pin, variants[0][1], pts,
                                                            variants[0][2], follows))["perflab"]
                        assert isinstance(ep, MysqlWireEndpoint)
                        for io in FLOORS:
                            f = run_floor([floor, "mysqlwire", *(["--uring"] if io == "uring" else []),
                                           ep.wire_conninfo(), str(args.seconds), str(threads),
                                           str(b["driver_threads"]), script, str(args.tables),
                                           str(args.table_size), "special"])
                            floors.append({"script": script, "threads": threads, "pair": pair + 1, "io": io,
                                           "sysbench": a, "perflab": b, "floor": f,
                                           "load_average": os.getloadavg()[0]})
                            print(f"  {'':12s} {'':5s} floor {io:5s}: {f['req_per_s']:8.1f} tps "
                                  f"{f['cpu_per_req_us']:7.1f} us/tx (user {f['user_per_req_us']:.1f}, system "
                                  f"{f['system_per_req_us']:.1f}; {f['cs_per_req']:.2f} cs/tx, "
                                  f"{f['round_trips'] / max(1.0, f['requests']):.1f} round trips/tx; errors "
                                  f"{f['errors']:.0f})", flush=True)
    finally:
        target.teardown()
        shutil.rmtree(base, ignore_errors=True)

    print()
    verdicts = [f"load: ratio {load_ratio:.3f} {'meets' if load_ratio <= TARGET_LOAD_RATIO else 'MISSES'} "
                f"<= {TARGET_LOAD_RATIO}"]
    for script, threads, tps, cpu in pair_table(rows, [labelled(s, p, args.pin, n, pts, f, follows)
                                                       for s in args.scripts for p, n, f in variants],
                                                "threads", args.threads,
                                                ("sysbench", "perflab"), ("perflab", "sysbench"),
                                                ("tps ratio", "cpu ratio")):
        verdicts.append(f"{script} t={threads}: tps ratio {statistics.mean(tps):.3f} "
                        f"{'meets' if statistics.mean(tps) >= TARGET_TPS_RATIO else 'MISSES'} >= {TARGET_TPS_RATIO}; "
                        f"cpu ratio {statistics.mean(cpu):.3f} "
                        f"{'meets' if statistics.mean(cpu) <= TARGET_CPU_RATIO else 'MISSES'} <= {TARGET_CPU_RATIO}")
    factor_table([(f"{label} | {t}", [r for r in rows if r["script"] == label and r["threads"] == t])
                  for label in [labelled(s, p, args.pin, n, pts, f, follows) for s in args.scripts
                                for p, n, f in variants]
                  for t in args.threads], "sysbench")
    if floors:
        verdicts += floor_table(floors, args.scripts, args.threads)
    print()
    print("\n".join(verdicts))
    print(f"load average at end {os.getloadavg()[0]:.1f} (other work on this machine moves every figure)")
    if args.json:
        args.json.write_text(json.dumps({"server": args.server, "load_s": loads, "runs": rows,
                                         **({"floors": floors} if floors else {})}, indent=1))
    return 0


if __name__ == "__main__":
    # Ctrl-C and SIGTERM run main's `finally`, which stops the server it started
    run_main(main)
