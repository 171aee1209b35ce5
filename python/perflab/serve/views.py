"""What `perflab serve` shows, read from the store only, through read-only
connections: the plan and each run's state, a run's series decimated with
min/max envelopes, events as they come, the degradation table so far, and
the latest run's figures in Prometheus's text format.

A connection is opened per request (`mode=ro`: it cannot write, and in WAL
mode a reader never blocks the writer) and closed at its end, so no read
transaction stays open to hold back the writer's checkpoints. perflab's
writer lock is never taken. What costs (the report's ReportData, the
degradation tests, a long run's series) is cached and read again only when
the store changed (its files' sizes and times), or, for the series of a run
in flight, only the rows added since.
"""

from __future__ import annotations

import itertools
import math
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import numpy as np

from perflab.analysis import degradation
from perflab.collectors import COLLECTORS
from perflab.errors import UserError
from perflab.model import fmt_factors
from perflab.report.data import ReportData, load
from perflab.report.partial import Partial, attempt_partial
from perflab.store import RUN_STATUSES, SCHEMA_VERSION, STORE_NAME, Store, writer_alive
from perflab.store_check import inspect

# The degradation table's least runs for a trend, the report's.
DEGRADATION_MIN_RUNS = degradation.MIN_RUNS
# Points per figure: enough for a wide screen, few enough for a three-day run.
DEFAULT_POINTS = 600
MAX_POINTS = 5000
MAX_EVENTS = 500
# OSDL's durability graphs, per run: free, buff, cache; bi, bo; us, sy, id, wa (vmstat's series).
OS_SERIES = ("free_kib", "buff_kib", "cache_kib", "bi_kib_per_s", "bo_kib_per_s",
             "us_pct", "sy_pct", "id_pct", "wa_pct")
OS_SOURCE = "vmstat"

T = TypeVar("T")


class BadRequest(ValueError):
    """A parameter that is not what the endpoint takes (HTTP 400)."""


class NotFound(LookupError):
    """No such run (HTTP 404)."""


def decimate(series: Sequence[Sequence[float | None]] | np.ndarray,
             n_buckets: int) -> list[tuple[float, float, float, float]]:
    """(t, min, max, mean) per bucket of a time series of (t, value) rows in
    time order: the span from the first t to the last cut into `n_buckets`
    equal buckets, each empty one left out, each bucket's t its first
    sample's. Every value lies within its bucket's [min, max], so a spike of
    one second stays visible in a three-day series. A missing value (None:
    a second with nothing to measure) counts in no figure; a bucket of only
    missing values is (t, nan, nan, nan), a gap. At most n_buckets rows; a
    series no longer than that is returned point by point."""
    if n_buckets < 1:
        raise ValueError("n_buckets must be at least 1")
    rows = np.asarray(series, dtype=float).reshape(-1, 2)
    if len(rows) == 0:
        return []
    t, v = rows[:, 0], rows[:, 1]
    if len(rows) <= n_buckets:
        return [(float(a), float(b), float(b), float(b)) for a, b in zip(t, v, strict=True)]
    span = t[-1] - t[0]
    index = (np.zeros(len(t), dtype=np.int64) if span <= 0
             else np.minimum(((t - t[0]) / span * n_buckets).astype(np.int64), n_buckets - 1))
    starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
    finite = np.isfinite(v)
    lo = np.fmin.reduceat(np.where(finite, v, np.inf), starts)
    hi = np.fmax.reduceat(np.where(finite, v, -np.inf), starts)
    counts = np.add.reduceat(finite.astype(np.int64), starts)
    sums = np.add.reduceat(np.where(finite, v, 0.0), starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    lo = np.where(counts > 0, lo, np.nan)
    hi = np.where(counts > 0, hi, np.nan)
    return [(float(a), float(b), float(c), float(d)) for a, b, c, d in zip(t[starts], lo, hi, mean, strict=True)]


def finite(value: Any) -> Any:
    """NaN and infinities as None (JSON has neither), inside lists and dicts too."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def parse_int(params: dict[str, list[str]], name: str, default: int | None = None,
              low: int | None = None, high: int | None = None) -> int:
    """One whole-number parameter, within bounds; BadRequest otherwise."""
    given = params.get(name)
    if not given:
        if default is None:
            raise BadRequest(f"{name} is required")
        return default
    if len(given) > 1 or not given[0].lstrip("-").isdigit() or len(given[0]) > 18:
        raise BadRequest(f"{name} must be one whole number")
    value = int(given[0])
    if (low is not None and value < low) or (high is not None and value > high):
        raise BadRequest(f"{name} must be from {low} to {high}")
    return value


@dataclass
class _RunSeries:
    """A run's raw series as read so far, for reading only what was added since."""

    key: tuple[Any, ...]  # the run's status, attempts, start: a new attempt reads afresh
    rows: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)


class StoreView:
    """The store of one output directory, read for the server's requests."""

    def __init__(self, out_dir: Path) -> None:
        self.dir = Path(out_dir).resolve()
        self.path = self.dir / STORE_NAME
        if not self.path.is_file():
            raise UserError(f"{out_dir} holds no perflab store ({STORE_NAME})",
                            "give the output directory of a `perflab run` (it printed the path)")
        inspect(self.path).refuse(self.dir, write=False, reads=("series", "event", "metric"))
        with self.connect() as store:
            version = store.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if version is None or version[0] != str(SCHEMA_VERSION):
            raise UserError(f"{self.path}: store schema {version[0] if version else '?'} is not {SCHEMA_VERSION}, "
                            "and `perflab serve` never writes a store to upgrade it",
                            f"run `perflab show {out_dir}` once (it upgrades the store), or serve it with the "
                            "perflab version that wrote it")
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[Any, Any]] = {}
        self._series: dict[int, _RunSeries] = {}
        self._partials: dict[tuple[Any, ...], Partial | None] = {}

    # ------------------------------------------------------------ reading

    def connect(self) -> _Reader:
        return _Reader(self.path)

    @staticmethod
    def signature(store: Store) -> tuple[Any, ...]:
        """Changes whenever what the report reads does (the experiment, the
        runs, their attempts, effects and figures), and not when a running
        run adds a second's samples: the report's reading of the store is
        built again when a run ends, not at every poll. (A signature of the
        file's size and time changed every second during a run, and the
        page's polls then cost a reading of every run each time: serve's
        CPU grew with the number of runs.)"""
        row = store.conn.execute(
            "SELECT (SELECT group_concat(created_at || seed || length(spec_text) || factors_json) FROM experiment), "
            "(SELECT count(*) || ':' || total(attempts) || ':' || ifnull(max(started_at), '') || ':' "
            "|| ifnull(max(ended_at), '') || ':' || sum(status = 'done') || ':' || sum(status = 'failed') || ':' "
            "|| sum(status = 'running') || ':' || total(length(flags_json)) FROM run), "
            "(SELECT count(*) || ':' || ifnull(max(rowid), 0) FROM attempt), "
            "(SELECT count(*) || ':' || ifnull(max(rowid), 0) FROM effect), "
            "(SELECT count(*) || ':' || ifnull(max(rowid), 0) FROM metric)").fetchone()
        return tuple(row)

    def cached(self, name: str, build: Callable[[Store], T], store: Store) -> T:
        """`build(store)`, read again only when what it reads changed."""
        sig = self.signature(store)
        with self._lock:
            hit = self._cache.get(name)
        if hit is not None and hit[0] == sig:
            value: T = hit[1]
            return value
        value = build(store)
        with self._lock:
            self._cache[name] = (sig, value)
        return value

    def data(self, store: Store) -> ReportData:
        """The report's own reading of the store (report.data.load): the same numbers."""
        return self.cached("data", load, store)

    # ------------------------------------------------------------ state

    def state(self) -> dict[str, Any]:
        """The plan, each run's state and figures, the degradation so far:
        built again only when what the report reads changed (a run started
        or ended), as a long plan's thousands of runs were listed afresh at
        every poll; whether the writer is alive and a report exists, always."""
        with self.connect() as store:
            built = self.cached("state", self._state, store)
        return {**built, "writing": writer_alive(self.dir), "report": (self.dir / "report.html").is_file()}

    def _state(self, store: Store) -> dict[str, Any]:
        d = self.data(store)
        deg = self.cached("degradation", lambda s: degradation_so_far(d), store)
        started = {r["id"]: (r["started_at"], r["ended_at"], r["attempts"], r["error"])
                   for r in store.conn.execute("SELECT id, started_at, ended_at, attempts, error FROM run")}
        earlier: dict[int, list[dict[str, Any]]] = {}
        for a in store.attempts():
            earlier.setdefault(a["run_id"], []).append(self._attempt(a))
        counts = {s: 0 for s in RUN_STATUSES}
        for r in d.runs:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        current = current_run(d.runs)
        out: dict[str, Any] = finite({
            "experiment": {"name": d.experiment["name"], "created_at": d.experiment["created_at"],
                           "factors": d.experiment["factors"]},
            "counts": counts,
            "current": current,
            "headline": d.headline,
            "metrics": {m.name: {"unit": m.unit, "higher_is_better": m.higher_is_better} for m in d.metrics.values()},
            "runs": [{
                "id": r["id"], "combination": r["combination"], "repetition": r["repetition"],
                "factors": r["factors"], "label": fmt_factors(r["factors"], ", "), "status": r["status"],
                "seconds": r["seconds"], "flags": r["flags"], "metrics": d.values.get(r["id"], {}),
                "started_at": started[r["id"]][0], "ended_at": started[r["id"]][1],
                "attempts": started[r["id"]][2], "error": started[r["id"]][3],
                "earlier_attempts": earlier.get(r["id"], []),
            } for r in d.runs],
            "degradation": deg,
        })
        return out

    def _attempt(self, a: dict[str, Any]) -> dict[str, Any]:
        """An earlier attempt and what it measured before it stopped (its kept
        files never change: read once)."""
        key = (a["run_id"], a["attempt"], a["files"])
        with self._lock:
            known = key in self._partials
            partial = self._partials.get(key)
        if not known:
            partial = attempt_partial(self.dir, a)
            with self._lock:
                self._partials[key] = partial
        return {"attempt": a["attempt"], "status": a["status"], "seconds": a["seconds"], "files": a["files"],
                "partial": None if partial is None else partial.describe()}

    # ------------------------------------------------------------ series

    def series(self, run_id: int, points: int, window_s: float = degradation.WINDOW_S) -> dict[str, Any]:
        """Every series of a run, decimated to `points` buckets, and each one's
        latest value: the driver's (rate, p99, errors) apart from the
        collectors', and OSDL's vmstat figures named. Each of the driver's
        also in whole windows of `window_s` with a trend over them
        (analysis.degradation.within_run): did the run slow within itself."""
        with self.connect() as store:
            row = store.conn.execute("SELECT status, attempts, started_at FROM run WHERE id=?", (run_id,)).fetchone()
            if row is None:
                raise NotFound(f"no run {run_id}")
            rows = self._run_rows(store, run_id, (row["status"], row["attempts"], row["started_at"]))
            metrics = self.data(store).metrics
            queries = queries_so_far(store.conn, run_id)
        collectors = set(COLLECTORS.names())
        out: dict[str, Any] = {}
        for (source, name), values in sorted(rows.items()):
            buckets = decimate(values, points)
            out[f"{source}.{name}"] = {
                "source": source, "name": name, "collector": source in collectors,
                "t": [b[0] for b in buckets], "min": [b[1] for b in buckets],
                "max": [b[2] for b in buckets], "mean": [b[3] for b in buckets],
                "last": [float(values[-1, 0]), float(values[-1, 1])] if len(values) else None,
                "samples": len(values),
            }
            if source not in collectors:
                # which way is worse: the run's figure of the same name says, if it has one
                info = metrics.get(name)
                w = degradation.within_run(values[:, 0], values[:, 1], info.higher_is_better if info else None,
                                           window_s)
                out[f"{source}.{name}"]["windows"] = {
                    "window_s": w.window_s, "starts": w.starts, "means": w.means, "change_pct": w.change_pct,
                    "slope": None if w.trend is None else [w.trend.slope, w.trend.slope_low, w.trend.slope_high,
                                                           w.trend.p_value],
                    "method": None if w.trend is None else w.trend.method, "verdict": w.verdict,
                }
        return finite({"run": run_id, "status": row["status"], "points": points, "series": out,
                       "os": [f"{OS_SOURCE}.{n}" for n in OS_SERIES if f"{OS_SOURCE}.{n}" in out],
                       "queries": queries})

    def _run_rows(self, store: Store, run_id: int, key: tuple[Any, ...]) -> dict[tuple[str, str], np.ndarray]:
        """A run's series as (t, value) arrays: read whole once, then only the
        rows after the last one read (a series is written in time order).
        One run is kept: the one the page looks at."""
        with self._lock:
            cached = self._series.get(run_id)
        if cached is None or cached.key != key:
            cached = _RunSeries(key)
        for source, name in series_names(store.conn, run_id):
            have = cached.rows.get((source, name))
            after = float(have[-1, 0]) if have is not None and len(have) else -math.inf
            # numbers only (a missing value as a flag), so numpy reads them flat, not tuple by tuple
            new = store.conn.execute(
                "SELECT t, value IS NULL, ifnull(value, 0) FROM series WHERE run_id=? AND source=? AND name=? "
                "AND t>? ORDER BY t", (run_id, source, name, after)).fetchall()
            if new:
                flat = np.fromiter(itertools.chain.from_iterable(new), dtype=float, count=3 * len(new)).reshape(-1, 3)
                added = np.column_stack([flat[:, 0], np.where(flat[:, 1] != 0, np.nan, flat[:, 2])])
                cached.rows[(source, name)] = added if have is None else np.concatenate([have, added])
            elif have is None:
                cached.rows[(source, name)] = np.empty((0, 2))
        with self._lock:
            self._series = {run_id: cached}
        return dict(cached.rows)

    # ------------------------------------------------------------ events

    def events(self, after: int, run_id: int | None) -> dict[str, Any]:
        """Events after row `after` (the page polls with the last it has), at most MAX_EVENTS."""
        sql = "SELECT rowid AS id, run_id, t, at, kind, message FROM event WHERE rowid > ?"
        args: tuple[Any, ...] = (after,)
        if run_id is not None:
            sql += " AND run_id = ?"
            args += (run_id,)
        with self.connect() as store:
            rows = [dict(r) for r in store.conn.execute(sql + " ORDER BY rowid LIMIT ?", (*args, MAX_EVENTS))]
        return finite({"events": rows, "last": rows[-1]["id"] if rows else after})

    # ------------------------------------------------------------ metrics

    def metrics_text(self) -> str:
        """The latest run's figures and the runs by state, in Prometheus's text format."""
        from perflab.serve.openmetrics import render

        with self.connect() as store:
            d = self.data(store)
            run_id = current_run(d.runs)
            latest = latest_values(store.conn, run_id) if run_id is not None else {}
        return render(d, run_id, latest)


class _Reader:
    """A Store over a read-only connection, closed on leaving the block."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> Store:
        conn = sqlite3.connect(f"file:{quote(str(self.path))}?mode=ro", uri=True, timeout=10,
                               isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA query_only=ON")
        conn.execute("PRAGMA busy_timeout=10000")  # a reader waits out the writer's checkpoint, never fails
        self.store = Store(self.path, conn)
        self.store.read_only = "perflab serve reads only"
        return self.store

    def __exit__(self, *exc: object) -> None:
        self.store.conn.close()


def queries_so_far(conn: sqlite3.Connection, run_id: int, latest: int = 5) -> dict[str, Any] | None:
    """A query workload's progress (TPC-H's streams, SSB, queries): what each
    stream has completed so far and the latest queries, as they are stored
    when they complete; None for a run that records no queries. A TPC-H run
    has no per-second rate, so this is its live figure."""
    streams = [{"stream": r[0], "done": r[1], "failed": r[2], "seconds": r[3]} for r in conn.execute(
        "SELECT stream, count(*), sum(status <> 'ok'), total(seconds) FROM query WHERE run_id=? "
        "GROUP BY stream ORDER BY stream", (run_id,))]
    if not streams:
        return None
    last = [{"stream": r[0], "query": r[1], "seconds": r[2], "status": r[3], "ended_s": r[4]} for r in conn.execute(
        "SELECT stream, query, seconds, status, started_s + ifnull(seconds, 0) FROM query WHERE run_id=? "
        "ORDER BY rowid DESC LIMIT ?", (run_id, latest))]
    return {"streams": streams, "latest": last, "done": sum(s["done"] for s in streams),
            "failed": sum(s["failed"] for s in streams)}


def current_run(runs: list[dict[str, Any]]) -> int | None:
    """The run in flight, else the last one that started (its figures are the latest)."""
    running = [r["id"] for r in runs if r["status"] == "running"]
    if running:
        return max(running)
    started = [r for r in runs if r["status"] in ("done", "failed")]
    if not started:
        return None
    return max(started, key=lambda r: (r.get("ended_at") or "", r["id"]))["id"]


def series_names(conn: sqlite3.Connection, run_id: int) -> list[tuple[str, str]]:
    """A run's (source, name) pairs by seeks on the series index, not a scan
    of a long run's rows (a loose index scan)."""
    out: list[tuple[str, str]] = []
    row = conn.execute("SELECT source, name FROM series WHERE run_id=? ORDER BY source, name LIMIT 1",
                       (run_id,)).fetchone()
    while row is not None:
        out.append((row[0], row[1]))
        row = conn.execute("SELECT source, name FROM series WHERE run_id=? AND source=? AND name>? "
                           "ORDER BY source, name LIMIT 1", (run_id, row[0], row[1])).fetchone() or \
            conn.execute("SELECT source, name FROM series WHERE run_id=? AND source>? ORDER BY source, name LIMIT 1",
                         (run_id, row[0])).fetchone()
    return out


def latest_values(conn: sqlite3.Connection, run_id: int) -> dict[tuple[str, str], tuple[float, float | None]]:
    """Each series' last (t, value) in a run."""
    out = {}
    for source, name in series_names(conn, run_id):
        row = conn.execute("SELECT t, value FROM series WHERE run_id=? AND source=? AND name=? ORDER BY t DESC "
                           "LIMIT 1", (run_id, source, name)).fetchone()
        if row is not None:
            out[(source, name)] = (float(row[0]), None if row[1] is None else float(row[1]))
    return out


def degradation_so_far(d: ReportData) -> list[dict[str, Any]]:
    """OSDL's table per combination with two or more finished runs: each run's
    headline figure and its change from the first, and, from
    DEGRADATION_MIN_RUNS runs, the report's trend and change-point verdict
    (analysis.degradation.assess with the report's arguments)."""
    out = []
    for combo in d.combinations:
        for name in d.headline:
            ids = [r for r in combo.run_ids if name in d.values.get(r, {})]
            if len(ids) < 2:
                continue
            values = [d.values[r][name] for r in ids]
            row: dict[str, Any] = {
                "combination": combo.index, "label": combo.label(), "metric": name,
                "unit": d.metrics[name].unit, "runs": ids,
                "repetitions": [d.runs_by_id[r]["repetition"] for r in ids], "values": values,
                "change_pct": degradation.change_from_first_pct(values),
                "verdict": None, "slope": None, "change_points": [],
            }
            if len(ids) >= DEGRADATION_MIN_RUNS:
                result = degradation.assess(values, d.metrics[name].higher_is_better, seed=d.experiment["seed"],
                                            positions=row["repetitions"])
                row["verdict"] = result.verdict
                if result.trend is not None:
                    tr = result.trend
                    row["slope"] = [tr.slope, tr.slope_low, tr.slope_high, tr.p_value]
                row["change_points"] = [{"before_run": ids[cp.index], "change_pct": cp.change_pct,
                                         "p_value": cp.p_value} for cp in result.change_points]
            else:
                row["verdict"] = (f"{len(ids)} runs so far: the trend and change-point tests start at "
                                  f"{DEGRADATION_MIN_RUNS}")
            out.append(row)
    return out
