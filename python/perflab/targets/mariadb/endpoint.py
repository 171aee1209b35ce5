"""How workloads reach a MySQL-protocol server: MysqlEndpoint and its
PyMySQL session, and what a run's record keeps of the server (describe_server)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from perflab.endpoints import Cursorlike, GeneratedData, MysqlWireEndpoint
from perflab.errors import RunFailure
from perflab.secrets import mask_secrets
from perflab.targets.mariadb.settings import SettingValue, option_key

if TYPE_CHECKING:
    import pymysql.connections
    import pymysql.cursors


class MysqlSession:
    """A PyMySQL connection with the DB-API shape perflab's SQL workloads
    use (`execute` returns a cursor, as psycopg's and DuckDB's do). A text of
    several statements runs whole; the rows are the first result set's."""

    def __init__(self, conn: pymysql.connections.Connection) -> None:
        self.conn = conn
        self.thread_id = int(conn.thread_id())

    def execute(self, sql: str, params: Any = None) -> Cursorlike:
        cur = self.conn.cursor()
        cur.execute(sql, params)
        if params is None:
            rows, description = cur.fetchall(), cur.description
            while cur.nextset():  # the later statements of a script
                if description is None and cur.description is not None:
                    rows, description = cur.fetchall(), cur.description
            return _Result(rows, description)
        return cur

    def cursor(self) -> pymysql.cursors.Cursor:
        return self.conn.cursor()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()

    def __enter__(self) -> MysqlSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Result:
    def __init__(self, rows: Any, description: Any) -> None:
        self.rows = list(rows or ())
        self.description = description

    def fetchall(self) -> list[Any]:
        return self.rows

    def fetchone(self) -> Any:
        return self.rows[0] if self.rows else None


# MySQL's error codes for a statement ended by a time limit or KILL QUERY
TIMEOUT_CODES = (1969, 3024, 1317, 1028)


@dataclass(kw_only=True)
class MysqlEndpoint(MysqlWireEndpoint):
    dialect: ClassVar[str] = "mysql"

    def connect(self, database: str | None = None) -> MysqlSession:
        import pymysql
        from pymysql.constants import CLIENT

        conn = pymysql.connect(
            host=self.host, port=self.port, user=self.user, password=self.password or "",
            database=self.database if database is None else (database or None), unix_socket=self.unix_socket,
            autocommit=True, connect_timeout=10, client_flag=CLIENT.MULTI_STATEMENTS, charset="utf8mb4",
            program_name="perflab",
        )
        if self.read_only:
            with conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION READ ONLY")
        return MysqlSession(conn)

    def display(self) -> str:
        where = f"unix_socket={self.unix_socket}" if self.unix_socket else f"{self.host}:{self.port}"
        return f"mysql://{self.user}@{where}/{self.database}"

    def set_statement_timeout(self, conn: MysqlSession, seconds: float | None) -> bool:
        # MariaDB: max_statement_time (s, 0 = none); MySQL 8: max_execution_time (ms, SELECT only)
        try:
            conn.execute(f"SET SESSION max_statement_time = {seconds or 0:.3f}")
            return True
        except Exception:
            conn.execute(f"SET SESSION max_execution_time = {max(1, round(seconds * 1000)) if seconds else 0}")
            return True

    def interrupt(self, conn: MysqlSession) -> None:
        with self.connect(database="") as other:
            other.execute(f"KILL QUERY {int(conn.thread_id)}")

    def is_timeout(self, exc: BaseException) -> bool:
        args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
        return bool(args) and args[0] in TIMEOUT_CODES

    def bulk_load(self, data: GeneratedData, scale_factor: float, tables: list[str], jobs: int) -> dict[str, int]:
        raise RunFailure(f"data set {data.name!r}: perflab has no loader into MySQL or MariaDB yet; "
                         "use the sql workload's setup statements to make its data")



def describe_server(endpoint: MysqlEndpoint, requested: dict[str, SettingValue]) -> dict[str, Any]:
    """The server's version and the settings a run's record keeps (never fails a run)."""
    info: dict[str, Any] = {}
    key = ("innodb_buffer_pool_size", "innodb_log_file_size", "innodb_flush_log_at_trx_commit",
           "innodb_flush_method", "innodb_doublewrite", "sync_binlog", "log_bin", "max_connections",
           "performance_schema")
    try:
        with endpoint.connect(database="") as conn:
            info["version"] = conn.execute("SELECT VERSION()").fetchone()[0]
            names = list(dict.fromkeys([*key, *(option_key(n).replace("-", "_") for n in requested)]))
            marks = ", ".join(["%s"] * len(names))
            rows = conn.execute(f"SELECT variable_name, variable_value FROM information_schema.global_variables "
                                f"WHERE variable_name IN ({marks}) ORDER BY 1", tuple(n.upper() for n in names)
                                ).fetchall()
            info["key_settings"] = {str(k).lower(): v for k, v in rows}
    except Exception as exc:
        info["describe_error"] = mask_secrets(str(exc))
    return info

