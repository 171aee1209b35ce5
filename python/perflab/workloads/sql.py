"""The `sql` workload: given statements or files, timed one by one.

Setup statements run once when the data is prepared; the body runs
`iterations` times, or for `duration`, on one connection, after an optional
warm-up that is excluded from every figure. Each statement's time is recorded;
metrics per statement are count, mean, p50, p95 and max. It carries
user-defined query sets (the energy study's W22, say) as well as smoke tests.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from perflab.context import RunContext
from perflab.endpoints import Capability, Sessionlike, SqlEndpoint
from perflab.errors import RunFailure, UserError
from perflab.model import Event, Flag, LoadResult, QueryTime, RunResult, SeriesPoint
from perflab.settings_model import OsText, StrictModel
from perflab.units import Duration
from perflab.workloads import WORKLOADS
from perflab.workloads.base import Workload, WorkloadSettings

# Beyond this many executions per run, per-execution rows are not stored (the
# metrics still count every execution); an event says so.
MAX_STORED_EXECUTIONS = 100_000
# Above this share of its CPU the driver, not the server, may be the bottleneck.
CLIENT_BOUND_UTIL = 0.8
# A billion executions of the body is days even for SELECT 1.
MAX_ITERATIONS = 10**9


class NamedStatement(StrictModel):
    # The statement's name in tables and figures.
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    # The SQL it runs.
    sql: str = Field(min_length=1)


class SqlSettings(WorkloadSettings):
    kind: Literal["sql"]
    # Statements run once, before the timed body (the load phase).
    setup: list[str] = Field(default_factory=list)
    # SQL files run once before the timed body (relative to the experiment file).
    setup_files: list[OsText] = Field(default_factory=list)
    # The timed body: SQL statements, or tables { name, sql }, run in order.
    statements: list[str | NamedStatement] = Field(default_factory=list)
    # SQL files of the timed body (relative to the experiment file), after `statements`.
    files: list[OsText] = Field(default_factory=list)
    # Times the body runs (instead of a duration; neither: once).
    iterations: int | None = Field(default=None, ge=1, le=MAX_ITERATIONS)
    # Run the body again and again for this long (instead of iterations).
    duration: Duration | None = Field(default=None, gt=0)
    # Time the body runs before the measured window.
    warmup: Duration = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _one_stop_rule(self) -> SqlSettings:
        if self.iterations is not None and self.duration is not None:
            raise ValueError("got both iterations and duration; allowed: one of them")
        if not self.statements and not self.files:
            raise ValueError("no statements; allowed: statements = [\"SELECT ...\"] and/or files = [\"q1.sql\"]")
        return self


def _file(base_dir: Path, name: str) -> Path:
    return (base_dir / name) if not Path(name).is_absolute() else Path(name)


def _read(base_dir: Path, name: str, what: str) -> str:
    path = _file(base_dir, name)
    try:
        return path.read_text()
    except OSError as exc:
        raise UserError(f"workload.{what}: cannot read {path}: {exc.strerror}",
                        "give a path relative to the experiment file, or an absolute one") from None


@WORKLOADS.declare("sql", "given SQL statements or files: setup once, then a timed body; per-statement times")
class SqlWorkload(Workload[SqlEndpoint]):
    Settings: ClassVar[type[WorkloadSettings]] = SqlSettings
    example: ClassVar[dict[str, Any]] = {"statements": ["SELECT 1"]}
    sample_factor: ClassVar[str] = "iterations"
    data_fields: ClassVar[tuple[str, ...]] = ("setup", "setup_files")
    needs: ClassVar[frozenset[Capability]] = frozenset({Capability.SQL})
    headline: ClassVar[tuple[str, ...]] = ("statements_per_s", "statement_mean_ms")

    settings: SqlSettings

    @classmethod
    def preflight(cls, settings: SqlSettings, base_dir: Path) -> list[tuple[str, str]]:
        problems = []
        for what in ("setup_files", "files"):
            for i, name in enumerate(getattr(settings, what)):
                path = _file(base_dir, name)
                if not path.is_file() or not os.access(path, os.R_OK):
                    problems.append((f"workload.{what}[{i}]", f"cannot read {path}; allowed: a readable file, "
                                     "relative to the experiment file or absolute"))
        return problems

    def writes(self) -> bool:
        return bool(self.settings.setup or self.settings.setup_files)

    def data_key(self) -> str:
        # The setup text defines the data; hash it so edits to a setup file count.
        return hashlib.sha256(super().data_key().encode()).hexdigest()

    def _body(self, base_dir: Path) -> list[tuple[str, str]]:
        body: list[tuple[str, str]] = []
        for i, st in enumerate(self.settings.statements, start=1):
            body.append((st.name, st.sql) if isinstance(st, NamedStatement) else (f"s{i}", st))
        for f in self.settings.files:
            body.append((Path(f).stem, _read(base_dir, f, "files")))
        return body

    def prepare(self, endpoint: SqlEndpoint, ctx: RunContext) -> LoadResult:
        load = LoadResult()
        statements = list(self.settings.setup)
        statements += [_read(ctx.base_dir, f, "setup_files") for f in self.settings.setup_files]
        if not statements:
            return load
        start = time.perf_counter()
        with endpoint.connect() as conn:
            for sql in statements:
                _execute(conn, sql, "setup")
        load.steps["setup"] = time.perf_counter() - start
        return load

    def run(self, endpoint: SqlEndpoint, ctx: RunContext) -> RunResult:
        s = self.settings
        body = self._body(ctx.base_dir)
        result = RunResult(headline=list(self.headline))
        times: dict[str, list[float]] = {name: [] for name, _ in body}
        try:
            conn = endpoint.connect()
        except Exception as exc:
            raise RunFailure(f"cannot connect: {exc}") from None
        per_second: dict[int, int] = {}
        with conn:
            warm_end = time.monotonic() + s.warmup
            while s.warmup and time.monotonic() < warm_end and not ctx.cancel.is_set():
                for _, sql in body:
                    _execute(conn, sql, "warmup")
            measure_start = time.perf_counter()
            measure_start_t = ctx.measure_start_s = ctx.now_s()
            cpu_start = time.process_time()
            deadline = measure_start + s.duration if s.duration else None
            iterations = 0
            seq = 0
            # Neither iterations nor a duration: the body runs once.
            limit = s.iterations if s.iterations is not None else (None if s.duration else 1)
            while not ctx.cancel.is_set():
                if limit is not None and iterations >= limit:
                    break
                if deadline is not None and time.perf_counter() >= deadline:
                    break
                for name, sql in body:
                    started_s = ctx.now_s()
                    t = time.perf_counter()
                    _execute(conn, sql, name)
                    elapsed = time.perf_counter() - t
                    times[name].append(elapsed)
                    second = int(ctx.now_s())
                    per_second[second] = per_second.get(second, 0) + 1
                    seq += 1
                    if seq <= MAX_STORED_EXECUTIONS:
                        result.queries.append(QueryTime(stream=0, seq=seq, query=name, seconds=elapsed,
                                                        started_s=started_s))
                iterations += 1
                if iterations % 50 == 0 or limit is not None:
                    ctx.status(f"{iterations} iterations")
            measured_s = time.perf_counter() - measure_start
            driver_cpu_s = time.process_time() - cpu_start
            measure_end_t = ctx.measure_end_s = ctx.now_s()
        if seq > MAX_STORED_EXECUTIONS:
            result.events.append(Event(ctx.now_s(), "truncated",
                                       f"{seq} executions; the first {MAX_STORED_EXECUTIONS} are stored one by one"))
        for second, count in sorted(per_second.items()):
            # Only whole seconds inside the measured window: a partial first or
            # last second would show as a false dip.
            if second >= measure_start_t and second + 1 <= measure_end_t:
                result.series.append(SeriesPoint("sql", "qps", second + 0.5, count))
        all_ms = np.array([x for v in times.values() for x in v]) * 1000
        # One connection on one thread: the driver's CPU budget is one core.
        # Process CPU includes the collectors' threads, which cost well under 1%.
        driver_util = driver_cpu_s / measured_s if measured_s > 0 else 0.0
        result.add_metric("driver_cpu_s", driver_cpu_s, "s", "perflab's process CPU time while measuring")
        result.add_metric("driver_cpu_util", driver_util, "fraction", "driver CPU time / measured time (1 core)")
        if driver_util > CLIENT_BOUND_UTIL:
            result.flags.append(Flag.CLIENT_BOUND)
            result.events.append(Event(ctx.now_s(), Flag.CLIENT_BOUND.value,
                                       f"the driver used {driver_util:.0%} of its one core: figures describe perflab, "
                                       "not only the server"))
        result.add_metric("iterations", iterations, "count", "body iterations measured")
        result.add_metric("statements", len(all_ms), "count", "statements executed after warm-up")
        result.add_metric("measured_s", measured_s, "s", "time measured, after warm-up")
        if len(all_ms):
            result.add_metric("statements_per_s", len(all_ms) / measured_s, "1/s",
                              "statements per second (one connection)", higher_is_better=True)
            result.add_metric("statement_mean_ms", float(all_ms.mean()), "ms", "mean over all statements",
                              higher_is_better=False)
        for name, values in times.items():
            if not values:
                continue
            ms = np.array(values) * 1000
            result.add_metric(f"{name}.count", len(ms), "count")
            result.add_metric(f"{name}.mean_ms", float(ms.mean()), "ms", higher_is_better=False)
            result.add_metric(f"{name}.p50_ms", float(np.percentile(ms, 50)), "ms", higher_is_better=False)
            result.add_metric(f"{name}.p95_ms", float(np.percentile(ms, 95)), "ms", higher_is_better=False)
            result.add_metric(f"{name}.max_ms", float(ms.max()), "ms", higher_is_better=False)
        return result


def _execute(conn: Sessionlike, sql: str, name: str) -> None:
    try:
        cur = conn.execute(sql)
        if getattr(cur, "description", None):
            cur.fetchall()
    except Exception as exc:
        raise RunFailure(f"statement {name} failed: {type(exc).__name__}: {str(exc).strip()}") from None
