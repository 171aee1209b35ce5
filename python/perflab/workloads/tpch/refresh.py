"""The refresh functions RF1 and RF2 (TPC-H clause 2.5), on either dialect.

The rows come from the engine (crates/engine/src/tpch/refresh.rs, which
documents how the sets are made and how they compare to `dbgen -U`):
refresh pair n inserts SF * 1500 new orders with their lineitems (RF1) and
deletes SF * 1500 old orders with their lineitems (RF2), each pair with keys
no other pair uses. Which pair comes next is kept in the database itself
(perflab_tpch_state), so pairs stay fresh across runs that reuse the data.

Each function is one transaction, as clause 2.5.2/2.5.3 allow ("the
transaction may insert/delete in any order"): RF1 inserts the orders first and
then the lineitems; RF2 deletes the lineitems first and then the orders, so
PostgreSQL's foreign keys hold at every statement.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from typing import Any

from perflab import _engine

ORDERS_COLUMNS = ("o_orderkey", "o_custkey", "o_orderstatus", "o_totalprice", "o_orderdate",
                  "o_orderpriority", "o_clerk", "o_shippriority", "o_comment")
LINEITEM_COLUMNS = ("l_orderkey", "l_partkey", "l_suppkey", "l_linenumber", "l_quantity",
                    "l_extendedprice", "l_discount", "l_tax", "l_returnflag", "l_linestatus",
                    "l_shipdate", "l_commitdate", "l_receiptdate", "l_shipinstruct", "l_shipmode",
                    "l_comment")


@dataclass
class RefreshTiming:
    pair: int
    function: str  # "RF1" | "RF2"
    seconds: float
    orders: int
    lineitems: int


def rf1(conn: Any, dialect: str, scale_factor: float, pair: int, seed: int) -> RefreshTiming:
    """Insert refresh pair `pair`'s new orders and lineitems; timed from the
    first statement to the commit."""
    orders, lineitems, n_orders, n_lineitems = _engine.tpch_rf1_rows(scale_factor, pair, seed)
    started = time.perf_counter()
    if dialect == "postgres":
        with conn.transaction():
            cur = conn.cursor()
            for table, rows in (("orders", orders), ("lineitem", lineitems)):
                with cur.copy(f"copy {table} from stdin (format text, delimiter '|')") as copy:
                    copy.write(rows)
    else:
        import pyarrow.csv as pacsv

        batches = {table: _as_arrow(rows, columns, pacsv)
                   for table, rows, columns in (("orders", orders, ORDERS_COLUMNS),
                                                ("lineitem", lineitems, LINEITEM_COLUMNS))}
        conn.execute("begin transaction")
        try:
            for table, batch in batches.items():
                conn.register("perflab_rf1_rows", batch)
                conn.execute(f"insert into {table} select * from perflab_rf1_rows")
                conn.unregister("perflab_rf1_rows")
            conn.execute("commit")
        except BaseException:
            conn.execute("rollback")
            raise
    return RefreshTiming(pair, "RF1", time.perf_counter() - started, n_orders, n_lineitems)


def _as_arrow(rows: bytes, columns: tuple[str, ...], pacsv: Any) -> Any:
    import pyarrow as pa

    # Every column as text: DuckDB casts on insert exactly (no float detour for decimals).
    return pacsv.read_csv(
        io.BytesIO(rows),
        read_options=pacsv.ReadOptions(column_names=list(columns)),
        parse_options=pacsv.ParseOptions(delimiter="|", quote_char=False),
        convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in columns}),
    )


def rf2(conn: Any, dialect: str, scale_factor: float, pair: int, seed: int) -> RefreshTiming:
    """Delete refresh pair `pair`'s old orders and their lineitems."""
    keys = _engine.tpch_rf2_keys(scale_factor, pair, seed)
    started = time.perf_counter()
    if dialect == "postgres":
        with conn.transaction():
            cur = conn.cursor()
            cur.execute("delete from lineitem where l_orderkey = any(%s)", (keys,))
            n_lineitems = cur.rowcount
            cur.execute("delete from orders where o_orderkey = any(%s)", (keys,))
            n_orders = cur.rowcount
    else:
        conn.execute("begin transaction")
        try:
            n_lineitems = conn.execute(
                "delete from lineitem where l_orderkey in (select unnest($1::bigint[]))", [keys]
            ).fetchall()[0][0]
            n_orders = conn.execute(
                "delete from orders where o_orderkey in (select unnest($1::bigint[]))", [keys]
            ).fetchall()[0][0]
            conn.execute("commit")
        except BaseException:
            conn.execute("rollback")
            raise
    return RefreshTiming(pair, "RF2", time.perf_counter() - started, n_orders, n_lineitems)
