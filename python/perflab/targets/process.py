"""The `process` target: any web server perflab starts from a command line
(lighttpd, apache2, the user's own), with `{port}` and `{root}` in it. perflab
picks a free port on 127.0.0.1, points `{root}` at the file set, starts the
command in its own session with an environment of its own (PATH, LC_ALL,
TZ, HOME/USER of the user it runs as, and the server token: nothing else of
perflab's, serverproc.server_env), waits
until `ready_path` answers, and stops every process the command started
(targets/webserver.py). The server must listen on 127.0.0.1:{port} only.
When perflab is root, the whole command runs as `target.run_as` (default
nobody; through setpriv), so the files and paths it names must be that
user's to read or write: perflab starts no server as root.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from perflab.targets.base import TargetSettings
from perflab.targets.serverproc import server_env
from perflab.targets.webserver import ManagedServerSettings, ManagedWebServer, server_user, user_ids


class ProcessSettings(ManagedServerSettings):
    kind: Literal["process"]
    # The command line, with {port} and {root}; split as a shell would, not run by one.
    command: str = Field(min_length=1)
    # Where the server answers once it is ready (any HTTP status counts).
    ready_path: str = Field(default="/", pattern=r"^/")

    @field_validator("command")
    @classmethod
    def _placeholders(cls, value: str) -> str:
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"got {value!r}: {exc}; allowed: a command line") from None
        if not words:
            raise ValueError("got an empty command; allowed: a command line with {port}")
        if "{port}" not in value:
            raise ValueError(f"got {value!r}; allowed: a command line with {{port}} (and {{root}}), "
                             "so the server listens where perflab says")
        try:
            value.format(port=1, root="/")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"got {value!r}: placeholder {exc}; allowed: {{port}} and {{root}} "
                             "(write {{ and }} for braces)") from None
        return value


def _why_not_runnable(path: Path, uid: int, gid: int) -> str | None:
    """Why the user (uid, gid; no other group: setpriv clears them) may not
    execute `path`, by the mode bits of the file and of every directory on
    the way to it; None when it may (or when that cannot be known)."""
    def allows(st: os.stat_result, bit: int) -> bool:
        shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
        return uid == 0 or bool((st.st_mode >> shift) & bit)

    try:
        for directory in reversed(path.parents):
            if not allows(directory.stat(), 0o1):
                return f"it may not enter {directory} (mode {stat.S_IMODE(directory.stat().st_mode):o})"
        st = path.stat()
    except OSError as exc:
        return exc.strerror or str(exc)
    if not stat.S_ISREG(st.st_mode):
        return "it is not a file"
    if not allows(st, 0o1):
        return f"it may not execute it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def command_problem(settings: ProcessSettings, user: str | None) -> str | None:
    """Why the command's program cannot run as `user` (None: perflab's own
    user), found as setpriv's exec finds it (the first of PATH the user may
    execute); None when it can, or when that is known only at the start (a
    path relative to the server's directory)."""
    program = shlex.split(settings.command)[0]
    if "{" in program or ("/" in program and not program.startswith("/")):
        return None
    uid, gid = (user_ids(user)[:2]) if user is not None else (os.geteuid(), os.getegid())
    who = f"user {user}" if user is not None else "perflab's user"
    if program.startswith("/"):
        why = _why_not_runnable(Path(program), uid, gid)
        return None if why is None else f"{program} cannot be run by {who}: {why}"
    tried = []
    for directory in server_env()["PATH"].split(os.pathsep):
        candidate = Path(directory or ".") / program
        if not candidate.exists():
            continue
        why = _why_not_runnable(candidate, uid, gid)
        if why is None:
            return None
        tried.append(f"{candidate}: {why}")
    if not tried:
        return f"{program} is in no directory of PATH ({server_env()['PATH']})"
    return f"{program} cannot be run by {who}: " + "; ".join(tried)


class ProcessTarget(ManagedWebServer[ProcessSettings]):
    Settings: ClassVar[type[TargetSettings]] = ProcessSettings
    server_name: ClassVar[str] = "server"

    @classmethod
    def preflight(cls, settings: ProcessSettings, base_dir: Path) -> list[tuple[str, str]]:  # type: ignore[override]
        problems = super().preflight(settings, base_dir)
        if not problems:
            user = server_user(settings) if cls.whole_as_user else None
            if (why := command_problem(settings, user)) is not None:
                fix = ("give the program's absolute path, one that user may run, or a target.run_as who may "
                       "run it" if user is not None else "give the program's absolute path")
                problems.append(("target.command", f"{why}; fix: {fix}"))
        return problems

    @property
    def ready_path(self) -> str:  # type: ignore[override]
        return self.settings.ready_path

    def command(self, port: int, root: Path) -> list[str]:
        return [w.format(port=port, root=root) for w in shlex.split(self.settings.command)]

    def describe(self) -> dict[str, Any]:
        return super().describe() | {"command": self.settings.command}
