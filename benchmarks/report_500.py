"""How long `write_report` takes on a 500-run store (the issue asks < 10 s).

The store is written through the real Store API (tests/synthetic_store.py):
10 client counts x 2 synchronous_commit values x 25 repetitions = 500 runs,
each with 5 metrics, 7 series of 60 samples (210,000 series rows), an HDR
histogram when the engine can encode one, and a target description. Only
`write_report` is timed, best and median of --repeat runs.

    .venv/bin/python benchmarks/report_500.py [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from perflab.report import write_report  # noqa: E402
from synthetic_store import build_store  # noqa: E402

LIMIT_S = 10.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="build the store here and keep it")
    args = parser.parse_args()
    out = args.keep or Path(tempfile.mkdtemp(prefix="perflab-report-500-")) / "out"
    try:
        t0 = time.perf_counter()
        build_store(out, clients=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512], sync=["on", "off"], repetitions=25,
                    series_points=60, degrade_pct_per_run=0.2, fail_runs=(17, 233), client_bound_from=64,
                    name="report-500")
        print(f"store: 500 runs written in {time.perf_counter() - t0:.1f} s ({out})")
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            path = write_report(out)
            times.append(time.perf_counter() - t)
        size_kib = path.stat().st_size / 1024
        figures = len(list((out / "figures").glob("*.svg")))
        print(f"write_report: best {min(times):.2f} s, median {statistics.median(times):.2f} s "
              f"over {len(times)} (limit {LIMIT_S:.0f} s); report.html {size_kib:,.0f} KiB, {figures} figures")
        return 0 if min(times) < LIMIT_S else 1
    finally:
        if args.keep is None:
            shutil.rmtree(out.parent, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
