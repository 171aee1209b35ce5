//! The same protocol on hyper 1.x's HTTP/1.1 client connection, built only
//! with the `hyper-client` feature, to measure hyper against perflab's own
//! client (benchmarks/http_vs_wrk.py --hyper). Same draws, same checks,
//! same error kinds; each connection's task runs on the worker's LocalSet.

use super::fileset::{file_size, CLASS_NAMES};
use super::protocol::{HttpProtocol, HttpRequest, Requests};
use super::response::{check_response, HttpError};
use crate::harness::{ErrorClass, Protocol, TxType};
use crate::random::Prng;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

pub struct HyperProtocol {
    inner: HttpProtocol,
}

pub struct HyperClient {
    sender: Option<SendRequest<Empty<Bytes>>>,
    first_fd: RawFd,
    served_on_connection: u32,
}

impl HyperProtocol {
    pub fn new(inner: HttpProtocol) -> HyperProtocol {
        HyperProtocol { inner }
    }

    async fn open(&self) -> Result<(SendRequest<Empty<Bytes>>, RawFd), HttpError> {
        let cfg = self.inner.config();
        let connect = tokio::net::TcpStream::connect(cfg.addr);
        let stream = match tokio::time::timeout(cfg.connect_timeout, connect).await {
            Err(_) => return Err(HttpError::ConnectTimeout),
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                return Err(HttpError::Refused(e))
            }
            Ok(Err(e)) => return Err(HttpError::Connect(e)),
            Ok(Ok(s)) => s,
        };
        stream.set_nodelay(true).map_err(HttpError::Connect)?;
        let fd = stream.as_raw_fd();
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| HttpError::Connect(io::Error::other(e)))?;
        tokio::task::spawn_local(async move {
            let _ = conn.await;
        });
        Ok((sender, fd))
    }

    async fn round_trip(
        &self,
        sender: &mut SendRequest<Empty<Bytes>>,
        r: &HttpRequest,
    ) -> Result<(), HttpError> {
        let cfg = self.inner.config();
        let (Requests::FileSet { prefix, .. }, HttpRequest::File { dir, class, file }) =
            (&cfg.requests, r)
        else {
            return Err(HttpError::BadResponse(
                "the hyper client asks for the file set only".into(),
            ));
        };
        let uri = format!("{prefix}dir{dir:05}/class{class}_{file}");
        let request = hyper::Request::get(uri)
            .header(hyper::header::HOST, cfg.host.as_str())
            .body(Empty::<Bytes>::new())
            .map_err(|e| HttpError::BadResponse(e.to_string()))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| HttpError::Io(io::Error::other(e)))?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut got = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| HttpError::Io(io::Error::other(e)))?;
            if let Some(data) = frame.data_ref() {
                got += data.len() as u64;
            }
        }
        check_response(
            status,
            got,
            Some(file_size(*class as usize, *file as usize)),
        )
    }
}

impl Protocol for HyperProtocol {
    type Client = HyperClient;
    type Request = HttpRequest;
    type Error = HttpError;
    const HAS_PAUSES: bool = true;
    const COUNTS_BODY_BYTES: bool = true;

    fn transaction_types(&self) -> &[&'static str] {
        &CLASS_NAMES
    }

    async fn connect(&self, _client: u32) -> Result<HyperClient, HttpError> {
        let (sender, fd) = self.open().await?;
        Ok(HyperClient {
            sender: Some(sender),
            first_fd: fd,
            served_on_connection: 0,
        })
    }

    fn socket(&self, client: &HyperClient) -> Option<RawFd> {
        Some(client.first_fd)
    }

    fn next_transaction(&self, _c: &mut HyperClient, rng: &mut Prng) -> (TxType, HttpRequest) {
        self.inner.draw(rng)
    }

    async fn execute(
        &self,
        c: &mut HyperClient,
        _tx: TxType,
        r: &HttpRequest,
    ) -> Result<(), HttpError> {
        let cfg = self.inner.config();
        let result = tokio::time::timeout(cfg.request_timeout, async {
            if c.sender.as_ref().is_none_or(|s| s.is_closed()) {
                c.sender = Some(self.open().await?.0);
                c.served_on_connection = 0;
            }
            let sender = c.sender.as_mut().expect("connected");
            sender
                .ready()
                .await
                .map_err(|e| HttpError::Io(io::Error::other(e)))?;
            self.round_trip(sender, r).await
        })
        .await;
        let result = result.unwrap_or(Err(HttpError::Timeout));
        match &result {
            Ok(()) | Err(HttpError::Status(_)) | Err(HttpError::LongBody { .. }) => {
                c.served_on_connection += 1;
                if cfg
                    .requests_per_connection
                    .is_some_and(|n| c.served_on_connection >= n)
                {
                    c.sender = None;
                }
            }
            Err(_) => c.sender = None,
        }
        result
    }

    fn classify(&self, error: &HttpError) -> ErrorClass {
        self.inner.classify(error)
    }

    fn pause_after(&self, tx: TxType, rng: &mut Prng) -> Option<Duration> {
        self.inner.pause_after(tx, rng)
    }

    fn body_bytes(&self, request: &HttpRequest) -> u64 {
        self.inner.body_bytes(request)
    }
}
