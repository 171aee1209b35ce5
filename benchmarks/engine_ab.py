"""One TPC-B engine against another, pair by pair, on one server.

For a change to the engine that must not cost speed (the load harness of
issue 9: "TPS and CPU per transaction within 3% of the old engine, pair by
pair"). `--a` and `--b` are two perflab checkouts whose engines are built
(python/perflab/_engine*.so present); for example the commit before the change
in a `git worktree` and this one. One managed PostgreSQL is started (and
always stopped), perflab's data is loaded once, then for each script, client
count and io method, --pairs pairs run back to back: A then B in odd pairs,
B then A in even ones, so a machine that slows down during a pair does not
always hurt the same side.

Each run is a child process `python -c` with its checkout first on
PYTHONPATH, running that checkout's TpcbWorkload; it reports the TPS and its
own CPU time (getrusage around the run, so interpreter start-up is not
counted) per committed transaction. Ratios are B / A per pair; the table
gives their mean and range. Last, the pooled ratio over all pairs of each io
method and overall: the geometric mean with a 95% Student t interval of the
log ratios, which is what can tell a 3% change from this machine's pair-to-pair
noise (one pair's ratio moved by +-15% here). io_uring runs also give their
enters per transaction, and each side's runs per mode (issue 33's slow mode:
a run above 1.3x the group's lowest, A's and B's runs together).

With --tpch-sf SF, the engines' TPC-H COPY (`_engine.tpch_load_postgres`:
generation streamed into parallel COPY, no keys) is timed the same way, pair
by pair, into freshly created empty tables, `--tpch-jobs` connections.

    .venv/bin/python benchmarks/engine_ab.py --a /work/wt-old --b . [--scale 10] [--seconds 10]
        [--pairs 3] [--clients 1 8 32] [--scripts select-only tpcb-like] [--io epoll uring]
        [--tpch-sf 0.5] [--tpch-jobs 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import SLOW_MODE_RATIO, cores, modes, run_main, spread
from perflab.analysis.stats import t_interval
from perflab.context import RunContext
from perflab.targets.postgres import PostgresEndpoint, PostgresSettings, PostgresTarget
from perflab.workloads.tpcb import TpcbSettings, TpcbWorkload
from perflab.workloads.tpch import schema as tpch_schema

# The bound: B within 3% of A.
TOLERANCE = 0.03

CHILD = r"""
import dataclasses, json, resource, sys, time
from pathlib import Path
import perflab
from perflab.targets.postgres import PostgresEndpoint
try:
    from perflab.context import RunContext
except ImportError:  # a checkout from before perflab.context
    from perflab.workloads.base import RunContext
from perflab.workloads.tpcb import TpcbSettings, TpcbWorkload
# The checkouts' endpoints differ (an older one has a `dialect` field): give each what it takes.
fields = {f.name for f in dataclasses.fields(PostgresEndpoint)}
ep = PostgresEndpoint(**{k: v for k, v in json.loads(sys.argv[1]).items() if k in fields})
# An older checkout's settings may lack a newer one's keys (window: its
# figures are over the whole measured window anyway): give each what it takes.
settings = json.loads(sys.argv[2])
w = TpcbWorkload(TpcbSettings.model_validate({k: v for k, v in settings.items() if k in TpcbSettings.model_fields}))
ctx = RunContext(run_number=0, run_dir=Path(sys.argv[3]), t0_ns=time.monotonic_ns())
before = resource.getrusage(resource.RUSAGE_SELF)
result = w.run(ep, ctx)
after = resource.getrusage(resource.RUSAGE_SELF)
m = result.metrics
done = m["transactions"].value
cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
io = next((e.message for e in result.events if e.kind == "io"), "io: ?")
print(json.dumps({"tps": m["tps"].value, "transactions": done, "cpu_per_tx_us": cpu_s / done * 1e6,
                  "engine_cpu_per_tx_us": m["driver_cpu_per_tx_us"].value, "io": io,
                  "enters_per_tx": m["io_enters_per_tx"].value if "io_enters_per_tx" in m else None,
                  "package": perflab.__file__}))
"""


COPY_CHILD = r"""
import json, sys, time
from perflab import _engine
started = time.perf_counter()
_engine.tpch_load_postgres(sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]))
print(json.dumps({"seconds": time.perf_counter() - started, "package": _engine.__file__}))
"""


def enters_note(figures: dict[str, Any]) -> str:
    """A run's io_uring enters per transaction (what tells the slow mode from the fast, issue 33)."""
    enters = figures.get("enters_per_tx")
    return f" {enters:.3f} enters/tx" if enters is not None else ""


def print_modes(rows: list[dict[str, Any]], scripts: list[str], clients_list: list[int]) -> None:
    """Each side's io_uring runs per mode: a run above SLOW_MODE_RATIO x the lowest
    enters per transaction of either side in its group counts as slow."""
    print(f"\nio_uring runs fast, slow (a run above {SLOW_MODE_RATIO}x its group's lowest enters/tx, "
          "A's and B's together, is slow)")
    for script, clients in ((s, c) for s in scripts for c in clients_list):
        group = [r for r in rows if (r["script"], r["clients"]) == (script, clients) and r["io"] != "epoll"]
        enters = {side: [r[side]["enters_per_tx"] for r in group if r[side].get("enters_per_tx")]
                  for side in ("A", "B")}
        if not enters["A"] or not enters["B"]:
            continue
        level = min(enters["A"] + enters["B"])
        cells = []
        for side in ("A", "B"):
            fast, slow = modes(enters[side], level)
            cells.append(f"{side} {fast}, {slow} ({spread(enters[side], 3)})")
        print(f"{script:12s} {clients:7d} | " + " | ".join(cells))


def run_child(tree: Path, ep: PostgresEndpoint, settings: dict[str, Any], workdir: Path) -> dict[str, Any]:
    endpoint = {"dialect": "postgres", "conninfo": ep.conninfo, "host": ep.host, "port": ep.port,
                "user": ep.user, "dbname": ep.dbname}
    env = {**os.environ, "PYTHONPATH": str(tree / "python")}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(endpoint), json.dumps(settings), str(workdir)],
                         capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"the run with {tree} failed: {out.stderr.strip()[-2000:]}")
    figures: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if not figures["package"].startswith(str(tree.resolve())):
        raise RuntimeError(f"the child imported {figures['package']}, not the checkout {tree}")
    return figures


def copy_child(tree: Path, ep: PostgresEndpoint, sf: float, jobs: int) -> float:
    with ep.connect() as conn:
        for sql in tpch_schema.drop_tables():
            conn.execute(sql)
        for table in tpch_schema.TABLES:
            conn.execute(tpch_schema.create_table(table))
    env = {**os.environ, "PYTHONPATH": str(tree / "python")}
    args = [ep.wire_conninfo("perflab-ab"), str(sf),
            json.dumps(list(tpch_schema.TABLES)), str(jobs)]
    out = subprocess.run([sys.executable, "-c", COPY_CHILD, *args], capture_output=True, text=True, env=env,
                         timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"the TPC-H COPY with {tree} failed: {out.stderr.strip()[-2000:]}")
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    if not figures["package"].startswith(str(tree.resolve())):
        raise RuntimeError(f"the child imported {figures['package']}, not the checkout {tree}")
    return float(figures["seconds"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", type=Path, required=True, help="checkout A (the baseline)")
    ap.add_argument("--b", type=Path, required=True, help="checkout B (the change)")
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--scripts", nargs="+", default=["select-only", "tpcb-like"])
    ap.add_argument("--io", nargs="+", default=["epoll", "uring"], choices=["auto", "uring", "epoll"])
    ap.add_argument("--tpch-sf", type=float, default=0.0, help="also time the TPC-H COPY at this SF (0: skip)")
    ap.add_argument("--tpch-jobs", type=int, default=cores())
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args()
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    for name, tree in trees.items():
        if not list((tree / "python" / "perflab").glob("_engine*.so")):
            print(f"engine_ab: checkout {name} ({tree}) has no built engine; build it first", file=sys.stderr)
            return 2

    base = Path(tempfile.mkdtemp(prefix="perflab-engine-ab-", dir="/tmp"))
    base.chmod(0o755)  # the server runs as `nobody` when we are root
    target = PostgresTarget(PostgresSettings.model_validate({
        "kind": "postgres", "settings": {"max_connections": max(args.clients) + 20, "shared_buffers": "256MB",
                                         "synchronous_commit": "off"},
    }), base / "target")
    rows: list[dict[str, Any]] = []
    copies: list[dict[str, float]] = []
    try:
        ep = target.provision()
        assert isinstance(ep, PostgresEndpoint)
        print(f"server: {target.describe().get('version', '?')}, {cores()} cores, "
              f"load average {os.getloadavg()[0]:.1f} at start; A = {trees['A']}, B = {trees['B']}", flush=True)
        TpcbWorkload(TpcbSettings.model_validate({"kind": "tpcb", "scale": args.scale})).prepare(
            ep, RunContext(run_number=0, run_dir=base, t0_ns=time.monotonic_ns()))
        for script in args.scripts:
            for clients in args.clients:
                threads = min(clients, cores())
                for io in args.io:
                    settings = {"kind": "tpcb", "window": "measured", "script": script, "clients": clients, "threads": threads,
                                "duration": float(args.seconds), "protocol": "prepared", "vacuum": False,
                                "io": io, "seed": 1}
                    for pair in range(args.pairs):
                        order = ("A", "B") if pair % 2 == 0 else ("B", "A")
                        got = {side: run_child(trees[side], ep, settings, base) for side in order}
                        rows.append({"script": script, "clients": clients, "io": io, "pair": pair + 1,
                                     "order": "".join(order), **got, "load_average": os.getloadavg()[0]})
                        a, b = got["A"], got["B"]
                        print(f"  {script:12s} c={clients:<3d} {io:5s} pair {pair + 1} ({''.join(order)}): "
                              f"A {a['tps']:9.1f} tps {a['cpu_per_tx_us']:7.2f} us/tx{enters_note(a)} | "
                              f"B {b['tps']:9.1f} tps {b['cpu_per_tx_us']:7.2f} us/tx{enters_note(b)} | "
                              f"B/A tps {b['tps'] / a['tps']:.3f} cpu {b['cpu_per_tx_us'] / a['cpu_per_tx_us']:.3f}",
                              flush=True)
        for pair in range(args.pairs if args.tpch_sf > 0 else 0):
            order = ("A", "B") if pair % 2 == 0 else ("B", "A")
            got = {side: copy_child(trees[side], ep, args.tpch_sf, args.tpch_jobs) for side in order}
            copies.append(got)
            print(f"  tpch COPY SF {args.tpch_sf:g} pair {pair + 1} ({''.join(order)}): A {got['A']:.2f} s | "
                  f"B {got['B']:.2f} s | B/A {got['B'] / got['A']:.3f}", flush=True)
    finally:
        target.teardown()
        shutil.rmtree(base, ignore_errors=True)

    print()
    print(f"{'script':12s} {'clients':>7s} {'io':>5s} | {'A tps':>9s} {'B tps':>9s} {'B/A tps':>7s} {'(pairs)':>11s} | "
          f"{'A us/tx':>7s} {'B us/tx':>7s} {'B/A cpu':>7s} {'(pairs)':>11s}")
    verdicts = []
    for script, clients, io in ((s, c, i) for s in args.scripts for c in args.clients for i in args.io):
        group = [r for r in rows if (r["script"], r["clients"], r["io"]) == (script, clients, io)]
        if not group:
            continue
        tps = [r["B"]["tps"] / r["A"]["tps"] for r in group]
        cpu = [r["B"]["cpu_per_tx_us"] / r["A"]["cpu_per_tx_us"] for r in group]
        print(f"{script:12s} {clients:7d} {io:>5s} | {statistics.mean(r['A']['tps'] for r in group):9.1f} "
              f"{statistics.mean(r['B']['tps'] for r in group):9.1f} {statistics.mean(tps):7.3f} {spread(tps, 3):>11s} | "
              f"{statistics.mean(r['A']['cpu_per_tx_us'] for r in group):7.2f} "
              f"{statistics.mean(r['B']['cpu_per_tx_us'] for r in group):7.2f} {statistics.mean(cpu):7.3f} "
              f"{spread(cpu, 3):>11s}")
        ok = statistics.mean(tps) >= 1 - TOLERANCE and statistics.mean(cpu) <= 1 + TOLERANCE
        verdicts.append(f"{script} c={clients} io={io}: B/A tps {statistics.mean(tps):.3f}, "
                        f"cpu {statistics.mean(cpu):.3f}: {'within' if ok else 'OUTSIDE'} {TOLERANCE:.0%}")
    print()
    for io in [*args.io, "all"]:
        group = [r for r in rows if io == "all" or r["io"] == io]
        if len(group) < 2:
            continue
        parts = []
        for what in ("tps", "cpu_per_tx_us"):
            ci = t_interval([math.log(r["B"][what] / r["A"][what]) for r in group])
            parts.append(f"{what} {math.exp(ci.estimate):.3f} [{math.exp(ci.low):.3f}, {math.exp(ci.high):.3f}]")
        print(f"pooled B/A, io={io}, {len(group)} pairs (geometric mean, 95% CI): " + "; ".join(parts))
    print_modes(rows, args.scripts, args.clients)
    if copies:
        ratios = [c["B"] / c["A"] for c in copies]
        print(f"tpch COPY SF {args.tpch_sf:g}, {args.tpch_jobs} jobs | A {statistics.mean(c['A'] for c in copies):.2f} s "
              f"B {statistics.mean(c['B'] for c in copies):.2f} s | B/A time {statistics.mean(ratios):.3f} "
              f"({spread(ratios, 3)})")
        verdicts.append(f"tpch COPY: B/A time {statistics.mean(ratios):.3f}: "
                        f"{'within' if statistics.mean(ratios) <= 1 + TOLERANCE else 'OUTSIDE'} {TOLERANCE:.0%}")
    print()
    print("\n".join(verdicts))
    print(f"load average at end {os.getloadavg()[0]:.1f} (other work on this machine moves every figure)")
    if args.json:
        args.json.write_text(json.dumps({"tpcb": rows, "tpch_copy": copies}, indent=1))
    return 0


if __name__ == "__main__":
    # Ctrl-C and SIGTERM run main's `finally`, which stops the server it started
    run_main(main)
