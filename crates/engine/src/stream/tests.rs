//! Senders through the harness and the receiver on loopback: what arrives is
//! what was sent, in both transports and both receiver designs.

use super::*;
use crate::harness::{HarnessConfig, Run};
use std::net::{IpAddr, Ipv4Addr};

fn run(
    transport: Transport,
    mode: ReceiverMode,
    flows: u32,
    size: usize,
    rate: Option<f64>,
) -> (u64, u64, u64) {
    let t0 = crate::sys::monotonic_ns();
    let receiver = Receiver::start(ReceiverConfig {
        transport,
        mode,
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        flows,
        netns: None,
        t0_ns: t0,
        seconds: 10,
    })
    .unwrap();
    let protocol = StreamProtocol::new(transport, receiver.targets.clone(), size);
    let sent = protocol.sent.clone();
    let mut cfg = HarnessConfig::closed_loop(flows, flows, 0.5);
    cfg.t0_ns = t0;
    cfg.rate_tps = rate;
    let summary = Run::run(cfg, protocol).unwrap();
    std::thread::sleep(Duration::from_millis(200)); // the last datagrams drain
    let totals = receiver.stop();
    assert_eq!(summary.lost_clients, 0);
    let bytes: u64 = totals.bytes.iter().sum();
    let packets: u64 = totals.packets.iter().sum();
    (sent.load(Ordering::Relaxed), bytes, packets)
}

use std::time::Duration;

#[test]
fn tcp_receivers_get_every_byte_written() {
    for mode in [ReceiverMode::Threads, ReceiverMode::Epoll] {
        let (sent, bytes, _) = run(Transport::Tcp, mode, 2, 65536, None);
        assert!(sent > 10, "{mode:?}: {sent}");
        // Every completed write arrived; a write cut at the deadline may add part of one per flow.
        assert!(
            bytes >= sent * 65536 && bytes <= (sent + 2) * 65536,
            "{mode:?}: {bytes} vs {sent}"
        );
    }
}

#[test]
fn udp_at_a_rate_arrives_whole_on_loopback() {
    for mode in [ReceiverMode::Threads, ReceiverMode::Epoll] {
        let (sent, bytes, packets) = run(Transport::Udp, mode, 2, 1472, Some(2000.0));
        // The rate holds the senders to the schedule's 1000 starts (closed
        // loop they would send far more); a busy machine may leave some
        // starts past the end, so the lower bound is loose.
        assert!(
            (400..=1200).contains(&sent),
            "{mode:?}: sent {sent} at 2000/s for 0.5 s"
        );
        assert_eq!(packets, sent, "{mode:?}");
        assert_eq!(bytes, sent * 1472, "{mode:?}");
    }
}

#[test]
fn a_namespace_that_does_not_exist_is_an_error() {
    let r = Receiver::start(ReceiverConfig {
        transport: Transport::Tcp,
        mode: ReceiverMode::Threads,
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        flows: 1,
        netns: Some("/run/netns/perflab-no-such".into()),
        t0_ns: 0,
        seconds: 1,
    });
    assert!(r.is_err());
}
