//! A response's head (status, Content-Length, whether the connection ends
//! after it), the errors of one request, and what makes a response good.

use std::fmt;
use std::io;

#[derive(Debug)]
pub enum HttpError {
    /// Nobody listens: the server is gone; the client cannot go on.
    Refused(io::Error),
    Connect(io::Error),
    ConnectTimeout,
    Timeout,
    Status(u16),
    /// Fewer body bytes than the file has (Content-Length or a close mid-body).
    ShortBody {
        got: u64,
        want: u64,
    },
    /// More body bytes than the file has.
    LongBody {
        got: u64,
        want: u64,
    },
    BadResponse(String),
    /// The connection failed while a response was due.
    Io(io::Error),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Refused(e) => write!(f, "http connect: {e}"),
            HttpError::Connect(e) => write!(f, "http connect: {e}"),
            HttpError::ConnectTimeout => f.write_str("http connect: timed out"),
            HttpError::Timeout => f.write_str("http request timed out"),
            HttpError::Status(s) => write!(f, "http status {s}"),
            HttpError::ShortBody { got, want } => {
                write!(f, "http short body: {got} of {want} bytes")
            }
            HttpError::LongBody { got, want } => {
                write!(f, "http body of {got} bytes, the file has {want}")
            }
            HttpError::BadResponse(m) => write!(f, "http bad response: {m}"),
            HttpError::Io(e) => write!(f, "http connection: {e}"),
        }
    }
}

impl HttpError {
    /// Whether the connection is unusable after this error.
    pub(crate) fn drops_connection(&self) -> bool {
        !matches!(self, HttpError::Status(_) | HttpError::LongBody { .. })
    }
}

/// A whole response is good when it is a 200 with the file's exact size
/// (`want`), or, where the size is not known (a request of a mix), any
/// status below 400 (as wrk counts).
pub(crate) fn check_response(status: u16, got: u64, want: Option<u64>) -> Result<(), HttpError> {
    let Some(want) = want else {
        return if status < 400 {
            Ok(())
        } else {
            Err(HttpError::Status(status))
        };
    };
    if status != 200 {
        return Err(HttpError::Status(status));
    }
    if got < want {
        return Err(HttpError::ShortBody { got, want });
    }
    if got > want {
        return Err(HttpError::LongBody { got, want });
    }
    Ok(())
}

/// What the response head said.
pub(crate) struct Head {
    pub status: u16,
    pub content_length: Option<u64>,
    /// The connection ends after this response (HTTP/1.0 or Connection: close).
    pub close: bool,
    /// The status line said HTTP/1.0.
    pub http10: bool,
    /// Transfer-Encoding: chunked (the body is framed by `Chunked`).
    pub chunked: bool,
    /// Bytes of the head, through the blank line.
    pub len: usize,
}

/// The blank line's end: the length of the head, if `buf` holds all of it;
/// `from` is where the bytes not yet searched begin.
pub(crate) fn find_head_end(buf: &[u8], from: usize) -> Option<usize> {
    // One SIMD search for the 4 bytes (memchr's memmem), not a byte loop
    // per line: the head is scanned on every response.
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\r\n\r\n"));
    let start = from.saturating_sub(3);
    FINDER.find(&buf[start..]).map(|at| start + at + 4)
}

pub(crate) fn parse_head(head: &[u8]) -> Result<Head, HttpError> {
    let bad = |m: &str| HttpError::BadResponse(m.to_string());
    let body = &head[..head.len() - 4];
    let first_end = memchr::memchr(b'\n', body).unwrap_or(body.len());
    let status_line = &body[..first_end];
    if !status_line.starts_with(b"HTTP/1.") || status_line.len() < 12 {
        return Err(bad("no HTTP/1.x status line"));
    }
    let code = &status_line[9..12];
    if !code.iter().all(u8::is_ascii_digit) {
        return Err(bad("no status code"));
    }
    let status = code.iter().fold(0u16, |a, &d| a * 10 + (d - b'0') as u16);
    let mut content_length = None;
    let mut chunked = false;
    let http10 = status_line.starts_with(b"HTTP/1.0");
    let mut close = http10;
    let mut at = first_end + 1;
    while at < body.len() {
        let end = memchr::memchr(b'\n', &body[at..]).map_or(body.len(), |n| at + n);
        let line = &body[at..end];
        at = end + 1;
        // Only names starting with c or t matter (Content-Length, Connection,
        // Transfer-Encoding): skip the rest before looking for the colon.
        if !matches!(line.first(), Some(b'c' | b'C' | b't' | b'T')) {
            continue;
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let name = &line[..colon];
        let value = line[colon + 1..].trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| bad("bad Content-Length"))?;
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // The last coding is the framing; only chunked frames a body.
            let last = value.rsplit(|&b| b == b',').next().unwrap_or(value);
            if !last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Err(bad("a Transfer-Encoding other than chunked"));
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case(b"connection") {
            close = value.eq_ignore_ascii_case(b"close");
        }
    }
    Ok(Head {
        status,
        content_length,
        close,
        http10,
        chunked,
        len: head.len(),
    })
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ChunkState {
    /// In a chunk's size line (hex digits, then an extension to skip).
    Size {
        digits: u32,
        extension: bool,
    },
    Data,
    /// After a chunk's data: its CR LF.
    DataEnd,
    /// In the trailer section; `empty`: the line so far is empty.
    Trailer {
        empty: bool,
    },
    Done,
}

/// A chunked body's framing, fed the bytes as they arrive: counts the data
/// bytes and finds where the body ends (the last chunk and the trailers).
#[derive(Debug)]
pub(crate) struct Chunked {
    state: ChunkState,
    remaining: u64,
    /// Data bytes so far (the body's length without its framing).
    pub data: u64,
}

impl Chunked {
    pub fn new() -> Chunked {
        Chunked {
            state: ChunkState::Size {
                digits: 0,
                extension: false,
            },
            remaining: 0,
            data: 0,
        }
    }

    /// Take `buf`: Some(n) when the body ended after its first n bytes,
    /// None when more is due.
    pub fn feed(&mut self, buf: &[u8]) -> Result<Option<usize>, HttpError> {
        let bad = |m: &str| HttpError::BadResponse(format!("chunked body: {m}"));
        let mut at = 0;
        while at < buf.len() {
            match self.state {
                ChunkState::Data => {
                    let take = (self.remaining.min((buf.len() - at) as u64)) as usize;
                    at += take;
                    self.remaining -= take as u64;
                    self.data += take as u64;
                    if self.remaining == 0 {
                        self.state = ChunkState::DataEnd;
                    }
                    continue;
                }
                ChunkState::Done => return Ok(Some(at)),
                _ => {}
            }
            let b = buf[at];
            at += 1;
            self.state = match (self.state, b) {
                (
                    ChunkState::Size {
                        extension: false,
                        digits,
                    },
                    _,
                ) if b.is_ascii_hexdigit() => {
                    if digits >= 15 {
                        return Err(bad("a chunk size over 15 hex digits"));
                    }
                    let d = (b as char).to_digit(16).expect("hex digit") as u64;
                    self.remaining = self.remaining * 16 + d;
                    ChunkState::Size {
                        digits: digits + 1,
                        extension: false,
                    }
                }
                (ChunkState::Size { digits: 0, .. }, _) => return Err(bad("no chunk size")),
                (ChunkState::Size { .. }, b'\n') if self.remaining == 0 => {
                    ChunkState::Trailer { empty: true }
                }
                (ChunkState::Size { .. }, b'\n') => ChunkState::Data,
                (ChunkState::Size { digits, .. }, _) => ChunkState::Size {
                    digits,
                    extension: true,
                },
                (ChunkState::DataEnd, b'\r') => ChunkState::DataEnd,
                (ChunkState::DataEnd, b'\n') => ChunkState::Size {
                    digits: 0,
                    extension: false,
                },
                (ChunkState::DataEnd, _) => return Err(bad("no line end after a chunk's data")),
                (ChunkState::Trailer { empty: true }, b'\n') => ChunkState::Done,
                (ChunkState::Trailer { .. }, b'\n') => ChunkState::Trailer { empty: true },
                (ChunkState::Trailer { empty }, b'\r') => ChunkState::Trailer { empty },
                (ChunkState::Trailer { .. }, _) => ChunkState::Trailer { empty: false },
                (ChunkState::Data | ChunkState::Done, _) => unreachable!("handled above"),
            };
        }
        Ok((self.state == ChunkState::Done).then_some(at))
    }
}

/// Whether a response to this request has no body whatever its head says:
/// a HEAD, or a status 1xx, 204 or 304.
pub(crate) fn has_no_body(head_request: bool, status: u16) -> bool {
    head_request || status < 200 || status == 204 || status == 304
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_end_is_found_however_the_head_arrives() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        let len = head.len() - 5;
        for arrived in 0..=head.len() {
            // what arrived so far was searched; the rest comes next
            let found_early = find_head_end(&head[..arrived], 0);
            assert_eq!(found_early, (arrived >= len).then_some(len), "{arrived}");
            if arrived < len {
                assert_eq!(find_head_end(head, arrived), Some(len), "{arrived}");
            }
        }
        assert_eq!(find_head_end(b"HTTP/1.1 200 OK\r\n\r", 0), None);
        let bare = b"HTTP/1.1 204 No Content\r\n\r\n";
        let h = parse_head(&bare[..find_head_end(bare, 0).unwrap()]).unwrap();
        assert_eq!((h.status, h.content_length, h.close), (204, None, false));
    }

    #[test]
    fn a_response_head_gives_status_length_and_close() {
        let head =
            b"HTTP/1.1 200 OK\r\nServer: x\r\ncontent-length: 1024\r\nConnection: close\r\n\r\n";
        let end = find_head_end(head, 0).unwrap();
        assert_eq!(end, head.len());
        let h = parse_head(&head[..end]).unwrap();
        assert_eq!(
            (h.status, h.content_length, h.close, h.http10),
            (200, Some(1024), true, false)
        );
        let h = parse_head(b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\n").unwrap();
        assert_eq!((h.status, h.content_length, h.close), (404, Some(5), false));
        let h = parse_head(b"HTTP/1.0 200 OK\r\n\r\n").unwrap();
        assert!(h.close && h.http10);
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .unwrap()
                .chunked
        );
        assert!(matches!(
            parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
            Err(HttpError::BadResponse(_))
        ));
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        // The blank line split across reads is found from the new bytes on.
        let two = b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n";
        assert_eq!(find_head_end(two, two.len() - 2), Some(two.len()));
        assert_eq!(find_head_end(b"HTTP/1.1 200 OK\r\n", 0), None);
    }

    #[test]
    fn a_chunked_body_is_framed_however_it_arrives() {
        let body =
            b"5;name=x\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let end = body.len() - 4;
        for split in 0..=end {
            let mut c = Chunked::new();
            let first = c.feed(&body[..split]).unwrap();
            let got = match first {
                Some(n) => n,
                None => split + c.feed(&body[split..]).unwrap().expect("ended"),
            };
            assert_eq!((got, c.data), (end, 31), "split at {split}");
        }
        let mut c = Chunked::new();
        assert_eq!(c.feed(b"0\r\n\r\n").unwrap(), Some(5));
        assert_eq!(c.data, 0);
        assert!(Chunked::new().feed(b"zz\r\n").is_err());
        assert!(Chunked::new().feed(b"2\r\nabX").is_err());
    }

    #[test]
    fn a_size_is_checked_only_where_it_is_known() {
        assert!(check_response(200, 5, Some(5)).is_ok());
        assert!(matches!(
            check_response(200, 4, Some(5)),
            Err(HttpError::ShortBody { .. })
        ));
        assert!(matches!(
            check_response(301, 0, Some(5)),
            Err(HttpError::Status(301))
        ));
        assert!(check_response(200, 4, None).is_ok());
        assert!(check_response(302, 0, None).is_ok());
        assert!(matches!(
            check_response(404, 9, None),
            Err(HttpError::Status(404))
        ));
        assert!(has_no_body(true, 200) && has_no_body(false, 304) && !has_no_body(false, 200));
    }
}
