"""DuckDB, embedded: no server at all.

The database is one file in the target's directory (or `path`), opened in
perflab's own process; every session the workload opens is a new DuckDB
connection to that one database (`cursor()`), so sessions run in parallel
inside the process. `threads` and `memory_limit` (and any other setting in
`settings`) are applied with SET, so changing them between runs needs no
reopen. Since the engine runs inside perflab, its CPU time is perflab's: the
process collector sees one process, marked "embedded".
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator

from perflab.endpoints import Cancel, Endpoint, GeneratedData, SqlEndpoint
from perflab.errors import RunFailure, UserError
from perflab.model import not_setup
from perflab.settings_model import OsText
from perflab.targets import confine as confine_mod
from perflab.targets.base import CheckedWorkload, Target, TargetSettings, creatable_problems
from perflab.targets.confine import Leftover, Owner, Removal, schema_for

if TYPE_CHECKING:
    import duckdb

SettingValue = str | int | float | bool
SETTING_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_")
DATABASE_FILE = "perflab.duckdb"
# Beside a database file perflab created: a file without it is someone else's,
# opened read-only unless the experiment says allow_destructive = true.
CREATED_MARK_SUFFIX = ".perflab-created"
# More worker threads than any machine has cores.
MAX_THREADS = 4096


class DuckDbSettings(TargetSettings):
    kind: Literal["duckdb"]
    # The database file; default: perflab.duckdb in the target's directory.
    path: OsText | None = None
    # Worker threads DuckDB may use (DuckDB's default: all cores).
    threads: int | None = Field(default=None, ge=1, le=MAX_THREADS)
    # e.g. "4GB" (DuckDB's default: 80% of RAM).
    memory_limit: str | None = None
    # Any other DuckDB setting, applied with SET name = value.
    settings: dict[str, SettingValue] = Field(default_factory=dict)
    # Let perflab write to a database file it did not create.
    allow_destructive: bool = False

    @field_validator("path")
    @classmethod
    def _names_a_file(cls, value: str | None) -> str | None:
        if value is not None and Path(value).expanduser().name in ("", ".", ".."):
            raise ValueError(f"got {value!r}; allowed: the path of a database file, e.g. \"data/tpch.duckdb\"")
        return value

    @field_validator("settings")
    @classmethod
    def _names(cls, value: dict[str, SettingValue]) -> dict[str, SettingValue]:
        for name in value:
            if not name or not set(name) <= SETTING_NAME_CHARS:
                raise ValueError(
                    f"got setting name {name!r}; allowed: DuckDB setting names (lower case, e.g. preserve_insertion_order)"
                )
            if name in ("threads", "memory_limit"):
                raise ValueError(f"got {name!r} in settings; allowed: set it as target.{name}")
        return value


def _mark(path: Path) -> Path:
    return path.with_name(path.name + CREATED_MARK_SUFFIX)


def _foreign(path: Path) -> bool:
    """An existing database file that perflab did not create."""
    return path.exists() and not _mark(path).exists()


def _sql_value(value: SettingValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return "'" + value.replace("'", "''") + "'"


def _apply_settings(database: duckdb.DuckDBPyConnection, settings: DuckDbSettings) -> list[tuple[str, str]]:
    """SET (or RESET) threads, memory_limit and every other setting; what
    DuckDB refuses, as problems at their dotted paths."""
    import duckdb

    statements = [
        ("target.threads", f"SET threads = {settings.threads}" if settings.threads is not None else "RESET threads"),
        ("target.memory_limit", f"SET memory_limit = {_sql_value(settings.memory_limit)}"
         if settings.memory_limit is not None else "RESET memory_limit"),
    ]
    statements += [(f"target.settings.{name}", f"SET {name} = {_sql_value(value)}")
                   for name, value in settings.settings.items()]
    problems = []
    for key, sql in statements:
        try:
            database.execute(sql)
        except duckdb.Error as exc:
            problems.append((key, f"DuckDB refused `{sql}`: {str(exc).splitlines()[0]}"))
    return problems


class _ArrowStream:
    """An Arrow C stream PyCapsule as an object DuckDB and pyarrow can import."""

    def __init__(self, capsule: object) -> None:
        self._capsule = capsule

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise RuntimeError("an Arrow stream can be read once")
        return capsule


@dataclass(kw_only=True)
class DuckDbEndpoint(SqlEndpoint):
    """Sessions on one embedded database. `connect()` gives a new DuckDB
    connection (autocommit, as DuckDB's default); `interrupt(conn)` cancels
    what that connection is running, from any thread."""

    dialect: ClassVar[str] = "duckdb"
    # DuckDB runs each statement on all cores itself.
    parallel_sessions: ClassVar[bool] = False

    path: str
    database: duckdb.DuckDBPyConnection | None = field(default=None, repr=False)

    def connect(self) -> duckdb.DuckDBPyConnection:
        if self.database is None:
            raise RunFailure("the DuckDB database is closed")
        conn = self.database.cursor()
        if self.schema is not None:
            # perflab's own schema in a file it did not create: new tables go
            # there. DuckDB still looks a name up in `main` when that schema
            # lacks it, so a statement that must not reach past it (DROP ...
            # IF EXISTS) names the schema (SqlEndpoint.schema).
            conn.execute(f"SET schema = '{self.schema}'")
        return conn

    def display(self) -> str:
        return f"duckdb:{self.path}"

    def set_statement_timeout(self, conn: duckdb.DuckDBPyConnection, seconds: float | None) -> bool:
        # DuckDB has no statement timeout: the caller interrupts from a timer.
        return seconds is None

    def interrupt(self, conn: duckdb.DuckDBPyConnection) -> None:
        conn.interrupt()

    def is_timeout(self, exc: BaseException) -> bool:
        import duckdb

        return isinstance(exc, duckdb.InterruptException)

    def bulk_load(self, data: GeneratedData, scale_factor: float, tables: list[str], jobs: int, *,
                  cancel: Cancel | None = None) -> dict[str, int]:
        """Each table from the engine's Arrow stream (generated by `jobs`
        threads) straight into its DuckDB table: no text, no files; a set
        `cancel` is seen between tables."""
        import pyarrow as pa

        conn = self.connect()
        rows: dict[str, int] = {}
        try:
            for table in tables:
                if cancel is not None and cancel.is_set():
                    raise RunFailure(f"{data.name} load: cancelled")
                stream = _ArrowStream(data.arrow_stream(table, scale_factor, jobs))
                conn.register("perflab_tpch_source", pa.RecordBatchReader.from_stream(stream))
                try:
                    conn.execute(f"insert into {table} select * from perflab_tpch_source")
                finally:
                    conn.unregister("perflab_tpch_source")
                rows[table] = int(conn.execute(f"select count(*) from {table}").fetchall()[0][0])
        finally:
            conn.close()
        return rows


class DuckDbTarget(Target[DuckDbSettings, DuckDbEndpoint]):
    Settings: ClassVar[type[TargetSettings]] = DuckDbSettings
    endpoint_type: ClassVar[type[Endpoint]] = DuckDbEndpoint

    def __init__(self, settings: DuckDbSettings, workdir: Path, base_dir: Path | None = None) -> None:
        super().__init__(settings, workdir, base_dir)
        self.database: duckdb.DuckDBPyConnection | None = None
        self.endpoint: DuckDbEndpoint | None = None
        self._lock = threading.Lock()
        # A file perflab did not create: its own schemas in it (confine).
        self.claims: dict[str, DuckDbEndpoint] = {}

    @classmethod
    def identity(cls, settings: DuckDbSettings) -> str:
        # threads, memory_limit and settings are applied with SET between runs.
        return f"duckdb:{settings.path}"

    @classmethod
    def validate_for_workload(cls, settings: DuckDbSettings, workload: CheckedWorkload) -> list[tuple[str, str]]:
        if settings.path and _foreign(Path(settings.path).expanduser()) and workload.writes() \
                and not settings.allow_destructive:
            return [(
                "target.allow_destructive",
                f"workload {workload.settings.kind!r} writes, and {settings.path} is a DuckDB database perflab "
                "did not create; allowed: true, to let it (then it works in a schema of its own in that file, "
                f"{schema_for(workload.settings.kind)}, and leaves the file's other tables alone)",
            )]
        return []

    @classmethod
    def preflight(cls, settings: DuckDbSettings, base_dir: Path) -> list[tuple[str, str]]:
        import duckdb

        # Each setting as DuckDB itself takes it, on a throw-away in-memory database.
        with duckdb.connect(":memory:") as scratch:
            problems = _apply_settings(scratch, settings)
        if settings.path:
            path = Path(settings.path).expanduser().resolve()
            if path.exists() and not path.is_file():
                problems.append(("target.path", f"{path} is not a file; allowed: a DuckDB database file, or a new path"))
            else:
                problems += creatable_problems("target.path", path.parent)
        return problems

    def _path(self) -> Path:
        if self.settings.path:
            return self.path_from_file(self.settings.path)
        return (self.workdir / DATABASE_FILE).resolve()

    def provision(self) -> DuckDbEndpoint:
        try:
            import duckdb
        except ImportError:  # pragma: no cover - a dependency of perflab
            raise UserError("DuckDB's Python package is not installed", "pip install duckdb") from None
        path = self._path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"target.path: cannot create {path.parent}: {exc}", "give a writable directory") from None
        fresh = not path.exists()
        read_only = _foreign(path) and not self.settings.allow_destructive
        try:
            self.database = duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            raise UserError(
                f"target.path: cannot open DuckDB database {path}: {exc}",
                "give a DuckDB database file perflab may write (or none, for one in the output directory)",
            ) from None
        if fresh:
            _mark(path).write_text("created by perflab; perflab may drop and recreate its tables\n")
        self._apply(self.settings)
        self.endpoint = DuckDbEndpoint(fresh=fresh, read_only=read_only, path=str(path),
                                       database=self.database)
        return self.endpoint

    def _apply(self, settings: DuckDbSettings) -> None:
        assert self.database is not None
        problems = _apply_settings(self.database, settings)
        if problems:
            key, text = problems[0]
            raise UserError(f"{key}: {text}", "fix or remove that setting")

    def reconfigure(self, settings: DuckDbSettings) -> bool:
        if self.database is None:
            return False
        previous = set(self.settings.settings)
        self.settings = settings
        for name in previous - set(settings.settings):
            self.database.execute(f"RESET {name}")
        self._apply(settings)
        return False

    def teardown(self) -> None:
        with self._lock:
            if self.database is not None:
                try:
                    self.database.close()
                finally:
                    self.database = None
                    for endpoint in [self.endpoint, *self.claims.values()]:
                        if endpoint is not None:
                            endpoint.database = None
                    self.claims = {}

    def describe(self) -> dict[str, Any]:
        import duckdb

        info: dict[str, Any] = {"kind": "duckdb", "embedded": True, "path": str(self._path()),
                                "python_package": duckdb.__version__}
        if not self.settings.path:  # the file perflab picked, and its spill directory beside it
            not_setup(info, "path", *([] if "temp_directory" in self.settings.settings
                                      else ["effective_settings.temp_directory"]))
        if self.database is None:
            return info
        try:
            conn = self.database.cursor()
            info["version"] = conn.execute("SELECT version()").fetchall()[0][0]
            names = ["threads", "memory_limit", "temp_directory", "preserve_insertion_order",
                     *self.settings.settings]
            rows = conn.execute(
                "SELECT name, value FROM duckdb_settings() WHERE name IN (SELECT unnest($1::VARCHAR[]))",
                [names],
            ).fetchall()
            info["effective_settings"] = dict(rows)
            conn.close()
        except duckdb.Error as exc:  # describing must never fail a run
            info["describe_error"] = str(exc)
        return info

    def data_locations(self) -> list[Path]:
        path = self._path()
        return [path] if path.exists() and not _foreign(path) else []

    def confine(self, endpoint: DuckDbEndpoint, schema: str, owner: Owner) -> DuckDbEndpoint:
        """A file perflab did not create (written with allow_destructive):
        the run's sessions work in perflab's own schema `schema` in it."""
        if endpoint.read_only or not _foreign(self._path()):
            return endpoint
        if schema in self.claims:
            return self.claims[schema]
        conn = endpoint.connect()
        try:
            made, done = confine_mod.duck_claim(conn, schema, owner, endpoint.display())
        finally:
            conn.close()
        self.said.append(done)
        confined = dataclasses.replace(endpoint, schema=schema, fresh=made)
        self.claims[schema] = confined
        return confined

    def leftovers(self) -> list[Leftover]:
        out = []
        for schema, endpoint in self.claims.items():
            conn = endpoint.connect()
            try:
                measured = confine_mod.duck_measure(conn, schema, endpoint.display())
            finally:
                conn.close()
            if measured is not None:
                out.append(measured)
        return out

    def remove_leftover(self, leftover: dict[str, Any], owner: Owner) -> Removal:
        import duckdb

        path = self._path()
        where = f"duckdb:{path}"
        if not path.exists():
            return Removal(True, f"schema {leftover['name']} in {where}: already gone (no such file)")
        try:
            database = duckdb.connect(str(path))
        except duckdb.Error as exc:
            return Removal(False, f"schema {leftover['name']} in {where}: not removed: cannot open the file: "
                                  f"{str(exc).splitlines()[0]}")
        try:
            return confine_mod.duck_remove(database, leftover["name"], owner, where)
        finally:
            database.close()

    def discard_data(self) -> int:
        """The database file, only if perflab created it (its mark beside it),
        with DuckDB's write-ahead log."""
        path = self._path()
        if not path.exists() or _foreign(path):
            return 0
        wal = path.with_name(path.name + ".wal")
        freed = 0
        for p in (path, wal):
            if p.exists():
                freed += p.stat().st_size
                p.unlink()
        _mark(path).unlink(missing_ok=True)  # last: a cut-short removal is finished by the next
        return freed

    def processes(self) -> dict[int, str]:
        return {os.getpid(): "embedded"} if self.database is not None else {}

    def data_paths(self) -> dict[str, Path]:
        return {"data": self._path().parent}

    def check_alive(self) -> str | None:
        return None if self.database is not None else "the DuckDB database is closed"
