//! The HTTP protocol against small servers on loopback threads.

use super::*;
use crate::http::mix::{MixEntry, RequestMix};
use std::os::fd::AsRawFd;

fn protocol(prefix: &str, dirs: u32) -> HttpProtocol {
    HttpProtocol::new(HttpConfig {
        addr: "127.0.0.1:9".parse().unwrap(),
        host: "127.0.0.1:9".into(),
        requests: Requests::FileSet {
            prefix: prefix.into(),
            dirs,
            only: None,
        },
        requests_per_connection: None,
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(1),
        think_time: None,
    })
}

/// The first file of the set, every time.
const FIRST: HttpRequest = HttpRequest::File {
    dir: 0,
    class: 0,
    file: 0,
};

/// A config that asks the server at `addr` for `FIRST` only.
fn one_file(addr: SocketAddr) -> HttpConfig {
    let mut cfg = protocol("/", 1).cfg;
    cfg.addr = addr;
    cfg.requests = Requests::FileSet {
        prefix: "/".into(),
        dirs: 1,
        only: Some((0, 0, 0)),
    };
    cfg
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_request_names_the_file_under_the_prefix() {
    let p = protocol("/files/", 200_000);
    let mut out = Vec::new();
    let r = |dir, class, file| HttpRequest::File { dir, class, file };
    p.write_request(&mut out, &r(42, 2, 7));
    assert_eq!(
        out,
        b"GET /files/dir00042/class2_7 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n"
    );
    p.write_request(&mut out, &r(123_456, 0, 0));
    assert!(out.starts_with(b"GET /files/dir123456/class0_0 HTTP/1.1\r\n"));
    assert_eq!(
        super::super::fileset::relative_path(42, 2, 7),
        "dir00042/class2_7"
    );
}

#[test]
fn errors_are_counted_by_kind_and_a_refusal_loses_the_client() {
    let p = protocol("/", 1);
    let kind = |e: HttpError| match p.classify(&e) {
        ErrorClass::Counted { kind } => kind,
        other => panic!("{other:?}"),
    };
    assert_eq!(kind(HttpError::Status(404)), "4xx");
    assert_eq!(kind(HttpError::Status(503)), "5xx");
    assert_eq!(kind(HttpError::Timeout), "timeout");
    assert_eq!(kind(HttpError::ConnectTimeout), "connect");
    assert_eq!(kind(HttpError::ShortBody { got: 1, want: 2 }), "short-body");
    let reset = io::Error::from(io::ErrorKind::ConnectionReset);
    assert_eq!(kind(HttpError::Io(reset)), "reset");
    let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
    assert_eq!(kind(HttpError::Io(eof)), "closed");
    let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
    assert_eq!(p.classify(&HttpError::Refused(refused)), ErrorClass::Fatal);
}

/// A server answering every request with file class0_0's 102 bytes, on
/// one thread per connection; it counts the connections it accepted.
fn tiny_server() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicU32>) {
    tiny_server_answering(u32::MAX)
}

/// The same, answering only the first `answered` requests of each
/// connection and then holding it open in silence.
fn tiny_server_answering(
    answered: u32,
) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicU32>) {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(50) {
            let Ok(mut stream) = stream else { return };
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut have = Vec::new();
                let mut served = 0;
                loop {
                    let Ok(n) = stream.read(&mut buf) else { return };
                    if n == 0 {
                        return;
                    }
                    have.extend_from_slice(&buf[..n]);
                    while let Some(end) = find_head_end(&have, 0) {
                        have.drain(..end);
                        if served == answered {
                            continue;
                        }
                        served += 1;
                        let mut reply = b"HTTP/1.1 200 OK\r\nContent-Length: 102\r\n\r\n".to_vec();
                        reply.extend_from_slice(&[7u8; 102]);
                        if stream.write_all(&reply).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, accepted)
}

#[test]
fn a_client_reconnects_every_n_requests_on_the_same_fd_number() {
    let (addr, accepted) = tiny_server();
    let mut cfg = one_file(addr);
    cfg.requests_per_connection = Some(2);
    let p = HttpProtocol::new(cfg);
    let runtime = runtime();
    runtime.block_on(async {
        let mut c = p.connect(0).await.unwrap();
        let fd = p.socket(&c).unwrap();
        for _ in 0..10 {
            p.execute(&mut c, 0, &FIRST).await.unwrap();
            let now = c.conn.as_ref().map(|s| s.raw_fd());
            let kept = c.stale.as_ref().map(|s| s.as_raw_fd());
            assert_eq!(now.or(kept), Some(fd), "the client's fd number is kept");
        }
    });
    // 10 requests, 2 a connection: 5 connections.
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 5);
}

#[test]
fn a_request_times_out_after_its_own_timeout_and_the_next_reconnects() {
    let (addr, accepted) = tiny_server_answering(3);
    let mut cfg = one_file(addr);
    cfg.request_timeout = Duration::from_millis(300);
    let p = HttpProtocol::new(cfg);
    let runtime = runtime();
    runtime.block_on(async {
        let mut c = p.connect(0).await.unwrap();
        for round in 0..2 {
            for _ in 0..3 {
                p.execute(&mut c, 0, &FIRST).await.unwrap();
            }
            // A request that starts well after the first of its
            // connection still gets its whole timeout.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let started = std::time::Instant::now();
            let err = p.execute(&mut c, 0, &FIRST).await.unwrap_err();
            let waited = started.elapsed();
            assert!(matches!(err, HttpError::Timeout), "round {round}: {err}");
            // Its own whole timeout (from the connection's first request it
            // would be 200 ms less), not the default 30 s; a busy machine may
            // fire the timer late, so the upper bound is loose.
            assert!(
                waited >= Duration::from_millis(300) && waited < Duration::from_secs(10),
                "round {round}: timed out after {waited:?}"
            );
            assert!(c.conn.is_none(), "a timed-out connection is dropped");
        }
        // Each round's first request opened a connection (the first by connect).
        p.execute(&mut c, 0, &FIRST).await.unwrap();
    });
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[test]
#[ignore = "needs io_uring: ./dev test runs it with --ignored where io_uring_setup is permitted"]
fn on_the_ring_a_client_reads_whole_responses_and_reconnects_onto_the_ring() {
    crate::uring::probe().expect("io_uring");
    let (addr, accepted) = tiny_server();
    let mut cfg = one_file(addr);
    cfg.requests_per_connection = Some(3);
    let p = HttpProtocol::new(cfg);
    // As a harness worker runs: what the clients queue is submitted
    // when the runtime parks, and a reaper task collects completions.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(crate::uring::submit_thread_ring)
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    let enters = local.block_on(&runtime, async {
        let ring = Ring::new(1).unwrap();
        crate::uring::set_thread_ring(Some(ring.clone()));
        let reaper = tokio::task::spawn_local(ring.clone().reap_forever());
        let mut c = p.connect(0).await.unwrap();
        let fd = p.socket(&c).unwrap();
        p.use_ring(&mut c, &ring).unwrap();
        assert!(p.use_ring(&mut c, &ring).is_err(), "a client switches once");
        for i in 0..9 {
            p.execute(&mut c, 0, &FIRST).await.unwrap();
            match &c.conn {
                Some(Conn::Ring(s, _)) => assert_eq!(s.as_raw_fd(), fd),
                None => assert_eq!(i % 3, 2, "hung up only after every third request"),
                Some(Conn::Epoll(_)) => panic!("request {i} went through epoll"),
            }
        }
        let enters = ring.enters();
        drop(c);
        reaper.abort();
        crate::uring::set_thread_ring(None);
        enters
    });
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert!(
        enters >= 9,
        "every request went through io_uring_enter ({enters})"
    );
}

/// The protocol for a mix of GETs of `paths` (r1, r2, ... in their order)
/// at `addr`.
fn mix_of(addr: SocketAddr, paths: &[&str]) -> HttpProtocol {
    let entry = |path: &&str| MixEntry {
        method: "GET".into(),
        path: (*path).into(),
        headers: vec![],
        body: vec![],
        weight: 1.0,
    };
    let mix: Vec<MixEntry> = paths.iter().map(entry).collect();
    let mut cfg = one_file(addr);
    cfg.requests = Requests::Mix(RequestMix::new(&mix, "h").unwrap());
    HttpProtocol::new(cfg)
}

/// A server that answers each connection's one request and closes it: as
/// HTTP/1.0 with a body ended by the close (no Content-Length) "ok" for /ok;
/// /silent as HTTP/1.1 without Connection: close; /reset not at all (closed
/// with the request unread: a reset); 404 otherwise.
fn closing_server() -> SocketAddr {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(50) {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 1024];
            let mut peeked = 0;
            while find_head_end(&buf[..peeked], 0).is_none() {
                match stream.peek(&mut buf) {
                    Ok(n) if n > peeked => peeked = n,
                    Ok(_) => std::thread::yield_now(),
                    Err(_) => break,
                }
            }
            if buf.starts_with(b"GET /reset ") {
                continue;
            }
            let mut have = Vec::new();
            while find_head_end(&have, 0).is_none() {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => have.extend_from_slice(&buf[..n]),
                }
            }
            let reply: &[u8] = if have.starts_with(b"GET /ok ") {
                b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\nok, the whole body"
            } else if have.starts_with(b"GET /silent ") {
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
            } else if have.starts_with(b"GET /chunked ") {
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
            } else {
                b"HTTP/1.0 404 Not Found\r\n\r\nno"
            };
            let _ = stream.write_all(reply);
        }
    });
    addr
}

#[test]
fn a_mix_against_a_server_that_closes_every_connection_counts_the_churn() {
    let addr = closing_server();
    let p = mix_of(addr, &["/ok", "/missing", "/chunked"]);
    assert_eq!(p.transaction_types(), ["r1", "r2", "r3"]);
    let runtime = runtime();
    runtime.block_on(async {
        let mut c = p.connect(0).await.unwrap();
        for _ in 0..4 {
            p.execute(&mut c, 0, &HttpRequest::Mix(0)).await.unwrap();
            assert!(c.conn.is_none(), "the server's close ends the connection");
        }
        let err = p
            .execute(&mut c, 1, &HttpRequest::Mix(1))
            .await
            .unwrap_err();
        assert!(matches!(err, HttpError::Status(404)), "{err}");
        assert!(matches!(p.classify(&err), ErrorClass::Counted { kind } if kind == "4xx"));
        p.execute(&mut c, 2, &HttpRequest::Mix(2)).await.unwrap();
    });
    let churn = p.churn();
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(churn.opened.load(Relaxed), 6, "one connection a request");
    assert_eq!(churn.responses.load(Relaxed), 6);
    assert_eq!(churn.closed_by_server.load(Relaxed), 6);
    assert_eq!(churn.http10.load(Relaxed), 5);
    assert!(churn.connect_ns.load(Relaxed) > 0);
}

#[test]
fn a_close_without_a_word_is_counted_and_a_reset_is_its_own_kind() {
    let addr = closing_server();
    let p = mix_of(addr, &["/silent", "/reset"]);
    let runtime = runtime();
    runtime.block_on(async {
        let mut c = p.connect(0).await.unwrap();
        for _ in 0..4 {
            p.execute(&mut c, 0, &HttpRequest::Mix(0)).await.unwrap();
            assert!(c.conn.is_some(), "nothing said the connection ends");
        }
        // A new client: its first request finds no kept-alive connection
        // to send again, so the reset is an error.
        let mut c = p.connect(0).await.unwrap();
        let err = p
            .execute(&mut c, 1, &HttpRequest::Mix(1))
            .await
            .unwrap_err();
        assert!(
            matches!(p.classify(&err), ErrorClass::Counted { kind } if kind == "reset"),
            "{err}"
        );
    });
    let churn = p.churn();
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(churn.responses.load(Relaxed), 4);
    assert_eq!(churn.closed_by_server.load(Relaxed), 0);
    // Each request after the first found its connection closed.
    assert_eq!(churn.closed_silently.load(Relaxed), 3);
}
