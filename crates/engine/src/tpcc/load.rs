//! The TPC-C initial database (clause 4.3.3.1), generated straight into COPY
//! buffers, text or binary, and streamed into existing, empty tables by the
//! engine's one parallel loader (`crate::bulk::pgcopy`). The schema, keys and
//! indexes are the Python side's (keys and indexes after the load).
//!
//! Each table is a `CopyTable` whose scale is the number of warehouses. The
//! per-warehouse tables are split one warehouse per part; item, warehouse
//! and district are one part each. Every warehouse of every table draws from
//! its own stream, seeded by (seed, table, warehouse), so the data depends
//! neither on the number of connections nor on the split. Orders and
//! order_line must agree on each order's customer and line count: both
//! derive them from a third stream, the warehouse's order plan.
//!
//! The text rows ('|' between fields, `\N` for NULL) are also what MySQL's
//! LOAD DATA reads: `crate::bulk::textfile` writes a part of a `Table` into
//! a pipe for it.

use super::gen::{
    nurand, timestamp_text, write_alnum, write_astring, write_data_original, write_last_name,
    write_nstring, write_zip,
};
use super::{
    CUSTOMERS_PER_DISTRICT, DISTRICTS_PER_WAREHOUSE, ITEMS, NEW_ORDERS_FROM, ORDERS_PER_DISTRICT,
};
use crate::bulk::pgbinary::{self, int4_of, numeric_fixed, text_with, timestamp_unix};
use crate::bulk::{pgcopy, CopyChunks, CopyFormat, CopyTable};
use crate::error::EngineError;
use crate::pg::{write_fixed, write_i64};
use crate::random::Prng;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// The nine tables in the order their rows are reported.
pub const TABLES: [&str; 9] = [
    "warehouse",
    "district",
    "customer",
    "history",
    "new_order",
    "orders",
    "order_line",
    "item",
    "stock",
];

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub conninfo: String,
    pub warehouses: u32,
    /// Parallel connections.
    pub jobs: u32,
    pub seed: u64,
    /// C of NURand(255, 0, 999) for customer last names at load (clause 2.1.6).
    pub c_last_load: i64,
    pub format: CopyFormat,
}

#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// (step, seconds) in the order they ran.
    pub steps: Vec<(String, f64)>,
    /// (table, rows loaded), as the server counted them.
    pub rows: Vec<(String, i64)>,
}

/// The tables, in `TABLES` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Warehouse,
    District,
    Customer,
    History,
    NewOrder,
    Orders,
    OrderLine,
    Item,
    Stock,
}

pub const KINDS: [Kind; 9] = [
    Kind::Warehouse,
    Kind::District,
    Kind::Customer,
    Kind::History,
    Kind::NewOrder,
    Kind::Orders,
    Kind::OrderLine,
    Kind::Item,
    Kind::Stock,
];

/// Items are drawn in blocks of this many, each block from its own stream, so
/// that item's rows do not depend on how it is split.
const ITEM_BLOCK: i64 = 10_000;

impl Kind {
    fn index(self) -> usize {
        KINDS
            .iter()
            .position(|&k| k == self)
            .expect("every kind is listed")
    }

    /// The columns, in the order the rows carry them (schema.py's order).
    fn columns(self) -> &'static str {
        match self {
            Kind::Warehouse => {
                "w_id, w_name, w_street_1, w_street_2, w_city, w_state, w_zip, w_tax, w_ytd"
            }
            Kind::District => {
                "d_id, d_w_id, d_name, d_street_1, d_street_2, d_city, d_state, d_zip, \
                 d_tax, d_ytd, d_next_o_id"
            }
            Kind::Customer => {
                "c_id, c_d_id, c_w_id, c_first, c_middle, c_last, c_street_1, c_street_2, \
                 c_city, c_state, c_zip, c_phone, c_since, c_credit, c_credit_lim, c_discount, \
                 c_balance, c_ytd_payment, c_payment_cnt, c_delivery_cnt, c_data"
            }
            Kind::History => "h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, h_data",
            Kind::NewOrder => "no_o_id, no_d_id, no_w_id",
            Kind::Orders => {
                "o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, o_all_local"
            }
            Kind::OrderLine => {
                "ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id, ol_delivery_d, \
                 ol_quantity, ol_amount, ol_dist_info"
            }
            Kind::Item => "i_id, i_im_id, i_name, i_price, i_data",
            Kind::Stock => {
                "s_i_id, s_w_id, s_quantity, s_dist_01, s_dist_02, s_dist_03, s_dist_04, \
                 s_dist_05, s_dist_06, s_dist_07, s_dist_08, s_dist_09, s_dist_10, s_ytd, \
                 s_order_cnt, s_remote_cnt, s_data"
            }
        }
    }

    /// Rows per warehouse (item: in all); order_line's is its mean.
    fn rows_per_warehouse(self) -> f64 {
        let districts = DISTRICTS_PER_WAREHOUSE as f64;
        match self {
            Kind::Warehouse => 1.0,
            Kind::District => districts,
            Kind::Customer | Kind::History => districts * CUSTOMERS_PER_DISTRICT as f64,
            Kind::Orders => districts * ORDERS_PER_DISTRICT as f64,
            Kind::NewOrder => districts * (ORDERS_PER_DISTRICT - NEW_ORDERS_FROM + 1) as f64,
            Kind::OrderLine => districts * ORDERS_PER_DISTRICT as f64 * 10.0,
            Kind::Item | Kind::Stock => ITEMS as f64,
        }
    }

    /// About how many bytes of COPY text a row takes: the tables' rows
    /// differ tenfold in width (customer against new_order).
    fn row_bytes(self) -> f64 {
        match self {
            Kind::Warehouse | Kind::District => 100.0,
            Kind::Customer => 680.0,
            Kind::History => 60.0,
            Kind::NewOrder => 15.0,
            Kind::Orders => 45.0,
            Kind::OrderLine => 70.0,
            Kind::Item => 80.0,
            Kind::Stock => 320.0,
        }
    }
}

/// One TPC-C table of one load: its kind and the load's seed, C_LAST
/// constant and timestamp (seconds since 1970, UTC).
#[derive(Debug, Clone, Copy)]
pub struct Table {
    pub kind: Kind,
    pub seed: u64,
    pub c_last_load: i64,
    pub now: i64,
}

impl Table {
    /// Table `name` of the load with this seed, C_LAST constant and time.
    pub fn named(name: &str, seed: u64, c_last_load: i64, now: i64) -> Option<Table> {
        let index = TABLES.iter().position(|&t| t == name)?;
        Some(Table {
            kind: KINDS[index],
            seed,
            c_last_load,
            now,
        })
    }
}

/// The stream of table `code` for warehouse (or item block) `w`.
fn stream(seed: u64, code: u64, w: i64) -> Prng {
    Prng::seeded(seed ^ ((code << 40) | w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The order plan's stream code: not a table's.
const PLAN: u64 = 100;

/// Warehouses `scale` as a count (the loader passes it as f64).
fn warehouses_of(scale: f64) -> i64 {
    scale as i64
}

/// The range of `n` units (warehouses, item blocks) that part `part` of
/// `parts` covers, 1-based: the parts together cover 1..=n.
fn units_of_part(n: i64, part: i32, parts: i32) -> std::ops::RangeInclusive<i64> {
    let (part, parts) = (part as i64, parts as i64);
    ((part - 1) * n / parts + 1)..=(part * n / parts)
}

impl CopyTable for Table {
    fn dataset(self) -> &'static str {
        "TPC-C"
    }

    fn name(self) -> &'static str {
        TABLES[self.kind.index()]
    }

    fn approx_rows(self, scale: f64) -> f64 {
        match self.kind {
            Kind::Item => ITEMS as f64,
            kind => kind.rows_per_warehouse() * warehouses_of(scale) as f64,
        }
    }

    /// One warehouse per part; the three small tables in one.
    fn default_parts(self, scale: f64) -> i32 {
        match self.kind {
            Kind::Item | Kind::Warehouse | Kind::District => 1,
            _ => warehouses_of(scale).clamp(1, i32::MAX as i64) as i32,
        }
    }

    fn part_work(self, scale: f64, parts: i32) -> f64 {
        self.approx_rows(scale) * self.kind.row_bytes() / parts as f64
    }

    fn copy_statement(self, format: CopyFormat) -> String {
        let (name, columns) = (self.name(), self.kind.columns());
        match format {
            CopyFormat::Text => {
                format!("COPY {name} ({columns}) FROM STDIN (FORMAT text, DELIMITER '|')")
            }
            CopyFormat::Binary => format!("COPY {name} ({columns}) FROM STDIN (FORMAT binary)"),
        }
    }

    fn write_copy_rows<E>(
        self,
        scale: f64,
        part: i32,
        parts: i32,
        chunk_bytes: usize,
        emit: impl FnMut(Vec<u8>) -> Result<(), E>,
    ) -> Result<u64, E> {
        let mut sink = TextFields {
            out: CopyChunks::new(chunk_bytes, emit),
            now: timestamp_text(self.now).into_bytes(),
        };
        let rows = write_part(self, warehouses_of(scale), part, parts, &mut sink)?;
        sink.out.finish()?;
        Ok(rows)
    }

    fn write_copy_binary<E>(
        self,
        scale: f64,
        part: i32,
        parts: i32,
        chunk_bytes: usize,
        emit: impl FnMut(Vec<u8>) -> Result<(), E>,
    ) -> Result<u64, E> {
        let mut sink = BinaryFields {
            out: CopyChunks::new_binary(chunk_bytes, emit),
            now: self.now,
        };
        let rows = write_part(self, warehouses_of(scale), part, parts, &mut sink)?;
        sink.out.finish_binary()?;
        Ok(rows)
    }
}

/// Where a row's fields go: COPY text or COPY binary. The generators below
/// write each row once, for both.
trait Fields {
    type Error;
    /// Start a row of `fields` fields.
    fn begin(&mut self, fields: i16);
    /// An integer column.
    fn int(&mut self, v: i64);
    /// A numeric(p, `scale`) column, in units of 10^-scale.
    fn fixed(&mut self, units: i64, scale: u32);
    /// A char or varchar column that `write` appends (ASCII without '|',
    /// backslashes or newlines: the generators' alphabets).
    fn string(&mut self, write: impl FnOnce(&mut Vec<u8>));
    /// A timestamp column holding the load's time.
    fn now(&mut self);
    fn null(&mut self);
    /// End the row: a full chunk goes out.
    fn end(&mut self) -> Result<(), Self::Error>;

    fn literal(&mut self, s: &[u8]) {
        self.string(|out| out.extend_from_slice(s));
    }
}

struct TextFields<E, F: FnMut(Vec<u8>) -> Result<(), E>> {
    out: CopyChunks<E, F>,
    now: Vec<u8>,
}

impl<E, F: FnMut(Vec<u8>) -> Result<(), E>> Fields for TextFields<E, F> {
    type Error = E;
    #[inline]
    fn begin(&mut self, _fields: i16) {}
    #[inline]
    fn int(&mut self, v: i64) {
        write_i64(&mut self.out.buf, v);
        self.out.buf.push(b'|');
    }
    #[inline]
    fn fixed(&mut self, units: i64, scale: u32) {
        write_fixed(&mut self.out.buf, units, scale);
        self.out.buf.push(b'|');
    }
    #[inline]
    fn string(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        write(&mut self.out.buf);
        self.out.buf.push(b'|');
    }
    #[inline]
    fn now(&mut self) {
        self.out.buf.extend_from_slice(&self.now);
        self.out.buf.push(b'|');
    }
    #[inline]
    fn null(&mut self) {
        self.out.buf.extend_from_slice(b"\\N|");
    }
    #[inline]
    fn end(&mut self) -> Result<(), E> {
        // Every field ended with a '|'; the row's last one ends the line.
        *self.out.buf.last_mut().expect("a row has fields") = b'\n';
        self.out.row_done()
    }
}

struct BinaryFields<E, F: FnMut(Vec<u8>) -> Result<(), E>> {
    out: CopyChunks<E, F>,
    now: i64,
}

impl<E, F: FnMut(Vec<u8>) -> Result<(), E>> Fields for BinaryFields<E, F> {
    type Error = E;
    #[inline]
    fn begin(&mut self, fields: i16) {
        pgbinary::row(&mut self.out.buf, fields);
    }
    #[inline]
    fn int(&mut self, v: i64) {
        int4_of(&mut self.out.buf, v);
    }
    #[inline]
    fn fixed(&mut self, units: i64, scale: u32) {
        numeric_fixed(&mut self.out.buf, units, scale);
    }
    #[inline]
    fn string(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        text_with(&mut self.out.buf, write);
    }
    #[inline]
    fn now(&mut self) {
        timestamp_unix(&mut self.out.buf, self.now);
    }
    #[inline]
    fn null(&mut self) {
        pgbinary::null(&mut self.out.buf);
    }
    #[inline]
    fn end(&mut self) -> Result<(), E> {
        self.out.row_done()
    }
}

/// Street 1, street 2, city, state and zip (clause 4.3.2.7).
#[inline]
fn address<S: Fields>(s: &mut S, rng: &mut Prng) {
    s.string(|o| write_astring(o, rng, 10, 20));
    s.string(|o| write_astring(o, rng, 10, 20));
    s.string(|o| write_astring(o, rng, 10, 20));
    s.string(|o| write_alnum(o, rng, 2));
    s.string(|o| write_zip(o, rng));
}

/// A warehouse's order plan: per order (district-major), its customer (each
/// district's o_c_id a random permutation of its customers) and its line
/// count; orders and order_line both follow it.
fn order_plan(seed: u64, w: i64) -> (Vec<u16>, Vec<u8>) {
    let mut rng = stream(seed, PLAN, w);
    let n = (DISTRICTS_PER_WAREHOUSE * ORDERS_PER_DISTRICT) as usize;
    let mut customer_of = Vec::with_capacity(n);
    let mut lines_of = Vec::with_capacity(n);
    for _ in 0..DISTRICTS_PER_WAREHOUSE {
        let start = customer_of.len();
        customer_of.extend(1..=ORDERS_PER_DISTRICT as u16);
        let perm = &mut customer_of[start..];
        for i in (1..perm.len()).rev() {
            let j = rng.uniform_i64(0, i as i64) as usize;
            perm.swap(i, j);
        }
        for _ in 0..ORDERS_PER_DISTRICT {
            lines_of.push(rng.uniform_i64(5, 15) as u8);
        }
    }
    (customer_of, lines_of)
}

/// Write part `part` of `parts` of `t`'s table at `warehouses`; the rows.
fn write_part<S: Fields>(
    t: Table,
    warehouses: i64,
    part: i32,
    parts: i32,
    s: &mut S,
) -> Result<u64, S::Error> {
    let code = t.kind.index() as u64 + 1;
    let mut rows = 0u64;
    if t.kind == Kind::Item {
        for block in units_of_part(ITEMS / ITEM_BLOCK, part, parts) {
            let mut rng = stream(t.seed, code, block);
            for i in (block - 1) * ITEM_BLOCK + 1..=block * ITEM_BLOCK {
                s.begin(5);
                s.int(i);
                s.int(rng.uniform_i64(1, 10_000));
                s.string(|o| write_astring(o, &mut rng, 14, 24));
                s.fixed(rng.uniform_i64(100, 10_000), 2);
                s.string(|o| write_data_original(o, &mut rng));
                s.end()?;
                rows += 1;
            }
        }
        return Ok(rows);
    }
    for w in units_of_part(warehouses, part, parts) {
        let mut rng = stream(t.seed, code, w);
        let rng = &mut rng;
        let districts = 1..=DISTRICTS_PER_WAREHOUSE;
        match t.kind {
            Kind::Item => unreachable!("item is written above"),
            Kind::Warehouse => {
                s.begin(9);
                s.int(w);
                s.string(|o| write_astring(o, rng, 6, 10));
                address(s, rng);
                s.fixed(rng.uniform_i64(0, 2000), 4);
                s.fixed(30_000_000, 2);
                s.end()?;
                rows += 1;
            }
            Kind::District => {
                for d in districts {
                    s.begin(11);
                    s.int(d);
                    s.int(w);
                    s.string(|o| write_astring(o, rng, 6, 10));
                    address(s, rng);
                    s.fixed(rng.uniform_i64(0, 2000), 4);
                    s.fixed(3_000_000, 2);
                    s.int(ORDERS_PER_DISTRICT + 1);
                    s.end()?;
                    rows += 1;
                }
            }
            Kind::Stock => {
                for i in 1..=ITEMS {
                    s.begin(17);
                    s.int(i);
                    s.int(w);
                    s.int(rng.uniform_i64(10, 100));
                    for _ in 0..10 {
                        s.string(|o| write_alnum(o, rng, 24));
                    }
                    s.int(0);
                    s.int(0);
                    s.int(0);
                    s.string(|o| write_data_original(o, rng));
                    s.end()?;
                    rows += 1;
                }
            }
            Kind::Customer => {
                for d in districts {
                    for c in 1..=CUSTOMERS_PER_DISTRICT {
                        s.begin(21);
                        s.int(c);
                        s.int(d);
                        s.int(w);
                        s.string(|o| write_astring(o, rng, 8, 16));
                        s.literal(b"OE");
                        let last = if c <= 1000 {
                            c - 1
                        } else {
                            nurand(rng, 255, 0, 999, t.c_last_load)
                        };
                        s.string(|o| write_last_name(o, last));
                        address(s, rng);
                        s.string(|o| write_nstring(o, rng, 16));
                        s.now();
                        // 10% bad credit (clause 4.3.3.1)
                        s.literal(if rng.uniform_i64(1, 10) == 1 {
                            b"BC"
                        } else {
                            b"GC"
                        });
                        s.fixed(5_000_000, 2);
                        s.fixed(rng.uniform_i64(0, 5000), 4);
                        s.fixed(-1000, 2);
                        s.fixed(1000, 2);
                        s.int(1);
                        s.int(0);
                        s.string(|o| write_astring(o, rng, 300, 500));
                        s.end()?;
                        rows += 1;
                    }
                }
            }
            Kind::History => {
                for d in districts {
                    for c in 1..=CUSTOMERS_PER_DISTRICT {
                        s.begin(8);
                        s.int(c);
                        s.int(d);
                        s.int(w);
                        s.int(d);
                        s.int(w);
                        s.now();
                        s.fixed(1000, 2);
                        s.string(|o| write_astring(o, rng, 12, 24));
                        s.end()?;
                        rows += 1;
                    }
                }
            }
            Kind::Orders => {
                let (customer_of, lines_of) = order_plan(t.seed, w);
                let mut at = 0;
                for d in districts {
                    for o in 1..=ORDERS_PER_DISTRICT {
                        s.begin(8);
                        s.int(o);
                        s.int(d);
                        s.int(w);
                        s.int(customer_of[at] as i64);
                        s.now();
                        if o < NEW_ORDERS_FROM {
                            s.int(rng.uniform_i64(1, 10));
                        } else {
                            s.null();
                        }
                        s.int(lines_of[at] as i64);
                        s.int(1);
                        s.end()?;
                        rows += 1;
                        at += 1;
                    }
                }
            }
            Kind::NewOrder => {
                for d in districts {
                    for o in NEW_ORDERS_FROM..=ORDERS_PER_DISTRICT {
                        s.begin(3);
                        s.int(o);
                        s.int(d);
                        s.int(w);
                        s.end()?;
                        rows += 1;
                    }
                }
            }
            Kind::OrderLine => {
                let (_, lines_of) = order_plan(t.seed, w);
                let mut at = 0;
                for d in districts {
                    for o in 1..=ORDERS_PER_DISTRICT {
                        for l in 1..=lines_of[at] as i64 {
                            s.begin(10);
                            s.int(o);
                            s.int(d);
                            s.int(w);
                            s.int(l);
                            s.int(rng.uniform_i64(1, ITEMS));
                            s.int(w);
                            if o < NEW_ORDERS_FROM {
                                s.now();
                                s.int(5);
                                s.fixed(0, 2);
                            } else {
                                s.null();
                                s.int(5);
                                s.fixed(rng.uniform_i64(1, 999_999), 2);
                            }
                            s.string(|o| write_alnum(o, rng, 24));
                            s.end()?;
                            rows += 1;
                        }
                        at += 1;
                    }
                }
            }
        }
    }
    Ok(rows)
}

/// Load the data set into the existing empty tables. `on_step` hears
/// "generate_and_copy" as it starts. Stops between chunks once `abort` is
/// set.
pub fn load(
    cfg: &LoadConfig,
    abort: &AtomicBool,
    mut on_step: impl FnMut(&str),
) -> Result<LoadReport, EngineError> {
    if cfg.warehouses == 0 {
        return Err(EngineError::Config("warehouses must be at least 1".into()));
    }
    if cfg.jobs == 0 {
        return Err(EngineError::Config("jobs must be at least 1".into()));
    }
    if !(0..=255).contains(&cfg.c_last_load) {
        return Err(EngineError::Config(format!(
            "c_last {} is out of range; allowed: 0..255",
            cfg.c_last_load
        )));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let tables: Vec<Table> = KINDS
        .iter()
        .map(|&kind| Table {
            kind,
            seed: cfg.seed,
            c_last_load: cfg.c_last_load,
            now,
        })
        .collect();
    on_step("generate_and_copy");
    let started = Instant::now();
    let loads = pgcopy::load_postgres(
        &cfg.conninfo,
        cfg.warehouses as f64,
        &tables,
        cfg.jobs as usize,
        cfg.format,
        abort,
    )?;
    Ok(LoadReport {
        steps: vec![("generate_and_copy".into(), started.elapsed().as_secs_f64())],
        rows: TABLES
            .iter()
            .map(|&t| {
                let rows = loads.iter().find(|l| l.table == t).map_or(0, |l| l.rows);
                (t.to_string(), rows as i64)
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests;
