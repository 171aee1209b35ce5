"""A CPU list as the kernel writes one ("0-1,3": cpuset.cpus, the online
CPUs), read and written; the CPUs online now."""

from __future__ import annotations

import re
from pathlib import Path

ONLINE_CPUS = Path("/sys/devices/system/cpu/online")
_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")

MAX_CPUS = 8192  # the kernel's largest NR_CPUS: past it a list is a typo (and a huge set)


def parse_cpu_list(text: str) -> set[int]:
    """The CPUs of a cpuset list ("0-1,3"), as the kernel writes them."""
    text = text.strip()
    if not text:
        return set()
    if not _CPU_LIST.match(text):
        raise ValueError(f"{text!r} is not a CPU list")
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        lo, hi = int(first), int(last or first)
        if hi < lo:
            raise ValueError(f"{part!r} runs backwards")
        if hi >= MAX_CPUS:
            raise ValueError(f"{part!r} names a CPU past {MAX_CPUS - 1}")
        cpus.update(range(lo, hi + 1))
    return cpus


def format_cpu_list(cpus: set[int]) -> str:
    parts: list[str] = []
    run: list[int] = []
    for cpu in sorted(cpus):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [cpu]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def online_cpus() -> set[int]:
    return parse_cpu_list(ONLINE_CPUS.read_text())
