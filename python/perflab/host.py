"""Facts about the machine a run happened on, stored once per experiment."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def memory_bytes() -> int | None:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def os_release() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return ""


def host_facts() -> dict[str, Any]:
    from perflab import __version__, _engine

    uname = platform.uname()
    return {
        "hostname": uname.node,
        "kernel": f"{uname.system} {uname.release}",
        "kernel_version": uname.version,
        "machine": uname.machine,
        "os": os_release(),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_bytes": memory_bytes(),
        "python": platform.python_version(),
        "perflab": __version__,
        "engine": _engine.__version__,
        "engine_profile": _engine.build_profile,
    }
