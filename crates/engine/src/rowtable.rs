//! The rows of one exchange, for both SQL clients (`pg::Rows`,
//! `mysql::Rows`): every value in one buffer, a cell per value, the first
//! cell of each row and the end of each statement's result, so that reading
//! an answer allocates nothing per value. Each client's cell says what it
//! needs beyond where its bytes are (MySQL's: the column's type and
//! protocol).

use std::ops::Range;

/// Where a cell's bytes are in the table's buffer: start, and length or -1
/// for NULL.
pub trait Span {
    fn span(&self) -> (u32, i32);
}

impl Span for (u32, i32) {
    fn span(&self) -> (u32, i32) {
        *self
    }
}

#[derive(Debug)]
pub struct RowTable<C> {
    data: Vec<u8>,
    cells: Vec<C>,
    /// First cell of each row.
    rows: Vec<u32>,
    /// End (in rows) of each result.
    results: Vec<u32>,
}

impl<C> Default for RowTable<C> {
    fn default() -> Self {
        RowTable {
            data: Vec::new(),
            cells: Vec::new(),
            rows: Vec::new(),
            results: Vec::new(),
        }
    }
}

impl<C: Span> RowTable<C> {
    pub fn clear(&mut self) {
        self.data.clear();
        self.cells.clear();
        self.rows.clear();
        self.results.clear();
    }

    /// A row starts: the cells pushed next are its values.
    pub fn begin_row(&mut self) {
        self.rows.push(self.cells.len() as u32);
    }

    /// The row's next value (None: NULL), its cell made from where its
    /// bytes went (start, length or -1).
    pub fn push(&mut self, value: Option<&[u8]>, cell: impl FnOnce(u32, i32) -> C) {
        let (start, len) = match value {
            Some(v) => {
                let start = self.data.len() as u32;
                self.data.extend_from_slice(v);
                (start, v.len() as i32)
            }
            None => (0, -1),
        };
        self.cells.push(cell(start, len));
    }

    /// A statement's result ends with the rows pushed so far.
    pub fn end_result(&mut self) {
        self.results.push(self.rows.len() as u32);
    }

    /// Results (statements) that completed.
    pub fn results(&self) -> usize {
        self.results.len()
    }

    /// Row numbers of result `result`'s rows (empty if it did not complete).
    pub fn result_rows(&self, result: usize) -> Range<usize> {
        let Some(&end) = self.results.get(result) else {
            return 0..0;
        };
        let start = if result == 0 {
            0
        } else {
            self.results[result - 1]
        };
        start as usize..end as usize
    }

    /// Value `col` of row `row`, its cell and bytes; None for NULL or no
    /// such value.
    pub fn value(&self, row: usize, col: usize) -> Option<(&C, &[u8])> {
        let first = *self.rows.get(row)? as usize;
        let end = self
            .rows
            .get(row + 1)
            .map_or(self.cells.len(), |&r| r as usize);
        if first + col >= end {
            return None;
        }
        let cell = &self.cells[first + col];
        let (start, len) = cell.span();
        (len >= 0).then(|| {
            (
                cell,
                &self.data[start as usize..start as usize + len as usize],
            )
        })
    }
}
