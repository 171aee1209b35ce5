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

/// One parameter of a Bind, sent as text.
#[derive(Debug, Clone, Copy)]
pub enum Param<'a> {
    Int(i64),
    /// A fixed-point decimal: the value in units of 10^-scale.
    Fixed(i64, u32),
    Text(&'a [u8]),
    Null,
}

/// Bind with mixed text parameters and text results.
pub fn bind(buf: &mut Vec<u8>, statement: &str, params: &[Param<'_>]) {
    let at = begin_message(buf, b'B');
    buf.push(0); // unnamed portal
    put_cstr(buf, statement.as_bytes());
    buf.extend_from_slice(&0i16.to_be_bytes()); // all parameters text
    buf.extend_from_slice(&(params.len() as i16).to_be_bytes());
    for param in params {
        let len_at = buf.len();
        buf.extend_from_slice(&[0, 0, 0, 0]);
        let before = buf.len();
        match *param {
            Param::Int(v) => {
                write_i64(buf, v);
            }
            Param::Fixed(v, scale) => write_fixed(buf, v, scale),
            Param::Text(t) => buf.extend_from_slice(t),
            Param::Null => {
                buf[len_at..len_at + 4].copy_from_slice(&(-1i32).to_be_bytes());
                continue;
            }
        }
        let n = (buf.len() - before) as u32;
        buf[len_at..len_at + 4].copy_from_slice(&n.to_be_bytes());
    }
    buf.extend_from_slice(&0i16.to_be_bytes()); // all results text
    end_message(buf, at);
}

/// Append a fixed-point decimal: `value` in units of 10^-`scale`
/// (write_fixed(1234, 2) = "12.34"; write_fixed(-1000, 2) = "-10.00").
#[inline]
pub fn write_fixed(out: &mut Vec<u8>, value: i64, scale: u32) {
    let unit = 10i64.pow(scale);
    if value < 0 {
        out.push(b'-');
    }
    let v = value.unsigned_abs() as i64;
    write_i64(out, v / unit);
    if scale == 0 {
        return;
    }
    out.push(b'.');
    let mut frac = v % unit;
    let mut digits = [b'0'; 18];
    for i in (0..scale as usize).rev() {
        digits[i] = b'0' + (frac % 10) as u8;
        frac /= 10;
    }
    out.extend_from_slice(&digits[..scale as usize]);
}

/// Read decimal text ("12.3", "-10.00", "7") as units of 10^-`scale`
/// (digits beyond the scale are cut).
pub fn parse_fixed(text: &[u8], scale: u32) -> Option<i64> {
    let (neg, digits) = match text.first()? {
        b'-' => (true, &text[1..]),
        _ => (false, text),
    };
    let mut whole: i64 = 0;
    let mut frac: i64 = 0;
    let mut frac_digits = 0;
    let mut in_frac = false;
    for &c in digits {
        match c {
            b'0'..=b'9' if !in_frac => whole = whole.checked_mul(10)? + (c - b'0') as i64,
            b'0'..=b'9' => {
                if frac_digits < scale {
                    frac = frac * 10 + (c - b'0') as i64;
                    frac_digits += 1;
                }
            }
            b'.' if !in_frac => in_frac = true,
            _ => return None,
        }
    }
    let v = whole.checked_mul(10i64.pow(scale))? + frac * 10i64.pow(scale - frac_digits);
    Some(if neg { -v } else { v })
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
    fn fixed_point_text_goes_both_ways() {
        let f = |v, s| {
            let mut out = Vec::new();
            write_fixed(&mut out, v, s);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(f(1234, 2), "12.34");
        assert_eq!(f(-1000, 2), "-10.00");
        assert_eq!(f(5, 4), "0.0005");
        assert_eq!(parse_fixed(b"12.3", 2), Some(1230));
        assert_eq!(parse_fixed(b"-10.00", 2), Some(-1000));
        assert_eq!(parse_fixed(b"0.1234", 4), Some(1234));
        assert_eq!(parse_fixed(b"7", 2), Some(700));
        assert_eq!(parse_fixed(b"x", 2), None);
        let mut buf = Vec::new();
        bind(
            &mut buf,
            "s",
            &[Param::Int(3), Param::Null, Param::Text(b"ab")],
        );
        let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
        assert_eq!(len + 1, buf.len());
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
