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

Each kind of change has one undo function, named in UNDO ("module:function",
imported when the first entry of that kind arrives, so nothing is left to load
when perflab dies). A new host change (sysctl, cgroup, mount, loop device,
network namespace, firewall rule) adds its undo function and a line here, and
calls `journal().add` before the change: the guardian needs nothing else.
Undo functions must be idempotent (the change may already be undone) and
quick: everything is to be gone within 5 s of perflab's death.
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
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

# At a normal exit, how long to wait for the guardian to undo what is left
# (a server's shutdown) before leaving it to finish on its own.
GUARDIAN_EXIT_WAIT_S = 15.0

UNDO = {
    "postgres": "perflab.targets.postgres:undo_server",  # a managed server: stop it
    "remove-dir": "perflab.guardian:remove_dir",  # a directory perflab made: remove it
    "loop": "perflab.hostctl.scratchfs:undo_loop",  # a loop device on a scratch fs's file: detach it
    "mount": "perflab.hostctl.scratchfs:undo_mount",  # a scratch filesystem: unmount it (lazily if busy)
}


def remove_dir(args: dict[str, Any]) -> None:
    shutil.rmtree(args["path"], ignore_errors=True)


def _undo_function(kind: str) -> Callable[[dict[str, Any]], None]:
    module, _, name = UNDO[kind].partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


class Journal:
    """perflab's side: sends entries to a guardian, started on the first one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._entries: dict[str, dict[str, Any]] = {}

    def add(self, kind: str, key: str, **args: Any) -> None:
        """Journal a change before it is made; `key` names it for `remove`."""
        if kind not in UNDO:
            raise ValueError(f"no undo for host change kind {kind!r}; add it to perflab.guardian.UNDO")
        entry = {"op": "add", "kind": kind, "key": key, "args": args}
        with self._lock:
            self._entries[key] = entry
            self._send(entry)

    def remove(self, key: str) -> None:
        """The change was undone by perflab itself: the guardian forgets it."""
        with self._lock:
            if self._entries.pop(key, None) is not None:
                self._send({"op": "remove", "key": key})

    def close(self) -> None:
        """At a normal exit: end the journal and wait for the guardian, which
        undoes whatever is still journaled (normally nothing) and exits. So a
        finished perflab leaves no guardian behind, not even for a moment."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=GUARDIAN_EXIT_WAIT_S)

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


_JOURNAL = Journal()
atexit.register(_JOURNAL.close)


def journal() -> Journal:
    """This process's journal of host changes (one guardian per perflab)."""
    return _JOURNAL


def guard(stream: IO[bytes]) -> None:
    """The guardian: keep the journal until end of file, then undo what is left."""
    entries: dict[str, tuple[Callable[[dict[str, Any]], None], dict[str, Any]]] = {}
    for line in stream:
        try:
            message = json.loads(line)
            if message["op"] == "add":
                entries.pop(message["key"], None)  # re-added: it is the newest again
                entries[message["key"]] = (_undo_function(message["kind"]), message["args"])
            elif message["op"] == "remove":
                entries.pop(message["key"], None)
        except Exception:  # a malformed line must not cost the rest of the journal
            continue
    for function, args in reversed(list(entries.values())):
        try:
            function(args)
        except Exception:  # undo what can be undone
            continue


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    guard(sys.stdin.buffer)


if __name__ == "__main__":
    main()
