//! `bloomgate repair DIR`: salvages damaged write-ahead log segments and
//! journals ([`bloomgate_blacklist::repair`]) and says, per file, what was
//! kept and what was lost.

use anyhow::{Context, Result};

use crate::args::RepairArgs;

/// Runs `bloomgate repair`. Exit code 0 when every file reads whole now (or,
/// with `--dry-run`, was reported); errors (a running server, I/O) exit 1.
pub fn run(a: RepairArgs) -> Result<i32> {
    use std::io::Write;
    let report = bloomgate_blacklist::repair::repair(&a.dir, a.dry_run).with_context(|| {
        format!(
            "cannot repair {} (a running server must be stopped first)",
            a.dir.display()
        )
    })?;
    let mut out = std::io::stdout().lock();
    let mut changed = 0;
    for f in &report.files {
        if !f.lost_anything() {
            continue;
        }
        changed += 1;
        let lost: u64 = f.lost.iter().map(|l| l.len).sum();
        writeln!(
            out,
            "{}: kept {} record(s) ({} bytes), lost {lost} of {} bytes{}",
            f.path.display(),
            f.records,
            f.kept_bytes,
            f.len,
            if f.damaged() {
                ""
            } else {
                " (a torn tail only)"
            }
        )?;
        for l in &f.lost {
            writeln!(
                out,
                "  lost {} byte(s) at offset {}: {}{}",
                l.len,
                l.offset,
                l.problem,
                if l.tail {
                    " (torn tail: an unfinished append, never acknowledged)"
                } else {
                    " (the records in it are lost)"
                }
            )?;
        }
        if f.orphans > 0 {
            writeln!(
                out,
                "  {} kept add(s) were made under a filter file whose lineage marker was lost: they are replayed only if the filter's current file is that one",
                f.orphans
            )?;
        }
        match &f.kept_aside {
            Some(p) => writeln!(out, "  repaired; the original is kept as {}", p.display())?,
            None => writeln!(out, "  (dry run: not changed)")?,
        }
    }
    for s in &report.strays {
        writeln!(
            out,
            "{}: looks like a log segment but is not named like one (wal-NNNNNNNN.log): left alone; the server will not start until it is renamed to a free segment number or moved away",
            s.display()
        )?;
    }
    let records: u64 = report.files.iter().map(|f| f.records).sum();
    writeln!(
        out,
        "{} file(s) read, {} record(s) intact, {changed} file(s) {}",
        report.files.len(),
        records,
        if a.dry_run {
            "would be repaired"
        } else {
            "repaired"
        }
    )?;
    Ok(0)
}
