//! A request mix of any server's URLs (`request_mix`): each entry a method,
//! a path, headers and a body, drawn by weight. Each entry's request is
//! written once, whole, when the mix is made; a draw is an index. An entry
//! is a transaction type of its own ("r1", "r2", ... in the mix's order), so
//! its count, latency and errors are kept apart.

use crate::random::Prng;
use std::io::Write;
use std::sync::LazyLock;

/// The most entries a mix may have (each is a transaction type, with its
/// own histograms on every worker thread).
pub const MAX_ENTRIES: usize = 256;

/// "r1" .. "r256", made once for the life of the process.
static NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    (1..=MAX_ENTRIES)
        .map(|i| &*Box::leak(format!("r{i}").into_boxed_str()))
        .collect()
});

/// One request of a mix, as given.
#[derive(Debug, Clone)]
pub struct MixEntry {
    pub method: String,
    /// The whole path, from "/" (the target's prefix already in it).
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub weight: f64,
}

#[derive(Debug, Clone)]
pub struct RequestMix {
    requests: Vec<Vec<u8>>,
    head: Vec<bool>,
    cdf: Vec<f64>,
}

fn token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn no_line_break(s: &str) -> bool {
    !s.bytes().any(|b| b == b'\r' || b == b'\n')
}

impl RequestMix {
    /// The mix, each request written with `host` as its Host header (unless
    /// the entry gives one); Err names the entry and what is wrong.
    pub fn new(entries: &[MixEntry], host: &str) -> Result<RequestMix, String> {
        if entries.is_empty() || entries.len() > MAX_ENTRIES {
            return Err(format!(
                "the mix has {} requests; allowed: 1..{MAX_ENTRIES}",
                entries.len()
            ));
        }
        let mut requests = Vec::with_capacity(entries.len());
        let mut cdf = Vec::with_capacity(entries.len());
        let mut acc = 0.0;
        for (i, e) in entries.iter().enumerate() {
            let at = format!("request {} ({} {})", i + 1, e.method, e.path);
            if !token(&e.method) {
                return Err(format!("{at}: the method is not an HTTP token"));
            }
            if !e.path.starts_with('/') || e.path.bytes().any(|b| b <= b' ' || b == 0x7f) {
                return Err(format!(
                    "{at}: the path must start with / and hold no space or control character"
                ));
            }
            if !(e.weight.is_finite() && e.weight > 0.0) {
                return Err(format!("{at}: weight {} must be > 0", e.weight));
            }
            let mut out = Vec::with_capacity(64 + e.path.len() + e.body.len());
            let _ = write!(out, "{} {} HTTP/1.1\r\n", e.method, e.path);
            let has = |name: &str| e.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
            if !has("host") {
                let _ = write!(out, "Host: {host}\r\n");
            }
            for (k, v) in &e.headers {
                if !token(k) || !no_line_break(v) {
                    return Err(format!(
                        "{at}: header {k:?} is not a name and a one-line value"
                    ));
                }
                if k.eq_ignore_ascii_case("content-length")
                    || k.eq_ignore_ascii_case("transfer-encoding")
                {
                    return Err(format!(
                        "{at}: header {k} is perflab's to write (from the body)"
                    ));
                }
                let _ = write!(out, "{k}: {v}\r\n");
            }
            if !e.body.is_empty() || matches!(e.method.as_str(), "POST" | "PUT" | "PATCH") {
                let _ = write!(out, "Content-Length: {}\r\n", e.body.len());
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&e.body);
            requests.push(out);
            acc += e.weight;
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        *cdf.last_mut().expect("not empty") = 1.0;
        Ok(RequestMix {
            head: entries.iter().map(|e| e.method == "HEAD").collect(),
            requests,
            cdf,
        })
    }

    /// The transaction types: one per entry.
    pub fn names(&self) -> &'static [&'static str] {
        &NAMES[..self.requests.len()]
    }

    /// An entry by weight.
    pub fn draw(&self, rng: &mut Prng) -> usize {
        let u = rng.next_f64();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }

    /// The entry's request, whole.
    pub fn request(&self, entry: usize) -> &[u8] {
        &self.requests[entry]
    }

    /// Whether the entry is a HEAD (its response has no body).
    pub fn is_head(&self, entry: usize) -> bool {
        self.head[entry]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(method: &str, path: &str, weight: f64) -> MixEntry {
        MixEntry {
            method: method.into(),
            path: path.into(),
            headers: vec![],
            body: vec![],
            weight,
        }
    }

    #[test]
    fn requests_are_written_whole_with_host_headers_and_body() {
        let mut post = entry("POST", "/api?x=1", 1.0);
        post.headers = vec![("X-Token".into(), "abc".into())];
        post.body = b"{}".to_vec();
        let mix = RequestMix::new(&[entry("GET", "/a", 1.0), post], "h:1").unwrap();
        assert_eq!(mix.request(0), b"GET /a HTTP/1.1\r\nHost: h:1\r\n\r\n");
        assert_eq!(
            mix.request(1),
            b"POST /api?x=1 HTTP/1.1\r\nHost: h:1\r\nX-Token: abc\r\nContent-Length: 2\r\n\r\n{}"
        );
        assert_eq!(mix.names(), ["r1", "r2"]);
        let mut own_host = entry("GET", "/", 1.0);
        own_host.headers = vec![("host".into(), "example".into())];
        let mix = RequestMix::new(&[own_host], "h:1").unwrap();
        assert_eq!(mix.request(0), b"GET / HTTP/1.1\r\nhost: example\r\n\r\n");
    }

    #[test]
    fn a_bad_entry_is_named() {
        let bad = |e: MixEntry| RequestMix::new(&[entry("GET", "/", 1.0), e], "h").unwrap_err();
        assert!(bad(entry("GET", "a", 1.0)).starts_with("request 2"));
        assert!(bad(entry("GET", "/a b", 1.0)).contains("no space"));
        assert!(bad(entry("G T", "/", 1.0)).contains("method"));
        assert!(bad(entry("GET", "/", 0.0)).contains("weight"));
        let mut split = entry("GET", "/", 1.0);
        split.headers = vec![("X".into(), "a\r\nB: c".into())];
        assert!(bad(split).contains("one-line"));
        assert!(RequestMix::new(&[], "h").is_err());
    }

    #[test]
    fn entries_are_drawn_by_weight() {
        let mix =
            RequestMix::new(&[entry("GET", "/a", 1.0), entry("GET", "/b", 3.0)], "h").unwrap();
        let mut rng = Prng::seeded(7);
        let n = 40_000;
        let b = (0..n).filter(|_| mix.draw(&mut rng) == 1).count();
        let share = b as f64 / n as f64;
        assert!((share - 0.75).abs() < 0.01, "{share}");
    }
}
