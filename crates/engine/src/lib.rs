//! perflab's engine: the hot paths (load drivers, data generators, histograms).
//!
//! Plain Rust with no knowledge of Python; `crates/engine-py` holds the PyO3 glue.
//!
//! Map: `harness` drives load for any protocol (schedule, stats, coordinator);
//! `tpcb` is its first protocol (pgbench's scripts on PostgreSQL) and its
//! loader; `tpch` generates TPC-H data; `pg` is the one PostgreSQL client
//! (conninfo, errors, connection, codec); `mysql` the one MySQL client;
//! `transport` the socket layer both share (epoll or io_uring); `uring` batches socket
//! round trips; `relay` delays a driver's link where netem is missing; `hist` holds HDR histograms; `random` the generators;
//! `sys` every libc call; `http` the web file set and its HTTP/1.1 driver.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod bulk;
pub mod error;
pub mod harness;
pub mod hist;
pub mod http;
pub mod mysql;
pub mod oltp;
pub mod pg;
pub mod random;
pub mod relay;
pub mod rowtable;
pub mod ssb;
pub mod stream;
pub mod sys;
pub mod tpcc;
pub mod tpch;
pub mod transport;
pub mod units;
pub mod uring;

// The workloads' modules (each declares `WORKLOAD`; see harness::registry),
// declared by build.rs.
include!(concat!(env!("OUT_DIR"), "/workloads.rs"));

/// Version of the engine crate, checked against the Python package at import.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// "release" or "debug": a debug engine makes every driver figure suspect.
pub fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}
