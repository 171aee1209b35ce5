//! The pgbench data set, generated here and streamed with COPY.
//!
//! The result is what `pgbench -i` (PostgreSQL 15, default steps "dtgvp")
//! leaves behind: the same four tables and columns, fill factor, row counts,
//! values (balances 0, empty account filler, NULL branch and teller filler)
//! and primary keys, so pgbench can run on data loaded here and the reverse.

use super::{ACCOUNTS_PER_SCALE, BRANCHES_PER_SCALE, SCALE_BIGINT_THRESHOLD, TELLERS_PER_SCALE};
use crate::error::EngineError;
use crate::pg::{write_i64, ConnInfo, PgConn, COPY_CHUNK_BYTES};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub conninfo: String,
    pub scale: u32,
    /// Percent of each heap page filled (pgbench -F), 10..=100.
    pub fillfactor: u32,
}

#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// (step, seconds) in the order they ran.
    pub steps: Vec<(String, f64)>,
    /// (table, rows loaded).
    pub rows: Vec<(String, i64)>,
}

/// The CREATE TABLE statements pgbench -i issues.
pub fn create_table_statements(scale: u32, fillfactor: u32) -> Vec<String> {
    let aid_type = if scale >= SCALE_BIGINT_THRESHOLD {
        "bigint"
    } else {
        "int"
    };
    vec![
        format!(
            "create table pgbench_history(tid int,bid int,aid {aid_type},delta int,\
             mtime timestamp,filler char(22))"
        ),
        format!(
            "create table pgbench_tellers(tid int not null,bid int,tbalance int,filler char(84)) \
             with (fillfactor={fillfactor})"
        ),
        format!(
            "create table pgbench_accounts(aid {aid_type} not null,bid int,abalance int,\
             filler char(84)) with (fillfactor={fillfactor})"
        ),
        format!(
            "create table pgbench_branches(bid int not null,bbalance int,filler char(88)) \
             with (fillfactor={fillfactor})"
        ),
    ]
}

/// Streams COPY text rows for pgbench_accounts: "aid\tbid\t0\t\n" (an empty
/// filler, as pgbench writes it), in chunks of about COPY_CHUNK_BYTES.
pub struct AccountRows {
    next_aid: i64,
    last_aid: i64,
}

impl AccountRows {
    pub fn new(scale: u32) -> Self {
        AccountRows {
            next_aid: 1,
            last_aid: ACCOUNTS_PER_SCALE * scale as i64,
        }
    }

    /// Append rows to `out`; false when every row has been written.
    pub fn fill(&mut self, out: &mut Vec<u8>) -> bool {
        while self.next_aid <= self.last_aid && out.len() < COPY_CHUNK_BYTES {
            let aid = self.next_aid;
            write_i64(out, aid);
            out.push(b'\t');
            write_i64(out, (aid - 1) / ACCOUNTS_PER_SCALE + 1);
            out.extend_from_slice(b"\t0\t\n");
            self.next_aid += 1;
        }
        self.next_aid <= self.last_aid
    }
}

/// Load the data set; `on_step` hears each step's name as it starts. Checks
/// `abort` between chunks; an aborted load is rolled back (the connection
/// closes inside the transaction).
pub fn load(
    cfg: &LoadConfig,
    abort: &AtomicBool,
    mut on_step: impl FnMut(&str),
) -> Result<LoadReport, EngineError> {
    if cfg.scale == 0 {
        return Err(EngineError::Config("scale must be at least 1".into()));
    }
    if !(10..=100).contains(&cfg.fillfactor) {
        return Err(EngineError::Config(format!(
            "fillfactor {} is out of range; allowed: 10..100",
            cfg.fillfactor
        )));
    }
    let info = ConnInfo::parse(&cfg.conninfo)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| EngineError::Internal(format!("cannot start the load runtime: {e}")))?;
    rt.block_on(load_async(cfg, &info, abort, &mut on_step))
}

async fn load_async(
    cfg: &LoadConfig,
    info: &ConnInfo,
    abort: &AtomicBool,
    on_step: &mut impl FnMut(&str),
) -> Result<LoadReport, EngineError> {
    let mut conn = PgConn::connect(info).await?;
    let mut report = LoadReport::default();
    let scale = cfg.scale as i64;
    let check_abort = || {
        if abort.load(Ordering::Relaxed) {
            Err(EngineError::Interrupted)
        } else {
            Ok(())
        }
    };

    let step = |name: &str, report: &mut LoadReport, started: Instant| {
        report
            .steps
            .push((name.to_string(), started.elapsed().as_secs_f64()));
    };

    on_step("drop_tables");
    let t = Instant::now();
    conn.simple(
        "drop table if exists pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers",
    )
    .await?;
    step("drop_tables", &mut report, t);

    on_step("create_tables");
    let t = Instant::now();
    for ddl in create_table_statements(cfg.scale, cfg.fillfactor) {
        conn.simple(&ddl).await?;
    }
    step("create_tables", &mut report, t);
    check_abort()?;

    on_step("generate");
    let t = Instant::now();
    conn.simple("begin").await?;
    conn.simple(
        "truncate table pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers",
    )
    .await?;
    let mut bid = 1;
    conn.copy_in("copy pgbench_branches (bid, bbalance) from stdin", |out| {
        while bid <= BRANCHES_PER_SCALE * scale && out.len() < COPY_CHUNK_BYTES {
            write_i64(out, bid);
            out.extend_from_slice(b"\t0\n");
            bid += 1;
        }
        bid <= BRANCHES_PER_SCALE * scale
    })
    .await?;
    let mut tid = 1;
    conn.copy_in(
        "copy pgbench_tellers (tid, bid, tbalance) from stdin",
        |out| {
            while tid <= TELLERS_PER_SCALE * scale && out.len() < COPY_CHUNK_BYTES {
                write_i64(out, tid);
                out.push(b'\t');
                write_i64(out, (tid - 1) / TELLERS_PER_SCALE + 1);
                out.extend_from_slice(b"\t0\n");
                tid += 1;
            }
            tid <= TELLERS_PER_SCALE * scale
        },
    )
    .await?;
    let mut accounts = AccountRows::new(cfg.scale);
    let mut interrupted = false;
    // FREEZE: the table was truncated in this transaction, so rows can be
    // written frozen, as pgbench does (saves the first vacuum's rewrite).
    conn.copy_in("copy pgbench_accounts from stdin with (freeze on)", |out| {
        if abort.load(Ordering::Relaxed) {
            interrupted = true;
            return false;
        }
        accounts.fill(out)
    })
    .await?;
    if interrupted {
        // Dropping the connection inside the transaction rolls it back.
        return Err(EngineError::Interrupted);
    }
    conn.simple("commit").await?;
    step("generate", &mut report, t);
    report.rows = vec![
        ("pgbench_branches".into(), BRANCHES_PER_SCALE * scale),
        ("pgbench_tellers".into(), TELLERS_PER_SCALE * scale),
        ("pgbench_accounts".into(), ACCOUNTS_PER_SCALE * scale),
        ("pgbench_history".into(), 0),
    ];
    check_abort()?;

    on_step("vacuum");
    let t = Instant::now();
    for table in [
        "pgbench_branches",
        "pgbench_tellers",
        "pgbench_accounts",
        "pgbench_history",
    ] {
        conn.simple(&format!("vacuum analyze {table}")).await?;
        check_abort()?;
    }
    step("vacuum", &mut report, t);

    on_step("primary_keys");
    let t = Instant::now();
    for (table, key) in [
        ("pgbench_branches", "bid"),
        ("pgbench_tellers", "tid"),
        ("pgbench_accounts", "aid"),
    ] {
        conn.simple(&format!("alter table {table} add primary key ({key})"))
            .await?;
        check_abort()?;
    }
    step("primary_keys", &mut report, t);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row the generator writes for `scale`, in chunks as COPY gets them.
    fn all_account_rows(scale: u32) -> String {
        let mut rows = AccountRows::new(scale);
        let (mut all, mut chunk) = (Vec::new(), Vec::new());
        loop {
            chunk.clear();
            let more = rows.fill(&mut chunk);
            assert!(
                chunk.len() < COPY_CHUNK_BYTES + 64,
                "chunks stay near the chunk size"
            );
            all.extend_from_slice(&chunk);
            if !more {
                return String::from_utf8(all).unwrap();
            }
        }
    }

    #[test]
    fn account_rows_match_pgbench_copy_format() {
        let text = all_account_rows(1);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 100_000);
        assert_eq!(lines[0], "1\t1\t0\t");
        assert_eq!(lines[99_999], "100000\t1\t0\t");
    }

    #[test]
    fn branch_of_each_account_follows_the_scale() {
        let text = all_account_rows(3);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 300_000);
        assert_eq!(lines[100_000], "100001\t2\t0\t");
        assert_eq!(lines[299_999], "300000\t3\t0\t");
    }

    #[test]
    fn aid_becomes_bigint_at_pgbench_threshold() {
        assert!(create_table_statements(19_999, 100)[2].contains("aid int not null"));
        assert!(create_table_statements(20_000, 90)[2].contains("aid bigint not null"));
        assert!(create_table_statements(1, 90)[1].contains("fillfactor=90"));
    }
}
