//! A filter's file: [`Filter::open`] maps one, [`Filter::save`] writes one
//! atomically, [`Filter::verify`] checks its data, and
//! [`Filter::begin_update`] / [`Filter::commit_update`] change one in place.
//!
//! The bytes of the file are the format's ([`crate::format`]: the header
//! codec and the data checksum); this module is what a filter does with
//! them. Design points:
//!
//! * Opening reads and checks the header only and memory-maps the data, so
//!   opening a 25 GB filter reads one page; a read-only open maps it
//!   copy-on-write and closes its descriptor.
//! * [`Filter::save`] writes a temporary beside the target, fsyncs it,
//!   renames it into place and fsyncs the directory ([`crate::atomic`]):
//!   a crash leaves the old file or the new one.
//! * An in-place update sets the header's dirty flag (synced) before
//!   touching the bits and clears it with the new checksum afterwards;
//!   [`UpdateLog`] records which checksum pages changed, so the commit
//!   rehashes only those (the checksum is a sum over pages).

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use memmap2::MmapOptions;
use rayon::prelude::*;

use super::Filter;
use crate::atomic::{create_temp, sync_dir};
use crate::error::{io_err, Error, FormatProblem, Result};
use crate::format::{
    page_bytes, page_hash, page_ones, pages_checksum_and_ones, Access, Header, FLAG_DIRTY,
    FORMAT_VERSION, HEADER_LEN, PAGE,
};
use crate::params::Params;
use crate::storage::{lookup_advice, Bits};

/// What [`Filter::save`] copies, hashes and writes at a time: a whole number
/// of pages, small enough not to double a large filter's memory.
const SAVE_CHUNK: usize = 32 << 20;

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
        reserve(file, total).map_err(io_err(&tmp, "reserve disk space for"))?;
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
        self.update_with(items, |_| {})
    }

    /// [`Filter::update_batch`], saying for each item whether it was new
    /// (pushed to `out`, in order): the same answers and bits as inserting
    /// the items one at a time.
    pub fn update_batch_each<T: AsRef<[u8]>>(
        &self,
        items: &[T],
        out: &mut Vec<bool>,
    ) -> Result<u64> {
        out.reserve(items.len());
        self.update_with(items, |new| out.push(new))
    }

    fn update_with<T: AsRef<[u8]>>(&self, items: &[T], mut each: impl FnMut(bool)) -> Result<u64> {
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
        // The blocks of the items a few places ahead are fetched while one
        // is inserted, so a filter beyond the caches overlaps its misses.
        const AHEAD: usize = 16;
        for p in prepared.iter().take(AHEAD) {
            self.prefetch(p);
        }
        Ok(prepared
            .iter()
            .enumerate()
            .map(|(i, p)| {
                if let Some(ahead) = prepared.get(i + AHEAD) {
                    self.prefetch(ahead);
                }
                let new = self.insert_prepared_unlogged(p);
                each(new);
                new as u64
            })
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

#[cfg(test)]
mod tests;

/// Reserves the disk blocks of a file of `len` bytes (`fallocate`), so
/// that writing it through a memory map cannot fail later: a write through
/// a map to a sparse file on a full disk is a SIGBUS that kills the
/// process (a build found it: exit 135, the temporary left behind), where
/// an error here is reported and the temporary removed. A filesystem that
/// cannot reserve blocks (`EOPNOTSUPP`) keeps the sparse file.
fn reserve(file: &std::fs::File, len: u64) -> std::io::Result<()> {
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, len) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
