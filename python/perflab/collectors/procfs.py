"""Readers for the Linux /proc files the collectors sample.

Plain functions over file text, so a test can feed them a fixture and the
collectors share one parser each. Field meanings follow proc(5). One
process's files (/proc/PID) are perflab.proc's, at the bottom layer.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from perflab.collectors.base import CollectorUnavailable

# A process's files, and /proc/stat, are read by the one reader at the bottom
# layer (the guardian, the targets and the workloads use it too); the
# collectors take it from here.
from perflab.proc import CLOCK_TICKS_PER_S as CLOCK_TICKS_PER_S
from perflab.proc import CPU_FIELDS as CPU_FIELDS
from perflab.proc import parse_stat as parse_stat
from perflab.proc import read_bytes as read_bytes
from perflab.proc import read_text as read_text

PAGE_SIZE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def require_readable(*paths: Path | str) -> None:
    """Raise CollectorUnavailable naming the first file that cannot be read."""
    for path in paths:
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as exc:
            raise CollectorUnavailable(f"cannot read {path}: {exc.strerror or exc}") from None


def parse_kib_table(text: str) -> dict[str, int]:
    """/proc/meminfo ("MemFree:  123 kB") -> {"MemFree": 123} in KiB."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields:
            out[key] = int(fields[0])
    return out


@functools.lru_cache(maxsize=16)
def _names_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(rf"^({'|'.join(map(re.escape, names))}):? +(\d+)$", re.MULTILINE)


def parse_name_values(text: str, names: tuple[str, ...] | None = None) -> dict[str, int]:
    """/proc/vmstat and /proc/PID/io style "name value" lines; only `names`
    when given (one regex pass: /proc/vmstat has ~180 lines and vmstat wants 4)."""
    if names is not None:
        return {name: int(value) for name, value in _names_pattern(names).findall(text)}
    out: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.replace(":", " ").split()
        if len(fields) == 2:
            out[fields[0]] = int(fields[1])
    return out


def cpu_busy_fraction(before: dict[str, int], after: dict[str, int]) -> float | None:
    """Share of CPU time that was busy between two parse_stat() readings:
    everything but idle and iowait, over all but steal (time the hypervisor
    gave to someone else was not ours to use). Guest time is already inside
    user and nice (proc(5)), so it is not added again."""
    delta = {f: after.get(f"cpu.{f}", 0) - before.get(f"cpu.{f}", 0) for f in CPU_FIELDS}
    ours = sum(delta[f] for f in CPU_FIELDS[:8]) - delta["steal"]
    if ours <= 0:
        return None
    idle = delta["idle"] + delta["iowait"]
    return min(1.0, max(0.0, (ours - idle) / ours))
