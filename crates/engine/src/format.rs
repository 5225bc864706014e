//! The on-disk format (version 1): a 4096-byte header, then the bit array.
//!
//! The full specification is `docs/file-format.md`; this module is its only
//! implementation. Design points:
//!
//! * The bit array starts at byte 4096, so it is page-aligned and the file is
//!   memory-mapped and used in place: opening a 25 GB filter reads one page.
//! * The header carries its own checksum (any flipped bit in it is caught on
//!   open). The data checksum is checked only on request (`verify`), because
//!   reading 25 GB is exactly what opening must not do.
//! * The data checksum is the wrapping sum over 4096-byte pages of
//!   `xxh3_64(page, seed = page index)`. A sum of per-page hashes can be
//!   computed in parallel and still catches any corrupted, swapped or zeroed
//!   page with probability 1 − 2⁻⁶⁴.
//! * Every write of a whole file is atomic: temp file in the same directory,
//!   fsync, rename over the target, fsync the directory. A crash leaves either
//!   the old file or the new one, never a mix.
//! * In-place updates (`bloomgate add`) set a *dirty* flag (synced) before
//!   touching the bits and clear it with the new checksum afterwards. Bits are
//!   only ever set, so an interrupted update never loses an item that was there
//!   before; the flag only says that the checksum is stale.
//! * Because the checksum is a sum over pages, an update through
//!   [`Filter::update_batch`] rehashes only the pages it changed: it adds
//!   their old hashes up before writing and their new hashes at commit, and
//!   moves the checksum by the difference. Adding a few thousand items to a
//!   25 GB filter then reads a few thousand pages, not 25 GB; and corruption
//!   elsewhere in the file stays detectable instead of being sealed into a
//!   freshly computed checksum.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use memmap2::MmapOptions;
use rayon::prelude::*;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::error::{io_err, Error, FormatProblem, Result};
use crate::filter::{Filter, Params};
use crate::hash::HASH_XXH3_128;
use crate::math::{Layout, BLOCK_BITS, MAX_K};
use crate::storage::Bits;

/// The first eight bytes of every filter file.
pub const MAGIC: [u8; 8] = *b"BLOOMGT\x01";
/// The format version this build writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// Header length; the bit array starts here.
pub const HEADER_LEN: usize = 4096;
/// Checksum page size.
const PAGE: usize = 4096;
/// What [`Filter::save`] copies, hashes and writes at a time: a whole number
/// of pages, small enough not to double a large filter's memory.
const SAVE_CHUNK: usize = 32 << 20;
/// Header flag: an in-place update is in progress or was interrupted.
pub const FLAG_DIRTY: u32 = 1;
/// Marks the `ones` field as recorded: the field holds `count | 2⁶³`, and 0
/// means "not recorded". The mark lives in the field, not in the flags: a
/// writer from before the field copies the flags through but rebuilds the
/// header without the field, which then reads as "not recorded", never as a
/// stale count (`docs/file-format.md`).
const ONES_RECORDED: u64 = 1 << 63;

// Field offsets (little-endian). Documented in docs/file-format.md.
const OFF_VERSION: usize = 8;
const OFF_HEADER_LEN: usize = 12;
const OFF_LAYOUT: usize = 16;
const OFF_HASH: usize = 17;
const OFF_KEY_KIND: usize = 18;
const OFF_MATCH_MODE: usize = 19;
const OFF_K: usize = 20;
const OFF_BLOCK_BITS: usize = 24;
const OFF_FLAGS: usize = 28;
const OFF_BITS: usize = 32;
const OFF_SEED: usize = 40;
const OFF_ITEMS: usize = 48;
const OFF_PLANNED: usize = 56;
const OFF_TARGET_FP: usize = 64;
const OFF_DATA_LEN: usize = 72;
const OFF_DATA_SUM: usize = 80;
const OFF_ONES: usize = 88;
const OFF_HEADER_SUM: usize = 120;

/// A decoded header.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// Format version.
    pub version: u32,
    /// Filter parameters.
    pub params: Params,
    /// Hash function id (1 = XXH3-128 seeded).
    pub hash_id: u8,
    /// Flags (bit 0: dirty).
    pub flags: u32,
    /// Items inserted.
    pub items: u64,
    /// Length of the bit array in bytes.
    pub data_len: u64,
    /// Checksum of the bit array.
    pub data_checksum: u64,
    /// Set bits of the bit array, when the file records them (offset 88):
    /// what `info` reports the fill from without reading the data. Current
    /// only while the file is not dirty.
    pub ones: Option<u64>,
}

impl Header {
    /// True if an in-place update did not finish.
    pub fn is_dirty(&self) -> bool {
        self.flags & FLAG_DIRTY != 0
    }

    /// Block size in bits as stored (512 for blocked, 0 for classic).
    pub fn block_bits(&self) -> u32 {
        match self.params.layout {
            Layout::Blocked => BLOCK_BITS as u32,
            Layout::Classic => 0,
        }
    }

    /// Encodes the header, computing its checksum.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN];
        let p = &self.params;
        b[..8].copy_from_slice(&MAGIC);
        b[OFF_VERSION..][..4].copy_from_slice(&self.version.to_le_bytes());
        b[OFF_HEADER_LEN..][..4].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        b[OFF_LAYOUT] = p.layout.code();
        b[OFF_HASH] = self.hash_id;
        b[OFF_KEY_KIND] = p.key_kind;
        b[OFF_MATCH_MODE] = p.match_mode;
        b[OFF_K..][..4].copy_from_slice(&p.k.to_le_bytes());
        b[OFF_BLOCK_BITS..][..4].copy_from_slice(&self.block_bits().to_le_bytes());
        b[OFF_FLAGS..][..4].copy_from_slice(&self.flags.to_le_bytes());
        let ones = self.ones.map_or(0, |o| o | ONES_RECORDED);
        b[OFF_ONES..][..8].copy_from_slice(&ones.to_le_bytes());
        b[OFF_BITS..][..8].copy_from_slice(&p.bits.to_le_bytes());
        b[OFF_SEED..][..8].copy_from_slice(&p.seed.to_le_bytes());
        b[OFF_ITEMS..][..8].copy_from_slice(&self.items.to_le_bytes());
        b[OFF_PLANNED..][..8].copy_from_slice(&p.planned_items.to_le_bytes());
        b[OFF_TARGET_FP..][..8].copy_from_slice(&p.target_fp.to_le_bytes());
        b[OFF_DATA_LEN..][..8].copy_from_slice(&self.data_len.to_le_bytes());
        b[OFF_DATA_SUM..][..8].copy_from_slice(&self.data_checksum.to_le_bytes());
        let sum = header_checksum(&b);
        b[OFF_HEADER_SUM..][..8].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes and validates a header. `file_len` is the length of the whole file.
    pub fn decode(bytes: &[u8], file_len: u64) -> Result<Header, FormatProblem> {
        let version = check_frame(bytes, file_len)?;
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        let bad = |s: String| FormatProblem::BadField(s);
        if let Some(kind) = DeletableKind::from_code(bytes[OFF_LAYOUT]) {
            return Err(FormatProblem::WrongKind {
                found: kind.name(),
                expected: "Bloom",
            });
        }
        let layout = Layout::from_code(bytes[OFF_LAYOUT])
            .ok_or_else(|| bad(format!("unknown layout code {}", bytes[OFF_LAYOUT])))?;
        let hash_id = bytes[OFF_HASH];
        if hash_id != HASH_XXH3_128 {
            return Err(bad(format!("unknown hash function id {hash_id}")));
        }
        let k = u32_at(OFF_K);
        if k == 0 || k > MAX_K {
            return Err(bad(format!("k = {k}")));
        }
        let bits = u64_at(OFF_BITS);
        if bits == 0 || bits % BLOCK_BITS != 0 || bits >= 1 << 63 {
            return Err(bad(format!("bit count {bits}")));
        }
        let data_len = u64_at(OFF_DATA_LEN);
        if data_len != bits / 8 {
            return Err(bad(format!("data length {data_len} for {bits} bits")));
        }
        let block_bits = u32_at(OFF_BLOCK_BITS);
        let expected_block = if layout == Layout::Blocked {
            BLOCK_BITS as u32
        } else {
            0
        };
        if block_bits != expected_block {
            return Err(bad(format!("block size {block_bits} for layout {layout}")));
        }
        let ones = match u64_at(OFF_ONES) {
            0 => None,
            v if v & ONES_RECORDED != 0 && v & !ONES_RECORDED <= bits => Some(v & !ONES_RECORDED),
            v => return Err(bad(format!("set-bit count field {v:#x} for {bits} bits"))),
        };
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
        let header = Header {
            version,
            params: Params {
                layout,
                bits,
                k,
                seed: u64_at(OFF_SEED),
                key_kind: bytes[OFF_KEY_KIND],
                match_mode: bytes[OFF_MATCH_MODE],
                planned_items: u64_at(OFF_PLANNED),
                target_fp: f64::from_le_bytes(bytes[OFF_TARGET_FP..][..8].try_into().expect("8")),
            },
            hash_id,
            flags: u32_at(OFF_FLAGS),
            items: u64_at(OFF_ITEMS),
            data_len,
            data_checksum: u64_at(OFF_DATA_SUM),
            ones,
        };
        check_counts(header.params.planned_items, header.params.target_fp).map_err(bad)?;
        check_items(header.items, bits).map_err(bad)?;
        Ok(header)
    }
}

/// Checks what a header says about its sizing: at least one planned item
/// and a rate strictly between 0 and 1 (every plan has both; growth and
/// the rate math take them as given).
pub fn check_counts(planned_items: u64, target_fp: f64) -> std::result::Result<(), String> {
    if planned_items == 0 {
        return Err("planned item count 0".into());
    }
    if !(target_fp > 0.0 && target_fp < 1.0) {
        return Err(format!("target rate {target_fp} (0 < rate < 1)"));
    }
    Ok(())
}

/// Checks a Bloom filter's item count against its size: an item is counted
/// only when it sets a bit that was clear (and a union's count is clamped
/// the same way, see [`Filter::set_items`]), so a filter of `bits` bits
/// never counts more than `bits` items. A larger count is damage, or a
/// header written to make the rate math run away.
pub fn check_items(items: u64, bits: u64) -> std::result::Result<(), String> {
    if items > bits {
        return Err(format!(
            "item count {items} for {bits} bits (at most one per bit)"
        ));
    }
    Ok(())
}

/// XXH3-64 of the header with its checksum field read as zero.
fn header_checksum(header: &[u8]) -> u64 {
    let mut copy = [0u8; HEADER_LEN];
    copy.copy_from_slice(&header[..HEADER_LEN]);
    copy[OFF_HEADER_SUM..OFF_HEADER_SUM + 8].fill(0);
    xxh3_64_with_seed(&copy, 0)
}

/// The data checksum: wrapping sum of `xxh3_64(page, seed = page index)` over
/// 4096-byte pages (the last may be shorter). Parallel.
pub fn data_checksum(data: &[u8]) -> u64 {
    pages_checksum(data, 0)
}

/// The share of the data checksum of `data`, a run of whole pages starting
/// at page `first_page` of the array (the last may be shorter if it ends
/// the array): [`data_checksum`] of the array is the wrapping sum of these
/// shares over any cut of it into page-aligned runs.
pub fn pages_checksum(data: &[u8], first_page: u64) -> u64 {
    pages_checksum_and_ones(data, first_page).0
}

/// [`pages_checksum`] and the number of set bits, in one parallel pass over
/// the data.
pub fn pages_checksum_and_ones(data: &[u8], first_page: u64) -> (u64, u64) {
    data.par_chunks(PAGE)
        .enumerate()
        .map(|(i, page)| {
            (
                xxh3_64_with_seed(page, first_page + i as u64),
                page_ones(page),
            )
        })
        .reduce(|| (0, 0), |a, b| (a.0.wrapping_add(b.0), a.1 + b.1))
}

/// Set bits of one page (or any run of bytes).
fn page_ones(page: &[u8]) -> u64 {
    let (words, rest) = page.as_chunks::<8>();
    words
        .iter()
        .map(|w| u64::from_ne_bytes(*w).count_ones() as u64)
        .sum::<u64>()
        + rest.iter().map(|b| b.count_ones() as u64).sum::<u64>()
}

/// Checksum page `page` of `data`.
fn page_bytes(data: &[u8], page: u64) -> &[u8] {
    let start = page as usize * PAGE;
    let end = (start + PAGE).min(data.len());
    &data[start..end]
}

/// The hash of checksum page `page` of `data`.
fn page_hash(data: &[u8], page: u64) -> u64 {
    xxh3_64_with_seed(page_bytes(data, page), page)
}

/// What an in-place update has changed (between [`Filter::begin_update`] and
/// [`Filter::commit_update`]).
pub(crate) struct UpdateLog {
    inner: std::sync::Mutex<LogInner>,
    /// Set by any write that did not go through [`Filter::update_batch`]:
    /// the commit then recomputes the whole checksum.
    untracked: std::sync::atomic::AtomicBool,
}

struct LogInner {
    /// One bit per checksum page: the pages to rehash at commit.
    dirty: Vec<u64>,
    /// Pages in the data.
    pages: u64,
    /// Pages marked in `dirty`.
    marked: u64,
    /// Wrapping sum of the hashes the marked pages had before the update.
    old_sum: u64,
    /// Set bits the marked pages had before the update.
    old_ones: u64,
    /// Too many pages changed for rehashing them one by one to pay (or the
    /// checksum was already stale): recompute it whole at commit.
    whole: bool,
}

impl UpdateLog {
    fn new(data_len: u64, whole: bool) -> UpdateLog {
        let pages = data_len.div_ceil(PAGE as u64);
        UpdateLog {
            inner: std::sync::Mutex::new(LogInner {
                dirty: vec![0; pages.div_ceil(64) as usize],
                pages,
                marked: 0,
                old_sum: 0,
                old_ones: 0,
                whole,
            }),
            untracked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Records that a write bypassed the log.
    pub(crate) fn note_untracked(&self) {
        self.untracked
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How a filter file is opened.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// Mapped copy-on-write: pages are shared with the page cache and other
    /// processes; inserts change only this process's private copy.
    ReadOnly,
    /// Mapped shared and writable: inserts reach the file (see
    /// [`Filter::begin_update`] and [`Filter::commit_update`]).
    ReadWrite,
}

/// File-backing bookkeeping of a filter.
pub(crate) struct FileState {
    pub(crate) path: PathBuf,
    /// Kept only where it is needed: by a writer (its advisory lock lives
    /// as long as the handle) and by a file being created (sized, synced
    /// and renamed by `persist`). A read-only open closes it once mapped:
    /// the mapping holds the file, and a server of thousands of filters
    /// would otherwise hold as many descriptors.
    file: Option<File>,
    access: Access,
    /// Set while the file is a temporary that `persist` will rename to `path`.
    temp: Option<PathBuf>,
    header: Header,
}

impl Drop for FileState {
    fn drop(&mut self) {
        if let Some(tmp) = self.temp.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Creates a new temporary file beside `path` (readable and writable; never
/// an existing file), for writers that rename it into place when done.
pub(crate) fn create_temp(path: &Path) -> Result<(PathBuf, File)> {
    let tmp = temp_path(path);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(io_err(&tmp, "create"))?;
    Ok((tmp, file))
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "filter".into());
    name.push(format!(
        ".tmp-{}-{:x}",
        std::process::id(),
        crate::random_seed() as u32
    ));
    path.with_file_name(name)
}

/// Makes a rename into the directory of `path` durable
/// ([`crate::atomic::sync_parent`]). Filter files are not replaced with
/// [`crate::atomic::replace_with`]: their temporary is created with a
/// unique name first, memory-mapped and filled over time, and renamed by
/// `persist`/`save` once its header is written.
pub(crate) fn sync_dir(path: &Path) -> Result<()> {
    crate::atomic::sync_parent(path);
    Ok(())
}

/// How lookups will read a mapped filter file of `len` bytes. A file the
/// page cache cannot keep (more than half the memory available) is read at
/// random: without the hint every fault reads ahead a window around its
/// page (128 KiB by default: 32 pages for the one a lookup needs), evicting
/// pages later lookups would have found (BENCHMARKS.md, "Filters larger
/// than memory"). Smaller files keep the kernel's read-ahead, which warms
/// them faster. Only a hint.
fn lookup_advice(len: u64) -> memmap2::Advice {
    if crate::mem_available().is_none_or(|avail| len > avail / 2) {
        memmap2::Advice::Random
    } else {
        memmap2::Advice::Normal
    }
}

impl Filter {
    /// Opens a filter file by memory-mapping it. Reads and validates only the
    /// header (a few microseconds whatever the size); see [`Filter::verify`]
    /// for the data checksum.
    pub fn open(path: impl AsRef<Path>, access: Access) -> Result<Filter> {
        let path = path.as_ref();
        let file = match access {
            Access::ReadOnly => File::open(path),
            Access::ReadWrite => OpenOptions::new().read(true).write(true).open(path),
        }
        .map_err(io_err(path, "open"))?;
        if access == Access::ReadWrite {
            // One writing process per file: blocked-layout writes rely on
            // in-process region locks (see `filter`), which another process
            // cannot see. The advisory lock lives as long as the file handle.
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(Error::Io {
                        path: path.into(),
                        op: "lock for writing",
                        source: std::io::Error::other("another process is writing to it"),
                    })
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(io_err(path, "lock for writing")(e))
                }
            }
        }
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
        {
            use std::io::Read;
            let mut f = &file;
            f.read_exact(&mut head).map_err(io_err(path, "read"))?;
        }
        let header = Header::decode(&head, len).map_err(format)?;
        let map_len = usize::try_from(len).map_err(|_| Error::OutOfMemory(len))?;
        // SAFETY (of the mapping as such): the file may be modified by other
        // processes while mapped; bloomgate itself only modifies mapped files
        // through atomics, and documents that filter files must not be
        // truncated while in use (a truncation would fault, as with any
        // mmap-based reader).
        let map = unsafe {
            match access {
                // Private, so that live adds replayed into a read-only open
                // stay in this process; NORESERVE, so that the kernel does
                // not reserve memory for a private copy of every page up
                // front (a filter larger than RAM would be refused with
                // ENOMEM): only the pages actually written are copied.
                Access::ReadOnly => MmapOptions::new()
                    .len(map_len)
                    .no_reserve_swap()
                    .map_copy(&file),
                Access::ReadWrite => MmapOptions::new().len(map_len).map_mut(&file),
            }
        }
        .map_err(io_err(path, "memory-map"))?;
        let _ = map.advise(lookup_advice(len));
        let words = (header.data_len / 8) as usize;
        let bits = Bits::mapped(map, HEADER_LEN, words)
            .ok_or_else(|| format(FormatProblem::BadField("mapping is not aligned".into())))?;
        let items = header.items;
        let params = header.params.clone();
        Ok(Filter::from_parts(
            params,
            bits,
            items,
            Some(FileState {
                path: path.into(),
                file: (access == Access::ReadWrite).then_some(file),
                access,
                temp: None,
                header,
            }),
        ))
    }

    /// Creates an empty filter backed by a temporary file beside `path`.
    /// Insert into it, then call [`Filter::persist`] to make it appear at
    /// `path` atomically. Dropped without persisting, the temporary is removed.
    pub fn create_file(path: impl AsRef<Path>, params: Params) -> Result<Filter> {
        params.validate()?;
        let path = path.as_ref();
        let (tmp, file) = create_temp(path)?;
        let data_len = params.bits / 8;
        let header = Header {
            version: FORMAT_VERSION,
            params: params.clone(),
            hash_id: HASH_XXH3_128,
            flags: FLAG_DIRTY,
            items: 0,
            data_len,
            data_checksum: 0,
            ones: None,
        };
        let state = FileState {
            path: path.into(),
            file: Some(file),
            access: Access::ReadWrite,
            temp: Some(tmp.clone()),
            header,
        };
        let total = HEADER_LEN as u64 + data_len;
        let file = state
            .file
            .as_ref()
            .expect("a created file keeps its handle");
        file.set_len(total).map_err(io_err(&tmp, "size"))?;
        let map_len = usize::try_from(total).map_err(|_| Error::OutOfMemory(total))?;
        // SAFETY: the file was just created by us (create_new) under a unique
        // name; nothing else maps or truncates it.
        let map = unsafe { MmapOptions::new().len(map_len).map_mut(file) }
            .map_err(io_err(&tmp, "memory-map"))?;
        let bits = Bits::mapped(map, HEADER_LEN, (data_len / 8) as usize)
            .ok_or(Error::OutOfMemory(total))?;
        Ok(Filter::from_parts(params, bits, 0, Some(state)))
    }

    /// For a filter from [`Filter::create_file`]: writes the header and
    /// checksum, syncs, and renames the temporary over the target path.
    pub fn persist(&mut self) -> Result<()> {
        let tmp = match self.file.as_ref().and_then(|s| s.temp.clone()) {
            Some(t) => t,
            None => {
                return Err(Error::NotWritable(
                    "persist: filter was not created with create_file",
                ))
            }
        };
        self.write_header(0)?;
        let state = self.file.as_mut().expect("checked above");
        let file = state
            .file
            .as_ref()
            .expect("a created file keeps its handle");
        file.sync_all().map_err(io_err(&tmp, "fsync"))?;
        std::fs::rename(&tmp, &state.path).map_err(io_err(&state.path, "rename into place"))?;
        state.temp = None;
        sync_dir(&state.path)
    }

    /// Recomputes the checksum and writes the header with `flags` into the
    /// mapping, then flushes the whole mapping to disk.
    fn write_header(&mut self, flags: u32) -> Result<()> {
        let (checksum, ones) = pages_checksum_and_ones(self.bits.bytes(), 0);
        self.write_header_with(flags, checksum, Some(ones))
    }

    /// Writes the header with `flags`, the given data checksum and set-bit
    /// count (`None`: not recorded), then flushes the whole mapping to disk.
    fn write_header_with(&mut self, flags: u32, checksum: u64, ones: Option<u64>) -> Result<()> {
        let items = self.items();
        let state = self
            .file
            .as_mut()
            .ok_or(Error::NotWritable("filter is not file-backed"))?;
        state.header.items = items;
        state.header.data_checksum = checksum;
        state.header.flags = flags;
        state.header.ones = ones;
        let bytes = state.header.encode();
        if !self.bits.write_prefix(&bytes) {
            return Err(Error::NotWritable("filter is not file-backed"));
        }
        let (map, _) = self.bits.map().expect("file-backed");
        map.flush().map_err(io_err(&state.path, "msync"))?;
        Ok(())
    }

    /// Starts an in-place update of a file opened with [`Access::ReadWrite`]:
    /// marks the file dirty and syncs that mark before any bit changes.
    pub fn begin_update(&mut self) -> Result<()> {
        let state = self
            .file
            .as_mut()
            .ok_or(Error::NotWritable("filter is not file-backed"))?;
        if state.access != Access::ReadWrite {
            return Err(Error::NotWritable("filter file was opened read-only"));
        }
        // A file that was already dirty (an update was interrupted) has a
        // stale checksum: this update will recompute it whole.
        let stale = state.header.is_dirty();
        state.header.flags |= FLAG_DIRTY;
        let bytes = state.header.encode();
        self.bits.write_prefix(&bytes);
        let (map, _) = self.bits.map().expect("file-backed");
        map.flush_range(0, HEADER_LEN)
            .map_err(io_err(&state.path, "msync"))?;
        // An update touches scattered pages: without this, every page fault
        // on a cold file reads ahead a large window around it (measured: 1000
        // items added to a 2.7 GB filter read ~2 GB). Only a hint.
        let _ = map.advise(memmap2::Advice::Random);
        self.update = Some(Box::new(UpdateLog::new(self.params.bits / 8, stale)));
        Ok(())
    }

    /// Inserts items into a file opened for an in-place update (after
    /// [`Filter::begin_update`]), logging the checksum pages they change so
    /// that [`Filter::commit_update`] rehashes only those. Returns how many
    /// items were new. Safe to call from several threads (calls are
    /// serialized); other writes during the update are allowed too, but make
    /// the commit recompute the whole checksum.
    pub fn update_batch<T: AsRef<[u8]>>(&self, items: &[T]) -> Result<u64> {
        let log = self.update.as_ref().ok_or(Error::NotWritable(
            "update_batch needs an in-place update in progress (begin_update)",
        ))?;
        let mut log = log
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let prepared: Vec<_> = items.iter().map(|i| self.prepare(i.as_ref())).collect();
        if !log.whole {
            let mut pages = Vec::new();
            for p in &prepared {
                self.pages_of(p, |page| {
                    if log.dirty[(page / 64) as usize] & (1 << (page % 64)) == 0 {
                        pages.push(page);
                    }
                });
            }
            pages.sort_unstable();
            pages.dedup();
            // Rehashing page by page pays while few pages change; past a
            // quarter of them, one parallel pass over everything is cheaper.
            if log.marked + pages.len() as u64 > log.pages / 4 {
                log.whole = true;
            } else {
                let data = self.bits.bytes();
                let (old, old_ones) = pages
                    .par_iter()
                    .map(|&page| (page_hash(data, page), page_ones(page_bytes(data, page))))
                    .reduce(|| (0, 0), |a, b| (a.0.wrapping_add(b.0), a.1 + b.1));
                log.old_sum = log.old_sum.wrapping_add(old);
                log.old_ones += old_ones;
                log.marked += pages.len() as u64;
                for page in pages {
                    log.dirty[(page / 64) as usize] |= 1 << (page % 64);
                }
            }
        }
        Ok(prepared
            .iter()
            .map(|p| self.insert_prepared_unlogged(p) as u64)
            .sum())
    }

    /// Finishes an in-place update: flushes the bits, then writes the new
    /// item count and checksum and clears the dirty mark.
    pub fn commit_update(&mut self) -> Result<()> {
        {
            let state = self
                .file
                .as_ref()
                .ok_or(Error::NotWritable("filter is not file-backed"))?;
            if state.access != Access::ReadWrite || state.temp.is_some() {
                return Err(Error::NotWritable("filter file was opened read-only"));
            }
            let (map, _) = self.bits.map().expect("file-backed");
            map.flush().map_err(io_err(&state.path, "msync"))?;
        }
        let (flags, old_checksum, old_ones) = self
            .file
            .as_ref()
            .map(|s| {
                (
                    s.header.flags & !FLAG_DIRTY,
                    s.header.data_checksum,
                    s.header.ones,
                )
            })
            .unwrap_or((0, 0, None));
        let log = self.update.take().and_then(|log| {
            let untracked = log.untracked.into_inner();
            let inner = log
                .inner
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (!untracked && !inner.whole).then_some(inner)
        });
        match log {
            Some(log) => {
                let data = self.bits.bytes();
                let dirty = &log.dirty;
                let (new, new_ones) = (0..log.pages)
                    .into_par_iter()
                    .filter(|&page| dirty[(page / 64) as usize] & (1 << (page % 64)) != 0)
                    .map(|page| (page_hash(data, page), page_ones(page_bytes(data, page))))
                    .reduce(|| (0, 0), |a, b| (a.0.wrapping_add(b.0), a.1 + b.1));
                let checksum = old_checksum.wrapping_sub(log.old_sum).wrapping_add(new);
                // The count moves by the changed pages' difference; a file
                // that did not record it (written before the field existed)
                // still does not: only a full pass could count it.
                let ones = old_ones.map(|o| o - log.old_ones + new_ones);
                self.write_header_with(flags, checksum, ones)
            }
            None => {
                if let Some((map, _)) = self.bits.map() {
                    // The whole file is read in order now.
                    let _ = map.advise(memmap2::Advice::Sequential);
                }
                self.write_header(flags)
            }
        }
    }

    /// Writes the filter to `path` atomically (temp file, fsync, rename,
    /// directory fsync). Works for in-memory and mapped filters alike.
    /// Concurrent inserts during the write may or may not be included.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let data = self.bits.bytes();
        let items = self.items();
        let (tmp, mut f) = create_temp(path)?;
        let result = (|| {
            f.write_all(&[0u8; HEADER_LEN])
                .map_err(io_err(&tmp, "write"))?;
            // Other threads may keep inserting while this runs. Each chunk is
            // copied once, and the checksum and set-bit count are taken from
            // the very copy that is written, so the header always describes
            // the file's bytes (bits set meanwhile may or may not be in it).
            let mut copy = vec![0u8; SAVE_CHUNK.min(data.len())];
            let (mut checksum, mut ones) = (0u64, 0u64);
            for (i, chunk) in data.chunks(SAVE_CHUNK).enumerate() {
                let copy = &mut copy[..chunk.len()];
                copy.copy_from_slice(chunk);
                let (c, o) = pages_checksum_and_ones(copy, (i * (SAVE_CHUNK / PAGE)) as u64);
                checksum = checksum.wrapping_add(c);
                ones += o;
                f.write_all(copy).map_err(io_err(&tmp, "write"))?;
            }
            let header = Header {
                version: FORMAT_VERSION,
                params: self.params.clone(),
                hash_id: HASH_XXH3_128,
                flags: 0,
                items,
                data_len: data.len() as u64,
                data_checksum: checksum,
                ones: Some(ones),
            };
            f.seek(SeekFrom::Start(0)).map_err(io_err(&tmp, "seek"))?;
            f.write_all(&header.encode())
                .map_err(io_err(&tmp, "write"))?;
            f.sync_all().map_err(io_err(&tmp, "fsync"))?;
            std::fs::rename(&tmp, path).map_err(io_err(path, "rename into place"))?;
            sync_dir(path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// Reads the whole bit array and compares it with the header's checksum.
    /// Errors with [`FormatProblem::Dirty`] if an in-place update was
    /// interrupted, and [`FormatProblem::DataChecksum`] on corruption.
    pub fn verify(&self) -> Result<()> {
        let state = match &self.file {
            Some(s) => s,
            None => return Ok(()),
        };
        let format = |problem| Error::Format {
            path: state.path.clone(),
            problem,
        };
        if state.header.is_dirty() && state.temp.is_none() {
            return Err(format(FormatProblem::Dirty));
        }
        // Read in order now (read-ahead on), at random again afterwards.
        let advise = |advice| {
            if let Some((map, _)) = self.bits.map() {
                let _ = map.advise(advice);
            }
        };
        advise(memmap2::Advice::Sequential);
        let (found, ones) = pages_checksum_and_ones(self.bits.bytes(), 0);
        advise(lookup_advice(state.header.data_len));
        if found != state.header.data_checksum {
            return Err(format(FormatProblem::DataChecksum {
                expected: state.header.data_checksum,
                found,
            }));
        }
        if let Some(stored) = state.header.ones {
            if stored != ones {
                return Err(format(FormatProblem::OnesMismatch {
                    stored,
                    found: ones,
                }));
            }
        }
        Ok(())
    }

    /// The number of set bits as the file header records it: `None` if the
    /// file does not record it (written before the field existed), was left
    /// dirty by an interrupted update, or if these bits changed since the
    /// file was opened (a copy-on-write mapping that took inserts). Costs
    /// nothing; see [`Filter::ones`].
    pub fn stored_ones(&self) -> Option<u64> {
        let state = self.file.as_ref()?;
        if state.header.is_dirty()
            || state.temp.is_some()
            || self.touched.load(std::sync::atomic::Ordering::Relaxed)
        {
            return None;
        }
        state.header.ones
    }

    /// The number of set bits: from the header when it records them
    /// ([`Filter::stored_ones`]), otherwise counted (a pass over the data).
    pub fn ones(&self) -> u64 {
        self.stored_ones().unwrap_or_else(|| self.count_ones())
    }

    /// The header as read from (or last written to) the file, if file-backed.
    pub fn header(&self) -> Option<&Header> {
        self.file.as_ref().map(|s| &s.header)
    }

    /// The file this filter is mapped from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|s| s.path.as_path())
    }
}

// ---------------------------------------------------------------------------
// Deletable filters (counting, cuckoo): same header frame, own fields
// ---------------------------------------------------------------------------
//
// A counting or cuckoo filter file has the same frame as a Bloom filter file
// (magic, version 1, 4096-byte header with its checksum, page-aligned data
// with the per-page data checksum) and its own layout code, so that every
// reader refuses what it cannot read: a Bloom reader names the kind
// (`FormatProblem::WrongKind`), a bloomgate from before these codes says
// "unknown layout code". Their geometry uses the header's reserved bytes
// (`docs/file-format.md`).
//
// Deletable filters are never updated in place: a delete clears what an
// insert set, and a cuckoo insert moves fingerprints between buckets, so a
// crash in the middle of an in-place write could lose an item that was
// stored before. They are changed in memory (a file is mapped copy-on-write)
// and written whole, atomically, by `save` (temp file, fsync, rename, fsync
// of the directory): a crash leaves the old file or the new one.

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

/// Reads the layout code of the filter file at `path` (byte 16), checking
/// only the magic: which opener to use. Errors as [`Filter::open`] would
/// for a file that is not a bloomgate filter.
pub fn peek_layout_code(path: &Path) -> Result<u8> {
    use std::io::Read;
    let mut f = File::open(path).map_err(io_err(path, "open"))?;
    let meta = f.metadata().map_err(io_err(path, "stat"))?;
    if meta.is_dir() {
        return Err(Error::Io {
            path: path.into(),
            op: "open",
            source: std::io::Error::other("is a directory"),
        });
    }
    let mut head = [0u8; 17];
    let format = |problem| Error::Format {
        path: path.into(),
        problem,
    };
    if meta.len() < HEADER_LEN as u64 {
        return Err(format(FormatProblem::TooShort(meta.len())));
    }
    f.read_exact(&mut head).map_err(io_err(path, "read"))?;
    if head[..8] != MAGIC {
        return Err(format(FormatProblem::BadMagic));
    }
    Ok(head[OFF_LAYOUT])
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
    let header = DeletableHeader::decode(&head, len).map_err(|p| match p {
        FormatProblem::WrongKind { found, .. } => format(FormatProblem::WrongKind {
            found,
            expected: kind.name(),
        }),
        p => format(p),
    })?;
    if header.geometry.kind() != kind {
        return Err(format(FormatProblem::WrongKind {
            found: header.geometry.kind().name(),
            expected: kind.name(),
        }));
    }
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

/// Checks `data` against the header's data checksum.
pub(crate) fn verify_data(path: &Path, header: &DeletableHeader, data: &[u8]) -> Result<()> {
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

/// Decodes a whole deletable filter file image (header and data, as
/// `to_bytes` makes it) into heap storage, checking both checksums.
pub(crate) fn deletable_from_bytes(bytes: &[u8], kind: DeletableKind) -> Result<OpenedDeletable> {
    let here = Path::new("<bytes>");
    let format = |problem| Error::Format {
        path: here.into(),
        problem,
    };
    let header = DeletableHeader::decode(bytes, bytes.len() as u64).map_err(|p| match p {
        FormatProblem::WrongKind { found, .. } => format(FormatProblem::WrongKind {
            found,
            expected: kind.name(),
        }),
        p => format(p),
    })?;
    if header.geometry.kind() != kind {
        return Err(format(FormatProblem::WrongKind {
            found: header.geometry.kind().name(),
            expected: kind.name(),
        }));
    }
    let body = &bytes[HEADER_LEN..];
    verify_data(here, &header, body)?;
    let mut data =
        Bits::heap((header.data_len / 8) as usize).ok_or(Error::OutOfMemory(header.data_len))?;
    data.bytes_mut().copy_from_slice(body);
    Ok(OpenedDeletable { header, data })
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
    let header = DeletableHeader::decode(&head, len).map_err(|p| match p {
        FormatProblem::WrongKind { found, .. } => format(FormatProblem::WrongKind {
            found,
            expected: kind.name(),
        }),
        p => format(p),
    })?;
    if header.geometry.kind() != kind {
        return Err(format(FormatProblem::WrongKind {
            found: header.geometry.kind().name(),
            expected: kind.name(),
        }));
    }
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

/// Checks the frame every header shares, whatever the layout: length,
/// magic, version, header checksum and header length. Returns the version.
fn check_frame(bytes: &[u8], file_len: u64) -> Result<u32, FormatProblem> {
    if bytes.len() < HEADER_LEN || file_len < HEADER_LEN as u64 {
        return Err(FormatProblem::TooShort(file_len.min(bytes.len() as u64)));
    }
    if bytes[..8] != MAGIC {
        return Err(FormatProblem::BadMagic);
    }
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
    let version = u32_at(OFF_VERSION);
    if version > FORMAT_VERSION {
        return Err(FormatProblem::NewerVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    if u64_at(OFF_HEADER_SUM) != header_checksum(&bytes[..HEADER_LEN]) {
        return Err(FormatProblem::HeaderChecksum);
    }
    if version == 0 {
        return Err(FormatProblem::BadField("format version 0".into()));
    }
    if u32_at(OFF_HEADER_LEN) as usize != HEADER_LEN {
        return Err(FormatProblem::BadField(format!(
            "header length {}",
            u32_at(OFF_HEADER_LEN)
        )));
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::math::plan;

    fn params() -> Params {
        Params::from_plan(&plan(Layout::Blocked, 1000, 0.01).unwrap(), 42)
    }

    const GOLDEN: u64 = 0xd82c_7656_fc56_a56e;
    const GOLDEN_WITH_ONES: u64 = 0x72ea_511e_ae68_e643;

    #[test]
    fn one_writer_per_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.bgf");
        Filter::new(params()).unwrap().save(&path).unwrap();
        let first = Filter::open(&path, Access::ReadWrite).unwrap();
        let err = Filter::open(&path, Access::ReadWrite)
            .unwrap_err()
            .to_string();
        assert!(err.contains("another process is writing"), "{err}");
        // Readers are not blocked.
        Filter::open(&path, Access::ReadOnly).unwrap();
        drop(first);
        Filter::open(&path, Access::ReadWrite).unwrap();
    }

    #[test]
    fn golden_header_bytes() {
        // A format change must be deliberate: these hashes pin every byte of
        // the header for fixed parameters. Without a set-bit count the bytes
        // are exactly those of files written before the count existed.
        for (ones, golden) in [(None, GOLDEN), (Some(77), GOLDEN_WITH_ONES)] {
            let h = Header {
                version: 1,
                params: params(),
                hash_id: HASH_XXH3_128,
                flags: 0,
                items: 7,
                data_len: params().bits / 8,
                data_checksum: 0x1234,
                ones,
            };
            let bytes = h.encode();
            assert_eq!(&bytes[..8], b"BLOOMGT\x01");
            assert_eq!(
                Header::decode(&bytes, HEADER_LEN as u64 + h.data_len).unwrap(),
                h
            );
            assert_eq!(
                xxh3_64_with_seed(&bytes, 0),
                golden,
                "header encoding changed: {:#x}",
                xxh3_64_with_seed(&bytes, 0)
            );
        }
    }

    #[test]
    fn golden_filter_bits() {
        // Pins the hash, the probe derivation of both layouts and the bit
        // order: the same items and seed must set the same bits forever.
        for (layout, golden) in [
            (Layout::Blocked, 0x2bdf_e930_20b6_d8d1_u64),
            (Layout::Classic, 0xff01_e29e_b789_1f74_u64),
        ] {
            let p = Params::from_plan(&plan(layout, 100, 0.01).unwrap(), 42);
            let f = Filter::new(p).unwrap();
            for c in b'a'..=b'z' {
                f.insert(&[c]);
            }
            let sum = data_checksum(f.as_bytes());
            assert_eq!(sum, golden, "{layout} bits changed: {sum:#x}");
        }
    }
}

#[cfg(test)]
mod larger_than_memory {
    use super::*;
    use crate::{plan, Layout};

    /// A filter file twice the size of this machine's memory (sparse: it
    /// costs no disk) opens read-only and answers: the private mapping a
    /// read-only open makes must not ask the kernel to reserve memory for a
    /// copy of every page (it refused a 27.5 GB filter on a 24 GiB machine
    /// with ENOMEM).
    #[test]
    fn a_file_larger_than_memory_opens_and_answers() {
        let total = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| {
                let line = t.lines().find(|l| l.starts_with("MemTotal:"))?.to_string();
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map_or(64 << 30, |kib| kib * 1024);
        let items = 2 * total * 8 / 20;
        let params = Params::from_plan(&plan(Layout::Blocked, items, 1e-4).unwrap(), 3);
        assert!(params.bits / 8 > total);
        let header = Header {
            version: FORMAT_VERSION,
            params: params.clone(),
            hash_id: HASH_XXH3_128,
            flags: 0,
            items: 0,
            data_len: params.bits / 8,
            data_checksum: 0,
            ones: None,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.bgf");
        let file = File::create(&path).unwrap();
        use std::io::Write;
        (&file).write_all(&header.encode()).unwrap();
        file.set_len(HEADER_LEN as u64 + params.bits / 8).unwrap();
        for access in [Access::ReadOnly, Access::ReadWrite] {
            let f = Filter::open(&path, access).unwrap_or_else(|e| panic!("{access:?}: {e}"));
            assert_eq!(f.params().bits, params.bits);
            assert!(!f.contains(b"http://example.com/"));
        }
    }
}
