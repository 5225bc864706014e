//! Per-filter journals of live adds, `DIR/NAME.live`: the format and its
//! rules are [`bloomgate_blacklist::journal`] (re-exported here); this module
//! adds the server's reporting of damaged journals.

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

pub use bloomgate_blacklist::journal::{
    append, compact, marker, path, remove, reset, Compacted, Contents, Lineage, Loaded, Repair,
};

use crate::metrics::Metrics;

/// Reads a journal as its owner: a damaged tail is cut off the file and
/// reported as a `tracing` warning and in `bloomgate_journal_damaged_total` /
/// `bloomgate_journal_lost_bytes_total`.
pub fn load(path: &Path, metrics: &Metrics) -> std::io::Result<Contents> {
    let Loaded {
        contents, report, ..
    } = bloomgate_blacklist::journal::load(path, Repair::Truncate)?;
    if let Some(problem) = &report.problem {
        tracing::warn!(
            "bloomgate serve: live-add journal {}: {problem}: kept {} record(s), discarded {} byte(s) of damaged tail",
            path.display(),
            report.records,
            report.lost_bytes
        );
        metrics.journal_damaged.fetch_add(1, Relaxed);
        metrics
            .journal_lost_bytes
            .fetch_add(report.lost_bytes, Relaxed);
    }
    Ok(contents)
}
