"""A server process perflab starts itself, found again by a token.

Every process of such a server (a web server, a managed MariaDB) carries
PERFLAB_SERVER_TOKEN=<token> in its environment, inherited by its workers
and children, and runs in a session of its own. The target journals the
token *before* the server starts, and the session once it has; the
guardian's undo (`undo_server_process`) finds the processes by either in
/proc and ends them: SIGTERM, then SIGKILL, within 5 s of perflab's death.
A server that rewrites its environment area (nginx, with its process
title) is found by its session. A pid alone is never enough: the session
leader's start time is journaled with it. A command line is never evidence:
any user may start a process whose arguments name the target's directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import time
from typing import Any

from perflab.guardian import TOKEN_VAR, pid_alive, register_undo, start_time
from perflab.proc import SESSION, STATE, environ_has, stat_fields

__all__ = ["TOKEN_VAR", "server_env", "server_processes", "stop_server_processes", "undo_server_process"]

STOP_WAIT_S = 5.0


def server_env(token: str | None = None, user: str | None = None) -> dict[str, str]:
    """The whole environment of a server perflab starts, and of the programs
    that start it (initdb, pg_ctl, mariadb-install-db, setpriv): PATH,
    LC_ALL=C, TZ when perflab has one, the server's token, and HOME, USER
    and LOGNAME of `user` (its OS user) when given. Nothing else of
    perflab's: a server's environment is readable by its own user and by
    whatever it runs (PostgreSQL's COPY ... FROM PROGRAM), so no PG* or
    MYSQL_* variable, password or credential of perflab's may reach it."""
    env = {"PATH": os.environ.get("PATH") or os.defpath, "LC_ALL": "C"}
    if os.environ.get("TZ"):
        env["TZ"] = os.environ["TZ"]
    if user is not None:
        env.update(HOME=pwd.getpwnam(user).pw_dir, USER=user, LOGNAME=user)
    if token is not None:
        env[TOKEN_VAR] = token
    return env


def server_processes(token: str, session: int | None = None) -> list[int]:
    """Pids of one managed server: its environment holds
    PERFLAB_SERVER_TOKEN=token, or it is in `session` (the server was started
    in a session of its own; its workers stay in it, nginx's too, whose
    environment area holds its process title instead)."""
    mark = f"{TOKEN_VAR}={token}"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        fields = stat_fields(pid)
        if fields is None or fields[STATE] in ("Z", "X"):
            continue
        if (session is not None and int(fields[SESSION]) == session) or environ_has(pid, mark):
            found.append(pid)
    return found


def stop_server_processes(token: str, session: int | None, wait_s: float = STOP_WAIT_S) -> None:
    """SIGTERM every process of the server, then SIGKILL what is left after
    `wait_s`; returns when none is alive (or 2 s after the SIGKILL)."""
    for sig, seconds in ((signal.SIGTERM, wait_s), (signal.SIGKILL, 2.0)):
        pids = server_processes(token, session)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
            time.sleep(0.02)


def session_of_ours(session: int | None, start: str | None) -> int | None:
    """The journaled session, if it can still only be the server's: its leader
    is gone (a pid stays taken while any process has it as its session, so
    its members are the server's), or is still the leader journaled (same
    start time). A leader pid alive with another start time was reused by
    someone else's new session: None."""
    if session is None:
        return None
    now = start_time(session)
    return session if now is None or now == start else None


def undo_server_process(args: dict[str, Any]) -> None:
    """The guardian's undo of a server started with a token (perflab died).
    A `marker` an older perflab journaled (a command line to match) is no
    evidence, and is ignored."""
    session = session_of_ours(args.get("session"), args.get("session_start"))
    token = args.get("token")
    if isinstance(token, str) and token:
        stop_server_processes(token, session, wait_s=2.0)


# a managed web server (nginx, process) or MariaDB: end every process with its token
register_undo("web-server", undo_server_process)
register_undo("server-process", undo_server_process)


# a server started with a token (managed MariaDB): end every process that carries it
register_undo("server-process", undo_server_process)
# a managed web server (nginx, process), journaled by perflab.targets.webserver: the same undo
register_undo("web-server", undo_server_process)
