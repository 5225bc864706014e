//! The helper: Squid's requests answered from one or more [`List`]s.
//!
//! # Batches, so that one slow lookup never stalls the pipe
//!
//! A reader thread reads request lines and hands them over in batches:
//! after a line it keeps reading only while whole lines are already
//! buffered, so a batch is what Squid has sent so far and never waits for
//! more. The answering loop takes every batch that is waiting, answers them
//! together (one [`List::check_many`] per list, which is one pipelined
//! round trip per Redis node for a list in Redis), writes the answers and
//! flushes. While a lookup is slow, new requests pile up in the reader's
//! queue and the next lookup takes them all at once, instead of one round
//! trip each. Answers go out in request order within the batch, with each
//! request's channel ID, so Squid's concurrency works as it expects.
//!
//! # Never `ERR` when the helper cannot tell
//!
//! A request is `OK` when any list holds any of its queries (the first list
//! in the order given names the category); otherwise, when a list could
//! not answer (a Redis node down: the whole [`List::check_many`] fails) or
//! a query is not valid for a list's key kind, it is `BH` with the reason;
//! only when every list answered for every query is it `ERR`. A whitelisted
//! query is not listed.
//!
//! # Replaced files and live adds are picked up without a restart
//!
//! Before each batch the helper compares each list's [`Stamp`] (the
//! identity of its file and whitelist file, and in a served data directory
//! of its journal and log segments) with the one it opened. A file replaced by an atomic rename (what `build -o`
//! and `whitelist add` do) is reopened, and answers come from the new file
//! from that batch on. A replacement that fails to open (damaged,
//! half-copied in place) is reported once on the log and the list keeps
//! answering from the file it had, which stays mapped; the helper tries
//! again when the file changes once more. In a data directory that
//! `bloomgate serve` runs on, the server's live adds change the log: the
//! list is reopened (which replays them) at most once per
//! [`LIVE_ADDS_EVERY`], so an add acknowledged by the server is answered
//! `OK` by the helper within about a second. Lists in Redis are always
//! read where they are stored.

use std::borrow::Cow;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bloomgate_list::{Change, CheckScratch, List, Stamp, Verdict};
use bloomgate_url::KeyError;

use crate::protocol::{parse_line, write_answer, Answer, BadRequest, Kind, MAX_LINE};

/// Most lines per batch the reader hands over (it bounds the memory a
/// batch takes with [`MAX_LINE`]-long lines).
const BATCH_LINES: usize = 4096;

/// How often, at most, a list is reopened to see a server's live adds:
/// an add acknowledged by `bloomgate serve` on the list's data directory
/// is answered by the helper within this long (plus one batch).
pub const LIVE_ADDS_EVERY: Duration = Duration::from_secs(1);

/// Batches the reader may queue ahead of the answering loop.
const QUEUED_BATCHES: usize = 16;

/// How the helper answers.
#[derive(Clone, Debug)]
pub struct Options {
    /// Which Squid interface is spoken.
    pub kind: Kind,
    /// Requests start with a channel ID (`concurrency=N`, N > 0).
    pub concurrency: bool,
    /// The block page for `url_rewrite_program` (`%t` category, `%u` URL).
    pub redirect: String,
}

/// A list with the category it answers for.
#[derive(Debug)]
pub struct Category {
    name: String,
    list: List,
    stamp: Option<Stamp>,
    refused: Option<Stamp>,
    opened: Instant,
}

impl Category {
    /// Opens the list at `address` (anything [`List::open`] takes) for
    /// category `name`.
    pub fn open(name: &str, address: &str) -> Result<Category, bloomgate_list::Error> {
        let stamp = Stamp::of(address);
        Ok(Category {
            name: name.to_string(),
            list: List::open(address)?,
            stamp,
            refused: None,
            opened: Instant::now(),
        })
    }

    /// The category's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The list.
    pub fn list(&self) -> &List {
        &self.list
    }

    /// Reopens the list when its file or whitelist was replaced, or when
    /// the server of its data directory took live adds (at most once per
    /// [`LIVE_ADDS_EVERY`]: each reopen replays the log); returns a line
    /// for the log when a replaced file was reopened or refused.
    fn refresh(&mut self) -> Option<String> {
        let now = Stamp::of(self.list.address())?;
        if Some(&now) == self.refused.as_ref() {
            return None;
        }
        let change = match &self.stamp {
            Some(before) => before.compare(&now),
            None => Change::Files,
        };
        match change {
            Change::None => return None,
            Change::LiveAdds if self.opened.elapsed() < LIVE_ADDS_EVERY => return None,
            Change::LiveAdds | Change::Files => {}
        }
        match List::open(self.list.address()) {
            Ok(list) => {
                self.list = list;
                self.stamp = Some(now);
                self.refused = None;
                self.opened = Instant::now();
                (change == Change::Files)
                    .then(|| format!("{}: reopened {} (replaced)", self.name, self.list.address()))
            }
            Err(e) => {
                self.refused = Some(now);
                Some(format!(
                    "{}: {} changed but does not open ({e}); still answering from the list opened before",
                    self.name,
                    self.list.address()
                ))
            }
        }
    }
}

/// What a run answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Request lines answered.
    pub requests: u64,
    /// `OK` answers (listed).
    pub listed: u64,
    /// `BH` answers (could not tell, or a bad request).
    pub unknown: u64,
    /// Batches answered.
    pub batches: u64,
}

/// Request lines as read: bytes, and where each line ends.
#[derive(Debug, Default)]
struct Batch {
    data: Vec<u8>,
    /// (end in `data`, cut at [`MAX_LINE`]).
    lines: Vec<(usize, bool)>,
}

/// The helper over its lists.
#[derive(Debug)]
pub struct Helper {
    categories: Vec<Category>,
    options: Options,
    scratch: CheckScratch,
    verdicts: Vec<Vec<Result<Verdict, KeyError>>>,
    failures: Vec<Option<String>>,
}

impl Helper {
    /// A helper answering from `categories`, first listed first.
    pub fn new(categories: Vec<Category>, options: Options) -> Helper {
        let n = categories.len();
        Helper {
            categories,
            options,
            scratch: CheckScratch::default(),
            verdicts: (0..n).map(|_| Vec::new()).collect(),
            failures: vec![None; n],
        }
    }

    /// Answers request lines from `input` on `output` until `input` ends
    /// (Squid closed the pipe), logging reopened files on `log`. An I/O
    /// error of `input` or `output` ends the run with that error.
    pub fn run<R: Read + Send>(
        &mut self,
        input: R,
        output: &mut dyn Write,
        log: &mut dyn Write,
    ) -> io::Result<Stats> {
        let (tx, rx) = mpsc::sync_channel::<Batch>(QUEUED_BATCHES);
        std::thread::scope(|scope| {
            let reader = scope.spawn(move || read_batches(input, tx));
            let mut stats = Stats::default();
            let mut out = Vec::new();
            let answered = (|| -> io::Result<()> {
                while let Ok(mut batch) = rx.recv() {
                    // Everything else already waiting joins this batch.
                    while batch.lines.len() < BATCH_LINES * 4 {
                        let Ok(more) = rx.try_recv() else { break };
                        let base = batch.data.len();
                        batch.data.extend_from_slice(&more.data);
                        batch
                            .lines
                            .extend(more.lines.iter().map(|&(end, cut)| (base + end, cut)));
                    }
                    for c in &mut self.categories {
                        if let Some(note) = c.refresh() {
                            let _ = writeln!(log, "bloomgate squid-helper: {note}");
                        }
                    }
                    out.clear();
                    self.answer(&batch, &mut out, &mut stats);
                    output.write_all(&out)?;
                    output.flush()?;
                }
                Ok(())
            })();
            // An answering error drops the queue, which stops the reader.
            drop(rx);
            let read = reader.join().expect("reader thread panicked");
            answered?;
            read?;
            Ok(stats)
        })
    }

    /// Answers one batch of request lines into `out`.
    fn answer(&mut self, batch: &Batch, out: &mut Vec<u8>, stats: &mut Stats) {
        let opts = &self.options;
        let mut start = 0;
        let requests: Vec<_> = batch
            .lines
            .iter()
            .map(|&(end, cut)| {
                let line = &batch.data[start..end];
                start = end;
                parse_line(line, opts.concurrency, opts.kind, cut)
            })
            .collect();
        // Every query of every request, in one flat batch per list.
        let queries: Vec<&[u8]> = requests
            .iter()
            .filter_map(|r| r.queries.as_ref().ok())
            .flatten()
            .map(Cow::as_ref)
            .collect();
        for (i, c) in self.categories.iter().enumerate() {
            let verdicts = &mut self.verdicts[i];
            self.failures[i] = c
                .list
                .check_many(queries.iter().copied(), &mut self.scratch, verdicts)
                .err()
                .map(|e| format!("{}: {e}", c.name));
        }
        let mut next = 0;
        let mut invalid = String::new();
        for r in &requests {
            let answer = match &r.queries {
                Err(bad) => Answer::Unknown(bad_message(bad)),
                Ok(qs) => {
                    let span = next..next + qs.len();
                    next += qs.len();
                    self.decide(span, &queries, &mut invalid)
                }
            };
            stats.requests += 1;
            match answer {
                Answer::Listed { .. } => stats.listed += 1,
                Answer::Unknown(_) => stats.unknown += 1,
                Answer::NotListed => {}
            }
            write_answer(out, r.channel, opts.kind, &opts.redirect, answer);
        }
        stats.batches += 1;
    }

    /// The answer for the queries at `span` of this batch.
    fn decide<'s>(
        &'s self,
        span: std::ops::Range<usize>,
        queries: &[&'s [u8]],
        invalid: &'s mut String,
    ) -> Answer<'s> {
        // An invalid query's message is made in `invalid` ("" marks it).
        let mut unknown: Option<&str> = None;
        for (i, c) in self.categories.iter().enumerate() {
            if let Some(failure) = &self.failures[i] {
                unknown.get_or_insert(failure);
                continue;
            }
            for q in span.clone() {
                match &self.verdicts[i][q] {
                    Ok(Verdict::Present { matched }) => {
                        return Answer::Listed {
                            category: &c.name,
                            matched,
                            query: queries[q],
                        }
                    }
                    Ok(_) => {}
                    Err(e) if unknown.is_none() => {
                        let q = String::from_utf8_lossy(queries[q]);
                        *invalid = format!("{}: {q:?} is not a valid query: {e}", c.name);
                        unknown = Some("");
                    }
                    Err(_) => {}
                }
            }
        }
        match unknown {
            None => Answer::NotListed,
            Some("") => Answer::Unknown(invalid),
            Some(failure) => Answer::Unknown(failure),
        }
    }
}

fn bad_message(bad: &BadRequest) -> &'static str {
    match bad {
        BadRequest::Empty => "empty request",
        BadRequest::TooLong => "request line longer than 65536 bytes",
        BadRequest::BadChannel => "no channel ID (set concurrency=N > 0 in squid.conf, or run the helper without --concurrency)",
    }
}

/// Reads request lines and sends them in batches until the input ends or
/// the answering loop stops.
fn read_batches<R: Read>(input: R, tx: mpsc::SyncSender<Batch>) -> io::Result<()> {
    let mut r = BufReader::with_capacity(1 << 16, input);
    loop {
        let mut batch = Batch::default();
        let mut more = read_line(&mut r, &mut batch)?;
        // Keep going only while a whole line is already buffered.
        while more && batch.lines.len() < BATCH_LINES && r.buffer().contains(&b'\n') {
            more = read_line(&mut r, &mut batch)?;
        }
        if !batch.lines.is_empty() && tx.send(batch).is_err() {
            return Ok(());
        }
        if !more {
            return Ok(());
        }
    }
}

/// Appends one line to `batch` (at most [`MAX_LINE`] bytes of it; the
/// rest is skipped and the line marked cut). False at the end of input
/// (a last line without `\n` still counts).
fn read_line<R: Read>(r: &mut BufReader<R>, batch: &mut Batch) -> io::Result<bool> {
    let start = batch.data.len();
    let mut cut = false;
    let mut any = false;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            if any {
                batch.lines.push((batch.data.len(), cut));
            }
            return Ok(false);
        }
        any = true;
        let (chunk, used, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, buf.len(), false),
        };
        let room = MAX_LINE - (batch.data.len() - start);
        if chunk.len() > room {
            cut = true;
        }
        batch
            .data
            .extend_from_slice(&chunk[..chunk.len().min(room)]);
        r.consume(used);
        if done {
            batch.lines.push((batch.data.len(), cut));
            return Ok(true);
        }
    }
}
