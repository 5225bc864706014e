//! Warnings about what the key rules did to a list, for the summaries of
//! `build`, `add` and `dedup`.
//!
//! Canonicalization is meant to merge spellings of one entry
//! (`HTTP://A.com/x#top` and `http://a.com/x`), not distinct entries. When a
//! list is of another kind than the one asked for (ids under `--keys url`,
//! domains under `--keys email`), most lines either merge into a few keys or
//! are all invalid, and the result is a filter that says "present" to
//! everything or to nothing. Two cheap, deterministic signs are kept:
//!
//! * [`Collapse`]: of the first [`SAMPLE`] valid lines in input order, how
//!   many distinct lines and how many distinct keys there were. Each chunk
//!   contributes the (line, key) hashes of its first lines; the sink takes
//!   them in input order, so the counts do not depend on thread timing.
//! * [`bare_domain`]: an email entry without `@` that is a valid host, the
//!   sign of a domain list given to `--keys email`.

use std::collections::HashSet;

use bloomgate_url::{canonical_host, KeyError, KeyKind};
use xxhash_rust::xxh3::xxh3_64;

use crate::report::thousands;

/// Valid lines (in input order) whose keys are compared.
pub const SAMPLE: usize = 100_000;

/// At least this many distinct lines before a merge is worth a warning.
const MIN_DISTINCT: usize = 100;

/// One line's hashes: of its bytes and of its key.
pub type Pair = (u64, u64);

/// The hashes of a valid line and its key, for [`Collapse::take`]: XXH3-64
/// with a fixed seed, so that the sample is the same on every run (and a
/// few times cheaper per line than SipHash, which `build` paid on every
/// line of its first chunks).
pub fn pair(line: &[u8], key: &[u8]) -> Pair {
    (xxh3_64(line), xxh3_64(key))
}

/// Distinct lines against distinct keys over the first [`SAMPLE`] valid
/// lines.
#[derive(Default)]
pub struct Collapse {
    lines: HashSet<u64>,
    keys: HashSet<u64>,
    seen: usize,
}

impl Collapse {
    /// Whether a chunk should still collect pairs.
    pub fn wants(&self) -> bool {
        self.seen < SAMPLE
    }

    /// Takes one chunk's pairs, in input order.
    pub fn take(&mut self, pairs: &[Pair]) {
        for &(l, k) in pairs.iter().take(SAMPLE - self.seen.min(SAMPLE)) {
            self.lines.insert(l);
            self.keys.insert(k);
            self.seen += 1;
        }
    }

    /// The warning, if canonicalization merged at least half of many
    /// distinct lines.
    pub fn warning(&self, kind: KeyKind) -> Option<String> {
        let (lines, keys) = (self.lines.len(), self.keys.len());
        if kind == KeyKind::Raw || lines < MIN_DISTINCT || keys * 2 > lines {
            return None;
        }
        Some(format!(
            "warning: the {kind} key rules merged {} distinct lines into {} distinct keys (in the first {} valid lines): are these {kind}s? (`--keys raw` keeps every line as it is; `bloomgate url canon URL` shows a URL's canonical form)",
            thousands(lines as u64),
            thousands(keys as u64),
            thousands(self.seen as u64),
        ))
    }
}

/// Whether `line`, invalid as an email entry for `err`, is a bare domain.
pub fn bare_domain(kind: KeyKind, line: &[u8], err: &KeyError) -> bool {
    kind == KeyKind::Email
        && matches!(err, KeyError::EmailMissingAt)
        && canonical_host(line).is_ok()
}

/// The warning for `bare` bare domains among `invalid` invalid email
/// entries, if they are most of them.
pub fn bare_domain_warning(bare: u64, invalid: u64) -> Option<String> {
    (bare > 0 && bare * 2 >= invalid).then(|| {
        format!(
            "warning: {} of the {} invalid email entries are bare domains: for a list of domains use `--keys host` (it matches an address's domain and every parent domain)",
            thousands(bare),
            thousands(invalid)
        )
    })
}

/// The warning for `count` host entries of a single label (`at`: where
/// the first few are), if there are any: such an entry matches only that
/// exact host, since queries look up parent domains of two labels or more.
pub fn single_label_warning(count: u64, at: &[String]) -> Option<String> {
    (count > 0).then(|| {
        format!(
            "warning: {} host entr{} of a single label (at {}{}) will match only that exact host, never its subdomains: queries look up parent domains of at least two labels",
            thousands(count),
            if count == 1 { "y" } else { "ies" },
            at.join(", "),
            if count > at.len() as u64 { ", …" } else { "" }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_are_seen_and_spellings_are_not() {
        let mut c = Collapse::default();
        let pairs: Vec<Pair> = (0..200)
            .map(|i| pair(format!("http://a.com/#{i}").as_bytes(), b"a.com/"))
            .collect();
        c.take(&pairs);
        assert!(c
            .warning(KeyKind::Url)
            .unwrap()
            .contains("200 distinct lines into 1 distinct keys"));
        let mut d = Collapse::default();
        let pairs: Vec<Pair> = (0..200)
            .map(|i| {
                let k = format!("a.com/{i}");
                pair(format!("HTTP://A.com/{i}").as_bytes(), k.as_bytes())
            })
            .collect();
        d.take(&pairs);
        assert_eq!(d.warning(KeyKind::Url), None);
    }
}
