"""Who runs a managed PostgreSQL and who may connect to it.

Its programs run as the server's OS user (which
perflab.targets.serverhome.resolve_run_as picks: never root). Its only
role is perflab's superuser, and only perflab reaches it: on the unix
socket (in a 0700 directory) by `peer` authentication, for root, perflab's
own user and the server's user (pg_ident.conf maps each to the role), and
over TCP (127.0.0.1, and the driver's namespace address with
driver.network) by `scram-sha-256` with a random password that perflab
sets at every start and keeps only in memory and in a 0600 passfile in its
own state directory (never in the output directory, the store or a
report). Both files are rewritten at every start, so a cluster made by an
older perflab (which trusted every local user) is closed too.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import pwd
import secrets
from pathlib import Path
from typing import Any

from perflab.hostctl.shareddir import write_file

# pg_ident.conf's map of the OS users that may connect on the socket as perflab's role
IDENT_MAP = "perflab"
SCRAM_ITERATIONS = 4096  # PostgreSQL's default (scram_iterations)


def as_user(user: str | None) -> dict[str, Any]:
    """subprocess.run's arguments that run a program as `user` (none: this user)."""
    if user is None:
        return {}
    pw = pwd.getpwnam(user)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "cwd": "/"}


def chown(path: Path, user: str | None) -> None:
    """Give `path` to `user`: the path itself, never what a symlink there
    points to (one the server's user planted would hand root's file over)."""
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(path, pw.pw_uid, pw.pw_gid, follow_symlinks=False)


def new_password() -> str:
    """A random password (URL- and conninfo-safe: letters, digits, - and _)."""
    return secrets.token_urlsafe(32)


def scram_verifier(password: str) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 7677,
    as its pg_be_scram_build_secret): `ALTER ROLE ... PASSWORD` with it sends
    no password, so no statement log can hold one."""
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, SCRAM_ITERATIONS)
    stored = hashlib.sha256(hmac.new(salted, b"Client Key", "sha256").digest()).digest()
    server = hmac.new(salted, b"Server Key", "sha256").digest()

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return f"SCRAM-SHA-256${SCRAM_ITERATIONS}:{b64(salt)}${b64(stored)}:{b64(server)}"


def hba_text(remote_client: str | None) -> str:
    """pg_hba.conf: the socket by peer (through IDENT_MAP), TCP on loopback,
    and the driver's namespace address when given, by scram-sha-256. No line
    trusts anyone."""
    lines = ["# written by perflab at every start; who may connect (README: who reaches a managed server)",
             f"local all all peer map={IDENT_MAP}",
             "host all all 127.0.0.1/32 scram-sha-256"]
    if remote_client:
        lines.append(f"host all all {remote_client}/32 scram-sha-256")
    return "\n".join(lines) + "\n"


def ident_text(role: str, run_as: str | None) -> str:
    """pg_ident.conf: root, perflab's own user and the server's user (who
    owns the data anyway) may connect on the socket as `role`; no one else."""
    users = ["root"]
    with contextlib.suppress(KeyError):  # a uid without a name: root and run_as only
        users.append(pwd.getpwuid(os.geteuid()).pw_name)
    if run_as is not None:
        users.append(run_as)
    return "# written by perflab at every start\n" + "".join(
        f"{IDENT_MAP} {user} {role}\n" for user in dict.fromkeys(users))


def write_passfile(path: Path, port: int, role: str, password: str) -> None:
    """The password in a pgpass file only the effective user can read (0600,
    a new file renamed into place: nothing planted at `path` is written
    through), for `psql` by hand: PGPASSFILE=path psql -h 127.0.0.1 -p port."""
    write_file(path, f"*:{port}:*:{role}:{password}\n", mode=0o600)
