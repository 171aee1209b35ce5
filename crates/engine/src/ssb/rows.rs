//! The generator: every row of a unit (an order and its lines, a customer,
//! a part, a day), each unit from its own seeded generator.

use super::calendar::{date_key, first_day, month_days, selling_season};
use super::sink::RowSink;
use super::words::{
    ALPHABET, COLORS, CONTAINER_S1, CONTAINER_S2, DAYS, HOLIDAYS, MONTHS, NATIONS, PRIORITIES,
    REGIONS, SEGMENTS, SHIP_MODES, TYPE_S1, TYPE_S2, TYPE_S3,
};
use super::{Table, ORDER_DATE_SPAN};
use crate::random::Prng;
use crate::units::{civil_from_days, days_from_civil};

pub(super) fn rng_for(table: Table, unit: u64) -> Prng {
    Prng::seeded((table.seed() << 56) ^ unit.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

pub(super) fn pick<'a>(rng: &mut Prng, items: &[&'a str]) -> &'a str {
    items[rng.uniform_i64(0, items.len() as i64 - 1) as usize]
}

/// TPC-H's retail price of part `key`, in cents (clause 4.2.3).
pub fn retail_price_cents(key: i64) -> i64 {
    90_000 + ((key / 10) % 20_001) + 100 * (key % 1_000)
}

pub(super) fn address(rng: &mut Prng, out: &mut String) {
    out.clear();
    let len = rng.uniform_i64(10, 25);
    for _ in 0..len {
        out.push(ALPHABET[rng.uniform_i64(0, ALPHABET.len() as i64 - 1) as usize] as char);
    }
}

pub(super) fn city(nation: &str, digit: i64) -> String {
    format!("{:<9.9}{digit}", nation)
}

pub(super) fn phone(rng: &mut Prng, nation: usize) -> String {
    format!(
        "{}-{}-{}-{}",
        nation + 10,
        rng.uniform_i64(100, 999),
        rng.uniform_i64(100, 999),
        rng.uniform_i64(1000, 9999)
    )
}

/// Customer or supplier: the columns they share after key and name.
pub(super) fn place(rng: &mut Prng, sink: &mut impl RowSink, scratch: &mut String) -> usize {
    address(rng, scratch);
    sink.text(scratch);
    let nation = rng.uniform_i64(0, 24) as usize;
    let (nation_name, region) = NATIONS[nation];
    sink.text(&city(nation_name, rng.uniform_i64(0, 9)));
    sink.text(nation_name);
    sink.text(REGIONS[region]);
    nation
}

pub(super) struct Line {
    partkey: i64,
    suppkey: i64,
    quantity: i64,
    extendedprice: i64,
    discount: i64,
    tax: i64,
    supplycost: i64,
    commit: i64,
    shipmode: &'static str,
}

/// Generate unit `unit` (0-based) of `table`; the rows written.
pub(super) fn unit_rows(
    table: Table,
    sf: f64,
    unit: u64,
    sink: &mut impl RowSink,
    scratch: &mut String,
) -> u64 {
    let mut rng = rng_for(table, unit);
    let key = unit as i64 + 1;
    match table {
        Table::Date => {
            let offset = unit as i64;
            let (y, m, d) = civil_from_days(first_day() + offset);
            let weekday = (first_day() + offset + 4).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
            let day_of_year = first_day() + offset - days_from_civil(y, 1, 1) + 1;
            sink.int(date_key(offset));
            sink.text(&format!("{} {d}, {y}", MONTHS[m as usize - 1]));
            sink.text(DAYS[weekday]);
            sink.text(MONTHS[m as usize - 1]);
            sink.int(y);
            sink.int(y * 100 + m as i64);
            sink.text(&format!("{}{y}", &MONTHS[m as usize - 1][..3]));
            sink.int(weekday as i64 + 1);
            sink.int(d as i64);
            sink.int(day_of_year);
            sink.int(m as i64);
            sink.int((day_of_year - 1) / 7 + 1);
            sink.text(selling_season(m, d));
            sink.int((weekday == 6) as i64);
            sink.int((d == month_days(y, m)) as i64);
            sink.int(HOLIDAYS.contains(&(m, d)) as i64);
            sink.int((1..=5).contains(&weekday) as i64);
            sink.end_row();
            1
        }
        Table::Customer => {
            sink.int(key);
            sink.text(&format!("Customer#{key:09}"));
            let nation = place(&mut rng, sink, scratch);
            sink.text(&phone(&mut rng, nation));
            sink.text(pick(&mut rng, &SEGMENTS));
            sink.end_row();
            1
        }
        Table::Supplier => {
            sink.int(key);
            sink.text(&format!("Supplier#{key:09}"));
            let nation = place(&mut rng, sink, scratch);
            sink.text(&phone(&mut rng, nation));
            sink.end_row();
            1
        }
        Table::Part => {
            sink.int(key);
            let first = rng.uniform_i64(0, COLORS.len() as i64 - 1);
            let second =
                (first + rng.uniform_i64(1, COLORS.len() as i64 - 1)) % COLORS.len() as i64;
            sink.text(&format!(
                "{} {}",
                COLORS[first as usize], COLORS[second as usize]
            ));
            let m = rng.uniform_i64(1, 5);
            let n = rng.uniform_i64(1, 5);
            let brand = rng.uniform_i64(1, 40);
            sink.text(&format!("MFGR#{m}"));
            sink.text(&format!("MFGR#{m}{n}"));
            sink.text(&format!("MFGR#{m}{n}{brand}"));
            sink.text(pick(&mut rng, &COLORS));
            sink.text(&format!(
                "{} {} {}",
                pick(&mut rng, &TYPE_S1),
                pick(&mut rng, &TYPE_S2),
                pick(&mut rng, &TYPE_S3)
            ));
            sink.int(rng.uniform_i64(1, 50));
            sink.text(&format!(
                "{} {}",
                pick(&mut rng, &CONTAINER_S1),
                pick(&mut rng, &CONTAINER_S2)
            ));
            sink.end_row();
            1
        }
        Table::LineOrder => {
            let customers = Table::Customer.units(sf) as i64;
            let parts = Table::Part.units(sf) as i64;
            let suppliers = Table::Supplier.units(sf) as i64;
            let custkey = loop {
                let c = rng.uniform_i64(1, customers);
                if c % 3 != 0 || customers < 3 {
                    break c;
                }
            };
            let order_day = rng.uniform_i64(0, ORDER_DATE_SPAN);
            let priority = pick(&mut rng, &PRIORITIES);
            let count = rng.uniform_i64(1, 7) as usize;
            let mut lines: [Option<Line>; 7] = Default::default();
            let mut total: i64 = 0;
            for slot in lines.iter_mut().take(count) {
                let partkey = rng.uniform_i64(1, parts);
                let i = rng.uniform_i64(0, 3);
                // TPC-H clause 4.2.3, PS_SUPPKEY: the part's i-th of four suppliers.
                let suppkey =
                    (partkey + i * (suppliers / 4 + (partkey - 1) / suppliers)) % suppliers + 1;
                let quantity = rng.uniform_i64(1, 50);
                let price = retail_price_cents(partkey);
                let extendedprice = quantity * price;
                let discount = rng.uniform_i64(0, 10);
                let tax = rng.uniform_i64(0, 8);
                total += extendedprice * (100 + tax) * (100 - discount) / 10_000;
                *slot = Some(Line {
                    partkey,
                    suppkey,
                    quantity,
                    extendedprice,
                    discount,
                    tax,
                    supplycost: 6 * price / 10,
                    commit: order_day + rng.uniform_i64(30, 90),
                    shipmode: pick(&mut rng, &SHIP_MODES),
                });
            }
            let orderdate = date_key(order_day);
            for (n, line) in lines.iter().take(count).enumerate() {
                let line = line.as_ref().expect("drawn above");
                sink.int(key);
                sink.int(n as i64 + 1);
                sink.int(custkey);
                sink.int(line.partkey);
                sink.int(line.suppkey);
                sink.int(orderdate);
                sink.text(priority);
                sink.text("0");
                sink.int(line.quantity);
                sink.int(line.extendedprice);
                sink.int(total);
                sink.int(line.discount);
                sink.int(line.extendedprice * (100 - line.discount) / 100);
                sink.int(line.supplycost);
                sink.int(line.tax);
                sink.int(date_key(line.commit));
                sink.text(line.shipmode);
                sink.end_row();
            }
            count as u64
        }
    }
}
