//! Connection parameters: a libpq key=value conninfo string.

use super::error::PgError;
use std::fmt;
use std::time::Duration;

/// Connection parameters, parsed from a libpq key=value conninfo string.
#[derive(Clone, PartialEq)]
pub struct ConnInfo {
    /// A host name, an IP address, or a unix socket directory (starts with '/').
    pub host: String,
    pub port: u16,
    pub user: String,
    pub dbname: String,
    pub password: Option<String>,
    /// Server options sent at startup ("-c default_transaction_read_only=on").
    pub options: Option<String>,
    pub application_name: String,
    pub connect_timeout: Duration,
}

impl fmt::Debug for ConnInfo {
    // Never print the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

fn default_user() -> String {
    std::env::var("PGUSER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| "postgres".to_string())
}

/// Split "k=v k2='quoted \' value'" into pairs, as libpq's conninfo parser does.
pub(crate) fn conninfo_pairs(text: &str) -> Result<Vec<(String, String)>, PgError> {
    let bad = |why: &str| PgError::Config(format!("conninfo: {why}"));
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(bad(&format!("missing \"=\" after {key:?}")));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(bad(&format!("unterminated quoted value of {key:?}"))),
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                if c == '\\' {
                    chars.next();
                    value.extend(chars.next());
                } else {
                    value.push(c);
                    chars.next();
                }
            }
        }
        pairs.push((key, value));
    }
    Ok(pairs)
}

impl ConnInfo {
    pub fn parse(text: &str) -> Result<ConnInfo, PgError> {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Err(PgError::Config(
                "conninfo: the driver takes key=value form (host=... port=... dbname=...), not a URI"
                    .into(),
            ));
        }
        let mut info = ConnInfo {
            host: std::env::var("PGHOST").unwrap_or_else(|_| "/var/run/postgresql".into()),
            port: 5432,
            user: default_user(),
            dbname: String::new(),
            password: std::env::var("PGPASSWORD").ok(),
            options: None,
            application_name: "perflab".into(),
            connect_timeout: Duration::from_secs(30),
        };
        let mut hostaddr = None;
        for (key, value) in conninfo_pairs(text)? {
            match key.as_str() {
                "host" => info.host = value,
                "hostaddr" => hostaddr = Some(value),
                "port" => {
                    info.port = value.parse().map_err(|_| {
                        PgError::Config(format!("conninfo: port {value:?} is not a port number"))
                    })?
                }
                "user" => info.user = value,
                "dbname" => info.dbname = value,
                "password" => info.password = Some(value),
                "options" => info.options = Some(value),
                "application_name" => info.application_name = value,
                "connect_timeout" => {
                    let s: u64 = value.parse().map_err(|_| {
                        PgError::Config(format!(
                            "conninfo: connect_timeout {value:?} is not seconds"
                        ))
                    })?;
                    if s > 0 {
                        info.connect_timeout = Duration::from_secs(s);
                    }
                }
                "sslmode" => {
                    if !matches!(value.as_str(), "disable" | "allow" | "prefer") {
                        return Err(PgError::Config(format!(
                            "conninfo: sslmode={value} needs TLS, which perflab's driver does not \
                             speak; use sslmode=disable or prefer (local servers)"
                        )));
                    }
                }
                // Accepted and irrelevant to a load driver.
                "client_encoding"
                | "fallback_application_name"
                | "keepalives"
                | "keepalives_idle"
                | "target_session_attrs"
                | "gssencmode" => {}
                other => {
                    return Err(PgError::Config(format!(
                        "conninfo: {other:?} is not supported by perflab's driver"
                    )))
                }
            }
        }
        if let Some(addr) = hostaddr {
            info.host = addr;
        }
        if info.dbname.is_empty() {
            info.dbname = info.user.clone();
        }
        Ok(info)
    }

    /// Where this connects, with no password.
    pub fn display(&self) -> String {
        format!(
            "host={} port={} user={} dbname={}",
            self.host, self.port, self.user, self.dbname
        )
    }

    pub(crate) fn is_unix_socket(&self) -> bool {
        self.host.starts_with('/')
    }

    /// The server is on this machine: a unix socket, or a loopback address
    /// (127.0.0.0/8, ::1, localhost).
    pub(crate) fn is_local(&self) -> bool {
        self.is_unix_socket()
            || self.host == "localhost"
            || self
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conninfo_parses_libpq_key_value_with_quotes() {
        let info = ConnInfo::parse(
            "host=/tmp/pg port=5433 user=bench dbname='my db' password='it\\'s' options='-c a=b'",
        )
        .unwrap();
        assert_eq!(info.host, "/tmp/pg");
        assert_eq!(info.port, 5433);
        assert_eq!(info.user, "bench");
        assert_eq!(info.dbname, "my db");
        assert_eq!(info.password.as_deref(), Some("it's"));
        assert_eq!(info.options.as_deref(), Some("-c a=b"));
        assert!(!format!("{info:?}").contains("it's"));
    }

    #[test]
    fn a_server_is_local_over_a_unix_socket_or_a_loopback_address_only() {
        for host in ["/tmp/pg", "localhost", "127.0.0.1", "127.3.2.1", "::1"] {
            let info = ConnInfo::parse(&format!("host={host}")).unwrap();
            assert!(info.is_local(), "{host}");
        }
        for host in ["10.0.0.7", "db.example.org", "::2"] {
            let info = ConnInfo::parse(&format!("host={host}")).unwrap();
            assert!(!info.is_local(), "{host}");
        }
    }

    #[test]
    fn conninfo_rejects_what_the_driver_cannot_do() {
        assert!(ConnInfo::parse("sslmode=require").is_err());
        assert!(ConnInfo::parse("postgresql://localhost/db").is_err());
        assert!(ConnInfo::parse("port=abc").is_err());
        assert!(ConnInfo::parse("host").is_err());
    }
}
