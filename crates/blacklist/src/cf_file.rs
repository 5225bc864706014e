//! `NAME.cf`, a served deletable filter's file, and the `CF.SCANDUMP` /
//! `CF.LOADCHUNK` stream header: their bytes, read and written here.
//!
//! A deletable filter (counting or cuckoo, RedisBloom's `CF.*`) is a chain
//! of engine tables ([`bloomgate_engine::Chain`] of
//! [`DeletableTable`]s). The server keeps each one in `NAME.cf`:
//!
//! | bytes | what |
//! |---|---|
//! | 8 | magic `BGCUCKO1` ([`FILE_MAGIC`]) |
//! | 4 | length of the JSON header, u32 LE (at most [`MAX_HEADER`]) |
//! | n | the JSON header ([`CfHeader`]) |
//! | Σ subs | each table's engine file image (header, then its data), oldest first |
//! | 8 | xxh3-64 (LE) of everything before it |
//!
//! The header carries the chain's parameters, the incarnation `id` and the
//! sequence number `seq` of the last logged change the file contains (the
//! server's exactly-once replay), the counters, each table image's length
//! and an xxh3-64 of all of them (`body_hash`). A `CF.SCANDUMP` stream
//! starts with [`DUMP_MAGIC`] and the same JSON header (id and seq 0), then
//! the same table images cut into chunks.
//!
//! Everything a file or a client supplies is checked before it sizes
//! memory ([`CfHeader::check`]): 1 to [`MAX_TABLES`] tables whose lengths
//! sum without overflow, a rate strictly between 0 and 1, a bucket size and
//! an expansion in `CF.RESERVE`'s ranges, a capacity of at least 1, and a
//! cuckoo item count that fits its slots. A fault is a [`CfFileError`];
//! nothing damaged is ever read as a filter.
//!
//! Writing ([`write`]) and reading a file ([`load`]) never hold a second
//! copy of the tables: each table's bytes are written from its own memory
//! and read straight into it, so a filter that fits in memory once can be
//! saved and served again.

use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use bloomgate_engine::format::DeletableKind;
use bloomgate_engine::{DeletableTable, MAX_TABLES};
use bloomgate_url::{KeyKind, MatchMode};
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

/// The first bytes of `NAME.cf`.
pub const FILE_MAGIC: &[u8; 8] = b"BGCUCKO1";
/// The first bytes of a `CF.SCANDUMP` stream's header chunk.
pub const DUMP_MAGIC: &[u8] = b"BLOOMGATE-CF-DUMP-1\n";
/// Largest JSON header accepted when reading (anything larger is damage).
pub const MAX_HEADER: usize = 1 << 20;

/// What a deletable filter's tables are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CfLayout {
    /// Cuckoo tables (RedisBloom's `CF.*` filter; the default).
    #[default]
    Cuckoo,
    /// One counting Bloom filter of 4-bit counters: never full (past its
    /// capacity its rate rises, as `info` predicts), so it never grows.
    Counting,
}

impl CfLayout {
    /// `cuckoo` or `counting`.
    pub fn name(self) -> &'static str {
        self.kind().name()
    }

    /// The engine's name for the layout.
    pub fn kind(self) -> DeletableKind {
        match self {
            CfLayout::Cuckoo => DeletableKind::Cuckoo,
            CfLayout::Counting => DeletableKind::Counting,
        }
    }

    /// The layout of the engine's kind.
    pub fn of(kind: DeletableKind) -> CfLayout {
        match kind {
            DeletableKind::Cuckoo => CfLayout::Cuckoo,
            DeletableKind::Counting => CfLayout::Counting,
        }
    }

    fn is_cuckoo(&self) -> bool {
        *self == CfLayout::Cuckoo
    }
}

/// Why a `NAME.cf` file or a `CF.LOADCHUNK` stream was refused. Nothing of
/// it was read as a filter.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CfFileError {
    /// The file does not start with [`FILE_MAGIC`].
    #[error("not a bloomgate cuckoo filter file (bad magic)")]
    BadMagic,
    /// Too short for its frame.
    #[error("truncated")]
    Truncated,
    /// The whole file's checksum does not match.
    #[error("checksum mismatch (damaged or truncated file)")]
    Checksum,
    /// The tables' bytes do not match the header's `body_hash`.
    #[error("checksum mismatch")]
    BodyChecksum,
    /// The header length is larger than [`MAX_HEADER`] or the file.
    #[error("impossible header length")]
    HeaderLength,
    /// The JSON header does not parse.
    #[error("header: {0}")]
    Header(String),
    /// No tables, or more than [`MAX_TABLES`].
    #[error("{0} sub-filters")]
    Tables(usize),
    /// The tables' lengths overflow.
    #[error("sub-filter lengths overflow")]
    LengthsOverflow,
    /// A rate, bucket size, capacity or expansion out of range.
    #[error("bad parameters")]
    Parameters,
    /// More cuckoo items than the tables have slots.
    #[error("{items} items in {bytes} bytes")]
    TooManyItems {
        /// Items the header claims.
        items: u64,
        /// Bytes of the tables.
        bytes: u64,
    },
    /// The tables' lengths pass the data.
    #[error("sub-filter lengths exceed the data")]
    LengthsExceed,
    /// Bytes after the last table.
    #[error("trailing bytes")]
    TrailingBytes,
    /// A table's engine image was refused.
    #[error("{0}")]
    Table(String),
    /// The tables' key rules differ, or are unknown.
    #[error("{0}")]
    KeyRules(String),
    /// Reading the file failed.
    #[error("{0}")]
    Io(String),
    /// A `CF.LOADCHUNK` header chunk that is not one (RedisBloom's text).
    #[error("Invalid header")]
    DumpHeader,
    /// A `CF.LOADCHUNK` stream larger than the server takes.
    #[error("a filter of {bytes} bytes exceeds the server's limit of {limit} bytes")]
    TooLarge {
        /// The stream's table bytes.
        bytes: u64,
        /// The server's limit.
        limit: u64,
    },
}

fn io(e: std::io::Error) -> CfFileError {
    CfFileError::Io(e.to_string())
}

/// The header of `NAME.cf` and of a `CF.SCANDUMP` stream.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CfHeader {
    /// Absent in files and dumps of cuckoo filters (and in those written
    /// before counting filters were served).
    #[serde(default, skip_serializing_if = "CfLayout::is_cuckoo")]
    pub layout: CfLayout,
    /// The incarnation id (random, so that log records of a deleted
    /// namesake never apply); 0 in a dump.
    pub id: u64,
    /// Sequence number of the last logged change the file contains; 0 in
    /// a dump.
    pub seq: u64,
    /// Items the first table was planned for.
    pub capacity: u64,
    /// RedisBloom's bucket size parameter.
    pub bucket_size: u16,
    /// Kicks before an insert gives up.
    pub max_iterations: u16,
    /// Growth factor of the next table; 0 = never grow.
    pub expansion: u32,
    /// False-positive rate each table was planned for.
    pub error_rate: f64,
    /// Items in the filter (adds less deletes).
    pub items: u64,
    /// Deletes so far.
    pub deletes: u64,
    /// Byte length of each table's engine image.
    pub subs: Vec<u64>,
    /// xxh3-64 of the tables' images (all, in order).
    pub body_hash: u64,
    /// A filter exported to `NAME.bgf` at each save (one imported from a
    /// CLI-built file): xxh3-64 hashes of the files it wrote, the last two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgf: Option<Vec<u64>>,
}

impl CfHeader {
    /// Checks every field a file or a `CF.LOADCHUNK` header supplies before
    /// it sizes memory or a chain (see the module documentation). Returns
    /// the tables' total length in bytes.
    pub fn check(&self) -> Result<u64, CfFileError> {
        if self.subs.is_empty() || self.subs.len() > MAX_TABLES {
            return Err(CfFileError::Tables(self.subs.len()));
        }
        let total = self
            .subs
            .iter()
            .try_fold(0u64, |t, &l| t.checked_add(l))
            .ok_or(CfFileError::LengthsOverflow)?;
        if !(self.error_rate > 0.0 && self.error_rate < 1.0)
            || self.bucket_size == 0
            || self.capacity == 0
            || self.expansion > 32_768
        {
            return Err(CfFileError::Parameters);
        }
        // A cuckoo filter's item takes a slot of 2 bits or more. (A
        // counting filter counts repeated adds of one item: no bound.)
        if self.layout.is_cuckoo() && self.items > total.saturating_mul(4) {
            return Err(CfFileError::TooManyItems {
                items: self.items,
                bytes: total,
            });
        }
        Ok(total)
    }

    /// Sets `subs` and `body_hash` to describe `body`.
    pub fn describe(&mut self, body: &[TableImage<'_>]) {
        let mut h = Xxh3::new();
        for b in body {
            b.pieces().iter().for_each(|p| h.update(p));
        }
        self.subs = body.iter().map(TableImage::len).collect();
        self.body_hash = h.digest();
    }

    fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a header serializes")
    }
}

/// One table's engine file image, without a copy of its table: its
/// header, then the table's own bytes.
pub struct TableImage<'a> {
    /// The engine header of the image.
    pub head: Vec<u8>,
    /// The table's own bytes.
    pub data: &'a [u8],
}

impl TableImage<'_> {
    /// The image of `t` as it is now (consistent while the chain's owner
    /// keeps changes out).
    pub fn of(t: &DeletableTable) -> TableImage<'_> {
        TableImage {
            head: t.image_header(),
            data: t.as_bytes(),
        }
    }

    /// Its two pieces, in order.
    pub fn pieces(&self) -> [&[u8]; 2] {
        [&self.head, self.data]
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        (self.head.len() + self.data.len()) as u64
    }

    /// Whether it has no bytes (never, for a real table).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file's or a stream's contents: its header, its tables, and the key
/// rules they share.
pub struct CfContents {
    /// The header.
    pub header: CfHeader,
    /// The tables, oldest first.
    pub tables: Vec<DeletableTable>,
    /// How items are normalized.
    pub kind: KeyKind,
    /// How queries are matched.
    pub mode: MatchMode,
}

/// Writes a `NAME.cf` image to `out`, piece by piece (the checksum hashed
/// as they go), each table's data from the table's own memory.
pub fn write(
    out: &mut impl std::io::Write,
    h: &CfHeader,
    body: &[TableImage<'_>],
) -> std::io::Result<()> {
    let json = h.to_json();
    let len = (json.len() as u32).to_le_bytes();
    let mut sum = Xxh3::new();
    let head: [&[u8]; 3] = [FILE_MAGIC, &len, &json];
    for piece in head.into_iter().chain(body.iter().flat_map(|b| b.pieces())) {
        sum.update(piece);
        out.write_all(piece)?;
    }
    out.write_all(&sum.digest().to_le_bytes())
}

/// The image [`write`] writes, in one buffer, from the tables' images.
pub fn encode(h: &CfHeader, body: &[Vec<u8>]) -> Vec<u8> {
    let json = h.to_json();
    let mut out = Vec::with_capacity(16 + json.len() + body.iter().map(Vec::len).sum::<usize>());
    out.extend_from_slice(FILE_MAGIC);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    for b in body {
        out.extend_from_slice(b);
    }
    let sum = xxh3_64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// A `NAME.cf` file's contents from its bytes.
pub fn decode(bytes: &[u8]) -> Result<CfContents, CfFileError> {
    let rest = bytes
        .strip_prefix(FILE_MAGIC.as_slice())
        .ok_or(CfFileError::BadMagic)?;
    let (data, sum) = rest.split_last_chunk::<8>().ok_or(CfFileError::Truncated)?;
    if xxh3_64(&bytes[..bytes.len() - 8]) != u64::from_le_bytes(*sum) {
        return Err(CfFileError::Checksum);
    }
    let (len, data) = data
        .split_first_chunk::<4>()
        .ok_or(CfFileError::Truncated)?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_HEADER || len > data.len() {
        return Err(CfFileError::HeaderLength);
    }
    let h = parse_header(&data[..len])?;
    decode_body(h, &data[len..])
}

/// Checks the bytes of a `NAME.cf` file as the server's start does,
/// without serving it.
pub fn check(bytes: &[u8]) -> Result<(), CfFileError> {
    decode(bytes).map(|_| ())
}

fn parse_header(json: &[u8]) -> Result<CfHeader, CfFileError> {
    serde_json::from_slice(json).map_err(|e| CfFileError::Header(e.to_string()))
}

/// The contents described by `h` from the tables' bytes `body` (a file's,
/// or a `CF.LOADCHUNK` stream's once complete).
pub fn decode_body(h: CfHeader, body: &[u8]) -> Result<CfContents, CfFileError> {
    if xxh3_64(body) != h.body_hash {
        return Err(CfFileError::BodyChecksum);
    }
    h.check()?;
    let mut tables = Vec::new();
    let mut at = 0usize;
    for &len in &h.subs {
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| at.checked_add(l))
            .filter(|&e| e <= body.len())
            .ok_or(CfFileError::LengthsExceed)?;
        let t = DeletableTable::from_bytes(h.layout.kind(), &body[at..end])
            .map_err(|e| CfFileError::Table(e.to_string()))?;
        tables.push(t);
        at = end;
    }
    if at != body.len() {
        return Err(CfFileError::TrailingBytes);
    }
    contents(h, tables)
}

fn contents(header: CfHeader, tables: Vec<DeletableTable>) -> Result<CfContents, CfFileError> {
    let (kind, mode) = key_rules(&tables)?;
    Ok(CfContents {
        header,
        tables,
        kind,
        mode,
    })
}

/// The key rules of a chain's tables (all the same).
pub fn key_rules(tables: &[DeletableTable]) -> Result<(KeyKind, MatchMode), CfFileError> {
    let (k, m) = tables.first().map_or((0, 0), DeletableTable::key_rules);
    if tables.iter().any(|s| s.key_rules() != (k, m)) {
        return Err(CfFileError::KeyRules(
            "sub-filters with different key rules".into(),
        ));
    }
    match (KeyKind::from_u8(k), MatchMode::from_u8(m)) {
        (Some(k), Some(m)) => Ok((k, m)),
        _ => Err(CfFileError::KeyRules(format!(
            "unknown key kind {k} or match mode {m} (written by a newer bloomgate?)"
        ))),
    }
}

/// xxh3-64 of bytes `from..to` of `file`, read 1 MiB at a time.
fn hash_range(file: &std::fs::File, from: u64, to: u64) -> std::io::Result<u64> {
    let mut f = file;
    f.seek(SeekFrom::Start(from))?;
    let mut r = f.take(to.saturating_sub(from));
    let mut sum = Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match r.read(&mut buf)? {
            0 => break,
            n => sum.update(&buf[..n]),
        }
    }
    Ok(sum.digest())
}

/// The file `path`'s contents, as [`decode`] reads them from its bytes,
/// with the same checks in the same order, but in bounded memory: the
/// checksums are computed reading the file a piece at a time, and each
/// table is read straight into its own memory. (Reading the file whole,
/// then decoding each table from it, held the filter twice at a start: a
/// filter that fits the memory once could not be loaded again.)
pub fn load(path: &Path) -> Result<CfContents, CfFileError> {
    let file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    let mut f = &file;
    let mut magic = [0u8; 8];
    if size < 8 || f.read_exact(&mut magic).is_err() || &magic != FILE_MAGIC {
        return Err(CfFileError::BadMagic);
    }
    if size < 16 {
        return Err(CfFileError::Truncated);
    }
    let mut sum = [0u8; 8];
    f.seek(SeekFrom::Start(size - 8)).map_err(io)?;
    f.read_exact(&mut sum).map_err(io)?;
    if hash_range(&file, 0, size - 8).map_err(io)? != u64::from_le_bytes(sum) {
        return Err(CfFileError::Checksum);
    }
    if size < 20 {
        return Err(CfFileError::Truncated);
    }
    let mut len = [0u8; 4];
    f.seek(SeekFrom::Start(8)).map_err(io)?;
    f.read_exact(&mut len).map_err(io)?;
    let len = u64::from(u32::from_le_bytes(len));
    if len > MAX_HEADER as u64 || len > size - 20 {
        return Err(CfFileError::HeaderLength);
    }
    let mut json = vec![0u8; len as usize];
    f.read_exact(&mut json).map_err(io)?;
    let h = parse_header(&json)?;
    let (body_start, body_end) = (12 + len, size - 8);
    if hash_range(&file, body_start, body_end).map_err(io)? != h.body_hash {
        return Err(CfFileError::BodyChecksum);
    }
    let total = h.check()?;
    if total > body_end - body_start {
        return Err(CfFileError::LengthsExceed);
    }
    if total < body_end - body_start {
        return Err(CfFileError::TrailingBytes);
    }
    f.seek(SeekFrom::Start(body_start)).map_err(io)?;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let tables = h
        .subs
        .iter()
        .map(|&l| DeletableTable::read_from(h.layout.kind(), &mut (&mut r).take(l), l))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CfFileError::Table(e.to_string()))?;
    contents(h, tables)
}

/// The header chunk of a `CF.SCANDUMP` stream for `h` (its id and seq are
/// written as given: a dump sets them to 0).
pub fn encode_dump_header(h: &CfHeader) -> Vec<u8> {
    let mut out = DUMP_MAGIC.to_vec();
    out.extend_from_slice(&h.to_json());
    out
}

/// Parses the first chunk of a `CF.LOADCHUNK` stream (magic line, JSON
/// header) and checks it ([`CfHeader::check`]) and its size against
/// `max_filter_bytes`, before anything is allocated for it. Returns the
/// header and the bytes the stream's later chunks carry.
pub fn parse_dump_header(
    data: &[u8],
    max_filter_bytes: u64,
) -> Result<(CfHeader, u64), CfFileError> {
    let h: CfHeader = data
        .strip_prefix(DUMP_MAGIC)
        .and_then(|j| serde_json::from_slice(j).ok())
        .ok_or(CfFileError::DumpHeader)?;
    let total = h.check().map_err(|_| CfFileError::DumpHeader)?;
    if total > max_filter_bytes {
        return Err(CfFileError::TooLarge {
            bytes: total,
            limit: max_filter_bytes,
        });
    }
    Ok((h, total))
}

#[cfg(test)]
mod tests;
