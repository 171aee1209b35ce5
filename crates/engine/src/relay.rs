//! A delay relay: a TCP forwarder that holds every chunk it reads for a set
//! delay (plus jitter) before writing it on, in both directions.
//!
//! It shapes a driver's link where the kernel has no netem
//! (`CONFIG_NET_SCH_NETEM` unset): perflab starts it inside the driver's
//! network namespace (the threads it spawns inherit the caller's namespace,
//! so a caller that entered the namespace gets a relay whose sockets live
//! there), the driver connects to it on the namespace's loopback, and it
//! connects on to the server across the veth pair. The same idea as
//! toxiproxy's latency toxic, written for this purpose.
//!
//! Per connection and direction there are two threads: a reader that stamps
//! each chunk with its release time (arrival + delay + a uniform draw in
//! [-jitter, +jitter], never earlier than the chunk before it, since TCP does
//! not reorder) and a writer that sleeps until that time and writes. Each
//! direction thus adds `delay` to whatever crosses it, and a request and its
//! answer add twice the delay, as netem on both ends of a link would. The
//! threads' CPU time is summed so the driver's CPU can include it.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::random::Prng;
use crate::sys;

/// Largest chunk read (and held) at once.
const CHUNK: usize = 64 * 1024;

/// What the relay did, for the run's record.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RelayStats {
    pub connections: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// CPU time of every relay thread (accept, readers, writers), seconds.
    pub cpu_s: f64,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    connections: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    cpu_ns: AtomicU64,
    /// Open sockets by id, so that stop() can shut them all down.
    sockets: Mutex<HashMap<u64, Vec<TcpStream>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn add_thread_cpu(&self) {
        if let Some(s) = sys::thread_cpu_s() {
            self.cpu_ns.fetch_add((s * 1e9) as u64, Ordering::Relaxed);
        }
    }
}

/// A running relay; `stop()` (or drop) closes every socket and joins every thread.
pub struct Relay {
    port: u16,
    listener_fd: i32,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    /// Listen on `listen` (e.g. "127.0.0.1:0") and forward each connection to
    /// `upstream` ("host:port"), holding each chunk `delay` ± `jitter`.
    pub fn start(
        listen: &str,
        upstream: &str,
        delay: Duration,
        jitter: Duration,
        seed: u64,
    ) -> io::Result<Relay> {
        if jitter > delay {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("jitter {jitter:?} is larger than the delay {delay:?}"),
            ));
        }
        let listener = TcpListener::bind(listen)?;
        let port = listener.local_addr()?.port();
        let listener_fd = listener.as_raw_fd();
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let upstream = upstream.to_string();
        let accept = std::thread::Builder::new()
            .name("perflab-relay".into())
            .spawn(move || {
                accept_loop(listener, &upstream, delay, jitter, seed, &s);
                s.add_thread_cpu();
            })?;
        Ok(Relay {
            port,
            listener_fd,
            shared,
            accept: Some(accept),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Counts so far; cpu_s counts only threads that have ended.
    pub fn stats(&self) -> RelayStats {
        let s = &self.shared;
        RelayStats {
            connections: s.connections.load(Ordering::Relaxed),
            bytes_up: s.bytes_up.load(Ordering::Relaxed),
            bytes_down: s.bytes_down.load(Ordering::Relaxed),
            cpu_s: s.cpu_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }

    /// Close everything and wait for every thread; the final stats.
    pub fn stop(&mut self) -> RelayStats {
        if let Some(accept) = self.accept.take() {
            self.shared.stop.store(true, Ordering::SeqCst);
            // shutdown(2) on a listening socket wakes a blocked accept(2) with EINVAL.
            sys::shutdown_socket(self.listener_fd);
            let _ = accept.join();
            for socks in self.shared.sockets.lock().unwrap().values() {
                for sock in socks {
                    let _ = sock.shutdown(Shutdown::Both);
                }
            }
            let threads = std::mem::take(&mut *self.shared.threads.lock().unwrap());
            for t in threads {
                let _ = t.join();
            }
        }
        self.stats()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(
    listener: TcpListener,
    upstream: &str,
    delay: Duration,
    jitter: Duration,
    seed: u64,
    s: &Arc<Shared>,
) {
    let mut id = 0u64;
    loop {
        let Ok((down, _)) = listener.accept() else {
            if s.stop.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10)); // EMFILE and the like: do not spin
            continue;
        };
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        id += 1;
        let Ok(up) = TcpStream::connect(upstream) else {
            // The client sees its connection closed, as from an unreachable server.
            continue;
        };
        let _ = down.set_nodelay(true);
        let _ = up.set_nodelay(true);
        s.connections.fetch_add(1, Ordering::Relaxed);
        let pairs = [
            (down.try_clone(), up.try_clone(), true),
            (up.try_clone(), down.try_clone(), false),
        ];
        s.sockets.lock().unwrap().insert(id, vec![down, up]);
        for (n, (src, dst, upward)) in pairs.into_iter().enumerate() {
            let (Ok(src), Ok(dst)) = (src, dst) else {
                continue;
            };
            let rng = Prng::seeded(seed ^ id.wrapping_mul(0x9E37_79B9) ^ n as u64);
            let counter = if upward { 0 } else { 1 };
            spawn_direction(s, src, dst, delay, jitter, rng, counter);
        }
    }
}

/// A reader and a writer thread for one direction of one connection.
fn spawn_direction(
    s: &Arc<Shared>,
    mut src: TcpStream,
    mut dst: TcpStream,
    delay: Duration,
    jitter: Duration,
    mut rng: Prng,
    counter: usize,
) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let rs = s.clone();
    let reader = std::thread::Builder::new()
        .name("perflab-relay-r".into())
        .spawn(move || {
            let mut last = Instant::now();
            loop {
                let mut buf = vec![0u8; CHUNK];
                match src.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        buf.truncate(n);
                        let held = hold(delay, jitter, &mut rng);
                        last = (Instant::now() + held).max(last);
                        if tx.send((last, buf)).is_err() {
                            break;
                        }
                    }
                }
            }
            rs.add_thread_cpu();
        });
    let ws = s.clone();
    let writer = std::thread::Builder::new()
        .name("perflab-relay-w".into())
        .spawn(move || {
            let bytes = if counter == 0 {
                &ws.bytes_up
            } else {
                &ws.bytes_down
            };
            while let Ok((release, buf)) = rx.recv() {
                let now = Instant::now();
                if release > now {
                    std::thread::sleep(release - now);
                }
                if dst.write_all(&buf).is_err() {
                    break;
                }
                bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
            }
            // The source closed (or failed): pass the end of stream on.
            let _ = dst.shutdown(Shutdown::Write);
            ws.add_thread_cpu();
        });
    let mut threads = s.threads.lock().unwrap();
    threads.extend(reader.ok());
    threads.extend(writer.ok());
}

/// delay + uniform in [-jitter, +jitter].
fn hold(delay: Duration, jitter: Duration, rng: &mut Prng) -> Duration {
    if jitter.is_zero() {
        return delay;
    }
    let j = jitter.as_secs_f64() * (2.0 * rng.next_f64() - 1.0);
    Duration::from_secs_f64((delay.as_secs_f64() + j).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo_server() -> (u16, JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let h = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            loop {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => c.write_all(&buf[..n]).unwrap(),
                }
            }
        });
        (port, h)
    }

    #[test]
    fn a_round_trip_takes_twice_the_delay() {
        let (port, server) = echo_server();
        let delay = Duration::from_millis(5);
        let mut relay = Relay::start(
            "127.0.0.1:0",
            &format!("127.0.0.1:{port}"),
            delay,
            Duration::ZERO,
            1,
        )
        .unwrap();
        let mut c = TcpStream::connect(("127.0.0.1", relay.port())).unwrap();
        c.set_nodelay(true).unwrap();
        let mut rtts = Vec::new();
        for i in 0..10u8 {
            let t = Instant::now();
            c.write_all(&[i; 100]).unwrap();
            let mut got = [0u8; 100];
            c.read_exact(&mut got).unwrap();
            assert_eq!(got, [i; 100]);
            rtts.push(t.elapsed());
        }
        rtts.sort();
        let median = rtts[5];
        assert!(median >= 2 * delay, "median {median:?}");
        assert!(
            median < 2 * delay + Duration::from_millis(5),
            "median {median:?}"
        );
        drop(c);
        server.join().unwrap();
        let stats = relay.stop();
        assert_eq!(stats.connections, 1);
        assert_eq!(stats.bytes_up, 1000);
        assert_eq!(stats.bytes_down, 1000);
        assert!(stats.cpu_s > 0.0);
    }

    #[test]
    fn jitter_keeps_the_order_and_stays_in_bounds() {
        let mut rng = Prng::seeded(7);
        let (d, j) = (Duration::from_millis(2), Duration::from_micros(200));
        for _ in 0..1000 {
            let h = hold(d, j, &mut rng);
            assert!(h >= d - j && h <= d + j, "{h:?}");
        }
        assert!(Relay::start("127.0.0.1:0", "127.0.0.1:1", d, d * 2, 1).is_err());
    }

    #[test]
    fn stop_ends_every_thread_with_connections_open() {
        let (port, _server) = echo_server();
        let mut relay = Relay::start(
            "127.0.0.1:0",
            &format!("127.0.0.1:{port}"),
            Duration::from_millis(1),
            Duration::ZERO,
            1,
        )
        .unwrap();
        let c = TcpStream::connect(("127.0.0.1", relay.port())).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        relay.stop();
        // A stop that waited for the open connection would never return:
        // the bound only tells a hang from a slow machine.
        assert!(t.elapsed() < Duration::from_secs(30));
        drop(c);
    }
}
