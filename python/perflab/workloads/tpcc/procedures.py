"""The five transactions as PL/pgSQL functions, for `mode = "procedures"`.

Their names, argument types and order are the contract with the engine
(crates/engine/src/tpcc/PROCEDURES.md): the engine sends one `SELECT
tpcc_xxx(...)` per transaction, outside any explicit transaction block, so
each call is one transaction at the connection's default isolation.
Installed at every load (whatever the mode, so that data loaded for a
statements run serves a procedures run too) and replaced before every
procedures run (CREATE OR REPLACE: cheap, and data loaded by an older
perflab gets the current text).

What each does is clause 2.4-2.8's transaction profile; the comments say
where a choice was made. Parameters are named p_* so they never shadow a
column.
"""

from __future__ import annotations

NEW_ORDER = """
CREATE OR REPLACE FUNCTION tpcc_new_order(p_w_id int, p_d_id int, p_c_id int, p_ol_cnt int,
    p_item_ids int[], p_supply_w_ids int[], p_quantities int[]) RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    v_w_tax numeric; v_d_tax numeric; v_o_id int; v_discount numeric;
    v_all_local int; v_total numeric := 0; v_price numeric; v_dist char(24);
    v_qty int; v_supply int; v_item int;
BEGIN
    SELECT w_tax INTO v_w_tax FROM warehouse WHERE w_id = p_w_id;
    UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = p_w_id AND d_id = p_d_id
        RETURNING d_tax, d_next_o_id - 1 INTO v_d_tax, v_o_id;
    SELECT c_discount INTO v_discount FROM customer
        WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_id = p_c_id;
    v_all_local := CASE WHEN p_supply_w_ids <@ ARRAY[p_w_id] THEN 1 ELSE 0 END;
    INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, o_all_local)
        VALUES (v_o_id, p_d_id, p_w_id, p_c_id, now(), NULL, p_ol_cnt, v_all_local);
    INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES (v_o_id, p_d_id, p_w_id);
    FOR i IN 1..p_ol_cnt LOOP
        v_item := p_item_ids[i];
        v_qty := p_quantities[i];
        v_supply := p_supply_w_ids[i];
        SELECT i_price INTO v_price FROM item WHERE i_id = v_item;
        IF NOT FOUND THEN
            -- clause 2.4.2.3: the unused item of the 1% rolls the whole order back
            RAISE EXCEPTION 'Item number is not valid';
        END IF;
        UPDATE stock SET
            s_quantity = CASE WHEN s_quantity >= v_qty + 10 THEN s_quantity - v_qty
                              ELSE s_quantity - v_qty + 91 END,
            s_ytd = s_ytd + v_qty,
            s_order_cnt = s_order_cnt + 1,
            s_remote_cnt = s_remote_cnt + CASE WHEN v_supply <> p_w_id THEN 1 ELSE 0 END
        WHERE s_i_id = v_item AND s_w_id = v_supply
        RETURNING CASE p_d_id WHEN 1 THEN s_dist_01 WHEN 2 THEN s_dist_02 WHEN 3 THEN s_dist_03
            WHEN 4 THEN s_dist_04 WHEN 5 THEN s_dist_05 WHEN 6 THEN s_dist_06 WHEN 7 THEN s_dist_07
            WHEN 8 THEN s_dist_08 WHEN 9 THEN s_dist_09 ELSE s_dist_10 END INTO v_dist;
        INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id,
                                ol_delivery_d, ol_quantity, ol_amount, ol_dist_info)
            VALUES (v_o_id, p_d_id, p_w_id, i, v_item, v_supply, NULL, v_qty, v_qty * v_price, v_dist);
        v_total := v_total + v_qty * v_price;
    END LOOP;
    RETURN round(v_total * (1 - v_discount) * (1 + v_w_tax + v_d_tax), 2);
END $$"""

# Clause 2.5.2.2 / 2.6.2.2: by last name, the customer at position ceil(n/2)
# of those with that name in the district, sorted by first name.
_BY_NAME = """
        SELECT count(*) INTO v_n FROM customer
            WHERE c_w_id = {w} AND c_d_id = {d} AND c_last = p_c_last;
        IF v_n = 0 THEN
            RAISE EXCEPTION 'No customer named % in warehouse % district %', p_c_last, {w}, {d};
        END IF;
        SELECT c_id INTO v_c_id FROM customer
            WHERE c_w_id = {w} AND c_d_id = {d} AND c_last = p_c_last
            ORDER BY c_first OFFSET (v_n + 1) / 2 - 1 LIMIT 1;"""

PAYMENT = """
CREATE OR REPLACE FUNCTION tpcc_payment(p_w_id int, p_d_id int, p_c_w_id int, p_c_d_id int, p_c_id int,
    p_c_last text, p_h_amount numeric) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_w_name text; v_d_name text; v_c_id int; v_n int;
BEGIN
    UPDATE warehouse SET w_ytd = w_ytd + p_h_amount WHERE w_id = p_w_id RETURNING w_name INTO v_w_name;
    UPDATE district SET d_ytd = d_ytd + p_h_amount WHERE d_w_id = p_w_id AND d_id = p_d_id
        RETURNING d_name INTO v_d_name;
    IF p_c_id = 0 THEN""" + _BY_NAME.format(w="p_c_w_id", d="p_c_d_id") + """
    ELSE
        v_c_id := p_c_id;
    END IF;
    -- clause 2.5.2.2: a bad-credit customer's C_DATA gets the payment prepended, kept to 500 characters
    UPDATE customer SET
        c_balance = c_balance - p_h_amount,
        c_ytd_payment = c_ytd_payment + p_h_amount,
        c_payment_cnt = c_payment_cnt + 1,
        c_data = CASE WHEN c_credit = 'BC' THEN left(concat_ws(' ', v_c_id, p_c_d_id, p_c_w_id, p_d_id, p_w_id,
                      p_h_amount) || ' ' || c_data, 500) ELSE c_data END
    WHERE c_w_id = p_c_w_id AND c_d_id = p_c_d_id AND c_id = v_c_id;
    INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, h_data)
        VALUES (v_c_id, p_c_d_id, p_c_w_id, p_d_id, p_w_id, now(), p_h_amount,
                left(v_w_name || '    ' || v_d_name, 24));
    RETURN v_c_id;
END $$"""

ORDER_STATUS = """
CREATE OR REPLACE FUNCTION tpcc_order_status(p_w_id int, p_d_id int, p_c_id int, p_c_last text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_c_id int; v_n int; v_balance numeric; v_o_id int; v_lines int; v_amount numeric;
BEGIN
    IF p_c_id = 0 THEN""" + _BY_NAME.format(w="p_w_id", d="p_d_id") + """
    ELSE
        v_c_id := p_c_id;
    END IF;
    SELECT c_balance INTO v_balance FROM customer WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_id = v_c_id;
    SELECT o_id INTO v_o_id FROM orders
        WHERE o_w_id = p_w_id AND o_d_id = p_d_id AND o_c_id = v_c_id ORDER BY o_id DESC LIMIT 1;
    -- every line of that order is read (sum over a heap column, not an index-only count)
    SELECT count(*), sum(ol_amount) INTO v_lines, v_amount FROM order_line
        WHERE ol_w_id = p_w_id AND ol_d_id = p_d_id AND ol_o_id = v_o_id;
    RETURN v_lines;
END $$"""

DELIVERY = """
CREATE OR REPLACE FUNCTION tpcc_delivery(p_w_id int, p_carrier_id int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_o_id int; v_c_id int; v_total numeric; v_done int := 0;
BEGIN
    FOR d IN 1..10 LOOP
        -- the district's oldest undelivered order; when a concurrent Delivery
        -- took it first (read committed), the next one
        LOOP
            SELECT min(no_o_id) INTO v_o_id FROM new_order WHERE no_w_id = p_w_id AND no_d_id = d;
            EXIT WHEN v_o_id IS NULL;
            DELETE FROM new_order WHERE no_w_id = p_w_id AND no_d_id = d AND no_o_id = v_o_id;
            EXIT WHEN FOUND;
        END LOOP;
        CONTINUE WHEN v_o_id IS NULL;  -- clause 2.7.4.2: no outstanding order, skip the district
        UPDATE orders SET o_carrier_id = p_carrier_id
            WHERE o_w_id = p_w_id AND o_d_id = d AND o_id = v_o_id RETURNING o_c_id INTO v_c_id;
        UPDATE order_line SET ol_delivery_d = now()
            WHERE ol_w_id = p_w_id AND ol_d_id = d AND ol_o_id = v_o_id;
        SELECT sum(ol_amount) INTO v_total FROM order_line
            WHERE ol_w_id = p_w_id AND ol_d_id = d AND ol_o_id = v_o_id;
        UPDATE customer SET c_balance = c_balance + v_total, c_delivery_cnt = c_delivery_cnt + 1
            WHERE c_w_id = p_w_id AND c_d_id = d AND c_id = v_c_id;
        v_done := v_done + 1;
    END LOOP;
    RETURN v_done;
END $$"""

STOCK_LEVEL = """
CREATE OR REPLACE FUNCTION tpcc_stock_level(p_w_id int, p_d_id int, p_threshold int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_next int; v_n int;
BEGIN
    SELECT d_next_o_id INTO v_next FROM district WHERE d_w_id = p_w_id AND d_id = p_d_id;
    SELECT count(DISTINCT s_i_id) INTO v_n
        FROM order_line JOIN stock ON s_w_id = p_w_id AND s_i_id = ol_i_id
        WHERE ol_w_id = p_w_id AND ol_d_id = p_d_id AND ol_o_id >= v_next - 20 AND ol_o_id < v_next
          AND s_quantity < p_threshold;
    RETURN v_n;
END $$"""

FUNCTIONS = {
    "tpcc_new_order": NEW_ORDER,
    "tpcc_payment": PAYMENT,
    "tpcc_order_status": ORDER_STATUS,
    "tpcc_delivery": DELIVERY,
    "tpcc_stock_level": STOCK_LEVEL,
}


def install(conn: object) -> None:
    """CREATE OR REPLACE the five functions on a psycopg connection."""
    for sql in FUNCTIONS.values():
        conn.execute(sql)  # type: ignore[attr-defined]
