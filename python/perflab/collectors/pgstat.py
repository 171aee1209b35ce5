"""pgstat: PostgreSQL's cumulative statistics per interval, and sampled wait events.

Every `interval` it reads, on a connection of its own, whichever of these the
server has: pg_stat_database (the workload's database), pg_stat_bgwriter,
pg_stat_checkpointer (17+), pg_stat_wal (14+) and pg_stat_io (16+, summed per
backend type). Every numeric column is a cumulative counter except the
gauges below; each becomes `<view>.<column>_per_s` over the measured
interval (columns ending in `_time` are milliseconds, so those are ms/s), and
the run's totals become metrics `pgstat.<view>.<column>`. Columns are taken
as the server reports them, so a new server version's columns just appear.

Wait events are sampled from pg_stat_activity at `wait_event_hz` (default
10 Hz), as Active Session History does: each sample counts the sessions that
are not idle (client backends in a transaction or a statement, and
background processes outside their idle main loop, wait type "Activity"), by
wait event type and name; "CPU:running" when a session waits on nothing
(it is on a CPU or waiting for one). Each
interval's series `wait.<type>.<event>` is the mean number of such sessions.

The connection goes to the maintenance database "postgres" when the
workload uses another, so its own queries do not count in the workload
database's commits; when it cannot, its own transactions are subtracted.
"""

from __future__ import annotations

import time
from collections import Counter
from decimal import Decimal
from typing import Any

from pydantic import Field

from perflab.collectors.base import (
    MONITOR_PIDS,
    CollectorContext,
    CollectorSettings,
    CollectorUnavailable,
    SamplingCollector,
    TelemetryPanel,
)
from perflab.endpoints import Capability, PgWireEndpoint
from perflab.model import Event, RunResult

# The telemetry figure's wait-event panel: the largest this many, by sessions.
TOP_WAIT_EVENTS = 6

MAINTENANCE_DB = "postgres"
GAUGES = {"numbackends", "op_bytes"}
SKIP_COLUMNS = {"datid", "datname", "stats_reset", "backend_type", "object", "context"}

WAIT_EVENTS_SQL = """
SELECT coalesce(wait_event_type, 'CPU'), coalesce(wait_event, 'running'), count(*)
FROM pg_stat_activity
WHERE pid <> pg_backend_pid()
  AND CASE WHEN backend_type = 'client backend' THEN state IS DISTINCT FROM 'idle'
           ELSE wait_event_type IS DISTINCT FROM 'Activity' END
GROUP BY 1, 2
"""
WAIT_STATEMENT = b"perflab_wait_events"
# each view as one JSON value, so one statement reads them all
VIEW_JSON = {
    "db": "(SELECT row_to_json(v) FROM pg_stat_database v WHERE datname = %(db)s)",
    "bgwriter": "(SELECT row_to_json(v) FROM pg_stat_bgwriter v)",
    "checkpointer": "(SELECT row_to_json(v) FROM pg_stat_checkpointer v)",
    "wal": "(SELECT row_to_json(v) FROM pg_stat_wal v)",
    "io": "(SELECT json_agg(v) FROM pg_stat_io v)",
}


NOT_POSTGRES = "the target is not a PostgreSQL server"


class PgstatSettings(CollectorSettings):
    wait_event_hz: float = Field(default=10.0, ge=0, le=100, description="wait-event samples per second (0: off)")


def _numeric(row: dict[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in row.items()
        if k not in SKIP_COLUMNS and isinstance(v, (int, float, Decimal)) and not isinstance(v, bool)
    }


def _unit(column: str) -> str:
    if column.endswith("_time"):
        return "ms"
    if "bytes" in column:
        return "B"
    return "count"


class PgstatCollector(SamplingCollector):
    Settings = PgstatSettings
    settings: PgstatSettings
    default_on = True
    panels = (
        TelemetryPanel(f"PostgreSQL wait events (largest {TOP_WAIT_EVENTS})", "sessions", name_like="wait.%",
                       label_of=lambda name: name[len("wait."):].replace(".", ":", 1), top=TOP_WAIT_EVENTS,
                       drop_zero=True, stacked=True),
    )
    needs = frozenset({Capability.POSTGRES_WIRE})

    def __init__(self, name: str, settings: PgstatSettings) -> None:
        super().__init__(name, settings)
        self._conn: Any = None
        self._views: list[str] = []
        self._stats_sql = ""
        self._dbname = ""
        self._same_db = False
        self._own_xacts = 0
        self._notes: list[str] = []
        self._first: dict[str, float] | None = None
        self._last: dict[str, float] | None = None
        self._last_t_ns = 0
        self._next_stats_ns = 0
        self._waits: Counter[tuple[str, str]] = Counter()
        self._wait_ticks = 0
        self._waits_run: Counter[tuple[str, str]] = Counter()
        self._wait_ticks_run = 0
        self._wait_names: set[tuple[str, str]] = set()
        self._wait_sampling = False
        self._wait_pending = False
        self._backend_pid = 0

    # ------------------------------------------------------------ set-up

    def _connect(self, endpoint: PgWireEndpoint) -> Any:
        import psycopg
        from psycopg.conninfo import make_conninfo

        self._same_db = endpoint.dbname == MAINTENANCE_DB
        try:
            if self._same_db:
                raise psycopg.OperationalError("same database")
            conninfo = make_conninfo(endpoint.conninfo, dbname=MAINTENANCE_DB, application_name="perflab-pgstat")
            conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=10)
        except psycopg.Error:
            self._same_db = True
            conn = endpoint.connect()
            conn.execute("SET application_name = 'perflab-pgstat'")
        # sampling must never hold anything up: short timeouts, read only
        conn.execute("SET statement_timeout = '5s'")
        conn.execute("SET lock_timeout = '1s'")
        conn.execute("SET default_transaction_read_only = on")
        return conn

    def open(self, ctx: CollectorContext) -> None:
        endpoint = ctx.endpoint
        if not isinstance(endpoint, PgWireEndpoint):
            raise CollectorUnavailable(NOT_POSTGRES)
        try:
            self._conn = self._connect(endpoint)
        except Exception as exc:
            raise CollectorUnavailable(f"cannot connect to the server: {exc}") from None
        self._backend_pid = self._conn.info.backend_pid
        MONITOR_PIDS.add(self._backend_pid)
        version = self._conn.info.server_version
        self._dbname = endpoint.dbname
        candidates = ["db", "bgwriter"]
        candidates += ["checkpointer"] if version >= 170000 else []
        candidates += ["wal"] if version >= 140000 else []
        candidates += ["io"] if version >= 160000 else []
        self._notes = []
        self._views = []
        for view in candidates:
            try:
                self._query(f"SELECT {VIEW_JSON[view]}")
                self._views.append(view)
            except Exception as exc:
                self._notes.append(f"{view} not sampled: {exc}")
        self._wait_sampling = False
        if self.settings.wait_event_hz > 0:
            try:
                self._wait_pending = False
                self._prepare_waits()
                self._wait_sampling = True
            except Exception as exc:
                self._notes.append(f"wait events not sampled: {exc}")
        if not self._views:
            self.close()
            raise CollectorUnavailable("; ".join(self._notes) or "no statistics view readable")
        self._stats_sql = ""
        self._first = self._last = None
        self._last_t_ns = self._next_stats_ns = 0
        self._own_xacts = 0
        self._waits, self._waits_run = Counter(), Counter()
        self._wait_ticks = self._wait_ticks_run = 0
        self._wait_names = set()

    def close(self) -> None:
        MONITOR_PIDS.discard(self._backend_pid)
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def tick_s(self) -> float:
        hz = self.settings.wait_event_hz
        return min(float(self.settings.interval), 1.0 / hz) if hz > 0 else float(self.settings.interval)

    # ------------------------------------------------------------ sampling

    def _query(self, sql: str) -> tuple[Any, ...]:
        row = self._conn.execute(sql, {"db": self._dbname}, prepare=True).fetchone()
        self._own_xacts += 1
        return tuple(row or ())

    def _read_counters(self) -> dict[str, float]:
        """All views in one statement (one round trip, one wake-up), each as JSON."""
        if not self._stats_sql:
            self._stats_sql = "SELECT " + ", ".join(VIEW_JSON[v] for v in self._views)
        out: dict[str, float] = {}
        for view, doc in zip(self._views, self._query(self._stats_sql), strict=True):
            if view == "io":
                for row in doc or ():
                    prefix = f"io.{str(row['backend_type']).replace(' ', '_')}"
                    for col, value in _numeric(row).items():
                        if col not in GAUGES:
                            out[f"{prefix}.{col}"] = out.get(f"{prefix}.{col}", 0.0) + value
            elif doc:
                for col, value in _numeric(doc).items():
                    out[f"{view}.{col}"] = value
        return out

    def _prepare_waits(self) -> None:
        """Wait events are sampled ten times a second, so each sample must be
        cheap: a prepared statement sent through libpq directly, without
        waiting for the answer, which is read at the next tick. One wake-up
        per tick instead of two (send, then woken by the reply) halves the
        sampling thread's CPU (benchmarks/collector_overhead.py)."""
        from psycopg import pq

        res = self._conn.pgconn.prepare(WAIT_STATEMENT, WAIT_EVENTS_SQL.encode())
        if res.status != pq.ExecStatus.COMMAND_OK:
            raise RuntimeError(res.error_message.decode(errors="replace").strip())
        self._send_waits()
        self._finish_waits(block=True)
        self._waits.clear()
        self._wait_ticks = 0

    def _send_waits(self) -> None:
        pgconn = self._conn.pgconn
        pgconn.send_query_prepared(WAIT_STATEMENT, None)
        while pgconn.flush() == 1:  # the connection is non-blocking: push it all out
            pass
        self._wait_pending = True
        self._own_xacts += 1

    def _finish_waits(self, *, block: bool) -> None:
        """Count the wait-event sample sent at the last tick; without `block`,
        leave it for the next tick when the server has not answered yet."""
        from psycopg import pq

        if not self._wait_pending:
            return
        pgconn = self._conn.pgconn
        if not block:
            pgconn.consume_input()
            if pgconn.is_busy():
                return
        self._wait_pending = False
        res = pgconn.get_result()
        while pgconn.get_result() is not None:
            pass
        if res is None or res.status != pq.ExecStatus.TUPLES_OK:
            raise RuntimeError(res.error_message.decode(errors="replace").strip() if res else "no result")
        self._wait_ticks += 1
        for i in range(res.ntuples):
            key = (bytes(res.get_value(i, 0) or b"").decode(), bytes(res.get_value(i, 1) or b"").decode())
            self._waits[key] += int(res.get_value(i, 2) or 0)

    def sample(self) -> dict[str, float]:
        t_ns = time.monotonic_ns()
        stats_due = t_ns >= self._next_stats_ns or self.stopping
        if self._wait_sampling:
            # the connection must be free before the views are read
            self._finish_waits(block=stats_due)
        values = self._read_stats(t_ns) if stats_due else {}
        if self._wait_sampling and not self._wait_pending and not self.stopping:
            self._send_waits()
        return values

    def _read_stats(self, t_ns: int) -> dict[str, float]:
        self._next_stats_ns = t_ns + int(self.settings.interval * 1e9) - int(self.tick_s() * 0.5e9)
        own_before = self._own_xacts
        now = self._read_counters()
        if self._same_db and "db.xact_commit" in now:
            # our own statements are commits in the workload's database
            now["db.xact_commit"] -= own_before
        values: dict[str, float] = {}
        if self._last is not None:
            dt_s = (t_ns - self._last_t_ns) / 1e9
            for key, value in now.items():
                col = key.rsplit(".", 1)[1]
                if col in GAUGES:
                    values[key] = value
                    continue
                delta = value - self._last.get(key, value)
                if key.startswith("io.") and delta == 0:
                    continue  # pg_stat_io has ~30 rows, most idle: leave them out
                values[f"{key}_per_s"] = delta / dt_s
            hit = now.get("db.blks_hit", 0) - self._last.get("db.blks_hit", 0)
            read = now.get("db.blks_read", 0) - self._last.get("db.blks_read", 0)
            if hit + read > 0:
                values["db.cache_hit_pct"] = 100.0 * hit / (hit + read)
            values.update(self._wait_means())
        else:
            self._first = now
            self._waits.clear()
            self._wait_ticks = 0
        self._last = now
        self._last_t_ns = t_ns
        return values

    def _wait_means(self) -> dict[str, float]:
        """Mean sessions per wait event over the interval; events seen earlier
        in the run and not now are given as 0 so their lines come back down."""
        out: dict[str, float] = {}
        if self._wait_ticks == 0:
            return out
        self._wait_names.update(self._waits)
        for key in self._wait_names:
            out[f"wait.{key[0]}.{key[1]}"] = self._waits.get(key, 0) / self._wait_ticks
        self._waits_run.update(self._waits)
        self._wait_ticks_run += self._wait_ticks
        self._waits.clear()
        self._wait_ticks = 0
        return out

    # ------------------------------------------------------------ results

    def summary(self) -> RunResult:
        result = RunResult()
        for note in self._notes:
            result.events.append(Event(0.0, "collector-info", f"{self.name}: {note}"))
        if self._first is not None and self._last is not None:
            for key, last in sorted(self._last.items()):
                view, col = key.split(".", 1)
                if view == "io" or col in GAUGES:
                    continue
                result.add_metric(f"{self.name}.{key}", last - self._first.get(key, last), _unit(col),
                                  f"{view}: {col} during the run")
            hit = self._last.get("db.blks_hit", 0) - self._first.get("db.blks_hit", 0)
            read = self._last.get("db.blks_read", 0) - self._first.get("db.blks_read", 0)
            if hit + read > 0:
                result.add_metric(f"{self.name}.db.cache_hit_pct", 100.0 * hit / (hit + read), "%",
                                  "shared-buffer hits / block requests in the workload's database")
        self._waits_run.update(self._waits)
        self._wait_ticks_run += self._wait_ticks
        if self._wait_ticks_run:
            result.add_metric(f"{self.name}.wait_samples", self._wait_ticks_run, "samples",
                              "pg_stat_activity samples taken for wait events")
            top = self._waits_run.most_common()
            for (wait_type, wait_event), count in top:
                result.add_metric(f"{self.name}.wait.{wait_type}.{wait_event}", count / self._wait_ticks_run,
                                  "sessions", f"mean sessions in {wait_type}:{wait_event}")
            if top:
                text = ", ".join(f"{t}:{e} {c / self._wait_ticks_run:.2f}" for (t, e), c in top[:5])
                result.events.append(Event(0.0, "wait-events", f"{self.name}: mean sessions by wait: {text}"))
        return result
