"""One query timed to its last row, on the run's clock: shared by the query
workloads (tpch, ssb, queries), so that every per-query time means the same."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from perflab.endpoints import SqlEndpoint
from perflab.model import QueryTime, RunResult


class Query(Protocol):
    """What is needed to run and store one query: its stream, its place in the
    stream, its name and its text as run."""

    @property
    def stream(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def text(self) -> str: ...


def timed_query(endpoint: SqlEndpoint, conn: Any, q: Query, interrupt_after_s: float | None,
                now_s: Callable[[], float]) -> tuple[QueryTime, list[tuple[Any, ...]] | None, list[str]]:
    """Run one query to its last row; time from submission to the last row.
    `now_s` is the run's clock, for the start that is stored with the time;
    `interrupt_after_s`, a timeout the server does not enforce itself."""
    timer: threading.Timer | None = None
    if interrupt_after_s:
        timer = threading.Timer(interrupt_after_s, endpoint.interrupt, (conn,))
        timer.daemon = True
    started_s = now_s()
    started = time.perf_counter()
    try:
        if timer is not None:
            timer.start()
        cur = conn.execute(q.text)
        rows = cur.fetchall() if getattr(cur, "description", None) else []
        seconds = time.perf_counter() - started
        columns = [d[0] for d in (cur.description or [])]
        return QueryTime(q.stream, q.seq, q.name, seconds, "ok", text=q.text, started_s=started_s), rows, columns
    except Exception as exc:
        seconds = time.perf_counter() - started
        status = "timeout" if endpoint.is_timeout(exc) else "error"
        return (QueryTime(q.stream, q.seq, q.name, seconds, status, text=q.text, error=short_error(exc),
                          started_s=started_s), None, [])
    finally:
        if timer is not None:
            timer.cancel()


def short_error(exc: BaseException) -> str:
    """The first line of an error, with any secret masked."""
    from perflab.secrets import mask_secrets

    text = str(exc).strip().splitlines()
    return mask_secrets(text[0] if text else type(exc).__name__)


def per_query_stats(result: RunResult) -> None:
    """min/max/mean of each query's time across the streams it ran in."""
    by_query: dict[str, list[float]] = {}
    for t in result.queries:
        if t.status == "ok" and t.seconds is not None:
            by_query.setdefault(t.query, []).append(t.seconds)
    for name, times in by_query.items():
        result.add_metric(f"query.{name}.min_s", min(times), "s", f"{name}: fastest of {len(times)}", False)
        result.add_metric(f"query.{name}.max_s", max(times), "s", f"{name}: slowest of {len(times)}", False)
        result.add_metric(f"query.{name}.mean_s", statistics.fmean(times), "s", f"{name}: mean of {len(times)}", False)
