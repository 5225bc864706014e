//! `bloomgate plan`: sizes for both Bloom layouts and the static ribbon
//! layout, and the exact classic optimum; with `--layout counting|cuckoo`, the cost of a filter that can
//! delete, beside them.
//!
//! The deletable rows are the plan of the [`DeletableSpec`] that `build
//! --layout counting|cuckoo` makes its table from
//! ([`DeletableSpec::for_build`], [`DeletableSpec::plan`]), so the row is
//! the table that command writes (`file_bytes` in `--json`: the file, the
//! engine's header included). The formulas and trade-offs are the engine's
//! planners' (`bloomgate_engine::math`): a counting filter is the
//! blocked Bloom layout with 4-bit counters in 128-counter blocks, so it
//! costs several times a blocked filter; a cuckoo filter's table is a power
//! of two of buckets, so its bits per item vary between `f/0.95` and
//! `2f/0.95` with the item count, and the plan says how full it is and how
//! many items the same table would hold at its planned 95 % load.

use std::io::Write;

use anyhow::Result;
use serde_json::json;

use bloomgate_blacklist::cf_file::CfLayout;
use bloomgate_blacklist::{DeletablePlan, DeletableSpec};
use bloomgate_engine::format::HEADER_LEN;
use bloomgate_engine::math::{self, Layout};
use bloomgate_engine::HashId;
use bloomgate_url::{max_lookups, KeyKind, MatchMode};

use crate::args::{BuildLayoutArg, PlanArgs};
use crate::report::{bytes, thousands};

pub fn run(a: PlanArgs) -> Result<i32> {
    let stdout = std::io::stdout();
    let mut o = stdout.lock();
    let n = a.size.items.ok_or_else(|| {
        crate::cmd::UsageError("plan needs --items (how many entries the filter must hold)".into())
    })?;
    let p = a.size.fp;
    let kind: KeyKind = a.keys.keys.into();
    let mode: MatchMode = a.keys.match_mode.into();
    let lookups = max_lookups(kind, mode);
    let per_lookup = math::per_lookup_rate(p, lookups);
    let mut layouts = Vec::new();
    for layout in [Layout::Blocked, Layout::Classic] {
        let plan =
            math::plan(layout, n, per_lookup).map_err(|e| crate::cmd::UsageError(e.to_string()))?;
        layouts.push(plan);
    }
    let (opt_bpi, opt_k) = math::classic_optimum(per_lookup);
    // A ribbon build keeps a share of the rate for the delta of later adds
    // (`math/ribbon.rs`, "Room for adds"): its solution is planned for the
    // rest, and the predicted rate shown is the solution's.
    let ribbon = math::plan_ribbon(n, per_lookup * (1.0 - math::RIBBON_DELTA_SHARE)).ok();
    let extra = match a.layout {
        Some(l @ (BuildLayoutArg::Counting | BuildLayoutArg::Cuckoo)) => {
            let layout = match l {
                BuildLayoutArg::Counting => CfLayout::Counting,
                _ => CfLayout::Cuckoo,
            };
            let spec = DeletableSpec::for_build(layout, n, p, kind, mode);
            Some(deletable_row(&spec, lookups, &layouts[0])?)
        }
        _ => None,
    };
    if a.json {
        let out = json!({
            "items": n,
            "target_fp": p,
            "key_kind": kind.to_string(),
            "match_mode": mode.to_string(),
            "lookups_per_query": lookups,
            "per_lookup_fp": per_lookup,
            "classic_optimum": {
                "bits_per_item": opt_bpi,
                "k": opt_k,
                "bits": opt_bpi * n as f64,
                "bytes": opt_bpi * n as f64 / 8.0,
            },
            "layouts": layouts.iter().map(|pl| json!({
                "layout": pl.layout.name(),
                "bits": pl.bits,
                "bytes": pl.bytes(),
                "bits_per_item": pl.bits_per_item(),
                "k": pl.k,
                "hash": HashId::for_filter(pl.layout, pl.bits, pl.k).name(),
                "predicted_fp": pl.predicted_fp,
                "predicted_fp_per_query": 1.0 - (1.0 - pl.predicted_fp).powi(lookups as i32),
            })).chain(extra.as_ref().map(|r| r.json.clone())).collect::<Vec<_>>(),
            "ribbon": ribbon.as_ref().map(|r| json!({
                "layout": "ribbon",
                "bytes": r.bytes,
                "bits_per_item": r.bits_per_item(),
                "result_bits": r.columns as f64 + r.upper as f64 / 4_294_967_296.0,
                "shards": r.shards,
                "predicted_fp": r.predicted_fp,
                "predicted_fp_per_query": 1.0 - (1.0 - r.predicted_fp).powi(lookups as i32),
            })),
        });
        writeln!(o, "{}", serde_json::to_string_pretty(&out)?)?;
        return Ok(0);
    }
    writeln!(
        o,
        "{} items, false-positive rate {p:e} per query",
        thousands(n)
    )?;
    if lookups > 1 {
        writeln!(o,
            "{kind} keys with {mode} matching: up to {lookups} lookups per query, so each lookup is sized for {per_lookup:.3e} (fp/lookup below; fp/query is what a query sees)"
        )?;
    }
    writeln!(
        o,
        "exact optimum (classic): {opt_bpi:.2} bits per item, k = {opt_k:.2}, {} ({})",
        thousands((opt_bpi * n as f64).ceil() as u64),
        bytes((opt_bpi * n as f64 / 8.0) as u64)
    )?;
    writeln!(o)?;
    writeln!(
        o,
        "{:<8} {:>18} {:>12} {:>13} {:>3} {:>13}{}",
        "layout",
        "bits",
        "bytes",
        "bits/item",
        "k",
        "fp/query",
        if lookups > 1 {
            format!(" {:>13}", "fp/lookup")
        } else {
            String::new()
        }
    )?;
    for pl in &layouts {
        writeln!(
            o,
            "{:<8} {:>18} {:>12} {:>13.2} {:>3} {}",
            pl.layout.name(),
            thousands(pl.bits),
            bytes(pl.bytes()),
            pl.bits_per_item(),
            pl.k,
            fp_cells(pl.predicted_fp, lookups)
        )?;
    }
    if let Some(r) = &ribbon {
        writeln!(
            o,
            "{:<8} {:>18} {:>12} {:>13.2} {:>3} {}",
            "ribbon",
            thousands(r.bytes * 8),
            bytes(r.bytes),
            r.bits_per_item(),
            "-",
            fp_cells(r.predicted_fp, lookups)
        )?;
    }
    if let Some(r) = &extra {
        writeln!(o, "{}", r.row)?;
    }
    writeln!(o)?;
    writeln!(o, "blocked: one cache miss per lookup (default); classic: smallest Bloom, k cache misses per lookup")?;
    writeln!(
        o,
        "hash: blocked {}, classic {} (the file's hash id; `info` shows a file's)",
        HashId::for_filter(Layout::Blocked, layouts[0].bits, layouts[0].k),
        HashId::for_filter(Layout::Classic, layouts[1].bits, layouts[1].k)
    )?;
    if ribbon.is_some() {
        writeln!(o, "ribbon: static (built once from all entries with --layout ribbon; adds go to a small delta in the 1/32 of the rate kept for them, folded in by the next build; no union), near the {:.2}-bit bound, one or two cache lines per lookup", -per_lookup.log2())?;
    }
    if let Some(r) = &extra {
        writeln!(o, "{}", r.note)?;
    }
    Ok(0)
}

/// The predicted false-positive rate of a table row: per query first, then
/// (when a query makes several lookups) per lookup, which it derives from.
fn fp_cells(per_lookup: f64, lookups: u32) -> String {
    let per_query = 1.0 - (1.0 - per_lookup).powi(lookups as i32);
    let mut cells = format!("{:>12.4}%", per_query * 100.0);
    if lookups > 1 {
        cells.push_str(&format!(" {:>12.4}%", per_lookup * 100.0));
    }
    cells
}

/// The plan of a deletable layout: its table row, its JSON entry (the
/// Bloom rows' fields plus its own), and a note on what it costs.
struct DeletableRow {
    row: String,
    json: serde_json::Value,
    note: String,
}

fn deletable_row(spec: &DeletableSpec, lookups: u32, blocked: &math::Plan) -> Result<DeletableRow> {
    let n = spec.capacity;
    let planned = spec
        .plan()
        .map_err(|e| crate::cmd::UsageError(e.to_string()))?;
    // The file `build` writes: the engine's header, then the table.
    let file_bytes = HEADER_LEN as u64 + planned.bytes();
    let per_query = |fp: f64| 1.0 - (1.0 - fp).powi(lookups as i32);
    let row = |name: &str, bits: u64, bpi: f64, k: String, fp: f64| {
        format!(
            "{:<8} {:>18} {:>12} {:>13.2} {:>3} {}",
            name,
            thousands(bits),
            bytes(bits / 8),
            bpi,
            k,
            fp_cells(fp, lookups)
        )
    };
    let times = |bits: u64| bits as f64 / blocked.bits as f64;
    Ok(match planned {
        DeletablePlan::Counting(pl) => {
            DeletableRow {
                row: row(
                    "counting",
                    pl.bits(),
                    pl.bits_per_item(),
                    pl.k.to_string(),
                    pl.predicted_fp,
                ),
                json: json!({
                    "layout": "counting",
                    "bits": pl.bits(),
                    "bytes": pl.bytes(),
                    "file_bytes": file_bytes,
                    "bits_per_item": pl.bits_per_item(),
                    "k": pl.k,
                    "predicted_fp": pl.predicted_fp,
                    "predicted_fp_per_query": per_query(pl.predicted_fp),
                    "counters": pl.counters,
                    "counter_bits": math::COUNTER_BITS,
                    "times_blocked": times(pl.bits()),
                }),
                note: format!(
                    "counting: can delete (bloomgate remove); {} {}-bit counters, {} to a cache line, k = {}: {:.1}x the blocked filter's memory",
                    thousands(pl.counters),
                    math::COUNTER_BITS,
                    math::COUNTING_BLOCK_COUNTERS,
                    pl.k,
                    times(pl.bits())
                ),
            }
        }
        DeletablePlan::Cuckoo(pl) => {
            let fits = (pl.slots() as f64 * math::cuckoo_max_load(pl.bucket_size)).floor() as u64;
            DeletableRow {
                row: row(
                    "cuckoo",
                    pl.bits(),
                    pl.bits_per_item(),
                    "-".into(),
                    pl.predicted_fp,
                ),
                json: json!({
                    "layout": "cuckoo",
                    "bits": pl.bits(),
                    "bytes": pl.bytes(),
                    "file_bytes": file_bytes,
                    "bits_per_item": pl.bits_per_item(),
                    "k": null,
                    "predicted_fp": pl.predicted_fp,
                    "predicted_fp_per_query": per_query(pl.predicted_fp),
                    "buckets": pl.buckets,
                    "bucket_size": pl.bucket_size,
                    "fingerprint_bits": pl.fingerprint_bits,
                    "slots": pl.slots(),
                    "load": pl.load(),
                    "max_items": fits,
                    "times_blocked": times(pl.bits()),
                }),
                note: format!(
                    "cuckoo: can delete (bloomgate remove); {}-bit fingerprints in {} buckets of {}: {:.1} % full at {} items, {:.1}x the blocked filter's memory;\n        \
                     its bucket count is exact: the table holds up to {} items ({:.1} bits per item) at its planned {:.0} % load; adds fail beyond it",
                    pl.fingerprint_bits,
                    thousands(pl.buckets),
                    pl.bucket_size,
                    pl.load() * 100.0,
                    thousands(n),
                    times(pl.bits()),
                    thousands(fits),
                    pl.bits() as f64 / fits.max(1) as f64,
                    math::cuckoo_max_load(pl.bucket_size) * 100.0
                ),
            }
        }
    })
}
