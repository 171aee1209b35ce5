//! perflab's engine: the hot paths (load drivers, data generators, histograms).
//!
//! Plain Rust with no knowledge of Python; `crates/engine-py` holds the PyO3 glue.

pub mod hist;
pub mod pg;
pub mod tpcb;
pub mod tpch;
pub mod units;
pub mod uring;

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
