//! A minimal PostgreSQL frontend (protocol 3.0) for load driving and COPY.
//!
//! Why not tokio-postgres: its `Client` hands every request to a separate
//! `Connection` task over a channel and decodes results into typed rows; a
//! load driver needs neither. Here one client task owns its socket, writes
//! pre-encoded messages with text parameters (as libpq, so the server does the
//! same work as under pgbench), reads until ReadyForQuery, and only looks
//! inside ErrorResponse. Authentication (md5, SCRAM-SHA-256) comes from the
//! `postgres-protocol` crate, the same code tokio-postgres uses.
//!
//! Sockets are non-blocking and registered with tokio through `AsyncFd`, for
//! read readiness only (see `connect_inner`). After sending, a client first
//! tries to read, then waits for readiness, as libpq under pgbench does.
//! Clearing readiness after a draining read would save that read's EAGAIN;
//! measured with perf stat (select-only, 8 clients on 2 threads, a shared
//! 2-core machine) it did not lower context switches or CPU per transaction
//! beyond the noise, so the simpler path stays.
//!
//! With `use_ring` (the TPC-B driver under `io = "uring"`, after set-up), a
//! connection leaves epoll and its round trips go through the thread's
//! io_uring instead: `round_trip` leaves the request in `wbuf` and the first
//! read sends it, linked to the receive (see `crate::uring`).

mod codec;
mod conn;
mod conninfo;
mod error;

pub use codec::{parse_fixed, write_fixed, write_i64, Param};
pub use conn::{PgConn, Rows, COPY_CHUNK_BYTES};
pub use conninfo::ConnInfo;
// the key=value syntax, shared with the MySQL client's conninfo
pub(crate) use conninfo::conninfo_pairs;
pub use error::{PgError, SqlError};
