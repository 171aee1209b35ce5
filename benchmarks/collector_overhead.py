"""What telemetry costs: each collector's CPU per sample, and all default
collectors together at 1 s intervals as % of one core (the issue: < 0.5%).

Against a real managed PostgreSQL that this script starts (and always stops),
with --backends idle client connections so the process collector has a
server's worth of processes to read, and optionally --pgbench N clients of
pgbench driving it so the figures are those of a loaded run.

1. Per sample: each collector's `sample()` called --samples times in this
   thread, CPU time from time.thread_time() (user + system of this thread).
   pgstat's two kinds of tick are timed apart: a wait-event sample (10 a
   second by default: read the last answer, send the next query) and a
   statistics-views read (one per interval).
2. Together: the default collectors for a PostgreSQL target (vmstat,
   diskstats, process, pgstat with wait events at 10 Hz) on their own threads
   at 1 s for --seconds, while this thread sleeps. Cost = the growth of the
   whole process's CPU time (getrusage: every thread, wake-ups and GIL hand-
   offs included) over the wall time; the collectors' own per-thread sums are
   shown beside it. A collector that queries the server also costs the
   server: the CPU of the server backends that serve perflab's collectors
   (collectors.base.MONITOR_PIDS: pgstat's connection), read from
   /proc/PID/stat over the same window, is added, and the total is held to
   the limit: below 1% of a core with the defaults.

    .venv/bin/python benchmarks/collector_overhead.py [--seconds 60] [--samples 300] [--backends 16] [--pgbench 0]
        [--ab-pairs 0] [--ab-seconds 10]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import processes_cpu_s, run_main
from perflab.analysis.stats import ratio_interval
from perflab.collectors import COLLECTORS
from perflab.collectors.base import MONITOR_PIDS, CollectorContext, SamplingCollector
from perflab.collectors.pgstat import PgstatCollector
from perflab.context import RunContext, SeriesSink
from perflab.model import RunResult
from perflab.targets.postgres import PostgresSettings, PostgresTarget
from perflab.workloads.tpcb import TpcbSettings, TpcbWorkload

LIMIT_PCT_OF_ONE_CORE = 0.5  # perflab's own CPU
LIMIT_TOTAL_PCT_OF_ONE_CORE = 1.0  # perflab's and the server backends serving its collectors


class CountingSink(SeriesSink):
    def __init__(self) -> None:
        self.points = 0

    def add(self, source: str, name: str, t: float, value: float) -> None:
        self.points += 1


def process_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def per_sample_us(collector: SamplingCollector, samples: int, call: Any = None) -> float:
    call = call or collector.sample
    call()  # a first sample sets baselines
    start = time.thread_time()
    for _ in range(samples):
        call()
        time.sleep(0.01)  # as in use: a wake-up per sample, caches gone cold
    return (time.thread_time() - start) / samples * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the all-together window")
    parser.add_argument("--samples", type=int, default=300, help="samples per collector in part 1")
    parser.add_argument("--backends", type=int, default=16, help="idle client connections held open")
    parser.add_argument("--pgbench", type=int, default=0, help="pgbench clients driving the server (0: idle)")
    parser.add_argument("--ab-pairs", type=int, default=0,
                        help="part 3: select-only TPS with and without the default collectors, this many pairs")
    parser.add_argument("--ab-seconds", type=float, default=10.0, help="length of each part-3 run")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="perflab-collector-overhead-"))
    os.chmod(workdir, 0o755)  # the server may run as 'nobody'
    target = PostgresTarget(PostgresSettings(kind="postgres", settings={"max_connections": 100}), workdir / "pg")
    bench: subprocess.Popen[bytes] | None = None
    try:
        endpoint = target.provision()
        held = [endpoint.connect() for _ in range(args.backends)]
        if args.pgbench:
            bench = start_pgbench(target, endpoint, args.pgbench)
        sink = CountingSink()
        ctx = RunContext(run_number=1, run_dir=workdir, t0_ns=time.monotonic_ns(), series=sink)
        cctx = CollectorContext(run=ctx, endpoint=endpoint, target=target)
        defaults = [n for n in COLLECTORS.names()
                    if COLLECTORS.get(n).default_on and COLLECTORS.get(n).needs <= endpoint.capabilities]

        print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, "
              f"{len(target.processes())} server processes, pgbench clients {args.pgbench}")
        print(f"\n## 1. CPU per sample ({args.samples} samples each, this thread)")
        print(f"{'collector':<28} {'us/sample':>10} {'% core at 1 s':>14}")
        per_second_us: dict[str, float] = {}
        for name in sorted(set(defaults) | {"energy"}):
            cls = COLLECTORS.get(name)
            collector = cls(name, cls.Settings())
            collector.open(cctx)
            try:
                if isinstance(collector, PgstatCollector):
                    def wait_tick(c: PgstatCollector = collector) -> None:  # as sample() does it
                        c._finish_waits(block=False)
                        if not c._wait_pending:
                            c._send_waits()

                    wait_us = per_sample_us(collector, args.samples, wait_tick)
                    collector._finish_waits(block=True)
                    stats_us = per_sample_us(collector, max(50, args.samples // 3), collector._read_counters)
                    hz = collector.settings.wait_event_hz
                    per_second_us[name] = hz * wait_us + stats_us
                    print(f"{'pgstat wait-event sample':<28} {wait_us:>10.0f} {hz * wait_us / 1e4:>14.3f}  (x{hz:g}/s)")
                    print(f"{'pgstat statistics read':<28} {stats_us:>10.0f} {stats_us / 1e4:>14.3f}")
                else:
                    us = per_sample_us(collector, args.samples)
                    per_second_us[name] = us
                    print(f"{name:<28} {us:>10.0f} {us / 1e4:>14.3f}")
            finally:
                collector.close()
        summed = sum(per_second_us[n] for n in defaults)
        print(f"{'defaults, summed':<28} {'':>10} {summed / 1e4:>14.3f}")

        print(f"\n## 2. Default collectors together on their threads at 1 s, {args.seconds:g} s")
        collectors = [COLLECTORS.get(n)(n, COLLECTORS.get(n).Settings()) for n in defaults]
        wall0, cpu0 = time.monotonic(), process_cpu_s()
        for c in collectors:
            c.start(cctx)
        # The backends serving the collectors exist once they started; their
        # connection set-up is the one part of their CPU left out.
        monitors = set(MONITOR_PIDS)
        server0 = processes_cpu_s(monitors)
        time.sleep(args.seconds)
        server1 = processes_cpu_s(monitors)
        results = RunResult()
        for c in collectors:
            results.merge(c.stop())
        wall_s, cpu_s = time.monotonic() - wall0, process_cpu_s() - cpu0
        for c in collectors:
            thread_s = results.metrics[f"{c.name}.sampling_cpu_s"].value
            print(f"{c.name:<28} thread CPU {thread_s * 1e3:8.1f} ms = {100 * thread_s / wall_s:.3f}% of a core "
                  f"({c.samples} ticks)")
        pct = 100 * cpu_s / wall_s
        print(f"{'whole process':<28} CPU {cpu_s * 1e3:8.1f} ms over {wall_s:.1f} s = {pct:.3f}% of one core "
              f"({sink.points} series points); limit {LIMIT_PCT_OF_ONE_CORE}%")
        server_s = sum(server1.get(pid, cpu) - cpu for pid, cpu in server0.items())
        server_pct = 100 * server_s / wall_s
        print(f"{'server backends serving it':<28} CPU {server_s * 1e3:8.1f} ms = {server_pct:.3f}% of one core "
              f"(pids {', '.join(map(str, sorted(monitors))) or 'none'}; /proc/PID/stat at {os.sysconf('SC_CLK_TCK')} Hz)")
        total = pct + server_pct
        print(f"{'total cost of telemetry':<28} {total:.3f}% of one core; limit {LIMIT_TOTAL_PCT_OF_ONE_CORE}%")
        for c in held:
            c.close()
        if args.ab_pairs:
            tps_ab(target, endpoint, defaults, workdir, args.ab_pairs, args.ab_seconds)
        return 0 if pct < LIMIT_PCT_OF_ONE_CORE and total < LIMIT_TOTAL_PCT_OF_ONE_CORE else 1
    finally:
        if bench is not None:
            bench.terminate()
            bench.wait()
        target.teardown()
        shutil.rmtree(workdir, ignore_errors=True)


def tps_ab(target: PostgresTarget, endpoint: Any, defaults: list[str], workdir: Path, pairs: int,
           seconds: float) -> None:
    """Part 3: the effect on the workload itself, not a target (this machine's
    noise may hide it): select-only at 8 clients, scale 10, with the default
    collectors and without, alternating (the order swapped every pair); the
    ratio with / without and its 95% bootstrap interval."""
    settings = TpcbSettings.model_validate({"kind": "tpcb", "script": "select-only", "scale": 10, "clients": 8,
                                            "duration": seconds, "warmup": 1.0})
    workload = TpcbWorkload(settings)
    workload.prepare(endpoint, RunContext(run_number=0, run_dir=workdir, t0_ns=time.monotonic_ns()))
    tps: dict[str, list[float]] = {"with": [], "without": []}
    for pair in range(pairs):
        for side in (("without", "with") if pair % 2 == 0 else ("with", "without")):
            ctx = RunContext(run_number=pair, run_dir=workdir, t0_ns=time.monotonic_ns(), series=CountingSink())
            running = [COLLECTORS.get(n)(n, COLLECTORS.get(n).Settings()) for n in defaults] if side == "with" else []
            for c in running:
                c.start(CollectorContext(run=ctx, endpoint=endpoint, target=target))
            try:
                tps[side].append(workload.run(endpoint, ctx).metrics["tps"].value)
            finally:
                for c in running:
                    c.stop()
    ratios = [w / wo for w, wo in zip(tps["with"], tps["without"], strict=True)]
    ci = ratio_interval(tps["without"], tps["with"])
    print(f"\n## 3. select-only TPS, 8 clients, with / without the default collectors, {pairs} pairs of {seconds:g} s")
    print(f"mean TPS without {sum(tps['without']) / pairs:,.0f}, with {sum(tps['with']) / pairs:,.0f}; "
          f"ratio {ci.estimate:.3f}, 95% CI {ci.low:.3f}-{ci.high:.3f} ({ci.method}); "
          f"pair ratios {min(ratios):.3f}-{max(ratios):.3f}")


def start_pgbench(target: PostgresTarget, endpoint: Any, clients: int) -> subprocess.Popen[bytes]:
    pgbench = shutil.which("pgbench") or (str(target.bin_dir / "pgbench") if target.bin_dir else None)
    if pgbench is None or not Path(pgbench).exists():
        sys.exit("pgbench not found: install postgresql-client or run without --pgbench")
    conn = ["-h", endpoint.host, "-p", str(endpoint.port), "-U", endpoint.user, endpoint.dbname]
    subprocess.run([pgbench, "-i", "-q", "-s", "2", *conn], check=True, capture_output=True)
    return subprocess.Popen([pgbench, "-c", str(clients), "-T", "100000", *conn],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    # Ctrl-C and SIGTERM run main's `finally`, which stops the server it started
    run_main(main)
