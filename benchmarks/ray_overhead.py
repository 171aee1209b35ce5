"""What the distributed driver costs on one machine: the local driver against
Ray with 1 and 2 workers (issue 16).

One managed PostgreSQL on TCP (127.0.0.1; always stopped), pgbench's data
loaded once, then select-only at --clients clients (prepared protocol,
synchronous_commit off) in --rounds rounds. Each round runs a block of
--runs runs of each driver, in an order that rotates from round to round
(local, ray-1, ray-2; then ray-1, ray-2, local; ...), so a machine that slows
down over the benchmark does not always hurt the same driver. Each Ray block
starts its own private cluster and stops it after. For each driver:

- TPS of every run (committed transactions over the measured window, as the
  workload reports it) and the ratio of its mean to the local driver's, per
  round and over all rounds;
- set-up: the private cluster's start plus its actors' (`driver.setup_s`),
  and the time to tear it down; and the CPU the cluster's own processes
  (head, raylet, agents, idle workers: not the actors) took during the block,
  in cores, which on this machine is taken from the server and the driver
  (those alive from the block's start to its end: a lower bound);
- the per-run fixed cost: a run's wall time minus its warm-up and measured
  window, i.e. connecting the clients, and for Ray the workers' calls, the
  barrier (`driver.barrier_s`: from starting the workers' runs to the common
  start instant) and shipping and merging the results (the first run's actor
  start is set-up, not counted here).

Target (issue 16): Ray with 1 worker within 5% of local TPS once running.

    .venv/bin/python benchmarks/ray_overhead.py [--scale 10] [--clients 32] [--seconds 10] [--warmup 2]
        [--rounds 3] [--runs 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import cores, processes_cpu_s, run_main, spread
from perflab import _engine
from perflab.context import RunContext
from perflab.drivers import LOCAL, EngineDriver
from perflab.targets.postgres import PostgresEndpoint, PostgresSettings, PostgresTarget
from perflab.workloads.tpcb import TpcbSettings, TpcbWorkload

TOLERANCE = 0.05  # the bound for Ray with 1 worker


def one_run(driver: EngineDriver, endpoint: PostgresEndpoint, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    settings = TpcbSettings.model_validate({
        "kind": "tpcb", "script": "select-only", "scale": args.scale, "clients": args.clients,
        "duration": args.seconds, "warmup": args.warmup, "protocol": "prepared", "vacuum": False, "seed": 1,
    })
    ctx = RunContext(run_number=1, run_dir=out, t0_ns=time.monotonic_ns(), driver=driver)
    started = time.monotonic()
    result = TpcbWorkload(settings).run(endpoint, ctx)
    wall = time.monotonic() - started
    m = {k: v.value for k, v in result.metrics.items()}
    figures = {k: v.value for k, v in driver.figures().metrics.items()}
    return {"tps": m["tps"], "wall_s": wall, "fixed_s": wall - args.warmup - m["measured_s"],
            "driver_cpu_share": m.get("driver_cpu_share"), "flags": [str(f) for f in result.flags],
            "setup_s": figures.get("driver.setup_s"), "barrier_s": figures.get("driver.barrier_s"),
            "worker_cpu_share": [v for k, v in sorted(figures.items()) if k.endswith(".driver_cpu_share")],
            "offset_uncertainty_ms": [v for k, v in sorted(figures.items())
                                      if k.endswith(".clock_offset_uncertainty_ms")]}


def block(name: str, driver: EngineDriver, endpoint: PostgresEndpoint, args: argparse.Namespace,
          out: Path, cluster_s: float = 0.0) -> list[dict[str, Any]]:
    runs = []
    for i in range(args.runs):
        r = one_run(driver, endpoint, args, out)
        if r["setup_s"]:  # the first run started the actors: set-up, not a per-run cost
            r["fixed_s"] -= r["setup_s"] - cluster_s
        r["driver"] = name
        runs.append(r)
        print(f"  {name} run {i + 1}: {r['tps']:.0f} tx/s, fixed {r['fixed_s']:.2f} s"
              + (f", barrier {r['barrier_s']:.2f} s" if r["barrier_s"] is not None else "")
              + (f", set-up {r['setup_s']:.2f} s" if r["setup_s"] else "")
              + (f" [{', '.join(r['flags'])}]" if r["flags"] else ""), flush=True)
    return runs


def ray_block(workers: int, endpoint: PostgresEndpoint, args: argparse.Namespace, out: Path,
              setup: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from perflab.drivers.ray import RayDriver, cluster_processes

    name = f"ray-{workers}"
    started = time.monotonic()
    driver = RayDriver("local", workers, lambda text: None)
    cluster_s = time.monotonic() - started
    assert driver.token is not None
    # The cluster's own processes (before any actor: head, raylet, agents,
    # idle workers): what they take from the machine while the runs go.
    background = cluster_processes(driver.token)
    cpu_from, wall_from = processes_cpu_s(background), time.monotonic()
    try:
        runs = block(name, driver, endpoint, args, out, cluster_s)
        cpu_to = processes_cpu_s(background)  # processes that ended meanwhile are left out (a lower bound)
        background_cpu = sum(cpu_to[p] - cpu_from[p] for p in cpu_to if p in cpu_from) / (
            time.monotonic() - wall_from)
    finally:
        started = time.monotonic()
        driver.close()
        teardown_s = time.monotonic() - started
    setup.append({"driver": name, "cluster_s": cluster_s, "setup_s": float(runs[0]["setup_s"] or 0.0),
                  "teardown_s": teardown_s, "background_cores": background_cpu})
    return runs



DRIVERS = ("local", "ray-1", "ray-2")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--report", type=Path, help="print the tables of an earlier run's --json, measure nothing")
    args = parser.parse_args()
    if args.report:
        saved = json.loads(args.report.read_text())
        report(saved["runs"], saved["setup"], argparse.Namespace(**(saved["args"] | {"json": None})))
        return 0

    work = Path(tempfile.mkdtemp(prefix="perflab-bench-ray-", dir="/tmp"))
    work.chmod(0o755)
    target = PostgresTarget(PostgresSettings.model_validate({
        "kind": "postgres", "listen": "tcp",
        "settings": {"max_connections": args.clients + 20, "synchronous_commit": "off", "shared_buffers": "256MB"},
    }), work / "target")
    results: list[dict[str, Any]] = []
    setup: list[dict[str, Any]] = []
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, PostgresEndpoint)
        print(f"loading scale {args.scale}; {cores()} cores; select-only, {args.clients} clients, "
              f"{args.seconds:g} s + {args.warmup:g} s warm-up, {args.rounds} rounds of {args.runs} runs "
              "per driver", flush=True)
        _engine.tpcb_load(endpoint.wire_conninfo("perflab-tpcb"), scale=args.scale)
        for round_ in range(args.rounds):
            order = DRIVERS[round_ % 3:] + DRIVERS[: round_ % 3]
            print(f"round {round_ + 1}: {', '.join(order)}", flush=True)
            for name in order:
                runs = (block(name, LOCAL, endpoint, args, work) if name == "local"
                        else ray_block(int(name[-1]), endpoint, args, work, setup))
                for r in runs:
                    r["round"] = round_
                results += runs
    finally:
        target.teardown()
        shutil.rmtree(work, ignore_errors=True)
    report(results, setup, args)
    return 0


def report(results: list[dict[str, Any]], setup: list[dict[str, Any]], args: argparse.Namespace) -> None:
    def mean_tps(name: str, round_: int | None = None, running: bool = False) -> float:
        """Mean TPS of a driver's runs (of one round; `running`: not the first
        run of a block, which shares the machine with a cluster still starting;
        nan when --runs 1 leaves no such run)."""
        tps = [r["tps"] for r in results if r["driver"] == name and (round_ is None or r["round"] == round_)
               and not (running and r["first"])]
        return statistics.mean(tps) if tps else float("nan")

    first = set()
    for r in results:
        key = (r["driver"], r["round"])
        r["first"] = key not in first
        first.add(key)
    base = mean_tps("local")
    print(f"\nselect-only, {args.clients} clients, scale {args.scale}, {args.seconds:g} s runs, {args.rounds} rounds")
    print("| driver | runs | tx/s mean (range) | / local | / local, once running | / local, per round | "
          "fixed cost per run, s | barrier, s | set-up, s | teardown, s | cluster's own CPU, cores |")
    print("| --- | ---: | --- | ---: | ---: | --- | --- | --- | --- | --- | --- |")
    for name in DRIVERS:
        rs = [r for r in results if r["driver"] == name]
        tps = [r["tps"] for r in rs]
        per_round = [mean_tps(name, k) / mean_tps("local", k) for k in range(args.rounds)]
        barrier = [r["barrier_s"] for r in rs if r["barrier_s"] is not None]
        s = [x for x in setup if x["driver"] == name]
        print(f"| {name} | {len(rs)} | {statistics.mean(tps):.0f} ({spread(tps, 0)}) | "
              f"{statistics.mean(tps) / base:.3f} | {mean_tps(name, running=True) / mean_tps('local', running=True):.3f} | "
              f"{', '.join(f'{x:.3f}' for x in per_round)} | "
              f"{spread([r['fixed_s'] for r in rs])} | {spread(barrier) if barrier else '-'} | "
              f"{spread([x['setup_s'] for x in s], 1) if s else '-'} | "
              f"{spread([x['teardown_s'] for x in s], 1) if s else '-'} | "
              f"{spread(bg, 3) if (bg := [x['background_cores'] for x in s if 'background_cores' in x]) else '-'} |")
    ratio = mean_tps("ray-1", running=True) / mean_tps("local", running=True)
    verdict = "within" if ratio >= 1 - TOLERANCE else "NOT within"
    print(f"\nRay with 1 worker, once running (runs after each block's first): {ratio:.3f} of local TPS: "
          f"{verdict} {TOLERANCE:.0%}")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "runs": results,
                                         "setup": setup}, indent=1))


if __name__ == "__main__":
    run_main(main)
