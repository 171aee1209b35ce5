"""The load phase of a data set the engine generates (tpch, ssb): drop and
create the tables, stream the data in by the database's fastest path
(`SqlEndpoint.bulk_load`), then the keys, indexes and statistics, each step
timed, as DBT-3 reports its load test."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from perflab.context import RunContext
from perflab.endpoints import SqlEndpoint
from perflab.errors import UserError
from perflab.model import LoadResult


def require_writable(endpoint: SqlEndpoint, kind: str) -> None:
    if endpoint.read_only:
        raise UserError(
            f"the {kind} workload creates and loads tables, but the target is read-only",
            "set target.allow_destructive = true for a database perflab may write",
        )


def load_generated(endpoint: SqlEndpoint, conn: Any, ctx: RunContext, dataset: str, scale_factor: float,
                   tables: Sequence[str], drops: Sequence[str], creates: Sequence[str],
                   steps: Sequence[Any], jobs: int) -> LoadResult:
    """The timed load phase on `conn` (steps are `tpch.schema.Step`s, whose
    statements are independent and may run in parallel sessions)."""
    load = LoadResult()
    started = time.perf_counter()
    for sql in [*drops, *creates]:
        conn.execute(sql)
    load.steps["create tables"] = time.perf_counter() - started

    ctx.status(f"{dataset}: loading SF {scale_factor:g}")
    started = time.perf_counter()
    load.rows = endpoint.bulk_load(dataset, scale_factor, list(tables), jobs)
    load.steps["load"] = time.perf_counter() - started

    for step in steps:
        ctx.status(f"{dataset}: {step.name}")
        started = time.perf_counter()
        run_step(endpoint, step.statements, jobs)
        load.steps[step.name] = time.perf_counter() - started
    return load


def run_step(endpoint: SqlEndpoint, statements: Sequence[str], jobs: int) -> None:
    """A step's statements each on its own session, `jobs` at a time
    (DuckDB parallelises each statement itself: one at a time there)."""
    if not endpoint.parallel_sessions or len(statements) == 1:
        conn = endpoint.connect()
        try:
            for sql in statements:
                conn.execute(sql)
        finally:
            conn.close()
        return

    def one(sql: str) -> None:
        with endpoint.connect() as conn:
            conn.execute(sql)

    with ThreadPoolExecutor(max_workers=min(jobs, len(statements))) as pool:
        for future in [pool.submit(one, sql) for sql in statements]:
            future.result()
