"""The `ycsb` workload: YCSB's core workloads A-F (Cooper et al., "Benchmarking Cloud
Serving Systems with YCSB", SoCC 2010; the CoreWorkload of brianfrankcooper/YCSB and
pingcap/go-ycsb) on PostgreSQL and on MySQL/MariaDB, driven from Rust.

The table is YCSB's `usertable` (YCSB_KEY VARCHAR(64) PRIMARY KEY and field_count
FIELDn VARCHAR(field_length) columns), its keys go-ycsb's ("user" and the FNV-1a hash
of the key number): go-ycsb runs on a table loaded here and this workload on go-ycsb's.
The load (`_engine.ycsb_load`) goes through the engine's loaders: the parallel binary
COPY into PostgreSQL (the primary key built after the rows), LOAD DATA LOCAL INFILE
into MySQL. The run (`_engine.ycsb_run`, crates/engine/src/ycsb) is the engine's load
harness, so its settings, figures and flags come with it (perflab.workloads.harness).

One transaction is one YCSB operation, and each operation type (read, update,
insert, scan, read_modify_write) has its own latency histogram. Workload letters
and their mixes, as YCSB's workloads/workloada..f:

    a  read 50%, update 50%              zipfian
    b  read 95%, update 5%               zipfian
    c  read 100%                         zipfian
    d  read 95%, insert 5%               latest
    e  scan 95%, insert 5%               zipfian, scans of 1..100 rows
    f  read 50%, read-modify-write 50%   zipfian
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

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
    from collections.abc import Callable

    from perflab.store import Store


class YcsbLoad(Protocol):
    """The engine's `ycsb_load` (crates/engine/src/ycsb/load.rs), registered by
    declaration: its arguments stated here, in the workload's own module."""

    def __call__(self, conninfo: str, *, server: str, record_count: int, field_count: int = 10,
                 field_length: int = 100, workers: int = 2, seed: int = 0,
                 on_step: Callable[[str], object] | None = None,
                 cancel: _engine._Cancel | None = None) -> _engine.LoadReport:
        """Load YCSB's usertable (key numbers 0..record_count) on `server`
        ("postgres": binary COPY, the primary key after the rows; "mysql":
        LOAD DATA LOCAL INFILE, then ANALYZE TABLE), `workers` connections at once."""


class YcsbRun(Protocol):
    """The engine's `ycsb_run` (crates/engine/src/ycsb/mod.rs), registered by declaration."""

    def __call__(self, conninfo: str, *, server: str, workload: str, record_count: int,
                 harness: _engine._HarnessSettings, t0_ns: int, operation_count: int | None = None,
                 distribution: str | None = None, field_count: int = 10, field_length: int = 100,
                 max_scan_length: int | None = None, progress: Callable[[_engine.Interval], object] | None = None,
                 cancel: _engine._Cancel | None = None,
                 on_connected: Callable[[], int] | None = None) -> _engine.DriverResult:
        """Drive YCSB's core `workload` ("a".."f") on `server` ("postgres" or
        "mysql") over usertable's `record_count` rows; `distribution` and
        `max_scan_length` replace the letter's own; `operation_count` sizes the
        zipfian's range for the run's inserts (YCSB's rule). One transaction
        type per operation (read, update, insert, scan, read_modify_write),
        under the harness's settings (`harness`) as tpcb_run."""


ycsb_load: YcsbLoad = _engine.ycsb_load
ycsb_run: YcsbRun = _engine.ycsb_run

OPERATIONS = ("read", "update", "insert", "scan", "read_modify_write")
# Each letter's operations (YCSB's workloads/workloada..f): what its runs report.
MIXES: dict[str, dict[str, float]] = {
    "a": {"read": 0.5, "update": 0.5},
    "b": {"read": 0.95, "update": 0.05},
    "c": {"read": 1.0},
    "d": {"read": 0.95, "insert": 0.05},
    "e": {"scan": 0.95, "insert": 0.05},
    "f": {"read": 0.5, "read_modify_write": 0.5},
}
READ_ONLY = ("c",)
DEFAULT_DURATION_S = 60.0
SERIES_SOURCE = "ycsb"
OPERATION_HISTOGRAM = "latency."
PERCENTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))
# Without `threads`, a driver thread drives at most this many clients. MySQL wire: as oltp
# there (a driver thread with more MySQL connections made their round trips cross CPUs and
# ran slower). PostgreSQL: 16 clients of workload a on 16 driver threads ran 1.2-1.5x the
# operations per second of the plain default's 2 threads (8 s runs, 2 cores), c 1.1-1.8x,
# e 1.2x, for about 1.4x the driver's CPU per operation, still half go-ycsb's
# (benchmarks/README.md, "ycsb_vs_goycsb.py").
CLIENTS_PER_THREAD = {"mysql": 2, "postgres": 1}
THREADS_WHY = {
    "mysql": ("a driver thread with more MySQL connections than that made their round trips cross CPUs "
              "and ran slower (benchmarks/README.md, \"Driver threads on MariaDB\")"),
    "postgres": ("YCSB's operations on PostgreSQL ran 1.1-1.8x as fast with a driver thread per client "
                 "(benchmarks/README.md, \"ycsb_vs_goycsb.py\")"),
}


class YcsbSettings(harness.HarnessSettings):
    """YCSB's CoreWorkload properties: -threads is `clients`, maxexecutiontime
    `duration`, -target `rate`; these are its workload's own."""

    kind: Literal["ycsb"]
    # Which core workload (YCSB's workloads/workloada..f).
    workload: Literal["a", "b", "c", "d", "e", "f"] = "a"
    # recordcount: rows loaded (key numbers 0..record_count).
    record_count: int = Field(default=100_000, ge=1, le=2**31 - 1)
    # operationcount: operations of the run, over all clients, instead of a duration;
    # default: 60 s.
    operation_count: int | None = Field(default=None, ge=1, le=10**12)
    # requestdistribution, instead of the workload's own (zipfian; d: latest).
    distribution: Literal["zipfian", "uniform", "latest"] | None = None
    # fieldcount: the columns FIELD0..FIELDn-1 after YCSB_KEY.
    field_count: int = Field(default=10, ge=1, le=1000)
    # fieldlength: the bytes of each field's value.
    field_length: int = Field(default=100, ge=1, le=65_000)
    # maxscanlength: a scan's rows are uniform on 1..this (default: 1000; e: 100).
    max_scan_length: int | None = Field(default=None, ge=1, le=1_000_000)
    # Connections loading the table at once.
    load_jobs: int = Field(default=2, ge=1, le=64)

    @model_validator(mode="after")
    def _one_length(self) -> YcsbSettings:
        if self.duration is not None and self.operation_count is not None:
            raise ValueError("got both duration and operation_count; allowed: one of them")
        return self

    def per_client(self) -> int | None:
        """operation_count as the harness counts it: per client (rounded up)."""
        if self.operation_count is None:
            return None
        return -(-self.operation_count // self.clients)

    def own(self) -> dict[str, Any]:
        """The workload's own settings, as the engine's ycsb module reads them."""
        return {"workload": self.workload, "distribution": self.distribution,
                "field_count": self.field_count, "field_length": self.field_length,
                "max_scan_length": self.max_scan_length}


Endpoint = PgWireEndpoint | MysqlWireEndpoint


@WORKLOADS.declare("ycsb", "YCSB's core workloads A-F (read, update, insert, scan, read-modify-write; zipfian, "
                   "uniform, latest) on its usertable from a Rust driver")
class YcsbWorkload(Workload[Endpoint]):
    metrics = ("ops", "operations", "failed", "operations.*", "latency_mean_ms", "latency_p99_ms",
               "latency.*_ms", "errors.*", *harness.METRICS)
    Settings: ClassVar[type[WorkloadSettings]] = YcsbSettings
    example: ClassVar[dict[str, Any]] = {"duration": "1s", "record_count": 1000}
    sample_factor: ClassVar[str] = "clients"
    data_fields: ClassVar[tuple[str, ...]] = ("record_count", "field_count", "field_length")
    # a PostgreSQL or a MySQL server
    needs: ClassVar[frozenset[Capability]] = frozenset({Capability.SQL})
    needs_any: ClassVar[frozenset[Capability]] = frozenset({Capability.POSTGRES_WIRE, Capability.MYSQL_WIRE})
    headline: ClassVar[tuple[str, ...]] = ("ops", "latency_p99_ms")

    settings: YcsbSettings

    def __init__(self, settings: YcsbSettings) -> None:
        super().__init__(settings)
        self._before: int | None = None  # rows before the run, for check()
        self._inserted = 0

    def writes(self) -> bool:
        return self.settings.workload not in READ_ONLY

    def prepare(self, endpoint: Endpoint, ctx: RunContext) -> LoadResult:
        s = self.settings
        conninfo, server = engine_wire(endpoint, "ycsb")
        if endpoint.read_only:
            self._rows(endpoint)  # usertable must be there
            return LoadResult()
        with harness.engine_errors("ycsb", failed="ycsb load failed"):
            report = ycsb_load(
                conninfo, server=server, record_count=s.record_count, field_count=s.field_count,
                field_length=s.field_length, workers=s.load_jobs, seed=s.seed or 0,
                on_step=lambda step: ctx.status(f"load {s.record_count} rows: {step}"),
            )
        return LoadResult(steps=dict(report.steps), rows=dict(report.rows))

    def run(self, endpoint: Endpoint, ctx: RunContext) -> RunResult:
        s = self.settings
        if endpoint.read_only and self.writes():
            raise UserError(f"workload ycsb: workload {s.workload!r} writes and the target is read-only",
                            'use workload = "c", or set target.allow_destructive = true')
        result = RunResult(headline=list(self.headline))
        # the rows there now are key numbers 0..rows (the load's and earlier runs' inserts):
        # reads choose among them and inserts go on after them, as YCSB's insertstart
        self._before = rows = self._rows(endpoint)
        conninfo, server = engine_wire(endpoint, "ycsb")
        threads = s.effective_threads(CLIENTS_PER_THREAD[server])
        seed = s.seed if s.seed is not None else secrets.randbits(63)
        per_client = s.per_client()
        duration = s.duration if s.duration is not None or per_client is not None else DEFAULT_DURATION_S
        stalls = StallWatch(closed_loop=s.rate is None)

        def progress(interval: _engine.Interval) -> None:
            ctx.status(f"{'warm-up' if interval.warmup else 'progress'}: {interval.t_s:.1f} s, "
                       f"{interval.tps:.1f} ops/s, p99 {interval.latency_p99_ms:.3f} ms, {interval.failed} failed")
            stalls.add(interval)
            harness.store_second(ctx, SERIES_SOURCE, interval, scheduled=s.rate is not None)

        ctx.status(f"ycsb {s.workload}: connecting {s.clients} clients on {threads} threads")
        with harness.engine_errors("ycsb"):
            out = engine_run(
                ctx, ycsb_run, conninfo, server=server, record_count=rows,
                operation_count=s.operation_count, **s.own(),
                harness=s.engine_settings(threads=threads, duration=duration, transactions=per_client, seed=seed),
                t0_ns=ctx.t0_ns, progress=progress,
            )
        window = harness.take_run(ctx, result, out, clients=s.clients, seed=seed, steady_max_s=s.steady_max, window_from=s.window,
                                  lost=f"ycsb: all {s.clients} client connections were lost (server down?)")
        if (why := s.threads_reason(threads, THREADS_WHY[server])) is not None:
            result.events.append(Event(out.measure_start_t_s, "threads", why))
        self._inserted = next((t.committed for t in out.by_type if t.name == "insert"), 0)
        self._metrics(out, window, result, "error" if server == "mysql" else "SQLSTATE")
        stalls.annotate(result)
        return result

    def _metrics(self, out: _engine.DriverResult, window: harness.Window, result: RunResult, code: str) -> None:
        s = self.settings
        add = result.add_metric
        add("ops", window.rate, "ops/s", f"operations per second {harness.OVER_WINDOW} (YCSB: throughput)",
            higher_is_better=True)
        add("operations", window.transactions, "ops", f"operations done {harness.OVER_WINDOW}")
        add("failed", window.failed, "ops", f"operations ended by an error (after retries) {harness.OVER_WINDOW}",
            higher_is_better=False)
        base = s.latency_origin()
        harness.latency_metrics(result, out.latency, what="operation latency, every type,", base=base,
                                labels=("mean", "p99"))
        done = window.per_type(out)
        for t in out.by_type:
            if not t.committed and not t.failed:
                continue
            add(f"operations.{t.name}", done[t.name], "ops",
                f"{t.name.replace('_', ' ')} operations done {harness.OVER_WINDOW}")
            add(f"latency.{t.name}.mean_ms", harness.ms(t.latency.mean_us), "ms",
                f"{t.name.replace('_', ' ')} latency mean, {base}", higher_is_better=False)
            for name, q in PERCENTILES:
                add(f"latency.{t.name}.{name}_ms", harness.ms(_engine.hdr_quantile_us(bytes(t.histogram), q)),
                    "ms", f"{t.name.replace('_', ' ')} latency {name}, {base}", higher_is_better=False)
            result.histograms.append(Histogram(f"{OPERATION_HISTOGRAM}{t.name}", "us", out.histogram_encoding,
                                               bytes(t.histogram)))
        for kind, n in out.errors_by_kind.items():
            add(f"errors.{kind}", n, "ops", f"operations failed with {code} {kind}", higher_is_better=False)
        harness.harness_metrics(result, out, per=("op", "operation"), scheduled=s.rate is not None,
                                latency_limit_s=s.latency_limit, rate=s.rate)

    def _rows(self, endpoint: Endpoint) -> int:
        try:
            with endpoint.connect() as conn:
                return int(conn.execute("SELECT count(*) FROM usertable").fetchone()[0])
        except Exception as exc:
            raise RunFailure(f"ycsb: cannot count the rows of usertable on {endpoint.display()} (is it loaded?): "
                             f"{str(exc).strip()}") from None

    def check(self, endpoint: Endpoint, ctx: RunContext) -> CheckResult:
        """Rows after the run: those before and one per committed insert (each
        insert a new key number; reads, updates and scans add none)."""
        out = CheckResult()
        if self._before is None:
            return out
        before, self._before = self._before, None
        after = self._rows(endpoint)
        want = before + self._inserted
        out.add("row_count", after >= want, f"{after} rows; {before} before the run, {self._inserted} inserted")
        return out

    @classmethod
    def report_sections(cls, store: Store, runs: list[dict[str, Any]]) -> list[Any]:
        """Each run's throughput and each operation type's latency, one row per run and type."""
        from perflab.section import Section, Table

        rows: list[list[Any]] = []
        for run in runs:
            values = {m["name"]: m["value"] for m in store.metrics(run["id"])}
            for op in OPERATIONS:
                if f"operations.{op}" not in values:
                    continue
                rows.append([run["id"], fmt_factors(run["factors"], ", "), op, values.get("ops"),
                             values[f"operations.{op}"],
                             *[values.get(f"latency.{op}.{name}_ms") for name, _ in PERCENTILES]])
        if not rows:
            return []
        return [Section("YCSB operations", [Table(
            ["run", "factors", "operation", "ops/s (all)", "count", "p50 ms", "p95 ms", "p99 ms"], rows,
            "each operation type's count and latency in the measured window, one row per run and type")])]
