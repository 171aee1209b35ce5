//! Frontend message encoders: each appends one message to a send buffer,
//! pre-encoded with text parameters as libpq sends them.

fn begin_message(buf: &mut Vec<u8>, tag: u8) -> usize {
    buf.push(tag);
    let at = buf.len();
    buf.extend_from_slice(&[0, 0, 0, 0]);
    at
}

fn end_message(buf: &mut [u8], at: usize) {
    let len = (buf.len() - at) as u32;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

fn put_cstr(buf: &mut Vec<u8>, s: &[u8]) {
    buf.extend_from_slice(s);
    buf.push(0);
}

/// Query (simple protocol).
pub fn query(buf: &mut Vec<u8>, sql: &str) {
    query_bytes(buf, sql.as_bytes());
}

/// Query whose text is already in `sql` bytes (built by the caller).
pub fn query_bytes(buf: &mut Vec<u8>, sql: &[u8]) {
    let at = begin_message(buf, b'Q');
    put_cstr(buf, sql);
    end_message(buf, at);
}

/// Parse: statement `name` ("" = unnamed) with untyped parameters, as libpq
/// sends when no types are given (the server infers them).
pub fn parse(buf: &mut Vec<u8>, name: &str, sql: &str) {
    let at = begin_message(buf, b'P');
    put_cstr(buf, name.as_bytes());
    put_cstr(buf, sql.as_bytes());
    buf.extend_from_slice(&0i16.to_be_bytes());
    end_message(buf, at);
}

/// Bind with every parameter in text format and text results (libpq's defaults).
pub fn bind_i64(buf: &mut Vec<u8>, statement: &str, params: &[i64]) {
    let at = begin_message(buf, b'B');
    buf.push(0); // unnamed portal
    put_cstr(buf, statement.as_bytes());
    buf.extend_from_slice(&0i16.to_be_bytes()); // all parameters text
    buf.extend_from_slice(&(params.len() as i16).to_be_bytes());
    for &value in params {
        let len_at = buf.len();
        buf.extend_from_slice(&[0, 0, 0, 0]);
        let n = write_i64(buf, value);
        buf[len_at..len_at + 4].copy_from_slice(&(n as u32).to_be_bytes());
    }
    buf.extend_from_slice(&0i16.to_be_bytes()); // all results text
    end_message(buf, at);
}

/// Execute the unnamed portal, all rows.
pub fn execute(buf: &mut Vec<u8>) {
    buf.extend_from_slice(&[b'E', 0, 0, 0, 9, 0, 0, 0, 0, 0]);
}

pub fn sync(buf: &mut Vec<u8>) {
    buf.extend_from_slice(&[b'S', 0, 0, 0, 4]);
}

/// Terminate: say goodbye so the server logs a clean disconnect.
pub const TERMINATE: [u8; 5] = [b'X', 0, 0, 0, 4];

/// CopyData carrying `rows`.
pub fn copy_data(buf: &mut Vec<u8>, rows: &[u8]) {
    buf.push(b'd');
    buf.extend_from_slice(&((rows.len() + 4) as u32).to_be_bytes());
    buf.extend_from_slice(rows);
}

/// CopyDone: the end of COPY FROM STDIN's data.
pub fn copy_done(buf: &mut Vec<u8>) {
    buf.extend_from_slice(&[b'c', 0, 0, 0, 4]);
}

/// The row count at the end of a CommandComplete tag ("COPY 42\0", "INSERT 0 1\0").
pub fn rows_of_command_tag(body: &[u8]) -> Option<u64> {
    let tag = body.strip_suffix(&[0]).unwrap_or(body);
    let last = tag.rsplit(|&b| b == b' ').next()?;
    std::str::from_utf8(last).ok()?.parse().ok()
}

/// Append the decimal text of `value`; returns the number of bytes written.
#[inline]
pub fn write_i64(out: &mut Vec<u8>, value: i64) -> usize {
    let mut digits = [0u8; 20];
    let mut n = value.unsigned_abs();
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut written = digits.len() - i;
    if value < 0 {
        out.push(b'-');
        written += 1;
    }
    out.extend_from_slice(&digits[i..]);
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_written_as_decimal_text() {
        for v in [0i64, 7, -5000, 5000, 100_000, i64::MIN, i64::MAX] {
            let mut out = Vec::new();
            let n = write_i64(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), v.to_string());
            assert_eq!(n, v.to_string().len());
        }
    }

    #[test]
    fn command_tags_give_their_row_count() {
        assert_eq!(rows_of_command_tag(b"COPY 42\0"), Some(42));
        assert_eq!(rows_of_command_tag(b"INSERT 0 7\0"), Some(7));
        assert_eq!(rows_of_command_tag(b"BEGIN\0"), None);
    }

    #[test]
    fn messages_carry_their_length() {
        let mut buf = Vec::new();
        query(&mut buf, "SELECT 1");
        assert_eq!(buf[0], b'Q');
        assert_eq!(u32::from_be_bytes(buf[1..5].try_into().unwrap()), 4 + 9);
        assert_eq!(&buf[5..], b"SELECT 1\0");
        let mut buf = Vec::new();
        bind_i64(&mut buf, "P_1", &[-42]);
        let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
        assert_eq!(len + 1, buf.len());
    }
}
