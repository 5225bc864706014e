//! Reading one item per line from files or standard input, in parallel chunks.
//!
//! A reader thread fills ~4 MiB chunks that end on a line boundary and tags
//! each with the line number of its first line; worker threads (rayon) process
//! chunks independently; results come back to the caller **in input order**,
//! so `check` prints matches in the order of its input while `build` uses every
//! core. Decompression happens in the reader thread: of files by their
//! extension (`.gz`, `.zst`), of standard input by its first bytes (the gzip
//! and zstd magic numbers).
//!
//! Streaming: a regular file is read in whole chunks. A pipe, FIFO or
//! terminal is read as its writer writes: when a read leaves no more bytes
//! ready within 2 ms ([`PAUSE`], [`Chunk::paused`]), the whole lines read
//! so far are sent at once,
//! so `check`, `dedup` and `add --print-new` answer a line that is followed
//! by a pause without waiting for a full chunk or the end of input (they
//! flush their output after such a chunk).
//!
//! An input may also be *generated*: lines made in-process by a
//! [`Generate`] registered under a name ([`register_generated`]), filled by
//! the workers themselves so that generation runs on every core. The
//! `bloomgate` binary registers none; benchmarks (`crates/bench`, the
//! ten-billion run) use them to drive the commands' own code with more text
//! than any disk holds.
//!
//! Line rules: `\n` ends a line, one trailing `\r` is stripped, empty lines are
//! skipped, and a line longer than [`MAX_LINE`] bytes is reported with its line
//! number (never silently cut).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use rayon::iter::{ParallelBridge, ParallelIterator};

/// Longest accepted line, in bytes (after stripping `\r\n`). Longer lines are
/// invalid entries, reported with their line number.
pub const MAX_LINE: usize = 64 * 1024;

fn too_long_reason() -> String {
    format!("line longer than {MAX_LINE} bytes")
}

/// Target chunk size.
const CHUNK: usize = 4 << 20;

/// Set by Ctrl-C (SIGINT), SIGTERM or SIGHUP once [`stop_on_signals`] is
/// installed: readers stop reading and [`process`] returns an error, so that
/// the command unwinds through its cleanup (temporary files removed, an
/// in-place update resealed) instead of dying mid-write.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Makes the first Ctrl-C / SIGTERM / SIGHUP stop [`process`] at the next
/// chunk; a second one, or five seconds without an exit (a read blocked on
/// an idle standard input), exits at once with status 130.
pub fn stop_on_signals() {
    // ctrlc (with its "termination" feature) is the maintained, portable way
    // to turn these signals into a flag: it runs this handler on a thread of
    // its own, outside signal context, so the handler may wait.
    let _ = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_secs(5));
            eprintln!("bloomgate: interrupted");
            std::process::exit(130);
        });
    });
}

/// True once a signal asked the command to stop ([`stop_on_signals`]).
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Lines made in-process instead of read from a file (see the module doc).
pub trait Generate: Send + Sync {
    /// How many lines the input has.
    fn lines(&self) -> u64;
    /// Appends lines `range` (0-based), each non-empty and ending in `\n`,
    /// to `out`. Must give the same bytes every time it is asked.
    fn fill(&self, range: Range<u64>, out: &mut Vec<u8>);
}

/// Generated inputs by name ([`register_generated`]).
static GENERATED: Mutex<Vec<(String, Arc<dyn Generate>)>> = Mutex::new(Vec::new());

/// Makes `name` an input whose lines `generate` makes, for every command
/// run in this process from now on. Names are matched exactly and before
/// the file system; pick one no file has (e.g. `generated:urls`).
pub fn register_generated(name: &str, generate: Arc<dyn Generate>) {
    let mut list = GENERATED.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|(n, _)| n != name);
    list.push((name.to_string(), generate));
}

fn generated(name: &str) -> Option<Arc<dyn Generate>> {
    let list = GENERATED.lock().unwrap_or_else(|e| e.into_inner());
    list.iter().find(|(n, _)| n == name).map(|(_, g)| g.clone())
}

/// Lines per chunk of a generated input (about [`CHUNK`] bytes of URLs).
const GENERATED_LINES: u64 = 64 * 1024;

/// A run of whole lines from one input.
pub struct Chunk {
    /// Index of the input in the argument list.
    pub input: usize,
    /// Line number (1-based) of the first line in `data`.
    pub first_line: u64,
    /// The bytes, ending with `\n` unless this is the input's last chunk.
    pub data: Vec<u8>,
    /// Lines in this input that were too long (line numbers), found by the reader.
    pub too_long: Vec<u64>,
    /// This chunk's place among all chunks of the inputs, from 0. Chunks are
    /// cut the same way on every pass over unchanged inputs, so a command
    /// that reads its inputs more than once can find a chunk again by it.
    pub seq: u64,
    /// For a generated input: the lines still to be made into `data` (by
    /// the worker that takes the chunk).
    pending: Option<(Arc<dyn Generate>, Range<u64>)>,
    /// The input had no more bytes ready when this chunk was cut (a pipe
    /// whose writer paused): a command that streams its answers flushes
    /// them after this chunk.
    pub paused: bool,
}

impl Chunk {
    /// Calls `f(line_number, Ok(line))` for every non-empty line, and
    /// `f(line_number, Err(reason))` for every line longer than [`MAX_LINE`]
    /// (including lines too long to fit in a chunk, found by the reader).
    pub fn for_each_line<'a>(&'a self, mut f: impl FnMut(u64, Result<&'a [u8], String>)) {
        for &l in &self.too_long {
            f(l, Err(too_long_reason()));
        }
        let mut line_no = self.first_line;
        let mut rest = &self.data[..];
        while !rest.is_empty() {
            let (mut line, next) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &rest[rest.len()..]),
            };
            rest = next;
            if let [head @ .., b'\r'] = line {
                line = head;
            }
            if line.len() > MAX_LINE {
                f(line_no, Err(too_long_reason()));
            } else if !line.is_empty() {
                f(line_no, Ok(line));
            }
            line_no += 1;
        }
    }
}

/// An opened input: its bytes (decompressed), its size if it is a regular
/// file (for progress), and for a pipe, FIFO or terminal read as it is
/// (not decompressed) the descriptor to ask whether more bytes are ready.
pub struct Opened {
    /// The (decompressed) bytes.
    pub reader: Box<dyn Read + Send>,
    /// The file size, for a regular file.
    pub size: Option<u64>,
    /// For a live input: a duplicate of its descriptor, polled for
    /// readiness.
    live: Option<std::os::fd::OwnedFd>,
}

/// The spool that stands for standard input while one is registered
/// ([`respoolable`]).
static STDIN_SPOOL: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

/// Standard input, decompressed when it starts with the gzip or zstd magic
/// number. Reads only as many bytes as it takes to rule both out (one, for
/// text), so a line typed or piped alone is not held back.
fn open_stdin() -> Result<Opened> {
    use std::os::fd::AsFd;
    let mut stdin = io::stdin();
    let mut head = Vec::with_capacity(4);
    let mut byte = [0u8; 1];
    while head.len() < ZSTD_MAGIC.len()
        && (GZIP_MAGIC.starts_with(&head) || ZSTD_MAGIC.starts_with(&head))
        && !head.starts_with(GZIP_MAGIC)
    {
        match stdin.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => head.push(byte[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("-: read error"),
        }
    }
    let live = if live_fd(&stdin) {
        stdin.as_fd().try_clone_to_owned().ok()
    } else {
        None
    };
    let whole = io::Cursor::new(head.clone()).chain(stdin);
    let opened = if head.starts_with(GZIP_MAGIC) {
        Opened {
            reader: Box::new(flate2::read::MultiGzDecoder::new(BufReader::new(whole))),
            size: None,
            live: None,
        }
    } else if head == ZSTD_MAGIC {
        Opened {
            reader: Box::new(
                zstd::stream::read::Decoder::new(whole).context("-: cannot start zstd decoder")?,
            ),
            size: None,
            live: None,
        }
    } else {
        Opened {
            reader: Box::new(whole),
            size: None,
            live,
        }
    };
    Ok(opened)
}

/// Whether `file` is read as its writer writes: a pipe, FIFO, terminal or
/// socket.
fn live_fd(file: &impl std::os::fd::AsFd) -> bool {
    use rustix::fs::FileType;
    rustix::fs::fstat(file).is_ok_and(|st| {
        matches!(
            FileType::from_raw_mode(st.st_mode),
            FileType::Fifo | FileType::CharacterDevice | FileType::Socket
        )
    })
}

/// How long an input may stay idle before it counts as paused. A writer
/// at full speed (`cat` of a file) refills a pipe within microseconds; cut
/// at every empty pipe instead, a chunk was a few 64 KiB pipe-fulls and
/// `check` through a pipe took 0.55 CPU-s per 10⁶ lines instead of 0.30
/// (BENCHMARKS.md, "Streaming answers"). 2 ms holds an answer back
/// for no more than that.
const PAUSE: rustix::event::Timespec = rustix::event::Timespec {
    tv_sec: 0,
    tv_nsec: 2_000_000,
};

/// Whether bytes (or the end) can be read from `fd` within [`PAUSE`]. An
/// error of the poll itself counts as ready: the read then decides.
fn ready(fd: &std::os::fd::OwnedFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    poll(&mut fds, Some(&PAUSE)).map_or(true, |n| n > 0)
}

/// Opens an input by name: `-` is standard input (decompressed by its magic
/// bytes, or the spool that stands for it); `.gz` and `.zst` files are
/// decompressed.
pub fn open_input(name: &str) -> Result<Opened> {
    if name == "-" {
        let spool = STDIN_SPOOL
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        return match spool {
            Some(path) => {
                let file = File::open(&path).context("-: cannot open its spool")?;
                Ok(Opened {
                    reader: Box::new(
                        zstd::stream::read::Decoder::new(file)
                            .context("-: cannot start zstd decoder")?,
                    ),
                    size: None,
                    live: None,
                })
            }
            None => open_stdin(),
        };
    }
    let compressed = name.ends_with(".gz") || name.ends_with(".zst");
    if !compressed && generated(name).is_none() {
        let file = File::open(name).with_context(|| format!("{name}: cannot open"))?;
        if live_fd(&file) {
            let live = std::os::fd::OwnedFd::from(
                file.try_clone()
                    .with_context(|| format!("{name}: cannot duplicate its descriptor"))?,
            );
            return Ok(Opened {
                reader: Box::new(file),
                size: None,
                live: Some(live),
            });
        }
    }
    let (reader, size) = open(name)?;
    Ok(Opened {
        reader,
        size,
        live: None,
    })
}

/// Opens an input by name: `-` is standard input; `.gz` and `.zst` are
/// decompressed. Also returns the file size (for progress), if known.
pub fn open(name: &str) -> Result<(Box<dyn Read + Send>, Option<u64>)> {
    if name == "-" {
        let o = open_input(name)?;
        return Ok((o.reader, o.size));
    }
    let file = File::open(name).with_context(|| format!("{name}: cannot open"))?;
    let meta = file
        .metadata()
        .with_context(|| format!("{name}: cannot stat"))?;
    if meta.is_dir() {
        anyhow::bail!("{name}: is a directory");
    }
    let size = Some(meta.len());
    let reader: Box<dyn Read + Send> = if name.ends_with(".gz") {
        Box::new(flate2::read::MultiGzDecoder::new(BufReader::new(file)))
    } else if name.ends_with(".zst") {
        Box::new(
            zstd::stream::read::Decoder::new(file)
                .with_context(|| format!("{name}: cannot start zstd decoder"))?,
        )
    } else {
        Box::new(file)
    };
    Ok((reader, size))
}

/// Bytes read so far across inputs (for the progress bar).
pub type Progress = Arc<AtomicU64>;

/// Runs the reader thread: splits every input into chunks and sends them.
fn spawn_reader(
    inputs: Vec<String>,
    progress: Progress,
) -> (Receiver<Result<Chunk>>, std::thread::JoinHandle<()>) {
    let (tx, rx) = sync_channel::<Result<Chunk>>(2 * rayon::current_num_threads() + 2);
    let handle = std::thread::spawn(move || {
        for (index, name) in inputs.iter().enumerate() {
            if let Some(g) = generated(name) {
                let total = g.lines();
                let mut start = 0;
                while start < total && !interrupted() {
                    let end = total.min(start + GENERATED_LINES);
                    let chunk = Chunk {
                        input: index,
                        first_line: start + 1,
                        data: Vec::new(),
                        too_long: Vec::new(),
                        seq: 0,
                        pending: Some((g.clone(), start..end)),
                        paused: false,
                    };
                    if tx.send(Ok(chunk)).is_err() {
                        return;
                    }
                    start = end;
                }
                continue;
            }
            let result = (|| -> Result<()> {
                let Opened {
                    mut reader, live, ..
                } = open_input(name)?;
                let mut line_no = 1u64;
                let mut carry: Vec<u8> = Vec::new();
                let mut skipping_long = false;
                let mut too_long = Vec::new();
                loop {
                    if interrupted() {
                        return Ok(());
                    }
                    let mut buf = std::mem::take(&mut carry);
                    let start = buf.len();
                    let (n, paused) = match live.as_ref() {
                        // A whole chunk read straight into the buffer's
                        // spare room: not zeroed first (4 MiB of stores per
                        // chunk), since the reads overwrite it.
                        None => {
                            buf.reserve_exact(CHUNK);
                            (&mut reader)
                                .take(CHUNK as u64)
                                .read_to_end(&mut buf)
                                .map(|n| (n, false))
                        }
                        Some(fd) => {
                            buf.resize(start + CHUNK, 0);
                            let read = read_some(&mut reader, &mut buf[start..], Some(fd));
                            buf.truncate(start + read.as_ref().map_or(0, |r| r.0));
                            read
                        }
                    }
                    .with_context(|| format!("{name}: read error"))?;
                    progress.fetch_add(n as u64, Ordering::Relaxed);
                    let eof = n == 0;
                    if skipping_long {
                        // Inside an over-long line: drop bytes up to its newline.
                        match memchr::memchr(b'\n', &buf) {
                            Some(i) => {
                                buf.drain(..=i);
                                skipping_long = false;
                                line_no += 1;
                            }
                            None if eof => break,
                            None => continue,
                        }
                    }
                    let cut = if eof {
                        buf.len()
                    } else {
                        match memchr::memrchr(b'\n', &buf) {
                            Some(i) => i + 1,
                            None => {
                                // No newline in a whole chunk: if the pending line is
                                // already too long, report and skip it; else read more.
                                if buf.len() > MAX_LINE {
                                    too_long.push(line_no);
                                    skipping_long = true;
                                } else {
                                    carry = buf;
                                }
                                continue;
                            }
                        }
                    };
                    carry = buf.split_off(cut);
                    let data = buf;
                    // Counting lines here is one vectorized pass; the
                    // per-line work (and the length check) is the workers'.
                    let lines_in_chunk = memchr::memchr_iter(b'\n', &data).count() as u64
                        + u64::from(!data.is_empty() && !data.ends_with(b"\n"));
                    if !data.is_empty() || !too_long.is_empty() {
                        let chunk = Chunk {
                            input: index,
                            first_line: line_no,
                            data,
                            too_long: std::mem::take(&mut too_long),
                            seq: 0,
                            pending: None,
                            paused,
                        };
                        if tx.send(Ok(chunk)).is_err() {
                            return Ok(());
                        }
                    }
                    line_no += lines_in_chunk;
                    if eof {
                        break;
                    }
                }
                if !too_long.is_empty() {
                    // An over-long last line: report it even though no data follows.
                    let chunk = Chunk {
                        input: index,
                        first_line: line_no,
                        data: Vec::new(),
                        too_long,
                        seq: 0,
                        pending: None,
                        paused: false,
                    };
                    let _ = tx.send(Ok(chunk));
                }
                Ok(())
            })();
            if let Err(e) = result {
                let _ = tx.send(Err(e));
                return;
            }
        }
    });
    (rx, handle)
}

/// Reads until `buf` is full or EOF, or, for a live input (`live`), until
/// what was read holds a whole line and no more bytes are ready. Returns
/// the bytes read and whether the input paused.
fn read_some(
    r: &mut dyn Read,
    buf: &mut [u8],
    live: Option<&std::os::fd::OwnedFd>,
) -> io::Result<(usize, bool)> {
    let Some(fd) = live else {
        return read_full(r, buf).map(|n| (n, false));
    };
    let mut n = 0;
    let mut line = false;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => {
                line = line || memchr::memchr(b'\n', &buf[n..n + k]).is_some();
                n += k;
                if line && !ready(fd) {
                    return Ok((n, true));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((n, false))
}

/// Reads until `buf` is full or EOF; returns bytes read.
pub(crate) fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Processes every chunk of `inputs` with `work` on all cores and hands the
/// results to `sink` in input order. Stops at the first read error or the
/// first error returned by `sink`.
pub fn process<R, W, S>(inputs: Vec<String>, progress: Progress, work: W, mut sink: S) -> Result<()>
where
    R: Send,
    W: Fn(&Chunk) -> R + Sync + Send,
    S: FnMut(&Chunk, R) -> Result<()>,
{
    let (rx, reader) = spawn_reader(inputs, progress);
    let (done_tx, done_rx) =
        sync_channel::<(u64, Result<(Chunk, R)>)>(2 * rayon::current_num_threads() + 2);
    let outcome = std::thread::scope(|scope| -> Result<()> {
        let work = &work;
        scope.spawn(move || {
            rx.into_iter()
                .enumerate()
                .par_bridge()
                .for_each_with(done_tx, |tx, (seq, chunk)| {
                    let msg = chunk.map(|mut c| {
                        c.seq = seq as u64;
                        if let Some((g, range)) = c.pending.take() {
                            c.data.reserve(CHUNK);
                            g.fill(range, &mut c.data);
                        }
                        let r = work(&c);
                        (c, r)
                    });
                    let _ = tx.send((seq as u64, msg));
                });
        });
        let mut pending = BTreeMap::new();
        let mut next = 0u64;
        let mut result = Ok(());
        for (seq, msg) in done_rx.iter() {
            if result.is_err() {
                continue; // drain so the workers can finish
            }
            pending.insert(seq, msg);
            while let Some(msg) = pending.remove(&next) {
                next += 1;
                if interrupted() {
                    result = Err(anyhow::anyhow!("interrupted"));
                    break;
                }
                match msg {
                    Ok((chunk, r)) => {
                        if let Err(e) = sink(&chunk, r) {
                            result = Err(e);
                            break;
                        }
                    }
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        result
    });
    let _ = reader.join();
    // A reader stopped by a signal ends its input early without an error:
    // the pass is incomplete, whatever the sink saw.
    if interrupted() && outcome.is_ok() {
        anyhow::bail!("interrupted");
    }
    outcome
}

/// Copies standard input, zstd-compressed, into a temporary file in `dir`
/// (named `*.zst`, so [`open`] decompresses it), for commands that read
/// their input more than once. The file is removed when the returned value
/// is dropped, also after an error.
pub fn spool_stdin(dir: &std::path::Path) -> Result<tempfile::NamedTempFile> {
    let tmp = tempfile::Builder::new()
        .prefix(".bloomgate-stdin-")
        .suffix(".zst")
        .tempfile_in(dir)
        .with_context(|| format!("{}: cannot create a file to spool standard input (--tmp-dir chooses another directory)", dir.display()))?;
    // Reading standard input (and decompressing it) fails as `-`; only
    // writing the spool fails as the spool.
    let mut stdin = open_stdin()?.reader;
    let mut read_error = None;
    let mut write = || -> io::Result<()> {
        // Level 1: the spool is written once and read once per pass; speed
        // matters more than the last few percent of size.
        let mut enc = zstd::Encoder::new(io::BufWriter::new(tmp.as_file()), 1)?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            // A signal stops the copy at the next read, like the readers of
            // [`process`]; the spool is then removed by its drop.
            if interrupted() {
                return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
            }
            match stdin.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => enc.write_all(&buf[..n])?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    read_error = Some(e);
                    return Ok(());
                }
            }
        }
        enc.finish()?
            .into_inner()
            .map_err(|e| e.into_error())?
            .sync_all()
    };
    let written = write();
    if let Some(e) = read_error {
        return Err(e).context("-: read error");
    }
    match written {
        Ok(()) => Ok(tmp),
        Err(_) if interrupted() => anyhow::bail!("interrupted"),
        Err(e) => Err(e).with_context(|| {
            format!(
                "{}: cannot spool standard input (is the disk full? --tmp-dir chooses another directory)",
                tmp.path().display()
            )
        }),
    }
}

/// A spool of standard input that `-` stands for while it lives
/// ([`respoolable`]); removed when dropped.
pub struct Spool {
    _file: tempfile::NamedTempFile,
}

impl Drop for Spool {
    fn drop(&mut self) {
        *STDIN_SPOOL.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// For commands that read their inputs more than once: when `inputs` name
/// standard input (`-`), spools it in `dir` ([`spool_stdin`]) and makes
/// every later read of `-` read the spool, so that messages still name
/// `-`. Keep the returned spool alive while the inputs are read.
pub fn respoolable(
    inputs: &[String],
    dir: &std::path::Path,
) -> Result<(Vec<String>, Option<Spool>)> {
    if !inputs.iter().any(|i| i == "-") {
        return Ok((inputs.to_vec(), None));
    }
    let file = spool_stdin(dir)?;
    *STDIN_SPOOL.lock().unwrap_or_else(|e| e.into_inner()) = Some(file.path().to_path_buf());
    Ok((inputs.to_vec(), Some(Spool { _file: file })))
}

/// Sum of the sizes of the inputs that are regular files (None if any is stdin).
pub fn total_size(inputs: &[String]) -> Option<u64> {
    let mut total = 0;
    for name in inputs {
        if name == "-" || generated(name).is_some() {
            return None;
        }
        total += std::fs::metadata(name).ok()?.len();
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Lines = Vec<(u64, Result<Vec<u8>, String>)>;

    fn run(content: &[u8]) -> Lines {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in.txt");
        std::fs::write(&p, content).unwrap();
        let mut lines = Vec::new();
        process(
            vec![p.to_string_lossy().into_owned()],
            Progress::default(),
            |c| {
                let mut v = Vec::new();
                c.for_each_line(|n, l| v.push((n, l.map(<[u8]>::to_vec))));
                v
            },
            |_, v| {
                lines.extend(v);
                Ok(())
            },
        )
        .unwrap();
        lines
    }

    #[test]
    fn lines_numbers_crlf_and_empty() {
        let got = run(b"a\r\n\nb\nc");
        assert_eq!(
            got,
            vec![
                (1, Ok(b"a".to_vec())),
                (3, Ok(b"b".to_vec())),
                (4, Ok(b"c".to_vec()))
            ]
        );
    }

    #[test]
    fn too_long_lines_are_reported_in_and_across_chunks() {
        let mut s = b"ok\n".to_vec();
        s.extend(std::iter::repeat_n(b'x', MAX_LINE + 1));
        s.extend_from_slice(b"\nfine\n");
        s.extend(std::iter::repeat_n(b'y', CHUNK * 2 + 5));
        s.extend_from_slice(b"\nlast");
        let got = run(&s);
        let summary: Vec<(u64, bool)> = got.iter().map(|(n, l)| (*n, l.is_ok())).collect();
        assert_eq!(
            summary,
            vec![(1, true), (2, false), (3, true), (4, false), (5, true)]
        );
        assert_eq!(got[4].1.as_deref().unwrap(), b"last");
        // An over-long line at the very end, with no newline after it.
        let mut t = b"a\n".to_vec();
        t.extend(std::iter::repeat_n(b'z', CHUNK + 10));
        let got = run(&t);
        let summary: Vec<(u64, bool)> = got.iter().map(|(n, l)| (*n, l.is_ok())).collect();
        assert_eq!(summary, vec![(1, true), (2, false)]);
    }

    /// Line `i` is `g<i>`, for `lines` lines.
    struct Numbered(u64);

    impl Generate for Numbered {
        fn lines(&self) -> u64 {
            self.0
        }

        fn fill(&self, range: Range<u64>, out: &mut Vec<u8>) {
            for i in range {
                out.extend_from_slice(format!("g{i}\n").as_bytes());
            }
        }
    }

    #[test]
    fn generated_inputs_are_read_in_order_beside_files() {
        let n = 3 * GENERATED_LINES + 17;
        register_generated("generated:test-numbered", Arc::new(Numbered(n)));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("in.txt");
        std::fs::write(&file, "a\nb\n").unwrap();
        let inputs = vec![
            "generated:test-numbered".to_string(),
            file.to_string_lossy().into_owned(),
        ];
        assert_eq!(total_size(&inputs), None, "a generated input has no size");
        let mut got = Vec::new();
        process(
            inputs,
            Progress::default(),
            |c| {
                let mut v = Vec::new();
                c.for_each_line(|n, l| v.push((c.input, n, l.unwrap().to_vec())));
                v
            },
            |_, v| {
                got.extend(v);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(got.len() as u64, n + 2);
        for (i, (input, line_no, line)) in got[..n as usize].iter().enumerate() {
            assert_eq!((*input, *line_no), (0, i as u64 + 1));
            assert_eq!(line, format!("g{i}").as_bytes());
        }
        assert_eq!(
            got[n as usize..],
            [(1, 1, b"a".to_vec()), (1, 2, b"b".to_vec())]
        );
    }

    #[test]
    fn many_chunks_keep_order_and_numbers() {
        let mut s = Vec::new();
        for i in 0..1_500_000u64 {
            s.extend_from_slice(format!("line{i}\n").as_bytes());
        }
        let got = run(&s);
        assert_eq!(got.len(), 1_500_000);
        for (i, (n, l)) in got.iter().enumerate().step_by(9973) {
            assert_eq!(*n, i as u64 + 1);
            assert_eq!(l.as_deref().unwrap(), format!("line{i}").as_bytes());
        }
    }
}
