"""A process as Linux's /proc shows it (proc(5)): the one reader of
/proc/PID for every layer, from the guardian up (the targets, the tracers,
the collectors, the workloads). Each function takes a pid and reads the
process's files afresh; a process that is gone, or that this user may not
see, reads as None (or as not alive, no children, an empty command line).
And the machine's CPU time by mode (/proc/stat: parse_stat).

/proc/PID/stat is split after the last ")" (a command name may hold spaces
and parentheses): `stat_fields(pid)[0]` is the state, proc(5)'s field 3.
"""

from __future__ import annotations

import os
from pathlib import Path

# Indices into stat_fields(): proc(5)'s field number minus 3.
STATE, PPID, SESSION, FLAGS, UTIME, STIME, CUTIME, CSTIME, STARTTIME = 0, 1, 3, 6, 11, 12, 13, 14, 19
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
BASE_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def read_bytes(path: Path | str) -> bytes:
    """A whole /proc or /sys file. os.open/os.read rather than open(): no file
    object, no buffering, half the CPU per file (the collectors read tens of
    them every second)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: Path | str) -> str:
    return read_bytes(path).decode("ascii", errors="replace")


def split_stat(raw: bytes | str) -> list[str]:
    """The fields of a /proc/PID/stat text after the command name
    (IndexError on a text without one)."""
    text = raw.decode("ascii", errors="replace") if isinstance(raw, bytes) else raw
    return text.rsplit(")", 1)[1].split()


def stat_comm(raw: bytes) -> str:
    """The command name in a /proc/PID/stat text (proc(5)'s field 2, between
    the first "(" and the last ")"; ValueError on a text without one)."""
    return raw[raw.index(b"(") + 1:raw.rindex(b")")].decode(errors="replace")


def stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name, or None."""
    try:
        return split_stat(read_bytes(f"/proc/{pid}/stat"))
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie: a killed process whose parent (init, in a
    container often a shell that never reaps) has not reaped it is gone."""
    fields = stat_fields(pid)
    return fields is not None and fields[STATE] not in ("Z", "X")


def start_time(pid: int) -> str | None:
    """When the process started (clock ticks since boot, as text): with the
    pid, what names one process for good (a pid alone may be reused)."""
    fields = stat_fields(pid)
    return fields[STARTTIME] if fields is not None and len(fields) > STARTTIME else None


def cpu_seconds(pid: int) -> float | None:
    """The process's CPU time so far, user and system (its threads included)."""
    fields = stat_fields(pid)
    if fields is None or len(fields) <= STIME:
        return None
    return (int(fields[UTIME]) + int(fields[STIME])) / CLOCK_TICKS_PER_S


def cmdline(pid: int) -> str:
    """The command line, arguments joined by spaces ("" when gone); a server
    that sets its process title (PostgreSQL) shows the title."""
    try:
        return read_bytes(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def environ_has(pid: int, entry: str) -> bool:
    """Whether the environment the process started with holds `entry`
    ("NAME=value"): a token perflab gave it. A process that rewrote its
    environment area (nginx, with its process title) no longer shows it."""
    try:
        return entry.encode() in read_bytes(f"/proc/{pid}/environ").split(b"\0")
    except OSError:
        return False


def parents() -> dict[int, int]:
    """Every visible process's parent: pid -> ppid."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields is not None:
                out[int(entry)] = int(fields[PPID])
    return out


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`: from /proc/PID/task/*/children
    (CONFIG_PROC_CHILDREN; cheap, the process collector asks every second),
    else by one scan of /proc."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    try:
        for tid in tasks:
            out += [int(c) for c in read_bytes(f"/proc/{pid}/task/{tid}/children").split()]
        return out
    except FileNotFoundError:
        pass  # no such file in this kernel (a task that ended is not there either: scan)
    except OSError:
        return out
    return sorted(child for child, parent in parents().items() if parent == pid)


def descendants(root: int) -> list[int]:
    """Every process below `root` (children, theirs, ...), from one pass over /proc."""
    parent = parents()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        kids = [c for c, p in parent.items() if p == pid]
        out += kids
        todo += kids
    return out


def tracer_pid(pid: int) -> int:
    """The pid of the process tracing `pid` (ptrace: strace), 0 when none or gone."""
    try:
        for line in read_bytes(f"/proc/{pid}/status").decode(errors="replace").splitlines():
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def hugetlb_pages(pid: int) -> int | None:
    """Huge pages the process maps (/proc/PID/smaps: each mapping whose
    KernelPageSize is above the base page, its Size over that page size),
    whether touched yet or only reserved; None when it cannot be read."""
    try:
        text = read_bytes(f"/proc/{pid}/smaps")
    except OSError:
        return None
    pages = 0
    size_kb = 0
    for line in text.splitlines():
        if line.startswith(b"Size:"):
            size_kb = int(line.split()[1])
        elif line.startswith(b"KernelPageSize:"):
            page_kb = int(line.split()[1])
            if page_kb > BASE_PAGE_KB:
                pages += size_kb // page_kb
    return pages


# /proc/stat "cpu" line, in proc(5) order; values in USER_HZ ticks.
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


def parse_stat(text: str) -> dict[str, int]:
    """/proc/stat: the aggregate cpu line as `cpu.<field>` ticks, and the
    system counters intr (total), ctxt, processes, procs_running, procs_blocked."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(" ")
        if key == "cpu":
            for name, value in zip(CPU_FIELDS, rest.split(), strict=False):
                out[f"cpu.{name}"] = int(value)
        elif key == "intr":
            out["intr"] = int(rest.split(None, 1)[0])
        elif key in ("ctxt", "processes", "procs_running", "procs_blocked"):
            out[key] = int(rest)
    return out
