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
start (`recover_orphans`, from `run`, `resume` and `check`) undoes it and
says what it undid.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

# /proc's one reader (perflab.proc): pid_alive and start_time are imported
# from here by those that journal a process.
from perflab.proc import cmdline, pid_alive, start_time

# At a normal exit, how long to wait for the guardian to undo what is left
# (a server's shutdown) before leaving it to finish on its own.
GUARDIAN_EXIT_WAIT_S = 15.0

# Each kind's undo function, as its module registered it (`register_undo`).
UNDO: dict[str, Callable[[dict[str, Any]], None]] = {}


def register_undo(kind: str, undo: Callable[[dict[str, Any]], None]) -> None:
    """`undo(args)` undoes a change of `kind` (journaled with `journal().add(kind,
    key, **args)`); the module that makes such changes calls this as it loads."""
    UNDO[kind] = undo


def remove_dir(args: dict[str, Any]) -> None:
    shutil.rmtree(args["path"], ignore_errors=True)


register_undo("remove-dir", remove_dir)  # a directory perflab made: remove it



def kill_process(args: dict[str, Any]) -> None:
    """SIGKILL args["pid"] when it is still the process journaled (its start
    time, args["start"]: a pid alone may have been reused), and wait up to
    3 s for it to go."""
    pid = int(args["pid"])
    start = args.get("start")
    if start is None or _start_time(pid) != start:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if not pid_alive(pid) or _start_time(pid) != start:
            return
        time.sleep(0.02)


# a process perflab started (a tracer: bpftrace, strace): SIGKILL it if the
# pid still has the journaled start time
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
    """Where every perflab on this machine keeps its journal file: PERFLAB_STATE_DIR,
    else /run/perflab (cleared at boot, as are most host changes), else a
    directory of this user's under /tmp."""
    given = os.environ.get("PERFLAB_STATE_DIR")
    if given:
        return Path(given)
    if os.access("/run", os.W_OK):
        return Path("/run/perflab")
    return Path(f"/tmp/perflab-state-{os.getuid()}")


_start_time = start_time


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Journal:
    """perflab's side: sends entries to a guardian, started on the first one,
    and keeps them in a file the guardian or a later perflab can act on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._entries: dict[str, dict[str, Any]] = {}
        self._out_dir: Path | None = None
        self._state_file: Path | None = None
        self._files_sent: list[str] | None = None

    def bind(self, out_dir: Path | None) -> None:
        """Keep a copy of the journal in this experiment's output directory
        (None: no longer)."""
        with self._lock:
            old, self._out_dir = self._out_dir, out_dir
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
        if self._state_file is None:
            directory = state_dir()
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._state_file = directory / f"journal-{os.getpid()}.json"
        text = json.dumps({
            "pid": os.getpid(), "start": _start_time(os.getpid()), "guardian": self.guardian_pid(),
            "out_dir": str(self._out_dir) if self._out_dir else None, "entries": list(self._entries.values()),
        }, indent=1)
        for path in self.files():
            _write_atomic(path, text)
        files = [str(p) for p in self.files()]
        if files != self._files_sent:
            # The guardian deletes them once it has undone everything.
            self._send({"op": "files", "paths": files})
            self._files_sent = files

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


def live_journals() -> list[dict[str, Any]]:
    """The journals of the other perflab processes on this machine that are
    alive now (pid and start time): what they have changed and not yet
    undone. Each record: pid, start, out_dir, entries."""
    directory = state_dir()
    out = []
    for path in sorted(directory.glob("journal-*.json")) if directory.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("pid") != os.getpid() and not _owner_gone(record):
            out.append(record)
    return out


def recover_orphans(extra: Path | None = None) -> list[str]:
    """Undo what a perflab and its guardian, both gone, left journaled: every
    journal file in the state directory whose owner is dead, and `extra` (an
    output directory's copy, for `resume`). Returns one line per journal
    file acted on, for the user. A live guardian is given time to finish."""
    directory = state_dir()
    candidates = sorted(directory.glob("journal-*.json")) if directory.is_dir() else []
    if extra is not None and (extra / JOURNAL_FILE).is_file():
        candidates.append(extra / JOURNAL_FILE)
    said = []
    done: set[tuple[Any, Any]] = set()
    for path in candidates:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or not _owner_gone(record):
            continue
        identity = (record.get("pid"), record.get("start"))
        guardian = record.get("guardian")
        if isinstance(guardian, int):
            deadline = time.monotonic() + GUARDIAN_WAIT_S
            while _start_time(guardian) is not None and _is_guardian(guardian) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not path.exists():  # the guardian finished and deleted it
                continue
        entries = [e for e in record.get("entries", []) if isinstance(e, dict) and _undoable(e)]
        if identity not in done:
            undone = _undo_all(entries)
            done.add(identity)
            where = f" (experiment {record['out_dir']})" if record.get("out_dir") else ""
            said.append(f"restored {len(undone)} of {len(entries)} host change(s) left by a killed perflab, "
                        f"pid {record.get('pid')}{where}: {', '.join(undone) or 'none'}")
        for leftover in (path, *(Path(record["out_dir"]) / JOURNAL_FILE for _ in [0] if record.get("out_dir"))):
            with contextlib.suppress(OSError):
                leftover.unlink()
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
