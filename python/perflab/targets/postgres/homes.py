"""Where a managed cluster lives (its home) and what perflab may do there.

The home is the target's directory in the output directory, unless the
server's user cannot reach that (root with an output directory under /root,
say): then a directory under /tmp, marked with its owner (the output
directory, and the pid and start time of the perflab using it), kept for the
next run in that output directory and swept once that directory is gone.
A data directory perflab made carries CREATED_MARK; one without it is never
touched."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from perflab.guardian import read_own_file
from perflab.hostctl.mounts import mounts_under
from perflab.hostctl.shareddir import own_dir, private_dir_problem, write_file
from perflab.proc import start_time
from perflab.targets.base import creatable_problems
from perflab.targets.postgres.postmaster import processes_in, server_alive
from perflab.targets.serverhome import reachable_by

# Written into the data directory by perflab's initdb: a cluster without it
# was not made by perflab, and perflab will not touch it.
CREATED_MARK = "perflab-created"
HOME_OWNER = "perflab-owner"


def created_mark(data_dir: Path) -> str | None:
    """The text of `data_dir`'s CREATED_MARK when perflab wrote it: a regular
    file of this user's that no one else may write (the data directory is
    the server's user's, who could plant one; guardian.read_own_file). None:
    no such mark, and the directory is not perflab's."""
    data, _ = read_own_file(data_dir / CREATED_MARK)
    return data.decode(errors="replace") if data is not None else None


def recorded_dirs(mark: str | None, role: str) -> list[Path]:
    """The directories of `role` ("wal_dir", "redo_dir", "undo_dir") a mark
    records perflab making or using at the time it made the cluster (lines
    "ROLE: PATH", and "ROLE created: PATH" for one it created itself)."""
    found = []
    for line in (mark or "").splitlines():
        for prefix in (f"{role}: ", f"{role} created: "):
            if line.startswith(prefix) and os.path.isabs(path := line[len(prefix):].strip()):
                found.append(Path(path))
    return list(dict.fromkeys(found))


def home_digest(workdir: Path) -> str:
    """The short name of a target directory: its home's under /tmp, its scratch filesystems'."""
    return hashlib.sha256(str(workdir.resolve()).encode()).hexdigest()[:12]


def cluster_home(workdir: Path, run_as: str | None) -> Path:
    """The home of the cluster of target directory `workdir` whose server runs
    as `run_as`: `workdir` itself where that user reaches it, else
    /tmp/perflab-<digest> (sweep_orphan_homes removes it once `workdir` is gone)."""
    if reachable_by(workdir, run_as):
        return workdir
    return Path(tempfile.gettempdir()) / home_name(workdir)


def home_name(workdir: Path) -> str:
    """The name of target directory `workdir`'s home under /tmp."""
    return f"perflab-{home_digest(workdir)}"


def _surely_gone(path: Path) -> bool:
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False  # not ours to see: assume it is there
    return False


def _read_home_mark(home: Path) -> tuple[str, int | None, str | None] | None:
    """A home's owner mark: (output directory, pid, start time) of the perflab
    that last used it (pid and start are None in a mark from before they were
    kept); None when the home has no mark."""
    try:
        lines = (home / HOME_OWNER).read_text().splitlines()
    except OSError:
        return None
    owner = lines[0].strip() if lines else ""
    pid, start = None, None
    if len(lines) > 1 and len(fields := lines[1].split()) == 2 and fields[0].isdigit():
        pid, start = int(fields[0]), fields[1]
    return owner, pid, start


def write_home_mark(home: Path, owner: Path) -> None:
    """Mark `home` as the kept cluster of output directory `owner`, in use by
    this process (pid and start time: a live perflab's home is never swept).
    Written under a fresh name (O_EXCL, O_NOFOLLOW) and renamed: nothing
    planted in the home is written through."""
    write_file(home / HOME_OWNER, f"{owner}\n{os.getpid()} {start_time(os.getpid())}\n")


def claim_home(home: Path, owner: Path) -> None:
    """Make the home under /tmp of output directory `owner`'s cluster, or
    take it again (a later run, a resume: it is found by its name). Its name
    is predictable, so another user may have made it first: it is taken
    only when it is a real directory of perflab's user, writable by no one
    else (own_dir), else refused with the path and the fix, never followed.
    Then marked with `owner` (write_home_mark)."""
    own_dir(home, 0o755)
    write_home_mark(home, owner)


def sweep_orphan_homes(tmp: Path | None = None, mine_too: bool = False,
                       done_with: Callable[[Path], bool] | None = None) -> list[tuple[Path, str]]:
    """Remove the cluster homes under /tmp (`PostgresTarget._home`: made when
    the server's user cannot reach the output directory) whose output
    directory is gone: they were kept for the next run in that directory,
    which can no longer come. Only a home with perflab's owner mark is
    touched, and never one whose perflab (the pid and start time in the mark)
    still lives, unless it is this process and `mine_too`; never one with a
    live server or anything mounted in it. `done_with` says which output
    directories are done with their homes (default: those that are gone; the
    tests add their own, finished ones).
    Returns (home, output directory) of each removed."""
    removed = []
    # Homes are found by their mark (the tag), and one counts only where its
    # name is the one its owner's directory gives (cluster_home): never by
    # a pattern of names another program's directories could match.
    for home in sorted((tmp or Path(tempfile.gettempdir())).iterdir()):
        if private_dir_problem(home) is not None:
            continue  # not perflab's own (another user's, a symlink): never read, never removed
        mark = _read_home_mark(home)
        if mark is None:
            continue  # not ours to judge (or made by a perflab before the mark)
        owner, pid, start = mark
        if not owner or home.name != home_name(Path(owner)):
            continue
        if not (done_with or _surely_gone)(Path(owner)):
            continue
        if pid is not None and start_time(pid) == start and not (mine_too and pid == os.getpid()):
            continue  # its perflab lives: its own to remove
        if any(server_alive(home / d) for d in ("pgdata", "perflab-data-fs/pgdata")) or mounts_under(home) \
                or processes_in(home, below=True):
            continue  # a server lives there (PostgreSQL's, MariaDB's: any process working in it)
        shutil.rmtree(home, ignore_errors=True)
        if not home.exists():
            removed.append((home, owner))
    return removed


def foreign_home(home: Path, workdir: Path) -> str | None:
    """Why `home`, the home cluster_home gives target directory `workdir`,
    is not perflab's own (None: it is `workdir`, or not made yet, or one
    claim_home would take again): then nothing in it is perflab's to remove."""
    if home == workdir or not os.path.lexists(home):
        return None
    return private_dir_problem(home)


def drop_emptied_home(home: Path, workdir: Path) -> None:
    """A home under /tmp that holds nothing but its owner mark, the
    server's log and empty mount points once the data is gone goes too;
    the log moves to the output directory `workdir`, where it is when the
    server's user can reach that. Never one that is not perflab's own."""
    if home == workdir or foreign_home(home, workdir) or not (home / HOME_OWNER).exists() or mounts_under(home):
        return
    kept = (HOME_OWNER, "server.log")
    if all(c.name in kept or (c.is_dir() and not any(c.iterdir())) for c in home.iterdir()):
        log = home / "server.log"
        if log.exists() and workdir.is_dir():
            with log.open("rb") as src, (workdir / "server.log").open("ab") as dst:
                shutil.copyfileobj(src, dst)
        shutil.rmtree(home, ignore_errors=True)


def wal_dir_problems(wal_dir: Path) -> list[tuple[str, str]]:
    key = "target.storage.wal_dir"
    if wal_dir.exists() and not wal_dir.is_dir():
        return [(key, f"{wal_dir} is not a directory; allowed: an empty or new directory")]
    if wal_dir.is_dir() and any(wal_dir.iterdir()):
        return [(key, f"{wal_dir} is not empty; allowed: an empty or new directory")]
    return creatable_problems(key, wal_dir)


def storage_problems(data_dir: Path, wal_dir: Path | None, run_as: str | None) -> list[tuple[str, str]]:
    """What stops initdb into `data_dir` (and `wal_dir`), found before anything is made."""
    key = "target.storage.data_dir"
    if (data_dir / "PG_VERSION").exists():
        if created_mark(data_dir) is None:
            return [(key, f"{data_dir} holds a PostgreSQL cluster that perflab did not create; perflab will "
                     "not touch it; allowed: an empty or new directory")]
        return []  # a perflab cluster, reused as it is
    if data_dir.exists() and not data_dir.is_dir():
        return [(key, f"{data_dir} is not a directory; allowed: an empty or new directory")]
    if data_dir.is_dir() and any(data_dir.iterdir()):
        return [(key, f"{data_dir} is not empty and is not a perflab cluster; nothing was changed; "
                 "allowed: an empty or new directory")]
    problems = creatable_problems(key, data_dir)
    if not problems and not reachable_by(data_dir.parent, run_as):
        problems.append((key, f"{data_dir.parent} is not reachable by user {run_as}, who runs the server; "
                         "allowed: a directory that user can reach (or run perflab as a non-root user)"))
    return problems + (wal_dir_problems(wal_dir) if wal_dir is not None else [])


def size_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for p in path.rglob("*"):
        with contextlib.suppress(OSError):
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
    return total


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
