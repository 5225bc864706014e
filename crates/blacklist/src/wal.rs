//! The record format of the write-ahead log and of the live-add journals.
//!
//! A data directory served by `bloomgate serve` keeps every acknowledged
//! live add in a log before it reaches a filter file. Anything that reads a
//! filter from such a directory — the server at startup, the CLI's `check`
//! or `info` — must read these records too, or it answers from a state that
//! lacks an acknowledged add. This module is the one definition of their
//! format; the writer (group commit, rotation) is the server's.
//!
//! # Format
//!
//! The log lives in `DIR/.bloomgate-wal/` as numbered segments
//! `wal-00000001.log`, … Each segment starts with the 8-byte magic
//! `BGWAL001` and then holds records:
//!
//! ```text
//! u32 LE  payload length (≤ 64 MiB)
//! u64 LE  xxh3-64 of the payload
//! payload:
//!   u8      kind (1 = add key, 2 = OR a chunk of bits, 3 = lineage marker,
//!                 4 = cuckoo filter change)
//!   u16 LE  filter name length, then the name
//!   u64 LE  seed of the filter's first layer (identifies this incarnation);
//!           for kind 4 the cuckoo filter's incarnation id
//!   kind 1: the normalized key bytes
//!   kind 2: u32 LE layer, u64 LE byte offset, then the bytes
//!   kind 3: u8 key kind, u8 match mode (only in live-add journals)
//!   kind 4: u64 LE sequence number, u8 operation (1 = add, 2 = delete),
//!           then the item bytes
//! ```
//!
//! # Cuckoo filter changes (kind 4)
//!
//! A cuckoo filter deletes, and a delete is not idempotent: replaying one
//! twice removes a second copy of the item (or another item's equal
//! fingerprint), which is a false negative. So its records are not replayed
//! "at least once" like Bloom adds but *exactly once*: every change of one
//! filter incarnation gets the next sequence number (1, 2, …) under the
//! filter's write lock, in the order the log receives it; the filter's
//! snapshot file stores the sequence number of the last change it contains,
//! and replay applies only the records after it, in log order. A crash
//! between writing a snapshot and trimming the log replays nothing twice.
//!
//! Readers that only know Bloom filters ([`read_segment`], [`read_bytes`])
//! step over kind 4 records (they are intact records, not damage);
//! [`read_segment_all`] and [`read_bytes_all`] yield them too.
//!
//! The same segment format (magic and records) is used by the per-filter
//! journals of live adds, `NAME.live` ([`crate::journal`]).
//!
//! Records carry the *normalized* key, so replay needs no URL parsing, and
//! the seed of the filter they were made against. A record is replayed onto
//! a filter only if that seed is in the filter's *lineage* (the seeds of the
//! files it has served since it was created, kept in its journal, see
//! [`crate::journal`]): records made before a reload still apply after it,
//! records of a filter that was since deleted or recreated do not.
//!
//! # Damage: a torn tail, or damage in the middle
//!
//! Records have no per-record magic: a record is *intact* when its length
//! is possible, its bytes are all there, its checksum matches and its
//! payload decodes. Reading stops at the first record that is not intact,
//! and what follows is classified ([`Fault`]):
//!
//! * a **torn tail** ([`FaultKind::TornTail`]) when no intact record starts
//!   anywhere after the damaged one (or the file is a strict prefix of the
//!   magic): what a crash during an append, or a segment abandoned after a
//!   failed write, leaves behind. Nothing in it was acknowledged (every
//!   acknowledged record was synced whole before its acknowledgement, and
//!   the writer never appends after an unsynced one), so it may be cut off.
//! * **damage** ([`FaultKind::Damaged`]) otherwise: a wrong magic, or any
//!   damaged record after which an intact one can be found. Records after
//!   the damage were acknowledged, and the damaged stretch may hold more,
//!   of any filter (its name is among the damaged bytes). Readers never cut
//!   such a file short silently: the server refuses to start on it, naming
//!   file and offset ([`DamagedFile`]), and keeps it byte for byte;
//!   [`salvage`] (used by `bloomgate repair`) recovers every intact record
//!   before and after it and says what was lost.
//!
//! Finding the next intact record (*resynchronising*, [`resync`]) first
//! tries where the damaged record's own length says the next one starts
//! (a flipped payload byte leaves the framing intact), then every later
//! byte offset. A candidate must pass cheap checks (a known kind, a
//! filter-name-like name of 1–200 printable ASCII bytes) before its
//! checksum is computed, so scanning garbage costs about one hash per
//! 10⁵ offsets. The classification errs towards damage: a torn tail whose
//! garbage happens to contain an intact record (a chunk's data may embed
//! one) is reported as damage, never the other way round. A single damaged
//! byte in the *last* record of a file, with nothing after it, cannot be
//! told from a torn write and counts as a torn tail.
//!
//! # Modules
//!
//! | module | what it holds |
//! |---|---|
//! | `record` | the record kinds, their encoders and decoder |
//! | `read` | reading a segment up to its first bad record; torn tail or damage |
//! | `salvage` | every intact record of a damaged file, for `bloomgate repair` |
//! | `dir` | the log directory: segment names, its lock file, stray files |

mod dir;
mod read;
mod record;
mod salvage;

pub use dir::{data_dir_of, segment_path, segments, strays, LOCK_FILE};
pub use read::{
    read_bytes, read_bytes_all, read_segment, read_segment_all, resync, DamagedFile, Fault,
    FaultKind, SegmentReport,
};
pub use record::{
    encode_add, encode_chunk, encode_cuckoo, encode_lineage, AnyRecord, CuckooOp, CuckooRecord,
    Record,
};
pub use salvage::{decode_record, salvage, Lost, Salvage};

/// The log's directory inside a data directory.
pub const WAL_DIR: &str = ".bloomgate-wal";

/// Segment file magic.
pub const MAGIC: &[u8; 8] = b"BGWAL001";
/// Largest payload accepted when reading (anything larger is corruption).
pub const MAX_RECORD: usize = 64 << 20;

#[cfg(test)]
mod tests;
