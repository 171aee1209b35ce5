//! The engine's one error type: every fallible public call returns it, and
//! `crates/engine-py/src/errors.rs` maps each variant to one Python class.
//! Each client's own error turns into it where that error is declared
//! (`From<PgError>` in pg/error.rs, `From<MyError>` in mysql/mod.rs).

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum EngineError {
    /// Bad settings the user can fix; the message says what is allowed.
    Config(String),
    /// The target could not be reached, refused, or failed (connect,
    /// authenticate, prepare, COPY).
    Target(String),
    /// Stopped on request (a signal, or the caller's cancel).
    Interrupted,
    /// The machine or the engine itself failed (a thread, a runtime).
    Internal(String),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Config(m) | EngineError::Target(m) | EngineError::Internal(m) => {
                f.write_str(m)
            }
            EngineError::Interrupted => f.write_str("interrupted"),
        }
    }
}

impl std::error::Error for EngineError {}
