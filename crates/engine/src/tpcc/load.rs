//! The TPC-C initial database (clause 4.3.3.1), generated straight into COPY
//! text buffers and streamed into existing, empty tables over `jobs`
//! parallel connections. The schema, keys and indexes are the Python side's
//! (keys and indexes after the load).
//!
//! Work is split in tasks (item; per warehouse: warehouse + district, stock,
//! customer + history, orders + new_order + order_line) that the jobs take
//! in turn. Each task draws from its own stream, seeded by (seed, task), so
//! the data does not depend on the number of jobs.

use super::gen::{
    nurand, timestamp_text, write_address, write_astring, write_data_original, write_fixed,
    write_last_name, write_nstring,
};
use super::{
    CUSTOMERS_PER_DISTRICT, DISTRICTS_PER_WAREHOUSE, ITEMS, NEW_ORDERS_FROM, ORDERS_PER_DISTRICT,
};
use crate::error::EngineError;
use crate::pg::{write_i64, ConnInfo, PgConn, PgError, COPY_CHUNK_BYTES};
use crate::random::Prng;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
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
}

#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// (step, seconds) in the order they ran.
    pub steps: Vec<(String, f64)>,
    /// (table, rows loaded), as the server counted them.
    pub rows: Vec<(String, i64)>,
}

#[derive(Debug, Clone, Copy)]
enum Task {
    Item,
    WarehouseDistrict(i64),
    Stock(i64),
    CustomerHistory(i64),
    Orders(i64),
}

impl Task {
    fn seed(self, seed: u64) -> u64 {
        let (code, w) = match self {
            Task::Item => (1u64, 0),
            Task::WarehouseDistrict(w) => (2, w),
            Task::Stock(w) => (3, w),
            Task::CustomerHistory(w) => (4, w),
            Task::Orders(w) => (5, w),
        };
        seed ^ ((code << 40) | w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

/// Tasks, biggest first so the jobs end together.
fn tasks(warehouses: u32) -> Vec<Task> {
    let ws = 1..=warehouses as i64;
    let mut out = Vec::new();
    out.extend(ws.clone().map(Task::Stock));
    out.extend(ws.clone().map(Task::CustomerHistory));
    out.extend(ws.clone().map(Task::Orders));
    out.push(Task::Item);
    out.extend(ws.map(Task::WarehouseDistrict));
    out
}

/// Load the data set into the existing empty tables. `on_step` hears
/// "generate_and_copy" as it starts. Checks `abort` between chunks.
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
    let info = ConnInfo::parse(&cfg.conninfo)?;
    let now_text = timestamp_text(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0),
    );
    let tasks = tasks(cfg.warehouses);
    let next = AtomicUsize::new(0);
    let rows = Mutex::new([0i64; 9]);
    let first_error: Mutex<Option<EngineError>> = Mutex::new(None);
    let stop = AtomicBool::new(false);
    on_step("generate_and_copy");
    let started = Instant::now();
    let jobs = (cfg.jobs as usize).min(tasks.len());
    std::thread::scope(|scope| {
        for job in 0..jobs {
            let ctx = JobCtx {
                cfg,
                info: &info,
                now: now_text.as_bytes(),
                tasks: &tasks,
                next: &next,
                rows: &rows,
                abort,
                stop: &stop,
            };
            let first_error = &first_error;
            let stop = &stop;
            let spawned = std::thread::Builder::new()
                .name(format!("perflab-tpcc-load-{job}"))
                .spawn_scoped(scope, move || {
                    if let Err(e) = run_job(ctx) {
                        stop.store(true, Ordering::SeqCst);
                        let mut first = first_error.lock().unwrap();
                        if first.is_none() || matches!(*first, Some(EngineError::Interrupted)) {
                            *first = Some(e);
                        }
                    }
                });
            if let Err(e) = spawned {
                stop.store(true, Ordering::SeqCst);
                *first_error.lock().unwrap() =
                    Some(EngineError::Internal(format!("cannot start a thread: {e}")));
            }
        }
    });
    if let Some(e) = first_error.into_inner().unwrap() {
        return Err(e);
    }
    if abort.load(Ordering::SeqCst) {
        return Err(EngineError::Interrupted);
    }
    let rows = rows.into_inner().unwrap();
    Ok(LoadReport {
        steps: vec![("generate_and_copy".into(), started.elapsed().as_secs_f64())],
        rows: TABLES
            .iter()
            .zip(rows)
            .map(|(t, n)| (t.to_string(), n))
            .collect(),
    })
}

#[derive(Clone, Copy)]
struct JobCtx<'a> {
    cfg: &'a LoadConfig,
    info: &'a ConnInfo,
    now: &'a [u8],
    tasks: &'a [Task],
    next: &'a AtomicUsize,
    rows: &'a Mutex<[i64; 9]>,
    abort: &'a AtomicBool,
    stop: &'a AtomicBool,
}

impl JobCtx<'_> {
    fn stopped(&self) -> bool {
        self.abort.load(Ordering::Relaxed) || self.stop.load(Ordering::Relaxed)
    }
}

fn run_job(ctx: JobCtx<'_>) -> Result<(), EngineError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| EngineError::Internal(format!("cannot start the load runtime: {e}")))?;
    rt.block_on(async {
        let mut conn = PgConn::connect(ctx.info).await?;
        loop {
            if ctx.stopped() {
                return Err(EngineError::Interrupted);
            }
            let i = ctx.next.fetch_add(1, Ordering::SeqCst);
            let Some(&task) = ctx.tasks.get(i) else {
                break;
            };
            run_task(&mut conn, &ctx, task).await?;
        }
        conn.terminate();
        Ok(())
    })
}

/// COPY `table` from rows that `row` writes one per call (false: no more).
async fn copy_rows(
    conn: &mut PgConn,
    ctx: &JobCtx<'_>,
    table: usize,
    columns: &str,
    mut row: impl FnMut(&mut Vec<u8>) -> bool,
) -> Result<(), EngineError> {
    let sql = format!("COPY {} ({columns}) FROM STDIN", TABLES[table]);
    let mut interrupted = false;
    let copied = conn
        .copy_in(&sql, |out| {
            if ctx.stopped() {
                interrupted = true;
                return false;
            }
            while out.len() < COPY_CHUNK_BYTES {
                if !row(out) {
                    return false;
                }
            }
            true
        })
        .await
        .map_err(|e| match e {
            PgError::Server(err) => {
                EngineError::Target(format!("COPY into {}: {err}", TABLES[table]))
            }
            other => EngineError::from(other),
        })?;
    if interrupted {
        // The COPY ended early; what it took is not a loaded table.
        return Err(EngineError::Interrupted);
    }
    ctx.rows.lock().unwrap()[table] += copied as i64;
    Ok(())
}

fn tab(out: &mut Vec<u8>) {
    out.push(b'\t');
}

async fn run_task(conn: &mut PgConn, ctx: &JobCtx<'_>, task: Task) -> Result<(), EngineError> {
    let mut rng = Prng::seeded(task.seed(ctx.cfg.seed));
    let now = ctx.now;
    match task {
        Task::Item => {
            let mut i = 1;
            copy_rows(
                conn,
                ctx,
                7,
                "i_id, i_im_id, i_name, i_price, i_data",
                |out| {
                    if i > ITEMS {
                        return false;
                    }
                    write_i64(out, i);
                    tab(out);
                    write_i64(out, rng.uniform_i64(1, 10_000));
                    tab(out);
                    write_astring(out, &mut rng, 14, 24);
                    tab(out);
                    write_fixed(out, rng.uniform_i64(100, 10_000), 2);
                    tab(out);
                    write_data_original(out, &mut rng);
                    out.push(b'\n');
                    i += 1;
                    true
                },
            )
            .await
        }
        Task::WarehouseDistrict(w) => {
            let mut done = false;
            copy_rows(
                conn,
                ctx,
                0,
                "w_id, w_name, w_street_1, w_street_2, w_city, w_state, w_zip, w_tax, w_ytd",
                |out| {
                    if done {
                        return false;
                    }
                    write_i64(out, w);
                    tab(out);
                    write_astring(out, &mut rng, 6, 10);
                    tab(out);
                    write_address(out, &mut rng);
                    write_fixed(out, rng.uniform_i64(0, 2000), 4);
                    out.extend_from_slice(b"\t300000.00\n");
                    done = true;
                    true
                },
            )
            .await?;
            let mut d = 1;
            copy_rows(
                conn,
                ctx,
                1,
                "d_id, d_w_id, d_name, d_street_1, d_street_2, d_city, d_state, d_zip, \
                 d_tax, d_ytd, d_next_o_id",
                |out| {
                    if d > DISTRICTS_PER_WAREHOUSE {
                        return false;
                    }
                    write_i64(out, d);
                    tab(out);
                    write_i64(out, w);
                    tab(out);
                    write_astring(out, &mut rng, 6, 10);
                    tab(out);
                    write_address(out, &mut rng);
                    write_fixed(out, rng.uniform_i64(0, 2000), 4);
                    out.extend_from_slice(b"\t30000.00\t");
                    write_i64(out, ORDERS_PER_DISTRICT + 1);
                    out.push(b'\n');
                    d += 1;
                    true
                },
            )
            .await
        }
        Task::Stock(w) => {
            let mut i = 1;
            copy_rows(
                conn,
                ctx,
                8,
                "s_i_id, s_w_id, s_quantity, s_dist_01, s_dist_02, s_dist_03, s_dist_04, \
                 s_dist_05, s_dist_06, s_dist_07, s_dist_08, s_dist_09, s_dist_10, s_ytd, \
                 s_order_cnt, s_remote_cnt, s_data",
                |out| {
                    if i > ITEMS {
                        return false;
                    }
                    write_i64(out, i);
                    tab(out);
                    write_i64(out, w);
                    tab(out);
                    write_i64(out, rng.uniform_i64(10, 100));
                    tab(out);
                    for _ in 0..10 {
                        write_astring(out, &mut rng, 24, 24);
                        tab(out);
                    }
                    out.extend_from_slice(b"0\t0\t0\t");
                    write_data_original(out, &mut rng);
                    out.push(b'\n');
                    i += 1;
                    true
                },
            )
            .await
        }
        Task::CustomerHistory(w) => {
            let (mut d, mut c) = (1, 1);
            let c_last_load = ctx.cfg.c_last_load;
            copy_rows(
                conn,
                ctx,
                2,
                "c_id, c_d_id, c_w_id, c_first, c_middle, c_last, c_street_1, c_street_2, \
                 c_city, c_state, c_zip, c_phone, c_since, c_credit, c_credit_lim, c_discount, \
                 c_balance, c_ytd_payment, c_payment_cnt, c_delivery_cnt, c_data",
                |out| {
                    if c > CUSTOMERS_PER_DISTRICT {
                        c = 1;
                        d += 1;
                    }
                    if d > DISTRICTS_PER_WAREHOUSE {
                        return false;
                    }
                    write_i64(out, c);
                    tab(out);
                    write_i64(out, d);
                    tab(out);
                    write_i64(out, w);
                    tab(out);
                    write_astring(out, &mut rng, 8, 16);
                    out.extend_from_slice(b"\tOE\t");
                    let last = if c <= 1000 {
                        c - 1
                    } else {
                        nurand(&mut rng, 255, 0, 999, c_last_load)
                    };
                    write_last_name(out, last);
                    tab(out);
                    write_address(out, &mut rng);
                    write_nstring(out, &mut rng, 16);
                    tab(out);
                    out.extend_from_slice(now);
                    if rng.uniform_i64(1, 10) == 1 {
                        out.extend_from_slice(b"\tBC\t50000.00\t");
                    } else {
                        out.extend_from_slice(b"\tGC\t50000.00\t");
                    }
                    write_fixed(out, rng.uniform_i64(0, 5000), 4);
                    out.extend_from_slice(b"\t-10.00\t10.00\t1\t0\t");
                    write_astring(out, &mut rng, 300, 500);
                    out.push(b'\n');
                    c += 1;
                    true
                },
            )
            .await?;
            let (mut d, mut c) = (1, 1);
            copy_rows(
                conn,
                ctx,
                3,
                "h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, h_data",
                |out| {
                    if c > CUSTOMERS_PER_DISTRICT {
                        c = 1;
                        d += 1;
                    }
                    if d > DISTRICTS_PER_WAREHOUSE {
                        return false;
                    }
                    write_i64(out, c);
                    tab(out);
                    write_i64(out, d);
                    tab(out);
                    write_i64(out, w);
                    tab(out);
                    write_i64(out, d);
                    tab(out);
                    write_i64(out, w);
                    tab(out);
                    out.extend_from_slice(now);
                    out.extend_from_slice(b"\t10.00\t");
                    write_astring(out, &mut rng, 12, 24);
                    out.push(b'\n');
                    c += 1;
                    true
                },
            )
            .await
        }
        Task::Orders(w) => {
            // Per district: o_c_id a random permutation of the customers, and
            // each order's line count (orders and order_line must agree).
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
            let at = |d: i64, o: i64| ((d - 1) * ORDERS_PER_DISTRICT + (o - 1)) as usize;
            let (mut d, mut o) = (1, 1);
            copy_rows(
                conn,
                ctx,
                5,
                "o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, o_all_local",
                |out| {
                    if o > ORDERS_PER_DISTRICT {
                        o = 1;
                        d += 1;
                    }
                    if d > DISTRICTS_PER_WAREHOUSE {
                        return false;
                    }
                    write_i64(out, o);
                    tab(out);
                    write_i64(out, d);
                    tab(out);
                    write_i64(out, w);
                    tab(out);
                    write_i64(out, customer_of[at(d, o)] as i64);
                    tab(out);
                    out.extend_from_slice(now);
                    tab(out);
                    if o < NEW_ORDERS_FROM {
                        write_i64(out, rng.uniform_i64(1, 10));
                    } else {
                        out.extend_from_slice(b"\\N");
                    }
                    tab(out);
                    write_i64(out, lines_of[at(d, o)] as i64);
                    out.extend_from_slice(b"\t1\n");
                    o += 1;
                    true
                },
            )
            .await?;
            let (mut d, mut o) = (1, NEW_ORDERS_FROM);
            copy_rows(conn, ctx, 4, "no_o_id, no_d_id, no_w_id", |out| {
                if o > ORDERS_PER_DISTRICT {
                    o = NEW_ORDERS_FROM;
                    d += 1;
                }
                if d > DISTRICTS_PER_WAREHOUSE {
                    return false;
                }
                write_i64(out, o);
                tab(out);
                write_i64(out, d);
                tab(out);
                write_i64(out, w);
                out.push(b'\n');
                o += 1;
                true
            })
            .await?;
            let (mut d, mut o, mut l) = (1, 1, 1);
            copy_rows(
                conn,
                ctx,
                6,
                "ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id, ol_delivery_d, \
                 ol_quantity, ol_amount, ol_dist_info",
                |out| {
                    if o <= ORDERS_PER_DISTRICT && l > lines_of[at(d, o)] as i64 {
                        l = 1;
                        o += 1;
                    }
                    if o > ORDERS_PER_DISTRICT {
                        o = 1;
                        d += 1;
                    }
                    if d > DISTRICTS_PER_WAREHOUSE {
                        return false;
                    }
                    write_i64(out, o);
                    tab(out);
                    write_i64(out, d);
                    tab(out);
                    write_i64(out, w);
                    tab(out);
                    write_i64(out, l);
                    tab(out);
                    write_i64(out, rng.uniform_i64(1, ITEMS));
                    tab(out);
                    write_i64(out, w);
                    tab(out);
                    if o < NEW_ORDERS_FROM {
                        out.extend_from_slice(now);
                        out.extend_from_slice(b"\t5\t0.00\t");
                    } else {
                        out.extend_from_slice(b"\\N\t5\t");
                        write_fixed(out, rng.uniform_i64(1, 999_999), 2);
                        tab(out);
                    }
                    write_astring(out, &mut rng, 24, 24);
                    out.push(b'\n');
                    l += 1;
                    true
                },
            )
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_warehouse_has_its_tasks_and_item_is_loaded_once() {
        let t = tasks(3);
        assert_eq!(t.len(), 3 * 4 + 1);
        assert_eq!(t.iter().filter(|t| matches!(t, Task::Item)).count(), 1);
        // Different tasks draw from different streams.
        assert_ne!(Task::Stock(1).seed(0), Task::Stock(2).seed(0));
        assert_ne!(Task::Stock(1).seed(0), Task::Orders(1).seed(0));
    }
}
