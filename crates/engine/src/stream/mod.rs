//! The `stream` workload: bulk TCP streams or UDP datagrams from sender
//! flows to a receiver, as the netfilter study (arXiv 1502.05487) measured a
//! router's throughput, and as iperf3 does.
//!
//! The senders are a harness protocol (`StreamProtocol`): one client per
//! flow, one transaction per send (a TCP write of `chunk` bytes, or one UDP
//! datagram of `payload` bytes), so the harness gives them threads, warm-up,
//! duration, an open-loop rate (datagrams per second) and the driver's CPU.
//! The receiver (`Receiver`) is separate threads that count what arrives,
//! per second on the run's clock: goodput is what the receiver got, never
//! what the sender sent. Each side's threads may enter a network namespace
//! first (`netns`: a path such as /run/netns/NAME), so one process drives a
//! client namespace and receives in a server namespace across a router.
//!
//! Receivers: `Threads`, one blocking thread per connection (TCP) or per
//! flow's socket (UDP), and `Epoll`, one thread with every socket
//! non-blocking in one epoll set: the two designs the study compared.

mod receiver;

pub use receiver::{Receiver, ReceiverConfig, ReceiverMode, ReceiverTotals};

use crate::harness::{ErrorClass, Protocol, TxType};
use crate::random::Prng;
use crate::sys;
use std::fmt;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tcp" => Ok(Transport::Tcp),
            "udp" => Ok(Transport::Udp),
            other => Err(format!("protocol {other:?}; allowed: tcp, udp")),
        }
    }
}

/// Enter the network namespace at `path` (the calling thread only).
pub fn enter_netns(path: &str) -> std::io::Result<()> {
    sys::enter_netns(&std::fs::File::open(path)?)
}

/// The senders' side.
pub struct StreamProtocol {
    pub transport: Transport,
    /// One address per flow (UDP: each flow's own receiving port; TCP: the listener).
    pub targets: Vec<SocketAddr>,
    /// Bytes per send: the TCP write size, or the UDP payload.
    pub size: usize,
    /// Every send made (warm-up included), for UDP loss against the receiver's count.
    pub sent: Arc<AtomicU64>,
    /// TCP retransmissions (tcpi_total_retrans) over every sender socket, read at close.
    pub retransmits: Arc<AtomicU64>,
    /// TCP: the maximum segment size asked for (TCP_MAXSEG before connect),
    /// so a frame size smaller than the link's MTU is what goes on the wire.
    pub mss: Option<u32>,
    buffer: Vec<u8>,
}

impl StreamProtocol {
    pub fn new(transport: Transport, targets: Vec<SocketAddr>, size: usize) -> StreamProtocol {
        // Incompressible-looking bytes: a real payload, not zeros.
        let mut rng = Prng::seeded(0x5eed);
        let buffer = (0..size).map(|_| rng.next_u64() as u8).collect();
        StreamProtocol {
            transport,
            targets,
            size,
            sent: Arc::new(AtomicU64::new(0)),
            retransmits: Arc::new(AtomicU64::new(0)),
            mss: None,
            buffer,
        }
    }
}

pub enum StreamClient {
    Tcp(tokio::net::TcpStream),
    Udp(tokio::net::UdpSocket),
}

#[derive(Debug)]
pub struct StreamError(std::io::Error);

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream: {}", self.0)
    }
}

impl Protocol for StreamProtocol {
    type Client = StreamClient;
    type Request = ();
    type Error = StreamError;

    fn transaction_types(&self) -> &[&'static str] {
        &["send"]
    }

    async fn connect(&self, client: u32) -> Result<StreamClient, StreamError> {
        let target = self.targets[client as usize % self.targets.len()];
        match self.transport {
            Transport::Tcp => {
                let socket = if target.is_ipv4() {
                    tokio::net::TcpSocket::new_v4()
                } else {
                    tokio::net::TcpSocket::new_v6()
                }
                .map_err(StreamError)?;
                if let Some(mss) = self.mss {
                    sys::set_tcp_maxseg(socket.as_raw_fd(), mss).map_err(StreamError)?;
                }
                let s = socket.connect(target).await.map_err(StreamError)?;
                Ok(StreamClient::Tcp(s))
            }
            Transport::Udp => {
                let bind: SocketAddr = if target.is_ipv4() {
                    "0.0.0.0:0".parse().unwrap()
                } else {
                    "[::]:0".parse().unwrap()
                };
                let s = tokio::net::UdpSocket::bind(bind)
                    .await
                    .map_err(StreamError)?;
                s.connect(target).await.map_err(StreamError)?;
                Ok(StreamClient::Udp(s))
            }
        }
    }

    fn socket(&self, client: &StreamClient) -> Option<RawFd> {
        Some(match client {
            StreamClient::Tcp(s) => s.as_raw_fd(),
            StreamClient::Udp(s) => s.as_raw_fd(),
        })
    }

    fn next_transaction(&self, _client: &mut StreamClient, _rng: &mut Prng) -> (TxType, ()) {
        (0, ())
    }

    async fn execute(
        &self,
        client: &mut StreamClient,
        _tx: TxType,
        _request: &(),
    ) -> Result<(), StreamError> {
        match client {
            StreamClient::Tcp(s) => s.write_all(&self.buffer).await.map_err(StreamError)?,
            StreamClient::Udp(s) => {
                s.send(&self.buffer).await.map_err(StreamError)?;
            }
        }
        self.sent.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn classify(&self, error: &StreamError) -> ErrorClass {
        match error.0.kind() {
            // An ICMP error answered an earlier datagram (port unreachable, a
            // router's reject): counted, the flow goes on.
            std::io::ErrorKind::ConnectionRefused if self.transport == Transport::Udp => {
                ErrorClass::Counted {
                    kind: "refused".into(),
                }
            }
            _ => ErrorClass::Fatal,
        }
    }

    fn close(&self, client: StreamClient) {
        if let StreamClient::Tcp(s) = client {
            if let Some(r) = sys::tcp_total_retrans(s.as_raw_fd()) {
                self.retransmits.fetch_add(r as u64, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests;
