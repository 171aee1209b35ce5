//! One load harness for every driver; a protocol plugs into it with one trait.
//!
//! The harness owns what every load driver shares (BenchBase's `Worker`,
//! go-tpc's `pkg/measurement`): worker threads, each a single-threaded tokio
//! runtime that owns its clients outright; connection set-up timed apart from
//! the run; warm-up; closed loop, or open loop on a Poisson or constant
//! schedule with latency from the *intended* start and the schedule lag
//! recorded (no coordinated omission); the latency limit and skipped slots;
//! HDR histograms per transaction type and a per-second series; errors by
//! kind, retries up to `max_tries`, lost clients; the driver's CPU and the
//! client-bound verdict; cancellation. It knows no protocol.
//!
//! A protocol implements [`Protocol`]: open a client, draw and run one
//! transaction of a given type, and classify an error. TPC-B on PostgreSQL
//! (`crate::tpcb::TpcbProtocol`) is the first; the tests' echo protocol over
//! a local TCP listener (`tests` below) is the smallest complete example.
//!
//! Dispatch is static: the worker loop is generic over the protocol, so a
//! transaction costs what the protocol's own code costs (no boxed futures,
//! no virtual calls on the hot path).

mod config;
pub mod registry;
mod run;
mod schedule;
mod shared;
mod stats;
mod worker;

pub use config::{plan_pinning, HarnessConfig, PinChoice, Schedule};
pub use run::{Progress, Run};
pub use stats::{
    EngineEvent, IntervalReport, RunSummary, TxTypeSummary, CLIENT_BOUND_CPU_SHARE, IO_SLOW_MODE,
    PLACEMENT,
};

pub use crate::error::EngineError;
use crate::random::Prng;
use crate::uring::Ring;
use std::fmt;
use std::future::Future;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::Duration;

/// Index of a transaction type in [`Protocol::transaction_types`].
pub type TxType = usize;

/// What an error means for the run, as the protocol judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorClass {
    /// Try the same transaction again, with the same draws, up to
    /// `max_tries` (pgbench: serialization failure, deadlock). `kind` labels
    /// it when the tries run out.
    Retryable { kind: String },
    /// The transaction failed and is counted under `kind`; the client goes on
    /// (an SQL error, an HTTP 5xx).
    Counted { kind: String },
    /// The client cannot go on (connection lost); it stops and is counted as
    /// a lost client.
    Fatal,
}

/// One protocol the harness can drive. Implementations live beside their
/// workload (`tpcb::TpcbProtocol`); the harness never names one.
///
/// A client is owned by one worker thread for its whole life, so `Client`
/// need not be `Send`, and neither need the futures below.
pub trait Protocol: Send + Sync + 'static {
    /// One connection and whatever it keeps between transactions.
    type Client: 'static;
    /// One transaction's draws: made once, reused by every retry.
    type Request;
    type Error: fmt::Display;

    /// Whether clients can move their round trips onto the thread's io_uring
    /// (see [`Protocol::use_ring`]).
    const SUPPORTS_RING: bool = false;

    /// Whether a client can be woken by a timer while its round trip is in
    /// flight on the ring (a request timeout). Then the ring's closed-loop
    /// wait, which sleeps in the kernel while every client waits on the ring,
    /// returns at least every WAIT_LIMIT (20 ms) so that the runtime sees the
    /// timer. Without such timers, and when every transaction only reads
    /// ([`Protocol::read_only`]), the wait has no timeout: arming and
    /// cancelling the kernel's timer on every sleep cost about 1-3% of TPS on
    /// select-only (benchmarks/README.md; tpcb-like ran no faster without
    /// it). The run's end still wakes the wait, since the harness shuts the
    /// sockets of whatever is in flight.
    const TIMERS_IN_FLIGHT: bool = true;

    /// Names of the transaction types; histograms and counts are kept per type.
    fn transaction_types(&self) -> &[&'static str];

    /// Whether every transaction only reads, so that no client waits on
    /// another's locks or writes (pgbench's select-only, sysbench's
    /// point_select and read_only): `pin = "auto"` pins the driver's
    /// threads then (`plan_pinning`). False (the default) leaves them to
    /// the scheduler.
    fn read_only(&self) -> bool {
        false
    }

    /// Open (connect, authenticate, prepare) client number `client`.
    fn connect(&self, client: u32) -> impl Future<Output = Result<Self::Client, Self::Error>>;

    /// The client's socket, which the harness shuts down to stop a client
    /// blocked on a stalled server.
    fn socket(&self, client: &Self::Client) -> Option<RawFd>;

    /// The process on this machine that serves the client's connection (a
    /// PostgreSQL backend), when the protocol can tell: the harness then
    /// samples which CPU it runs on against the client's pinned driver
    /// thread (`stats::placement_event`). None (the default) for a server
    /// elsewhere or one that does not say.
    fn server_pid(&self, _client: &Self::Client) -> Option<u32> {
        None
    }

    /// Find out what `server_pid` needs when it costs round trips (a
    /// MariaDB connection's thread): called once per client after it
    /// connects, only in runs whose threads are pinned, where the pid is
    /// sampled. Nothing by default.
    fn locate(&self, _client: &mut Self::Client) -> impl Future<Output = ()> {
        async {}
    }

    /// Whether a client may move to another worker thread between two
    /// transactions: after [`Protocol::leave_thread`] it holds nothing tied
    /// to its thread (no `Rc`, no registration with the thread's runtime or
    /// ring), only owned data that may cross threads, and
    /// [`Protocol::join_thread`] on the new thread takes it up. The harness
    /// moves such a client to the thread on its server process's CPU
    /// (`HarnessConfig::follow`). An implementation that sets this vouches
    /// for that: the harness sends the client across threads unchecked.
    const MIGRATES: bool = false;

    /// Let go of the thread's epoll registration and ring (`MIGRATES`).
    fn leave_thread(&self, _client: &mut Self::Client) {}

    /// Take up a client that left another thread: onto `ring`, this
    /// thread's, when there is one, else this thread's epoll.
    fn join_thread(
        &self,
        _client: &mut Self::Client,
        _ring: Option<&Rc<Ring>>,
    ) -> Result<(), String> {
        Err("this protocol's clients do not move between threads".into())
    }

    /// The next transaction: its type and its draws, from the client's own
    /// random stream (seeded by the harness from the run's seed).
    fn next_transaction(
        &self,
        client: &mut Self::Client,
        rng: &mut Prng,
    ) -> (TxType, Self::Request);

    /// Run one try of a transaction. `Ok` means it committed.
    fn execute(
        &self,
        client: &mut Self::Client,
        tx: TxType,
        request: &Self::Request,
    ) -> impl Future<Output = Result<(), Self::Error>>;

    /// What an error from `execute` means.
    fn classify(&self, error: &Self::Error) -> ErrorClass;

    /// Move the client's round trips onto `ring`, once, after set-up. Only
    /// called when `SUPPORTS_RING`.
    fn use_ring(&self, _client: &mut Self::Client, _ring: &Rc<Ring>) -> Result<(), String> {
        Err("this protocol has no io_uring path".into())
    }

    /// Whether the protocol pauses around transactions (`pause_before`,
    /// `pause_after`). False (the default) compiles the pauses away.
    const HAS_PAUSES: bool = false;

    /// A pause before transaction `tx` (TPC-C's keying time), drawn from the
    /// client's stream. The latency runs from its end (closed loop); under a
    /// rate the intended start moves by it.
    fn pause_before(&self, _tx: TxType, _rng: &mut Prng) -> Option<Duration> {
        None
    }

    /// A pause after transaction `tx` ended (TPC-C's think time), outside
    /// any latency.
    fn pause_after(&self, _tx: TxType, _rng: &mut Prng) -> Option<Duration> {
        None
    }

    /// Whether committed transactions count the bytes of the response body
    /// they received (`body_bytes`), summed per type over the measured
    /// window. False (the default) compiles the counting away.
    const COUNTS_BODY_BYTES: bool = false;

    /// The bytes of the response body a committed transaction received
    /// (HTTP: the file's, checked against its known size). Only called when
    /// `COUNTS_BODY_BYTES`.
    fn body_bytes(&self, _request: &Self::Request) -> u64 {
        0
    }

    /// Whether the protocol times the operations inside a transaction (the
    /// statements of an OLTP event), kept as one histogram per operation
    /// type (`operation_types`) beside the transactions'. False (the
    /// default) compiles it away.
    const TIMES_OPERATIONS: bool = false;

    /// Names of the operation types; only read when `TIMES_OPERATIONS`.
    fn operation_types(&self) -> &[&'static str] {
        &[]
    }

    /// The operations of the transaction's last try, as (type, latency in
    /// µs), each handed to `record`; the client forgets them. Called once
    /// after every transaction when `TIMES_OPERATIONS`; the harness keeps
    /// those of committed transactions of the measured window.
    fn take_operations(&self, _client: &mut Self::Client, _record: impl FnMut(usize, u64)) {}

    /// Close a client at the end of the run (say goodbye to the server).
    fn close(&self, _client: Self::Client) {}
}

#[cfg(test)]
mod tests;
