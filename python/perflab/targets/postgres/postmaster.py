"""A managed server's processes: the postmaster, found by its lock file
(postmaster.pid, read here and nowhere else), its children and their
roles, and the guardian's undo of a server whose perflab died."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from perflab.guardian import register_undo, state_dir
from perflab.proc import children, cmdline, pid_alive

# The postmaster's lock file in the data directory: its pid on the first line.
PID_FILE = "postmaster.pid"


def postmaster_pid(data_dir: Path) -> int | None:
    """The pid in data_dir's postmaster.pid, alive or not; None when there is
    no lock file or it cannot be read (yet: pg_ctl writes it as it starts)."""
    try:
        return int((data_dir / PID_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def live_postmaster(data_dir: Path) -> int | None:
    """The pid of the server running on data_dir, else None."""
    pid = postmaster_pid(data_dir)
    return pid if pid is not None and pid_alive(pid) else None


def server_alive(data_dir: Path) -> bool:
    """A postmaster.pid whose process lives (an unreadable one counts as
    alive: perflab cannot tell, and touches nothing)."""
    pid = postmaster_pid(data_dir)
    if pid is not None:
        return pid_alive(pid)
    try:
        os.stat(data_dir / PID_FILE)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True  # there, but not readable as a pid


def is_postgres(pid: int, data_dir: Path | None = None) -> bool:
    """`pid` lives and is a PostgreSQL process (a pid alone may be reused);
    given `data_dir`, the server of that data directory: it works in it (a
    postmaster chdirs into its data directory before it writes its lock
    file; no other user can put a process of theirs there), not merely a
    process whose command line says "postgres"."""
    if not (pid_alive(pid) and "postgres" in cmdline(pid)):
        return False
    return data_dir is None or pid in processes_in(data_dir)


def passfile_of(data_dir: Path) -> Path:
    """Where a managed server's password is kept for `psql` by hand: perflab's
    own state directory, one 0600 file per data directory (named from it)."""
    return state_dir() / f"pgpass-{hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]}"


def undo_server(args: dict[str, Any]) -> None:
    """The guardian's undo of a managed server whose perflab died without
    stopping it (perflab.guardian): fast shutdown, then immediate, then
    SIGKILL, all within 5 s; backends that outlive their postmaster go too.
    perflab may have died while pg_ctl was starting the server (pg_ctl lives
    on): a lock file that is not there yet is waited for, briefly. The
    server's passfile goes too (its name follows from the data directory: no
    path is taken from the journal)."""
    data_dir = Path(args["data_dir"])
    passfile_of(data_dir).unlink(missing_ok=True)
    # 1.5 s for the lock file to appear; longer (up to 10 s) while a process
    # that names this data directory (pg_ctl, or the postgres it execs) is
    # still on its way: on a loaded machine a start can take seconds, and a
    # server that wrote its lock file after the guardian gave up would run on.
    start = time.monotonic()
    while (pid := postmaster_pid(data_dir)) is None:
        waited = time.monotonic() - start
        if waited > 10.0 or (waited > 1.5 and not _starting(data_dir)):
            return
        time.sleep(0.05)
    if not is_postgres(pid, data_dir):
        return
    kids = children(pid)
    for sig, seconds in ((signal.SIGINT, 2.0), (signal.SIGQUIT, 1.5), (signal.SIGKILL, 0.5)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + seconds
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not pid_alive(pid):
            break
    for child in kids:
        if is_postgres(child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
    kill_left_over(data_dir)  # backends forked after the list above, or blocked


def processes_in(data_dir: Path, below: bool = False) -> list[int]:
    """The processes whose working directory is this data directory (or,
    `below`, anywhere under it): every PostgreSQL process chdirs into its own
    (the path is unique to one cluster of perflab's), as mariadbd does. Backends
    outlive a postmaster that was SIGKILLed, and one blocked on a lock never
    notices: these are what is left."""
    target = os.path.realpath(data_dir)
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd").removesuffix(" (deleted)")
        except OSError:
            continue
        if cwd == target or (below and cwd.startswith(target + os.sep)):
            out.append(int(entry))
    return out


def kill_left_over(data_dir: Path) -> list[int]:
    """SIGKILL what is left of a server whose postmaster is gone (its
    backends, proven by their working directory); returns their pids."""
    if live_postmaster(data_dir) is not None:
        return []
    left = [pid for pid in processes_in(data_dir) if pid != os.getpid() and is_postgres(pid)]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0  # gone when this returns (SIGKILL is asynchronous)
    while any(pid_alive(pid) for pid in left) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


def _starting(data_dir: Path) -> bool:
    """A process whose command line names this data directory (perflab's own:
    the path is unique to one cluster) lives: a start may still be under way."""
    needle = str(data_dir)
    for entry in os.listdir("/proc"):
        if entry.isdigit() and needle in cmdline(int(entry)):
            return True
    return False


register_undo("postgres", undo_server)  # a managed server: stop it


_ROLES = (
    ("checkpointer", "checkpointer"),
    ("background writer", "background writer"),
    ("walwriter", "walwriter"),
    ("autovacuum", "autovacuum"),
    ("logical replication", "other"),
    ("stats collector", "other"),
    ("archiver", "other"),
    ("walsender", "other"),
    ("walreceiver", "other"),
    ("startup", "other"),
)


def process_role(cmdline: str) -> str:
    """Role of a PostgreSQL child from its process title ("postgres: checkpointer");
    backends' titles start with the user name instead."""
    if not cmdline.startswith("postgres:"):
        return "other"
    title = cmdline.split(":", 1)[1].strip()
    for needle, role in _ROLES:
        if title.startswith(needle):
            return role
    return "backend"


def server_processes(pid: int) -> dict[int, str]:
    """The postmaster `pid` and its children: pid -> role."""
    roles = {pid: "postmaster"}
    for child in children(pid):
        roles[child] = process_role(cmdline(child))
    return roles
