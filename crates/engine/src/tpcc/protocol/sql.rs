//! The transactions' SQL: each statement prepared once per connection as
//! "T<index>" (`st`), or in procedures mode the five calls (`pr`).

use crate::tpcc::DISTRICTS_PER_WAREHOUSE;

/// Statement indexes (prepared as "T<index>").
pub(super) mod st {
    pub const BEGIN: usize = 0;
    pub const COMMIT: usize = 1;
    pub const NO_W: usize = 2;
    pub const NO_D: usize = 3;
    pub const NO_C: usize = 4;
    pub const NO_I: usize = 5;
    pub const NO_O: usize = 6;
    pub const NO_NO: usize = 7;
    pub const P_W: usize = 8;
    pub const P_D: usize = 9;
    pub const P_CN: usize = 10;
    pub const P_C: usize = 11;
    pub const P_H: usize = 12;
    pub const OS_CN: usize = 13;
    pub const OS_C: usize = 14;
    pub const OS_O: usize = 15;
    pub const OS_OL: usize = 16;
    pub const D_NO: usize = 17;
    pub const D_O: usize = 18;
    pub const D_OL: usize = 19;
    pub const D_C: usize = 20;
    pub const SL: usize = 21;
    /// NO_S + d - 1: the stock update and order lines of district d.
    pub const NO_S: usize = 22;
    pub const COUNT: usize = 32;
}

/// Procedure calls (prepared as "T<index>" in procedures mode).
pub(super) mod pr {
    pub const NEW_ORDER: usize = 0;
    pub const PAYMENT: usize = 1;
    pub const ORDER_STATUS: usize = 2;
    pub const DELIVERY: usize = 3;
    pub const STOCK_LEVEL: usize = 4;
}

pub(super) const STATEMENT_NAMES: [&str; st::COUNT] = [
    "T0", "T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "T9", "T10", "T11", "T12", "T13", "T14",
    "T15", "T16", "T17", "T18", "T19", "T20", "T21", "T22", "T23", "T24", "T25", "T26", "T27",
    "T28", "T29", "T30", "T31",
];

pub(super) fn statements_sql() -> Vec<String> {
    let mut sql: Vec<String> = [
        "BEGIN",
        "COMMIT",
        // New-Order
        "SELECT w_tax FROM warehouse WHERE w_id = $1",
        "UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = $1 AND d_id = $2 \
         RETURNING d_tax, d_next_o_id - 1",
        "SELECT c_discount, c_last, c_credit FROM customer \
         WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
        "SELECT i_id, i_price, i_name, i_data FROM item WHERE i_id = ANY($1::int[])",
        "INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, \
         o_all_local) VALUES ($1, $2, $3, $4, now(), NULL, $5, $6)",
        "INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES ($1, $2, $3)",
        // Payment
        "UPDATE warehouse SET w_ytd = w_ytd + $2 WHERE w_id = $1 \
         RETURNING w_name, w_street_1, w_street_2, w_city, w_state, w_zip",
        "UPDATE district SET d_ytd = d_ytd + $3 WHERE d_w_id = $1 AND d_id = $2 \
         RETURNING d_name, d_street_1, d_street_2, d_city, d_state, d_zip",
        "SELECT c_id FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3 \
         ORDER BY c_first",
        "UPDATE customer SET c_balance = c_balance - $4::numeric, \
         c_ytd_payment = c_ytd_payment + $4::numeric, c_payment_cnt = c_payment_cnt + 1, \
         c_data = CASE WHEN c_credit = 'BC' THEN left(format('%s %s %s %s %s %s | ', c_id, \
         c_d_id, c_w_id, $5::int, $6::int, $4::numeric) || c_data, 500) ELSE c_data END \
         WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3 \
         RETURNING c_first, c_middle, c_last, c_street_1, c_street_2, c_city, c_state, c_zip, \
         c_phone, c_since, c_credit, c_credit_lim, c_discount, c_balance, \
         CASE WHEN c_credit = 'BC' THEN left(c_data, 200) END",
        "INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, \
         h_data) VALUES ($1, $2, $3, $4, $5, now(), $6, \
         (SELECT w_name FROM warehouse WHERE w_id = $5) || '    ' || \
         (SELECT d_name FROM district WHERE d_w_id = $5 AND d_id = $4))",
        // Order-Status
        "SELECT c_id, c_balance, c_first, c_middle, c_last FROM customer \
         WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3 ORDER BY c_first",
        "SELECT c_balance, c_first, c_middle, c_last FROM customer \
         WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
        "SELECT o_id, o_carrier_id, o_entry_d FROM orders \
         WHERE o_w_id = $1 AND o_d_id = $2 AND o_c_id = $3 ORDER BY o_id DESC LIMIT 1",
        "SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line \
         WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = \
         (SELECT max(o_id) FROM orders WHERE o_w_id = $1 AND o_d_id = $2 AND o_c_id = $3)",
        // Delivery
        "DELETE FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 AND no_o_id = \
         (SELECT min(no_o_id) FROM new_order WHERE no_w_id = $1 AND no_d_id = $2) \
         RETURNING no_o_id",
        "UPDATE orders SET o_carrier_id = $4 WHERE o_w_id = $1 AND o_d_id = $2 AND o_id = $3 \
         RETURNING o_c_id",
        "WITH l AS (UPDATE order_line SET ol_delivery_d = now() \
         WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3 RETURNING ol_amount) \
         SELECT coalesce(sum(ol_amount), 0) FROM l",
        "UPDATE customer SET c_balance = c_balance + $4, c_delivery_cnt = c_delivery_cnt + 1 \
         WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
        // Stock-Level (the district's next order id read in the same statement)
        "SELECT count(DISTINCT s_i_id) FROM order_line JOIN stock \
         ON s_w_id = ol_w_id AND s_i_id = ol_i_id \
         WHERE ol_w_id = $1 AND ol_d_id = $2 \
         AND ol_o_id < (SELECT d_next_o_id FROM district WHERE d_w_id = $1 AND d_id = $2) \
         AND ol_o_id >= (SELECT d_next_o_id - 20 FROM district WHERE d_w_id = $1 AND d_id = $2) \
         AND s_quantity < $3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for d in 1..=DISTRICTS_PER_WAREHOUSE {
        sql.push(format!(
            "WITH u AS (SELECT * FROM unnest($4::int[], $5::int[], $6::int[], $7::int[], \
             $8::numeric[]) AS u(n, i, sw, q, amount)), \
             s AS (UPDATE stock SET s_quantity = CASE WHEN s_quantity - u.q >= 10 \
             THEN s_quantity - u.q ELSE s_quantity - u.q + 91 END, s_ytd = s_ytd + u.q, \
             s_order_cnt = s_order_cnt + 1, \
             s_remote_cnt = s_remote_cnt + CASE WHEN u.sw <> $3::int THEN 1 ELSE 0 END \
             FROM u WHERE s_i_id = u.i AND s_w_id = u.sw \
             RETURNING s_i_id, s_w_id, s_dist_{d:02} AS dist, s_quantity, s_data) \
             INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, \
             ol_supply_w_id, ol_delivery_d, ol_quantity, ol_amount, ol_dist_info) \
             SELECT $1::int, $2::int, $3::int, u.n, u.i, u.sw, NULL, u.q, u.amount, s.dist \
             FROM u JOIN s ON s.s_i_id = u.i AND s.s_w_id = u.sw"
        ));
    }
    assert_eq!(sql.len(), st::COUNT);
    sql
}

pub(super) fn procedures_sql() -> Vec<String> {
    [
        "SELECT tpcc_new_order($1::int, $2::int, $3::int, $4::int, $5::int[], $6::int[], $7::int[])",
        "SELECT tpcc_payment($1::int, $2::int, $3::int, $4::int, $5::int, $6::text, $7::numeric)",
        "SELECT tpcc_order_status($1::int, $2::int, $3::int, $4::text)",
        "SELECT tpcc_delivery($1::int, $2::int)",
        "SELECT tpcc_stock_level($1::int, $2::int, $3::int)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statements_and_calls_are_complete() {
        let sql = statements_sql();
        assert!(sql[st::NO_S + 9].contains("s_dist_10"));
        assert!(sql[st::NO_S].contains("s_dist_01"));
        assert_eq!(procedures_sql().len(), 5);
    }
}
