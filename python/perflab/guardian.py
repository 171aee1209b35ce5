"""The dead man's switch: what perflab starts or changes on the host is also
known to a guardian process, which outlives a killed perflab only to undo it.

perflab journals each change to its guardian *before* making it
(`journal().add(kind, key, **args)`) and withdraws it once it has undone the
change itself (`journal().remove(key)`). The guardian reads the journal from a
pipe whose write end only perflab holds, so end of file means perflab has
exited, however it died (SIGKILL included). The guardian then undoes what is
still journaled, newest first, and exits; after a clean exit the journal is
empty and it exits at once. It runs in a session of its own (a Ctrl-C or a
closed terminal does not reach it) with / as its directory (it keeps no mount
busy).

Each kind of change has one undo function, registered from below by the
module that makes that kind of change (`register_undo(kind, function)` as it
loads): the guardian names no module above it. Each journal entry carries
the module that registered its kind, and the guardian imports it when the
first entry of that kind arrives (so nothing is left to load when perflab
dies); only perflab's own modules are imported. A new host change (sysctl,
cgroup, mount, loop device, network namespace, firewall rule) registers its
undo function and calls `journal().add` before the change: the guardian
needs nothing else.
Undo functions must be idempotent (the change may already be undone) and
quick: everything is to be gone within 5 s of perflab's death.

The guardian can die too (killed with its perflab, the OOM killer). So the
journal is also a file, rewritten whole at every change: one per perflab
process in the state directory (`state_dir()`), and a copy in the output
directory of the experiment it serves (`bind`). The guardian deletes both
once it has undone everything; a clean exit deletes them. A file whose owner
and guardian are both gone is therefore work left undone: any later perflab
start (`recover_orphans`, from `run`, `resume`, `check` and `clean --yes`)
undoes it and says what it undid.

A journal is evidence, not an order (OpenSSH's StrictModes): a file is acted
on only in the state directory, and only when the directory and the file are
this user's own, real (no symbolic link) and writable by no one else. The copy
in an output directory is never acted on: it says what a killed perflab left,
and is deleted once the state directory's journal it copies has been undone.
A journal names the experiment it served (its store's path and experiment
id): `resume` and `clean --yes` of an experiment act only on the journals that
name that store and id; `run` and `check` on every orphan.
Each undo acts only on what perflab could have made: `remove-dir` a directory
named perflab-* (never through a link), `kill-process` a process that carries
the token perflab gave it (`TOKEN_VAR` in its environment), and each module's
own kinds likewise (a `host-file` only under /proc/sys and /sys).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import importlib
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

# /proc's one reader (perflab.proc): pid_alive and start_time are imported
# from here by those that journal a process.
from perflab.errors import UserError
from perflab.proc import cmdline, environ_has, pid_alive, start_time

# At a normal exit, how long to wait for the guardian to undo what is left
# (a server's shutdown) before leaving it to finish on its own.
GUARDIAN_EXIT_WAIT_S = 15.0

# Each kind's undo function, as its module registered it (`register_undo`).
UNDO: dict[str, Callable[[dict[str, Any]], None]] = {}


def register_undo(kind: str, undo: Callable[[dict[str, Any]], None]) -> None:
    """`undo(args)` undoes a change of `kind` (journaled with `journal().add(kind,
    key, **args)`); the module that makes such changes calls this as it loads."""
    UNDO[kind] = undo


# The environment variable that marks a process perflab started (its value a
# token perflab journals): a server's whole tree inherits it, a tracer carries it.
TOKEN_VAR = "PERFLAB_SERVER_TOKEN"
MADE_PREFIX = "perflab-"  # the name of every directory perflab makes outside an output directory


def made_dir_problem(path: str) -> str | None:
    """Why `path` cannot be a directory perflab made (None: it can): an
    absolute, normal path named perflab-*, a real directory (not a link)."""
    if not os.path.isabs(path) or os.path.normpath(path) != path or not os.path.basename(path).startswith(MADE_PREFIX):
        return f"{path!r} is not an absolute path named {MADE_PREFIX}*"
    try:
        st = os.lstat(path)
    except OSError:
        return "gone"
    return None if stat.S_ISDIR(st.st_mode) else "not a directory (a link, a file)"


def remove_dir(args: dict[str, Any]) -> None:
    """Remove a directory perflab made: one named perflab-*, never through a link."""
    path = args.get("path")
    if isinstance(path, str) and made_dir_problem(path) is None:
        shutil.rmtree(path, ignore_errors=True)


register_undo("remove-dir", remove_dir)  # a directory perflab made (named perflab-*): remove it



def new_token() -> str:
    """A token for a process perflab starts: put it in the process's
    environment as TOKEN_VAR and journal it with the process."""
    return secrets.token_hex(8)


def started_by_perflab(pid: int, start: Any, token: Any) -> bool:
    """`pid` is the process journaled (its start time: a pid may be reused)
    and perflab started it (its environment holds TOKEN_VAR=token): a pid and
    start time alone prove only that it is the same process, not whose."""
    if not isinstance(token, str) or not token or start is None or _start_time(pid) != start:
        return False
    # A process still in execve (just started) shows no command line and no
    # environment yet for a moment: wait for them, up to 1 s.
    deadline = time.monotonic() + 1.0
    while not environ_has(pid, f"{TOKEN_VAR}={token}"):
        if cmdline(pid) or time.monotonic() > deadline or _start_time(pid) != start:
            return False
        time.sleep(0.01)
    return True


def kill_process(args: dict[str, Any]) -> None:
    """SIGKILL args["pid"] when it is still the process journaled and carries
    the token perflab started it with (args["start"], args["token"]:
    `started_by_perflab`), and wait up to 3 s for it to go."""
    pid = int(args["pid"])
    start = args.get("start")
    if not started_by_perflab(pid, start, args.get("token")):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if not pid_alive(pid) or _start_time(pid) != start:
            return
        time.sleep(0.02)


# a process perflab started (a tracer: bpftrace, strace): SIGKILL it if the
# pid still has the journaled start time and the token in its environment
register_undo("kill-process", kill_process)


def _undo_function(entry: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """The undo of a journal entry: its kind's, registered when the module the
    entry names (perflab's own only) was imported. KeyError: none."""
    kind, module = entry["kind"], entry.get("module")
    if kind not in UNDO and isinstance(module, str) and module.split(".")[0] == "perflab":
        importlib.import_module(module)
    return UNDO[kind]


def _undoable(entry: dict[str, Any]) -> bool:
    try:
        _undo_function(entry)
    except Exception:
        return False
    return True


JOURNAL_FILE = "host-journal.json"  # the copy in an experiment's output directory
GUARDIAN_WAIT_S = 8.0  # how long recovery lets a live guardian finish first


def state_dir() -> Path:
    """Where every perflab of this user keeps its journal file: PERFLAB_STATE_DIR,
    else /run/perflab (root; cleared at boot, as are most host changes), else
    $XDG_RUNTIME_DIR/perflab (this user's own, 0700), else
    /tmp/perflab-state-UID, which is used only while it is this user's real
    directory that no one else may write (`trust_problem`)."""
    given = os.environ.get("PERFLAB_STATE_DIR")
    if given:
        return Path(given)
    if os.geteuid() == 0 or os.access("/run", os.W_OK, effective_ids=os.access in os.supports_effective_ids):
        return Path("/run/perflab")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and trust_problem(Path(runtime), directory=True) is None:
        return Path(runtime) / "perflab"
    return Path(f"/tmp/perflab-state-{os.geteuid()}")


def _trust_problem(st: os.stat_result, directory: bool) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not (stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)):
        return f"is not a {'directory' if directory else 'regular file'}"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"may be written by others (mode {stat.S_IMODE(st.st_mode):o})"
    if not directory and st.st_nlink != 1:
        return "has other hard links"
    return None


def trust_problem(path: Path, directory: bool = False) -> str | None:
    """Why perflab may not act on `path` (None: it may): it is not this
    user's own real directory (or regular file) that no one else may write."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return _trust_problem(st, directory)


def _state_dir_made() -> Path:
    """The state directory, made (0700) where it is not; a UserError when it is
    there but not this user's own (a link, another's, writable by others)."""
    directory = state_dir()
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o700, parents=True)
    why = trust_problem(directory, directory=True)
    if why is not None:
        raise UserError(f"perflab's state directory {directory} {why}; perflab keeps its journal of host changes "
                        "there and will not use it",
                        "remove it (perflab makes it again, this user's, mode 0700), or set PERFLAB_STATE_DIR to "
                        "a directory of this user's that no one else may write")
    return directory


def read_own_file(path: Path) -> tuple[bytes | None, str | None]:
    """(the content of `path`, None) when it is a file perflab may act on
    (this user's regular file, writable by no one else: `trust_problem`),
    else (None, why not). Opened without following a link, and judged on
    what was opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        return None, "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be read ({exc.strerror})"
    try:
        why = _trust_problem(os.fstat(fd), directory=False)
        if why is not None:
            return None, why
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(), None
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror})"
    finally:
        os.close(fd)


def read_trusted(path: Path) -> tuple[Any, str | None]:
    """(the JSON in `path`, None) when it is a file perflab may act on
    (`read_own_file`), else (None, why not)."""
    data, why = read_own_file(path)
    if data is None:
        return None, why
    try:
        return json.loads(data), None
    except ValueError:
        return None, "is not JSON"


_start_time = start_time


def _write_atomic(path: Path, text: str) -> None:
    """Write `path` whole, 0600, never through a link (a temporary file made
    anew beside it, then renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class Journal:
    """perflab's side: sends entries to a guardian, started on the first one,
    and keeps them in a file the guardian or a later perflab can act on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._entries: dict[str, dict[str, Any]] = {}
        self._out_dir: Path | None = None
        # the experiment served: its store's path and id (Store.experiment_id), which
        # `resume` and `clean` of that experiment match before they act on the journal
        self._experiment: tuple[str, str] | None = None
        self._state_file: Path | None = None
        self._files_sent: list[str] | None = None

    def bind(self, out_dir: Path | None, store: Path | None = None, experiment_id: str | None = None) -> None:
        """Keep a copy of the journal in this experiment's output directory
        (None: no longer), and name the experiment (its store's path and id)
        in the journal: only that experiment's `resume` and `clean` act on it."""
        with self._lock:
            old, self._out_dir = self._out_dir, out_dir
            self._experiment = (str(store), experiment_id) if out_dir and store and experiment_id else None
            if old is not None and old != out_dir:
                (old / JOURNAL_FILE).unlink(missing_ok=True)
            self._persist()

    def entries(self) -> list[dict[str, Any]]:
        """What is journaled now, oldest first (copies: kind, key, args)."""
        with self._lock:
            return [json.loads(json.dumps(e)) for e in self._entries.values()]

    def files(self) -> list[Path]:
        """The journal's files now (the state file, the output directory's copy)."""
        return [p for p in (self._state_file, self._out_dir and self._out_dir / JOURNAL_FILE) if p]

    def add(self, kind: str, key: str, **args: Any) -> None:
        """Journal a change before it is made; `key` names it for `remove`."""
        undo = UNDO.get(kind)
        if undo is None:
            raise ValueError(f"no undo for host change kind {kind!r}; register one with "
                             "perflab.guardian.register_undo in the module that makes the change")
        entry = {"op": "add", "kind": kind, "key": key, "args": args, "module": undo.__module__}
        with self._lock:
            self._state_path()  # a state directory perflab may not use is refused before the change
            self._entries.pop(key, None)  # re-added: it is the newest again
            self._entries[key] = entry
            self._send(entry)
            self._persist()

    def remove(self, key: str) -> None:
        """The change was undone by perflab itself: the guardian forgets it."""
        with self._lock:
            if self._entries.pop(key, None) is not None:
                self._send({"op": "remove", "key": key})
                self._persist()

    def _persist(self) -> None:
        """Rewrite the journal's files (removed when nothing is journaled)."""
        if not self._entries:
            for path in self.files():
                path.unlink(missing_ok=True)
            return
        self._state_path()
        text = json.dumps({
            "pid": os.getpid(), "start": _start_time(os.getpid()), "guardian": self.guardian_pid(),
            "out_dir": str(self._out_dir) if self._out_dir else None,
            "store": self._experiment[0] if self._experiment else None,
            "experiment_id": self._experiment[1] if self._experiment else None,
            "entries": list(self._entries.values()),
        }, indent=1)
        for path in self.files():
            _write_atomic(path, text)
        files = [str(p) for p in self.files()]
        if files != self._files_sent:
            # The guardian deletes them once it has undone everything.
            self._send({"op": "files", "paths": files})
            self._files_sent = files

    def _state_path(self) -> Path:
        if self._state_file is None:
            self._state_file = _state_dir_made() / f"journal-{os.getpid()}.json"
        return self._state_file

    def close(self) -> None:
        """At a normal exit: end the journal and wait for the guardian, which
        undoes whatever is still journaled (normally nothing) and exits. So a
        finished perflab leaves no guardian behind, not even for a moment."""
        with self._lock:
            proc, self._proc = self._proc, None
            entries = list(self._entries.values())
        if proc is not None and proc.poll() is None:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=GUARDIAN_EXIT_WAIT_S)
                # It has undone what was left and deleted the files.
                return
            return  # still at work: its files stay until it finishes
        # No guardian (never needed, or killed): undo what is left here.
        _undo_all(entries)
        with self._lock:
            self._entries.clear()
            self._persist()

    def guardian_pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _send(self, message: dict[str, Any]) -> None:
        line = (json.dumps(message) + "\n").encode()
        if self._proc is not None and self._proc.poll() is None and self._proc.stdin is not None:
            try:
                self._proc.stdin.write(line)
                self._proc.stdin.flush()
                return
            except BrokenPipeError:
                pass
        self._start()  # first use, or the guardian was killed: a new one gets everything

    def _start(self) -> None:
        package_root = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)}
        # stdin is the journal; the write end is not inherited by anything
        # perflab starts later (Python's pipes are close-on-exec), so its end
        # of file is perflab's exit alone.
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "perflab.guardian"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, cwd="/", env=env,
        )
        assert self._proc.stdin is not None
        self._proc.stdin.write(b"".join((json.dumps(e) + "\n").encode() for e in self._entries.values()))
        self._proc.stdin.flush()
        self._files_sent = None  # a new guardian is told of the files again


_JOURNAL = Journal()
atexit.register(_JOURNAL.close)


def journal() -> Journal:
    """This process's journal of host changes (one guardian per perflab)."""
    return _JOURNAL


def _undo_all(entries: list[dict[str, Any]]) -> list[str]:
    """Undo journal entries newest first; the keys of those undone."""
    undone = []
    for entry in reversed(entries):
        try:
            _undo_function(entry)(entry["args"])
            undone.append(entry["key"])
        except Exception:  # undo what can be undone
            continue
    return undone


def guard(stream: IO[bytes]) -> None:
    """The guardian: keep the journal until end of file, then undo what is left."""
    entries: dict[str, dict[str, Any]] = {}
    files: list[str] = []
    for line in stream:
        try:
            message = json.loads(line)
            if message["op"] == "add":
                _undo_function(message)  # imported now: nothing is left to load later
                entries.pop(message["key"], None)  # re-added: it is the newest again
                entries[message["key"]] = message
            elif message["op"] == "remove":
                entries.pop(message["key"], None)
            elif message["op"] == "files":
                files = list(message["paths"])
        except Exception:  # a malformed line must not cost the rest of the journal
            continue
    _undo_all(list(entries.values()))
    for path in files:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _owner_gone(record: dict[str, Any]) -> bool:
    pid = record.get("pid")
    return not isinstance(pid, int) or _start_time(pid) != record.get("start")


def _journal_files() -> tuple[Path, list[Path], str | None]:
    """The state directory, its journal files, and why they may not be acted
    on (None: they may, each file still judged on its own)."""
    directory = state_dir()
    if not directory.is_dir():
        return directory, [], None
    return directory, sorted(directory.glob("journal-*.json")), trust_problem(directory, directory=True)


def live_journals() -> list[dict[str, Any]]:
    """The journals of the other perflab processes on this machine that are
    alive now (pid and start time): what they have changed and not yet
    undone. Each record: pid, start, out_dir, entries. Only files perflab
    may trust are read (`read_trusted`)."""
    _, paths, why = _journal_files()
    out = []
    for path in paths if why is None else []:
        record, _ = read_trusted(path)
        if isinstance(record, dict) and record.get("pid") != os.getpid() and not _owner_gone(record):
            out.append(record)
    return out


def _same_perflab(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (a.get("pid"), a.get("start")) == (b.get("pid"), b.get("start"))


def _drop_copy(out_dir: Any, record: dict[str, Any]) -> None:
    """Delete the output directory's copy of `record` (the journal just
    undone), if it is that copy; a link is removed, never followed."""
    if not isinstance(out_dir, str) or not out_dir:
        return
    copy = Path(out_dir) / JOURNAL_FILE
    try:
        fd = os.open(copy, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return
    try:
        with os.fdopen(os.dup(fd), "rb") as f:
            found = json.loads(f.read())
    except (OSError, ValueError):
        return
    finally:
        os.close(fd)
    if isinstance(found, dict) and _same_perflab(found, record):
        with contextlib.suppress(OSError):
            copy.unlink()


def _names_experiment(record: dict[str, Any], experiment: tuple[str, str]) -> bool:
    """Does the journal `record` name this experiment (its store's path and id)?"""
    store, experiment_id = record.get("store"), record.get("experiment_id")
    return (isinstance(store, str) and isinstance(experiment_id, str) and experiment_id == experiment[1]
            and os.path.realpath(store) == os.path.realpath(experiment[0]))


def recover_orphans(extra: Path | None = None, experiment: tuple[str, str] | None = None) -> list[str]:
    """Undo what a perflab and its guardian, both gone, left journaled: every
    journal file in the state directory whose owner is dead, when the
    directory and the file are this user's and no one else may write them
    (`trust_problem`). Given `experiment` (a store's path and its experiment
    id: `resume` and `clean` of it), only the journals that name that very
    store and id are acted on; another experiment's, or one that names none,
    is left for its own `resume`/`clean`, or for the next `run` or `check`
    (no `experiment`: every orphan). `extra` (an output directory) is read for
    its copy of a journal, which is never acted on: what it lists and why it
    was not undone is said. Returns one line per journal file acted on,
    refused or left, for the user. A live guardian is given time to finish."""
    directory, candidates, refused = _journal_files()
    said = []
    done: list[dict[str, Any]] = []
    for path in candidates:
        record, why = read_trusted(path)
        if why is None and not isinstance(record, dict):
            why = "is not a journal"
        if why is None and not _owner_gone(record):
            continue
        why = why or refused and f"its directory {directory} {refused}"
        if why is not None:
            said.append(f"not acted on: {path} {why}; a journal is trusted only in perflab's state directory, "
                        "this user's own and writable by no one else (remove the file, or put it right)")
            continue
        if experiment is not None and not _names_experiment(record, experiment):
            whose = f"experiment {record['out_dir']}" if record.get("out_dir") else "no experiment"
            said.append(f"left: {path}, the journal of a killed perflab (pid {record.get('pid')}) of {whose}, "
                        f"not of {Path(experiment[0]).parent}: its own `perflab resume` or `perflab clean --yes`, "
                        "or the next `perflab run` or `perflab check`, undoes it")
            continue
        guardian = record.get("guardian")
        if isinstance(guardian, int):
            deadline = time.monotonic() + GUARDIAN_WAIT_S
            while _start_time(guardian) is not None and _is_guardian(guardian) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not path.exists():  # the guardian finished and deleted it
                continue
        if not any(_same_perflab(record, d) for d in done):
            entries = [e for e in record.get("entries", []) if isinstance(e, dict) and _undoable(e)]
            undone = _undo_all(entries)
            done.append(record)
            where = f" (experiment {record['out_dir']})" if record.get("out_dir") else ""
            said.append(f"restored {len(undone)} of {len(entries)} host change(s) left by a killed perflab, "
                        f"pid {record.get('pid')}{where}: {', '.join(undone) or 'none'}")
        with contextlib.suppress(OSError):
            path.unlink()
        _drop_copy(record.get("out_dir"), record)
    copy = extra / JOURNAL_FILE if extra is not None else None
    if copy is not None and copy.is_file() and not copy.is_symlink():
        try:
            record = json.loads(copy.read_text())
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict) and _owner_gone(record) and not any(_same_perflab(record, d) for d in done):
            entries = [e for e in record.get("entries", []) if isinstance(e, dict)]
            said.append(f"not acted on: {copy} lists {len(entries)} host change(s) of a perflab that is gone "
                        f"(pid {record.get('pid')}): a journal in an output directory is evidence, not an order; "
                        f"perflab undoes only the journals in its state directory {directory} (none is left for "
                        "that perflab: a restart clears it, and most host changes with it); check them by hand, "
                        "then delete the file")
    return said


def _is_guardian(pid: int) -> bool:
    return "perflab.guardian" in cmdline(pid)


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    guard(sys.stdin.buffer)


if __name__ == "__main__":
    # As perflab.guardian itself, not a copy named __main__: the modules it
    # imports register their undo kinds with perflab.guardian.
    import perflab.guardian

    perflab.guardian.main()
