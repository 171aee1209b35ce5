"""`perflab report` on a store shaped like OSDL's 14-day durability study
(issue 48, item 3: under 60 s and under 2 GB).

The store: one set-up run 5 times back to back (tests/synthetic_store.py
writes the plan, the runs' metrics and results through the real Store API),
each run 3 days long with 30 series sampled every second: the driver's 5
(tps, latency mean and p99, failed, lag) and the vmstat collector's 25 under
their real names. 5 x 30 x 259,200 = 38.9 million series rows, inserted as
SeriesWriter inserts them. `perflab report DIR` then runs as a child
process, timed on the wall clock, its peak RSS from getrusage of the child.

    .venv/bin/python benchmarks/report_14day.py [--days 3] [--runs 5] [--keep DIR | --reuse DIR]
"""

from __future__ import annotations

import argparse
import itertools
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from perflab.store import STORE_NAME  # noqa: E402
from synthetic_store import build_store  # noqa: E402

LIMIT_S = 60.0
LIMIT_RSS_BYTES = 2 * 2**30
DRIVER = ("tps", "latency_mean_ms", "latency_p99_ms", "failed", "lag_mean_ms")
VMSTAT = ("us_pct", "sy_pct", "id_pct", "wa_pct", "st_pct", "irq_pct", "softirq_pct",
          "bi_kib_per_s", "bo_kib_per_s", "si_kib_per_s", "so_kib_per_s", "in_per_s", "cs_per_s", "forks_per_s",
          "r", "b", "swpd_kib", "free_kib", "buff_kib", "cache_kib", "used_kib", "avail_kib", "dirty_kib",
          "writeback_kib", "load1")
CHUNK = 200_000


def build(out: Path, runs: int, seconds: int) -> int:
    """The store: runs x 30 series of `seconds` 1-s samples; returns the rows written."""
    build_store(out, clients=[4], sync=["on"], repetitions=runs, degrade_pct_per_run=1.7, histograms=False,
                series_points=0, run_seconds=float(seconds), name="report-14day")
    conn = sqlite3.connect(out / STORE_NAME)
    conn.execute("PRAGMA synchronous=OFF")
    rng = np.random.default_rng(14)
    t = np.arange(1, seconds + 1, dtype=float)
    written = 0
    for run_id in range(1, runs + 1):
        slow = (1 - 0.017) ** (run_id - 1)
        for source, names in (("sql", DRIVER), ("vmstat", VMSTAT)):
            for k, name in enumerate(names):
                base = {"tps": 700.0 * slow, "free_kib": 4e6, "cache_kib": 3e6, "bo_kib_per_s": 800.0}.get(name, 10.0 + k)
                values = base * rng.normal(1.0, 0.03, seconds)
                values[rng.integers(0, seconds, 5)] *= 4  # one-second spikes the figures must keep
                rows = zip(itertools.repeat(run_id), itertools.repeat(source), itertools.repeat(name),
                           t.tolist(), values.tolist(), strict=False)
                while chunk := list(itertools.islice(rows, CHUNK)):
                    with conn:
                        conn.executemany("INSERT INTO series VALUES (?, ?, ?, ?, ?)", chunk)
                    written += len(chunk)
    conn.close()
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=3.0, help="each run's length (default 3)")
    parser.add_argument("--runs", type=int, default=5)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--keep", type=Path, help="build the store here and keep it")
    where.add_argument("--reuse", type=Path, help="report on a store an earlier --keep built")
    args = parser.parse_args()
    out = args.reuse or args.keep or Path(tempfile.mkdtemp(prefix="perflab-report-14day-")) / "out"
    try:
        if args.reuse is None:
            t0 = time.perf_counter()
            rows = build(out, args.runs, int(args.days * 86400))
            print(f"store: {args.runs} runs x 30 series x {int(args.days * 86400):,} s = {rows:,} series rows "
                  f"written in {time.perf_counter() - t0:.0f} s ({out})")
        size = sum(p.stat().st_size for p in out.iterdir() if p.name.startswith(STORE_NAME))
        print(f"store size: {size / 2**30:.2f} GiB")
        perflab = Path(sys.executable).parent / "perflab"
        t = time.perf_counter()
        done = subprocess.run([str(perflab), "report", str(out)], capture_output=True, text=True)
        wall = time.perf_counter() - t
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        if done.returncode != 0:
            print(done.stdout, done.stderr, sep="\n")
            return 1
        report = out / "report.html"
        print(f"perflab report: {wall:.1f} s wall (limit {LIMIT_S:.0f} s), peak RSS {rss / 2**20:,.0f} MiB "
              f"(limit {LIMIT_RSS_BYTES / 2**30:.0f} GiB); report.html {report.stat().st_size / 1024:,.0f} KiB")
        return 0 if wall < LIMIT_S and rss < LIMIT_RSS_BYTES else 1
    finally:
        if args.keep is None and args.reuse is None:
            shutil.rmtree(out.parent, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
