"""The load phase of a data set the engine generates (tpch, ssb): drop and
create the tables, stream the data in by the database's fastest path
(`SqlEndpoint.bulk_load`), then the keys, indexes and statistics, each step
timed, as DBT-3 reports its load test.

After the data is in, on a server that takes parallel sessions, the steps
overlap (`run_overlapped`): a statement starts as soon as every earlier
statement on the same tables is done, unless both only build an index
(CREATE INDEX takes a SHARE lock, which does not conflict with itself). So
while lineitem's foreign keys are checked (one core: a key's check is one
serial query, and lineitem's two must take turns on its lock), the other
session builds the indexes of the tables that the running check does not
lock. Each statement still waits for what it waited for in step order: a
foreign key comes after its tables' primary keys and ANALYZE (TPC-H's step
order is in tpch.schema.load_steps). Each step's seconds are then the wall
time from the previous step's completion to its own, so the steps still
add up to the load's wall time."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from perflab.context import RunContext
from perflab.endpoints import GeneratedData, Sessionlike, SqlEndpoint
from perflab.errors import UserError
from perflab.model import LoadResult


def require_writable(endpoint: SqlEndpoint, kind: str) -> None:
    if endpoint.read_only:
        raise UserError(
            f"the {kind} workload creates and loads tables, but the target is read-only",
            "set target.allow_destructive = true for a database perflab may write",
        )


def load_generated(endpoint: SqlEndpoint, conn: Sessionlike, ctx: RunContext, data: GeneratedData, scale_factor: float,
                   tables: Sequence[str], drops: Sequence[str], creates: Sequence[str],
                   steps: Sequence[Any], jobs: int) -> LoadResult:
    """The timed load phase on `conn` (steps are `tpch.schema.Step`s, whose
    statements are independent and may run in parallel sessions)."""
    load = LoadResult()
    started = time.perf_counter()
    for sql in [*drops, *creates]:
        conn.execute(sql)
    load.steps["create tables"] = time.perf_counter() - started

    dataset = data.name
    ctx.status(f"{dataset}: loading SF {scale_factor:g}")
    started = time.perf_counter()
    load.rows = endpoint.bulk_load(data, scale_factor, list(tables), jobs, cancel=ctx.cancel)
    load.steps["load"] = time.perf_counter() - started

    ctx.status(f"{dataset}: load done")
    if endpoint.parallel_sessions and jobs > 1:
        ctx.status(f"{dataset}: {', '.join(step.name for step in steps)} (overlapped)")
        last = time.perf_counter()

        def step_done(name: str) -> None:
            nonlocal last
            now = time.perf_counter()
            load.steps[name] = now - last
            last = now
            ctx.status(f"{dataset}: {name} done")

        run_overlapped(endpoint, steps, jobs, load.rows, step_done)
        return load
    for step in steps:
        ctx.status(f"{dataset}: {step.name}")
        started = time.perf_counter()
        run_step(endpoint, step.statements, jobs)
        load.steps[step.name] = time.perf_counter() - started
        ctx.status(f"{dataset}: {step.name} done")
    return load


# The statements the load steps run, as perflab writes them, and the lock
# each takes on each table it names (PostgreSQL's table-level lock modes).
_SHARE = "share"  # CREATE INDEX: compatible with itself
_PATTERNS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], dict[str, str]]], ...] = (
    (re.compile(r"^alter table (\w+) add constraint \w+ foreign key \(.*?\) references (\w+) "),
     lambda m: {m.group(1): "share row exclusive", m.group(2): "share row exclusive"}),
    (re.compile(r"^alter table (\w+) add constraint \w+ primary key "), lambda m: {m.group(1): "access exclusive"}),
    (re.compile(r"^create index \w+ on (\w+) "), lambda m: {m.group(1): _SHARE}),
    (re.compile(r"^analyze (\w+)$"), lambda m: {m.group(1): "share update exclusive"}),
)
_EVERYTHING = "*"  # a statement of another form: it waits for all before it, and all after wait for it


def statement_locks(sql: str) -> dict[str, str]:
    """{table: lock mode} of one of the load steps' statements; another form
    locks everything (it runs alone, in its place)."""
    for pattern, locks in _PATTERNS:
        m = pattern.match(sql)
        if m:
            return locks(m)
    return {_EVERYTHING: "access exclusive"}


@dataclass
class _Job:
    order: int
    step: str
    sql: str
    locks: dict[str, str]
    cost: float  # rows of the biggest table it names
    state: str = "waiting"  # waiting | running | done
    blockers: list[_Job] = field(default_factory=list)


def _conflict(a: _Job, b: _Job) -> bool:
    if _EVERYTHING in a.locks or _EVERYTHING in b.locks:
        return True
    return any(t in b.locks and not (a.locks[t] == b.locks[t] == _SHARE) for t in a.locks)


def plan_overlapped(steps: Sequence[Any], rows: dict[str, int]) -> list[_Job]:
    """The steps' statements in order, each with the earlier ones it must wait for."""
    jobs: list[_Job] = []
    for step in steps:
        for sql in step.statements:
            locks = statement_locks(sql)
            job = _Job(len(jobs), step.name, sql, locks, max((rows.get(t, 0) for t in locks), default=0))
            job.blockers = [j for j in jobs if _conflict(job, j)]
            jobs.append(job)
    return jobs


def run_overlapped(endpoint: SqlEndpoint, steps: Sequence[Any], sessions: int, rows: dict[str, int],
                   step_done: Callable[[str], None]) -> None:
    """Run the steps' statements on `sessions` sessions, each as soon as what
    it waits for is done; among those ready, the one whose tables have the
    most work left goes first (lineitem's chain is the load's critical path).
    `step_done(name)` is called as each step's last statement ends, in step
    order. The first error stops the handing out and is raised."""
    jobs = plan_overlapped(steps, rows)
    left = {step.name: len(step.statements) for step in steps}
    order = [step.name for step in steps]
    cond = threading.Condition()
    failure: list[BaseException] = []

    def work_left(job: _Job) -> float:
        return sum(j.cost for j in jobs if j.state != "done" and set(j.locks) & set(job.locks))

    def next_job() -> _Job | None:
        """The next ready job (caller holds `cond`), or None when none is left."""
        while True:
            if failure or all(j.state != "waiting" for j in jobs):
                return None
            ready = [j for j in jobs if j.state == "waiting" and all(b.state == "done" for b in j.blockers)
                     and not any(r.state == "running" and _conflict(j, r) for r in jobs)]
            if ready:
                job = max(ready, key=lambda j: (work_left(j), -j.order))
                job.state = "running"
                return job
            cond.wait()

    def session() -> None:
        conn = endpoint.connect()
        try:
            while True:
                with cond:
                    job = next_job()
                if job is None:
                    return
                try:
                    conn.execute(job.sql)
                except BaseException as exc:
                    with cond:
                        failure.append(exc)
                        cond.notify_all()
                    return
                with cond:
                    job.state = "done"
                    left[job.step] -= 1
                    while order and left[order[0]] == 0:
                        step_done(order.pop(0))
                    cond.notify_all()
        finally:
            conn.close()

    with ThreadPoolExecutor(max_workers=max(1, sessions)) as pool:
        for future in [pool.submit(session) for _ in range(max(1, sessions))]:
            future.result()
    if failure:
        raise failure[0]
    # steps with no statements
    for name in order:
        step_done(name)


def run_step(endpoint: SqlEndpoint, statements: Sequence[str], jobs: int) -> None:
    """A step's statements each on its own session, `jobs` at a time; with
    one job, or on a server without parallel sessions (DuckDB parallelises
    each statement itself), in order on one session."""
    if not endpoint.parallel_sessions or jobs <= 1 or len(statements) <= 1:
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
