"""Targets: the systems under test. One module per kind, one registry line each."""

from perflab.registry import Registry

TARGETS = Registry("target")
TARGETS.register(
    "postgres",
    "perflab.targets.postgres:PostgresTarget",
    "PostgreSQL: managed (initdb/pg_ctl by perflab) or external by dsn",
)
TARGETS.register(
    "duckdb",
    "perflab.targets.duckdb:DuckDbTarget",
    "DuckDB, embedded in perflab's process: a database file, no server",
)
