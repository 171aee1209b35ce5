"""The TPC-C schema (clause 1.3) and what the load builds on it.

The nine tables are created without keys; the engine's loader
(`perflab._engine.tpcc_load`) COPYs into them in exactly the column order
below; then the primary keys (clause 1.3: every table but HISTORY has one),
the two secondary indexes the transactions need, and ANALYZE.

Types follow clause 1.3: identifiers as integer; money and rates as
numeric(p,s) (sums in the consistency checks are exact); fixed text as char,
variable text as varchar; dates as timestamp. ORDER is `orders` (ORDER is
an SQL keyword), NEW-ORDER `new_order`, ORDER-LINE `order_line`.

Secondary indexes (crates/engine/src/tpcc/PROCEDURES.md names them too):
- customer (c_w_id, c_d_id, c_last, c_first): Payment and Order-Status by
  last name (60% of them), sorted by first name as clause 2.5.2.2 asks;
- orders (o_w_id, o_d_id, o_c_id, o_id): Order-Status, a customer's last order.

On MySQL and MariaDB (InnoDB) the same columns, timestamps as datetime,
and each table is created with its primary key: InnoDB keeps a table's rows
in its primary key's order, so adding the key after the load would copy the
table again. The loader's parts come in key order (a warehouse at a time),
the secondary indexes are built after the load, then ANALYZE TABLE.

`tpcc_meta` is the database's own record of its data set: warehouses, the
load's seed and C_LAST constant (clause 2.1.6.1: a run's C_LAST constant
depends on it), when it was loaded, and whether a Delivery may have run
since (consistency condition 11 holds only until one has).
"""

from __future__ import annotations

import re

TABLES = ("warehouse", "district", "customer", "history", "new_order", "orders", "order_line", "item", "stock")

_DIST = ",\n".join(f"    s_dist_{i:02d} char(24) not null" for i in range(1, 11))

COLUMNS = {
    "warehouse": """
    w_id integer not null,
    w_name varchar(10) not null,
    w_street_1 varchar(20) not null,
    w_street_2 varchar(20) not null,
    w_city varchar(20) not null,
    w_state char(2) not null,
    w_zip char(9) not null,
    w_tax numeric(4,4) not null,
    w_ytd numeric(12,2) not null""",
    "district": """
    d_id integer not null,
    d_w_id integer not null,
    d_name varchar(10) not null,
    d_street_1 varchar(20) not null,
    d_street_2 varchar(20) not null,
    d_city varchar(20) not null,
    d_state char(2) not null,
    d_zip char(9) not null,
    d_tax numeric(4,4) not null,
    d_ytd numeric(12,2) not null,
    d_next_o_id integer not null""",
    "customer": """
    c_id integer not null,
    c_d_id integer not null,
    c_w_id integer not null,
    c_first varchar(16) not null,
    c_middle char(2) not null,
    c_last varchar(16) not null,
    c_street_1 varchar(20) not null,
    c_street_2 varchar(20) not null,
    c_city varchar(20) not null,
    c_state char(2) not null,
    c_zip char(9) not null,
    c_phone char(16) not null,
    c_since timestamp not null,
    c_credit char(2) not null,
    c_credit_lim numeric(12,2) not null,
    c_discount numeric(4,4) not null,
    c_balance numeric(12,2) not null,
    c_ytd_payment numeric(12,2) not null,
    c_payment_cnt integer not null,
    c_delivery_cnt integer not null,
    c_data varchar(500) not null""",
    "history": """
    h_c_id integer not null,
    h_c_d_id integer not null,
    h_c_w_id integer not null,
    h_d_id integer not null,
    h_w_id integer not null,
    h_date timestamp not null,
    h_amount numeric(6,2) not null,
    h_data varchar(24) not null""",
    "new_order": """
    no_o_id integer not null,
    no_d_id integer not null,
    no_w_id integer not null""",
    "orders": """
    o_id integer not null,
    o_d_id integer not null,
    o_w_id integer not null,
    o_c_id integer not null,
    o_entry_d timestamp not null,
    o_carrier_id integer,
    o_ol_cnt integer not null,
    o_all_local integer not null""",
    "order_line": """
    ol_o_id integer not null,
    ol_d_id integer not null,
    ol_w_id integer not null,
    ol_number integer not null,
    ol_i_id integer not null,
    ol_supply_w_id integer not null,
    ol_delivery_d timestamp,
    ol_quantity integer not null,
    ol_amount numeric(6,2) not null,
    ol_dist_info char(24) not null""",
    "item": """
    i_id integer not null,
    i_im_id integer not null,
    i_name varchar(24) not null,
    i_price numeric(5,2) not null,
    i_data varchar(50) not null""",
    "stock": f"""
    s_i_id integer not null,
    s_w_id integer not null,
    s_quantity integer not null,
{_DIST},
    s_ytd integer not null,
    s_order_cnt integer not null,
    s_remote_cnt integer not null,
    s_data varchar(50) not null""",
}

# Largest first, so that the longest builds start first when run in parallel.
PRIMARY_KEYS = (
    ("order_line", "ol_w_id, ol_d_id, ol_o_id, ol_number"),
    ("stock", "s_w_id, s_i_id"),
    ("customer", "c_w_id, c_d_id, c_id"),
    ("orders", "o_w_id, o_d_id, o_id"),
    ("new_order", "no_w_id, no_d_id, no_o_id"),
    ("item", "i_id"),
    ("district", "d_w_id, d_id"),
    ("warehouse", "w_id"),
)

INDEXES = (
    ("customer_by_last_name", "customer", "c_w_id, c_d_id, c_last, c_first"),
    ("orders_by_customer", "orders", "o_w_id, o_d_id, o_c_id, o_id"),
)

META = "tpcc_meta"


def drop_sql() -> list[str]:
    return [f"DROP TABLE IF EXISTS {t} CASCADE" for t in (*TABLES, META)]


def create_sql() -> list[str]:
    out = [f"CREATE TABLE {t} ({COLUMNS[t]}\n)" for t in TABLES]
    out.append(
        f"CREATE TABLE {META} ("
        " warehouses integer not null,"
        " load_seed bigint not null,"
        " c_last_load integer not null,"
        " loaded_at timestamptz not null default now(),"
        " load_s double precision,"
        # Whether a Delivery may have run since the load: set before any run
        # that can deliver, so a run that dies midway still clears it.
        " delivered boolean not null default false)"
    )
    return out


def primary_key_sql() -> list[str]:
    return [f"ALTER TABLE {t} ADD CONSTRAINT {t}_pkey PRIMARY KEY ({cols})" for t, cols in PRIMARY_KEYS]


def index_sql() -> list[str]:
    return [f"CREATE INDEX {name} ON {table} ({cols})" for name, table, cols in INDEXES]


def analyze_sql() -> list[str]:
    return [f"ANALYZE {t}" for t in TABLES]


# ---- MySQL and MariaDB (InnoDB)


def mysql_drop_sql() -> list[str]:
    return [f"DROP TABLE IF EXISTS {t}" for t in (*TABLES, META)]


def mysql_create_sql() -> list[str]:
    keys = dict(PRIMARY_KEYS)
    out = []
    for t in TABLES:
        columns = re.sub(r"\btimestamp\b", "datetime", COLUMNS[t])
        key = f",\n    PRIMARY KEY ({keys[t]})" if t in keys else ""
        out.append(f"CREATE TABLE {t} ({columns}{key}\n) ENGINE=InnoDB")
    out.append(
        f"CREATE TABLE {META} ("
        " warehouses integer not null,"
        " load_seed bigint not null,"
        " c_last_load integer not null,"
        " loaded_at datetime(6) not null default current_timestamp(6),"
        " load_s double,"
        " delivered boolean not null default false) ENGINE=InnoDB"
    )
    return out


def mysql_analyze_sql() -> list[str]:
    return [f"ANALYZE TABLE {t}" for t in TABLES]
