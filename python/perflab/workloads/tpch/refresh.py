"""The refresh functions RF1 and RF2 (TPC-H clause 2.5), on either dialect.

The rows come from the engine (crates/engine/src/tpch/refresh.rs, which
documents how the sets are made and how they compare to `dbgen -U`):
refresh pair n inserts SF * 1500 new orders with their lineitems (RF1) and
deletes SF * 1500 old orders with their lineitems (RF2), each pair with keys
no other pair uses. Which pair comes next is kept in the database itself
(perflab_tpch_state), so pairs stay fresh across runs that reuse the data; a
run claims its pairs whole before it starts and records the claim in the
store, so a run run again (resumed, retried) uses the same pairs, after
`undo_pair` has put back what its earlier attempt committed.

Each function is one transaction, as clause 2.5.2/2.5.3 allow ("the
transaction may insert/delete in any order"): RF1 inserts the orders first and
then the lineitems; RF2 deletes the lineitems first and then the orders, so
PostgreSQL's and InnoDB's foreign keys hold at every statement. RF1 inserts
by COPY on PostgreSQL, from Arrow on DuckDB, and by multi-row INSERTs on
MySQL (PyMySQL's executemany: statements of up to 1 MB).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perflab import _engine
from perflab.endpoints import Sessionlike
from perflab.errors import RunFailure

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
    _insert(conn, dialect, orders, lineitems)
    return RefreshTiming(pair, "RF1", time.perf_counter() - started, n_orders, n_lineitems)


def _insert(conn: Any, dialect: str, orders: bytes, lineitems: bytes,
            extra: Callable[[Sessionlike], None] | None = None) -> None:
    """Insert orders and lineitems (COPY text) in one transaction; `extra(cur)`
    runs first inside it (a rollback's deletes)."""
    if dialect == "postgres":
        with conn.transaction():
            cur = conn.cursor()
            if extra is not None:
                extra(cur)
            for table, rows in (("orders", orders), ("lineitem", lineitems)):
                if rows:
                    with cur.copy(f"copy {table} from stdin (format text, delimiter '|')") as copy:
                        copy.write(rows)
    elif dialect == "mysql":
        conn.execute("begin")
        try:
            if extra is not None:
                extra(conn)
            for table, rows, columns in (("orders", orders, ORDERS_COLUMNS), ("lineitem", lineitems, LINEITEM_COLUMNS)):
                if rows:
                    marks = ", ".join(["%s"] * len(columns))
                    conn.cursor().executemany(f"insert into {table} values ({marks})",
                                              [line.split("|") for line in rows.decode().splitlines() if line])
            conn.execute("commit")
        except BaseException:
            conn.execute("rollback")
            raise
    else:
        import pyarrow.csv as pacsv

        batches = {table: _as_arrow(rows, columns, pacsv)
                   for table, rows, columns in (("orders", orders, ORDERS_COLUMNS),
                                                ("lineitem", lineitems, LINEITEM_COLUMNS)) if rows}
        conn.execute("begin transaction")
        try:
            if extra is not None:
                extra(conn)
            for table, batch in batches.items():
                conn.register("perflab_rf1_rows", batch)
                conn.execute(f"insert into {table} select * from perflab_rf1_rows")
                conn.unregister("perflab_rf1_rows")
            conn.execute("commit")
        except BaseException:
            conn.execute("rollback")
            raise


# dbgen's sparse keys: bits 3-4 of an order key are its slot (refresh.rs).
_SLOT_SHIFT = 3
_SLOT_MASK = 3 << _SLOT_SHIFT


def _in_slot(rows: bytes, slot: int) -> bytes:
    """COPY text rows whose first field is an order key, moved into `slot`."""
    out = []
    for line in rows.splitlines(keepends=True):
        key, sep, rest = line.partition(b"|")
        out.append(str((int(key) & ~_SLOT_MASK) | (slot << _SLOT_SHIFT)).encode() + sep + rest)
    return b"".join(out)


def _keys(rows: bytes) -> list[int]:
    return [int(line.partition(b"|")[0]) for line in rows.splitlines() if line]


def _count_orders(conn: Sessionlike, dialect: str, keys: list[int]) -> int:
    if dialect == "postgres":
        return int(conn.execute("select count(*) from orders where o_orderkey = any(%s)", (keys,)).fetchone()[0])
    if dialect == "mysql":  # PyMySQL writes a list as (k1, k2, ...)
        return int(conn.execute("select count(*) from orders where o_orderkey in %s", (keys,)).fetchone()[0])
    return int(conn.execute("select count(*) from orders where o_orderkey in (select unnest($1::bigint[]))",
                            [keys]).fetchall()[0][0])


def undo_pair(conn: Any, dialect: str, scale_factor: float, pair: int, seed: int) -> str | None:
    """Put the data back as it was before refresh pair `pair` ran: delete the
    orders and lineitems its RF1 inserted, re-insert those its RF2 deleted
    (the same generator's rows: RF2 deletes the rows of the pair's block in
    its delete slot). Each function is one transaction, so each either ran
    whole or not at all; both are checked in the data, so undoing a pair that
    did not run, or was undone already, changes nothing. One transaction.
    Returns what was done, or None when nothing was to do. Raises RunFailure
    when the data is in neither state (then only a reload is honest)."""
    orders, lineitems, _, _ = _engine.tpch_rf1_rows(scale_factor, pair, seed)
    rf1_keys = _keys(orders)
    rf2_keys = list(_engine.tpch_rf2_keys(scale_factor, pair, seed))
    if not rf1_keys or not rf2_keys:
        return None
    inserted = _count_orders(conn, dialect, rf1_keys)
    present = _count_orders(conn, dialect, rf2_keys)
    if inserted not in (0, len(rf1_keys)) or present not in (0, len(rf2_keys)):
        raise RunFailure(
            f"refresh pair {pair} cannot be undone: {inserted} of its RF1's {len(rf1_keys)} orders and {present} of "
            f"the {len(rf2_keys)} orders its RF2 deletes are present (neither before nor after it); the data must be "
            "loaded again (a run with tests = [\"load\", ...], or a new experiment)")
    done = []
    delete_slot = (rf2_keys[0] & _SLOT_MASK) >> _SLOT_SHIFT
    put_back = (_in_slot(orders, delete_slot), _in_slot(lineitems, delete_slot)) if present == 0 else (b"", b"")

    def delete_rf1(cur: Sessionlike) -> None:
        if inserted == 0:
            return
        if dialect == "postgres":
            cur.execute("delete from lineitem where l_orderkey = any(%s)", (rf1_keys,))
            cur.execute("delete from orders where o_orderkey = any(%s)", (rf1_keys,))
        elif dialect == "mysql":
            cur.execute("delete from lineitem where l_orderkey in %s", (rf1_keys,))
            cur.execute("delete from orders where o_orderkey in %s", (rf1_keys,))
        else:
            cur.execute("delete from lineitem where l_orderkey in (select unnest($1::bigint[]))", [rf1_keys])
            cur.execute("delete from orders where o_orderkey in (select unnest($1::bigint[]))", [rf1_keys])

    if inserted:
        done.append(f"deleted the {inserted} orders its RF1 inserted")
    if present == 0:
        done.append(f"put back the {len(rf2_keys)} orders its RF2 deleted")
    if not done:
        return None
    _insert(conn, dialect, *put_back, extra=delete_rf1)
    return f"refresh pair {pair}: " + ", ".join(done)


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
    elif dialect == "mysql":
        conn.execute("begin")
        try:
            n_lineitems = conn.execute("delete from lineitem where l_orderkey in %s", (keys,)).rowcount
            n_orders = conn.execute("delete from orders where o_orderkey in %s", (keys,)).rowcount
            conn.execute("commit")
        except BaseException:
            conn.execute("rollback")
            raise
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
