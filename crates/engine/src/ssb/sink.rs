//! Where a generated row goes: COPY text, binary COPY, or Arrow builders.

use std::io::Write;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Builder, Int64Builder, RecordBatch, StringBuilder};
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;

use super::Kind::{BigInt, Int, Text};
use super::{Kind, Table};
use crate::bulk::{pgbinary, CopyChunks, BATCH_ROWS};

/// Where a generated row goes: COPY text or Arrow builders.
pub(super) trait RowSink {
    fn int(&mut self, v: i64);
    fn text(&mut self, v: &str);
    fn end_row(&mut self);
}

pub(super) struct CopySink<E, F: FnMut(Vec<u8>) -> Result<(), E>> {
    pub(super) out: CopyChunks<E, F>,
    pub(super) first: bool,
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
pub(super) struct BinarySink<E, F: FnMut(Vec<u8>) -> Result<(), E>> {
    pub(super) out: CopyChunks<E, F>,
    pub(super) kinds: &'static [(&'static str, Kind)],
    pub(super) at: usize,
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

pub(super) struct ArrowSink {
    columns: Vec<Column>,
    at: usize,
    pub(super) rows: usize,
}

impl ArrowSink {
    pub(super) fn new(table: Table) -> ArrowSink {
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

    pub(super) fn finish(&mut self, schema: SchemaRef) -> Result<RecordBatch, ArrowError> {
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
