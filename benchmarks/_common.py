"""What every benchmark script shares: the cores it may use, a range of
ratios, and a main that always tears down what it started."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import NoReturn


def cores() -> int:
    return len(os.sched_getaffinity(0))


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
