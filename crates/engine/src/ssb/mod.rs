//! The Star Schema Benchmark's data: LINEORDER and its four dimensions
//! (CUSTOMER, SUPPLIER, PART, DATE), generated here from the published rules
//! and written as PostgreSQL COPY rows (binary or text) or Arrow record
//! batches through `crate::bulk`, as TPC-H's tables are.
//!
//! Rules, from P. O'Neil, E. O'Neil, X. Chen, S. Revilak, "The Star Schema
//! Benchmark and Augmented Fact Table Indexing" (TPCTC 2009) and the SSB
//! specification, Revision 3 (2009), section 2 (schema) and 3 (scaling), which
//! derive every column from TPC-H's dbgen rules (TPC-H spec clause 4.2.3):
//!
//! - LINEORDER: 1,500,000×SF orders of 1..7 lines each (uniform), so about
//!   6,000,000×SF rows. Per order: customer uniform over the customers whose
//!   key is not a multiple of 3 (dbgen's rule that a third of the customers
//!   never order), order date uniform from 1992-01-01 to 151 days before
//!   1998-12-31, order priority one of five, ship priority "0". Per line: part
//!   uniform; supplier one of the part's four (TPC-H's PS_SUPPKEY formula);
//!   quantity 1..50; discount 0..10 (percent); tax 0..8 (percent);
//!   extendedprice = quantity×retailprice; revenue =
//!   extendedprice×(100−discount)/100; supplycost = 0.6×retailprice; commit
//!   date = order date + 30..90 days; ship mode one of seven; ordtotalprice =
//!   the order's sum of extendedprice×(1+tax)×(1−discount). Money is in cents
//!   as integers, as ssb-dbgen prints it.
//! - CUSTOMER 30,000×SF, SUPPLIER 2,000×SF: name "Customer#"/"Supplier#" and
//!   the key in 9 digits; address 10..25 random characters; nation uniform of
//!   TPC-H's 25 and its region; city = the nation's name cut or padded to 9
//!   characters and a digit 0..9; phone as TPC-H's (country code nation+10).
//! - PART 200,000×⌊1+log2 SF⌋ (SSB 3: the part table grows logarithmically);
//!   below SF 1, where the logarithm is negative, 200,000×SF, so small data
//!   sets stay small. MFGR#m (m 1..5), category MFGR#mn (n 1..5), brand
//!   MFGR#mn followed by 1..40; colour one of TPC-H's 92 colour words; name
//!   two of them; type and container from TPC-H's syllables; size 1..50;
//!   retailprice (TPC-H 4.2.3) = (90000 + ((key/10) mod 20001) + 100×(key mod
//!   1000))/100.
//! - DATE: 2,556 days from 1992-01-01 (the count ssb-dbgen produces: it ends
//!   on 1998-12-30), key yyyymmdd, with the calendar columns of SSB 2.
//!
//! Every unit (an order, a customer, ...) draws from its own generator seeded
//! by its table and number, so any split into parts gives the same rows. Keys
//! are dense (1..N); ssb-dbgen's sparse order keys change no query's answer.
//! Text values never hold '|' or '\\', so the COPY text needs no escaping.
//!
//! This file: the tables, their columns, and how they are loaded (COPY and
//! Arrow). The generator is apart: `rows.rs` (every row of a unit), with
//! `words.rs` (the rules' words), `calendar.rs` (the DATE dimension's dates)
//! and `sink.rs` (where a row goes: COPY text, binary COPY, Arrow).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;

use crate::bulk::{BatchIter, CopyChunks, CopyTable, GeneratedTable, BATCH_ROWS};

mod calendar;
mod rows;
mod sink;
mod words;

pub use rows::retail_price_cents;
use rows::unit_rows;
use sink::{ArrowSink, BinarySink, CopySink, RowSink};

/// The five SSB tables (SSB specification section 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    Date,
    Customer,
    Supplier,
    Part,
    LineOrder,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    BigInt,
    Text,
}

use Kind::{BigInt, Int, Text};

const DATE_COLUMNS: &[(&str, Kind)] = &[
    ("d_datekey", Int),
    ("d_date", Text),
    ("d_dayofweek", Text),
    ("d_month", Text),
    ("d_year", Int),
    ("d_yearmonthnum", Int),
    ("d_yearmonth", Text),
    ("d_daynuminweek", Int),
    ("d_daynuminmonth", Int),
    ("d_daynuminyear", Int),
    ("d_monthnuminyear", Int),
    ("d_weeknuminyear", Int),
    ("d_sellingseason", Text),
    ("d_lastdayinweekfl", Int),
    ("d_lastdayinmonthfl", Int),
    ("d_holidayfl", Int),
    ("d_weekdayfl", Int),
];
const CUSTOMER_COLUMNS: &[(&str, Kind)] = &[
    ("c_custkey", Int),
    ("c_name", Text),
    ("c_address", Text),
    ("c_city", Text),
    ("c_nation", Text),
    ("c_region", Text),
    ("c_phone", Text),
    ("c_mktsegment", Text),
];
const SUPPLIER_COLUMNS: &[(&str, Kind)] = &[
    ("s_suppkey", Int),
    ("s_name", Text),
    ("s_address", Text),
    ("s_city", Text),
    ("s_nation", Text),
    ("s_region", Text),
    ("s_phone", Text),
];
const PART_COLUMNS: &[(&str, Kind)] = &[
    ("p_partkey", Int),
    ("p_name", Text),
    ("p_mfgr", Text),
    ("p_category", Text),
    ("p_brand1", Text),
    ("p_color", Text),
    ("p_type", Text),
    ("p_size", Int),
    ("p_container", Text),
];
const LINEORDER_COLUMNS: &[(&str, Kind)] = &[
    ("lo_orderkey", BigInt),
    ("lo_linenumber", Int),
    ("lo_custkey", Int),
    ("lo_partkey", Int),
    ("lo_suppkey", Int),
    ("lo_orderdate", Int),
    ("lo_orderpriority", Text),
    ("lo_shippriority", Text),
    ("lo_quantity", Int),
    ("lo_extendedprice", Int),
    ("lo_ordtotalprice", Int),
    ("lo_discount", Int),
    ("lo_revenue", Int),
    ("lo_supplycost", Int),
    ("lo_tax", Int),
    ("lo_commitdate", Int),
    ("lo_shipmode", Text),
];

/// Days in the DATE dimension (see the module's notes).
pub const DATE_DAYS: u64 = 2556;
/// Days from the first order date to the last (TPC-H: ENDDATE − 151 days).
const ORDER_DATE_SPAN: i64 = 2557 - 1 - 151;

impl Table {
    pub const ALL: [Table; 5] = [
        Table::Date,
        Table::Customer,
        Table::Supplier,
        Table::Part,
        Table::LineOrder,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Table::Date => "date",
            Table::Customer => "customer",
            Table::Supplier => "supplier",
            Table::Part => "part",
            Table::LineOrder => "lineorder",
        }
    }

    pub fn from_name(name: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Column names and kinds, in the table's order.
    pub fn columns(self) -> &'static [(&'static str, Kind)] {
        match self {
            Table::Date => DATE_COLUMNS,
            Table::Customer => CUSTOMER_COLUMNS,
            Table::Supplier => SUPPLIER_COLUMNS,
            Table::Part => PART_COLUMNS,
            Table::LineOrder => LINEORDER_COLUMNS,
        }
    }

    /// Units generated at `sf`: rows, except LINEORDER's, which are orders.
    pub fn units(self, sf: f64) -> u64 {
        let scaled = |base: f64| ((base * sf).round() as u64).max(1);
        match self {
            Table::Date => DATE_DAYS,
            Table::Customer => scaled(30_000.0),
            Table::Supplier => scaled(2_000.0),
            Table::Part => {
                if sf >= 1.0 {
                    200_000 * (1.0 + sf.log2()).floor() as u64
                } else {
                    scaled(200_000.0)
                }
            }
            Table::LineOrder => scaled(1_500_000.0),
        }
    }

    fn seed(self) -> u64 {
        match self {
            Table::Date => 1,
            Table::Customer => 2,
            Table::Supplier => 3,
            Table::Part => 4,
            Table::LineOrder => 5,
        }
    }
}

/// The units of part `part` (1-based) of `parts`.
fn part_units(table: Table, sf: f64, part: i32, parts: i32) -> std::ops::Range<u64> {
    let n = table.units(sf);
    let (part, parts) = (part.max(1) as u64, parts.max(1) as u64);
    (n * (part - 1) / parts)..(n * part / parts)
}

struct PartBatches {
    table: Table,
    sf: f64,
    units: std::ops::Range<u64>,
    schema: SchemaRef,
    scratch: String,
}

impl Iterator for PartBatches {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.units.is_empty() {
            return None;
        }
        let mut sink = ArrowSink::new(self.table);
        // a LINEORDER unit is at most 7 rows: stop before a batch overflows
        while sink.rows + 7 <= BATCH_ROWS {
            let Some(unit) = self.units.next() else {
                break;
            };
            unit_rows(self.table, self.sf, unit, &mut sink, &mut self.scratch);
        }
        Some(sink.finish(self.schema.clone()))
    }
}

/// Every row of part `part` of `parts` into `sink`, calling `unit_done`
/// after each unit (where a COPY sink hands a full chunk over); the rows.
fn fill<S: RowSink, E>(
    table: Table,
    sf: f64,
    part: i32,
    parts: i32,
    sink: &mut S,
    mut unit_done: impl FnMut(&mut S) -> Result<(), E>,
) -> Result<u64, E> {
    let mut scratch = String::new();
    let mut rows = 0;
    for unit in part_units(table, sf, part, parts) {
        rows += unit_rows(table, sf, unit, sink, &mut scratch);
        unit_done(sink)?;
    }
    Ok(rows)
}

impl CopyTable for Table {
    fn dataset(self) -> &'static str {
        "SSB"
    }

    fn name(self) -> &'static str {
        Table::name(self)
    }

    fn approx_rows(self, sf: f64) -> f64 {
        let units = self.units(sf) as f64;
        if self == Table::LineOrder {
            units * 4.0
        } else {
            units
        }
    }

    fn write_copy_rows<E>(
        self,
        sf: f64,
        part: i32,
        parts: i32,
        chunk_bytes: usize,
        emit: impl FnMut(Vec<u8>) -> Result<(), E>,
    ) -> Result<u64, E> {
        let mut sink = CopySink {
            out: CopyChunks::new(chunk_bytes, emit),
            first: true,
        };
        let rows = fill(self, sf, part, parts, &mut sink, |s| s.out.row_done())?;
        sink.out.finish()?;
        Ok(rows)
    }

    fn write_copy_binary<E>(
        self,
        sf: f64,
        part: i32,
        parts: i32,
        chunk_bytes: usize,
        emit: impl FnMut(Vec<u8>) -> Result<(), E>,
    ) -> Result<u64, E> {
        let mut sink = BinarySink {
            out: CopyChunks::new_binary(chunk_bytes, emit),
            kinds: self.columns(),
            at: 0,
        };
        let rows = fill(self, sf, part, parts, &mut sink, |s| s.out.row_done())?;
        sink.out.finish_binary()?;
        Ok(rows)
    }
}

impl GeneratedTable for Table {
    fn arrow_schema(self) -> SchemaRef {
        let fields: Vec<Field> = self
            .columns()
            .iter()
            .map(|(name, kind)| {
                let t = match kind {
                    Int => DataType::Int32,
                    BigInt => DataType::Int64,
                    Text => DataType::Utf8,
                };
                Field::new(*name, t, false)
            })
            .collect();
        Arc::new(Schema::new(fields))
    }

    fn part_batches(self, sf: f64, part: i32, parts: i32) -> BatchIter {
        Box::new(PartBatches {
            table: self,
            sf,
            units: part_units(self, sf, part, parts),
            schema: self.arrow_schema(),
            scratch: String::new(),
        })
    }
}

#[cfg(test)]
mod tests;
