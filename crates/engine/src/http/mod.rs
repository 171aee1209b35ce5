//! Web servers: a SPECweb99-like static file set (`fileset`: layout,
//! deterministic generation into a cache, the request mix), a request mix
//! of any server's URLs (`mix`), and HTTP/1.1 as a harness protocol
//! (`protocol`, on a client of perflab's own: `conn` its connection and
//! I/O, `response` what a response says and what makes it good).

mod conn;
pub mod fileset;
#[cfg(feature = "hyper-client")]
pub mod hyper_client;
pub mod mix;
pub mod protocol;
mod response;

pub use conn::Churn;
pub use mix::{MixEntry, RequestMix};
pub use protocol::{HttpConfig, HttpProtocol, HttpRequest, Requests};
pub use response::HttpError;
