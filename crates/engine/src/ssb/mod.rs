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

use std::io::Write;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Builder, Int64Builder, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;

use crate::bulk::{pgbinary, BatchIter, CopyChunks, CopyTable, GeneratedTable, BATCH_ROWS};
use crate::random::Prng;

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

/// TPC-H's 25 nations (clause 4.2.3) and their region numbers.
const NATIONS: [(&str, usize); 25] = [
    ("ALGERIA", 0),
    ("ARGENTINA", 1),
    ("BRAZIL", 1),
    ("CANADA", 1),
    ("EGYPT", 4),
    ("ETHIOPIA", 0),
    ("FRANCE", 3),
    ("GERMANY", 3),
    ("INDIA", 2),
    ("INDONESIA", 2),
    ("IRAN", 4),
    ("IRAQ", 4),
    ("JAPAN", 2),
    ("JORDAN", 4),
    ("KENYA", 0),
    ("MOROCCO", 0),
    ("MOZAMBIQUE", 0),
    ("PERU", 1),
    ("CHINA", 2),
    ("ROMANIA", 3),
    ("SAUDI ARABIA", 4),
    ("VIETNAM", 2),
    ("RUSSIA", 3),
    ("UNITED KINGDOM", 3),
    ("UNITED STATES", 1),
];
const REGIONS: [&str; 5] = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"];
const SEGMENTS: [&str; 5] = [
    "AUTOMOBILE",
    "BUILDING",
    "FURNITURE",
    "MACHINERY",
    "HOUSEHOLD",
];
const PRIORITIES: [&str; 5] = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECI", "5-LOW"];
const SHIP_MODES: [&str; 7] = ["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"];
const TYPE_S1: [&str; 6] = ["STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"];
const TYPE_S2: [&str; 5] = ["ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"];
const TYPE_S3: [&str; 5] = ["TIN", "NICKEL", "BRASS", "STEEL", "COPPER"];
const CONTAINER_S1: [&str; 5] = ["SM", "LG", "MED", "JUMBO", "WRAP"];
const CONTAINER_S2: [&str; 8] = ["CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"];
/// TPC-H clause 4.2.3's 92 colour words (P_NAME).
const COLORS: [&str; 92] = [
    "almond",
    "antique",
    "aquamarine",
    "azure",
    "beige",
    "bisque",
    "black",
    "blanched",
    "blue",
    "blush",
    "brown",
    "burlywood",
    "burnished",
    "chartreuse",
    "chiffon",
    "chocolate",
    "coral",
    "cornflower",
    "cornsilk",
    "cream",
    "cyan",
    "dark",
    "deep",
    "dim",
    "dodger",
    "drab",
    "firebrick",
    "floral",
    "forest",
    "frosted",
    "gainsboro",
    "ghost",
    "goldenrod",
    "green",
    "grey",
    "honeydew",
    "hot",
    "indian",
    "ivory",
    "khaki",
    "lace",
    "lavender",
    "lawn",
    "lemon",
    "light",
    "lime",
    "linen",
    "magenta",
    "maroon",
    "medium",
    "metallic",
    "midnight",
    "mint",
    "misty",
    "moccasin",
    "navajo",
    "navy",
    "olive",
    "orange",
    "orchid",
    "pale",
    "papaya",
    "peach",
    "peru",
    "pink",
    "plum",
    "powder",
    "puff",
    "purple",
    "red",
    "rose",
    "rosy",
    "royal",
    "saddle",
    "salmon",
    "sandy",
    "seashell",
    "sienna",
    "sky",
    "slate",
    "smoke",
    "snow",
    "spring",
    "steel",
    "tan",
    "thistle",
    "tomato",
    "turquoise",
    "violet",
    "wheat",
    "white",
    "yellow",
];
/// TPC-H's v-string alphabet (clause 4.2.2.7), for addresses.
const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ,";
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
/// Day names from Sunday (d_daynuminweek 1).
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
/// (month, day) of the holidays flagged in d_holidayfl (US federal holidays
/// on fixed dates).
const HOLIDAYS: [(u32, u32); 4] = [(1, 1), (7, 4), (11, 11), (12, 25)];

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

/// Where a generated row goes: COPY text or Arrow builders.
trait RowSink {
    fn int(&mut self, v: i64);
    fn text(&mut self, v: &str);
    fn end_row(&mut self);
}

struct CopySink<E, F: FnMut(Vec<u8>) -> Result<(), E>> {
    out: CopyChunks<E, F>,
    first: bool,
}

impl<E, F: FnMut(Vec<u8>) -> Result<(), E>> CopySink<E, F> {
    fn sep(&mut self) {
        if !self.first {
            self.out.buf.push(b'|');
        }
        self.first = false;
    }
}

impl<E, F: FnMut(Vec<u8>) -> Result<(), E>> RowSink for CopySink<E, F> {
    fn int(&mut self, v: i64) {
        self.sep();
        write!(self.out.buf, "{v}").expect("writing to a Vec cannot fail");
    }
    fn text(&mut self, v: &str) {
        self.sep();
        self.out.buf.extend_from_slice(v.as_bytes());
    }
    fn end_row(&mut self) {
        self.out.buf.push(b'\n');
        self.first = true;
    }
}

/// Binary COPY rows: each field in the binary form of its column's kind.
struct BinarySink<E, F: FnMut(Vec<u8>) -> Result<(), E>> {
    out: CopyChunks<E, F>,
    kinds: &'static [(&'static str, Kind)],
    at: usize,
}

impl<E, F: FnMut(Vec<u8>) -> Result<(), E>> BinarySink<E, F> {
    fn field(&mut self) -> Kind {
        if self.at == 0 {
            pgbinary::row(&mut self.out.buf, self.kinds.len() as i16);
        }
        self.at += 1;
        self.kinds[self.at - 1].1
    }
}

impl<E, F: FnMut(Vec<u8>) -> Result<(), E>> RowSink for BinarySink<E, F> {
    fn int(&mut self, v: i64) {
        match self.field() {
            Int => pgbinary::int4_of(&mut self.out.buf, v),
            BigInt => pgbinary::int8(&mut self.out.buf, v),
            Text => panic!("column {} is text", self.at - 1),
        }
    }
    fn text(&mut self, v: &str) {
        match self.field() {
            Text => pgbinary::text(&mut self.out.buf, v),
            _ => panic!("column {} is not text", self.at - 1),
        }
    }
    fn end_row(&mut self) {
        debug_assert_eq!(self.at, self.kinds.len());
        self.at = 0;
    }
}

enum Column {
    Int(Int32Builder),
    BigInt(Int64Builder),
    Text(StringBuilder),
}

struct ArrowSink {
    columns: Vec<Column>,
    at: usize,
    rows: usize,
}

impl ArrowSink {
    fn new(table: Table) -> ArrowSink {
        let columns = table
            .columns()
            .iter()
            .map(|(_, kind)| match kind {
                Int => Column::Int(Int32Builder::with_capacity(BATCH_ROWS)),
                BigInt => Column::BigInt(Int64Builder::with_capacity(BATCH_ROWS)),
                Text => Column::Text(StringBuilder::new()),
            })
            .collect();
        ArrowSink {
            columns,
            at: 0,
            rows: 0,
        }
    }

    fn finish(&mut self, schema: SchemaRef) -> Result<RecordBatch, ArrowError> {
        let arrays: Vec<ArrayRef> = self
            .columns
            .iter_mut()
            .map(|c| -> ArrayRef {
                match c {
                    Column::Int(b) => Arc::new(b.finish()),
                    Column::BigInt(b) => Arc::new(b.finish()),
                    Column::Text(b) => Arc::new(b.finish()),
                }
            })
            .collect();
        self.rows = 0;
        RecordBatch::try_new(schema, arrays)
    }
}

impl RowSink for ArrowSink {
    fn int(&mut self, v: i64) {
        match &mut self.columns[self.at] {
            Column::Int(b) => b.append_value(v as i32),
            Column::BigInt(b) => b.append_value(v),
            Column::Text(_) => panic!("column {} is text", self.at),
        }
        self.at += 1;
    }
    fn text(&mut self, v: &str) {
        match &mut self.columns[self.at] {
            Column::Text(b) => b.append_value(v),
            _ => panic!("column {} is not text", self.at),
        }
        self.at += 1;
    }
    fn end_row(&mut self) {
        debug_assert_eq!(self.at, self.columns.len());
        self.at = 0;
        self.rows += 1;
    }
}

// ------------------------------------------------------------------ calendar

/// Days since 1970-01-01 of a civil date (proleptic Gregorian; the
/// era-based method of H. Hinnant, "chrono-compatible low-level date
/// algorithms").
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month, day) of days since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn month_days(y: i64, m: u32) -> u32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn first_day() -> i64 {
    days_from_civil(1992, 1, 1)
}

/// The DATE key (yyyymmdd) of day `offset` after 1992-01-01.
fn date_key(offset: i64) -> i64 {
    let (y, m, d) = civil_from_days(first_day() + offset);
    y * 10_000 + m as i64 * 100 + d as i64
}

fn selling_season(m: u32, d: u32) -> &'static str {
    match (m, d) {
        (12, _) => "Christmas",
        (1..=2, _) => "Winter",
        (3..=5, _) => "Spring",
        (6..=8, _) => "Summer",
        (11, 24..) => "Christmas",
        _ => "Fall",
    }
}

// ------------------------------------------------------------------ rows

fn rng_for(table: Table, unit: u64) -> Prng {
    Prng::seeded((table.seed() << 56) ^ unit.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

fn pick<'a>(rng: &mut Prng, items: &[&'a str]) -> &'a str {
    items[rng.uniform_i64(0, items.len() as i64 - 1) as usize]
}

/// TPC-H's retail price of part `key`, in cents (clause 4.2.3).
pub fn retail_price_cents(key: i64) -> i64 {
    90_000 + ((key / 10) % 20_001) + 100 * (key % 1_000)
}

fn address(rng: &mut Prng, out: &mut String) {
    out.clear();
    let len = rng.uniform_i64(10, 25);
    for _ in 0..len {
        out.push(ALPHABET[rng.uniform_i64(0, ALPHABET.len() as i64 - 1) as usize] as char);
    }
}

fn city(nation: &str, digit: i64) -> String {
    format!("{:<9.9}{digit}", nation)
}

fn phone(rng: &mut Prng, nation: usize) -> String {
    format!(
        "{}-{}-{}-{}",
        nation + 10,
        rng.uniform_i64(100, 999),
        rng.uniform_i64(100, 999),
        rng.uniform_i64(1000, 9999)
    )
}

/// Customer or supplier: the columns they share after key and name.
fn place(rng: &mut Prng, sink: &mut impl RowSink, scratch: &mut String) -> usize {
    address(rng, scratch);
    sink.text(scratch);
    let nation = rng.uniform_i64(0, 24) as usize;
    let (nation_name, region) = NATIONS[nation];
    sink.text(&city(nation_name, rng.uniform_i64(0, 9)));
    sink.text(nation_name);
    sink.text(REGIONS[region]);
    nation
}

struct Line {
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
fn unit_rows(
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
mod tests {
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
}
