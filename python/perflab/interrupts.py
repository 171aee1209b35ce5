"""Stopping perflab with Ctrl-C or SIGTERM: the signal raises Interrupted in
the main thread (every `finally`, server teardown above all, runs) and sets
an Event the runs take as their cancel; while tearing down, a second signal
is ignored."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from perflab.errors import Interrupted


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[threading.Event]:
    """SIGINT and SIGTERM raise Interrupted in the main thread, so every
    `finally` (server teardown above all) runs.

    The exception alone is not enough: a signal that lands while a weakref
    callback or a __del__ runs has its exception printed and dropped by
    Python ("Exception ignored in ..."), and the experiment went on to the
    end (seen once in test_sigint_stops_the_server_and_keeps_finished_runs).
    So the handler also sets the Event this yields: runs take it as their
    cancel (the engine checks it every 200 ms and raises Interrupted), and
    the runner checks it between runs."""
    requested = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        requested.set()
        raise Interrupted(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield requested
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """While tearing down, a second Ctrl-C must not leave a server behind."""
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
