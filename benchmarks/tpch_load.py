"""TPC-H load test at SF 1: perflab against the classic pipeline, on the same
managed PostgreSQL, plus DuckDB's load and the power test on both engines.

    .venv/bin/python benchmarks/tpch_load.py [--sf 1] [--skip-power] [--repeat 3] [--warmup 1]

Classic pipeline, the fair one (issue 17): tpchgen-cli (PyPI, the same
generator) writes CSV files directly (`tpchgen-cli csv --delimiter '|'`, so
no sed pass over .tbl files is needed), `psql \\copy ... (format csv)` loads
table by table, then the same keys, indexes, ANALYZE and foreign keys as
perflab's load test, one statement at a time. perflab: generation streamed
into parallel COPY, keys, indexes and ANALYZE in parallel sessions. Both into
fresh databases of one server with the same settings. Target: perflab <= 0.6x
the classic total.

Every step also has its CPU seconds: this process and its children
(getrusage: perflab's generator threads, or tpchgen-cli and psql) plus the
server's whole process tree (the postmaster's own and reaped children's
utime+stime from /proc, and its live children's). CPU / (wall x CPUs) says
how close a step gets to the machine's limit. With --repeat, the sides take
turns going first, and each starts after a CHECKPOINT, so neither inherits
the other's dirty buffers. The --warmup rounds before them are printed but
not counted: on a new server the first load also creates the WAL segment
files that later loads recycle (measured: the first round's perflab load
took 13.2 s, the later ones' 6.9-7.3 s).

Then, on PostgreSQL and DuckDB: the 22 queries with the spec's validation
parameters, checked against the TPC's SF 1 answers (at SF 1 only), and a
power test (RF1, stream 0, RF2) with its Power@Size.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import run_main
from perflab.collectors.process import children_of, read_proc
from perflab.context import RunContext
from perflab.targets.duckdb import DuckDbSettings, DuckDbTarget
from perflab.targets.postgres import PostgresSettings, PostgresTarget
from perflab.targets.postgres.postmaster import postmaster_pid
from perflab.workloads.tpch import TpchSettings, TpchWorkload, schema

SERVER_SETTINGS = {"shared_buffers": "1GB", "maintenance_work_mem": "512MB", "max_wal_size": "8GB",
                   "checkpoint_timeout": "30min", "work_mem": "64MB"}


def psql(bin_dir: Path, conninfo: str, *args: str) -> None:
    subprocess.run([str(bin_dir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", conninfo, *args],
                   check=True, capture_output=True, text=True)


class CpuClock:
    """Wall and CPU seconds at each mark: this process with its children,
    and the server's process tree (see the module's docstring)."""

    def __init__(self, data_dir: Path) -> None:
        pid = postmaster_pid(data_dir)
        assert pid is not None, f"no postmaster.pid in {data_dir}"
        self.postmaster = pid
        self.marks: list[tuple[str, float, float]] = [("start", time.perf_counter(), self.cpu_s())]

    def cpu_s(self) -> float:
        own = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                  for f in ("ru_utime", "ru_stime"))
        ticks = 0
        for pid in [self.postmaster, *children_of(self.postmaster)]:
            sample = read_proc(pid, with_io=False)
            if sample is not None:
                ticks += sample.user_ticks + sample.system_ticks
                ticks += sample.children_user_ticks + sample.children_system_ticks
        return own + ticks / os.sysconf("SC_CLK_TCK")

    def done(self, step: str) -> None:
        """`step` ended now (it began when the one before it ended)."""
        self.marks.append((step, time.perf_counter(), self.cpu_s()))

    def steps(self) -> dict[str, tuple[float, float]]:
        """Each step: (wall s, CPU s) from the end of the one before."""
        return {b[0]: (b[1] - a[1], b[2] - a[2]) for a, b in zip(self.marks, self.marks[1:], strict=False)}


def classic_load(bin_dir: Path, conninfo: str, sf: float, scratch: Path, clock: CpuClock) -> None:
    csv = scratch / "csv"
    csv.mkdir()
    subprocess.run([str(Path(sys.executable).parent / "tpchgen-cli"), "csv", "--delimiter", "|", "-s", f"{sf:g}",
                    "--output-dir", str(csv)], check=True, capture_output=True)
    clock.done("generate CSV (tpchgen-cli)")
    for sql in schema.drop_tables():
        psql(bin_dir, conninfo, "-c", sql)
    for table in schema.TABLES:
        psql(bin_dir, conninfo, "-c", schema.create_table(table))
    clock.done("create tables")
    for table in schema.TABLES:
        psql(bin_dir, conninfo, "-c",
             f"\\copy {table} from '{csv / (table + '.csv')}' with (format csv, delimiter '|', header true)")
    clock.done("load")
    for step in schema.load_steps("postgres"):
        for sql in step.statements:
            psql(bin_dir, conninfo, "-c", sql)
        clock.done(step.name)
    shutil.rmtree(csv)


def queries_and_power(endpoint, sf: float, run_dir: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    ctx = RunContext(run_number=1, run_dir=run_dir, t0_ns=time.monotonic_ns())
    if sf == 1:
        v = TpchWorkload(TpchSettings(kind="tpch", scale_factor=sf, seed=1, tests=["power"], validation=True))
        r = v.run(endpoint, ctx)
        out["validation queries s"] = sum(q.seconds or 0 for q in r.queries)
        failed = [k for k, (ok, _) in v.check(endpoint, ctx).checks.items() if not ok]
        out["answers vs TPC SF1"] = f"{int(r.metrics['answers.matched'].value)}/22" + (f" failed {failed}" if failed else "")
    p = TpchWorkload(TpchSettings(kind="tpch", scale_factor=sf, seed=20260101, tests=["power"]))
    r = p.run(endpoint, ctx)
    out["power test s"] = r.metrics["power_test_s"].value
    out["Power@Size"] = r.metrics.get("power_at_size").value if "power_at_size" in r.metrics else "invalid"
    slow = sorted((q for q in r.queries if q.query.startswith("Q")), key=lambda q: -(q.seconds or 0))[:3]
    out["slowest queries"] = ", ".join(f"{q.query} {q.seconds:.1f}s" for q in slow)
    return out


def load_table(perflab: dict[str, tuple[float, float]], classic: dict[str, tuple[float, float]]) -> float:
    """Both load tests side by side: wall and CPU seconds per step, then
    totals; returns perflab / classic (wall)."""
    cpus = os.cpu_count() or 1
    print("\n| step | perflab s | perflab CPU s | classic s | classic CPU s |\n|---|---:|---:|---:|---:|")
    for step in dict.fromkeys([*classic, *perflab]):
        cells = [f"{perflab[step][0]:.1f} | {perflab[step][1]:.1f}" if step in perflab else "- | -",
                 f"{classic[step][0]:.1f} | {classic[step][1]:.1f}" if step in classic else "- | -"]
        print(f"| {step} | {cells[0]} | {cells[1]} |")
    tp = [sum(v[i] for v in perflab.values()) for i in (0, 1)]
    tc = [sum(v[i] for v in classic.values()) for i in (0, 1)]
    print(f"| **total** | **{tp[0]:.1f}** | **{tp[1]:.1f}** | **{tc[0]:.1f}** | **{tc[1]:.1f}** |")
    print(f"\nperflab / classic = {tp[0] / tc[0]:.2f}x wall (target <= 0.60x), {tp[1] / tc[1]:.2f}x CPU; "
          f"CPU / (wall x {cpus} CPUs): perflab {tp[1] / tp[0] / cpus:.0%}, classic {tc[1] / tc[0] / cpus:.0%}")
    return tp[0] / tc[0]


def add_steps(rows: list[tuple[str, str, str]], what: str, steps: dict[str, float], digits: int = 1) -> float:
    """One table row per timed step, then the total; returns the total."""
    for step, seconds in steps.items():
        rows.append((what, step, f"{seconds:.{digits}f}"))
    total = sum(steps.values())
    rows.append((what, "TOTAL", f"{total:.1f}"))
    return total


def add_figures(rows: list[tuple[str, str, str]], what: str, figures: dict[str, object]) -> None:
    for name, value in figures.items():
        rows.append((what, name, f"{value:.1f}" if isinstance(value, float) else str(value)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--skip-power", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="load-test rounds (perflab, then classic, each round)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed rounds first: a fresh server's first load also creates its WAL segment files")
    args = ap.parse_args()
    sf = args.sf
    scratch = Path(tempfile.mkdtemp(prefix="perflab-bench-tpch-", dir="/tmp"))
    scratch.chmod(0o755)
    rows: list[tuple[str, str, str]] = []
    target = PostgresTarget(PostgresSettings.model_validate(
        {"kind": "postgres", "settings": SERVER_SETTINGS}), scratch / "pg")
    try:
        endpoint = target.provision()
        from psycopg.conninfo import make_conninfo

        with endpoint.connect() as conn:
            conn.execute("create database classic")
        classic_conninfo = make_conninfo(endpoint.conninfo, dbname="classic")
        assert target.data_dir is not None
        data_dir = target.data_dir
        ratios = []

        def checkpoint() -> None:
            # Each side starts with no dirty buffers of the other's (or its
            # own earlier) load to write out.
            with endpoint.connect() as conn:
                conn.execute("checkpoint")

        for i in range(-args.warmup, args.repeat):
            classic = CpuClock(data_dir)
            if i % 2 == 1:  # every other round the classic side goes first
                checkpoint()
                classic = CpuClock(data_dir)
                classic_load(target.bin_dir, classic_conninfo, sf, scratch, classic)
            checkpoint()
            mine = CpuClock(data_dir)

            def status(text: str, mine: CpuClock = mine) -> None:
                # perflab's load says when each step ends ("tpch: primary keys
                # done"); the tables are created when the load starts.
                if text.startswith("tpch: loading"):
                    mine.done("create tables")
                elif text.startswith("tpch: ") and text.endswith(" done"):
                    mine.done(text.removeprefix("tpch: ").removesuffix(" done"))

            ctx = RunContext(run_number=1, run_dir=scratch, t0_ns=time.monotonic_ns(), status=status)
            load = TpchWorkload(TpchSettings(kind="tpch", scale_factor=sf, tests=["power"])).prepare(endpoint, ctx)
            assert list(mine.steps()) == list(load.steps), (list(mine.steps()), list(load.steps))
            if i % 2 == 0:
                checkpoint()
                classic = CpuClock(data_dir)
                classic_load(target.bin_dir, classic_conninfo, sf, scratch, classic)
            if i < 0:
                print(f"\nwarm-up round {i + args.warmup + 1} of {args.warmup}, not counted", end="")
                load_table(mine.steps(), classic.steps())
                continue
            print(f"\nround {i + 1} of {args.repeat} ({'perflab' if i % 2 == 0 else 'classic'} first)", end="")
            ratios.append(load_table(mine.steps(), classic.steps()))
        if args.repeat > 1:
            print(f"\nperflab / classic over {args.repeat} rounds: median {statistics.median(ratios):.2f}x, "
                  f"range {min(ratios):.2f}-{max(ratios):.2f}x (target <= 0.60x)")
        if not args.skip_power:
            add_figures(rows, "PostgreSQL", queries_and_power(endpoint, sf, scratch))
    finally:
        target.teardown()

    duck = DuckDbTarget(DuckDbSettings(kind="duckdb"), scratch / "duckdb")
    try:
        dep = duck.provision()
        ctx = RunContext(run_number=1, run_dir=scratch, t0_ns=time.monotonic_ns())
        dload = TpchWorkload(TpchSettings(kind="tpch", scale_factor=sf, tests=["power"])).prepare(dep, ctx)
        add_steps(rows, "perflab -> DuckDB", dload.steps, digits=2)
        if not args.skip_power:
            add_figures(rows, "DuckDB", queries_and_power(dep, sf, scratch))
    finally:
        duck.teardown()
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"TPC-H SF {sf:g} on {os.cpu_count()} CPUs")
    print(f"| {'what':22} | {'step':28} | {'seconds / value':40} |")
    print(f"|{'-' * 24}|{'-' * 30}|{'-' * 42}|")
    for what, step, value in rows:
        print(f"| {what:22} | {step:28} | {value:40} |")
    return 0


if __name__ == "__main__":
    # Ctrl-C and SIGTERM run main's `finally`, which stops the server it started
    run_main(main)
