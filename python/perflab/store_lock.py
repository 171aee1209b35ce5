"""The experiment's one writer: an exclusive lock on OUT/perflab.lock, and
whether a perflab holds it now (read only, for `serve`, `clean` and `resume`)."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from perflab.errors import DiskFull, UserError
from perflab.proc import start_time

# Held (flock, exclusive) by the one perflab that writes the experiment; it
# holds its pid. The kernel drops the lock when that process dies, SIGKILL too.
LOCK_NAME = "perflab.lock"


def take_writer_lock(out_dir: Path) -> int:
    """The experiment in `out_dir` is written by this process only: an
    exclusive lock, or a clear error naming the perflab that holds it."""
    try:
        fd = os.open(out_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DiskFull(out_dir, exc.strerror or "no space left") from None
        raise UserError(f"{out_dir}: cannot write there: {exc.strerror}", "give a directory perflab may write") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = (os.pread(fd, 64, 0).decode(errors="replace").split() or ["?"])[0]
        os.close(fd)
        raise UserError(
            f"{out_dir} is in use by another perflab (pid {holder}) that is running this experiment; nothing was changed",
            "wait for it to finish (then `perflab resume` if it was interrupted), or give another --out directory",
        ) from None
    os.ftruncate(fd, 0)
    # The pid and its start time: who holds the lock (see `writer_alive`).
    os.pwrite(fd, f"{os.getpid()} {start_time(os.getpid()) or '?'}\n".encode(), 0)
    return fd


def writer_alive(out_dir: Path) -> bool:
    """Whether a perflab is writing the experiment in `out_dir` now: the
    kernel lists a holder of its lock (/proc/locks), or the pid the lock file
    names still runs with the start time recorded beside it. Read only: it
    takes no lock, so it never stands in a starting perflab's way."""
    path = Path(out_dir) / LOCK_NAME
    try:
        inode = path.stat().st_ino
        words = path.read_text().split()
    except OSError:
        return False
    try:
        with open("/proc/locks") as locks:
            for line in locks:
                fields = line.replace("->", "").split()
                # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
                    return True
        return False  # the kernel drops the lock when its holder dies, SIGKILL too
    except OSError:
        pass
    if len(words) >= 2 and words[0].isdigit():
        return start_time(int(words[0])) == words[1]
    return False
