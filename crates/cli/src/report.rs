//! Human-facing output helpers: one-line errors, numbers, the progress bar.

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::input::Progress;

pub use bloomgate_list::units::{bytes, thousands};

/// An error and its causes on one line, outermost first, without repeats
/// (library errors already name the file).
pub fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let s = cause.to_string();
        if parts.last().is_some_and(|p| p.contains(&s)) {
            continue;
        }
        parts.push(s);
    }
    parts.join(": ").replace('\n', " ")
}

/// `n` (with thousands separators) and the noun for it: `1 line`,
/// `2 lines`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

/// The predicted and target false-positive rates of a filter, per query
/// first, then per lookup as their derivation when a query of these key
/// rules makes several lookups (`predicted` and `target` are per lookup,
/// as the filter records them).
pub fn rates(
    kind: bloomgate_url::KeyKind,
    mode: bloomgate_url::MatchMode,
    predicted: f64,
    target: f64,
) -> String {
    let lookups = bloomgate_url::max_lookups(kind, mode);
    let q = |p| bloomgate_blacklist::spec::per_query_rate(kind, mode, p);
    if lookups <= 1 {
        return format!("predicted FP {predicted:.3e} per query (target {target:.3e})");
    }
    format!(
        "predicted FP {:.3e} per query (target {:.3e}); per lookup {predicted:.3e} (target {target:.3e}), up to {lookups} lookups per query",
        q(predicted),
        q(target)
    )
}

/// Peak resident memory of this process (`VmHWM`), in bytes.
pub fn peak_rss() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// "3 passes of 21.2 s (median; 20.7–26.3 s)" for the per-pass times of
/// a sliced command.
pub fn passes(secs: &[f64]) -> String {
    let mut s = secs.to_vec();
    s.sort_by(f64::total_cmp);
    match s.as_slice() {
        [] => "0 passes".into(),
        [only] => format!("1 pass of {only:.1} s"),
        _ => format!(
            "{} passes of {:.1} s (median; {:.1}–{:.1} s)",
            s.len(),
            s[s.len() / 2],
            s[0],
            s[s.len() - 1]
        ),
    }
}

/// A progress bar on stderr when it is a terminal, tracking bytes read;
/// `None` otherwise (no escape codes in logs and pipes).
/// `label`, if any, stands before the bar (`pass 2/3`).
pub fn progress_bar(
    total: Option<u64>,
    progress: &Progress,
    label: Option<String>,
) -> Option<(ProgressBar, std::thread::JoinHandle<()>)> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = match total {
        Some(t) => ProgressBar::new(t).with_style(
            ProgressStyle::with_template("{spinner} {msg}[{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {msg}[{elapsed_precise}] {bytes} read ({bytes_per_sec})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    if let Some(l) = label {
        bar.set_message(format!("{l} "));
    }
    let b = bar.clone();
    let p = progress.clone();
    let handle = std::thread::spawn(move || {
        while !b.is_finished() {
            b.set_position(p.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    Some((bar, handle))
}

/// Finishes and clears a progress bar.
pub fn finish(bar: Option<(ProgressBar, std::thread::JoinHandle<()>)>) {
    if let Some((bar, handle)) = bar {
        bar.finish_and_clear();
        let _ = handle.join();
    }
}

/// How many invalid entries a command names before only counting them.
pub const SHOW_INVALID: u64 = 10;

/// The report of input lines that are not valid entries of the key kind,
/// one for every command that reads entries (`build` of every layout,
/// `add`, `remove`, `dedup`, `push`): the first [`SHOW_INVALID`] named on
/// stderr as `FILE:LINE: invalid KIND entry: REASON`, the others counted
/// in one last line ([`Invalid::finish`]); with `--strict` the first one is
/// the command's error instead, in the same words.
pub struct Invalid {
    kind: bloomgate_url::KeyKind,
    strict: bool,
    show: bool,
    count: u64,
    shown: u64,
}

impl Invalid {
    /// The report of a command reading entries of `kind` (`strict`: the
    /// first invalid entry is an error).
    pub fn new(kind: bloomgate_url::KeyKind, strict: bool) -> Invalid {
        Invalid {
            kind,
            strict,
            show: true,
            count: 0,
            shown: 0,
        }
    }

    /// Counts without naming anything (a later pass over inputs that an
    /// earlier pass reported already).
    pub fn quiet(mut self) -> Invalid {
        self.show = false;
        self
    }

    /// One invalid entry at line `line` of `input`: named (the first few),
    /// or, with `--strict`, the error that stops the command.
    pub fn entry(&mut self, input: &str, line: u64, reason: &str) -> anyhow::Result<()> {
        self.count += 1;
        let msg = format!("{input}:{line}: invalid {} entry: {reason}", self.kind);
        if self.strict {
            anyhow::bail!("{msg} (--strict: stopping at the first invalid entry)");
        }
        if self.show && self.shown < SHOW_INVALID {
            eprintln!("bloomgate: {msg}");
            self.shown += 1;
        }
        Ok(())
    }

    /// The invalid entries of one chunk of `input`, `(line, reason)`, in
    /// line order (taken out of `invalid`).
    pub fn chunk(&mut self, input: &str, invalid: &mut Vec<(u64, String)>) -> anyhow::Result<()> {
        invalid.sort_by_key(|(l, _)| *l);
        for (line, reason) in invalid.drain(..) {
            self.entry(input, line, &reason)?;
        }
        Ok(())
    }

    /// Invalid entries so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The last line: how many were not named (none with `--strict`,
    /// where the first one was the error).
    pub fn finish(&self) {
        if self.show && !self.strict && self.count > self.shown {
            eprintln!(
                "bloomgate: ... and {} more invalid entries ({} in all, skipped)",
                thousands(self.count - self.shown),
                thousands(self.count)
            );
        }
    }
}
