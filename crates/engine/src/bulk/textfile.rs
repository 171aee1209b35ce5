//! A part of a generated table as text rows into a file or a pipe: what
//! MySQL's and MariaDB's LOAD DATA LOCAL INFILE reads. The rows are those
//! `CopyTable::write_copy_rows` writes for PostgreSQL's COPY text: one row a
//! line, the fields split by '|', `\N` for NULL, backslash escapes; LOAD
//! DATA reads them with `FIELDS TERMINATED BY '|'` and its default escape.
//!
//! The caller opens the reading end (a FIFO, or `/dev/fd/N` of a pipe) and
//! hands it to the server while the rows are written: no table is ever whole
//! in memory or on disk.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::CopyTable;
use crate::error::EngineError;

/// Bytes per write: the pipe's reader takes them while the next are made.
pub const CHUNK_BYTES: usize = 256 * 1024;

/// Write part `part` of `parts` of `table` at `scale` as text rows to
/// `path` (opened for writing, never created or truncated: a pipe, a FIFO
/// or a file that exists), stopped between chunks once `abort` is set
/// (`Interrupted`). The rows written. A reader that goes away (EPIPE) is a
/// `Target` error that names the table and part.
pub fn write_text_part<T: CopyTable>(
    path: &Path,
    table: T,
    scale: f64,
    part: i32,
    parts: i32,
    abort: &AtomicBool,
) -> Result<u64, EngineError> {
    let name = table.name();
    if part < 1 || part > parts {
        return Err(EngineError::Config(format!(
            "part {part} of {parts}: parts are numbered 1..={parts}"
        )));
    }
    let mut out = OpenOptions::new().write(true).open(path).map_err(|e| {
        EngineError::Target(format!(
            "{name} part {part}: cannot open {}: {e}",
            path.display()
        ))
    })?;
    let rows = table.write_copy_rows(scale, part, parts, CHUNK_BYTES, |chunk| {
        if abort.load(Ordering::Relaxed) {
            return Err(EngineError::Interrupted);
        }
        out.write_all(&chunk)
            .map_err(|e| EngineError::Target(format!("{name} part {part}: writing rows: {e}")))
    })?;
    out.flush()
        .map_err(|e| EngineError::Target(format!("{name} part {part}: writing rows: {e}")))?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpch::Table;

    #[test]
    fn the_parts_of_a_table_write_the_copy_text_rows() {
        let dir = std::env::temp_dir().join(format!("perflab-textfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nation.txt");
        std::fs::write(&path, b"").unwrap();
        let abort = AtomicBool::new(false);
        let rows = write_text_part(&path, Table::Nation, 0.01, 1, 1, &abort).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut expected = Vec::new();
        Table::Nation
            .write_copy_rows(0.01, 1, 1, 1 << 20, |chunk| {
                expected.extend_from_slice(&chunk);
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!(rows, 25);
        assert_eq!(text.as_bytes(), expected.as_slice());
        assert_eq!(text.lines().count(), 25);
        assert!(text.starts_with("0|ALGERIA|0|"));
        // never creates a file
        let missing = dir.join("missing.txt");
        assert!(matches!(
            write_text_part(&missing, Table::Nation, 0.01, 1, 1, &abort),
            Err(EngineError::Target(_))
        ));
        assert!(!missing.exists());
        // stopped between chunks
        abort.store(true, Ordering::SeqCst);
        assert_eq!(
            write_text_part(&path, Table::LineItem, 0.01, 1, 1, &abort),
            Err(EngineError::Interrupted)
        );
        assert!(matches!(
            write_text_part(&path, Table::Nation, 0.01, 2, 1, &abort),
            Err(EngineError::Config(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
