use super::rows::city;
use super::*;
use crate::bulk::arrow_stream::ParallelTableReader;

fn copy_text(table: Table, sf: f64, parts: i32) -> (u64, String) {
    let mut out = Vec::new();
    let mut rows = 0;
    for part in 1..=parts {
        rows += table
            .write_copy_rows::<()>(sf, part, parts, 1000, |chunk| {
                out.extend_from_slice(&chunk);
                Ok(())
            })
            .unwrap();
    }
    (rows, String::from_utf8(out).unwrap())
}

#[test]
fn row_counts_follow_the_scaling_rules() {
    assert_eq!(Table::Customer.units(1.0), 30_000);
    assert_eq!(Table::Supplier.units(10.0), 20_000);
    assert_eq!(Table::Part.units(1.0), 200_000);
    assert_eq!(Table::Part.units(10.0), 800_000); // floor(1 + log2 10) = 4
    assert_eq!(Table::Part.units(0.01), 2_000);
    assert_eq!(Table::Date.units(7.0), 2_556);
    let (rows, _) = copy_text(Table::LineOrder, 0.01, 1);
    // 15,000 orders of 1..7 lines: 60,000 expected, within a few sigma
    assert!((59_000..61_000).contains(&rows), "{rows}");
}

/// Binary rows decode to the text rows, for every table.
#[test]
fn binary_rows_are_the_text_rows() {
    use crate::bulk::pgbinary::decode::{self, Kind as Bin};
    for table in Table::ALL {
        let (text_count, text) = copy_text(table, 0.01, 3);
        let kinds: Vec<Bin> = table
            .columns()
            .iter()
            .map(|(_, k)| match k {
                Int => Bin::Int4,
                BigInt => Bin::Int8,
                Text => Bin::Text,
            })
            .collect();
        let mut binary_rows = Vec::new();
        let mut count = 0;
        for part in 1..=3 {
            let mut stream = Vec::new();
            count += table
                .write_copy_binary::<()>(0.01, part, 3, 1000, |chunk| {
                    stream.extend_from_slice(&chunk);
                    Ok(())
                })
                .unwrap();
            binary_rows.extend(decode::rows(&stream, &kinds));
        }
        let text_rows: Vec<Vec<String>> = text
            .lines()
            .map(|l| l.split('|').map(String::from).collect())
            .collect();
        assert_eq!(count, text_count, "{table:?}");
        assert_eq!(binary_rows, text_rows, "{table:?}");
    }
}

#[test]
fn parts_together_equal_the_whole_table() {
    for table in Table::ALL {
        let (one_rows, one) = copy_text(table, 0.01, 1);
        let (many_rows, many) = copy_text(table, 0.01, 7);
        assert_eq!(one_rows, many_rows, "{table:?}");
        assert_eq!(one, many, "{table:?}");
        let columns = table.columns().len();
        for line in one.lines() {
            assert_eq!(line.split('|').count(), columns, "{table:?}: {line}");
        }
    }
}

#[test]
fn date_dimension_is_the_calendar() {
    let (rows, text) = copy_text(Table::Date, 1.0, 1);
    assert_eq!(rows, 2_556);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "19920101|January 1, 1992|Wednesday|January|1992|199201|Jan1992|4|1|1|1|1|Winter|0|0|1|1"
    );
    assert!(lines[59].starts_with("19920229|")); // 1992 is a leap year
    assert!(lines[2555].starts_with("19981230|"));
    let dec_1997 = lines
        .iter()
        .filter(|l| l.split('|').nth(6) == Some("Dec1997"))
        .count();
    assert_eq!(dec_1997, 31);
}

#[test]
fn lineorder_columns_obey_the_formulas() {
    let (_, text) = copy_text(Table::LineOrder, 0.01, 1);
    let mut orders = std::collections::HashMap::<i64, (i64, i64)>::new();
    for line in text.lines() {
        let f: Vec<i64> = line
            .split('|')
            .map(|v| v.parse::<i64>().unwrap_or(-1))
            .collect();
        let (orderkey, custkey, partkey, suppkey) = (f[0], f[2], f[3], f[4]);
        let (quantity, extended, total, discount) = (f[8], f[9], f[10], f[11]);
        let (revenue, supplycost, tax) = (f[12], f[13], f[14]);
        assert_ne!(custkey % 3, 0);
        assert!((1..=2_000).contains(&partkey) && (1..=20).contains(&suppkey));
        assert!((1..=50).contains(&quantity) && (0..=10).contains(&discount));
        assert!((0..=8).contains(&tax));
        let price = retail_price_cents(partkey);
        assert_eq!(extended, quantity * price);
        assert_eq!(revenue, extended * (100 - discount) / 100);
        assert_eq!(supplycost, 6 * price / 10);
        assert!(f[5] >= 19_920_101 && f[15] > f[5] && f[15] <= 19_981_230);
        let entry = orders.entry(orderkey).or_insert((total, 0));
        assert_eq!(entry.0, total);
        entry.1 += extended * (100 + tax) * (100 - discount) / 10_000;
    }
    for (key, (total, sum)) in orders {
        assert_eq!(total, sum, "order {key}");
    }
}

#[test]
fn arrow_batches_hold_the_copy_rows() {
    for table in Table::ALL {
        let rows: usize = ParallelTableReader::new(table, 0.01, 3)
            .map(|b| b.unwrap().num_rows())
            .sum();
        assert_eq!(rows as u64, copy_text(table, 0.01, 1).0, "{table:?}");
    }
}

#[test]
fn cities_are_nine_characters_and_a_digit() {
    assert_eq!(city("UNITED KINGDOM", 1), "UNITED KI1");
    assert_eq!(city("PERU", 5), "PERU     5");
}
