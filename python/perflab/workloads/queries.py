"""The `queries` workload: a user's own query set, timed query by query.

- `queries`: a directory of .sql files, one query each, run in name order (natural: q2 before q10)
  (the query's name is the file's stem), or an inline table of named
  queries (`[workload.queries]` q1 = "select ..."), or a built-in set:
  "@tpch" (TPC-H's 22 queries with the spec's validation parameters, on
  TPC-H data, in the target's dialect as the tpch workload runs them: MySQL's
  Q13 on MariaDB and MySQL) or "@ssb" (SSB's 13 with the standard parameters,
  on SSB data). A directory may hold `set.toml`: `dataset = "tpch"` (the data its
  queries need) and `[params.<query>]` tables, defaults that
  `workload.params` overrides name by name. So one factor,
  "workload.queries" = ["@tpch", "@ssb", "w22-like"], runs several query
  sets, each on its own data.
- Parameters: `${name}` in a query's text is replaced by a value drawn for
  each execution from `params.<query>.<name>`: a list (one element, uniformly)
  or a range `{ min = .., max = .. }` (integers if both bounds are, else a
  float). Draws are seeded: stream s draws from seed + s. Values are put in
  as written: quote strings in the SQL ('${region}'). A placeholder with no
  definition, a definition no placeholder uses, or parameters for a query that
  does not exist are errors (exit 2, from `perflab check` too).
- `streams` run at once, each on its own connection: stream 0 in name order,
  every other stream in its own seeded order; each runs its sequence
  `repetitions` times. Each execution is stored in the query table (stream,
  place, name, text as run, start on the run's clock, time, status, error).
- `query_timeout` cancels a query that runs longer (stored as "timeout").
  A failed query is stored with its error; `on_error = "continue"` (default)
  goes on, "fail" stops every stream and fails the run.
- Data: `dataset = "tpch"` or "ssb" (with `scale_factor`; default: the
  set's own, from set.toml or the built-in) generates that data set first, as those workloads load it; `prepare` names a SQL script (DDL
  and data load) run after it. Together they are the timed load phase. With
  neither, the queries run on the database as it is: an external target is
  then only read, unless its `allow_destructive` says otherwise.
- Writes: a query whose statement changes data or schema (`writes_data`:
  INSERT, UPDATE, DELETE, CREATE, ...) is recorded before the run (the
  store's effect "queries.writes"). A run run again after an attempt that ran
  such queries and did not finish gets its data loaded again first (marked
  "fresh load"), when the workload has a load phase; without one, the run
  says that the earlier attempt's writes stay. A failed run keeps the
  queries it completed, stored with it as failed.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import re
import string
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, ValidationError, model_validator

from perflab.context import RunContext
from perflab.endpoints import Capability, SqlEndpoint
from perflab.errors import RunFailure, UserError
from perflab.model import Event, Flag, LoadResult, QueryTime, RunResult, natural_key
from perflab.settings_model import OsText, StrictModel
from perflab.units import Duration
from perflab.workloads import WORKLOADS
from perflab.workloads.base import Workload, WorkloadSettings
from perflab.workloads.timed import per_query_stats, short_error, timed_query

if TYPE_CHECKING:
    from perflab.store import Store

Scalar = int | float | str


class Range(StrictModel):
    # The lowest value drawn.
    min: int | float
    # The highest value drawn.
    max: int | float

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.min > self.max:
            raise ValueError(f"got min {self.min} > max {self.max}; allowed: min <= max")
        return self


class QueriesSettings(WorkloadSettings):
    kind: Literal["queries"]
    # A directory of .sql files (relative to the experiment file), or name -> SQL.
    queries: OsText | dict[str, OsText]
    # query name -> parameter name -> a list of values or a { min, max } range.
    params: dict[str, dict[str, list[Scalar] | Range]] = Field(default_factory=dict)
    # Seed of the parameters' draws: the same seed, the same queries.
    seed: int = Field(default=1, ge=0, le=2**63 - 1)
    # Concurrent sessions, each running the whole query sequence (in its own order).
    streams: int = Field(default=1, ge=1, le=256)
    # Times each stream runs its whole sequence, within one run.
    repetitions: int = Field(default=1, ge=1, le=100_000)
    # A query that runs longer is cancelled and counted as timed out.
    query_timeout: Duration | None = Field(default=None, gt=0)
    # A failed query: note it and go on, or fail the run.
    on_error: Literal["continue", "fail"] = "continue"
    # A data set the engine generates before `prepare`, and its scale factor.
    dataset: Literal["tpch", "ssb"] | None = None
    scale_factor: float = Field(default=1.0, ge=0.01, le=100000)
    # A SQL script (DDL, data load) run as the load phase.
    prepare: OsText | None = None
    # Sessions loading the generated data set at once (default: the CPUs perflab may use).
    load_jobs: int | None = Field(default=None, ge=1, le=256)

    @model_validator(mode="after")
    def _lists_not_empty(self) -> QueriesSettings:
        for query, defs in self.params.items():
            for name, values in defs.items():
                if isinstance(values, list) and not values:
                    raise ValueError(f"params.{query}.{name}: got []; allowed: a non-empty list or {{ min, max }}")
        if isinstance(self.queries, dict) and not self.queries:
            raise ValueError("queries: got an empty table; allowed: a directory, or name = \"SQL\" entries")
        return self


@dataclass(frozen=True)
class QuerySource:
    name: str
    template: string.Template
    origin: str  # the file, or "workload.queries.<name>"
    params: dict[str, list[Scalar] | Range]  # its parameters: set.toml's, then workload.params'


class SetFile(StrictModel):
    """A query directory's set.toml."""

    dataset: Literal["tpch", "ssb"] | None = None
    params: dict[str, dict[str, list[Scalar] | Range]] = Field(default_factory=dict)


BUILTIN_SETS = {"@tpch": "tpch", "@ssb": "ssb"}


def _builtin(name: str, dialect: str) -> list[tuple[str, str, str]]:
    """A built-in set's queries in the endpoint's `dialect`, as the workload
    that owns them picks its texts: TPC-H's 22 with the validation parameters
    (workloads/tpch/qgen.py, e.g. MySQL's own Q13), or SSB's 13 with the
    standard ones (one text for every dialect)."""
    if name == "@tpch":
        from perflab.workloads.tpch import qgen

        return [(f"Q{n}", qgen.render(n, qgen.VALIDATION_PARAMETERS[n], dialect).replace("$", "$$"),
                 f"TPC-H Q{n}") for n in range(1, 23)]
    if name == "@ssb":
        from perflab.workloads.ssb import queries

        return [(q.name, q.text.replace("$", "$$"), f"SSB {q.name}") for q in queries.round_queries(0, False, 0)]
    raise UserError(f"workload.queries: {name!r} is not a built-in set",
                    f"use one of {', '.join(BUILTIN_SETS)}, a directory, or an inline table")


def _set_file(directory: Path) -> SetFile:
    path = directory / "set.toml"
    if not path.is_file():
        return SetFile()
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    try:
        return SetFile.model_validate(tomllib.loads(path.read_text()))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(f"workload.queries: {path}: {where}: {first['msg']}",
                        "set.toml holds dataset = \"tpch\" or \"ssb\" and [params.<query>] tables") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"workload.queries: {path}: {exc}", "fix the set file's TOML") from None


def set_dataset(settings: QueriesSettings, base_dir: Path) -> str | None:
    """The data set to generate: the workload's, else the set's own."""
    if settings.dataset is not None or isinstance(settings.queries, dict):
        return settings.dataset
    if settings.queries.startswith("@"):
        return BUILTIN_SETS.get(settings.queries)
    directory = _path(base_dir, settings.queries)
    return _set_file(directory).dataset if directory.is_dir() else None


@dataclass(frozen=True)
class Execution:
    stream: int
    seq: int
    name: str
    text: str


def _path(base_dir: Path, name: str) -> Path:
    p = Path(name).expanduser()
    return p if p.is_absolute() else base_dir / p


def load_queries(settings: QueriesSettings, base_dir: Path, dialect: str) -> list[QuerySource]:
    """The query set, checked: every file readable, non-empty text with valid
    placeholders, and every placeholder defined by `params` and every
    definition used. A built-in set's texts are the endpoint's `dialect`'s
    (SqlEndpoint.dialect). UserError names the first problem."""
    sources: list[tuple[str, str, str]] = []  # (name, text, origin)
    set_params: dict[str, dict[str, list[Scalar] | Range]] = {}
    if isinstance(settings.queries, dict):
        for name, text in settings.queries.items():
            sources.append((name, text, f"workload.queries.{name}"))
    elif settings.queries.startswith("@"):
        sources = _builtin(settings.queries, dialect)
    else:
        directory = _path(base_dir, settings.queries)
        if not directory.is_dir():
            raise UserError(f"workload.queries: {directory} is not a directory",
                            "give a directory of .sql files (relative to the experiment file) or an inline table")
        files = sorted((p for p in directory.iterdir() if p.suffix == ".sql" and p.is_file()), key=lambda p: natural_key(p.name))
        if not files:
            raise UserError(f"workload.queries: {directory} holds no .sql files",
                            "put one query per .sql file in it, named so that name order (natural: q2 before q10) is run order")
        for f in files:
            try:
                text = f.read_text()
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
                raise UserError(f"workload.queries: cannot read {f}: {reason}",
                                "make it a readable UTF-8 file holding one query") from None
            sources.append((f.stem, text, str(f)))
        set_params = _set_file(directory).params
    params = {q: {**set_params.get(q, {}), **settings.params.get(q, {})}
              for q in set(set_params) | set(settings.params)}
    out = []
    for name, text, origin in sources:
        if not _sql_body(text):
            raise UserError(f"workload.queries: {origin} holds no SQL", "write one query in it, or remove it")
        template = string.Template(text)
        used = _placeholders(template)
        if used is None:
            raise UserError(f"workload.queries: {origin}: a '$' that is not a ${{name}} placeholder",
                            "write placeholders as ${name}, and a literal dollar as $$")
        defs = params.get(name, {})
        for missing in sorted(used - set(defs)):
            raise UserError(f"workload.queries: {origin} uses ${{{missing}}}, which workload.params.{name} "
                            "does not define", f"add workload.params.{name}.{missing} = [values] or {{ min, max }}")
        for unused in sorted(set(defs) - used):
            raise UserError(f"workload.params.{name}.{unused}: unknown parameter: {origin} has no ${{{unused}}}",
                            f"remove it, or use ${{{unused}}} in the query")
        out.append(QuerySource(name, template, origin, defs))
    names = {q.name for q in out}
    for query in sorted(set(params) - names):
        raise UserError(f"workload.params.{query}: there is no query {query!r}",
                        f"name one of: {', '.join(sorted(names))}")
    return out


def _placeholders(template: string.Template) -> set[str] | None:
    """The names a template substitutes; None when a '$' starts no valid
    placeholder (what Template.is_valid and get_identifiers, Python 3.11+, say)."""
    names = set()
    for m in template.pattern.finditer(template.template):
        if m.group("invalid") is not None:
            return None
        name = m.group("named") or m.group("braced")
        if name:
            names.add(name)
    return names


def _sql_body(text: str) -> str:
    """The text without blank lines and -- comments."""
    lines = [line.split("--", 1)[0].strip() for line in text.splitlines()]
    return "\n".join(line for line in lines if line)


# The first words of statements that change data or schema. A query set
# holding one changes the data: each run records which of its queries do
# before it runs them (effect "queries.writes"), and a run run again after an
# attempt that ran them is loaded afresh first, when the workload has a load
# phase (dataset, prepare), or says that the earlier writes stay.
WRITE_VERBS = frozenset({"insert", "update", "delete", "merge", "upsert", "replace", "create", "drop", "alter",
                         "truncate", "copy", "call", "do", "grant", "revoke", "comment", "refresh", "cluster",
                         "reindex", "import", "load", "attach", "detach", "install", "checkpoint"})
_DML = re.compile(r"\b(insert|update|delete|merge)\b", re.IGNORECASE)
_INTO = re.compile(r"\binto\b", re.IGNORECASE)


def writes_data(text: str) -> bool:
    """Whether a query's text holds a statement that changes data or schema:
    one that starts with a word of WRITE_VERBS, a WITH whose body holds an
    INSERT, UPDATE, DELETE or MERGE, or a SELECT ... INTO (a new table).
    Judged from the words alone: a function with side effects called from a
    SELECT is not seen."""
    for statement in _sql_body(text).split(";"):
        words = statement.split(None, 1)
        if not words:
            continue
        first = words[0].lower().lstrip("(")
        if first in WRITE_VERBS:
            return True
        if first == "with" and _DML.search(statement):
            return True
        if first == "select" and _INTO.search(statement):
            return True
    return False


def draw(spec: list[Scalar] | Range, rng: random.Random) -> str:
    if isinstance(spec, Range):
        if isinstance(spec.min, int) and isinstance(spec.max, int):
            return str(rng.randint(spec.min, spec.max))
        return repr(rng.uniform(spec.min, spec.max))
    return str(rng.choice(spec))


def stream_executions(queries: list[QuerySource], settings: QueriesSettings, stream: int) -> list[Execution]:
    """Stream `stream`'s executions: its order (name order for stream 0, a
    permutation seeded with seed + stream for the others) `repetitions`
    times, each with parameters drawn from the stream's generator."""
    rng = random.Random(settings.seed + stream)
    order = list(queries)
    if stream > 0:
        rng.shuffle(order)
    out: list[Execution] = []
    for _ in range(settings.repetitions):
        for q in order:
            values = {k: draw(v, rng) for k, v in q.params.items()}
            out.append(Execution(stream, len(out) + 1, q.name, q.template.substitute(values)))
    return out


@WORKLOADS.declare(
    "queries",
    "a user's own query set (a directory of .sql files or inline), seeded parameters, streams, per-query times",
)
class QueriesWorkload(Workload[SqlEndpoint]):
    Settings: ClassVar[type[WorkloadSettings]] = QueriesSettings
    example: ClassVar[dict[str, Any]] = {"queries": {"q1": "select 1"}}
    sample_factor: ClassVar[str] = "repetitions"
    data_fields: ClassVar[tuple[str, ...]] = ("dataset", "scale_factor", "prepare", "queries")
    needs: ClassVar[frozenset[Capability]] = frozenset({Capability.SQL})
    headline: ClassVar[tuple[str, ...]] = ("elapsed_s", "query_geomean_s", "queries_failed")

    settings: QueriesSettings

    @classmethod
    def preflight(cls, settings: QueriesSettings, base_dir: Path) -> list[tuple[str, str]]:
        problems = []
        try:  # names and placeholders, which are the same in every dialect
            load_queries(settings, base_dir, "postgres")
        except UserError as exc:
            path = exc.message.split(":", 1)[0]
            problems.append(exc.as_problem(path))
        if settings.prepare is not None:
            p = _path(base_dir, settings.prepare)
            if not p.is_file() or not os.access(p, os.R_OK):
                problems.append(("workload.prepare", f"cannot read {p}; allowed: a readable SQL script, "
                                 "relative to the experiment file or absolute"))
        return problems

    def writes(self) -> bool:
        return (self.settings.prepare is not None or self.settings.dataset is not None
                or (isinstance(self.settings.queries, str) and self.settings.queries in BUILTIN_SETS))

    def reload_for_rerun(self, earlier_effects: list[dict[str, Any]]) -> str | None:
        """An earlier attempt of this run that ran queries that change the
        data and did not finish left their writes behind; nothing can undo a
        user's statements, so a workload that makes its data (a data set, a
        prepare script) has it loaded again, before the run. Without a load
        phase, run() says that the writes stay."""
        wrote = [e for e in earlier_effects if e["kind"] == "queries.writes"]
        if not wrote or not wrote[-1]["data"].get("reloadable"):
            return None
        names = ", ".join(wrote[-1]["data"]["queries"])
        return (f"attempt {wrote[-1]['attempt']} ran queries that change the data ({names}) and did not finish: "
                "what they wrote cannot be undone, so the data set is loaded again")

    def data_key(self) -> str:
        # The prepare script's text defines the data: edits to it count.
        key = super().data_key()
        if self.settings.prepare is not None:
            try:
                key += Path(self.settings.prepare).expanduser().read_text()
            except OSError:
                pass
        return hashlib.sha256(key.encode()).hexdigest()

    def prepare(self, endpoint: SqlEndpoint, ctx: RunContext) -> LoadResult:
        s = self.settings
        load = LoadResult()
        dataset = set_dataset(s, ctx.base_dir)
        if dataset is not None:
            load = _generate(endpoint, ctx, dataset, s.scale_factor, s.load_jobs or os.cpu_count() or 2)
        if s.prepare is not None:
            path = _path(ctx.base_dir, s.prepare)
            try:
                script = path.read_text()
            except OSError as exc:
                raise UserError(f"workload.prepare: cannot read {path}: {exc.strerror}",
                                "give a readable SQL script") from None
            ctx.status(f"queries: prepare script {path.name}")
            started = time.perf_counter()
            try:
                with endpoint.connect() as conn:
                    conn.execute(script)
            except Exception as exc:
                raise RunFailure(f"prepare script {path} failed: {short_error(exc)}") from exc
            load.steps["prepare script"] = time.perf_counter() - started
        return load

    def run(self, endpoint: SqlEndpoint, ctx: RunContext) -> RunResult:
        s = self.settings
        queries = load_queries(s, ctx.base_dir, endpoint.dialect)
        result = RunResult(headline=list(self.headline))
        plans = {n: stream_executions(queries, s, n) for n in range(s.streams)}
        self._record_writes(queries, plans, ctx, result)
        times: dict[int, list[QueryTime]] = {n: [] for n in plans}
        errors: list[BaseException] = []
        stop = threading.Event()
        barrier = threading.Barrier(s.streams)

        def stream(n: int) -> None:
            try:
                with endpoint.connect() as conn:
                    timer_timeout = None if endpoint.set_statement_timeout(conn, s.query_timeout) else s.query_timeout
                    barrier.wait()
                    for ex in plans[n]:
                        if ctx.cancel.is_set() or stop.is_set():
                            break
                        qt, _, _ = timed_query(endpoint, conn, ex, timer_timeout, ctx.now_s)
                        times[n].append(qt)
                        ctx.query_done(qt)
                        if qt.status != "ok" and s.on_error == "fail":
                            stop.set()
            except threading.BrokenBarrierError:
                pass
            except BaseException as exc:  # re-raised below
                errors.append(exc)
                stop.set()
                barrier.abort()

        ctx.status(f"queries: {len(queries)} queries, {s.streams} stream(s) x {s.repetitions}")
        started = time.perf_counter()
        threads = [threading.Thread(target=stream, args=(n,), name=f"queries-stream-{n}") for n in plans]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        elapsed = time.perf_counter() - started
        for n in sorted(times):
            result.queries.extend(times[n])
        if errors:
            # the queries completed before it: kept with the failed run
            raise RunFailure(f"a query stream failed: {short_error(errors[0])}", partial=result) from errors[0]
        failed = [t for t in result.queries if t.status != "ok"]
        for t in failed:
            result.events.append(Event(t.started_s or 0.0, f"query-{t.status}",
                                       f"stream {t.stream} {t.query}: {t.error}"))
        if failed and s.on_error == "fail":
            first = failed[0]
            raise RunFailure(f"query {first.query} (stream {first.stream}) {first.status}: {first.error}; "
                             "on_error = \"fail\" stopped the run", partial=result)
        if failed:
            result.flags.append(Flag.INVALID_METRICS)
        ok = [t.seconds for t in result.queries if t.status == "ok" and t.seconds]
        result.add_metric("elapsed_s", elapsed, "s", f"{s.streams} stream(s), first query to last", False)
        result.add_metric("queries_ok", len(ok), "queries")
        result.add_metric("queries_failed", len(failed), "queries", "errors and timeouts", False)
        if ok:
            result.add_metric("query_geomean_s", math.exp(sum(math.log(x) for x in ok) / len(ok)), "s",
                              "geometric mean of the completed queries' times", False)
        per_query_stats(result)
        return result

    def _record_writes(self, queries: list[QuerySource], plans: dict[int, list[Execution]], ctx: RunContext,
                       result: RunResult) -> None:
        """Before any query runs: which of them change the data (effect
        "queries.writes"), and what an earlier attempt's writes left, when
        the data was not loaded again for this one (reload_for_rerun)."""
        writing = [q.name for q in queries if writes_data(q.template.template)]
        if not writing:
            return
        earlier = [e for e in ctx.earlier_effects if e["kind"] == "queries.writes"]
        if earlier and not earlier[-1]["data"].get("reloadable"):
            said = (f"attempt {earlier[-1]['attempt']} ran queries that change the data "
                    f"({', '.join(earlier[-1]['data']['queries'])}) and did not finish: what they wrote stays, "
                    "since the workload has no load phase (dataset, prepare) to make the data again")
            result.events.append(Event(ctx.now_s(), "earlier-writes", said))
            ctx.warn(f"run {ctx.run_number}: {said}")
        executions = sum(1 for plan in plans.values() for ex in plan if ex.name in writing)
        reloadable = self.settings.prepare is not None or set_dataset(self.settings, ctx.base_dir) is not None
        ctx.record_effect("queries.writes", {"queries": writing, "executions": executions, "reloadable": reloadable})
        result.events.append(Event(ctx.now_s(), "writes", f"queries that change the data: {', '.join(writing)} "
                                   f"({executions} executions)"))

    @classmethod
    def report_sections(cls, store: Store, runs: list[dict[str, Any]]) -> list[Any]:
        return _report(store, runs)


def _generate(endpoint: SqlEndpoint, ctx: RunContext, dataset: str, sf: float, jobs: int) -> LoadResult:
    """TPC-H or SSB data, loaded as the tpch and ssb workloads load it."""
    from perflab.workloads.ssb import SsbSettings, SsbWorkload
    from perflab.workloads.tpch import TpchSettings, TpchWorkload

    if dataset == "tpch":
        return TpchWorkload(TpchSettings(kind="tpch", scale_factor=sf, load_jobs=jobs)).prepare(endpoint, ctx)
    return SsbWorkload(SsbSettings(kind="ssb", scale_factor=sf, load_jobs=jobs)).prepare(endpoint, ctx)


def _report(store: Store, runs: list[dict[str, Any]]) -> list[Any]:
    from perflab.workloads.ssb.report import query_section

    if not runs:
        return []
    metrics = (("elapsed_s", "elapsed s"), ("query_geomean_s", "query geomean s"),
               ("queries_failed", "failed"), ("load.total_s", "load s"))
    return [query_section(store, runs, "Query set", None, metrics,
                          "the user's query set per run: streams x repetitions", "queries-set")]
