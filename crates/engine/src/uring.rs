//! Batched socket round trips through io_uring, for the TPC-B driver's hot path.
//!
//! Why: on a machine where driver and server share the CPU, most of the
//! driver's time per statement is kernel work around one `send` and one
//! `recv` (perf: 86%), including the context switch when the backend woken by
//! `send` preempts the driver on its return to user space. Here each worker
//! thread (one tokio current_thread runtime) owns one ring. A client's round
//! trip pushes a `send` linked to a `recv` (IOSQE_IO_LINK, the send with
//! CQE_SKIP_SUCCESS, so one completion per round trip, the send's when it
//! fails, see `reap`; the recv with
//! RECVSEND_POLL_FIRST, as the reply cannot be there yet) and awaits the
//! completion; nothing enters the kernel then.
//!
//! A reaper task per ring drives the kernel side. It alternates with the
//! clients it wakes: they run and queue their next round trips, then one
//! `io_uring_enter` submits all of them and collects the replies that arrived
//! meanwhile, so a round of N ready clients costs one kernel entry and one
//! return to user space instead of N sends, N reads and an epoll_wait. When
//! every attached connection waits on the ring (closed loop: nothing else can
//! wake them), that enter also sleeps until the next completion, and epoll is
//! not involved at all. Otherwise (under a rate clients sleep on timers) an
//! enter that finds nothing hands over to the runtime: completions then reach
//! tokio through an eventfd registered with the ring and watched with
//! `AsyncFd`, and the runtime's `on_thread_park` hook submits what clients
//! queued in the tick before it sleeps.
//!
//! Measured alternatives (benchmarks/README.md): returning to epoll after
//! every round (park hook + epoll_wait + an enter to collect) cost 15% more
//! CPU per transaction than epoll at one client; waiting for more than one
//! completion per enter (IORING_ENTER min_wait 20 or 100 µs) lowered context
//! switches but also TPS at 8 and 32 clients. The ring is set up with
//! DEFER_TASKRUN (the kernel finishes the receives only inside this thread's
//! own enter, instead of interrupting it or, under COOP_TASKRUN, making its
//! epoll_wait return EINTR) when the kernel has it (6.1+), else COOP_TASKRUN.
//!
//! The slow mode (benchmarks/README.md, "The io_uring slow mode, traced"):
//! an enter asks for one completion, so the batching of a closed loop comes
//! from the woken thread waiting for a CPU while replies pile up. When the
//! thread gets a CPU at once after each wake-up, the kernel finishes one reply
//! per enter and the thread sleeps again: about one enter per reply, twice
//! the CPU per transaction. Waiting for more than one reply removes it but
//! delays lock-holding transactions (measured above); the harness names the
//! seconds a run spent so (`harness::stats::io_mode_event`). The deep slow
//! mode came with cross-CPU wake-ups (0.18-0.31 inter-processor interrupts
//! per transaction against 0.02-0.03): a thread whose clients' backends run
//! on another CPU is woken there per reply. Pinning each driver thread to a
//! CPU of its own (`harness::config::plan_pinning`, on by default for
//! read-only transactions) keeps the backends it wakes on its CPU, and
//! removed the deep slow mode in 20 runs of 20 (benchmarks/README.md, "Two
//! speeds").
//!
//! Buffer safety: a round trip's send and receive buffers move into the ring's
//! operation table for as long as the kernel may touch them, and come back with
//! the completion. A future dropped in flight leaves them there until its
//! completion arrives; a ring dropped with operations in flight leaks them
//! rather than free memory the kernel may still write. Shutting a socket down
//! (the coordinator's abort) completes its pending receive with 0.
//!
//! Connection set-up, authentication and COPY stay on the epoll path
//! (`pg.rs`): only the measured round trips use the ring.

use io_uring::{opcode, squeue, types, IoUring};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// How a run does its socket I/O (the workload's `io` parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoChoice {
    /// io_uring when this machine allows it, else epoll.
    Auto,
    /// io_uring, or the run fails saying why it is unavailable.
    Uring,
    /// Non-blocking sockets and tokio's epoll reactor.
    Epoll,
}

impl std::str::FromStr for IoChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(IoChoice::Auto),
            "uring" => Ok(IoChoice::Uring),
            "epoll" => Ok(IoChoice::Epoll),
            other => Err(format!(
                "io {other:?} is not allowed; allowed: auto, uring, epoll"
            )),
        }
    }
}

/// Whether `auto` uses io_uring when it works. Measured with
/// benchmarks/tpcb_vs_pgbench.py (benchmarks/README.md), io_uring used less
/// CPU per transaction than epoll at 1, 8 and 32 clients. It became the
/// default after benchmarks/uring_soak.py: 200 short TPC-B runs whose server
/// was killed, stalled (SIGSTOP) or restarted at random moments, with no hang
/// and no lost or double-counted transaction (the same runs on epoll are the
/// control). Where the kernel lacks io_uring, forbids it (seccomp,
/// kernel.io_uring_disabled) or lacks a feature the ring needs, `choose_io`
/// falls back to epoll and the run records why.
pub const AUTO_PREFERS_URING: bool = true;

/// The I/O method a run uses, and the words that say so in its results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoMethod {
    Uring,
    Epoll { reason: String },
}

impl IoMethod {
    pub fn is_uring(&self) -> bool {
        matches!(self, IoMethod::Uring)
    }

    pub fn describe(&self) -> String {
        match self {
            IoMethod::Uring => "io_uring (batched submission)".into(),
            IoMethod::Epoll { reason } => format!("epoll ({reason})"),
        }
    }
}

/// Decide the I/O method from the request and the result of probing io_uring
/// (`probe` runs only when the answer depends on it). `Err` only for
/// `Uring` when the probe fails.
pub fn choose_io<P>(choice: IoChoice, prefer_uring: bool, probe: P) -> Result<IoMethod, String>
where
    P: FnOnce() -> Result<(), String>,
{
    match choice {
        IoChoice::Epoll => Ok(IoMethod::Epoll {
            reason: "requested".into(),
        }),
        IoChoice::Auto if !prefer_uring => Ok(IoMethod::Epoll {
            reason: "auto: io_uring is opt-in, io = \"uring\"".into(),
        }),
        IoChoice::Auto => Ok(match probe() {
            Ok(()) => IoMethod::Uring,
            Err(why) => IoMethod::Epoll {
                reason: format!("io_uring unavailable: {why}"),
            },
        }),
        IoChoice::Uring => probe()
            .map(|()| IoMethod::Uring)
            .map_err(|why| format!("io = \"uring\": io_uring is unavailable here: {why}")),
    }
}

/// Can this process set up a ring with the features the driver needs?
pub fn probe() -> Result<(), String> {
    Ring::build_uring(8).map(|_| ())
}

/// One in-flight or finished operation (a linked send + recv, or a recv).
struct Op {
    waker: Option<Waker>,
    /// The send's result when it failed or was short (only then does the
    /// send post a completion: CQE_SKIP_SUCCESS).
    send_result: Option<i32>,
    /// The receive's result: bytes, 0 at end of stream, or -errno.
    recv_result: Option<i32>,
    send_buf: Vec<u8>,
    recv_buf: Vec<u8>,
    /// The future was dropped: free the slot when the completion arrives.
    abandoned: bool,
    /// Ended by its send's failure: the slot is never reused (see `reap`).
    retired: bool,
}

impl Op {
    /// What stays in a retired slot: nothing the kernel could touch.
    fn tombstone() -> Op {
        Op {
            waker: None,
            send_result: None,
            recv_result: Some(-libc::ECANCELED),
            send_buf: Vec::new(),
            recv_buf: Vec::new(),
            abandoned: false,
            retired: true,
        }
    }
}

const RECV_BIT: u64 = 1;

/// A worker thread's ring. Not Send: one per runtime thread.
pub struct Ring {
    uring: RefCell<IoUring>,
    ops: RefCell<Vec<Option<Op>>>,
    free: RefCell<Vec<usize>>,
    in_flight: Cell<usize>,
    /// In-flight operations whose futures were dropped.
    abandoned: Cell<usize>,
    /// Connections attached (`attach`): tasks that only the ring wakes while
    /// their operation is in flight.
    users: Cell<usize>,
    eventfd: AsyncFd<OwnedFd>,
    /// Receives finish only inside our own io_uring_enter(GETEVENTS).
    deferred: bool,
    /// The closed-loop wait returns after WAIT_LIMIT_NS at the latest
    /// (`Protocol::TIMERS_IN_FLIGHT`); else it waits for a completion.
    bounded_wait: Cell<bool>,
    /// io_uring_enter calls made (for the run's record). Written by this
    /// thread only; the run's coordinator reads it every second (the
    /// per-second series of enters per transaction, see `harness::stats`).
    enters: Arc<AtomicU64>,
}

impl Ring {
    fn build_uring(entries: u32) -> Result<(IoUring, bool), String> {
        let deferred = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .setup_cqsize(entries * 2)
            .build(entries)
            .map(|u| (u, true));
        let (uring, deferred) = match deferred {
            Ok(pair) => pair,
            // Before 6.1: no DEFER_TASKRUN.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                IoUring::builder()
                    .setup_coop_taskrun()
                    .setup_taskrun_flag()
                    .setup_cqsize(entries * 2)
                    .build(entries)
                    .or_else(|_| IoUring::builder().setup_cqsize(entries * 2).build(entries))
                    .map_err(describe_setup_error)?,
                false,
            ),
            Err(e) => return Err(describe_setup_error(e)),
        };
        if !uring.params().is_feature_skip_cqe_on_success() {
            return Err("the kernel's io_uring lacks CQE_SKIP_SUCCESS (Linux 5.17+)".into());
        }
        if !uring.params().is_feature_nodrop() {
            return Err("the kernel's io_uring lacks FEAT_NODROP (Linux 5.5+)".into());
        }
        Ok((uring, deferred))
    }

    /// A ring for `clients` connections; must run inside a tokio runtime with IO.
    pub fn new(clients: usize) -> Result<Rc<Ring>, String> {
        // Two entries per client (send + recv); a full queue is submitted early.
        let entries = (2 * clients).next_power_of_two().clamp(64, 4096) as u32;
        let (uring, deferred) = Self::build_uring(entries)?;
        let owned = crate::sys::eventfd_nonblocking().map_err(|e| format!("eventfd: {e}"))?;
        uring
            .submitter()
            .register_eventfd(owned.as_raw_fd())
            .map_err(|e| format!("registering an eventfd: {e}"))?;
        let eventfd = crate::sys::watch(owned, Interest::READABLE)
            .map_err(|e| format!("watching the eventfd: {e}"))?;
        Ok(Rc::new(Ring {
            uring: RefCell::new(uring),
            ops: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
            in_flight: Cell::new(0),
            abandoned: Cell::new(0),
            users: Cell::new(0),
            eventfd,
            deferred,
            bounded_wait: Cell::new(true),
            enters: Arc::new(AtomicU64::new(0)),
        }))
    }

    pub fn enters(&self) -> u64 {
        self.enters.load(Ordering::Relaxed)
    }

    /// The counter of `enters`, for another thread to read while it counts.
    pub fn enters_counter(&self) -> Arc<AtomicU64> {
        self.enters.clone()
    }

    /// Count one io_uring_enter (one writer: a plain load and store).
    fn count_enter(&self) {
        self.enters
            .store(self.enters.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Whether the closed-loop wait returns after WAIT_LIMIT_NS even with no
    /// completion: needed where a client waits on a timer beside its round
    /// trip (`Protocol::TIMERS_IN_FLIGHT`). On by default.
    pub fn set_bounded_wait(&self, bounded: bool) {
        self.bounded_wait.set(bounded);
    }

    /// Whether the kernel finishes receives only inside this thread's own
    /// enter (DEFER_TASKRUN, 6.1+); else COOP_TASKRUN or plain.
    pub fn deferred_taskrun(&self) -> bool {
        self.deferred
    }

    fn push(&self, entries: &[squeue::Entry]) {
        let mut uring = self.uring.borrow_mut();
        loop {
            // SAFETY: every buffer an entry points to is owned by `ops` until
            // the entry's final completion (see `Op`).
            let pushed = unsafe { uring.submission().push_multiple(entries) };
            if pushed.is_ok() {
                return;
            }
            // Queue full: submit what is there now.
            self.count_enter();
            let _ = uring.submit();
        }
    }

    /// Submit pending entries (the runtime is about to sleep). Also runs
    /// deferred completions that are due, so their eventfd wake-up follows.
    pub fn submit(&self) {
        let uring = self.uring.borrow();
        // SAFETY: the submission queue is only touched from this thread.
        let pending = unsafe { uring.submission_shared().len() };
        if pending > 0 {
            self.count_enter();
            let _ = uring.submit();
        }
    }

    /// Start a receive into `recv_buf[recv_at..]`, preceded by sending all of
    /// `send_buf` when it is not empty. Both buffers come back with the result.
    pub fn round_trip(
        self: &Rc<Self>,
        fd: RawFd,
        send_buf: Vec<u8>,
        recv_buf: Vec<u8>,
        recv_at: usize,
    ) -> RoundTrip {
        self.round_trip_upto(fd, send_buf, recv_buf, recv_at, usize::MAX)
    }

    /// `round_trip`, receiving at most `recv_max` bytes (an HTTP body's
    /// rest: what follows it is not this response's).
    pub fn round_trip_upto(
        self: &Rc<Self>,
        fd: RawFd,
        send_buf: Vec<u8>,
        mut recv_buf: Vec<u8>,
        recv_at: usize,
        recv_max: usize,
    ) -> RoundTrip {
        let send_buf_is_empty = send_buf.is_empty();
        let index = {
            let mut ops = self.ops.borrow_mut();
            let op = Op {
                waker: None,
                send_result: None,
                recv_result: None,
                send_buf,
                recv_buf: Vec::new(),
                abandoned: false,
                retired: false,
            };
            match self.free.borrow_mut().pop() {
                Some(i) => {
                    ops[i] = Some(op);
                    i
                }
                None => {
                    ops.push(Some(op));
                    ops.len() - 1
                }
            }
        };
        let recv_ptr = recv_buf[recv_at..].as_mut_ptr();
        let recv_len = (recv_buf.len() - recv_at)
            .min(recv_max)
            .min(u32::MAX as usize) as u32;
        let user = (index as u64) << 1;
        let after_send = !send_buf_is_empty;
        // After a send the reply cannot be there yet: arm the poll at once
        // instead of trying the receive first (IORING_RECVSEND_POLL_FIRST).
        let poll_first = if after_send { 1 } else { 0 };
        let recv = opcode::Recv::new(types::Fd(fd), recv_ptr, recv_len)
            .ioprio(poll_first)
            .build()
            .user_data(user | RECV_BIT);
        {
            let mut ops = self.ops.borrow_mut();
            let op = ops[index].as_mut().expect("new op");
            op.recv_buf = recv_buf;
            if op.send_buf.is_empty() {
                drop(ops);
                self.push(&[recv]);
            } else {
                // MSG_WAITALL: a short send is retried by the kernel, or fails
                // the link (and so cancels the receive) instead of passing as done.
                // CQE_SKIP_SUCCESS: a send posts a completion only when it
                // fails, and then the kernel also suppresses the completion of
                // the receive it cancels (REQ_F_SKIP_LINK_CQES), so the send's
                // failure ends the round trip (see `reap`). Posting every
                // send's completion instead ends a closed-loop enter early
                // (min_complete is met by the sends at submission): measured,
                // it cost a third of the batching gain at 32 clients.
                let send = opcode::Send::new(
                    types::Fd(fd),
                    op.send_buf.as_ptr(),
                    op.send_buf.len() as u32,
                )
                .flags(libc::MSG_WAITALL | libc::MSG_NOSIGNAL)
                .build()
                .flags(squeue::Flags::IO_LINK | squeue::Flags::SKIP_SUCCESS)
                .user_data(user);
                drop(ops);
                self.push(&[send, recv]);
            }
        }
        self.in_flight.set(self.in_flight.get() + 1);
        RoundTrip {
            ring: self.clone(),
            index,
            done: false,
        }
    }

    /// A connection will use this ring until the returned guard drops.
    pub fn attach(self: &Rc<Self>) -> RingUser {
        self.users.set(self.users.get() + 1);
        RingUser(self.clone())
    }

    /// Every attached connection waits on an operation of this ring, so
    /// nothing but a completion can make any of them runnable.
    fn all_users_waiting(&self) -> bool {
        let users = self.users.get();
        users > 0 && self.in_flight.get().saturating_sub(self.abandoned.get()) >= users
    }

    /// Submit what is pending, let the kernel finish the receives it
    /// deferred to us (one io_uring_enter), drain the completion queue and
    /// wake the clients it finished. Returns how many it woke. With `wait`,
    /// the enter sleeps until a completion (or WAIT_LIMIT_NS when the wait is
    /// bounded).
    fn reap(&self, wait: bool) -> usize {
        {
            let mut uring = self.uring.borrow_mut();
            // No eventfd wake-ups while we sleep in the ring itself; on before
            // any return to epoll (this enter then collects what completed
            // while it was off).
            if wait {
                uring.completion().disable_eventfd();
            } else {
                uring.completion().enable_eventfd();
            }
            if self.in_flight.get() == 0 {
                return 0;
            }
            self.count_enter();
            if wait && !self.bounded_wait.get() {
                // No kernel timer armed and cancelled per sleep: a completion
                // (a reply, or the shutdown the harness does at the run's end)
                // or a signal ends it.
                let _ = uring.submitter().submit_and_wait(1);
            } else if wait {
                let ts = types::Timespec::new().nsec(WAIT_LIMIT_NS);
                let args = types::SubmitArgs::new().timespec(&ts);
                let _ = uring.submitter().submit_with_args(1, &args);
            } else {
                // SAFETY: the submission queue is only touched from this thread.
                let pending = unsafe { uring.submission_shared().len() } as u32;
                // SAFETY: no argument; GETEVENTS with min_complete 0 does not block.
                let _ = unsafe {
                    uring.submitter().enter::<libc::sigset_t>(
                        pending,
                        0,
                        io_uring::EnterFlags::GETEVENTS.bits(),
                        None,
                    )
                };
            }
        }
        let mut wakers = Vec::new();
        {
            let mut uring = self.uring.borrow_mut();
            let mut ops = self.ops.borrow_mut();
            for cqe in uring.completion() {
                let index = (cqe.user_data() >> 1) as usize;
                let Some(op) = ops.get_mut(index).and_then(|o| o.as_mut()) else {
                    continue;
                };
                if op.recv_result.is_some() {
                    // A retired slot's late receive completion (a kernel that
                    // does post it after all), or nothing this op expects.
                    continue;
                }
                if cqe.user_data() & RECV_BIT == 0 {
                    // The send failed (or was short): the linked receive was
                    // cancelled and its completion suppressed, so the round
                    // trip ends here. The slot is retired, never reused, in
                    // case a kernel posts that receive's completion anyway.
                    op.send_result = Some(cqe.result());
                    op.recv_result = Some(-libc::ECANCELED);
                    op.retired = true;
                } else {
                    op.recv_result = Some(cqe.result());
                }
                self.in_flight.set(self.in_flight.get() - 1);
                if op.abandoned {
                    self.abandoned.set(self.abandoned.get() - 1);
                    let retired = op.retired;
                    self.release(&mut ops, index, retired);
                } else if let Some(w) = op.waker.take() {
                    wakers.push(w);
                }
            }
        }
        let woken = wakers.len();
        for w in wakers {
            w.wake();
        }
        woken
    }

    /// The slot of a finished operation: free for reuse, or, when retired,
    /// kept as a tombstone that ignores any late completion.
    fn release(&self, ops: &mut [Option<Op>], index: usize, retired: bool) {
        if retired {
            ops[index] = Some(Op::tombstone());
        } else {
            ops[index] = None;
            self.free.borrow_mut().push(index);
        }
    }

    /// The reaper: run as a task on the ring's runtime while clients use it.
    ///
    /// It alternates with the clients it woke: they run and queue their next
    /// round trips, then one io_uring_enter submits those and collects the
    /// replies that arrived meanwhile. When every attached client waits on
    /// the ring (closed loop), that enter also sleeps until a completion, so
    /// a round of the loop is one system call and epoll is not involved.
    /// Otherwise (a client sleeps on a timer under a rate, or runs), an enter
    /// that finds nothing hands over to the runtime: the reaper waits for the
    /// eventfd and the park hook submits what is queued.
    pub async fn reap_forever(self: Rc<Self>) {
        loop {
            let wait = self.all_users_waiting();
            if self.reap(wait) > 0 || wait {
                YieldOnce(false).await;
                continue;
            }
            let mut guard = match self.eventfd.readable().await {
                Ok(guard) => guard,
                Err(_) => return,
            };
            // Clear first: a completion after this sets readiness again.
            guard.clear_ready();
        }
    }
}

/// Longest sleep inside io_uring_enter when a client may wait on a timer
/// beside its round trip (`Protocol::TIMERS_IN_FLIGHT`), so that the runtime
/// sees that timer at most this late.
const WAIT_LIMIT_NS: u32 = 20_000_000;

/// A connection's hold on its ring (counted in `Ring::users`).
pub struct RingUser(Rc<Ring>);

impl RingUser {
    pub fn ring(&self) -> &Rc<Ring> {
        &self.0
    }
}

impl Drop for RingUser {
    fn drop(&mut self) {
        self.0.users.set(self.0.users.get() - 1);
    }
}

/// Let the tasks woken before this one run, then continue (tokio's
/// `yield_now` defers to the driver instead, an extra epoll_wait per call).
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Buffers the kernel may still write into are leaked, never freed.
        for op in self.ops.get_mut().iter_mut().flatten() {
            if op.recv_result.is_none() {
                std::mem::forget(std::mem::take(&mut op.send_buf));
                std::mem::forget(std::mem::take(&mut op.recv_buf));
            }
        }
    }
}

/// What a round trip returns: the send's failure (a negative errno or a short
/// count) when it failed, the receive's result, and both buffers.
pub struct Completed {
    pub send_failed: Option<i32>,
    pub recv_result: i32,
    pub send_buf: Vec<u8>,
    pub recv_buf: Vec<u8>,
}

/// The future of one `Ring::round_trip`.
pub struct RoundTrip {
    ring: Rc<Ring>,
    index: usize,
    done: bool,
}

impl Future for RoundTrip {
    type Output = Completed;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Completed> {
        let mut ops = self.ring.ops.borrow_mut();
        let op = ops[self.index].as_mut().expect("op of a live future");
        if let Some(recv_result) = op.recv_result {
            let op = ops[self.index].take().expect("op");
            self.ring.release(&mut ops, self.index, op.retired);
            drop(ops);
            self.done = true;
            return Poll::Ready(Completed {
                send_failed: op.send_result,
                recv_result,
                send_buf: op.send_buf,
                recv_buf: op.recv_buf,
            });
        }
        match &op.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => op.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl Drop for RoundTrip {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut ops = self.ring.ops.borrow_mut();
        let completed = match ops[self.index].as_mut() {
            // Completed but never polled to the end: the kernel is done with
            // the buffers and `in_flight` already counts it out, so the slot
            // is released (counting it abandoned would leave `abandoned`
            // above `in_flight` for good).
            Some(op) if op.recv_result.is_some() => Some(op.retired),
            Some(op) => {
                op.abandoned = true;
                self.ring.abandoned.set(self.ring.abandoned.get() + 1);
                op.waker = None;
                None
            }
            None => None,
        };
        if let Some(retired) = completed {
            self.ring.release(&mut ops, self.index, retired);
        }
    }
}

thread_local! {
    static THREAD_RING: RefCell<Option<Rc<Ring>>> = const { RefCell::new(None) };
}

/// Make `ring` the one the runtime's park hook submits (None: no ring).
pub fn set_thread_ring(ring: Option<Rc<Ring>>) {
    THREAD_RING.with(|r| *r.borrow_mut() = ring);
}

/// For `tokio::runtime::Builder::on_thread_park`: submit this thread's pending entries.
pub fn submit_thread_ring() {
    THREAD_RING.with(|r| {
        if let Ok(ring) = r.try_borrow() {
            if let Some(ring) = ring.as_ref() {
                ring.submit();
            }
        }
    });
}

fn describe_setup_error(e: std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOSYS) => "io_uring_setup: not implemented by this kernel (ENOSYS)".into(),
        Some(libc::EPERM) => {
            let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
                .map(|s| format!(" (kernel.io_uring_disabled = {})", s.trim()))
                .unwrap_or_default();
            format!("io_uring_setup: not permitted (EPERM){sysctl}, e.g. a seccomp filter or the sysctl")
        }
        _ => format!("io_uring_setup: {e}"),
    }
}

#[cfg(test)]
mod tests;
