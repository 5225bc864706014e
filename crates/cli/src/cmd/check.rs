//! `bloomgate check`: which input lines are (probably) on the blacklist.

use std::io::{IsTerminal, Write};

use anyhow::{bail, Context, Result};
use serde_json::json;

use bloomgate_blacklist::{verdict_ref, Blacklist, VerdictRef};
use bloomgate_engine::place::Locator;
use bloomgate_engine::slice::{self, Slice};
use bloomgate_list::{CheckScratch, OpenOptions};
use bloomgate_url::{query_keys, KeyError, KeyKind};

use crate::args::CheckArgs;
use crate::input::{self, Progress};
use crate::report::{self, bytes};

#[derive(Clone, Copy, PartialEq)]
enum Output {
    /// The query lines on the list.
    Lines,
    /// The query lines not on the list (`--misses`).
    Misses,
    Count,
    Json,
    /// Nothing: the exit code answers (`-q`).
    Quiet,
}

/// The answers to one chunk of input, formatted.
struct ChunkOut {
    text: Vec<u8>,
    /// Query lines answered (valid ones).
    answered: u64,
    hits: u64,
    /// Lines whose hit was exempted by the whitelist.
    whitelisted: u64,
    errors: Vec<(u64, String)>,
}

impl ChunkOut {
    fn new() -> ChunkOut {
        ChunkOut {
            text: Vec::new(),
            answered: 0,
            hits: 0,
            whitelisted: 0,
            errors: Vec::new(),
        }
    }

    /// The query lines of `chunk` (with their numbers), and an answer that
    /// already holds the chunk's unreadable lines as errors.
    fn split(chunk: &input::Chunk) -> (ChunkOut, Vec<(u64, &[u8])>) {
        let mut r = ChunkOut::new();
        let mut lines = Vec::new();
        chunk.for_each_line(|line_no, line| match line {
            Ok(l) => lines.push((line_no, l)),
            Err(reason) => r.errors.push((line_no, reason)),
        });
        (r, lines)
    }

    /// Records the answer to one query line in the chosen output form.
    fn answer(
        &mut self,
        output: Output,
        line_no: u64,
        line: &[u8],
        verdict: Result<VerdictRef<'_>, KeyError>,
    ) {
        match verdict {
            Ok(v) => {
                self.answered += 1;
                self.hits += v.hit as u64;
                self.whitelisted += v.whitelisted as u64;
                match output {
                    Output::Lines if v.hit => {
                        self.text.extend_from_slice(line);
                        self.text.push(b'\n');
                    }
                    Output::Misses if !v.hit => {
                        self.text.extend_from_slice(line);
                        self.text.push(b'\n');
                    }
                    Output::Json => {
                        let j = json!({
                            "item": String::from_utf8_lossy(line),
                            "hit": v.hit,
                            "whitelisted": v.whitelisted,
                            "matched": v.matched.map(String::from_utf8_lossy),
                        });
                        self.text.extend_from_slice(j.to_string().as_bytes());
                        self.text.push(b'\n');
                    }
                    _ => {}
                }
            }
            Err(e) => {
                if output == Output::Json {
                    let j = json!({
                        "item": String::from_utf8_lossy(line),
                        "hit": false,
                        "error": e.to_string(),
                    });
                    self.text.extend_from_slice(j.to_string().as_bytes());
                    self.text.push(b'\n');
                }
                self.errors.push((line_no, e.to_string()));
            }
        }
    }
}

/// What the answers add up to, in input order (the sink of both paths).
struct Report<'a, W: Write> {
    out: W,
    answered: u64,
    hits: u64,
    whitelisted: u64,
    failed: u64,
    names: &'a [String],
    /// The filter's key kind (named in messages about invalid queries).
    kind: KeyKind,
}

impl Output {
    /// What `--count` / `--json` ask for.
    fn of(a: &CheckArgs) -> Output {
        if a.quiet {
            Output::Quiet
        } else if a.misses {
            Output::Misses
        } else if a.count {
            Output::Count
        } else if a.json {
            Output::Json
        } else {
            Output::Lines
        }
    }
}

impl<'a, W: Write> Report<'a, std::io::BufWriter<W>> {
    /// A report on `out` of the queries in `names` against a filter of `kind`.
    fn new(out: W, names: &'a [String], kind: KeyKind) -> Self {
        Report {
            out: std::io::BufWriter::with_capacity(1 << 16, out),
            answered: 0,
            hits: 0,
            whitelisted: 0,
            failed: 0,
            names,
            kind,
        }
    }
}

impl<W: Write> Report<'_, W> {
    fn take(&mut self, chunk: &input::Chunk, r: ChunkOut) -> Result<()> {
        self.answered += r.answered;
        self.hits += r.hits;
        self.whitelisted += r.whitelisted;
        let mut errors = r.errors;
        errors.sort_by_key(|(l, _)| *l);
        for (line, reason) in errors {
            self.failed += 1;
            if self.failed <= 10 {
                eprintln!(
                    "bloomgate: {}:{line}: invalid {} query: {reason}",
                    self.names[chunk.input], self.kind
                );
            }
        }
        self.out.write_all(&r.text)?;
        if chunk.paused {
            self.out.flush()?;
        }
        Ok(())
    }

    fn finish(mut self, output: Output) -> Result<i32> {
        if output == Output::Count {
            writeln!(self.out, "{}", self.hits)?;
        }
        self.out.flush()?;
        if self.failed > 10 {
            eprintln!(
                "bloomgate: ... and {} more invalid queries",
                self.failed - 10
            );
        }
        // On a terminal, what the run added up to (a pipe or a log gets
        // the answers alone, as before).
        if std::io::stderr().is_terminal() {
            eprintln!(
                "check: {}, {} on the list, {} whitelisted, {} invalid",
                report::count(self.answered + self.failed, "line", "lines"),
                report::thousands(self.hits),
                report::thousands(self.whitelisted),
                report::thousands(self.failed)
            );
        }
        // The exit-code rule (README, `bloomgate --help`): an invalid
        // query has no answer, so the command did not do all it was asked
        // (1); with -q the status is the answer, as grep's: 0 a hit, 1 no
        // hit, 2 no hit but some query could not be answered.
        Ok(match output {
            Output::Quiet if self.hits > 0 => 0,
            Output::Quiet if self.failed > 0 => 2,
            Output::Quiet => 1,
            _ if self.failed > 0 => 1,
            _ => 0,
        })
    }
}

/// Runs `bloomgate check`, answering on standard output.
pub fn run(a: CheckArgs) -> Result<i32> {
    run_to(a, std::io::stdout().lock())
}

/// Runs `bloomgate check`, answering into `out` (for callers that want the
/// answers rather than the text on standard output). Returns the exit code.
///
/// Every list is checked the same way ([`bloomgate_list::List::check_many`]: each chunk's
/// lookups in one batch, then the whitelist rule), whatever its layout or
/// store; a lookup the store cannot answer (a Redis node down, a shard
/// evicted) fails the command: no answer is printed as a miss. A Bloom
/// filter larger than `--memory` is checked a slice at a time
/// ([`check_sliced`]).
pub fn run_to(a: CheckArgs, out: impl Write) -> Result<i32> {
    let options = OpenOptions {
        snapshot_only: a.snapshot_only,
        verify: a.verify,
        password_file: a.redis.redis_password_file.clone(),
        ..OpenOptions::default()
    };
    let list = crate::cmd::open_list(&a.filter, &options)?;
    crate::cmd::check_kind(&a.filter, (list.kind(), list.mode()), a.keys, a.match_mode)?;
    let output = Output::of(&a);
    let mut report = Report::new(out, &a.inputs, list.kind());
    match (
        list.sliced(a.memory).map_err(crate::cmd::list_error)?,
        a.memory,
    ) {
        (Some(bloom), Some(budget)) => check_sliced(&a, bloom, budget, output, &mut report)?,
        _ => {
            let progress = Progress::default();
            let bar = report::progress_bar(input::total_size(&a.inputs), &progress, None);
            let result = input::process(
                a.inputs.clone(),
                progress,
                |chunk| -> Result<ChunkOut, bloomgate_list::Error> {
                    let (mut r, lines) = ChunkOut::split(chunk);
                    // All lookups of the chunk (~4 MiB of input) in one batch
                    // (pipelined in memory, one pipeline per Redis node), then
                    // the answers in order.
                    let mut verdicts = Vec::new();
                    list.check_many(
                        lines.iter().map(|&(_, l)| l),
                        &mut CheckScratch::default(),
                        &mut verdicts,
                    )?;
                    for (&(line_no, line), verdict) in lines.iter().zip(&verdicts) {
                        let verdict = match verdict {
                            Ok(v) => Ok(v.as_ref()),
                            Err(e) => Err(e.clone()),
                        };
                        r.answer(output, line_no, line, verdict);
                    }
                    Ok(r)
                },
                |chunk, r| {
                    let r = r.with_context(|| format!("checking against {}", list.address()))?;
                    report.take(chunk, r)
                },
            );
            report::finish(bar);
            result?
        }
    }
    report.finish(output)
}

/// A query line of a chunk: its number, its bytes, and the range of its
/// keys among the chunk's lookups (or why it is not a valid query).
type QueryLine<'c> = (u64, &'c [u8], Result<(usize, usize), KeyError>);

/// One chunk's share of a pass of [`check_sliced`].
struct SlicePass<'c> {
    /// Per lookup key, in input order: the slice rules it out.
    ruled_out: Vec<bool>,
    /// Last pass only: per valid-length line, its number, its bytes and its
    /// keys' range in `ruled_out` (or why the query is invalid).
    lines: Vec<QueryLine<'c>>,
    /// Last pass only, when the answers need them (a whitelist to consult,
    /// or JSON that names the matched key): the lookup keys, back to back,
    /// and where each ends.
    keys: Vec<u8>,
    key_ends: Vec<usize>,
    /// Lines too long to be queries.
    too_long: Vec<(u64, String)>,
}

/// Gives a closure the signature that lets its result borrow the chunk's
/// lines (closures do not infer it).
fn lines_of<F: for<'c> Fn(&'c input::Chunk) -> SlicePass<'c>>(f: F) -> F {
    f
}

/// Checks the inputs against a filter larger than the memory budget, one
/// slice of its bit array at a time (`bloomgate_engine::slice`).
///
/// Each pass over the inputs loads one slice, and every lookup key with bits
/// in it learns whether the slice rules it out; one bit per key is kept
/// across passes. A key is (probably) present when no slice ruled it out —
/// exactly the answer of a lookup in the whole filter — and the last pass
/// answers every query in input order by the same whitelist rules as the
/// in-memory path. The live adds of a served data directory are applied to
/// every slice as it is loaded, so they count as they do in memory.
///
/// The first pass learns where each chunk's keys start among all keys
/// (chunks are cut the same way on every pass, [`input::Chunk::seq`]), so
/// the workers of the last pass read the earlier passes' bits of their own
/// chunk and answer it themselves: the last pass runs on every core, like
/// the others, rather than answering in one thread.
fn check_sliced<W: Write>(
    a: &CheckArgs,
    list: &Blacklist,
    budget: u64,
    output: Output,
    report: &mut Report<'_, W>,
) -> Result<()> {
    let layers = list.layers();
    if layers.layers.len() != 1 {
        bail!(
            "{}: a filter that grew to {} layers cannot be checked in slices; leave out --memory",
            a.filter,
            layers.layers.len()
        );
    }
    let opened = list.opened();
    if opened.replay.as_ref().is_some_and(|r| r.chunks > 0) {
        bail!(
            "{}: the data directory's log holds BF.LOADCHUNK data not yet in the file; leave out --memory, or check after the server's next snapshot",
            a.filter
        );
    }
    let live: &[Vec<u8>] = opened.replay.as_ref().map_or(&[], |r| &r.keys);
    let filter = &layers.layers[0];
    let params = filter.params().clone();
    // Every key is placed by the engine's one derivation, for the file's hash.
    let locator = Locator::new(&params);
    let ranges = slice::plan_slices(&params, budget);
    eprintln!(
        "bloomgate: the filter's {} exceed the memory budget of {}: checking in {} slices, one pass over the inputs each",
        bytes(params.bits / 8),
        bytes(budget),
        ranges.len()
    );
    let dir = a.tmp_dir.clone().unwrap_or_else(std::env::temp_dir);
    let (inputs, _spool) = input::respoolable(&a.inputs, &dir)?;
    let (kind, mode) = (list.kind(), list.mode());
    // The answers need the keys themselves only to consult a whitelist or
    // to name the matched key; otherwise a key's bit is all they need.
    let keep_keys = output == Output::Json || !list.whitelist().is_empty();
    let changed = || {
        anyhow::anyhow!(
            "the inputs changed between passes: a check in slices reads them once per slice"
        )
    };
    // One bit per lookup key of the whole input, in input order: some slice
    // rules the key out.
    let mut ruled_out: Vec<u64> = Vec::new();
    // Per chunk, by `Chunk::seq`: where its keys start in `ruled_out`, and
    // how many it has (learnt in the first pass).
    let mut chunk_keys: Vec<(usize, usize)> = Vec::new();
    let mut total_keys = 0usize;
    let mut pass_secs = Vec::new();
    for (pass, range) in ranges.iter().enumerate() {
        let started = std::time::Instant::now();
        let last = pass + 1 == ranges.len();
        let s = Slice::load(filter, range.clone())?;
        s.insert_batch(live);
        let progress = Progress::default();
        let bar = report::progress_bar(
            input::total_size(&inputs),
            &progress,
            Some(format!("pass {}/{}", pass + 1, ranges.len())),
        );
        // The lookups of one chunk against this slice (and, in the last
        // pass, its keys kept for the answers).
        let lookups = lines_of(|chunk| {
            let mut p = SlicePass {
                ruled_out: Vec::new(),
                lines: Vec::new(),
                keys: Vec::new(),
                key_ends: Vec::new(),
                too_long: Vec::new(),
            };
            let mut scratch = Vec::new();
            let mut prepared = Vec::new();
            chunk.for_each_line(|line_no, line| {
                let l = match line {
                    Ok(l) => l,
                    Err(reason) => return p.too_long.push((line_no, reason)),
                };
                let span = query_keys(kind, mode, l, &mut scratch).map(|()| {
                    let first = prepared.len();
                    prepared.extend(scratch.iter().map(|key| locator.prepare(key)));
                    if last && keep_keys {
                        for key in &scratch {
                            p.keys.extend_from_slice(key);
                            p.key_ends.push(p.keys.len());
                        }
                    }
                    (first, prepared.len())
                });
                if last {
                    p.lines.push((line_no, l, span));
                }
            });
            // All the chunk's lookups at once, their cache misses
            // overlapped (Slice::rules_out_batch).
            let mut verdicts = Vec::with_capacity(prepared.len());
            s.rules_out_batch(&prepared, &mut verdicts);
            p.ruled_out = verdicts.into_iter().map(|v| v == Some(true)).collect();
            p
        });
        let mut offset = 0usize;
        let result = if !last {
            let ruled = |chunk: &input::Chunk| lookups(chunk).ruled_out;
            input::process(inputs.clone(), progress, ruled, |chunk, ruled| {
                let n = ruled.len();
                if pass == 0 {
                    chunk_keys.push((offset, n));
                    ruled_out.resize((offset + n).div_ceil(64), 0);
                } else if chunk_keys.get(chunk.seq as usize) != Some(&(offset, n)) {
                    return Err(changed());
                }
                for (j, _) in ruled.iter().enumerate().filter(|(_, &out)| out) {
                    let at = offset + j;
                    ruled_out[at / 64] |= 1 << (at % 64);
                }
                offset += n;
                Ok(())
            })
        } else {
            let (earlier, chunk_keys) = (&ruled_out, &chunk_keys);
            let answer = |chunk: &input::Chunk| -> Result<(usize, ChunkOut)> {
                let p = lookups(chunk);
                let n = p.ruled_out.len();
                // Where the earlier passes left this chunk's bits.
                let start = match chunk_keys.get(chunk.seq as usize) {
                    _ if pass == 0 => None,
                    Some(&(start, count)) if count == n => Some(start),
                    _ => return Err(changed()),
                };
                let present = |k: usize| {
                    !p.ruled_out[k]
                        && start.is_none_or(|start| {
                            earlier[(start + k) / 64] >> ((start + k) % 64) & 1 == 0
                        })
                };
                let (keys, ends) = (&p.keys, &p.key_ends);
                let key = |k: usize| match keep_keys {
                    true => &keys[if k == 0 { 0 } else { ends[k - 1] }..ends[k]],
                    false => &[][..],
                };
                let mut r = ChunkOut::new();
                r.errors = p.too_long;
                for (line_no, line, span) in p.lines {
                    let verdict = span.map(|(from, to)| {
                        verdict_ref(list.whitelist(), (from..to).map(|k| (key(k), present(k))))
                    });
                    r.answer(output, line_no, line, verdict);
                }
                Ok((n, r))
            };
            input::process(inputs.clone(), progress, answer, |chunk, answered| {
                let (n, r) = answered?;
                if pass > 0 && chunk_keys[chunk.seq as usize].0 != offset {
                    return Err(changed());
                }
                offset += n;
                report.take(chunk, r)
            })
        };
        report::finish(bar);
        result?;
        if pass == 0 {
            total_keys = offset;
        } else if offset != total_keys {
            return Err(changed());
        }
        pass_secs.push(started.elapsed().as_secs_f64());
    }
    eprintln!(
        "bloomgate: {}, {} lookup keys, peak memory {} (budget {})",
        report::passes(&pass_secs),
        total_keys,
        report::peak_rss().map_or_else(|| "unknown".into(), bytes),
        bytes(budget)
    );
    Ok(())
}
