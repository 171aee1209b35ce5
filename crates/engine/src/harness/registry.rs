//! The workloads on the harness, each declared in its own module: a module
//! (`src/NAME/mod.rs`, or `src/NAME.rs`) with a line
//!
//! ```text
//! pub static WORKLOAD: Workload = Workload { name: "ycsb", run, load: Some(load) };
//! ```
//!
//! is a workload. The engine's build script (`crates/engine/build.rs`) finds
//! that line, declares the module (no line in `lib.rs`) and lists it in
//! [`WORKLOADS`]; the Python module (`crates/engine-py/src/workloads.rs`)
//! then has `NAME_run` (and `NAME_load`) with no binding file of its own.
//!
//! What crosses from Python is the harness's config (one object) and the
//! workload's own settings as [`Params`] (name -> value); `run` builds the
//! protocol from them and starts it with [`start`].

use super::{HarnessConfig, Progress, Protocol, Run, RunSummary};
use crate::error::EngineError;
use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// A workload's own setting, as Python gave it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// A workload's own settings by name (the harness's are in `HarnessConfig`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params(BTreeMap<String, Value>);

impl Params {
    pub fn insert(&mut self, key: impl Into<String>, value: Value) {
        self.0.insert(key.into(), value);
    }

    fn get(&self, key: &str) -> Result<&Value, EngineError> {
        self.0
            .get(key)
            .ok_or_else(|| EngineError::Config(format!("{key} is missing")))
    }

    fn wrong(key: &str, what: &str, value: &Value) -> EngineError {
        EngineError::Config(format!("{key} = {value:?} is not allowed; allowed: {what}"))
    }

    pub fn str(&self, key: &str) -> Result<&str, EngineError> {
        match self.get(key)? {
            Value::Str(s) => Ok(s),
            other => Err(Self::wrong(key, "a string", other)),
        }
    }

    /// A string setting parsed (a script name, a mode); the parser's message
    /// says what is allowed.
    pub fn parse<T: FromStr<Err = String>>(&self, key: &str) -> Result<T, EngineError> {
        self.str(key)?.parse().map_err(EngineError::Config)
    }

    /// An integer setting in `T`'s range.
    pub fn int<T: TryFrom<i64>>(&self, key: &str) -> Result<T, EngineError> {
        match self.get(key)? {
            Value::Int(n) => T::try_from(*n)
                .map_err(|_| Self::wrong(key, "an integer in range", &Value::Int(*n))),
            other => Err(Self::wrong(key, "an integer", other)),
        }
    }

    /// An integer setting, `default` when Python left it out.
    pub fn int_or<T: TryFrom<i64>>(&self, key: &str, default: T) -> Result<T, EngineError> {
        if self.0.contains_key(key) {
            self.int(key)
        } else {
            Ok(default)
        }
    }

    pub fn float(&self, key: &str) -> Result<f64, EngineError> {
        match self.get(key)? {
            Value::Float(x) => Ok(*x),
            Value::Int(n) => Ok(*n as f64),
            other => Err(Self::wrong(key, "a number", other)),
        }
    }

    pub fn bool(&self, key: &str) -> Result<bool, EngineError> {
        match self.get(key)? {
            Value::Bool(b) => Ok(*b),
            other => Err(Self::wrong(key, "true or false", other)),
        }
    }
}

/// A run in progress, whatever its protocol: what the Python glue polls.
pub trait Running: Send + Sync {
    /// A gated run: every client is connected.
    fn connected(&self) -> bool;
    /// A gated run: start at this CLOCK_MONOTONIC instant (ns).
    fn go_at(&self, monotonic_ns: u64);
    fn next_progress(&self, timeout: Duration) -> Progress;
    fn abort(&self);
    fn join(self: Box<Self>) -> Result<RunSummary, EngineError>;
}

impl<P: Protocol> Running for Run<P> {
    fn connected(&self) -> bool {
        Run::connected(self)
    }
    fn go_at(&self, monotonic_ns: u64) {
        Run::go_at(self, monotonic_ns)
    }
    fn next_progress(&self, timeout: Duration) -> Progress {
        Run::next_progress(self, timeout)
    }
    fn abort(&self) {
        Run::abort(self)
    }
    fn join(self: Box<Self>) -> Result<RunSummary, EngineError> {
        Run::join(*self)
    }
}

/// Start `protocol` under `cfg`; `gated`: its clients connect, then wait
/// for `go_at` (one of several drivers).
pub fn start<P: Protocol>(
    cfg: HarnessConfig,
    protocol: P,
    gated: bool,
) -> Result<Box<dyn Running>, EngineError> {
    Ok(Box::new(if gated {
        Run::start_gated(cfg, protocol)?
    } else {
        Run::start(cfg, protocol)?
    }))
}

/// What a workload's loader did: (step, seconds) in order, (table, rows).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Loaded {
    pub steps: Vec<(String, f64)>,
    pub rows: Vec<(String, i64)>,
}

/// Start a run: the target's conninfo (or address), the workload's own
/// settings, the harness's config, gated or not.
pub type RunFn = fn(&str, &Params, HarnessConfig, bool) -> Result<Box<dyn Running>, EngineError>;
/// Load the data set: conninfo, own settings, the abort flag (checked
/// between chunks) and a callback naming each step as it starts.
pub type LoadFn =
    fn(&str, &Params, &AtomicBool, &mut dyn FnMut(&str)) -> Result<Loaded, EngineError>;

/// One workload on the harness, declared in its own module as `WORKLOAD`.
pub struct Workload {
    /// Its kind, as the experiment file names it (`[workload] kind`).
    pub name: &'static str,
    pub run: RunFn,
    pub load: Option<LoadFn>,
}

/// Every declared workload, in name order (written by the build script).
pub static WORKLOADS: &[&Workload] = crate::DECLARED_WORKLOADS;

/// The workload named `name`; ConfigError lists the declared ones.
pub fn find(name: &str) -> Result<&'static Workload, EngineError> {
    WORKLOADS
        .iter()
        .copied()
        .find(|w| w.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = WORKLOADS.iter().map(|w| w.name).collect();
            EngineError::Config(format!(
                "workload {name:?} is not declared; declared: {}",
                names.join(", ")
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_say_what_is_wrong() {
        let mut p = Params::default();
        p.insert("scale", Value::Int(-1));
        p.insert("script", Value::Str("nope".into()));
        assert!(matches!(p.int::<u32>("scale"), Err(EngineError::Config(_))));
        assert_eq!(p.int::<i64>("scale"), Ok(-1));
        assert!(matches!(p.str("missing"), Err(EngineError::Config(m)) if m.contains("missing")));
        assert_eq!(p.float("scale"), Ok(-1.0));
        assert!(p.bool("script").is_err());
    }

    #[test]
    fn every_declared_workload_is_found_by_name() {
        assert!(!WORKLOADS.is_empty());
        for w in WORKLOADS {
            assert_eq!(find(w.name).map(|f| f.name), Ok(w.name));
        }
        assert!(matches!(find("no-such"), Err(EngineError::Config(m)) if m.contains("declared")));
    }
}
