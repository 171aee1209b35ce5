"""The Star Schema Benchmark's schema (SSB specification Revision 3, section
2): LINEORDER and its four dimensions, with the columns in the order the
engine's generator writes them (crates/engine/src/ssb). Money is in cents as
integers and flags are 0/1 integers, as ssb-dbgen writes them; text columns
are varchar without a length (the specification's lengths are upper bounds
the generator keeps).

After the load, PostgreSQL gets the primary keys of the specification and
ANALYZE; DuckDB gets ANALYZE only (its scans use zone maps, not indexes, and
keys slow its bulk load), as TPC-H's load does (workloads/tpch/schema.py).
MySQL and MariaDB (InnoDB) get the primary keys in CREATE TABLE, text as
varchar of the specification's lengths (MySQL's varchar needs one), byte-wise
comparison (`latin1_bin`), and ANALYZE TABLE after the load, as TPC-H's.
"""

from __future__ import annotations

from perflab import _engine
from perflab.endpoints import GeneratedData
from perflab.workloads.tpch.schema import MYSQL_TABLE_OPTIONS, Step

TABLES = ("date", "customer", "supplier", "part", "lineorder")
# The engine's generators of it (ssb-dbgen's rules): what a target loads it with.
DATA = GeneratedData("ssb", _engine.ssb_load_postgres, _engine.ssb_arrow_stream, _engine.ssb_parts,
                     _engine.ssb_write_text)

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

# The specification's lengths of the text columns (section 2), which the
# generator keeps: MySQL's varchar needs one.
MYSQL_LENGTHS = {
    "d_date": 18, "d_dayofweek": 9, "d_month": 9, "d_yearmonth": 7, "d_sellingseason": 12,
    "c_name": 25, "c_address": 25, "c_city": 10, "c_nation": 15, "c_region": 12, "c_phone": 15,
    "c_mktsegment": 10,
    "s_name": 25, "s_address": 25, "s_city": 10, "s_nation": 15, "s_region": 12, "s_phone": 15,
    "p_name": 22, "p_mfgr": 6, "p_category": 7, "p_brand1": 9, "p_color": 11, "p_type": 25, "p_container": 10,
    "lo_orderpriority": 15, "lo_shippriority": 1, "lo_shipmode": 10,
}

# perflab's record of the SSB data set in the database: its scale factor.
STATE_TABLE = "perflab_ssb_state"


def create_table(table: str, dialect: str = "postgres") -> str:
    if dialect == "mysql":
        columns = ",\n  ".join(f"{name} {kind}({MYSQL_LENGTHS[name]}) not null" if kind == "varchar"
                               else f"{name} {kind} not null" for name, kind in _COLUMNS[table])
        return f"create table {table} (\n  {columns},\n  primary key ({PRIMARY_KEYS[table]})\n) {MYSQL_TABLE_OPTIONS}"
    columns = ",\n  ".join(f"{name} {kind} not null" for name, kind in _COLUMNS[table])
    return f"create table {table} (\n  {columns}\n)"


def drop_tables(schema: str | None = None, dialect: str = "postgres") -> list[str]:
    """The drops before a load; in `schema` (perflab's own, on a database it
    did not create) by name, so that no drop reaches past it. MySQL ignores
    CASCADE: there the session drops with foreign_key_checks = 0, as a
    mysqldump restore does, so that a table another data set's foreign key
    names (TPC-H's and SSB's customer, supplier, part) goes as on PostgreSQL."""
    own = f"{schema}." if schema else ""
    checks_off = "set session foreign_key_checks = 0; " if dialect == "mysql" else ""
    return [f"{checks_off}drop table if exists {own}{t} cascade" for t in (*reversed(TABLES), STATE_TABLE)]


def load_steps(dialect: str, own_tables_only: bool = False) -> list[Step]:
    """Keys and statistics; DuckDB's bare ANALYZE takes every table in the
    file, which only a file perflab created is all its own."""
    if dialect == "mysql":
        return [Step("analyze", tuple(f"analyze table {t}" for t in TABLES))]
    if dialect == "postgres":
        keys = tuple(f"alter table {t} add constraint {t}_pkey primary key ({cols})"
                     for t, cols in PRIMARY_KEYS.items())
        return [Step("primary keys", keys), Step("analyze", tuple(f"analyze {t}" for t in TABLES))]
    if own_tables_only:
        return [Step("analyze", tuple(f"analyze {t}" for t in TABLES))]
    return [Step("analyze", ("analyze",))]
