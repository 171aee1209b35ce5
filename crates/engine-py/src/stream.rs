//! The `stream` workload's senders (a harness protocol) and receiver.

use crate::errors::config_error;
use crate::glue::drive;
use crate::results::DriverResult;
use perflab_engine::harness::HarnessConfig;
use perflab_engine::stream::{Receiver, ReceiverConfig, ReceiverMode, StreamProtocol, Transport};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

/// Send from `flows` clients (in the caller's network namespace) to a
/// receiver started in `server_netns` on `address`; returns the senders'
/// DriverResult (one transaction per send) and the receiver's counts: a
/// dict of bytes and packets per second since t0, connections, cpu_s, and
/// the senders' sent (every send, warm-up included) and tcp_retransmits.
/// Its own settings, not the harness's object: flows rather than clients,
/// a rate of packets, no schedule or io (a sender paces evenly).
#[pyfunction]
#[pyo3(signature = (
    *, protocol, receiver, address, flows, size, t0_ns, duration, warmup=0.0, rate_pps=None,
    threads=None, server_netns=None, drain_s=0.3, mss=None, progress=None, cancel=None
))]
#[allow(clippy::too_many_arguments)]
fn stream_run<'py>(
    py: Python<'py>,
    protocol: &str,
    receiver: &str,
    address: &str,
    flows: u32,
    size: usize,
    t0_ns: u64,
    duration: f64,
    warmup: f64,
    rate_pps: Option<f64>,
    threads: Option<u32>,
    server_netns: Option<String>,
    drain_s: f64,
    mss: Option<u32>,
    progress: Option<Bound<'py, PyAny>>,
    cancel: Option<Bound<'py, PyAny>>,
) -> PyResult<(DriverResult, Py<PyAny>)> {
    // `duration` and `warmup` by the stream workload's (and the harness's) names, in seconds
    let (duration_s, warmup_s) = (duration, warmup);
    let transport: Transport = protocol.parse().map_err(config_error)?;
    let mode: ReceiverMode = receiver.parse().map_err(config_error)?;
    let address: IpAddr = address
        .parse()
        .map_err(|_| config_error(format!("address {address:?} is not an IP address")))?;
    if size == 0 || size > 16 << 20 {
        return Err(config_error(format!(
            "size {size}; allowed: 1 byte to 16 MiB"
        )));
    }
    let seconds = (warmup_s + duration_s + drain_s).ceil() as usize + 5;
    let rx = Receiver::start(ReceiverConfig {
        transport,
        mode,
        address,
        flows,
        netns: server_netns.map(|n| format!("/run/netns/{n}")),
        t0_ns,
        seconds,
    })
    .map_err(|e| config_error(format!("stream receiver on {address}: {e}")))?;
    let mut senders = StreamProtocol::new(transport, rx.targets.clone(), size);
    senders.mss = mss;
    let (sent, retrans) = (senders.sent.clone(), senders.retransmits.clone());
    let mut cfg =
        HarnessConfig::closed_loop(flows, threads.unwrap_or(flows).min(flows), duration_s);
    cfg.t0_ns = t0_ns;
    cfg.warmup_s = warmup_s;
    cfg.rate_tps = rate_pps;
    // A traffic generator paces evenly (iperf3 does), not as a crowd of users.
    cfg.schedule = perflab_engine::harness::Schedule::Constant;
    let result = drive(py, cfg, senders, progress, cancel, None);
    py.detach(|| std::thread::sleep(std::time::Duration::from_secs_f64(drain_s.max(0.0))));
    let totals = py.detach(|| rx.stop());
    let result = result?;
    let d = PyDict::new(py);
    d.set_item("bytes", totals.bytes)?;
    d.set_item("packets", totals.packets)?;
    d.set_item("connections", totals.connections)?;
    d.set_item("cpu_s", totals.cpu_s)?;
    d.set_item("sent", sent.load(Ordering::Relaxed))?;
    d.set_item("tcp_retransmits", retrans.load(Ordering::Relaxed))?;
    Ok((result, d.into_any().unbind()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(stream_run, m)?)
}
