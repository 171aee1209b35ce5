"""perflab's cache: what runs generate once and reuse across experiments
(today the http workload's file sets, `filesets/`), in one place that
`perflab cache` lists and `perflab cache prune` empties.

Where: $PERFLAB_CACHE, else $XDG_CACHE_HOME/perflab, else ~/.cache/perflab
(`cache_root`; every cache user asks it). Layout: ROOT/KIND/ENTRY, a
directory per entry, and beside it ENTRY.lock. A process that uses an entry
holds a shared flock on ENTRY.lock from before it generates or reads the
entry until it exits (the kernel drops the lock with the process, after a
SIGKILL too); `prune` takes an exclusive lock without waiting and skips an
entry it cannot lock: an entry in use by a running experiment is never
removed. The lock file's modification time is the entry's last use. A
generator's scratch directory (ENTRY.partial-PID) belongs to ENTRY: in use
while ENTRY's lock is held, else left over from a killed run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from perflab.guardian import pid_alive

ENV = "PERFLAB_CACHE"
LOCK_SUFFIX = ".lock"
PARTIAL = ".partial-"
FILESETS = "filesets"
# The engine's mark of a whole file set (crates/engine/src/http/fileset.rs).
FILESET_COMPLETE = ".perflab-fileset-complete"
FILESET_NAME = re.compile(r"^perflab-fileset-v\d+-\d+d-seed\d+$")
FILESET_DIR = re.compile(r"^dir\d{5}$")


def _fileset_is_ours(path: Path, partial: bool) -> bool:
    """A file set the engine made: whole (its mark), or a generator's scratch
    directory holding nothing but its dirNNNNN directories."""
    if not partial:
        return (path / FILESET_COMPLETE).is_file()
    try:
        return all(FILESET_DIR.match(c.name) and c.is_dir() and not c.is_symlink() for c in path.iterdir())
    except OSError:
        return False


# What perflab keeps in its cache, by kind: the entries' names, and how an
# entry (or a generator's scratch directory of it) is known to be perflab's.
# Nothing else in the cache's directory is listed or removed.
KINDS: dict[str, tuple[re.Pattern[str], Callable[[Path, bool], bool]]] = {
    FILESETS: (FILESET_NAME, _fileset_is_ours),
}

# Locks this process holds: entry path -> open lock file (kept open until exit).
_held: dict[Path, int] = {}


def cache_root() -> Path:
    """The cache's directory: $PERFLAB_CACHE, else $XDG_CACHE_HOME/perflab,
    else ~/.cache/perflab."""
    given = os.environ.get(ENV)
    if given:
        return Path(given).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser().absolute() / "perflab"


def kind_dir(kind: str) -> Path:
    """Where entries of one kind go ("filesets")."""
    return cache_root() / kind


def lock_path(entry: Path) -> Path:
    return entry.parent / (entry.name + LOCK_SUFFIX)


def use(entry: Path) -> None:
    """Mark `entry` as in use by this process until it exits (a shared lock
    on its lock file), and record now as its last use. Call it before
    generating or reading the entry; calling it again is cheap."""
    entry = entry.absolute()
    lock = lock_path(entry)
    now = time.time()
    if entry in _held:
        with contextlib.suppress(OSError):
            os.utime(lock, (now, now))
        return
    entry.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # a prune removed that lock file between our open and our lock: take the new one
    _held[entry] = fd
    os.utime(lock, (now, now))


def release(entry: Path) -> None:
    """Give up this process's hold on `entry` (tests; a run keeps it to the end)."""
    fd = _held.pop(entry.absolute(), None)
    if fd is not None:
        os.close(fd)


def disk_bytes(path: Path) -> int:
    """Bytes `path` takes on disk (allocated blocks; a file linked twice counts once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for base, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            try:
                st = os.lstat(os.path.join(base, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def free_bytes(path: Path) -> tuple[Path, int]:
    """The first existing directory at or above `path`, and the bytes free
    to an unprivileged user on its filesystem."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    st = os.statvfs(p)
    return p, st.f_bavail * st.f_frsize


def lock_holders(entry: Path) -> list[int]:
    """Pids that hold a lock on `entry`'s lock file (/proc/locks; [] when none or unknown)."""
    try:
        st = os.stat(lock_path(entry))
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in lines:
        fields = line.split()
        if "->" in fields:  # a waiter: "1: -> FLOCK ..."
            continue
        if len(fields) >= 6 and fields[5] == want and fields[4].isdigit():
            pids.append(int(fields[4]))
    return sorted(set(pids))


@dataclass
class Entry:
    kind: str
    name: str
    path: Path
    size_bytes: int
    last_used: float  # seconds since the epoch
    # A generator's scratch directories of this entry (killed or still running).
    partial: list[Path] = field(default_factory=list)
    holders: list[int] = field(default_factory=list)
    # False when only scratch directories of it exist.
    whole: bool = True
    made: float | None = None  # when the whole entry was made (seconds since the epoch)

    @property
    def in_use(self) -> bool:
        return bool(self.holders)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def entries(root: Path | None = None) -> list[Entry]:
    """Every entry of perflab's under the cache (ROOT/KIND/ENTRY, KINDS only),
    with its size, last use and the pids using it, oldest use first."""
    root = root or cache_root()
    found = []
    for kind, (pattern, ours) in KINDS.items():
        directory = root / kind
        if not directory.is_dir():
            continue
        names = set()
        for child in directory.iterdir():
            name = child.name
            if name.endswith(LOCK_SUFFIX):
                name = name[: -len(LOCK_SUFFIX)]
            name = name.split(PARTIAL, 1)[0]
            if pattern.match(name):
                names.add(name)
        for name in sorted(names):
            path = directory / name
            whole = path.is_dir() and not path.is_symlink() and ours(path, False)
            partial = [p for p in sorted(directory.glob(f"{name}{PARTIAL}*"))
                       if p.name[len(name) + len(PARTIAL):].isdigit() and p.is_dir() and not p.is_symlink()
                       and ours(p, True)]
            if not whole and not partial:
                continue
            used = [t for t in (_mtime(lock_path(path)), _mtime(path) if whole else None, *map(_mtime, partial))
                    if t is not None]
            size = (disk_bytes(path) if whole else 0) + sum(disk_bytes(p) for p in partial)
            holders = lock_holders(path) + [pid for pid in map(_partial_pid, partial) if pid_alive(pid)]
            found.append(Entry(kind, name, path, size, max(used, default=0.0), partial, sorted(set(holders)), whole,
                               _mtime(path) if whole else None))
    return sorted(found, key=lambda e: e.last_used)


def _partial_pid(path: Path) -> int:
    return int(path.name.rsplit(PARTIAL, 1)[1])


def remove(entry: Entry) -> bool:
    """Remove `entry` (its directory, scratch directories and lock file)
    unless a process holds its lock; True when it is gone."""
    lock = lock_path(entry.path)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if any(pid_alive(_partial_pid(p)) for p in entry.partial):
            return False  # a generator that took no lock (an older perflab, a benchmark) is writing it
        for path in [*([entry.path] if entry.whole else []), *entry.partial]:
            shutil.rmtree(path)
        lock.unlink(missing_ok=True)  # while still locked: a user waiting on it takes a new one
        return True
    finally:
        os.close(fd)
