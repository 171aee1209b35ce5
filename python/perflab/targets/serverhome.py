"""What every server perflab starts needs of its home, whatever its kind
(PostgreSQL, MariaDB, the web servers): the OS user it runs as (never root),
whether that user can reach a directory, a free loopback port, and the
storage settings that place each part of its data in a directory or on a
filesystem perflab makes."""

from __future__ import annotations

import os
import pwd
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationInfo, field_validator, model_validator

from perflab.errors import UserError
from perflab.hostctl import netfs, stripe
from perflab.hostctl.scratchfs import NETWORK_TYPES, FsSettings, ScratchFs, fs_problems
from perflab.hostctl.shareddir import private_dir_problem
from perflab.settings_model import StrictModel

# Who runs a server perflab starts when perflab is root and `run_as` does not say.
DEFAULT_RUN_AS = "nobody"
# perflab's own directory (0700) in a scratch filesystem's backing_dir, where its images go.
SCRATCH_DIR = "perflab-scratch"


def free_port() -> int:
    """A TCP port on 127.0.0.1 free now (the server binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resolve_run_as(run_as: str | None) -> str | None:
    """The OS user a server perflab starts runs as: None (this user) unless
    perflab is root; then `run_as`, default nobody. Never uid 0: perflab runs
    no server as root (and PostgreSQL refuses to)."""
    if os.geteuid() != 0:
        if run_as:
            raise UserError("target.run_as: only meaningful when perflab runs as root", "remove target.run_as")
        return None
    user = run_as or DEFAULT_RUN_AS
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise UserError(f"target.run_as: no OS user {user!r}", "give an existing unprivileged user") from None
    if pw.pw_uid == 0:
        raise UserError(f"target.run_as: {user} is root, and perflab runs no server as root",
                        "give an unprivileged user, e.g. nobody")
    return user


def file_owner(user: str | None) -> tuple[int, int] | None:
    """(uid, gid) to give a file the server's `user` owns (None: this user's own)."""
    if user is None:
        return None
    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


def reachable_by(path: Path, user: str | None) -> bool:
    """Can `user` traverse every directory up to `path`?"""
    if user is None:
        return True
    pw = pwd.getpwnam(user)
    p = path.resolve()
    for d in [*reversed(p.parents), p]:
        if not d.exists():
            break
        st = d.stat()
        if st.st_uid == pw.pw_uid:
            ok = st.st_mode & 0o100
        elif st.st_gid == pw.pw_gid:
            ok = st.st_mode & 0o010
        else:
            ok = st.st_mode & 0o001
        if not ok:
            return False
    return True


class RoleStorage(StrictModel):
    """`target.storage`: for each role in ROLES (data, wal, redo, ...) a
    `<role>_dir` or a `<role>_fs` (a filesystem perflab makes; false, as TOML
    has no null, is none), never both. A subclass declares the fields."""

    ROLES: ClassVar[tuple[str, ...]] = ()

    @field_validator("*")
    @classmethod
    def _false_is_none(cls, value: Any, info: ValidationInfo) -> Any:
        return (value or None) if str(info.field_name).endswith("_fs") else value

    @model_validator(mode="after")
    def _one_place_each(self) -> RoleStorage:
        for what in self.ROLES:
            if getattr(self, f"{what}_dir") is not None and getattr(self, f"{what}_fs") is not None:
                raise ValueError(f"got both {what}_dir and {what}_fs; allowed: one of them (with {what}_fs, "
                                 f"perflab places the {what} on the filesystem it makes)")
        return self


def scratch_problems(storage: RoleStorage, base_dir: Path) -> list[tuple[str, str]]:
    """What stops perflab from making each filesystem `storage` asks for. A
    relative backing_dir is the experiment file's (in `base_dir`); the default
    backing directory is the target's, in the output directory (under the
    working directory unless --out says otherwise)."""
    problems = []
    for role in storage.ROLES:
        fs = getattr(storage, f"{role}_fs")
        if fs is None:
            continue
        key = f"target.storage.{role}_fs"
        if fs.type in NETWORK_TYPES:
            problems += netfs.netfs_problems(key, fs)
            continue
        dirs = [(base_dir / Path(d).expanduser()).resolve() if d else None for d in fs.backing_dirs()]
        if fs.raid is not None:
            problems += stripe.stripe_problems(key, fs, [d or Path.cwd() for d in dirs])
        else:
            problems += fs_problems(key, fs, dirs[0] or Path.cwd())
        for backing in dict.fromkeys(d for d in dirs if d is not None):
            own = backing / SCRATCH_DIR
            if os.path.lexists(own) and (problem := private_dir_problem(own)):
                problems.append((f"{key}.backing_dir", f"{own} {problem}: perflab keeps its images only in a "
                                 f"directory no other user can write; fix: remove {own} if it is not perflab's"))
    return problems


def scratch_notes(storage: RoleStorage) -> list[str]:
    """What `check` says about the filesystems it accepts: which stripe, which network filesystem will run."""
    notes = []
    for role in storage.ROLES:
        fs: FsSettings | None = getattr(storage, f"{role}_fs")
        if fs is not None and fs.raid is not None:
            notes.append(stripe.stripe_note(f"target.storage.{role}_fs", fs))
        elif fs is not None and fs.type in NETWORK_TYPES:
            notes.append(netfs.netfs_note(f"target.storage.{role}_fs", fs))
    return notes


def scratch_filesystems(storage: RoleStorage, home: Callable[[], Path], workdir: Path, digest: str,
                        path_from_file: Callable[[str], Path], tag: str = "",
                        run_as: str | None = None) -> dict[str, ScratchFs]:
    """The filesystems `storage` asks for (not yet mounted), by role: each is
    perflab-<digest>-<tag><role>, mounted at <home>/perflab-<role>-fs, its
    image (when loop-backed) in the target's directory `workdir`, or in
    SCRATCH_DIR, a directory of perflab's (0700) in its backing_dir
    (`path_from_file`): that may be shared (/var/tmp), and an image is kept
    only where no other user can write (ScratchFs). A stripe's images (one
    per device) go likewise (hostctl.stripe); a network filesystem's files in
    <home>/perflab-<role>-export, the server's user's (hostctl.netfs)."""
    out: dict[str, ScratchFs] = {}
    for role in storage.ROLES:
        fs = getattr(storage, f"{role}_fs")
        if fs is None:
            continue
        name = f"perflab-{digest}-{tag}{role}"
        mountpoint = home() / f"perflab-{role}-fs"
        dirs = [path_from_file(d) / SCRATCH_DIR if d else workdir for d in fs.backing_dirs()]
        if fs.type in NETWORK_TYPES:
            out[role] = netfs.NetFs(name, fs, mountpoint, home() / f"perflab-{role}-export", run_as, workdir)
        elif fs.raid is not None:
            out[role] = stripe.StripedFs(name, fs, mountpoint, [d / f"{name}-{i}.img" for i, d in enumerate(dirs)])
        else:
            out[role] = ScratchFs(name, fs, mountpoint, dirs[0] / f"{name}.img")
    return out
