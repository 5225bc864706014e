//! The RESP wire format: parsing commands (one, or a pipelined batch of
//! them, with the re-parse hint that keeps dripped commands linear) and
//! encoding replies for RESP2 or RESP3 ([`Out`]).

const MAX_INLINE: usize = 64 << 10;

/// A framing error: the client is told and disconnected.
#[derive(Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// Parses one command from `buf`. `Ok(None)` means incomplete. On success
/// returns the argument ranges (into `buf`) and the bytes consumed.
pub fn parse(
    buf: &[u8],
    max_bulk: usize,
    max_array: usize,
    args: &mut Vec<std::ops::Range<usize>>,
) -> Result<Option<usize>, ProtocolError> {
    args.clear();
    let caps = Caps {
        bulk: max_bulk,
        array: max_array,
        command: usize::MAX,
    };
    parse_append(buf, &caps, args, &mut 0)
}

/// The framing limits of one command.
struct Caps {
    bulk: usize,
    array: usize,
    command: usize,
}

/// The smallest possible encoding of one more element: `$0\r\n\r\n`.
const MIN_ELEMENT: usize = 6;

/// [`parse`] that appends to `args` (left as it was unless a whole command
/// was parsed).
///
/// When the command is incomplete, `need` is set to the least length of
/// `buf` at which parsing it again can succeed or get further.
fn parse_append(
    buf: &[u8],
    caps: &Caps,
    args: &mut Vec<std::ops::Range<usize>>,
    need: &mut usize,
) -> Result<Option<usize>, ProtocolError> {
    let base = args.len();
    let r = parse_one(buf, caps, base, args, need);
    if !matches!(r, Ok(Some(_))) {
        args.truncate(base);
    }
    r
}

fn parse_one(
    buf: &[u8],
    caps: &Caps,
    base: usize,
    args: &mut Vec<std::ops::Range<usize>>,
    need: &mut usize,
) -> Result<Option<usize>, ProtocolError> {
    *need = buf.len() + 1;
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        // Inline command: one line, split on blanks.
        let Some(nl) = memchr(b'\n', buf) else {
            if buf.len() > MAX_INLINE {
                return Err(ProtocolError("too big inline request".into()));
            }
            return Ok(None);
        };
        let line_end = if nl > 0 && buf[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        let mut i = 0;
        while i < line_end {
            while i < line_end && buf[i].is_ascii_whitespace() {
                i += 1;
            }
            let start = i;
            while i < line_end && !buf[i].is_ascii_whitespace() {
                i += 1;
            }
            if i > start {
                if args.len() - base >= caps.array {
                    return Err(ProtocolError("invalid multibulk length".into()));
                }
                args.push(start..i);
            }
        }
        return Ok(Some(nl + 1));
    }
    let Some((n, mut pos)) = read_int_line(buf, 1)? else {
        return Ok(None);
    };
    if n < 0 || n as usize > caps.array {
        return Err(ProtocolError("invalid multibulk length".into()));
    }
    let n = n as usize;
    let mut declared = 0usize;
    for i in 0..n {
        if pos >= buf.len() {
            *need = pos + (n - i) * MIN_ELEMENT;
            return Ok(None);
        }
        if buf[pos] != b'$' {
            return Err(ProtocolError(format!(
                "expected '$', got '{}'",
                (buf[pos] as char).escape_default()
            )));
        }
        let Some((len, p)) = read_int_line(buf, pos + 1)? else {
            *need = (buf.len() + 1).max(pos + (n - i) * MIN_ELEMENT);
            return Ok(None);
        };
        if len < 0 || len as usize > caps.bulk {
            return Err(ProtocolError("invalid bulk length".into()));
        }
        let len = len as usize;
        declared += len;
        if declared > caps.command {
            return Err(ProtocolError(format!(
                "command too big (over {} bytes in all)",
                caps.command
            )));
        }
        if buf.len() < p + len + 2 {
            *need = p + len + 2 + (n - i - 1) * MIN_ELEMENT;
            return Ok(None);
        }
        if &buf[p + len..p + len + 2] != b"\r\n" {
            return Err(ProtocolError("bulk string not terminated by CRLF".into()));
        }
        args.push(p..p + len);
        pos = p + len + 2;
    }
    Ok(Some(pos))
}

fn memchr(b: u8, s: &[u8]) -> Option<usize> {
    s.iter().position(|&c| c == b)
}

/// Reads a decimal integer terminated by CRLF starting at `start`.
fn read_int_line(buf: &[u8], start: usize) -> Result<Option<(i64, usize)>, ProtocolError> {
    let mut i = start;
    let mut v: i64 = 0;
    let mut neg = false;
    if i < buf.len() && buf[i] == b'-' {
        neg = true;
        i += 1;
    }
    let digits_start = i;
    while i < buf.len() && buf[i].is_ascii_digit() {
        if i - digits_start >= 18 {
            return Err(ProtocolError("invalid length".into()));
        }
        v = v * 10 + (buf[i] - b'0') as i64;
        i += 1;
    }
    if i + 1 >= buf.len() {
        if i - digits_start > 18 {
            return Err(ProtocolError("invalid length".into()));
        }
        return Ok(None);
    }
    if i == digits_start || buf[i] != b'\r' || buf[i + 1] != b'\n' {
        return Err(ProtocolError("invalid length".into()));
    }
    Ok(Some((if neg { -v } else { v }, i + 2)))
}

/// Reply encoder for one connection's protocol version.
pub struct Out {
    /// Encoded bytes.
    pub buf: Vec<u8>,
    /// 2 or 3.
    pub proto: u8,
}

impl Out {
    pub(crate) fn simple(&mut self, s: &str) {
        self.buf.push(b'+');
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
    pub(crate) fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }
    pub(crate) fn error(&mut self, s: &str) {
        self.buf.push(b'-');
        // Error lines must not contain CR/LF.
        self.buf.extend(
            s.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        self.buf.extend_from_slice(b"\r\n");
    }
    pub(crate) fn int(&mut self, v: i64) {
        self.buf.push(b':');
        self.buf.extend_from_slice(v.to_string().as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
    pub(crate) fn boolean(&mut self, v: bool) {
        if self.proto >= 3 {
            self.buf
                .extend_from_slice(if v { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            self.buf
                .extend_from_slice(if v { b":1\r\n" } else { b":0\r\n" });
        }
    }
    pub(crate) fn bulk(&mut self, b: &[u8]) {
        self.buf.push(b'$');
        self.buf.extend_from_slice(b.len().to_string().as_bytes());
        self.buf.extend_from_slice(b"\r\n");
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(b"\r\n");
    }
    pub(crate) fn null(&mut self) {
        if self.proto >= 3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"$-1\r\n");
        }
    }
    pub(crate) fn array(&mut self, n: usize) {
        self.buf.push(b'*');
        self.buf.extend_from_slice(n.to_string().as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
    pub(crate) fn map(&mut self, n: usize) {
        if self.proto >= 3 {
            self.buf.push(b'%');
            self.buf.extend_from_slice(n.to_string().as_bytes());
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.array(n * 2);
        }
    }
}

/// Most commands parsed ahead of their execution.
pub(crate) const MAX_PARSED: usize = 256;

/// The complete commands at the start of the read buffer, parsed before any
/// of them runs, so that the filter memory of later lookups can be fetched
/// while earlier ones execute (each `BF.EXISTS` of a pipeline is a cache
/// miss otherwise, one at a time).
#[derive(Default)]
pub(crate) struct Parsed {
    /// Arguments of all commands (ranges into the buffer).
    pub(crate) args: Vec<std::ops::Range<usize>>,
    /// Per command: its arguments (a range of `args`) and where it ends in the buffer.
    pub(crate) cmds: Vec<(std::ops::Range<usize>, usize)>,
    /// The buffer must be at least this long before parsing the incomplete
    /// command at its start again can get further (0: parse now).
    pub(crate) need: usize,
}

impl Parsed {
    /// Parses up to [`MAX_PARSED`] commands; returns the framing error that
    /// stopped it, if any (it follows the commands parsed).
    pub(crate) fn parse(&mut self, buf: &[u8], limits: &crate::Limits) -> Option<ProtocolError> {
        self.args.clear();
        self.cmds.clear();
        if buf.len() < self.need {
            // Not enough new bytes for the incomplete command to get further.
            return None;
        }
        self.need = 0;
        let caps = Caps {
            bulk: limits.max_bulk_bytes,
            array: limits.max_array_len,
            command: limits.max_command_bytes,
        };
        let mut pos = 0;
        while self.cmds.len() < MAX_PARSED {
            let first = self.args.len();
            let mut need = 0;
            match parse_append(&buf[pos..], &caps, &mut self.args, &mut need) {
                Ok(Some(used)) => {
                    for r in &mut self.args[first..] {
                        *r = r.start + pos..r.end + pos;
                    }
                    pos += used;
                    self.cmds.push((first..self.args.len(), pos));
                }
                Ok(None) => {
                    self.need = pos + need;
                    return None;
                }
                Err(e) => return Some(e),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Parsed = Option<(Vec<Vec<u8>>, usize)>;

    fn p(buf: &[u8]) -> Result<Parsed, ProtocolError> {
        let mut r = Vec::new();
        Ok(parse(buf, 1 << 20, 1000, &mut r)?
            .map(|n| (r.iter().map(|x| buf[x.clone()].to_vec()).collect(), n)))
    }

    #[test]
    fn parses_arrays_inline_and_partials() {
        let (a, n) = p(b"*2\r\n$4\r\nPING\r\n$2\r\nhi\r\nrest").unwrap().unwrap();
        assert_eq!(a, vec![b"PING".to_vec(), b"hi".to_vec()]);
        assert_eq!(n, 22);
        assert_eq!(p(b"*2\r\n$4\r\nPING\r\n$2\r\nh").unwrap(), None);
        assert_eq!(p(b"*2\r\n$4\r").unwrap(), None);
        let (a, _) = p(b"PING  hello\r\n").unwrap().unwrap();
        assert_eq!(a.len(), 2);
        assert!(p(b"*1\r\n$4294967296\r\n").is_err());
        assert!(p(b"*99999999\r\n").is_err());
        assert!(p(b"*1\r\n:12\r\n").is_err());
        assert!(p(b"*1\r\n$2\r\nabcd\r\n").is_err());
        assert!(p(b"*x\r\n").is_err());
        assert!(p(b"*1\r\n$99999999999999999999999\r\n").is_err());
    }

    /// The re-parse hint never asks for more bytes than the complete command
    /// has (a command whose last byte arrived is always parsed: no stall),
    /// and always asks for more than the parser already had.
    #[test]
    fn reparse_hint_is_tight_and_safe() {
        let caps = Caps {
            bulk: 1 << 20,
            array: 1 << 20,
            command: 1 << 20,
        };
        let mut cmds: Vec<Vec<u8>> = vec![
            b"*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n".to_vec(),
            b"*3\r\n$0\r\n\r\n$0\r\n\r\n$0\r\n\r\n".to_vec(),
            b"PING hello\r\n".to_vec(),
        ];
        let mut many = format!("*{}\r\n", 300).into_bytes();
        for i in 0..300 {
            let item = "x".repeat(i % 7);
            many.extend_from_slice(format!("${}\r\n{item}\r\n", item.len()).as_bytes());
        }
        cmds.push(many);
        for cmd in &cmds {
            let mut args = Vec::new();
            let mut need = 0;
            assert!(
                matches!(parse_append(cmd, &caps, &mut args, &mut need), Ok(Some(n)) if n == cmd.len())
            );
            for cut in 0..cmd.len() {
                args.clear();
                let r = parse_append(&cmd[..cut], &caps, &mut args, &mut need);
                assert_eq!(r, Ok(None), "cut {cut}");
                assert!(
                    need > cut && need <= cmd.len(),
                    "cut {cut}: need {need} of {}",
                    cmd.len()
                );
            }
        }
    }

    /// A long command dripped in small pieces is parsed a few times, not
    /// once per piece (each real parse recomputes `need`; a skipped one
    /// leaves it alone), and is parsed completely once its last byte is in.
    #[test]
    fn dripped_command_is_parsed_a_few_times_not_per_read() {
        let mut cmd = b"*1000\r\n".to_vec();
        for i in 0..1000 {
            let item = format!("item-{i}");
            cmd.extend_from_slice(format!("${}\r\n{item}\r\n", item.len()).as_bytes());
        }
        let limits = crate::Limits::default();
        let mut batch = super::Parsed::default();
        let mut parses = 0;
        let mut last_need = usize::MAX;
        for end in (0..cmd.len()).step_by(7) {
            assert_eq!(batch.parse(&cmd[..end], &limits), None);
            assert!(batch.cmds.is_empty());
            if batch.need != last_need {
                parses += 1;
                last_need = batch.need;
            }
        }
        assert!(parses < 40, "{parses} parses for {} reads", cmd.len() / 7);
        assert_eq!(batch.parse(&cmd, &limits), None);
        assert_eq!(batch.cmds.len(), 1);
        assert_eq!(batch.cmds[0].0.len(), 1000);
    }

    #[test]
    fn command_size_is_bounded_in_all() {
        let caps = Caps {
            bulk: 100,
            array: 100,
            command: 250,
        };
        // Each bulk is allowed, their sum is not: refused from the headers,
        // before the data arrives.
        let mut cmd = b"*4\r\n".to_vec();
        for _ in 0..3 {
            cmd.extend_from_slice(b"$90\r\n");
            cmd.extend_from_slice(&[b'a'; 90]);
            cmd.extend_from_slice(b"\r\n");
        }
        let mut args = Vec::new();
        let r = parse_append(&cmd, &caps, &mut args, &mut 0);
        let too_big = Err(ProtocolError(
            "command too big (over 250 bytes in all)".into(),
        ));
        assert_eq!(r, too_big);
        let r = parse_append(&cmd[..cmd.len() - 10], &caps, &mut args, &mut 0);
        assert_eq!(r, too_big);
        // Just under the cap is fine.
        let ok = b"*2\r\n$100\r\n"
            .iter()
            .copied()
            .chain([b'a'; 100])
            .chain(*b"\r\n$100\r\n")
            .chain([b'b'; 100])
            .chain(*b"\r\n")
            .collect::<Vec<u8>>();
        assert!(matches!(
            parse_append(&ok, &caps, &mut args, &mut 0),
            Ok(Some(_))
        ));
    }
}
