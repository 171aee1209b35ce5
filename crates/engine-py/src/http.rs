//! Bindings of the web workload: the SPECweb99-like file set (layout and
//! cached generation) and the HTTP/1.1 driver (the harness with
//! `HttpProtocol`). Glue only; see `perflab_engine::http`.

use crate::errors::{config_error, engine_error};
use crate::glue::run_blocking;
use crate::harness::harness_binding;
use crate::results::{DriverEvent, DriverResult};
use perflab_engine::http::fileset::{self, Prepared};
use perflab_engine::http::{Churn, HttpConfig, HttpProtocol, MixEntry, RequestMix, Requests};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::time::Duration;

/// A file set found in the cache or generated into it.
#[pyclass(module = "perflab._engine", frozen, get_all)]
pub struct FileSetReport {
    pub root: String,
    pub dirs: u32,
    pub files: u64,
    pub size_bytes: u64,
    pub generated: bool,
    pub seconds: f64,
}

impl From<Prepared> for FileSetReport {
    fn from(p: Prepared) -> Self {
        FileSetReport {
            root: p.root.display().to_string(),
            dirs: p.dirs,
            files: p.files,
            size_bytes: p.bytes,
            generated: p.generated,
            seconds: p.seconds,
        }
    }
}

/// Directories of a file set: from a size in bytes, or by SPECweb99's rule
/// from a number of connections.
#[pyfunction]
#[pyo3(signature = (*, size_bytes=None, connections=None))]
fn fileset_dirs(size_bytes: Option<u64>, connections: Option<u32>) -> PyResult<u32> {
    match (size_bytes, connections) {
        (Some(b), None) => Ok(fileset::dirs_for_size(b)),
        (None, Some(c)) => Ok(fileset::dirs_for_connections(c)),
        _ => Err(config_error(
            "give the file set's size or its connections, one of them",
        )),
    }
}

/// Bytes of one directory of the file set (36 files).
#[pyfunction]
fn fileset_dir_bytes() -> u64 {
    fileset::dir_bytes()
}

/// Size in bytes of file `file` of class `class`.
#[pyfunction]
fn fileset_file_size(class_: usize, file: usize) -> PyResult<u64> {
    if class_ >= fileset::CLASSES || file >= fileset::FILES_PER_CLASS {
        return Err(config_error(format!(
            "class {class_} file {file} is not in the layout; allowed: class 0..3, file 0..8"
        )));
    }
    Ok(fileset::file_size(class_, file))
}

/// The first `count` request paths ("dir00003/class1_4") perflab's chooser
/// draws from `seed`: the mix a peer tool (wrk's Lua) can replay.
#[pyfunction]
fn fileset_request_paths(dirs: u32, seed: u64, count: usize) -> PyResult<Vec<String>> {
    if dirs == 0 {
        return Err(config_error("dirs must be at least 1"));
    }
    let chooser = fileset::Chooser::new(dirs);
    let mut rng = perflab_engine::random::Prng::seeded(seed);
    Ok((0..count)
        .map(|_| {
            let (class, dir, file) = chooser.choose(&mut rng);
            fileset::relative_path(dir, class, file)
        })
        .collect())
}

/// The file set of `dirs` directories from `seed` in `cache_dir`: reused
/// when complete and of the right sizes, else generated on `jobs` threads.
#[pyfunction]
#[pyo3(signature = (cache_dir, *, dirs, seed, jobs, cancel=None))]
fn fileset_prepare<'py>(
    py: Python<'py>,
    cache_dir: PathBuf,
    dirs: u32,
    seed: u64,
    jobs: u32,
    cancel: Option<Bound<'py, PyAny>>,
) -> PyResult<FileSetReport> {
    let result = run_blocking(py, "perflab-fileset", cancel.as_ref(), None, |abort, _| {
        fileset::prepare(&cache_dir, dirs, seed, jobs, abort)
    })?;
    Ok(result.map_err(engine_error)?.into())
}

/// One request of a mix as Python gives it: (method, path, headers, body, weight).
type MixTuple = (String, String, Vec<(String, String)>, Vec<u8>, f64);

/// The run's connection churn as one event, "http-connections", of
/// `key=value` words (summed over workers by whoever merges events).
fn churn_event(churn: &Churn, t_s: f64) -> DriverEvent {
    use std::sync::atomic::Ordering::Relaxed;
    DriverEvent {
        t_s,
        kind: "http-connections".into(),
        message: format!(
            "opened={} connect_ns={} responses={} closed_by_server={} closed_silently={} http10={}",
            churn.opened.load(Relaxed),
            churn.connect_ns.load(Relaxed),
            churn.responses.load(Relaxed),
            churn.closed_by_server.load(Relaxed),
            churn.closed_silently.load(Relaxed),
            churn.http10.load(Relaxed),
        ),
    }
}

harness_binding! {
    /// Drive HTTP/1.1 requests through the harness: GETs of the file set
    /// (by_type is the four classes, each with its body bytes), or, with
    /// `request_mix`, the mix's requests by weight (by_type: "r1", "r2", ...
    /// in its order). The events end with "http-connections" (churn_event).
    #[pyo3(signature = (
        address, *, host, dirs=None, request_mix=None, prefix="/", requests_per_connection=None,
        connect_timeout_s=5.0, request_timeout_s=30.0, think_time_s=None, only=None, client="own"
    ))]
    fn http_run<'py>(
        py: Python<'py>,
        address: &str,
        host: String,
        dirs: Option<u32>,
        request_mix: Option<Vec<MixTuple>>,
        prefix: &str,
        requests_per_connection: Option<u32>,
        connect_timeout_s: f64,
        request_timeout_s: f64,
        think_time_s: Option<f64>,
        only: Option<(u32, usize, usize)>,
        client: &str,
    ) with harness -> PyResult<DriverResult> {
        let addr = address.parse().map_err(|_| {
            config_error(format!(
                "address {address:?} is not allowed; allowed: IP:port"
            ))
        })?;
        let seconds = |name: &str, s: f64| {
            if s.is_finite() && s > 0.0 {
                Ok(Duration::from_secs_f64(s))
            } else {
                Err(config_error(format!("{name} {s} s must be > 0")))
            }
        };
        if requests_per_connection == Some(0) {
            return Err(config_error("requests_per_connection must be at least 1"));
        }
        let requests = match (request_mix, dirs) {
            (Some(mix), None) => {
                if only.is_some() {
                    return Err(config_error(
                        "only is for the file set; give it or a request_mix",
                    ));
                }
                let entries: Vec<MixEntry> = mix
                    .into_iter()
                    .map(|(method, path, headers, body, weight)| MixEntry {
                        method,
                        path,
                        headers,
                        body,
                        weight,
                    })
                    .collect();
                Requests::Mix(RequestMix::new(&entries, &host).map_err(config_error)?)
            }
            (None, Some(dirs)) => {
                if let Some((dir, class, file)) = only {
                    if dir >= dirs || class >= fileset::CLASSES || file >= fileset::FILES_PER_CLASS {
                        return Err(config_error(format!(
                            "only = ({dir}, {class}, {file}) is not in a set of {dirs} directories"
                        )));
                    }
                }
                Requests::FileSet {
                    prefix: prefix.to_string(),
                    dirs,
                    only,
                }
            }
            _ => {
                return Err(config_error(
                    "give the file set's dirs or a request_mix, one of them",
                ))
            }
        };
        let protocol = HttpProtocol::new(HttpConfig {
            addr,
            host,
            requests,
            requests_per_connection,
            connect_timeout: seconds("connect_timeout", connect_timeout_s)?,
            request_timeout: seconds("request_timeout", request_timeout_s)?,
            think_time: think_time_s.map(|s| seconds("think_time", s)).transpose()?,
        });
        match client {
            "own" => {
                let churn = protocol.churn();
                let mut out = harness.drive(py, protocol)?;
                let end = out.measure_start_t_s + out.measured_s;
                out.events.push(churn_event(&churn, end));
                Ok(out)
            }
            #[cfg(feature = "hyper-client")]
            "hyper" => {
                let protocol = perflab_engine::http::hyper_client::HyperProtocol::new(protocol);
                harness.drive(py, protocol)
            }
            #[cfg(not(feature = "hyper-client"))]
            "hyper" => Err(config_error(
                "client = \"hyper\": this engine was built without hyper; build perflab-engine-py \
                 with --features hyper-client",
            )),
            other => Err(config_error(format!(
                "client {other:?} is not allowed; allowed: own, hyper"
            ))),
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FileSetReport>()?;
    m.add_function(wrap_pyfunction!(fileset_dirs, m)?)?;
    m.add_function(wrap_pyfunction!(fileset_dir_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(fileset_file_size, m)?)?;
    m.add_function(wrap_pyfunction!(fileset_prepare, m)?)?;
    m.add_function(wrap_pyfunction!(fileset_request_paths, m)?)?;
    m.add_function(wrap_pyfunction!(http_run, m)?)?;
    Ok(())
}
