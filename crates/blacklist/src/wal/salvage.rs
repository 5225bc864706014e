//! Salvage: every intact record of a damaged segment or journal, also
//! after the damage, and every stretch that is not one.
//!
//! Used by `bloomgate repair`: the repaired file is the magic and the
//! intact records as they were ([`Salvage::repaired`]); what was lost is
//! reported stretch by stretch ([`Lost`]), a torn tail apart from damage.

use std::ops::Range;

use super::read::{check_magic, intact_at, record_at, resync, FaultKind};
use super::record::AnyRecord;
use super::MAGIC;

/// What [`salvage`] found in a segment or journal.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Salvage {
    /// The byte ranges of the intact records, in file order.
    pub kept: Vec<Range<usize>>,
    /// The stretches that are not intact records, in file order.
    pub lost: Vec<Lost>,
}

/// One stretch of a file that [`salvage`] could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// Where it starts.
    pub offset: u64,
    /// How long it is.
    pub len: u64,
    /// What was wrong at its start.
    pub problem: String,
    /// Whether it is the file's torn tail (no intact record after it).
    pub tail: bool,
}

impl Salvage {
    /// Bytes kept (the records, without the magic).
    pub fn kept_bytes(&self) -> u64 {
        self.kept.iter().map(|r| r.len() as u64).sum()
    }

    /// Bytes lost.
    pub fn lost_bytes(&self) -> u64 {
        self.lost.iter().map(|l| l.len).sum()
    }

    /// Whether anything but a torn tail was lost.
    pub fn damaged(&self) -> bool {
        self.lost.iter().any(|l| !l.tail)
    }

    /// The repaired file: the magic, then every intact record as it was.
    pub fn repaired(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAGIC.len() + self.kept_bytes() as usize);
        out.extend_from_slice(MAGIC);
        for r in &self.kept {
            out.extend_from_slice(&bytes[r.clone()]);
        }
        out
    }
}

/// Finds every intact record of a segment's or journal's contents, also
/// after damage (resynchronising, see the module docs), and every stretch
/// that is not one.
pub fn salvage(bytes: &[u8]) -> Salvage {
    let mut s = Salvage::default();
    if bytes.is_empty() {
        return s;
    }
    let mut pos = match check_magic(bytes) {
        Ok(()) => MAGIC.len(),
        Err(fault) => {
            // Records may follow a damaged magic.
            let next = if fault.kind == FaultKind::Damaged {
                (0..bytes.len()).find(|&p| intact_at(bytes, p))
            } else {
                None
            };
            let end = next.unwrap_or(bytes.len());
            s.lost.push(Lost {
                offset: 0,
                len: end as u64,
                problem: fault.problem,
                tail: fault.kind == FaultKind::TornTail,
            });
            end
        }
    };
    while pos < bytes.len() {
        match record_at(bytes, pos) {
            Ok((_, n)) => {
                s.kept.push(pos..pos + n);
                pos += n;
            }
            Err(why) => {
                let next = resync(bytes, pos);
                let end = next.unwrap_or(bytes.len());
                s.lost.push(Lost {
                    offset: pos as u64,
                    len: (end - pos) as u64,
                    problem: why.into(),
                    tail: next.is_none(),
                });
                pos = end;
            }
        }
    }
    s
}

/// Decodes one intact record's bytes (a range from [`Salvage::kept`]).
pub fn decode_record(bytes: &[u8]) -> Option<AnyRecord> {
    record_at(bytes, 0).ok().map(|(r, _)| r)
}
