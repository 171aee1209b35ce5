"""The `oltp` workload: sysbench's OLTP scripts (sysbench 1.0.20) on PostgreSQL and on
MySQL/MariaDB, driven from Rust.

Tables, statements, ranges and key distributions are sysbench's (oltp_common.lua and
oltp_*.lua, with its pgsql or its mysql driver's SQL and DDL): sysbench can run on tables
loaded here, and this workload on tables `sysbench prepare` loaded. The loader
(`perflab._engine.oltp_load`) streams binary COPY into PostgreSQL and LOAD DATA LOCAL
INFILE into MySQL; the run (`perflab._engine.oltp_run`, crates/engine/src/oltp) is the
engine's load harness with the engine's own client for either server, so the harness's
settings, figures and flags come with it (perflab.workloads.harness).

A transaction is one sysbench event, and TPS counts committed ones as sysbench's
"transactions"; the latency is the event's. Statement counts per type are the script's
mix times committed transactions (STATEMENTS below; the test checks them against the
server's own counters).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from perflab import _engine
from perflab.context import RunContext
from perflab.drivers import engine_run
from perflab.endpoints import Capability, MysqlWireEndpoint, PgWireEndpoint, engine_wire
from perflab.errors import RunFailure, UserError
from perflab.model import CheckResult, Event, Histogram, LoadResult, RunResult, fmt_factors
from perflab.workloads import WORKLOADS, harness
from perflab.workloads.base import Workload, WorkloadSettings
from perflab.workloads.stalls import StallWatch

if TYPE_CHECKING:
    from perflab.store import Store

# Statements per event, by type (sysbench's defaults: --point-selects=10, one of each
# range, --index-updates=1, --non-index-updates=1, --delete-inserts=1); BEGIN and COMMIT
# are "other" in sysbench's query counts.
STATEMENTS: dict[str, dict[str, int]] = {
    "point_select": {"point_selects": 1},
    "read_only": {"point_selects": 10, "range_selects": 4, "other": 2},
    "read_write": {"point_selects": 10, "range_selects": 4, "updates": 2, "deletes": 1, "inserts": 1, "other": 2},
    "write_only": {"updates": 2, "deletes": 1, "inserts": 1, "other": 2},
    "update_index": {"updates": 1},
    "update_non_index": {"updates": 1},
    "insert": {"inserts": 1},
}
READ_ONLY_SCRIPTS = ("point_select", "read_only")
DEFAULT_DURATION_S = 60.0
SERIES_SOURCE = "oltp"
# MySQL and MariaDB serve each connection on a thread of their own. On 2
# cores, 32 oltp clients on the plain default's 2 driver threads (16 each)
# ran at 0.75-0.83x sysbench's TPS with 0.13-0.29 cross-CPU interrupts per
# point select; on 16 threads (2 each) at 1.02-1.21x, every script faster in
# every pair, and CPU per transaction 0.59-0.97x sysbench's
# (benchmarks/README.md, "Driver threads on MariaDB"). So without `threads`,
# an oltp run on MySQL wire gives each driver thread at most 2 connections.
# tpcc keeps the plain default: on MariaDB it measured the other way (16
# threads for 32 clients: 17-23% less NOPM than 2).
MYSQL_CLIENTS_PER_THREAD = 2
MYSQL_THREADS_WHY = ("a driver thread with more MySQL connections than that made their round trips cross CPUs "
                     "and ran slower (benchmarks/README.md, \"Driver threads on MariaDB\")")
STATEMENT_HISTOGRAM = "latency.statement."
STATEMENT_PERCENTILES = (0.50, 0.95, 0.99)


class OltpSettings(harness.HarnessSettings):
    """sysbench's options: --threads is `clients` (the harness's), --time `duration`,
    --rate `rate`; these are its OLTP scripts' own."""

    kind: Literal["oltp"]
    # Which of sysbench's oltp_*.lua scripts.
    script: Literal["point_select", "read_only", "read_write", "write_only", "update_index",
                    "update_non_index", "insert"] = "read_write"
    # --tables and --table-size: the data set (sbtest1..tables).
    tables: int = Field(default=10, ge=1, le=10_000)
    table_size: int = Field(default=100_000, ge=1, le=2**31 - 1)
    # --rand-type: the distribution of ids (and of k at load), with sysbench's parameters.
    rand_type: Literal["uniform", "gaussian", "special", "pareto"] = "special"
    # --events, per client, instead of a duration; default: 60 s.
    transactions: int | None = Field(default=None, ge=1, le=10**12)
    # Tries of an event after a deadlock, serialization failure or duplicate key on
    # PostgreSQL, a deadlock (1213), lock wait timeout (1205) or error 1020 on MySQL
    # (sysbench's drivers restart the event on these); oltp's default is 10, the harness's 1.
    max_tries: int = Field(default=10, ge=1, le=harness.MAX_TRIES)
    # Connections loading tables at once.
    load_jobs: int = Field(default=2, ge=1, le=64)

    @model_validator(mode="after")
    def _one_length(self) -> OltpSettings:
        if self.duration is not None and self.transactions is not None:
            raise ValueError("got both duration and transactions; allowed: one of them")
        return self


Endpoint = PgWireEndpoint | MysqlWireEndpoint


@WORKLOADS.declare(
    "oltp",
    "sysbench's OLTP scripts (point_select, read_only, read_write, ...) on its sbtest tables from a Rust driver",
)
class OltpWorkload(Workload[Endpoint]):
    metrics = ("tps", "qps", "transactions", "failed", "statements.*", "latency_mean_ms", "latency_p50_ms",
               "latency_p95_ms", "latency_p99_ms", "latency_max_ms", "errors.*", *harness.METRICS)
    Settings: ClassVar[type[WorkloadSettings]] = OltpSettings
    example: ClassVar[dict[str, Any]] = {"duration": "1s"}
    sample_factor: ClassVar[str] = "clients"
    data_fields: ClassVar[tuple[str, ...]] = ("tables", "table_size", "rand_type")
    # a PostgreSQL or a MySQL server
    needs: ClassVar[frozenset[Capability]] = frozenset({Capability.SQL})
    needs_any: ClassVar[frozenset[Capability]] = frozenset({Capability.POSTGRES_WIRE, Capability.MYSQL_WIRE})
    headline: ClassVar[tuple[str, ...]] = ("tps", "latency_p95_ms")
    distributable: ClassVar[bool] = True

    settings: OltpSettings

    def __init__(self, settings: OltpSettings) -> None:
        super().__init__(settings)
        self._before: list[int] | None = None  # rows per table before the run, for check()
        self._committed = 0

    def writes(self) -> bool:
        # point_select and read_only run on the tables found there (a read-only
        # target's own sbtest tables); every other script writes.
        return self.settings.script not in READ_ONLY_SCRIPTS

    def prepare(self, endpoint: Endpoint, ctx: RunContext) -> LoadResult:
        s = self.settings
        conninfo, server = engine_wire(endpoint, "oltp")
        if endpoint.read_only:
            self._tables_present(endpoint)
            return LoadResult()
        with harness.engine_errors("oltp", failed="oltp load failed"):
            report = _engine.oltp_load(
                conninfo, tables=s.tables, table_size=s.table_size, rand_type=s.rand_type, workers=s.load_jobs,
                seed=s.seed or 0, server=server,
                on_step=lambda table: ctx.status(f"load {s.tables} x {s.table_size} rows: {table}"),
            )
        return LoadResult(steps=dict(report.steps), rows=dict(report.rows))

    def _tables_present(self, endpoint: Endpoint) -> None:
        """On a read-only target nothing is loaded: sbtest1..tables must be there."""
        names = [f"sbtest{i}" for i in range(1, self.settings.tables + 1)]
        with endpoint.connect() as conn:
            if isinstance(endpoint, MysqlWireEndpoint):
                marks = ", ".join(["%s"] * len(names))
                rows = conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
                                    f" AND table_type = 'BASE TABLE' AND table_name IN ({marks})", names).fetchall()
            else:
                rows = conn.execute("SELECT relname::text FROM pg_class WHERE relname = ANY(%s)"
                                    " AND relkind = 'r' AND pg_table_is_visible(oid)", (names,)).fetchall()
            found = {r[0] for r in rows}
        missing = [n for n in names if n not in found]
        if missing:
            driver = "mysql" if isinstance(endpoint, MysqlWireEndpoint) else "pgsql"
            raise UserError(f"workload oltp: the target is read-only and has no {', '.join(missing[:3])}"
                            + (" ..." if len(missing) > 3 else ""),
                            f"load them there (sysbench oltp_read_only --db-driver={driver} prepare), or set "
                            "target.allow_destructive = true to let perflab load them")

    def run(self, endpoint: Endpoint, ctx: RunContext) -> RunResult:
        s = self.settings
        if endpoint.read_only and self.writes():
            raise UserError(f"workload oltp: script {s.script!r} writes and the target is read-only",
                            'use script = "read_only" or "point_select", or set target.allow_destructive = true')
        result = RunResult(headline=list(self.headline))
        self._before = self._rows(endpoint)
        conninfo, server = engine_wire(endpoint, "oltp")
        threads = s.effective_threads(MYSQL_CLIENTS_PER_THREAD if server == "mysql" else None)
        seed = s.seed if s.seed is not None else secrets.randbits(63)
        duration = s.duration if s.duration is not None or s.transactions is not None else DEFAULT_DURATION_S

        stalls = StallWatch(closed_loop=s.rate is None)

        def progress(interval: _engine.Interval) -> None:
            ctx.status(f"{'warm-up' if interval.warmup else 'progress'}: {interval.t_s:.1f} s, {interval.tps:.1f} tps, "
                       f"p99 {interval.latency_p99_ms:.3f} ms, {interval.failed} failed")
            stalls.add(interval)
            harness.store_second(ctx, SERIES_SOURCE, interval, scheduled=s.rate is not None)

        ctx.status(f"oltp {s.script}: connecting {s.clients} clients on {threads} threads")
        with harness.engine_errors("oltp"):
            out = engine_run(
                ctx, _engine.oltp_run, conninfo, server=server,
                script=s.script, tables=s.tables, table_size=s.table_size, rand_type=s.rand_type,
                harness=s.engine_settings(threads=threads, duration=duration, transactions=s.transactions, seed=seed),
                t0_ns=ctx.t0_ns, progress=progress,
            )
        window = harness.take_run(ctx, result, out, clients=s.clients, seed=seed, steady_max_s=s.steady_max, window_from=s.window,
                                  lost=f"oltp: all {s.clients} client connections were lost (server down?)")
        if (why := s.threads_reason(threads, MYSQL_THREADS_WHY)) is not None:
            result.events.append(Event(out.measure_start_t_s, "threads", why))
        self._committed = out.transactions
        self._metrics(out, window, result, "error" if server == "mysql" else "SQLSTATE")
        stalls.annotate(result)
        return result

    def _metrics(self, out: _engine.DriverResult, window: harness.Window, result: RunResult, code: str) -> None:
        s = self.settings
        add = result.add_metric
        add("tps", window.rate, "tx/s", f"committed events per second {harness.OVER_WINDOW} (sysbench: "
            "transactions/s)", higher_is_better=True)
        mix = STATEMENTS[s.script]
        add("qps", window.rate * sum(mix.values()), "queries/s", "statements per second of committed events, "
            f"BEGIN and COMMIT included (sysbench: queries/s), {harness.OVER_WINDOW}", higher_is_better=True)
        add("transactions", window.transactions, "tx", f"committed events {harness.OVER_WINDOW}")
        add("failed", window.failed, "tx", f"events ended by an error (after retries) {harness.OVER_WINDOW}",
            higher_is_better=False)
        for kind, per_tx in mix.items():
            add(f"statements.{kind}", per_tx * window.transactions, "statements",
                f"{kind.replace('_', ' ')} of committed events ({per_tx} per event)")
        harness.latency_metrics(result, out.latency, what="event latency", base=s.latency_origin(),
                                labels=("mean", "p50", "p95", "p99", "max"))
        for state, n in out.errors_by_kind.items():
            add(f"errors.{state}", n, "tx", f"events failed with {code} {state}", higher_is_better=False)
        result.histograms.append(Histogram(f"latency.{s.script}", "us", out.histogram_encoding,
                                           bytes(out.latency_histogram)))
        # each statement of the committed events, from its send to its answer
        result.histograms.extend(Histogram(f"{STATEMENT_HISTOGRAM}{op.name}", "us", out.histogram_encoding,
                                           bytes(op.histogram))
                                 for op in out.operations if op.committed)
        harness.harness_metrics(result, out, scheduled=s.rate is not None, latency_limit_s=s.latency_limit,
                                rate=s.rate)

    def _rows(self, endpoint: Endpoint) -> list[int]:
        try:
            with endpoint.connect() as conn:
                if isinstance(endpoint, PgWireEndpoint):
                    # a sequential count leaves the indexes' scan counters to the run
                    for method in ("indexscan", "indexonlyscan", "bitmapscan"):
                        conn.execute(f"SET enable_{method} = off")
                return [int(conn.execute(f"SELECT count(*) FROM sbtest{i}").fetchone()[0])
                        for i in range(1, self.settings.tables + 1)]
        except Exception as exc:
            raise RunFailure(f"oltp: cannot count the rows on {endpoint.display()}: {str(exc).strip()}") from None

    def check(self, endpoint: Endpoint, ctx: RunContext) -> CheckResult:
        """Rows per table against the counts before the run: read_write and
        write_only delete and insert back the same id, so every script but
        `insert` leaves each count as it was; `insert` adds at least one row per
        committed event of the measured window."""
        out = CheckResult()
        if self._before is None:
            return out
        before, self._before = self._before, None
        after = self._rows(endpoint)
        if self.settings.script == "insert":
            added = sum(after) - sum(before)
            out.add("rows_added", added >= self._committed, f"{added} rows added, {self._committed} events committed")
        else:
            changed = [f"sbtest{i} {b} -> {a}" for i, (b, a) in enumerate(zip(before, after, strict=True), 1) if a != b]
            out.add("row_counts", not changed, ", ".join(changed[:5]) or f"{len(after)} tables as before the run")
        return out

    @classmethod
    def report_sections(cls, store: Store, runs: list[dict[str, Any]]) -> list[Any]:
        """Each run's figures, one row per run."""
        from perflab.analysis import pivot
        from perflab.section import Section, Table

        if not runs:
            return []
        values = {r["id"]: {m["name"]: m["value"] for m in store.metrics(r["id"])} for r in runs}
        columns = (("tps", "tps"), ("qps", "qps"), ("latency_p95_ms", "p95 ms"), ("latency_p99_ms", "p99 ms"),
                   ("failed", "failed"), ("retries", "retries"), ("driver_cpu_per_tx_us", "driver CPU us/tx"))
        headers, rows = pivot.run_rows(runs, values, columns)
        sections = [Section("sysbench OLTP runs", [Table(headers, rows, "sysbench OLTP runs, one row per run")])]
        statements = cls._statement_rows(store, runs)
        if statements:
            sections.append(Section("Statements", [Table(
                ["run", "factors", "statement", "count", "p50 ms", "p95 ms", "p99 ms", "max ms"], statements,
                "each statement kind's latency (send to answer) in the committed events of the measured window, "
                "one row per run and kind")]))
        return sections

    @staticmethod
    def _statement_rows(store: Store, runs: list[dict[str, Any]]) -> list[list[Any]]:
        """Count, p50, p95, p99 and max of each run's stored statement histograms."""
        rows: list[list[Any]] = []
        for run in runs:
            for hist in store.histograms(run["id"]):
                if not hist["name"].startswith(STATEMENT_HISTOGRAM):
                    continue
                data = bytes(hist["data"])
                summary = _engine.hdr_summary(data)
                rows.append([run["id"], fmt_factors(run["factors"], ", "), hist["name"][len(STATEMENT_HISTOGRAM):],
                             summary.count,
                             *[harness.ms(_engine.hdr_quantile_us(data, q)) for q in STATEMENT_PERCENTILES],
                             harness.ms(summary.max_us)])
        return rows
