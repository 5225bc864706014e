//! Per-filter journals of live adds, `DIR/NAME.live`: the format and its
//! rules are [`bloomgate_blacklist::journal`] (re-exported here); this module
//! adds the server's reporting of damaged journals.

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

pub use bloomgate_blacklist::journal::{
    append, compact, marker, path, remove, reset, Compacted, Contents, Lineage, Loaded, Repair,
};

use crate::metrics::Metrics;
use crate::store::StoreError;

/// Reads a journal as its owner: a torn tail is cut off the file and
/// reported as a `tracing` warning and in `bloomgate_journal_damaged_total` /
/// `bloomgate_journal_lost_bytes_total`. A journal damaged anywhere else is
/// an error naming file and offset ([`bloomgate_blacklist::wal::DamagedFile`]),
/// and the file is left exactly as it is.
pub fn load(path: &Path, metrics: &Metrics) -> Result<Contents, StoreError> {
    let Loaded {
        contents, report, ..
    } = bloomgate_blacklist::journal::load(path, Repair::Truncate)
        .map_err(|e| StoreError::io(path.display(), e))?;
    if let Some(fault) = &report.fault {
        metrics.journal_damaged.fetch_add(1, Relaxed);
        report
            .check(path)
            .map_err(|e| StoreError::Files(e.into()))?;
        tracing::warn!(
            "bloomgate serve: live-add journal {}: {fault}: kept {} record(s), cut off {} byte(s) of torn tail",
            path.display(),
            report.records,
            report.lost_bytes
        );
        metrics
            .journal_lost_bytes
            .fetch_add(report.lost_bytes, Relaxed);
    }
    Ok(contents)
}
