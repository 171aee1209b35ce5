"""TPC-C's consistency conditions (clause 3.3.2.1-12), one SQL query each.

Each query returns the offending rows' first warehouse and district (in
that order), what it found there, and how many offend in all; no row when
the condition holds on every warehouse. Per-district conditions look up
each district's max and min order numbers through the primary keys; the
per-order and per-customer ones aggregate ORDER-LINE and HISTORY once
(hash joins), a few seconds at 10 warehouses.

Condition 11 holds only until the first Delivery after the load (Delivery
removes NEW-ORDER rows but no ORDER rows), so `check` runs it only while
tpcc_meta says no Delivery can have run.

Each condition has its text in MySQL's and MariaDB's dialect too (`mysql`):
no FULL JOIN there, so the per-district conditions start from DISTRICT (the
spec's "for each district") and join each side's aggregate to it; `<=>`
for IS NOT DISTINCT FROM; CONCAT with 'null' for a missing value, as
PostgreSQL's format() shows none.
"""

from __future__ import annotations

from dataclasses import dataclass

from perflab.endpoints import Sessionlike


@dataclass(frozen=True)
class Condition:
    number: int
    text: str  # the condition, as the spec states it (shortened)
    sql: str  # -> (w_id, d_id, detail, offenders), at most one row
    mysql: str  # the same in MySQL's and MariaDB's dialect

    @property
    def name(self) -> str:
        return f"consistency_{self.number:02d}"


def _first(inner: str, w: str, d: str, detail: str, where: str) -> str:
    # The offenders first, planned on their own (MATERIALIZED), then the first
    # of them: with ORDER BY ... LIMIT on the join itself the planner wants its
    # output sorted by warehouse and merge-joins on the warehouse alone, the
    # rest a filter: orders x order lines per warehouse (minutes, seen after
    # three runs at 2 warehouses).
    return (f"WITH bad AS MATERIALIZED (SELECT {w} AS w, {d} AS d, {detail} AS detail FROM {inner} "
            f"WHERE {where}) SELECT w, d, detail, count(*) OVER () FROM bad ORDER BY 1, 2 NULLS FIRST LIMIT 1")


def _my_first(inner: str, w: str, d: str, detail: str, where: str) -> str:
    # MariaDB merges the CTE into the query; the window counts every offender before the LIMIT
    return (f"WITH bad AS (SELECT {w} AS w, {d} AS d, {detail} AS detail FROM {inner} WHERE {where}) "
            "SELECT w, d, detail, count(*) OVER () FROM bad ORDER BY 1, 2 LIMIT 1")


def _my_format(template: str, *values: str) -> str:
    """format(template, values...) as MySQL's CONCAT, a NULL shown as 'null'."""
    texts = template.split("%s")
    assert len(texts) == len(values) + 1
    parts = [f"'{texts[0]}'"]
    for value, text in zip(values, texts[1:], strict=True):
        parts += [f"IFNULL(CAST({value} AS CHAR), 'null')", f"'{text}'"]
    return "CONCAT(" + ", ".join(p for p in parts if p != "''") + ")"


# Per customer, everything conditions 10 and 12 compare, in ONE aggregate over
# CUSTOMER, the delivered ORDER-LINEs and HISTORY (UNION ALL, grouped by the
# customer key). Joining CUSTOMER to an aggregate instead lets the planner,
# misjudging the aggregate's groups, pick a merge join on the warehouse alone:
# 30,000 x 30,000 comparisons per warehouse (minutes, seen at 1 warehouse).
_PER_CUSTOMER = """(SELECT w AS c_w_id, d AS c_d_id, c AS c_id, sum(balance) AS c_balance,
        sum(ytd_payment) AS c_ytd_payment, sum(delivered) AS delivered, sum(paid) AS paid,
        bool_or(is_customer) AS is_customer FROM (
        SELECT c_w_id AS w, c_d_id AS d, c_id AS c, c_balance AS balance, c_ytd_payment AS ytd_payment,
               0::numeric AS delivered, 0::numeric AS paid, true AS is_customer FROM customer
        UNION ALL
        SELECT o_w_id, o_d_id, o_c_id, 0, 0, ol_amount, 0, false
          FROM orders JOIN order_line ON ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
          WHERE ol_delivery_d IS NOT NULL
        UNION ALL
        SELECT h_c_w_id, h_c_d_id, h_c_id, 0, 0, 0, h_amount, false FROM history) u
      GROUP BY w, d, c) x"""

_MY_PER_CUSTOMER = """(SELECT w AS c_w_id, d AS c_d_id, c AS c_id, sum(balance) AS c_balance,
        sum(ytd_payment) AS c_ytd_payment, sum(delivered) AS delivered, sum(paid) AS paid,
        max(is_customer) AS is_customer FROM (
        SELECT c_w_id AS w, c_d_id AS d, c_id AS c, c_balance AS balance, c_ytd_payment AS ytd_payment,
               0 AS delivered, 0 AS paid, 1 AS is_customer FROM customer
        UNION ALL
        SELECT o_w_id, o_d_id, o_c_id, 0, 0, ol_amount, 0, 0
          FROM orders JOIN order_line ON ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
          WHERE ol_delivery_d IS NOT NULL
        UNION ALL
        SELECT h_c_w_id, h_c_d_id, h_c_id, 0, 0, 0, h_amount, 0 FROM history) u
      GROUP BY w, d, c) x"""

CONDITIONS = (
    Condition(1, "W_YTD = sum(D_YTD) for each warehouse", _first(
        "warehouse LEFT JOIN (SELECT d_w_id, sum(d_ytd) AS ytd FROM district GROUP BY d_w_id) d ON d_w_id = w_id",
        "w_id", "NULL::int", "format('w_ytd %s, sum(d_ytd) %s', w_ytd, ytd)",
        "w_ytd IS DISTINCT FROM ytd"),
        _my_first(
        "warehouse LEFT JOIN (SELECT d_w_id, sum(d_ytd) AS ytd FROM district GROUP BY d_w_id) d ON d_w_id = w_id",
        "w_id", "NULL", _my_format("w_ytd %s, sum(d_ytd) %s", "w_ytd", "ytd"), "NOT (w_ytd <=> ytd)")),
    # Clause 3.3.2.2: the NEW-ORDER part does not apply to a district with no
    # outstanding new orders (no NEW-ORDER rows): long closed-loop runs,
    # Delivery back to back, can deliver every order of a district.
    Condition(2, "D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID) for each district (max(NO_O_ID) where the district "
              "has NEW-ORDER rows)", _first(
        "(SELECT d_w_id, d_id, d_next_o_id,"
        " (SELECT max(o_id) FROM orders WHERE o_w_id = d_w_id AND o_d_id = d_id) AS max_o,"
        " (SELECT max(no_o_id) FROM new_order WHERE no_w_id = d_w_id AND no_d_id = d_id) AS max_no"
        " FROM district) d",
        "d_w_id", "d_id", "format('d_next_o_id %s, max(o_id) %s, max(no_o_id) %s', d_next_o_id, max_o, max_no)",
        "d_next_o_id - 1 IS DISTINCT FROM max_o OR (max_no IS NOT NULL AND d_next_o_id - 1 <> max_no)"),
        _my_first(
        "(SELECT d_w_id, d_id, d_next_o_id,"
        " (SELECT max(o_id) FROM orders WHERE o_w_id = d_w_id AND o_d_id = d_id) AS max_o,"
        " (SELECT max(no_o_id) FROM new_order WHERE no_w_id = d_w_id AND no_d_id = d_id) AS max_no"
        " FROM district) d",
        "d_w_id", "d_id",
        _my_format("d_next_o_id %s, max(o_id) %s, max(no_o_id) %s", "d_next_o_id", "max_o", "max_no"),
        "NOT (d_next_o_id - 1 <=> max_o) OR (max_no IS NOT NULL AND d_next_o_id - 1 <> max_no)")),
    Condition(3, "max(NO_O_ID) - min(NO_O_ID) + 1 = count of NEW-ORDER rows for each district", _first(
        "(SELECT no_w_id, no_d_id, max(no_o_id) AS hi, min(no_o_id) AS lo, count(*) AS n"
        " FROM new_order GROUP BY no_w_id, no_d_id) n",
        "no_w_id", "no_d_id", "format('max %s, min %s, rows %s', hi, lo, n)",
        "hi - lo + 1 <> n"),
        _my_first(
        "(SELECT no_w_id, no_d_id, max(no_o_id) AS hi, min(no_o_id) AS lo, count(*) AS n"
        " FROM new_order GROUP BY no_w_id, no_d_id) n",
        "no_w_id", "no_d_id", _my_format("max %s, min %s, rows %s", "hi", "lo", "n"), "hi - lo + 1 <> n")),
    Condition(4, "sum(O_OL_CNT) = count of ORDER-LINE rows for each district", _first(
        "(SELECT o_w_id, o_d_id, sum(o_ol_cnt) AS lines FROM orders GROUP BY o_w_id, o_d_id) o"
        " FULL JOIN (SELECT ol_w_id, ol_d_id, count(*) AS n FROM order_line GROUP BY ol_w_id, ol_d_id) l"
        " ON ol_w_id = o_w_id AND ol_d_id = o_d_id",
        "coalesce(o_w_id, ol_w_id)", "coalesce(o_d_id, ol_d_id)",
        "format('sum(o_ol_cnt) %s, order lines %s', lines, n)",
        "lines IS DISTINCT FROM n"),
        _my_first(
        "district LEFT JOIN (SELECT o_w_id, o_d_id, sum(o_ol_cnt) AS ol_lines FROM orders GROUP BY o_w_id, o_d_id) o"
        " ON o_w_id = d_w_id AND o_d_id = d_id"
        " LEFT JOIN (SELECT ol_w_id, ol_d_id, count(*) AS n FROM order_line GROUP BY ol_w_id, ol_d_id) l"
        " ON ol_w_id = d_w_id AND ol_d_id = d_id",
        "d_w_id", "d_id", _my_format("sum(o_ol_cnt) %s, order lines %s", "ol_lines", "n"),
        "IFNULL(ol_lines, 0) <> IFNULL(n, 0)")),
    Condition(5, "O_CARRIER_ID is null iff the order has a NEW-ORDER row, for each order", _first(
        "orders LEFT JOIN new_order ON no_w_id = o_w_id AND no_d_id = o_d_id AND no_o_id = o_id",
        "o_w_id", "o_d_id",
        "format('order %s: o_carrier_id %s, new_order row %s', o_id, coalesce(o_carrier_id::text, 'null'),"
        " CASE WHEN no_o_id IS NULL THEN 'absent' ELSE 'present' END)",
        "(o_carrier_id IS NULL) <> (no_o_id IS NOT NULL)"),
        _my_first(
        "orders LEFT JOIN new_order ON no_w_id = o_w_id AND no_d_id = o_d_id AND no_o_id = o_id",
        "o_w_id", "o_d_id",
        _my_format("order %s: o_carrier_id %s, new_order row %s", "o_id", "o_carrier_id",
                   "CASE WHEN no_o_id IS NULL THEN 'absent' ELSE 'present' END"),
        "(o_carrier_id IS NULL) <> (no_o_id IS NOT NULL)")),
    Condition(6, "O_OL_CNT = count of its ORDER-LINE rows, for each order", _first(
        "orders LEFT JOIN (SELECT ol_w_id, ol_d_id, ol_o_id, count(*) AS n FROM order_line"
        " GROUP BY ol_w_id, ol_d_id, ol_o_id) l ON ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id",
        "o_w_id", "o_d_id", "format('order %s: o_ol_cnt %s, order lines %s', o_id, o_ol_cnt, coalesce(n, 0))",
        "o_ol_cnt <> coalesce(n, 0)"),
        _my_first(
        "(SELECT o_w_id, o_d_id, o_id, o_ol_cnt, (SELECT count(*) FROM order_line"
        " WHERE ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id) AS n FROM orders) o",
        "o_w_id", "o_d_id", _my_format("order %s: o_ol_cnt %s, order lines %s", "o_id", "o_ol_cnt", "n"),
        "o_ol_cnt <> n")),
    Condition(7, "OL_DELIVERY_D is null iff its order's O_CARRIER_ID is null, for each order line", _first(
        "order_line JOIN orders ON o_w_id = ol_w_id AND o_d_id = ol_d_id AND o_id = ol_o_id",
        "ol_w_id", "ol_d_id",
        "format('order %s line %s: ol_delivery_d %s, o_carrier_id %s', ol_o_id, ol_number,"
        " coalesce(ol_delivery_d::text, 'null'), coalesce(o_carrier_id::text, 'null'))",
        "(ol_delivery_d IS NULL) <> (o_carrier_id IS NULL)"),
        _my_first(
        "order_line JOIN orders ON o_w_id = ol_w_id AND o_d_id = ol_d_id AND o_id = ol_o_id",
        "ol_w_id", "ol_d_id",
        _my_format("order %s line %s: ol_delivery_d %s, o_carrier_id %s", "ol_o_id", "ol_number", "ol_delivery_d",
                   "o_carrier_id"),
        "(ol_delivery_d IS NULL) <> (o_carrier_id IS NULL)")),
    Condition(8, "W_YTD = sum(H_AMOUNT) for each warehouse", _first(
        "warehouse LEFT JOIN (SELECT h_w_id, sum(h_amount) AS paid FROM history GROUP BY h_w_id) h ON h_w_id = w_id",
        "w_id", "NULL::int", "format('w_ytd %s, sum(h_amount) %s', w_ytd, paid)",
        "w_ytd IS DISTINCT FROM paid"),
        _my_first(
        "warehouse LEFT JOIN (SELECT h_w_id, sum(h_amount) AS paid FROM history GROUP BY h_w_id) h ON h_w_id = w_id",
        "w_id", "NULL", _my_format("w_ytd %s, sum(h_amount) %s", "w_ytd", "paid"), "NOT (w_ytd <=> paid)")),
    Condition(9, "D_YTD = sum(H_AMOUNT) for each district", _first(
        "district LEFT JOIN (SELECT h_w_id, h_d_id, sum(h_amount) AS paid FROM history GROUP BY h_w_id, h_d_id) h"
        " ON h_w_id = d_w_id AND h_d_id = d_id",
        "d_w_id", "d_id", "format('d_ytd %s, sum(h_amount) %s', d_ytd, paid)",
        "d_ytd IS DISTINCT FROM paid"),
        _my_first(
        "district LEFT JOIN (SELECT h_w_id, h_d_id, sum(h_amount) AS paid FROM history GROUP BY h_w_id, h_d_id) h"
        " ON h_w_id = d_w_id AND h_d_id = d_id",
        "d_w_id", "d_id", _my_format("d_ytd %s, sum(h_amount) %s", "d_ytd", "paid"), "NOT (d_ytd <=> paid)")),
    Condition(10, "C_BALANCE = sum of its delivered OL_AMOUNT - sum of its H_AMOUNT, for each customer", _first(
        _PER_CUSTOMER, "c_w_id", "c_d_id",
        "format('customer %s: c_balance %s, delivered %s, paid %s', c_id, c_balance, delivered, paid)",
        "is_customer AND c_balance <> delivered - paid"),
        _my_first(
        _MY_PER_CUSTOMER, "c_w_id", "c_d_id",
        _my_format("customer %s: c_balance %s, delivered %s, paid %s", "c_id", "c_balance", "delivered", "paid"),
        "is_customer = 1 AND c_balance <> delivered - paid")),
    Condition(11, "count of ORDER rows - count of NEW-ORDER rows = 2100 for each district (until a Delivery)", _first(
        "(SELECT o_w_id, o_d_id, count(*) AS n FROM orders GROUP BY o_w_id, o_d_id) o"
        " FULL JOIN (SELECT no_w_id, no_d_id, count(*) AS n FROM new_order GROUP BY no_w_id, no_d_id) no"
        " ON no_w_id = o_w_id AND no_d_id = o_d_id",
        "coalesce(o_w_id, no_w_id)", "coalesce(o_d_id, no_d_id)",
        "format('orders %s, new orders %s', coalesce(o.n, 0), coalesce(no.n, 0))",
        "coalesce(o.n, 0) - coalesce(no.n, 0) <> 2100"),
        _my_first(
        "district LEFT JOIN (SELECT o_w_id, o_d_id, count(*) AS n FROM orders GROUP BY o_w_id, o_d_id) oc"
        " ON o_w_id = d_w_id AND o_d_id = d_id"
        " LEFT JOIN (SELECT no_w_id, no_d_id, count(*) AS n FROM new_order GROUP BY no_w_id, no_d_id) nc"
        " ON no_w_id = d_w_id AND no_d_id = d_id",
        "d_w_id", "d_id", _my_format("orders %s, new orders %s", "IFNULL(oc.n, 0)", "IFNULL(nc.n, 0)"),
        "IFNULL(oc.n, 0) - IFNULL(nc.n, 0) <> 2100")),
    Condition(12, "C_BALANCE + C_YTD_PAYMENT = sum of its delivered OL_AMOUNT, for each customer", _first(
        _PER_CUSTOMER, "c_w_id", "c_d_id",
        "format('customer %s: c_balance %s + c_ytd_payment %s, delivered %s', c_id, c_balance, c_ytd_payment,"
        " delivered)",
        "is_customer AND c_balance + c_ytd_payment <> delivered"),
        _my_first(
        _MY_PER_CUSTOMER, "c_w_id", "c_d_id",
        _my_format("customer %s: c_balance %s + c_ytd_payment %s, delivered %s", "c_id", "c_balance",
                   "c_ytd_payment", "delivered"),
        "is_customer = 1 AND c_balance + c_ytd_payment <> delivered")),
)

BY_NUMBER = {c.number: c for c in CONDITIONS}


def run_condition(conn: Sessionlike, condition: Condition, dialect: str = "postgres") -> tuple[bool, str]:
    """(holds, detail) of one condition on `conn` (an open session of the
    endpoint's `dialect`, "postgres" or "mysql": the caller decides the
    transaction)."""
    row = conn.execute(condition.mysql if dialect == "mysql" else condition.sql).fetchone()
    if row is None:
        return True, f"holds on every warehouse: {condition.text}"
    w, d, detail, offenders = row
    where = f"warehouse {w}" + (f" district {d}" if d is not None else "")
    return False, (f"condition {condition.number} ({condition.text}) fails first at {where}: {detail}"
                   f" ({offenders} offending in all)")
