//! A worker thread: one single-threaded tokio runtime that connects its
//! clients, waits for the common start, and runs each client's loop.

use super::schedule::{next_scheduled_start, ScheduleTimer, Timing};
use super::shared::{Arrival, Place, Shared};
use super::stats::{Finished, Outcome};
use super::{ErrorClass, Protocol};
use crate::random::Prng;
use crate::sys;
use crate::uring::{self, Ring};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest sleep of a waiting client, so that a stop is seen promptly.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// Per-thread state shared by the thread's clients (one runtime thread: no locks).
struct ThreadCtx<P: Protocol> {
    shared: Arc<Shared<P>>,
    index: usize,
    timing: Timing,
    /// The thread's next scheduled start under a rate (pgbench's throttle_trigger).
    throttle_trigger: Cell<Instant>,
    /// Mean gap between scheduled starts of this thread, in seconds.
    throttle_gap_s: f64,
    schedule_rng: RefCell<Prng>,
}

pub(crate) fn worker<P: Protocol>(shared: Arc<Shared<P>>, index: usize, clients: Vec<u32>) {
    shared.cpu_clocks.lock().unwrap()[index] = sys::thread_cpu_clock();
    let mut pinned = None;
    if let Some(&cpu) = shared.pin_cpus.get(index) {
        match sys::pin_this_thread(cpu) {
            Ok(()) => pinned = Some(cpu),
            Err(e) => shared
                .pin_failed
                .lock()
                .unwrap()
                .push((index, format!("thread {index} on CPU {cpu}: {e}"))),
        }
    }
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    if shared.io.is_uring() {
        // The batching point: what this tick's clients queued goes to the
        // kernel in one io_uring_enter, as the runtime is about to sleep.
        builder.on_thread_park(uring::submit_thread_ring);
    }
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            shared.stats[index].lock().unwrap().connect_error =
                Some(format!("cannot start the driver runtime: {e}"));
            shared.connected.wait();
            shared.go.wait();
            shared.workers_done.fetch_add(1, Ordering::SeqCst);
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, run_thread(shared.clone(), index, pinned, clients));
    shared.stats[index].lock().unwrap().cpu_at_end_s = sys::thread_cpu_s();
    shared.workers_done.fetch_add(1, Ordering::SeqCst);
}

async fn run_thread<P: Protocol>(
    shared: Arc<Shared<P>>,
    index: usize,
    pinned: Option<usize>,
    clients: Vec<u32>,
) {
    let mut connecting = Vec::new();
    for client in clients {
        let s = shared.clone();
        connecting.push(tokio::task::spawn_local(async move {
            let started = Instant::now();
            let result = connect_client(&s, client).await;
            (client, result, started.elapsed().as_secs_f64())
        }));
    }
    let mut conns = Vec::new();
    for handle in connecting {
        let (client, result, seconds) = handle.await.expect("connect task");
        let mut stats = shared.stats[index].lock().unwrap();
        stats.connect_total_s += seconds;
        stats.connect_max_s = stats.connect_max_s.max(seconds);
        match result {
            Ok(conn) => {
                if let Some(fd) = shared.protocol.socket(&conn) {
                    shared.fds.lock().unwrap().insert(fd);
                }
                conns.push((client, conn));
            }
            Err(e) => {
                if stats.connect_error.is_none() {
                    stats.connect_error = Some(e);
                }
            }
        }
    }
    shared.stats[index].lock().unwrap().clients_running = conns.len() as u32;
    shared
        .clients_alive
        .fetch_add(conns.len(), Ordering::SeqCst);
    if pinned.is_some() {
        for (_, conn) in &mut conns {
            shared.protocol.locate(conn).await;
        }
        let mut placement = shared.placement.lock().unwrap();
        for (client, conn) in &conns {
            if let Some(pid) = shared.protocol.server_pid(conn) {
                placement.push(Place {
                    client: *client,
                    pid,
                    thread: index,
                    off_streak: 0,
                });
            }
        }
    }
    let inbox = shared.inbox_ends.lock().unwrap()[index].take();
    // Blocking here is fine: this thread's clients are all idle.
    shared.connected.wait();
    shared.go.wait();
    shared.stats[index].lock().unwrap().cpu_at_go_s = sys::thread_cpu_s().unwrap_or(0.0);
    if shared.abort.load(Ordering::SeqCst) {
        let mut fds = shared.fds.lock().unwrap();
        for (_, conn) in &conns {
            if let Some(fd) = shared.protocol.socket(conn) {
                fds.remove(&fd);
            }
        }
        return;
    }
    let timing = *shared.timing.get().expect("timing is set before go");
    let cfg = &shared.cfg;
    let ctx = Rc::new(ThreadCtx {
        shared: shared.clone(),
        index,
        timing,
        throttle_trigger: Cell::new(timing.start),
        throttle_gap_s: cfg
            .rate_tps
            .map(|rate| cfg.threads as f64 / rate)
            .unwrap_or(0.0),
        schedule_rng: RefCell::new(Prng::seeded(
            cfg.seed ^ (0x5EED_0000 + index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        )),
    });
    let mut reaper = None;
    let mut ring_used = None;
    if shared.io.is_uring() {
        match Ring::new(conns.len()) {
            Ok(ring) => {
                if !ring.deferred_taskrun() {
                    // Say which path ran: without DEFER_TASKRUN (Linux < 6.1)
                    // completions may interrupt the thread.
                    shared.stats[index].lock().unwrap().event(
                        Instant::now(),
                        "io-mode",
                        format!(
                            "thread {index}: io_uring without DEFER_TASKRUN (kernel before 6.1)"
                        ),
                    );
                }
                for (_, conn) in conns.iter_mut() {
                    // Cannot fail for a protocol that supports rings: each
                    // client switches once.
                    let _ = shared.protocol.use_ring(conn, &ring);
                }
                // Unbounded only where measured to help: read-only transactions
                // (writing ones ran no faster, with more context switches).
                ring.set_bounded_wait(P::TIMERS_IN_FLIGHT || !shared.protocol.read_only());
                uring::set_thread_ring(Some(ring.clone()));
                shared.ring_enters.lock().unwrap()[index] = Some(ring.enters_counter());
                reaper = Some(tokio::task::spawn_local(ring.clone().reap_forever()));
                ring_used = Some(ring);
            }
            Err(why) => {
                // The probe worked, this thread's ring did not: run on epoll.
                shared.stats[index].lock().unwrap().event(
                    Instant::now(),
                    "io-fallback",
                    format!("thread {index}: io_uring ring not set up ({why}); using epoll"),
                );
            }
        }
    }
    let mut running = Vec::new();
    for (client, conn) in conns {
        let rng = Prng::seeded(cfg.seed ^ (client as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
        running.push(tokio::task::spawn_local(client_loop(
            ctx.clone(),
            conn,
            client,
            rng,
            0,
        )));
    }
    if shared.follow {
        // Clients come and go between threads: this thread ends when no
        // client runs on any thread, taking up those sent to it meanwhile.
        let mut inbox = inbox.expect("each thread's inbox is taken once");
        while shared.clients_alive.load(Ordering::SeqCst) > 0 {
            let arrival = tokio::time::timeout(Duration::from_millis(50), inbox.recv()).await;
            if let Ok(Some(mut a)) = arrival {
                let ring = ring_used.as_ref();
                if let Err(e) = shared.protocol.join_thread(&mut a.conn, ring) {
                    // Cannot happen for a protocol that MIGRATES: say so.
                    let mut stats = shared.stats[index].lock().unwrap();
                    stats.event(
                        Instant::now(),
                        "lost-connection",
                        format!("client {}: {e}", a.client),
                    );
                    stats.lost_clients += 1;
                    shared.clients_alive.fetch_sub(1, Ordering::SeqCst);
                    continue;
                }
                shared.stats[index].lock().unwrap().clients_running += 1;
                running.push(tokio::task::spawn_local(client_loop(
                    ctx.clone(),
                    a.conn,
                    a.client,
                    a.rng,
                    a.measured_done,
                )));
            }
        }
    }
    for handle in running {
        let _ = handle.await;
    }
    if let Some(reaper) = reaper {
        reaper.abort();
    }
    uring::set_thread_ring(None);
    if let Some(ring) = ring_used {
        shared.io_enters.fetch_add(ring.enters(), Ordering::SeqCst);
    }
}

async fn connect_client<P: Protocol>(shared: &Shared<P>, client: u32) -> Result<P::Client, String> {
    let attempt = shared.protocol.connect(client);
    let watch_abort = async {
        while !shared.abort.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::select! {
        result = attempt => result.map_err(|e| e.to_string()),
        _ = watch_abort => Err("interrupted".into()),
    }
}

/// Sleep until `until`, waking at least every MAX_SLEEP to see a stop.
/// Returns false when the run stopped meanwhile.
async fn sleep_until<P: Protocol>(
    shared: &Shared<P>,
    timer: Option<&ScheduleTimer>,
    until: Instant,
) -> bool {
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        let wake = until.min(now + MAX_SLEEP);
        let precise = match timer {
            Some(timer) => timer
                .wait_until_ns(shared.monotonic_ns_at(wake))
                .await
                .is_ok(),
            None => false,
        };
        if !precise {
            // No timerfd: tokio's millisecond timer.
            tokio::time::sleep_until(tokio::time::Instant::from_std(wake)).await;
        }
    }
}

/// How one transaction's tries ended.
enum Ended {
    Committed,
    Failed(String),
    Lost(String),
}

/// How a client's loop ended.
enum Exit {
    /// Done (the run's end, its transaction count, a stop).
    Done,
    /// Its connection was lost (counted and said where it was).
    Lost,
    /// Asked to move to this thread (`Shared::moves`).
    Move(usize),
}

async fn client_loop<P: Protocol>(
    ctx: Rc<ThreadCtx<P>>,
    mut conn: P::Client,
    client: u32,
    mut rng: Prng,
    mut measured_done: u64,
) {
    let shared = ctx.shared.clone();
    let cfg = &shared.cfg;
    let protocol = &shared.protocol;
    let timing = ctx.timing;
    let fd = protocol.socket(&conn);
    // Made on the first scheduled start; None inside when timerfd is unavailable.
    let mut schedule_timer: Option<Option<ScheduleTimer>> = None;
    let limit = cfg.latency_limit_us.map(Duration::from_micros);
    let exit: Exit = 'run: loop {
        if shared.stop.load(Ordering::Relaxed) {
            break Exit::Done;
        }
        // A plain load per transaction; the swap only when a move was asked.
        if shared.follow && shared.moves[client as usize].load(Ordering::Relaxed) != usize::MAX {
            let to = shared.moves[client as usize].swap(usize::MAX, Ordering::Relaxed);
            if to != usize::MAX && to != ctx.index {
                break Exit::Move(to);
            }
        }
        // When this transaction is meant to start.
        let intended = if cfg.rate_tps.is_some() {
            let (trigger, skipped) = next_scheduled_start(
                cfg.schedule,
                ctx.throttle_trigger.get(),
                ctx.throttle_gap_s,
                &mut ctx.schedule_rng.borrow_mut(),
                Instant::now(),
                limit,
                timing,
            );
            ctx.throttle_trigger.set(trigger);
            if skipped > 0 {
                shared.stats[ctx.index]
                    .lock()
                    .unwrap()
                    .record_skipped(skipped);
                measured_done += skipped;
            }
            if timing.end.is_some_and(|end| trigger >= end) {
                break Exit::Done;
            }
            if let Some(n) = cfg.transactions_per_client {
                if measured_done >= n {
                    break Exit::Done;
                }
            }
            if schedule_timer.is_none() {
                schedule_timer = Some(ScheduleTimer::new().ok());
            }
            let timer = schedule_timer.as_ref().and_then(|t| t.as_ref());
            if !sleep_until(&shared, timer, trigger).await {
                break Exit::Done;
            }
            trigger
        } else {
            let now = Instant::now();
            if timing.end.is_some_and(|end| now >= end) {
                break Exit::Done;
            }
            now
        };
        let (tx, request) = protocol.next_transaction(&mut conn, &mut rng);
        let mut intended = intended;
        if P::HAS_PAUSES {
            if let Some(pause) = protocol.pause_before(tx, &mut rng) {
                let until = Instant::now() + pause;
                if !sleep_until(&shared, None, until).await
                    || timing.end.is_some_and(|end| Instant::now() >= end)
                {
                    break Exit::Done;
                }
                intended = if cfg.rate_tps.is_some() {
                    intended + pause
                } else {
                    Instant::now()
                };
            }
        }
        let started = Instant::now();
        let mut tries = 0;
        let ended = loop {
            tries += 1;
            match protocol.execute(&mut conn, tx, &request).await {
                Ok(()) => break Ended::Committed,
                Err(err) => match protocol.classify(&err) {
                    ErrorClass::Retryable { kind } => {
                        if tries < cfg.max_tries && !shared.stop.load(Ordering::Relaxed) {
                            continue;
                        }
                        break Ended::Failed(kind);
                    }
                    ErrorClass::Counted { kind } => break Ended::Failed(kind),
                    ErrorClass::Fatal => break Ended::Lost(err.to_string()),
                },
            }
        };
        let done = Instant::now();
        let outcome = match &ended {
            Ended::Committed => Outcome::Committed,
            Ended::Failed(kind) => Outcome::Failed(kind),
            Ended::Lost(message) => {
                let mut stats = shared.stats[ctx.index].lock().unwrap();
                if !shared.abort.load(Ordering::Relaxed) {
                    stats.lost_clients += 1;
                    stats.event(
                        done,
                        "lost-connection",
                        format!("client {client}: {message}"),
                    );
                }
                stats.clients_running -= 1;
                stats.last_completion = Some(stats.last_completion.map_or(done, |l| l.max(done)));
                break 'run Exit::Lost;
            }
        };
        let keep_operations = matches!(ended, Ended::Committed) && intended >= timing.measure_from;
        {
            let mut stats = shared.stats[ctx.index].lock().unwrap();
            stats.record(Finished {
                tx,
                outcome,
                intended,
                started,
                done,
                tries,
                body_bytes: if P::COUNTS_BODY_BYTES && matches!(ended, Ended::Committed) {
                    protocol.body_bytes(&request)
                } else {
                    0
                },
                scheduled: cfg.rate_tps.is_some(),
                latency_limit: limit,
                measure_from: timing.measure_from,
            });
            if P::TIMES_OPERATIONS {
                protocol.take_operations(&mut conn, |op, us| {
                    if keep_operations {
                        stats.record_operation(op, us);
                    }
                });
            }
        }
        if intended >= timing.measure_from {
            measured_done += 1;
            if cfg
                .transactions_per_client
                .is_some_and(|n| measured_done >= n)
            {
                break Exit::Done;
            }
        }
        if P::HAS_PAUSES {
            if let Some(pause) = protocol.pause_after(tx, &mut rng) {
                if !sleep_until(&shared, None, Instant::now() + pause).await {
                    break Exit::Done;
                }
            }
        }
    };
    if !matches!(exit, Exit::Lost) {
        shared.stats[ctx.index].lock().unwrap().clients_running -= 1;
    }
    // The connection to close here: none when it was lost, or moved on.
    let to_close = match exit {
        Exit::Done => Some(conn),
        Exit::Lost => None,
        Exit::Move(to) => {
            // Between transactions: nothing in flight on this thread's ring.
            protocol.leave_thread(&mut conn);
            let arrival = Arrival {
                conn,
                client,
                rng,
                measured_done,
            };
            shared.moved.fetch_add(1, Ordering::Relaxed);
            if shared.inboxes[to].send(arrival).is_ok() {
                return;
            }
            // The other thread has ended (the run is over): end here, the
            // connection dropped with the arrival the send gave back.
            None
        }
    };
    shared.clients_alive.fetch_sub(1, Ordering::SeqCst);
    if let Some(fd) = fd {
        shared.fds.lock().unwrap().remove(&fd);
    }
    if let Some(conn) = to_close {
        protocol.close(conn);
    }
}
