//! Counting and cuckoo filter files: their header fields, their kinds and
//! geometry, and the whole-file images they are opened from and saved as.
//!
//! A counting or cuckoo filter file has the same frame as a Bloom filter file
//! (magic, version 1, 4096-byte header with its checksum, page-aligned data
//! with the per-page data checksum) and its own layout code, so that every
//! reader refuses what it cannot read: a Bloom reader names the kind
//! (`FormatProblem::WrongKind`), a bloomgate from before these codes says
//! "unknown layout code". Their geometry uses the header's reserved bytes
//! (`docs/file-format.md`).
//!
//! Deletable filters are never updated in place: a delete clears what an
//! insert set, and a cuckoo insert moves fingerprints between buckets, so a
//! crash in the middle of an in-place write could lose an item that was
//! stored before. They are changed in memory (a file is mapped copy-on-write)
//! and written whole, atomically, by `save` (temp file, fsync, rename, fsync
//! of the directory): a crash leaves the old file or the new one.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use memmap2::MmapOptions;

use super::{
    check_frame, data_checksum, header_checksum, HEADER_LEN, MAGIC, OFF_BITS, OFF_BLOCK_BITS,
    OFF_DATA_LEN, OFF_DATA_SUM, OFF_FLAGS, OFF_HASH, OFF_HEADER_LEN, OFF_HEADER_SUM, OFF_ITEMS,
    OFF_K, OFF_KEY_KIND, OFF_LAYOUT, OFF_MATCH_MODE, OFF_ONES, OFF_PLANNED, OFF_SEED,
    OFF_TARGET_FP, OFF_VERSION,
};
use crate::atomic::{create_temp, sync_dir};
use crate::error::{io_err, Error, FormatProblem, Result};
use crate::hash::HASH_XXH3_128;
use crate::math::{Layout, BLOCK_BITS};
use crate::params::check_counts;
use crate::storage::{lookup_advice, Bits};

/// Counting filter layout code (offset 16).
pub const LAYOUT_COUNTING: u8 = 3;
/// Cuckoo filter layout code (offset 16).
pub const LAYOUT_CUCKOO: u8 = 4;

// Fields of the deletable layouts (in the Bloom header's reserved bytes).
const OFF_CUCKOO_BUCKETS: usize = 96;
const OFF_CUCKOO_MAX_KICKS: usize = 104;
const OFF_CUCKOO_BUCKET_SHIFT: usize = 108;

/// Cuckoo header flag: the table has any number of buckets and an item's
/// second bucket is `(H(fp) − first) mod buckets` (every file written now).
/// Without it the bucket count must be a power of two and the second bucket
/// is `first XOR H(fp)`, as files written before exact-size tables have it
/// (`docs/file-format.md`); such files are still read and saved that way.
pub const FLAG_CUCKOO_EXACT: u32 = 1;

/// Cuckoo header flag: the table is a later table of a chain, its buckets
/// those of the chain's first table each split in `2^bucket_shift`
/// (offset 108, 1..=63), so that a delete in the chain can tell which
/// table's copy is the item's (`crate::cuckoo`, "Chains"). Set exactly
/// when the shift is not 0, and only with [`FLAG_CUCKOO_EXACT`]: a
/// bloomgate from before it refuses the file (`flags 0x3`) rather than
/// misplace its items; tables without it are written as before.
pub const FLAG_CUCKOO_SHIFT: u32 = 2;

/// Largest bucket shift of a cuckoo table (the split bits of a bucket
/// index must fit in 64 bits).
pub const MAX_CUCKOO_BUCKET_SHIFT: u32 = 63;

/// The kinds of deletable filter a file can hold.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeletableKind {
    /// A counting Bloom filter ([`crate::CountingFilter`]), layout code 3.
    Counting,
    /// A cuckoo filter ([`crate::CuckooFilter`]), layout code 4.
    Cuckoo,
}

impl DeletableKind {
    /// The kind stored under a header layout code, if it is a deletable one.
    pub fn from_code(code: u8) -> Option<DeletableKind> {
        match code {
            LAYOUT_COUNTING => Some(DeletableKind::Counting),
            LAYOUT_CUCKOO => Some(DeletableKind::Cuckoo),
            _ => None,
        }
    }

    /// The header layout code.
    pub fn code(self) -> u8 {
        match self {
            DeletableKind::Counting => LAYOUT_COUNTING,
            DeletableKind::Cuckoo => LAYOUT_CUCKOO,
        }
    }

    /// The name used in messages and on the command line (`counting`, `cuckoo`).
    pub fn name(self) -> &'static str {
        match self {
            DeletableKind::Counting => "counting",
            DeletableKind::Cuckoo => "cuckoo",
        }
    }
}

/// The geometry of a deletable filter, as stored in its header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Geometry {
    /// A counting filter: `counters` 4-bit counters in blocks of 128, `k`
    /// counters per item.
    Counting {
        /// Number of counters, a positive multiple of 128.
        counters: u64,
        /// Counters per item, 1..=32.
        k: u32,
    },
    /// A cuckoo filter.
    Cuckoo {
        /// Number of buckets, at least 1 (a power of two in a file without
        /// [`FLAG_CUCKOO_EXACT`]).
        buckets: u64,
        /// Slots per bucket, 1..=8.
        bucket_size: u32,
        /// Fingerprint width in bits, 2..=32.
        fingerprint_bits: u32,
        /// Evictions an insert may make before it fails.
        max_kicks: u32,
        /// 0 for a table on its own or the first of a chain; for a later
        /// table of a chain, `buckets` is the first table's count times
        /// `2^bucket_shift` ([`FLAG_CUCKOO_SHIFT`]), 0..=63.
        bucket_shift: u32,
    },
}

/// Largest `max_kicks` a file may hold (RedisBloom's MAXITERATIONS limit).
pub const MAX_KICKS_LIMIT: u32 = 65_535;

impl Geometry {
    /// The kind of filter.
    pub fn kind(&self) -> DeletableKind {
        match self {
            Geometry::Counting { .. } => DeletableKind::Counting,
            Geometry::Cuckoo { .. } => DeletableKind::Cuckoo,
        }
    }

    /// Bytes of filter data: 4 bits per counter, or the packed slots rounded
    /// up to whole 64-byte lines. `None` if it would reach 2⁶⁰ bytes.
    pub fn data_len(&self) -> Option<u64> {
        match *self {
            Geometry::Counting { counters, .. } => {
                counters.checked_mul(crate::math::COUNTER_BITS as u64)?;
                let bytes = counters / 2;
                (bytes < 1 << 60).then_some(bytes)
            }
            Geometry::Cuckoo {
                buckets,
                bucket_size,
                fingerprint_bits,
                ..
            } => {
                let bits = buckets
                    .checked_mul(bucket_size as u64)?
                    .checked_mul(fingerprint_bits as u64)?;
                let bytes = bits.div_ceil(BLOCK_BITS) * 64;
                (bytes < 1 << 60).then_some(bytes)
            }
        }
    }

    /// Checks that the geometry describes an addressable filter.
    pub fn validate(&self) -> std::result::Result<(), String> {
        use crate::math::{
            COUNTING_BLOCK_COUNTERS, CUCKOO_MAX_BUCKET_SIZE, CUCKOO_MAX_FINGERPRINT_BITS,
            MAX_COUNTING_K,
        };
        match *self {
            Geometry::Counting { counters, k } => {
                if counters == 0 || !counters.is_multiple_of(COUNTING_BLOCK_COUNTERS) {
                    return Err(format!(
                        "counter count {counters} is not a positive multiple of {COUNTING_BLOCK_COUNTERS}"
                    ));
                }
                if k == 0 || k > MAX_COUNTING_K {
                    return Err(format!("k = {k} (1..={MAX_COUNTING_K})"));
                }
            }
            Geometry::Cuckoo {
                buckets,
                bucket_size,
                fingerprint_bits,
                max_kicks,
                bucket_shift,
            } => {
                if buckets == 0 {
                    return Err("bucket count 0".into());
                }
                if bucket_shift > MAX_CUCKOO_BUCKET_SHIFT || buckets.trailing_zeros() < bucket_shift
                {
                    return Err(format!(
                        "bucket count {buckets} is not a multiple of 2^{bucket_shift} (bucket shift 0..={MAX_CUCKOO_BUCKET_SHIFT})"
                    ));
                }
                if !(1..=CUCKOO_MAX_BUCKET_SIZE).contains(&bucket_size) {
                    return Err(format!(
                        "bucket size {bucket_size} (1..={CUCKOO_MAX_BUCKET_SIZE})"
                    ));
                }
                if !(2..=CUCKOO_MAX_FINGERPRINT_BITS).contains(&fingerprint_bits) {
                    return Err(format!(
                        "fingerprint width {fingerprint_bits} bits (2..={CUCKOO_MAX_FINGERPRINT_BITS})"
                    ));
                }
                if max_kicks > MAX_KICKS_LIMIT {
                    return Err(format!("max kicks {max_kicks} (0..={MAX_KICKS_LIMIT})"));
                }
            }
        }
        match self.data_len() {
            Some(_) => Ok(()),
            None => Err("the filter would need 2^60 bytes or more".into()),
        }
    }
}

/// A decoded header of a deletable filter file.
#[derive(Clone, Debug, PartialEq)]
pub struct DeletableHeader {
    /// Format version.
    pub version: u32,
    /// Kind and geometry.
    pub geometry: Geometry,
    /// Hash function id (1 = XXH3-128 seeded).
    pub hash_id: u8,
    /// How keys are normalized (interpreted by `bloomgate-url`; 0 = raw).
    pub key_kind: u8,
    /// How queries are matched (0 = exact).
    pub match_mode: u8,
    /// Flags: [`FLAG_CUCKOO_EXACT`] for cuckoo filters, none for counting
    /// filters.
    pub flags: u32,
    /// Hash seed.
    pub seed: u64,
    /// Items stored (inserts minus deletes).
    pub items: u64,
    /// Items the filter was sized for.
    pub planned_items: u64,
    /// False-positive rate the filter was sized for.
    pub target_fp: f64,
    /// Length of the data in bytes.
    pub data_len: u64,
    /// Checksum of the data ([`data_checksum`]).
    pub data_checksum: u64,
}

impl DeletableHeader {
    /// Encodes the header, computing its checksum.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[OFF_VERSION..][..4].copy_from_slice(&self.version.to_le_bytes());
        b[OFF_HEADER_LEN..][..4].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        b[OFF_LAYOUT] = self.geometry.kind().code();
        b[OFF_HASH] = self.hash_id;
        b[OFF_KEY_KIND] = self.key_kind;
        b[OFF_MATCH_MODE] = self.match_mode;
        let (k, block) = match self.geometry {
            Geometry::Counting { k, .. } => (k, crate::math::COUNTING_BLOCK_COUNTERS as u32),
            Geometry::Cuckoo {
                bucket_size,
                fingerprint_bits,
                buckets,
                max_kicks,
                bucket_shift,
            } => {
                b[OFF_CUCKOO_BUCKETS..][..8].copy_from_slice(&buckets.to_le_bytes());
                b[OFF_CUCKOO_MAX_KICKS..][..4].copy_from_slice(&max_kicks.to_le_bytes());
                b[OFF_CUCKOO_BUCKET_SHIFT..][..4].copy_from_slice(&bucket_shift.to_le_bytes());
                (fingerprint_bits, bucket_size)
            }
        };
        b[OFF_K..][..4].copy_from_slice(&k.to_le_bytes());
        b[OFF_BLOCK_BITS..][..4].copy_from_slice(&block.to_le_bytes());
        b[OFF_FLAGS..][..4].copy_from_slice(&self.flags.to_le_bytes());
        b[OFF_BITS..][..8].copy_from_slice(&(self.data_len * 8).to_le_bytes());
        b[OFF_SEED..][..8].copy_from_slice(&self.seed.to_le_bytes());
        b[OFF_ITEMS..][..8].copy_from_slice(&self.items.to_le_bytes());
        b[OFF_PLANNED..][..8].copy_from_slice(&self.planned_items.to_le_bytes());
        b[OFF_TARGET_FP..][..8].copy_from_slice(&self.target_fp.to_le_bytes());
        b[OFF_DATA_LEN..][..8].copy_from_slice(&self.data_len.to_le_bytes());
        b[OFF_DATA_SUM..][..8].copy_from_slice(&self.data_checksum.to_le_bytes());
        let sum = header_checksum(&b);
        b[OFF_HEADER_SUM..][..8].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes and validates the header of a deletable filter file.
    /// `file_len` is the length of the whole file. A Bloom filter file is
    /// refused with [`FormatProblem::WrongKind`] naming its layout.
    pub fn decode(bytes: &[u8], file_len: u64) -> Result<DeletableHeader, FormatProblem> {
        let version = check_frame(bytes, file_len)?;
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        let bad = |s: String| FormatProblem::BadField(s);
        let code = bytes[OFF_LAYOUT];
        let kind = match (DeletableKind::from_code(code), Layout::from_code(code)) {
            (Some(kind), _) => kind,
            (None, Some(layout)) => {
                return Err(FormatProblem::WrongKind {
                    found: match layout {
                        Layout::Blocked => "blocked Bloom",
                        Layout::Classic => "classic Bloom",
                    },
                    expected: "counting or cuckoo",
                })
            }
            (None, None) if code == super::LAYOUT_RIBBON => {
                return Err(FormatProblem::WrongKind {
                    found: "ribbon",
                    expected: "counting or cuckoo",
                })
            }
            (None, None) => return Err(bad(format!("unknown layout code {code}"))),
        };
        let hash_id = bytes[OFF_HASH];
        if hash_id != HASH_XXH3_128 {
            return Err(bad(format!("unknown hash function id {hash_id}")));
        }
        let (k, block) = (u32_at(OFF_K), u32_at(OFF_BLOCK_BITS));
        let data_len = u64_at(OFF_DATA_LEN);
        let geometry = match kind {
            DeletableKind::Counting => {
                if block as u64 != crate::math::COUNTING_BLOCK_COUNTERS {
                    return Err(bad(format!("{block} counters per block (expected 128)")));
                }
                if u64_at(OFF_CUCKOO_BUCKETS) != 0
                    || u32_at(OFF_CUCKOO_MAX_KICKS) != 0
                    || u32_at(OFF_CUCKOO_BUCKET_SHIFT) != 0
                {
                    return Err(bad("cuckoo fields set in a counting filter".into()));
                }
                Geometry::Counting {
                    counters: data_len
                        .checked_mul(2)
                        .ok_or_else(|| bad(format!("data length {data_len}")))?,
                    k,
                }
            }
            DeletableKind::Cuckoo => Geometry::Cuckoo {
                buckets: u64_at(OFF_CUCKOO_BUCKETS),
                bucket_size: block,
                fingerprint_bits: k,
                max_kicks: u32_at(OFF_CUCKOO_MAX_KICKS),
                bucket_shift: u32_at(OFF_CUCKOO_BUCKET_SHIFT),
            },
        };
        geometry.validate().map_err(bad)?;
        if geometry.data_len() != Some(data_len) {
            return Err(bad(format!("data length {data_len} for {geometry:?}")));
        }
        if u64_at(OFF_BITS) != data_len * 8 {
            return Err(bad(format!(
                "bit count {} for data length {data_len}",
                u64_at(OFF_BITS)
            )));
        }
        let flags = u32_at(OFF_FLAGS);
        let known = match kind {
            DeletableKind::Counting => 0,
            DeletableKind::Cuckoo => FLAG_CUCKOO_EXACT | FLAG_CUCKOO_SHIFT,
        };
        if flags & !known != 0 {
            return Err(bad(format!(
                "flags {flags:#x} (unknown for {} filters)",
                kind.name()
            )));
        }
        if let Geometry::Cuckoo {
            buckets,
            bucket_shift,
            ..
        } = geometry
        {
            // Without the flag the second bucket is `first XOR H(fp)`, which
            // stays in the table only for a power-of-two bucket count.
            if flags & FLAG_CUCKOO_EXACT == 0 && !buckets.is_power_of_two() {
                return Err(bad(format!(
                    "bucket count {buckets} is not a power of two (required without the exact-size flag)"
                )));
            }
            // The shift is read only with its flag, and the flag only of an
            // exact-size table: a file is one table or the other, never
            // half-way.
            let shifted = flags & FLAG_CUCKOO_SHIFT != 0;
            if shifted != (bucket_shift != 0) || (shifted && flags & FLAG_CUCKOO_EXACT == 0) {
                return Err(bad(format!(
                    "bucket shift {bucket_shift} with flags {flags:#x}"
                )));
            }
        }
        if u64_at(OFF_ONES) != 0 {
            return Err(bad(format!(
                "set-bit count field in a {} filter",
                kind.name()
            )));
        }
        let expected_len = HEADER_LEN as u64 + data_len;
        if file_len < expected_len {
            return Err(FormatProblem::Truncated {
                expected: expected_len,
                found: file_len,
            });
        }
        if file_len > expected_len {
            return Err(FormatProblem::Trailing {
                extra: file_len - expected_len,
            });
        }
        let items = u64_at(OFF_ITEMS);
        let max_items = match geometry {
            // Each counted item took a counter from 0 to 1, and a counter
            // holds at most 15.
            Geometry::Counting { counters, .. } => {
                counters.saturating_mul(crate::math::COUNTER_MAX as u64)
            }
            // One item per slot.
            Geometry::Cuckoo {
                buckets,
                bucket_size,
                ..
            } => buckets.saturating_mul(bucket_size as u64),
        };
        if items > max_items {
            return Err(bad(format!(
                "item count {items} for a {} filter of at most {max_items}",
                kind.name()
            )));
        }
        let planned_items = u64_at(OFF_PLANNED);
        let target_fp = f64::from_le_bytes(bytes[OFF_TARGET_FP..][..8].try_into().expect("8"));
        check_counts(planned_items, target_fp).map_err(bad)?;
        Ok(DeletableHeader {
            version,
            geometry,
            hash_id,
            key_kind: bytes[OFF_KEY_KIND],
            match_mode: bytes[OFF_MATCH_MODE],
            flags,
            seed: u64_at(OFF_SEED),
            items,
            planned_items,
            target_fp,
            data_len,
            data_checksum: u64_at(OFF_DATA_SUM),
        })
    }
}

/// A deletable filter file, opened: its header and its data mapped
/// copy-on-write (writes stay in this process until saved).
pub(crate) struct OpenedDeletable {
    pub(crate) header: DeletableHeader,
    pub(crate) data: Bits,
}

/// Opens a deletable filter file of kind `kind`: reads and validates the
/// header (a file of another kind is refused with
/// [`FormatProblem::WrongKind`]) and maps the data privately. The data
/// checksum is not read (see `verify_data`).
pub(crate) fn open_deletable(path: &Path, kind: DeletableKind) -> Result<OpenedDeletable> {
    use std::io::Read;
    let file = File::open(path).map_err(io_err(path, "open"))?;
    let meta = file.metadata().map_err(io_err(path, "stat"))?;
    if meta.is_dir() {
        return Err(Error::Io {
            path: path.into(),
            op: "open",
            source: std::io::Error::other("is a directory"),
        });
    }
    let len = meta.len();
    let format = |problem| Error::Format {
        path: path.into(),
        problem,
    };
    if len < HEADER_LEN as u64 {
        return Err(format(FormatProblem::TooShort(len)));
    }
    let mut head = vec![0u8; HEADER_LEN];
    (&file)
        .read_exact(&mut head)
        .map_err(io_err(path, "read"))?;
    let header = decode_of_kind(&head, len, kind).map_err(format)?;
    let map_len = usize::try_from(len).map_err(|_| Error::OutOfMemory(len))?;
    // SAFETY (of the mapping as such): as for `Filter::open`: bloomgate only
    // replaces filter files by renaming a new file over them, never writes
    // or truncates a deletable filter file in place; the mapping is private,
    // so this process's changes never reach the file.
    let map = unsafe {
        MmapOptions::new()
            .len(map_len)
            .no_reserve_swap()
            .map_copy(&file)
    }
    .map_err(io_err(path, "memory-map"))?;
    let _ = map.advise(lookup_advice(len));
    let data = Bits::mapped(map, HEADER_LEN, (header.data_len / 8) as usize)
        .ok_or_else(|| format(FormatProblem::BadField("mapping is not aligned".into())))?;
    Ok(OpenedDeletable { header, data })
}

/// Decodes the header of a file of `len` bytes that must be of `kind`: a
/// header of the other kind is [`FormatProblem::WrongKind`] naming both.
fn decode_of_kind(
    head: &[u8],
    len: u64,
    kind: DeletableKind,
) -> Result<DeletableHeader, FormatProblem> {
    let wrong = |found| FormatProblem::WrongKind {
        found,
        expected: kind.name(),
    };
    let header = DeletableHeader::decode(head, len).map_err(|p| match p {
        FormatProblem::WrongKind { found, .. } => wrong(found),
        p => p,
    })?;
    match header.geometry.kind() == kind {
        true => Ok(header),
        false => Err(wrong(header.geometry.kind().name())),
    }
}

/// A deletable table as its files see it: the kind its files carry and
/// how it is made from one. [`open_table`] and [`read_table`] are the
/// counting and cuckoo filters' `open` and `read_from`.
pub(crate) trait DeletableFile: Sized {
    /// The kind of file this table is read from.
    const KIND: DeletableKind;
    /// The table of an opened file or image; `origin` is the file it was
    /// opened from (none for an image read from bytes).
    fn from_file(o: OpenedDeletable, origin: Option<Origin>) -> Self;
}

/// Opens a deletable filter file of `T`'s kind: the header read and
/// checked, the data mapped copy-on-write (see [`open_deletable`]), the
/// file remembered for `verify`.
pub(crate) fn open_table<T: DeletableFile>(path: &Path) -> Result<T> {
    let o = open_deletable(path, T::KIND)?;
    let origin = Origin {
        path: path.into(),
        header: o.header.clone(),
    };
    Ok(T::from_file(o, Some(origin)))
}

/// A table of `T`'s kind from a file image of `len` bytes read from `r`
/// (see [`deletable_from_reader`]: both checksums verified).
pub(crate) fn read_table<T: DeletableFile>(r: &mut impl std::io::Read, len: u64) -> Result<T> {
    Ok(T::from_file(deletable_from_reader(r, len, T::KIND)?, None))
}

/// The file a deletable filter was opened from and the header read there:
/// what [`Origin::verify`] checks the filter's data against.
#[derive(Debug)]
pub(crate) struct Origin {
    pub(crate) path: PathBuf,
    pub(crate) header: DeletableHeader,
}

impl Origin {
    /// Checks `data` (the whole table) against the header's data checksum.
    pub(crate) fn verify(&self, data: &[u8]) -> Result<()> {
        verify_data(&self.path, &self.header, data)
    }
}

/// Checks `data` against the header's data checksum.
fn verify_data(path: &Path, header: &DeletableHeader, data: &[u8]) -> Result<()> {
    let found = data_checksum(data);
    if found != header.data_checksum {
        return Err(Error::Format {
            path: path.into(),
            problem: FormatProblem::DataChecksum {
                expected: header.data_checksum,
                found,
            },
        });
    }
    Ok(())
}

/// Decodes a deletable filter's file image of `len` bytes read from `r`
/// (header and data, as `to_bytes` makes it) into heap storage, the data
/// read straight into the table (no second copy), checking both checksums.
pub(crate) fn deletable_from_reader(
    r: &mut impl std::io::Read,
    len: u64,
    kind: DeletableKind,
) -> Result<OpenedDeletable> {
    let here = Path::new("<bytes>");
    let format = |problem| Error::Format {
        path: here.into(),
        problem,
    };
    if len < HEADER_LEN as u64 {
        return Err(format(FormatProblem::TooShort(len)));
    }
    let mut head = vec![0u8; HEADER_LEN];
    r.read_exact(&mut head).map_err(io_err(here, "read"))?;
    let header = decode_of_kind(&head, len, kind).map_err(format)?;
    let mut data =
        Bits::heap((header.data_len / 8) as usize).ok_or(Error::OutOfMemory(header.data_len))?;
    r.read_exact(data.bytes_mut())
        .map_err(io_err(here, "read"))?;
    verify_data(here, &header, data.bytes())?;
    Ok(OpenedDeletable { header, data })
}

/// Writes a deletable filter file atomically: `header` (its checksum field
/// is computed from `data` here) then `data`, to a temporary beside `path`,
/// fsynced and renamed into place, then the directory fsynced.
pub(crate) fn save_deletable(path: &Path, header: &DeletableHeader, data: &[u8]) -> Result<()> {
    let (tmp, mut f) = create_temp(path)?;
    let result = (|| {
        let mut header = header.clone();
        header.data_len = data.len() as u64;
        header.data_checksum = data_checksum(data);
        f.write_all(&header.encode())
            .map_err(io_err(&tmp, "write"))?;
        f.write_all(data).map_err(io_err(&tmp, "write"))?;
        f.sync_all().map_err(io_err(&tmp, "fsync"))?;
        std::fs::rename(&tmp, path).map_err(io_err(path, "rename into place"))?;
        sync_dir(path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The header of a deletable filter's file image for `data` (its length
/// and checksum filled in here): the image is this header, then `data`.
/// The caller keeps `data` unchanged until it has written it.
pub(crate) fn deletable_image_header(header: &DeletableHeader, data: &[u8]) -> Vec<u8> {
    let mut header = header.clone();
    header.data_len = data.len() as u64;
    header.data_checksum = data_checksum(data);
    header.encode()
}

/// The whole file image of a deletable filter (what [`save_deletable`]
/// writes): header with checksums, then `data`.
pub(crate) fn deletable_to_bytes(header: &DeletableHeader, data: &[u8]) -> Vec<u8> {
    // Copy first, then checksum the copy: writers may still be changing
    // `data`, and the header must describe the bytes returned.
    let mut out = vec![0u8; HEADER_LEN];
    out.extend_from_slice(data);
    let mut header = header.clone();
    header.data_len = data.len() as u64;
    header.data_checksum = data_checksum(&out[HEADER_LEN..]);
    out[..HEADER_LEN].copy_from_slice(&header.encode());
    out
}
