"""What every benchmark script shares: the cores it may use, a range of
ratios, and a main that always tears down what it started."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn


def cores() -> int:
    return len(os.sched_getaffinity(0))


def processes_cpu_s(pids: Iterable[int]) -> dict[int, float]:
    """utime + stime of each live process among `pids` (seconds), from /proc/PID/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def spread(values: list[float], digits: int = 2) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def run_main(main: Callable[[], int]) -> NoReturn:
    """Run `main` with SIGINT and SIGTERM raising Interrupted, so its
    `finally` blocks stop every server it started; exit 130 when interrupted."""
    from perflab.runner import Interrupted, interrupt_on_signals

    with interrupt_on_signals():
        try:
            sys.exit(main())
        except Interrupted:
            sys.exit(130)
