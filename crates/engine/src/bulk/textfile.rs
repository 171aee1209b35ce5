//! A part of a generated table as text rows into a file or a pipe: what
//! MySQL's and MariaDB's LOAD DATA LOCAL INFILE reads. The rows are those
//! `CopyTable::write_copy_rows` writes for PostgreSQL's COPY text: one row a
//! line, the fields split by '|', `\N` for NULL, backslash escapes; LOAD
//! DATA reads them with `FIELDS TERMINATED BY '|'` and its default escape.
//!
//! The caller opens the reading end (a FIFO, or `/dev/fd/N` of a pipe) and
//! hands it to the server while the rows are written: no table is ever whole
//! in memory or on disk.

use std::fs::{File, OpenOptions};
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
    let mut out = open_part(path, name, part, parts)?;
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

/// `path` opened for writing (never created), once `part` of `parts` is
/// checked to be one of them.
fn open_part(path: &Path, name: &str, part: i32, parts: i32) -> Result<File, EngineError> {
    if part < 1 || part > parts {
        return Err(EngineError::Config(format!(
            "part {part} of {parts}: parts are numbered 1..={parts}"
        )));
    }
    OpenOptions::new().write(true).open(path).map_err(|e| {
        EngineError::Target(format!(
            "{name} part {part}: cannot open {}: {e}",
            path.display()
        ))
    })
}

/// Bytes a multi-row INSERT of `write_insert_part` grows to before it ends
/// (with its row limit): well under MySQL's and MariaDB's default
/// max_allowed_packet of 16 MiB (64 MiB since MySQL 8.0), whatever a row's size.
pub const INSERT_BYTES: usize = 1 << 20;

/// Write part `part` of `parts` of `table` at `scale` to `path` as multi-row
/// `INSERT INTO `name` VALUES (...),(...)` statements of at most
/// `rows_per_insert` rows (and about `INSERT_BYTES`), one statement a line:
/// the same rows as `write_text_part`, for a server that refuses LOAD DATA
/// LOCAL, and to measure the two against each other. Each COPY text field
/// becomes a quoted string literal (the server converts it to the column's
/// type as LOAD DATA does), `\N` becomes NULL, and the backslash escapes are
/// kept, which MySQL's string literals read as COPY text means them (`\\`,
/// `\n`, `\t`, `\r`; an escaped delimiter `\|` reads as `|`); a quote gets a
/// backslash. No newline byte occurs inside a statement, so a reader splits
/// them at '\n'. Stopped between chunks once `abort` is set; the rows written.
pub fn write_insert_part<T: CopyTable>(
    path: &Path,
    table: T,
    scale: f64,
    part: i32,
    parts: i32,
    rows_per_insert: usize,
    abort: &AtomicBool,
) -> Result<u64, EngineError> {
    let name = table.name();
    if rows_per_insert == 0 {
        return Err(EngineError::Config(
            "rows per INSERT must be at least 1".into(),
        ));
    }
    let mut out = open_part(path, name, part, parts)?;
    let head = format!("INSERT INTO `{name}` VALUES ");
    let mut sql: Vec<u8> = Vec::with_capacity(INSERT_BYTES + (64 << 10));
    let mut in_statement = 0usize;
    let mut partial: Vec<u8> = Vec::new(); // a row a chunk ended inside, if any
    let write_error =
        |e: std::io::Error| EngineError::Target(format!("{name} part {part}: writing rows: {e}"));
    let rows = table.write_copy_rows(scale, part, parts, CHUNK_BYTES, |chunk| {
        if abort.load(Ordering::Relaxed) {
            return Err(EngineError::Interrupted);
        }
        let mut rest: &[u8] = &chunk;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let line = if partial.is_empty() {
                &rest[..end]
            } else {
                partial.extend_from_slice(&rest[..end]);
                partial.as_slice()
            };
            sql.extend_from_slice(if in_statement == 0 {
                head.as_bytes()
            } else {
                b","
            });
            push_tuple(line, &mut sql);
            partial.clear();
            in_statement += 1;
            rest = &rest[end + 1..];
            if in_statement == rows_per_insert || sql.len() >= INSERT_BYTES {
                sql.push(b'\n');
                out.write_all(&sql).map_err(write_error)?;
                sql.clear();
                in_statement = 0;
            }
        }
        partial.extend_from_slice(rest);
        Ok(())
    })?;
    if !partial.is_empty() {
        return Err(EngineError::Target(format!(
            "{name} part {part}: the rows did not end with a newline"
        )));
    }
    if in_statement > 0 {
        sql.push(b'\n');
        out.write_all(&sql).map_err(write_error)?;
    }
    out.flush().map_err(write_error)?;
    Ok(rows)
}

/// One COPY text row ('|' between fields) as an SQL tuple `('a',NULL,'b')`.
fn push_tuple(line: &[u8], sql: &mut Vec<u8>) {
    sql.push(b'(');
    let mut start = 0usize;
    let mut i = 0usize;
    let mut first = true;
    loop {
        let end = i >= line.len();
        if end || line[i] == b'|' {
            if !first {
                sql.push(b',');
            }
            first = false;
            push_literal(&line[start..i], sql);
            if end {
                break;
            }
            start = i + 1;
            i += 1;
        } else if line[i] == b'\\' {
            i += 2; // an escape: the next byte is the field's, a '|' included
        } else {
            i += 1;
        }
    }
    sql.push(b')');
}

/// One COPY text field as an SQL literal: NULL for `\N`, else a quoted
/// string with its backslash escapes kept and its quotes escaped.
fn push_literal(field: &[u8], sql: &mut Vec<u8>) {
    if field == b"\\N" {
        sql.extend_from_slice(b"NULL");
        return;
    }
    sql.push(b'\'');
    let mut from = 0usize;
    for (i, &b) in field.iter().enumerate() {
        if b == b'\'' {
            sql.extend_from_slice(&field[from..i]);
            sql.extend_from_slice(b"\\'");
            from = i + 1;
        }
    }
    sql.extend_from_slice(&field[from..]);
    sql.push(b'\'');
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

    #[test]
    fn a_copy_text_row_becomes_a_tuple_of_literals() {
        let mut sql = Vec::new();
        push_tuple(br"1|it's|\N|a\|b|back\\slash|", &mut sql);
        assert_eq!(
            String::from_utf8(sql).unwrap(),
            r"('1','it\'s',NULL,'a\|b','back\\slash','')"
        );
        let mut one = Vec::new();
        push_tuple(b"42", &mut one);
        assert_eq!(one, b"('42')");
    }

    #[test]
    fn the_parts_of_a_table_write_inserts_of_the_same_rows() {
        let dir = std::env::temp_dir().join(format!("perflab-inserts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nation.sql");
        std::fs::write(&path, b"").unwrap();
        let abort = AtomicBool::new(false);
        let rows = write_insert_part(&path, Table::Nation, 0.01, 1, 1, 10, &abort).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(rows, 25);
        let statements: Vec<&str> = text.lines().collect();
        assert_eq!(statements.len(), 3); // 10 + 10 + 5 rows
        assert!(statements
            .iter()
            .all(|s| s.starts_with("INSERT INTO `nation` VALUES (")));
        assert!(statements[0].starts_with("INSERT INTO `nation` VALUES ('0','ALGERIA','0','"));
        assert_eq!(text.matches("),(").count(), 9 + 9 + 4);
        assert!(matches!(
            write_insert_part(&path, Table::Nation, 0.01, 1, 1, 0, &abort),
            Err(EngineError::Config(_))
        ));
        abort.store(true, Ordering::SeqCst);
        assert_eq!(
            write_insert_part(&path, Table::LineItem, 0.01, 1, 1, 1000, &abort),
            Err(EngineError::Interrupted)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
