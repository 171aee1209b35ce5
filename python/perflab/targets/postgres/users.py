"""Running PostgreSQL's programs as the server's OS user (which
perflab.targets.serverhome.resolve_run_as picks: never root)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from typing import Any


def as_user(user: str | None) -> dict[str, Any]:
    """subprocess.run's arguments that run a program as `user` (none: this user)."""
    if user is None:
        return {}
    pw = pwd.getpwnam(user)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "cwd": "/"}


def chown(path: Path, user: str | None) -> None:
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(path, pw.pw_uid, pw.pw_gid)
