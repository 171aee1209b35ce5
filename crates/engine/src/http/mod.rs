//! Web servers: a SPECweb99-like static file set (`fileset`: layout,
//! deterministic generation into a cache, the request mix) and HTTP/1.1 GET
//! as a harness protocol (`protocol`), one transaction type per file class.

pub mod fileset;
#[cfg(feature = "hyper-client")]
pub mod hyper_client;
pub mod protocol;

pub use protocol::{HttpConfig, HttpProtocol};
