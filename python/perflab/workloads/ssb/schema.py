"""The Star Schema Benchmark's schema (SSB specification Revision 3, section
2): LINEORDER and its four dimensions, with the columns in the order the
engine's generator writes them (crates/engine/src/ssb). Money is in cents as
integers and flags are 0/1 integers, as ssb-dbgen writes them; text columns
are varchar without a length (the specification's lengths are upper bounds
the generator keeps).

After the load, PostgreSQL gets the primary keys of the specification and
ANALYZE; DuckDB gets ANALYZE only (its scans use zone maps, not indexes, and
keys slow its bulk load), as TPC-H's load does (workloads/tpch/schema.py).
"""

from __future__ import annotations

from perflab import _engine
from perflab.endpoints import GeneratedData
from perflab.workloads.tpch.schema import Step

TABLES = ("date", "customer", "supplier", "part", "lineorder")
# The engine's generators of it (ssb-dbgen's rules): what a target loads it with.
DATA = GeneratedData("ssb", _engine.ssb_load_postgres, _engine.ssb_arrow_stream)

_COLUMNS = {
    "date": [
        ("d_datekey", "integer"), ("d_date", "varchar"), ("d_dayofweek", "varchar"), ("d_month", "varchar"),
        ("d_year", "integer"), ("d_yearmonthnum", "integer"), ("d_yearmonth", "varchar"),
        ("d_daynuminweek", "integer"), ("d_daynuminmonth", "integer"), ("d_daynuminyear", "integer"),
        ("d_monthnuminyear", "integer"), ("d_weeknuminyear", "integer"), ("d_sellingseason", "varchar"),
        ("d_lastdayinweekfl", "integer"), ("d_lastdayinmonthfl", "integer"), ("d_holidayfl", "integer"),
        ("d_weekdayfl", "integer"),
    ],
    "customer": [
        ("c_custkey", "integer"), ("c_name", "varchar"), ("c_address", "varchar"), ("c_city", "varchar"),
        ("c_nation", "varchar"), ("c_region", "varchar"), ("c_phone", "varchar"), ("c_mktsegment", "varchar"),
    ],
    "supplier": [
        ("s_suppkey", "integer"), ("s_name", "varchar"), ("s_address", "varchar"), ("s_city", "varchar"),
        ("s_nation", "varchar"), ("s_region", "varchar"), ("s_phone", "varchar"),
    ],
    "part": [
        ("p_partkey", "integer"), ("p_name", "varchar"), ("p_mfgr", "varchar"), ("p_category", "varchar"),
        ("p_brand1", "varchar"), ("p_color", "varchar"), ("p_type", "varchar"), ("p_size", "integer"),
        ("p_container", "varchar"),
    ],
    "lineorder": [
        ("lo_orderkey", "bigint"), ("lo_linenumber", "integer"), ("lo_custkey", "integer"),
        ("lo_partkey", "integer"), ("lo_suppkey", "integer"), ("lo_orderdate", "integer"),
        ("lo_orderpriority", "varchar"), ("lo_shippriority", "varchar"), ("lo_quantity", "integer"),
        ("lo_extendedprice", "integer"), ("lo_ordtotalprice", "integer"), ("lo_discount", "integer"),
        ("lo_revenue", "integer"), ("lo_supplycost", "integer"), ("lo_tax", "integer"),
        ("lo_commitdate", "integer"), ("lo_shipmode", "varchar"),
    ],
}

PRIMARY_KEYS = {
    "date": "d_datekey",
    "customer": "c_custkey",
    "supplier": "s_suppkey",
    "part": "p_partkey",
    "lineorder": "lo_orderkey, lo_linenumber",
}

# perflab's record of the SSB data set in the database: its scale factor.
STATE_TABLE = "perflab_ssb_state"


def create_table(table: str) -> str:
    columns = ",\n  ".join(f"{name} {kind} not null" for name, kind in _COLUMNS[table])
    return f"create table {table} (\n  {columns}\n)"


def drop_tables(schema: str | None = None) -> list[str]:
    """The drops before a load; in `schema` (perflab's own, on a database it
    did not create) by name, so that no drop reaches past it."""
    own = f"{schema}." if schema else ""
    return [f"drop table if exists {own}{t} cascade" for t in (*reversed(TABLES), STATE_TABLE)]


def load_steps(dialect: str, own_tables_only: bool = False) -> list[Step]:
    """Keys and statistics; DuckDB's bare ANALYZE takes every table in the
    file, which only a file perflab created is all its own."""
    if dialect == "postgres":
        keys = tuple(f"alter table {t} add constraint {t}_pkey primary key ({cols})"
                     for t, cols in PRIMARY_KEYS.items())
        return [Step("primary keys", keys), Step("analyze", tuple(f"analyze {t}" for t in TABLES))]
    if own_tables_only:
        return [Step("analyze", tuple(f"analyze {t}" for t in TABLES))]
    return [Step("analyze", ("analyze",))]
