//! Records of later slices, written by the first pass of a sliced build.
//!
//! A sliced build of the blocked layout needs, for each slice, the items
//! whose block lies in it. Reading, canonicalizing and hashing every input
//! line again for each slice is the cost of a pass; the first pass can
//! instead write an 8-byte record (block, in-block hash) of each item of a
//! later slice to a file ([`Slice::insert_and_spill`]), and that slice is
//! then built by reading its records back ([`Slice::insert_records`]).
//!
//! Which wins was measured on the ten-billion run (BENCHMARKS.md, "Filters
//! larger than memory"): a pass over 10¹⁰ generated URLs costs ~13 minutes
//! on two cores, while the records of one third of them are 27 GB, written
//! during the first pass and read back in ~75 s at this disk's 360 MB/s. So
//! as many of the last slices are spilled as the disk has room for — the
//! rest get passes of their own, as do all slices of the classic layout,
//! whose items have up to `k` bits in every slice.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

use anyhow::{Context, Result};

use bloomgate_engine::slice::{can_spill, Slice, RECORD_BYTES};
use bloomgate_engine::Params;

use crate::input::{self, Progress};
use crate::report::{self, bytes};

/// Bytes read back at a time, then inserted by all cores.
const READ: usize = 64 << 20;

/// The spill files of one sliced build, one per spilled slice.
pub(crate) struct Spill {
    /// Indices (in the build's slices) of the spilled slices, and their words.
    pub(crate) slices: Vec<usize>,
    pub(crate) ranges: Vec<Range<u64>>,
    /// Bytes the records of all spilled slices are expected to take.
    pub(crate) expected: u64,
    /// The open files; `None` once a file is given up (it grew past its
    /// share of the disk, or a write failed): its slice gets a pass.
    files: Vec<Option<SpillFile>>,
}

struct SpillFile {
    tmp: tempfile::NamedTempFile,
    out: BufWriter<File>,
    written: u64,
    limit: u64,
}

impl Spill {
    /// Chooses which of `ranges` (all but the first) to spill into `dir`:
    /// the last ones, as many as fit in `room` bytes at their expected size
    /// (their share of `params.planned_items`, plus 5 % and a page: the
    /// count of a share varies by far less), and opens their files. `None`
    /// when none is spilled.
    pub(crate) fn plan(
        params: &Params,
        ranges: &[Range<u64>],
        dir: &Path,
        room: u64,
    ) -> Result<Option<Spill>> {
        let words = params.words() as f64;
        let expected = |r: &Range<u64>| {
            let share = (r.end - r.start) as f64 / words;
            (params.planned_items as f64 * share * RECORD_BYTES as f64 * 1.05) as u64 + 4096
        };
        let mut used = 0u64;
        let mut slices = Vec::new();
        for (i, r) in ranges.iter().enumerate().skip(1).rev() {
            if !can_spill(params, r) || used + expected(r) > room {
                break;
            }
            used += expected(r);
            slices.push(i);
        }
        if slices.is_empty() {
            return Ok(None);
        }
        slices.reverse();
        let mut files = Vec::new();
        for &i in &slices {
            let tmp = tempfile::Builder::new()
                .prefix(".bloomgate-spill-")
                .tempfile_in(dir)
                .with_context(|| {
                    format!(
                        "{}: cannot create a file for spilled records (--tmp-dir chooses another directory)",
                        dir.display()
                    )
                })?;
            let out = BufWriter::with_capacity(8 << 20, tmp.reopen()?);
            files.push(Some(SpillFile {
                tmp,
                out,
                written: 0,
                limit: expected(&ranges[i]) * 3 / 2,
            }));
        }
        Ok(Some(Spill {
            ranges: slices.iter().map(|&i| ranges[i].clone()).collect(),
            expected: used,
            slices,
            files,
        }))
    }

    /// Whether slice `slice` is (still) spilled: built from its records.
    pub(crate) fn is_spilled(&self, slice: usize) -> bool {
        self.slices
            .iter()
            .position(|&s| s == slice)
            .is_some_and(|j| self.files[j].is_some())
    }

    /// Appends one chunk's records (`records[j]` for `self.slices[j]`). A
    /// file that would grow past its limit — more entries than planned —
    /// or cannot be written is given up, with a note: its slice gets a
    /// pass of its own.
    pub(crate) fn write(&mut self, records: &[Vec<u8>]) {
        for (j, rec) in records.iter().enumerate() {
            let Some(f) = &mut self.files[j] else {
                continue;
            };
            let result = if f.written + rec.len() as u64 > f.limit {
                Err(std::io::Error::other(format!(
                    "more than the {} planned for it (the inputs hold more entries than --items)",
                    bytes(f.limit)
                )))
            } else {
                f.out.write_all(rec)
            };
            match result {
                Ok(()) => f.written += rec.len() as u64,
                Err(e) => {
                    eprintln!(
                        "bloomgate: not spilling slice {} any more ({e}); it gets a pass of its own",
                        self.slices[j] + 1
                    );
                    self.files[j] = None;
                }
            }
        }
    }

    /// Sets the bits of spilled slice `slice` from its records, on all
    /// cores. Reads the file back from the start, checking that it holds
    /// every record written.
    pub(crate) fn insert_into(&mut self, slice: usize, s: &Slice, label: String) -> Result<()> {
        let j = self
            .slices
            .iter()
            .position(|&i| i == slice)
            .expect("a spilled slice");
        let mut f = self.files[j].take().expect("a spilled slice");
        f.out
            .flush()
            .with_context(|| format!("{}: cannot write spilled records", f.tmp.path().display()))?;
        let mut file = f.tmp.reopen()?;
        let progress = Progress::default();
        let bar = report::progress_bar(Some(f.written), &progress, Some(label));
        let mut buf = vec![0u8; READ];
        let mut read = 0u64;
        let result = (|| -> Result<()> {
            loop {
                let n = input::read_full(&mut file, &mut buf).with_context(|| {
                    format!("{}: cannot read spilled records", f.tmp.path().display())
                })?;
                if n == 0 {
                    break;
                }
                // In file order (the inputs' order), one call at a time: an
                // item's count as new depends on the items of its block
                // before it, and a build's item count must not depend on
                // the thread count.
                for c in buf[..n].chunks(1 << 20) {
                    s.insert_records(c)?;
                }
                read += n as u64;
                progress.fetch_add(n as u64, Relaxed);
            }
            anyhow::ensure!(
                read == f.written,
                "{}: spilled records are {read} bytes, {} were written",
                f.tmp.path().display(),
                f.written
            );
            Ok(())
        })();
        report::finish(bar);
        result
    }
}

/// Bytes free for an unprivileged writer on the filesystem of `dir`.
pub(crate) fn free_space(dir: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Whether two paths are on the same filesystem.
pub(crate) fn same_filesystem(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev(),
        _ => true,
    }
}
