//! The MySQL client/server protocol's packets, as bytes: framing, the
//! handshake, commands, and reading OK, ERR, column definitions and rows.
//! Pure functions over buffers (no I/O), so they are unit-tested here.

use crate::pg::{write_fixed, Param};
use sha1::{Digest, Sha1};

// Capability flags (the protocol's CLIENT_*).
pub const CLIENT_LONG_PASSWORD: u32 = 1;
pub const CLIENT_FOUND_ROWS: u32 = 2;
pub const CLIENT_LONG_FLAG: u32 = 4;
pub const CLIENT_CONNECT_WITH_DB: u32 = 8;
pub const CLIENT_LOCAL_FILES: u32 = 0x80;
pub const CLIENT_PROTOCOL_41: u32 = 0x200;
pub const CLIENT_TRANSACTIONS: u32 = 0x2000;
pub const CLIENT_SECURE_CONNECTION: u32 = 0x8000;
pub const CLIENT_MULTI_STATEMENTS: u32 = 0x1_0000;
pub const CLIENT_MULTI_RESULTS: u32 = 0x2_0000;
pub const CLIENT_PS_MULTI_RESULTS: u32 = 0x4_0000;
pub const CLIENT_PLUGIN_AUTH: u32 = 0x8_0000;
pub const CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA: u32 = 0x20_0000;
pub const CLIENT_DEPRECATE_EOF: u32 = 0x100_0000;

/// What this client asks for; the connection uses what the server also offers.
pub const CLIENT_WANTS: u32 = CLIENT_LONG_PASSWORD
    | CLIENT_FOUND_ROWS
    | CLIENT_LONG_FLAG
    | CLIENT_LOCAL_FILES
    | CLIENT_PROTOCOL_41
    | CLIENT_TRANSACTIONS
    | CLIENT_SECURE_CONNECTION
    | CLIENT_MULTI_STATEMENTS
    | CLIENT_MULTI_RESULTS
    | CLIENT_PS_MULTI_RESULTS
    | CLIENT_PLUGIN_AUTH
    | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
    | CLIENT_DEPRECATE_EOF;

// Server status flags.
pub const SERVER_STATUS_IN_TRANS: u16 = 1;
pub const SERVER_MORE_RESULTS_EXISTS: u16 = 8;

// Commands.
pub const COM_QUIT: u8 = 0x01;
pub const COM_QUERY: u8 = 0x03;
pub const COM_STMT_PREPARE: u8 = 0x16;
pub const COM_STMT_EXECUTE: u8 = 0x17;

/// utf8mb4_general_ci: the connection's character set.
pub const UTF8MB4_GENERAL_CI: u8 = 45;
pub const MAX_PAYLOAD: usize = 0xFF_FFFF;

// Column types (enum_field_types) this client decodes by size.
pub const TYPE_TINY: u8 = 0x01;
pub const TYPE_SHORT: u8 = 0x02;
pub const TYPE_LONG: u8 = 0x03;
pub const TYPE_FLOAT: u8 = 0x04;
pub const TYPE_DOUBLE: u8 = 0x05;
pub const TYPE_NULL: u8 = 0x06;
pub const TYPE_TIMESTAMP: u8 = 0x07;
pub const TYPE_LONGLONG: u8 = 0x08;
pub const TYPE_INT24: u8 = 0x09;
pub const TYPE_DATE: u8 = 0x0a;
pub const TYPE_TIME: u8 = 0x0b;
pub const TYPE_DATETIME: u8 = 0x0c;
pub const TYPE_YEAR: u8 = 0x0d;
pub const TYPE_VAR_STRING: u8 = 0xfd;
/// Column flag: UNSIGNED.
pub const UNSIGNED_FLAG: u16 = 0x20;

/// Start a packet with sequence id `seq`: returns where its header is.
pub fn begin_packet(buf: &mut Vec<u8>, seq: u8) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&[0, 0, 0, seq]);
    at
}

/// Fill in the length of the packet begun at `at` (payloads under 16 MiB).
pub fn end_packet(buf: &mut [u8], at: usize) {
    let len = buf.len() - at - 4;
    debug_assert!(len < MAX_PAYLOAD);
    buf[at..at + 3].copy_from_slice(&(len as u32).to_le_bytes()[..3]);
}

/// A whole packet with `payload`.
pub fn packet(buf: &mut Vec<u8>, seq: u8, payload: &[u8]) {
    let at = begin_packet(buf, seq);
    buf.extend_from_slice(payload);
    end_packet(buf, at);
}

/// A command packet (sequence 0) with its argument.
pub fn command(buf: &mut Vec<u8>, command: u8, arg: &[u8]) {
    let at = begin_packet(buf, 0);
    buf.push(command);
    buf.extend_from_slice(arg);
    end_packet(buf, at);
}

pub fn put_lenenc_int(buf: &mut Vec<u8>, n: u64) {
    if n < 251 {
        buf.push(n as u8);
    } else if n < 1 << 16 {
        buf.push(0xfc);
        buf.extend_from_slice(&(n as u16).to_le_bytes());
    } else if n < 1 << 24 {
        buf.push(0xfd);
        buf.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
    } else {
        buf.push(0xfe);
        buf.extend_from_slice(&n.to_le_bytes());
    }
}

/// A reader over one packet's payload; reading past its end gives zeros and
/// empty slices, and sets `short` (the caller reports a protocol error).
pub struct Reader<'a> {
    pub buf: &'a [u8],
    pub at: usize,
    pub short: bool,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader {
            buf,
            at: 0,
            short: false,
        }
    }

    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.at.min(self.buf.len())..]
    }

    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        if self.at + n > self.buf.len() {
            self.short = true;
            self.at = self.buf.len();
            return &[];
        }
        let out = &self.buf[self.at..self.at + n];
        self.at += n;
        out
    }

    pub fn u8(&mut self) -> u8 {
        self.bytes(1).first().copied().unwrap_or(0)
    }

    pub fn uint(&mut self, n: usize) -> u64 {
        let b = self.bytes(n);
        let mut v = [0u8; 8];
        v[..b.len()].copy_from_slice(b);
        u64::from_le_bytes(v)
    }

    pub fn u16(&mut self) -> u16 {
        self.uint(2) as u16
    }

    pub fn u32(&mut self) -> u32 {
        self.uint(4) as u32
    }

    /// A length-encoded integer; None for 0xfb (NULL in a text row).
    pub fn lenenc(&mut self) -> Option<u64> {
        match self.u8() {
            0xfb => None,
            0xfc => Some(self.uint(2)),
            0xfd => Some(self.uint(3)),
            0xfe => Some(self.uint(8)),
            n => Some(n as u64),
        }
    }

    pub fn lenenc_bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.lenenc()?;
        Some(self.bytes(n as usize))
    }

    /// A NUL-terminated string (to the end when there is no NUL).
    pub fn cstr(&mut self) -> &'a [u8] {
        let rest = self.rest();
        let n = memchr::memchr(0, rest).unwrap_or(rest.len());
        self.at += (n + 1).min(rest.len());
        &rest[..n]
    }
}

/// The server's first packet (Protocol::HandshakeV10).
#[derive(Debug, Clone)]
pub struct Handshake {
    pub server_version: String,
    pub connection_id: u32,
    pub capabilities: u32,
    /// The auth plugin's data (the 20-byte scramble for mysql_native_password).
    pub scramble: Vec<u8>,
    pub auth_plugin: String,
}

pub fn parse_handshake(payload: &[u8]) -> Result<Handshake, String> {
    let mut r = Reader::new(payload);
    let version = r.u8();
    if version == 0xff {
        let err = parse_err(payload);
        return Err(format!("the server refused the connection: {err}"));
    }
    if version != 10 {
        return Err(format!(
            "handshake protocol {version} is not HandshakeV10 (MySQL 4.1 and later, MariaDB)"
        ));
    }
    let server_version = String::from_utf8_lossy(r.cstr()).into_owned();
    let connection_id = r.u32();
    let mut scramble = r.bytes(8).to_vec();
    r.u8();
    let mut capabilities = r.u16() as u32;
    r.u8(); // character set
    r.u16(); // status flags
    capabilities |= (r.u16() as u32) << 16;
    let auth_len = r.u8() as usize;
    r.bytes(10); // reserved (MariaDB's extended capabilities are in the last 4)
    if capabilities & CLIENT_SECURE_CONNECTION != 0 {
        let n = auth_len.saturating_sub(8).max(13);
        let part2 = r.bytes(n);
        // the part ends with a NUL that is not scramble
        let part2 = part2.strip_suffix(&[0]).unwrap_or(part2);
        scramble.extend_from_slice(part2);
    }
    let auth_plugin = if capabilities & CLIENT_PLUGIN_AUTH != 0 {
        String::from_utf8_lossy(r.cstr()).into_owned()
    } else {
        "mysql_native_password".into()
    };
    if r.short {
        return Err("the server's handshake is cut short".into());
    }
    Ok(Handshake {
        server_version,
        connection_id,
        capabilities,
        scramble,
        auth_plugin,
    })
}

/// mysql_native_password's answer: SHA1(pw) XOR SHA1(scramble + SHA1(SHA1(pw)));
/// nothing for an empty password.
pub fn native_password(password: &[u8], scramble: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let stage1 = Sha1::digest(password);
    let stage2 = Sha1::digest(stage1);
    let mut h = Sha1::new();
    h.update(&scramble[..scramble.len().min(20)]);
    h.update(stage2);
    let mix = h.finalize();
    stage1.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect()
}

/// Protocol::HandshakeResponse41 (sequence 1).
pub fn handshake_response(
    buf: &mut Vec<u8>,
    capabilities: u32,
    user: &str,
    auth: &[u8],
    database: &str,
    plugin: &str,
) {
    let at = begin_packet(buf, 1);
    buf.extend_from_slice(&capabilities.to_le_bytes());
    buf.extend_from_slice(&(MAX_PAYLOAD as u32).to_le_bytes());
    buf.push(UTF8MB4_GENERAL_CI);
    buf.extend_from_slice(&[0; 23]);
    buf.extend_from_slice(user.as_bytes());
    buf.push(0);
    if capabilities & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
        put_lenenc_int(buf, auth.len() as u64);
    } else {
        buf.push(auth.len() as u8);
    }
    buf.extend_from_slice(auth);
    if capabilities & CLIENT_CONNECT_WITH_DB != 0 {
        buf.extend_from_slice(database.as_bytes());
        buf.push(0);
    }
    if capabilities & CLIENT_PLUGIN_AUTH != 0 {
        buf.extend_from_slice(plugin.as_bytes());
        buf.push(0);
    }
    end_packet(buf, at);
}

/// An ERR packet's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrPacket {
    pub code: u16,
    pub sqlstate: [u8; 5],
    pub message: String,
}

impl std::fmt::Display for ErrPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ERROR {} ({}): {}",
            self.code,
            String::from_utf8_lossy(&self.sqlstate),
            self.message
        )
    }
}

/// Read an ERR packet (its first byte is 0xff).
pub fn parse_err(payload: &[u8]) -> ErrPacket {
    let mut r = Reader::new(payload);
    r.u8();
    let code = r.u16();
    let mut sqlstate = *b"HY000";
    if r.rest().first() == Some(&b'#') {
        r.u8();
        let s = r.bytes(5);
        if s.len() == 5 {
            sqlstate.copy_from_slice(s);
        }
    }
    ErrPacket {
        code,
        sqlstate,
        message: String::from_utf8_lossy(r.rest()).into_owned(),
    }
}

/// What an OK packet (or an EOF packet) says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    pub affected_rows: u64,
    pub last_insert_id: u64,
    pub status: u16,
    pub warnings: u16,
}

impl Outcome {
    /// More results of the same command follow (a multi-statement COM_QUERY).
    pub fn more_results(&self) -> bool {
        self.status & SERVER_MORE_RESULTS_EXISTS != 0
    }
}

/// Read an OK packet (first byte 0x00, or 0xfe ending a result set under
/// CLIENT_DEPRECATE_EOF).
pub fn parse_ok(payload: &[u8]) -> Outcome {
    let mut r = Reader::new(payload);
    r.u8();
    let affected_rows = r.lenenc().unwrap_or(0);
    let last_insert_id = r.lenenc().unwrap_or(0);
    Outcome {
        affected_rows,
        last_insert_id,
        status: r.u16(),
        warnings: r.u16(),
    }
}

/// Read an old EOF packet (0xfe, warnings then status).
pub fn parse_eof(payload: &[u8]) -> Outcome {
    let mut r = Reader::new(payload);
    r.u8();
    let warnings = r.u16();
    Outcome {
        status: r.u16(),
        warnings,
        ..Outcome::default()
    }
}

/// Whether a packet in a result set's rows is its end (EOF, or an OK with
/// the 0xfe header): a row never starts with 0xfe unless its first value is
/// 16 MiB or longer, and then the packet is the maximum length.
pub fn is_end_of_rows(payload: &[u8]) -> bool {
    payload.first() == Some(&0xfe) && payload.len() < MAX_PAYLOAD
}

/// A column definition's type and flags (Protocol::ColumnDefinition41).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub kind: u8,
    pub flags: u16,
}

pub fn parse_column(payload: &[u8]) -> Column {
    let mut r = Reader::new(payload);
    for _ in 0..6 {
        // catalog, schema, table, org_table, name, org_name
        r.lenenc_bytes();
    }
    r.lenenc(); // length of the fixed fields (0x0c)
    r.u16(); // character set
    r.u32(); // column length
    let kind = r.u8();
    let flags = r.u16();
    Column { kind, flags }
}

/// COM_STMT_PREPARE_OK: (statement id, columns, parameters).
pub fn parse_prepare_ok(payload: &[u8]) -> Result<(u32, u16, u16), String> {
    let mut r = Reader::new(payload);
    r.u8();
    let id = r.u32();
    let columns = r.u16();
    let params = r.u16();
    if r.short {
        return Err("COM_STMT_PREPARE's answer is cut short".into());
    }
    Ok((id, columns, params))
}

/// COM_STMT_EXECUTE of statement `id` with binary parameters: integers as
/// LONGLONG, decimals and strings as strings (the server converts them as it
/// would their text). The types are sent with every execution.
pub fn stmt_execute(buf: &mut Vec<u8>, id: u32, params: &[Param<'_>]) {
    let at = begin_packet(buf, 0);
    buf.push(COM_STMT_EXECUTE);
    buf.extend_from_slice(&id.to_le_bytes());
    buf.push(0); // CURSOR_TYPE_NO_CURSOR
    buf.extend_from_slice(&1u32.to_le_bytes()); // iterations
    if !params.is_empty() {
        let bitmap_at = buf.len();
        buf.resize(bitmap_at + params.len().div_ceil(8), 0);
        for (i, p) in params.iter().enumerate() {
            if matches!(p, Param::Null) {
                buf[bitmap_at + i / 8] |= 1 << (i % 8);
            }
        }
        buf.push(1); // new_params_bound_flag: types follow
        for p in params {
            let kind = match p {
                Param::Int(_) => TYPE_LONGLONG,
                Param::Null => TYPE_NULL,
                Param::Fixed(..) | Param::Text(_) => TYPE_VAR_STRING,
            };
            buf.extend_from_slice(&[kind, 0]);
        }
        for p in params {
            match *p {
                Param::Int(v) => buf.extend_from_slice(&v.to_le_bytes()),
                Param::Null => {}
                Param::Text(t) => {
                    put_lenenc_int(buf, t.len() as u64);
                    buf.extend_from_slice(t);
                }
                Param::Fixed(v, scale) => {
                    let len_at = buf.len();
                    buf.push(0);
                    write_fixed(buf, v, scale);
                    buf[len_at] = (buf.len() - len_at - 1) as u8; // under 251 bytes
                }
            }
        }
    }
    end_packet(buf, at);
}

/// How one binary-protocol value of column type `kind` is laid out.
pub enum Layout {
    /// Fixed size in bytes (integers, floats).
    Fixed(usize),
    /// One length byte, then the value (dates, times).
    Short,
    /// A length-encoded string (strings, decimals, JSON, ...).
    LenEnc,
}

pub fn binary_layout(kind: u8) -> Layout {
    match kind {
        TYPE_TINY => Layout::Fixed(1),
        TYPE_SHORT | TYPE_YEAR => Layout::Fixed(2),
        TYPE_LONG | TYPE_INT24 | TYPE_FLOAT => Layout::Fixed(4),
        TYPE_LONGLONG | TYPE_DOUBLE => Layout::Fixed(8),
        TYPE_NULL => Layout::Fixed(0),
        TYPE_DATE | TYPE_DATETIME | TYPE_TIMESTAMP | TYPE_TIME => Layout::Short,
        _ => Layout::LenEnc,
    }
}

/// Whether a column of this type holds an integer.
pub fn is_integer(kind: u8) -> bool {
    matches!(
        kind,
        TYPE_TINY | TYPE_SHORT | TYPE_YEAR | TYPE_LONG | TYPE_INT24 | TYPE_LONGLONG
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_password_matches_the_servers_formula() {
        // SHA1(pw) XOR SHA1(scramble + SHA1(SHA1(pw))), checked by undoing it
        let scramble = b"abcdefghijklmnopqrst";
        let answer = native_password(b"secret", scramble);
        let stage1 = Sha1::digest(b"secret");
        let stage2 = Sha1::digest(stage1);
        let mut h = Sha1::new();
        h.update(scramble);
        h.update(stage2);
        let mix = h.finalize();
        let back: Vec<u8> = answer.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect();
        assert_eq!(Sha1::digest(&back).as_slice(), stage2.as_slice());
        assert!(native_password(b"", scramble).is_empty());
        // SHA-1 itself: FIPS 180's "abc"
        assert_eq!(
            Sha1::digest(b"abc").as_slice(),
            &[
                0xa9, 0x99, 0x3e, 0x36, 0x47, 0x06, 0x81, 0x6a, 0xba, 0x3e, 0x25, 0x71, 0x78, 0x50,
                0xc2, 0x6c, 0x9c, 0xd0, 0xd8, 0x9d
            ]
        );
    }

    #[test]
    fn lenenc_round_trips_and_short_reads_are_noticed() {
        for n in [
            0u64,
            250,
            251,
            65_535,
            65_536,
            16_777_215,
            16_777_216,
            u64::MAX,
        ] {
            let mut buf = Vec::new();
            put_lenenc_int(&mut buf, n);
            let mut r = Reader::new(&buf);
            assert_eq!(r.lenenc(), Some(n));
            assert!(!r.short && r.rest().is_empty());
        }
        let mut r = Reader::new(&[0xfc, 1]);
        r.lenenc();
        assert!(r.short);
        assert_eq!(Reader::new(&[0xfb]).lenenc(), None);
    }

    #[test]
    fn handshake_of_mariadb_is_read() {
        // A MariaDB 10.11 HandshakeV10, as captured (scramble replaced).
        let mut p = vec![10];
        p.extend_from_slice(b"5.5.5-10.11.6-MariaDB-0+deb12u1\0");
        p.extend_from_slice(&7u32.to_le_bytes());
        p.extend_from_slice(b"12345678\0");
        let caps = CLIENT_WANTS | CLIENT_CONNECT_WITH_DB;
        p.extend_from_slice(&(caps as u16).to_le_bytes());
        p.push(45);
        p.extend_from_slice(&2u16.to_le_bytes());
        p.extend_from_slice(&((caps >> 16) as u16).to_le_bytes());
        p.push(21);
        p.extend_from_slice(&[0; 10]);
        p.extend_from_slice(b"abcdefghijkl\0");
        p.extend_from_slice(b"mysql_native_password\0");
        let h = parse_handshake(&p).unwrap();
        assert_eq!(h.connection_id, 7);
        assert_eq!(h.scramble, b"12345678abcdefghijkl");
        assert_eq!(h.auth_plugin, "mysql_native_password");
        assert!(h.server_version.contains("MariaDB"));
        assert!(parse_handshake(&p[..20]).is_err());
    }

    #[test]
    fn execute_packet_carries_binary_parameters() {
        let mut buf = Vec::new();
        stmt_execute(
            &mut buf,
            3,
            &[
                Param::Int(-2),
                Param::Null,
                Param::Text(b"ab"),
                Param::Fixed(1234, 2),
            ],
        );
        let len = u32::from_le_bytes([buf[0], buf[1], buf[2], 0]) as usize;
        assert_eq!(len, buf.len() - 4);
        let p = &buf[4..];
        assert_eq!(p[0], COM_STMT_EXECUTE);
        assert_eq!(&p[1..5], &3u32.to_le_bytes());
        assert_eq!(p[10], 0b10); // the NULL bitmap
        assert_eq!(p[11], 1);
        assert_eq!(
            &p[12..20],
            &[
                TYPE_LONGLONG,
                0,
                TYPE_NULL,
                0,
                TYPE_VAR_STRING,
                0,
                TYPE_VAR_STRING,
                0
            ]
        );
        assert_eq!(&p[20..28], &(-2i64).to_le_bytes());
        assert_eq!(&p[28..], b"\x02ab\x0512.34");
    }

    #[test]
    fn ok_err_and_end_of_rows() {
        let ok = [0u8, 3, 0xfc, 0x10, 0x27, 0x0a, 0, 1, 0];
        let o = parse_ok(&ok);
        assert_eq!(
            (o.affected_rows, o.last_insert_id, o.status, o.warnings),
            (3, 10_000, 10, 1)
        );
        assert!(o.more_results());
        let mut err = vec![0xff];
        err.extend_from_slice(&1213u16.to_le_bytes());
        err.extend_from_slice(b"#40001Deadlock found");
        let e = parse_err(&err);
        assert_eq!(
            (e.code, &e.sqlstate, e.message.as_str()),
            (1213, b"40001", "Deadlock found")
        );
        assert!(is_end_of_rows(&[0xfe, 0, 0, 2, 0]));
        assert!(!is_end_of_rows(&[0x00, 1]));
    }
}
