"""Paths perflab makes where other users may write too (/tmp, /var/tmp, a
directory the server's user owns): made race-free and never followed.

perflab runs as root, so a name another user could have made first is a
trap: a directory that is a symlink, or that its maker fills with symlinks,
turns root's next write, chmod or chown into one of the maker's choosing.
The rule is OpenSSH's StrictModes: a directory is used only when it is a
real directory (not a symlink), owned by the effective user and writable by
no one else, in a parent where no one else can rename it away (not
world-writable, or sticky as /tmp is). Anything else is refused, with the
path and the fix, and never followed. Files are written with O_NOFOLLOW,
new ones under a fresh name (O_EXCL), then renamed into place: a symlink or
a hard link planted at the final name is replaced, not written through.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from perflab.errors import UserError


def _problem(st: os.stat_result, uid: int) -> str | None:
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o022:
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def private_dir_problem(path: Path) -> str | None:
    """Why directory `path` is not one perflab may trust (None: it may): a
    symlink, not a directory, another user's, writable by another user, or
    in a parent where another user could replace it."""
    uid = os.geteuid()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "does not exist"
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    problem = _problem(st, uid)
    if problem is None:
        parent = os.lstat(path.parent)
        if parent.st_mode & 0o002 and not parent.st_mode & stat.S_ISVTX:
            problem = f"is in {path.parent}, which any user may write and is not sticky"
    return problem


def own_dir(path: Path, mode: int = 0o700, reuse: bool = True) -> Path:
    """Make directory `path` with `mode` (not the umask's); when it exists
    already and `reuse`, take it only when it is perflab's own (a real
    directory of the effective user's, writable by no one else: it was made
    here before). Anything else raises UserError naming the path and the
    fix; nothing is followed or changed. Returns `path`."""
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if not reuse:
            raise UserError(f"{path} exists already, and perflab makes this directory afresh",
                            f"remove {path} if no perflab uses it") from None
    problem = private_dir_problem(path)
    if problem is None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            problem = f"cannot be opened ({e.strerror})"
        else:
            try:
                # the directory opened is the one checked (fstat); its mode whatever the umask
                problem = _problem(os.fstat(fd), os.geteuid())
                if problem is None:
                    os.fchmod(fd, mode)
            finally:
                os.close(fd)
    if problem is not None:
        raise UserError(f"{path} {problem}: perflab uses no directory another user made or can change",
                        f"remove {path} (it is not perflab's), then run again")
    return path


def write_file(path: Path, data: str | bytes, mode: int = 0o644, owner: tuple[int, int] | None = None) -> None:
    """Write `data` to `path` as a new file (a fresh name, O_EXCL and
    O_NOFOLLOW, then renamed over `path`): whatever was at `path` (a symlink
    or a hard link planted by another user) is replaced, never written
    through. `owner` (uid, gid) is given with fchown, on the file written."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            if owner is not None:
                os.fchown(f.fileno(), *owner)
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def open_append(path: Path) -> int:
    """An fd to append to regular file `path`, not through a symlink
    (O_NOFOLLOW) and not a FIFO or device (checked on the fd)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return fd
