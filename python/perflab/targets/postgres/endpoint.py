"""How perflab's workloads reach a PostgreSQL server, managed or external."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from perflab.endpoints import Cancel, GeneratedData, PgWireEndpoint
from perflab.secrets import mask_secrets

if TYPE_CHECKING:
    import psycopg


@dataclass(kw_only=True)
class PostgresEndpoint(PgWireEndpoint):
    dialect: ClassVar[str] = "postgres"

    def connect(self) -> psycopg.Connection[Any]:
        import psycopg

        return psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10)

    def display(self) -> str:
        return mask_secrets(self.conninfo)

    def set_statement_timeout(self, conn: psycopg.Connection[Any], seconds: float | None) -> bool:
        # statement_timeout is in ms and 0 means none: round a set timeout up to 1 ms.
        timeout_ms = max(1, round(seconds * 1000)) if seconds else 0
        conn.execute(f"set statement_timeout = {timeout_ms}")
        return True

    def interrupt(self, conn: psycopg.Connection[Any]) -> None:
        conn.cancel()

    def is_timeout(self, exc: BaseException) -> bool:
        import psycopg

        return isinstance(exc, psycopg.errors.QueryCanceled)

    def bulk_load(self, data: GeneratedData, scale_factor: float, tables: list[str], jobs: int, *,
                  cancel: Cancel | None = None) -> dict[str, int]:
        """Generated in the engine and streamed with COPY over `jobs`
        connections (the engine's own client), no files in between."""
        loads = data.copy_postgres(self.wire_conninfo(f"perflab-{data.name}"), scale_factor, tables, jobs,
                                   cancel=cancel)
        return {t.table: t.rows for t in loads}
