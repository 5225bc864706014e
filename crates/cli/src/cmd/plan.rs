//! `bloomgate plan`: sizes for both layouts, and the exact classic optimum.

use std::io::Write;

use anyhow::Result;
use serde_json::json;

use bloomgate_engine::math::{self, Layout};
use bloomgate_url::{max_lookups, KeyKind, MatchMode};

use crate::args::PlanArgs;
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
                "predicted_fp": pl.predicted_fp,
                "predicted_fp_per_query": 1.0 - (1.0 - pl.predicted_fp).powi(lookups as i32),
            })).collect::<Vec<_>>(),
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
            "{kind} keys with {mode} matching: up to {lookups} lookups per query, so each lookup is sized for {per_lookup:.3e}"
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
        "{:<8} {:>18} {:>12} {:>13} {:>3} {:>13}",
        "layout", "bits", "bytes", "bits/item", "k", "predicted_fp"
    )?;
    for pl in &layouts {
        writeln!(
            o,
            "{:<8} {:>18} {:>12} {:>13.2} {:>3} {:>12.4}%",
            pl.layout.name(),
            thousands(pl.bits),
            bytes(pl.bytes()),
            pl.bits_per_item(),
            pl.k,
            pl.predicted_fp * 100.0
        )?;
    }
    writeln!(o)?;
    writeln!(o, "blocked: one cache miss per lookup (default); classic: smallest, k cache misses per lookup")?;
    Ok(0)
}
