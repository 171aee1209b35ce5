//! What can go wrong talking to PostgreSQL, and the server's ErrorResponse.

use crate::harness::ErrorClass;
use bytes::{BufMut, BytesMut};
use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::Message;
use std::fmt;

/// An ErrorResponse from the server.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlError {
    pub sqlstate: [u8; 5],
    pub severity: String,
    pub message: String,
}

impl SqlError {
    pub fn sqlstate_str(&self) -> &str {
        std::str::from_utf8(&self.sqlstate).unwrap_or("?????")
    }

    /// How a transaction's error counts (pgbench's rule): a serialization
    /// failure (40001) or a deadlock (40P01) is retried, any other SQLSTATE
    /// is counted under its code.
    pub fn error_class(&self) -> ErrorClass {
        let kind = self.sqlstate_str().to_string();
        match &self.sqlstate {
            b"40001" | b"40P01" => ErrorClass::Retryable { kind },
            _ => ErrorClass::Counted { kind },
        }
    }

    /// Read an ErrorResponse (or NoticeResponse) message body with
    /// `postgres-protocol`'s parser, the one tokio-postgres uses.
    pub(crate) fn parse(body: &[u8]) -> SqlError {
        let mut err = SqlError {
            sqlstate: *b"XX000",
            severity: String::new(),
            message: String::new(),
        };
        let mut message = BytesMut::with_capacity(body.len() + 5);
        message.put_u8(b'E');
        message.put_u32(body.len() as u32 + 4);
        message.put_slice(body);
        let Ok(Some(Message::ErrorResponse(response))) = Message::parse(&mut message) else {
            err.message = "malformed ErrorResponse".into();
            return err;
        };
        let mut fields = response.fields();
        while let Ok(Some(field)) = fields.next() {
            let value = field.value_bytes();
            match field.type_() {
                b'C' if value.len() == 5 => err.sqlstate.copy_from_slice(value),
                b'V' => err.severity = String::from_utf8_lossy(value).into_owned(),
                b'S' if err.severity.is_empty() => {
                    err.severity = String::from_utf8_lossy(value).into_owned()
                }
                b'M' => err.message = String::from_utf8_lossy(value).into_owned(),
                _ => {}
            }
        }
        err
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.severity,
            self.sqlstate_str(),
            self.message
        )
    }
}

#[derive(Debug)]
pub enum PgError {
    /// Bad connection parameters.
    Config(String),
    /// Could not connect or authenticate.
    Connect(String),
    /// The connection ended (server gone, killed, or closed by us on abort).
    Lost(String),
    /// The server answered with an error where none may occur (DDL, COPY).
    Server(SqlError),
    Protocol(String),
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgError::Config(m) => f.write_str(m),
            PgError::Connect(m) => write!(f, "could not connect: {m}"),
            PgError::Lost(m) => write!(f, "connection lost: {m}"),
            PgError::Server(e) => write!(f, "server error: {e}"),
            PgError::Protocol(m) => write!(f, "protocol error: {m}"),
        }
    }
}

impl std::error::Error for PgError {}

impl From<PgError> for crate::error::EngineError {
    fn from(e: PgError) -> Self {
        match e {
            PgError::Config(m) => crate::error::EngineError::Config(m),
            other => crate::error::EngineError::Target(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_response_fields_are_read() {
        let body = b"SERROR\0VERROR\0C40001\0Mcould not serialize access\0\0";
        let err = SqlError::parse(body);
        assert_eq!(err.sqlstate_str(), "40001");
        assert_eq!(err.severity, "ERROR");
        assert_eq!(err.message, "could not serialize access");
    }

    #[test]
    fn a_malformed_error_response_is_still_an_error() {
        let err = SqlError::parse(b"C400");
        assert_eq!(err.sqlstate_str(), "XX000");
    }
}
