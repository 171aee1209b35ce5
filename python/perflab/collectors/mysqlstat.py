"""mysqlstat: a MySQL or MariaDB server's SHOW GLOBAL STATUS per interval,
and performance_schema's wait summaries where it is enabled.

Every `interval` it reads SHOW GLOBAL STATUS on a connection of its own and
keeps, as deltas per second over the interval (`<name>_per_s`):

- `questions`: statements the clients sent (the collector's own are taken
  off, as its SELECTs are from `com.select` and its SHOWs from `com.other`);
- `com.<kind>`: the Com_* counters summed per kind: select, insert (with
  INSERT ... SELECT), update and delete (with their multi-table forms),
  replace, begin, commit, rollback, and `other` for the rest;
- InnoDB: `innodb.buffer_pool_read_requests` and `innodb.buffer_pool_reads`
  (requests that missed the pool and read the disk), whose ratio is
  `innodb.buffer_pool_hit_pct`; `innodb.row_lock_waits` and
  `innodb.row_lock_time` (ms); `innodb.os_log_fsyncs` (redo log syncs) and
  `innodb.data_fsyncs`; `innodb.data_reads` and `innodb.data_writes`;
- gauges as they are: `threads_running`, `threads_connected`.

With performance_schema on, each interval also reads
events_waits_summary_global_by_event_name: `wait.<event>` is the time spent
in that wait per second (seconds/s, i.e. sessions waiting on average), the
idle wait left out. The run's totals are metrics `mysqlstat.<name>`.
"""

from __future__ import annotations

import time
from typing import Any

from perflab.collectors.base import (
    CollectorContext,
    CollectorSettings,
    CollectorUnavailable,
    PanelPart,
    SamplingCollector,
    TelemetryPanel,
)
from perflab.endpoints import Capability, MysqlWireEndpoint
from perflab.model import Event, RunResult

TOP_WAITS = 6
# Com_* counters per kind; every other Com_* is "other".
COM_KINDS = {
    "select": ("select",),
    "insert": ("insert", "insert_select"),
    "update": ("update", "update_multi"),
    "delete": ("delete", "delete_multi"),
    "replace": ("replace", "replace_select"),
    "begin": ("begin",),
    "commit": ("commit",),
    "rollback": ("rollback",),
}
INNODB = ("buffer_pool_read_requests", "buffer_pool_reads", "row_lock_waits", "row_lock_time", "os_log_fsyncs",
          "data_fsyncs", "data_reads", "data_writes")
GAUGES = ("threads_running", "threads_connected")
WAITS_SQL = ("SELECT event_name, sum_timer_wait FROM performance_schema.events_waits_summary_global_by_event_name "
             "WHERE sum_timer_wait > 0 AND event_name <> 'idle'")


def counters(status: dict[str, str]) -> dict[str, float]:
    """The counters this collector keeps, from SHOW GLOBAL STATUS (names lower case)."""
    out: dict[str, float] = {}

    def num(name: str) -> float:
        try:
            return float(status.get(name, 0) or 0)
        except ValueError:
            return 0.0

    out["questions"] = num("questions")
    kind_of = {f"com_{c}": kind for kind, names in COM_KINDS.items() for c in names}
    for kind in [*COM_KINDS, "other"]:
        out[f"com.{kind}"] = 0.0
    for name in status:
        if name.startswith("com_"):
            out[f"com.{kind_of.get(name, 'other')}"] += num(name)
    for name in INNODB:
        out[f"innodb.{name}"] = num(f"innodb_{name}")
    for name in GAUGES:
        out[name] = num(name)
    return out


def _label(name: str) -> str:
    return name.split(".", 1)[1].removesuffix("_per_s")


class MysqlstatCollector(SamplingCollector):
    default_on = True
    needs = frozenset({Capability.MYSQL_WIRE})
    panels = (
        TelemetryPanel("MySQL statements by kind (Com_*)", "statements/s", name_like="com.%_per_s",
                       label_of=_label, drop_zero=True, stacked=True),
        TelemetryPanel("InnoDB buffer pool", "hit %", parts=(PanelPart("innodb.buffer_pool_hit_pct", "hits"),),
                       ymax=100.0),
        TelemetryPanel("InnoDB syncs and lock waits", "per second",
                       parts=(PanelPart("innodb.os_log_fsyncs_per_s", "redo log fsyncs"),
                              PanelPart("innodb.data_fsyncs_per_s", "data fsyncs"),
                              PanelPart("innodb.row_lock_waits_per_s", "row lock waits"))),
        TelemetryPanel(f"performance_schema waits (largest {TOP_WAITS})", "sessions waiting", name_like="wait.%",
                       label_of=lambda name: name[len("wait."):], top=TOP_WAITS, drop_zero=True, stacked=True),
    )

    def __init__(self, name: str, settings: CollectorSettings) -> None:
        super().__init__(name, settings)
        self._conn: Any = None
        self._waits_on = False
        self._own = 0
        self._own_selects = 0
        self._waits_seen: set[str] = set()
        self._first: dict[str, float] | None = None
        self._last: dict[str, float] | None = None
        self._last_t_ns = 0
        self._notes: list[str] = []

    def open(self, ctx: CollectorContext) -> None:
        endpoint = ctx.endpoint
        if not isinstance(endpoint, MysqlWireEndpoint):
            raise CollectorUnavailable("the target is not a MySQL or MariaDB server")
        try:
            self._conn = endpoint.connect(database="")  # type: ignore[call-arg]
        except Exception as exc:
            raise CollectorUnavailable(f"cannot connect to the server: {exc}") from None
        self._own = self._own_selects = 0
        self._waits_seen = set()
        self._first = self._last = None
        self._notes = []
        self._waits_on = False
        try:
            on = self._query("SELECT @@performance_schema")
            self._waits_on = bool(on and int(on[0][0]))
            if not self._waits_on:
                self._notes.append("performance_schema is off: no wait summaries (set performance_schema = ON)")
        except Exception as exc:
            self._notes.append(f"wait summaries not read: {exc}")

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _query(self, sql: str) -> list[Any]:
        self._own += 1
        self._own_selects += sql.startswith("SELECT")
        return list(self._conn.execute(sql).fetchall())

    def _read(self) -> dict[str, float]:
        own, own_selects = self._own, self._own_selects
        status = {str(k).lower(): v for k, v in self._query("SHOW GLOBAL STATUS")}
        now = counters(status)
        now["questions"] -= own  # this collector's own statements before this one
        now["com.select"] -= own_selects
        now["com.other"] -= own - own_selects  # SHOW GLOBAL STATUS
        if self._waits_on:
            for event, picoseconds in self._query(WAITS_SQL):
                now[f"wait.{event}"] = float(picoseconds) / 1e12
        return now

    def sample(self) -> dict[str, float]:
        t_ns = time.monotonic_ns()
        now = self._read()
        values: dict[str, float] = {}
        if self._last is None:
            self._first = now
        else:
            dt_s = (t_ns - self._last_t_ns) / 1e9
            for key, value in now.items():
                if key in GAUGES:
                    values[key] = value
                elif key.startswith("wait."):
                    # an event that waited, or waited earlier in the run (its line comes back down)
                    waited = (value - self._last.get(key, 0.0)) / dt_s
                    if waited > 0 or key in self._waits_seen:
                        self._waits_seen.add(key)
                        values[key] = waited
                else:
                    values[f"{key}_per_s"] = (value - self._last.get(key, value)) / dt_s
            values.update(_hit_pct(now, self._last, "innodb.buffer_pool_hit_pct"))
        self._last, self._last_t_ns = now, t_ns
        return values

    def summary(self) -> RunResult:
        result = RunResult()
        for note in self._notes:
            result.events.append(Event(0.0, "collector-info", f"{self.name}: {note}"))
        if self._first is None or self._last is None:
            return result
        first, last = self._first, self._last
        for key, value in sorted(last.items()):
            if key in GAUGES:
                continue
            delta = value - first.get(key, 0.0 if key.startswith("wait.") else value)
            if key.startswith("wait."):
                if delta > 0:
                    result.add_metric(f"{self.name}.{key}", delta, "s", f"time waited on {key[5:]} during the run")
                continue
            unit = "ms" if key == "innodb.row_lock_time" else "count"
            result.add_metric(f"{self.name}.{key}", delta, unit, f"SHOW GLOBAL STATUS {key} during the run")
        for key, value in _hit_pct(last, first, "innodb.buffer_pool_hit_pct").items():
            result.add_metric(f"{self.name}.{key}", value, "%", "InnoDB buffer pool requests served from memory")
        return result


def _hit_pct(now: dict[str, float], before: dict[str, float], name: str) -> dict[str, float]:
    requests = now["innodb.buffer_pool_read_requests"] - before["innodb.buffer_pool_read_requests"]
    misses = now["innodb.buffer_pool_reads"] - before["innodb.buffer_pool_reads"]
    return {name: 100.0 * (requests - misses) / requests} if requests > 0 else {}
