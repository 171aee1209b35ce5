//! Bulk loading of generated data sets, whatever generates them. A table
//! that can write a part of itself as COPY rows, in text or in PostgreSQL's
//! binary format (`pgbinary`), is a `CopyTable`, and the one parallel loader
//! (`pgcopy`) streams any set of them into PostgreSQL. A `GeneratedTable` can
//! also give its parts as Arrow record batches, which `arrow_stream` hands
//! to DuckDB.
//! The same text rows go to a file or a pipe (`textfile`), which MySQL's
//! LOAD DATA LOCAL INFILE reads.
//! TPC-H (`crate::tpch`) and the Star Schema Benchmark (`crate::ssb`) are
//! both; TPC-C's initial database (`crate::tpcc::load`) is a `CopyTable`.

pub mod arrow_stream;
pub mod pgbinary;
pub mod pgcopy;
pub mod textfile;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;

/// A part's record batches, generated lazily.
pub type BatchIter = Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send>;

/// Rows a part should hold at most, so that big tables split into enough parts
/// to keep every loader busy while small tables stay one part.
pub const TARGET_ROWS_PER_PART: f64 = 250_000.0;

/// Rows per record batch: large enough that per-batch overhead is small,
/// small enough that batches in flight stay a few MB.
pub const BATCH_ROWS: usize = 64 * 1024;

/// One table of a generated data set, as the parallel loader (`pgcopy`)
/// sees it. `scale` is the data set's size: the scale factor of TPC-H and
/// SSB, the number of warehouses of TPC-C. Parts are numbered 1..=parts; the
/// parts of a table together are the whole table, whatever `parts` is.
pub trait CopyTable: Copy + Send + Sync + 'static {
    /// The data set's name, for messages ("TPC-H", "SSB", "TPC-C").
    fn dataset(self) -> &'static str;
    /// The table's SQL name.
    fn name(self) -> &'static str;
    /// Rows at `scale` (expected, where the count is random).
    fn approx_rows(self, scale: f64) -> f64;
    /// How many parts to split the table into at `scale` (at least 1):
    /// `TARGET_ROWS_PER_PART` rows each.
    fn default_parts(self, scale: f64) -> i32 {
        parts_for_rows(self.approx_rows(scale))
    }
    /// The work of one part relative to other tables' parts, to start the
    /// biggest first: its rows, unless a table's rows differ much in width.
    fn part_work(self, scale: f64, parts: i32) -> f64 {
        self.approx_rows(scale) / parts as f64
    }
    /// The COPY statement its rows are written for.
    fn copy_statement(self, format: CopyFormat) -> String {
        let name = self.name();
        match format {
            CopyFormat::Text => format!("COPY {name} FROM STDIN (FORMAT text, DELIMITER '|')"),
            CopyFormat::Binary => format!("COPY {name} FROM STDIN (FORMAT binary)"),
        }
    }
    /// Write part `part` of `parts` as COPY text rows (one row per line, the
    /// fields split by the delimiter `copy_statement` names), calling `emit`
    /// with chunks of about `chunk_bytes`; the rows written.
    fn write_copy_rows<E>(
        self,
        scale: f64,
        part: i32,
        parts: i32,
        chunk_bytes: usize,
        emit: impl FnMut(Vec<u8>) -> Result<(), E>,
    ) -> Result<u64, E>;
    /// The same rows as a binary COPY stream (`pgbinary`, header to
    /// trailer), each field in the binary form of its column's type in the
    /// data set's DDL; the rows written.
    fn write_copy_binary<E>(
        self,
        scale: f64,
        part: i32,
        parts: i32,
        chunk_bytes: usize,
        emit: impl FnMut(Vec<u8>) -> Result<(), E>,
    ) -> Result<u64, E>;
}

/// A `CopyTable` that can also give its parts as Arrow record batches.
pub trait GeneratedTable: CopyTable {
    /// The Arrow schema of the table's batches.
    fn arrow_schema(self) -> SchemaRef;
    /// Part `part` of `parts` as record batches of at most `BATCH_ROWS` rows.
    fn part_batches(self, sf: f64, part: i32, parts: i32) -> BatchIter;
}

/// How generated rows travel to PostgreSQL: COPY's text format, or its
/// binary one, which costs both sides less for numbers and dates
/// (benchmarks/copy_format.py; its figures are in benchmarks/README.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CopyFormat {
    Text,
    #[default]
    Binary,
}

impl std::str::FromStr for CopyFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(CopyFormat::Text),
            "binary" => Ok(CopyFormat::Binary),
            other => Err(format!(
                "COPY format {other:?} is not one of \"binary\", \"text\""
            )),
        }
    }
}

/// Parts for a table of about `rows` rows: `TARGET_ROWS_PER_PART` each, at least 1.
pub fn parts_for_rows(rows: f64) -> i32 {
    ((rows / TARGET_ROWS_PER_PART).ceil() as i32).max(1)
}

/// One part of a table, as a loader takes it: part `part` of `parts`.
#[derive(Debug, Clone, Copy)]
pub struct Part<T> {
    pub table: T,
    pub part: i32,
    pub parts: i32,
}

/// Every part of `tables` at `scale`, the biggest first, so that the tail
/// of a parallel load is short.
pub fn parts_biggest_first<T: CopyTable>(tables: &[T], scale: f64) -> Vec<Part<T>> {
    let mut parts: Vec<Part<T>> = tables
        .iter()
        .flat_map(|&table| {
            let parts = table.default_parts(scale);
            (1..=parts).map(move |part| Part { table, part, parts })
        })
        .collect();
    parts.sort_by(|a, b| {
        let work = |p: &Part<T>| p.table.part_work(scale, p.parts);
        work(b).total_cmp(&work(a))
    });
    parts
}

/// COPY text gathered in chunks of about `chunk_bytes`: rows are written into
/// `buf`, and after each row a full chunk goes to `emit`.
pub struct CopyChunks<E, F: FnMut(Vec<u8>) -> Result<(), E>> {
    pub buf: Vec<u8>,
    chunk_bytes: usize,
    emit: F,
}

impl<E, F: FnMut(Vec<u8>) -> Result<(), E>> CopyChunks<E, F> {
    pub fn new(chunk_bytes: usize, emit: F) -> Self {
        CopyChunks {
            buf: Vec::with_capacity(chunk_bytes + 4096),
            chunk_bytes,
            emit,
        }
    }

    /// Chunks of a binary COPY stream: the first starts with its header.
    pub fn new_binary(chunk_bytes: usize, emit: F) -> Self {
        let mut chunks = Self::new(chunk_bytes, emit);
        chunks.buf.extend_from_slice(pgbinary::HEADER);
        chunks
    }

    /// Call after each row: hands a full chunk over.
    #[inline]
    pub fn row_done(&mut self) -> Result<(), E> {
        if self.buf.len() >= self.chunk_bytes {
            let full =
                std::mem::replace(&mut self.buf, Vec::with_capacity(self.chunk_bytes + 4096));
            (self.emit)(full)?;
        }
        Ok(())
    }

    /// Ends a binary COPY stream with its trailer and hands the rest over.
    pub fn finish_binary(mut self) -> Result<(), E> {
        self.buf.extend_from_slice(pgbinary::TRAILER);
        self.finish()
    }

    /// Hands the last, partial chunk over.
    pub fn finish(mut self) -> Result<(), E> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let last = std::mem::take(&mut self.buf);
        (self.emit)(last)
    }
}
