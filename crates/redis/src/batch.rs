//! A batch of commands encoded once, straight into the bytes Redis reads
//! (RESP arrays of bulk strings), with each command's slot and whether it
//! may be sent twice.
//!
//! Why not `redis::Cmd` for the hot paths: an add used to be a `BITFIELD`
//! of 2 + 4·k arguments (50 for k = 12). Built as a `Cmd`, each argument is
//! formatted into the command's buffer, the command is cloned into a
//! pipeline and encoded again; measured on the 2-core machine, that was
//! about a third of the client's time per add. Here each argument is
//! written once, into the buffer that goes to the socket, and a pipeline
//! to a node is a copy of byte ranges. Rarely used commands still come
//! as `Cmd`s ([`Batch::push`]), encoded by the crate.

use redis::Cmd;

use crate::layout::key_slot;

/// The command may be sent again after a failure: it only reads.
pub(crate) const READ: u8 = 1;
/// The command may be answered by a replica (a read of filter data).
pub(crate) const REPLICA_OK: u8 = 2;

/// Commands in RESP, one buffer for the batch.
#[derive(Default)]
pub(crate) struct Batch {
    buf: Vec<u8>,
    /// Per command: its slot, the end of its bytes in `buf` (the start is
    /// the previous command's end), its flags ([`READ`], [`REPLICA_OK`]).
    cmds: Vec<(u16, usize, u8)>,
}

/// Writes `n` in decimal.
fn decimal(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

fn decimal_len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

impl Batch {
    /// An empty batch.
    pub(crate) fn new() -> Batch {
        Batch::default()
    }

    /// Empties the batch, keeping its memory for the next one (a batch of
    /// 4,096 adds is about 1 MB: allocated afresh each time, its pages
    /// were faulted in again for every batch).
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
        self.cmds.clear();
    }

    /// Commands in the batch.
    pub(crate) fn len(&self) -> usize {
        self.cmds.len()
    }

    /// True if there is no command.
    pub(crate) fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }

    /// Starts a command of `args` arguments (its name and key included),
    /// whose first argument is `name` and second `key` (which sets its
    /// slot). The caller adds the other `args − 2` arguments with
    /// [`Batch::arg`]/[`Batch::arg_u64`] and ends with [`Batch::end`].
    pub(crate) fn start(&mut self, args: usize, name: &[u8], key: &[u8]) {
        self.buf.push(b'*');
        decimal(&mut self.buf, args as u64);
        self.buf.extend_from_slice(b"\r\n");
        self.arg(name);
        self.arg(key);
        self.cmds.push((key_slot(key), 0, 0));
    }

    /// A command that is only its name (`MULTI`, `EXEC`, `UNWATCH`),
    /// complete: no [`Batch::end`].
    pub(crate) fn bare(&mut self, name: &[u8]) {
        self.buf.extend_from_slice(b"*1\r\n");
        self.arg(name);
        self.cmds.push((0, self.buf.len(), 0));
    }

    /// One argument.
    pub(crate) fn arg(&mut self, a: &[u8]) {
        self.buf.push(b'$');
        decimal(&mut self.buf, a.len() as u64);
        self.buf.extend_from_slice(b"\r\n");
        self.buf.extend_from_slice(a);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// One argument, a number in decimal.
    pub(crate) fn arg_u64(&mut self, n: u64) {
        self.buf.push(b'$');
        decimal(&mut self.buf, decimal_len(n) as u64);
        self.buf.extend_from_slice(b"\r\n");
        decimal(&mut self.buf, n);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// Ends the command started last, with its flags.
    pub(crate) fn end(&mut self, flags: u8) {
        let last = self.cmds.last_mut().expect("a command was started");
        last.1 = self.buf.len();
        last.2 = flags;
    }

    /// Adds a command built with the `redis` crate. Its second argument is
    /// its key; reads of filter data and metadata are marked [`READ`].
    pub(crate) fn push(&mut self, cmd: &Cmd) {
        let mut args = cmd.args_iter();
        let name = match args.next() {
            Some(redis::Arg::Simple(n)) => n,
            _ => b"".as_slice(),
        };
        let key = match args.next() {
            Some(redis::Arg::Simple(k)) => k,
            _ => b"".as_slice(),
        };
        let mut flags = 0;
        if matches!(
            name,
            b"GETRANGE"
                | b"GET"
                | b"EXISTS"
                | b"HGET"
                | b"HMGET"
                | b"HGETALL"
                | b"SMEMBERS"
                | b"SCARD"
                | b"BITCOUNT"
                | b"STRLEN"
        ) {
            flags |= READ;
        }
        if matches!(
            name,
            b"GETRANGE" | b"GET" | b"EXISTS" | b"BITCOUNT" | b"STRLEN"
        ) {
            flags |= REPLICA_OK;
        }
        let slot = key_slot(key);
        cmd.write_packed_command(&mut self.buf);
        self.cmds.push((slot, self.buf.len(), flags));
    }

    /// The slot of command `i`.
    pub(crate) fn slot(&self, i: usize) -> u16 {
        self.cmds[i].0
    }

    /// The flags of command `i`.
    #[cfg(test)]
    pub(crate) fn flags(&self, i: usize) -> u8 {
        self.cmds[i].2
    }

    /// True if every command only reads.
    pub(crate) fn all(&self, flag: u8) -> bool {
        self.cmds.iter().all(|c| c.2 & flag != 0)
    }

    /// The bytes of command `i`.
    pub(crate) fn bytes(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.cmds[i - 1].1 };
        &self.buf[start..self.cmds[i].1]
    }

    /// The bytes of all commands, in order.
    pub(crate) fn all_bytes(&self) -> &[u8] {
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_as_the_redis_crate_does() {
        // The bytes of a hand-built command equal the crate's encoding of
        // the same command (golden bytes, and the crate as a second check).
        let mut b = Batch::new();
        b.start(6, b"BITFIELD", b"bg:{ois}:w:0");
        b.arg(b"SET");
        b.arg(b"u1");
        b.arg_u64(8_388_607);
        b.arg_u64(1);
        b.end(0);
        b.start(4, b"GETRANGE", b"k");
        b.arg_u64(0);
        b.arg_u64(63);
        b.end(READ | REPLICA_OK);
        assert_eq!(
            b.bytes(0),
            b"*6\r\n$8\r\nBITFIELD\r\n$12\r\nbg:{ois}:w:0\r\n$3\r\nSET\r\n$2\r\nu1\r\n$7\r\n8388607\r\n$1\r\n1\r\n"
        );
        let crate_cmd = redis::cmd("BITFIELD")
            .arg("bg:{ois}:w:0")
            .arg("SET")
            .arg("u1")
            .arg(8_388_607u64)
            .arg(1)
            .get_packed_command();
        assert_eq!(b.bytes(0), crate_cmd.as_slice());
        assert_eq!(
            b.bytes(1),
            redis::cmd("GETRANGE")
                .arg("k")
                .arg(0)
                .arg(63)
                .get_packed_command()
        );
        assert_eq!(b.slot(0), key_slot(b"ois"));
        assert_eq!((b.flags(0), b.flags(1)), (0, READ | REPLICA_OK));
        let mut c = Batch::new();
        c.push(redis::cmd("HGETALL").arg("bg:{w}"));
        c.push(redis::cmd("HINCRBY").arg("bg:{w}").arg("items").arg(3));
        assert_eq!((c.flags(0), c.flags(1)), (READ, 0));
        assert_eq!(c.all_bytes().len(), c.bytes(0).len() + c.bytes(1).len());
        c.bare(b"MULTI");
        assert_eq!(c.bytes(2), redis::cmd("MULTI").get_packed_command());
        for n in [0u64, 9, 10, 99, 100, u64::MAX] {
            let mut d = Vec::new();
            decimal(&mut d, n);
            assert_eq!(d, n.to_string().as_bytes());
            assert_eq!(decimal_len(n), d.len());
        }
    }
}
