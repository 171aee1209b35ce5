//! The TPC-C loader's tests: its rows (text and binary COPY alike, whatever the split), cardinalities and seeds.

use super::*;
use crate::bulk::pgbinary::decode::{self, Kind as F};

fn table(kind: Kind) -> Table {
    Table {
        kind,
        seed: 7,
        c_last_load: 123,
        now: 1_700_000_000,
    }
}

fn text_rows(t: Table, warehouses: i64, part: i32, parts: i32) -> Vec<Vec<String>> {
    let mut bytes = Vec::new();
    let rows = t
        .write_copy_rows(warehouses as f64, part, parts, 1 << 16, |c| {
            bytes.extend_from_slice(&c);
            Ok::<(), ()>(())
        })
        .unwrap();
    let out: Vec<Vec<String>> = String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect();
    assert_eq!(out.len() as u64, rows);
    out
}

/// Each column's binary kind, from schema.py's DDL.
fn kinds(kind: Kind) -> Vec<F> {
    let (i, n, s, t) = (F::Int4, F::Numeric, F::Text, F::Timestamp);
    match kind {
        Kind::Warehouse => vec![i, s, s, s, s, s, s, n, n],
        Kind::District => vec![i, i, s, s, s, s, s, s, n, n, i],
        Kind::Customer => vec![
            i, i, i, s, s, s, s, s, s, s, s, s, t, s, n, n, n, n, i, i, s,
        ],
        Kind::History => vec![i, i, i, i, i, t, n, s],
        Kind::NewOrder => vec![i, i, i],
        Kind::Orders => vec![i, i, i, i, t, i, i, i],
        Kind::OrderLine => vec![i, i, i, i, i, i, t, i, n, s],
        Kind::Item => vec![i, i, s, n, s],
        Kind::Stock => {
            let mut k = vec![i, i, i];
            k.extend([s; 10]);
            k.extend([i, i, i, s]);
            k
        }
    }
}

#[test]
fn the_rows_do_not_depend_on_the_split() {
    for kind in KINDS {
        let t = table(kind);
        let whole = text_rows(t, 3, 1, 1);
        assert!(!whole.is_empty(), "{kind:?}");
        for parts in [2, 3, 4] {
            let split: Vec<_> = (1..=parts)
                .flat_map(|p| text_rows(t, 3, p, parts))
                .collect();
            assert!(split == whole, "{kind:?} split in {parts}");
        }
        let columns = kind.columns().split(',').count();
        assert!(whole.iter().all(|r| r.len() == columns), "{kind:?}");
    }
}

#[test]
fn binary_rows_are_the_text_rows() {
    for kind in KINDS {
        let t = table(kind);
        for (part, parts) in [(1, 1), (2, 2)] {
            let mut stream = Vec::new();
            let rows = t
                .write_copy_binary(2.0, part, parts, 1 << 16, |c| {
                    stream.extend_from_slice(&c);
                    Ok::<(), ()>(())
                })
                .unwrap();
            let binary = decode::rows(&stream, &kinds(kind));
            assert_eq!(binary.len() as u64, rows);
            assert!(binary == text_rows(t, 2, part, parts), "{kind:?}");
        }
    }
}

#[test]
fn cardinalities_and_the_order_plan_agree() {
    let count = |kind| text_rows(table(kind), 2, 1, 1).len();
    assert_eq!(count(Kind::Warehouse), 2);
    assert_eq!(count(Kind::District), 20);
    assert_eq!(count(Kind::Item), 100_000);
    assert_eq!(count(Kind::Stock), 200_000);
    assert_eq!(count(Kind::Customer), 60_000);
    assert_eq!(count(Kind::History), 60_000);
    assert_eq!(count(Kind::NewOrder), 18_000);
    let orders = text_rows(table(Kind::Orders), 2, 1, 1);
    let lines = text_rows(table(Kind::OrderLine), 2, 1, 1);
    let mut per_order = std::collections::HashMap::new();
    for l in &lines {
        *per_order.entry((&l[2], &l[1], &l[0])).or_insert(0) += 1;
        // undelivered lines (o_id >= 2101) have no delivery date
        let undelivered = l[0].parse::<i64>().unwrap() >= NEW_ORDERS_FROM;
        assert_eq!(l[6] == "\\N", undelivered);
    }
    assert_eq!(orders.len(), 60_000);
    for o in &orders {
        assert_eq!(
            per_order[&(&o[2], &o[1], &o[0])],
            o[6].parse::<i32>().unwrap()
        );
    }
    // each district's o_c_id is a permutation of its 3000 customers
    let mut customers: Vec<i64> = orders
        .iter()
        .filter(|o| o[1] == "4" && o[2] == "2")
        .map(|o| o[3].parse().unwrap())
        .collect();
    customers.sort_unstable();
    assert_eq!(customers, (1..=3000).collect::<Vec<_>>());
    // customers 1..=1000 of a district carry the 1000 names in order
    let customer = text_rows(table(Kind::Customer), 1, 1, 1);
    assert_eq!(customer[0][5], "BARBARBAR");
    assert_eq!(customer[999][5], "EINGEINGEING");
}

#[test]
fn another_seed_gives_other_rows_and_streams_differ() {
    let a = text_rows(table(Kind::Stock), 1, 1, 1);
    let other = Table {
        seed: 8,
        ..table(Kind::Stock)
    };
    assert_ne!(a, text_rows(other, 1, 1, 1));
    assert_ne!(stream(7, 1, 1).next_u64(), stream(7, 1, 2).next_u64());
    assert_ne!(stream(7, 1, 1).next_u64(), stream(7, 2, 1).next_u64());
}

#[test]
fn tables_are_found_by_name_and_write_their_text_rows_into_a_pipe_path() {
    for (name, kind) in TABLES.iter().zip(KINDS) {
        let t = Table::named(name, 7, 123, 1_700_000_000).unwrap();
        assert_eq!((t.kind, t.seed, t.c_last_load), (kind, 7, 123));
    }
    assert!(Table::named("orderline", 7, 123, 0).is_none());
    let path = std::env::temp_dir().join(format!("perflab-tpcc-text-{}", std::process::id()));
    std::fs::write(&path, b"").unwrap();
    let abort = std::sync::atomic::AtomicBool::new(false);
    let district = table(Kind::District);
    let rows = crate::bulk::textfile::write_text_part(&path, district, 2.0, 1, 1, &abort).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(rows, 20);
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(lines, text_rows(district, 2, 1, 1));
    assert!(lines.iter().all(|l| l.len() == 11 && l[10] == "3001"));
}
