"""How a workload or a collector reaches a provisioned target: endpoints and
the capabilities they declare.

A target's endpoint says what it can do (`capabilities`); a workload or a
collector says what it needs (`needs`). `perflab check` refuses an experiment
whose workload needs what the target's endpoint lacks, naming both, so no
code below ever asks an endpoint for its kind by name or probes it with
`getattr`.

- `SqlEndpoint`: DB-API sessions (connect), statement timeouts and
  interrupts, telling a timeout from another error, and bulk loading of the
  engine's generated data sets.
- `PgWireEndpoint`: a server that speaks the PostgreSQL protocol, with a
  typed conninfo for the engine's own PostgreSQL client (the TPC-B driver,
  COPY) and for psycopg.
- `MysqlWireEndpoint`: a server that speaks the MySQL protocol (MariaDB,
  MySQL 8), with its socket or host and port, user and database.
- `HttpEndpoint`: a web server on loopback (managed nginx or any server
  perflab starts, or an external base URL), and for a managed one the way
  to serve a directory (`publish`).

This module sits below targets, workloads, collectors and the store.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from perflab._engine import TableLoad


class Capability(str, Enum):
    """What an endpoint can do; stored and printed as its value."""

    SQL = "sql"
    POSTGRES_WIRE = "postgres-wire"
    MYSQL_WIRE = "mysql-wire"
    HTTP = "http"
    # Namespaces to send from and receive in, across a network path (a router).
    NETWORK = "network"

    def __str__(self) -> str:
        return self.value


def describe(capabilities: frozenset[Capability]) -> str:
    return ", ".join(sorted(c.value for c in capabilities)) or "nothing"


def describe_needs(needs: frozenset[Capability], needs_any: frozenset[Capability] = frozenset()) -> str:
    """All of `needs` and one of `needs_any`, in words: "sql and postgres-wire or mysql-wire"."""
    parts = [describe(needs)] if needs else []
    if needs_any:
        parts.append(" or ".join(c.value for c in Capability if c in needs_any))
    return " and ".join(parts) or "nothing"


def unmet(needs: frozenset[Capability], needs_any: frozenset[Capability],
          provided: frozenset[Capability]) -> str:
    """What `provided` lacks of all of `needs` and one of `needs_any`, in
    words ("" when it lacks nothing): what a target must add."""
    missing = needs - provided
    missing_any = needs_any if not needs_any & provided else frozenset()
    return describe_needs(missing, missing_any) if missing or missing_any else ""


class Cursorlike(Protocol):
    """What a statement gives back on every SQL session perflab opens: a
    psycopg or DuckDB cursor, or a MySQL session's result."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Sessionlike(Protocol):
    """The part of a DB-API session every SQL endpoint's `connect` gives
    (psycopg's and DuckDB's connections, MysqlSession): `execute` returns
    something to fetch from."""

    def execute(self, query: Any, params: Any = ..., /) -> Cursorlike: ...


def one_row(cursor: Cursorlike) -> Any:
    """The row of a query that always returns one (an aggregate, SHOW, a
    function call)."""
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError("a query that returns one row returned none")
    return row


@dataclass(kw_only=True)
class Endpoint(abc.ABC):
    """A provisioned target, reachable.

    `read_only` is set when perflab may not write to it (an external database
    without allow_destructive), and then every session it opens is read-only.
    `fresh` is true when the target's data was created anew by this
    provision, so any data prepared earlier is gone.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset()

    read_only: bool = False
    fresh: bool = True
    info: dict[str, Any] = field(default_factory=dict)

    @abc.abstractmethod
    def display(self) -> str:
        """Where it is, with any password masked."""

    def tcp_port(self) -> int | None:
        """The TCP port the server listens on, for a driver in a network
        namespace of its own (driver.network); None when it has none."""
        return None


@dataclass(kw_only=True)
class SqlEndpoint(Endpoint):
    """A database reached through DB-API sessions."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.SQL})
    # The SQL text dialect ("postgres", "duckdb"): which query texts and DDL
    # a workload sends. Not a capability: never branch on it for behaviour.
    dialect: ClassVar[str]
    # Whether independent statements (index builds) finish sooner on several
    # sessions at once; false where the engine parallelises each statement.
    parallel_sessions: ClassVar[bool] = True

    # On a database perflab did not create: the schema of perflab's own that
    # every session works in (perflab.targets.confine), None elsewhere. A
    # workload names it where a name must not reach past that schema (a
    # DROP ... IF EXISTS before its table exists: DuckDB then looks in main).
    schema: str | None = None

    @abc.abstractmethod
    def connect(self) -> Any:
        """A new DB-API connection in autocommit mode."""

    @abc.abstractmethod
    def set_statement_timeout(self, conn: Any, seconds: float | None) -> bool:
        """Make the server end statements on `conn` that run longer than
        `seconds` (None: never). False when the server has no such limit, and
        the caller must `interrupt` from a timer instead."""

    @abc.abstractmethod
    def interrupt(self, conn: Any) -> None:
        """Cancel the statement running on `conn` (safe from another thread)."""

    @abc.abstractmethod
    def is_timeout(self, exc: BaseException) -> bool:
        """Whether `exc` ended a statement because of a timeout or interrupt."""

    @abc.abstractmethod
    def bulk_load(self, data: GeneratedData, scale_factor: float, tables: list[str], jobs: int, *,
                  cancel: Cancel | None = None) -> dict[str, int]:
        """Generate `tables` of the engine's data set `data` (TPC-H, SSB) at
        `scale_factor` and load them, `jobs` at a time, by this database's
        fastest path (one of `data`'s generators); rows loaded per table. A
        set `cancel` (the run's) stops the load between chunks."""


class Cancel(Protocol):
    """What stops a long call between chunks: a run's `ctx.cancel` (a
    threading.Event)."""

    def is_set(self) -> bool: ...


class CopyPostgres(Protocol):
    """(conninfo, scale_factor, tables, connections, cancel=): every table
    COPYed into PostgreSQL."""

    def __call__(self, conninfo: str, scale_factor: float, tables: list[str], connections: int, /, *,
                 cancel: Cancel | None = None) -> list[TableLoad]: ...


class WriteText(Protocol):
    """(path, table, scale_factor, part, parts, insert_rows=, cancel=): one
    part of a table as text rows ('|' between fields, as COPY text) written
    to a pipe or FIFO at `path`, or with `insert_rows` as multi-row INSERT
    statements of at most that many rows, one a line; the rows written."""

    def __call__(self, path: str, table_name: str, scale_factor: float, part: int, parts: int, /, *,
                 insert_rows: int | None = None, cancel: Cancel | None = None) -> int: ...


@dataclass(frozen=True)
class GeneratedData:
    """A data set the engine generates, as a target loads it: the workload
    that owns it says how, so no target dispatches on a data set's name."""

    name: str  # "tpch", "ssb": the loading sessions are "perflab-<name>"
    copy_postgres: CopyPostgres
    # (table, scale_factor, threads): one table as an Arrow C stream capsule
    arrow_stream: Callable[[str, float, int], object]
    # (scale_factor, tables): every part a loader takes, (table, part, parts), the biggest first
    parts: Callable[[float, list[str]], list[tuple[str, int, int]]]
    write_text: WriteText


@dataclass(kw_only=True)
class PgWireEndpoint(SqlEndpoint):
    """A server that speaks the PostgreSQL protocol (PostgreSQL itself, or
    Citus, CockroachDB, YugabyteDB through their PostgreSQL front)."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.SQL, Capability.POSTGRES_WIRE})

    conninfo: str
    host: str
    port: int
    user: str
    dbname: str
    password: str | None = None

    def tcp_port(self) -> int | None:
        return self.port

    def wire_conninfo(self, application_name: str = "perflab") -> str:
        """The conninfo in libpq key=value form, the form the engine's own
        PostgreSQL client takes (a URI DSN is rewritten); sessions are
        read-only when the endpoint is."""
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params: dict[str, Any] = conninfo_to_dict(self.conninfo)
        options = str(params.get("options", ""))
        if self.read_only and "default_transaction_read_only" not in options:
            params["options"] = (options + " -c default_transaction_read_only=on").strip()
        params.setdefault("application_name", application_name)
        return make_conninfo("", **params)


@dataclass(kw_only=True)
class MysqlWireEndpoint(SqlEndpoint):
    """A server that speaks the MySQL protocol (MariaDB, MySQL), reached over
    a unix socket (`unix_socket`) or TCP (`host`, `port`)."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.SQL, Capability.MYSQL_WIRE})

    host: str
    port: int
    user: str
    database: str
    unix_socket: str | None = None
    password: str | None = None
    # how bulk_load loads a generated data set: "load-data" (LOAD DATA LOCAL INFILE) or "insert"
    load_method: str = "load-data"

    def tcp_port(self) -> int | None:
        return None if self.unix_socket else self.port

    def wire_conninfo(self) -> str:
        """The key=value connection text the engine's own MySQL client takes
        (crates/engine/src/mysql); sessions are read-only when the endpoint is."""
        def quoted(value: str) -> str:
            return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

        where = {"socket": self.unix_socket} if self.unix_socket else {"host": self.host, "port": str(self.port)}
        params = {**where, "user": self.user, "database": self.database}
        if self.password:
            params["password"] = self.password
        if self.read_only:
            params["read_only"] = "on"
        return " ".join(f"{k}={quoted(v)}" for k, v in params.items())


def engine_wire(endpoint: Endpoint, workload: str) -> tuple[str, str]:
    """The engine's conninfo for a server that speaks the PostgreSQL or the
    MySQL protocol and which of the engine's clients takes it ("postgres",
    "mysql"); PostgreSQL sessions are named perflab-<workload>."""
    from perflab.errors import UserError

    if isinstance(endpoint, MysqlWireEndpoint):
        return endpoint.wire_conninfo(), "mysql"
    if isinstance(endpoint, PgWireEndpoint):
        return endpoint.wire_conninfo(f"perflab-{workload}"), "postgres"
    raise UserError(f"workload {workload}: target {endpoint.display()} is neither PostgreSQL nor MySQL",
                    "use a postgres, mariadb or mysql target")


@dataclass(kw_only=True)
class HttpEndpoint(Endpoint):
    """A web server reached over HTTP/1.1 on loopback at `address`
    ("127.0.0.1:8080"), serving its files under `prefix`. `publish` is set
    only for a server perflab started: it makes the server serve a directory
    (perflab never uploads a file set to a server it did not start)."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.HTTP})

    address: str
    host_header: str
    prefix: str = "/"
    publish: Callable[[Path], None] | None = None

    def display(self) -> str:
        return f"http://{self.host_header}{self.prefix}"
