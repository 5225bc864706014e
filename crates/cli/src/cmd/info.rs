//! `bloomgate info`: header fields and statistics of a filter file.

use std::io::Write;

use anyhow::Result;
use serde_json::json;

use crate::args::InfoArgs;
use crate::report::{bytes, thousands};

pub fn run(a: InfoArgs) -> Result<i32> {
    if crate::cmd::redis::is_address(&a.filter) {
        return crate::cmd::redis::info(a);
    }
    if crate::cmd::deletable::kind_of(&a.filter).is_some() {
        return crate::cmd::deletable::info(a);
    }
    let stdout = std::io::stdout();
    let mut o = stdout.lock();
    if a.verify {
        crate::cmd::verify_files(&a.filter)?;
    }
    let list = crate::cmd::open_read(&a.filter, a.snapshot_only)?;
    let layers = list.layers();
    let f = list.filter();
    let h = f.header().expect("opened from a file");
    let p = f.params();
    // Per layer: (set bits, estimated items).
    let per_layer: Vec<(u64, f64)> = layers
        .layers
        .iter()
        .map(|l| {
            // From the header when it records the count: `info` of a filter
            // larger than memory reads nothing but headers.
            let ones = l.ones();
            let lp = l.params();
            (
                ones,
                bloomgate_engine::math::estimate_items(lp.bits, lp.k, ones),
            )
        })
        .collect();
    let bits = layers.bits();
    let ones: u64 = per_layer.iter().map(|(o, _)| o).sum();
    let fill = ones as f64 / bits as f64;
    let estimated: f64 = per_layer.iter().map(|(_, e)| e).sum();
    let items = layers.items();
    let planned = layers.capacity();
    let predicted_fp = layers.predicted_fp();
    let fp_at_fill =
        bloomgate_engine::math::compound_fp(layers.layers.iter().map(|l| l.fp_at_fill()));
    let (growth, expansion) = match layers.growth_meta() {
        _ if layers.policy().forgets() => (layers.policy().name(), None),
        None => ("fixed", None),
        Some(m) if m.nonscaling => ("nonscaling", None),
        Some(m) => ("scaling", Some(m.expansion)),
    };
    let (policy, policy_note) = policy_details(layers);
    let opened = list.opened();
    let live_adds = opened.replay.as_ref().map(|r| r.new);
    let layer_json: Vec<_> = layers
        .layers
        .iter()
        .zip(&per_layer)
        .map(|(l, (ones, _))| {
            let lp = l.params();
            json!({
                "bits": lp.bits,
                "k": lp.k,
                "seed": format!("{:#018x}", lp.seed),
                "items": l.items(),
                "planned_items": lp.planned_items,
                "target_fp": lp.target_fp,
                "fill_ratio": *ones as f64 / lp.bits as f64,
                "predicted_fp": l.predicted_fp(),
            })
        })
        .collect();
    let v = json!({
        "path": a.filter,
        "format_version": h.version,
        "layout": p.layout.name(),
        "bits": bits,
        "bytes": bits / 8,
        "k": p.k,
        "block_bits": h.block_bits(),
        "hash": "xxh3-128",
        "seed": format!("{:#018x}", p.seed),
        "key_kind": list.kind().to_string(),
        "match_mode": list.mode().to_string(),
        "items": items,
        "planned_items": planned,
        "target_fp": layers.target_fp(),
        "target_fp_per_query": bloomgate_blacklist::spec::per_query_rate(list.kind(), list.mode(), layers.target_fp()),
        "bits_per_item": bits as f64 / planned.max(1) as f64,
        "fill_ratio": fill,
        "estimated_items": if estimated.is_finite() { json!(estimated.round()) } else { json!(null) },
        "predicted_fp": predicted_fp,
        "fp_at_fill": fp_at_fill,
        "growth": growth,
        "expansion": expansion,
        "policy": policy,
        "purpose": format!("{:?}", layers.rules.purpose).to_lowercase(),
        "layers": layer_json.len(),
        "layer_details": layer_json,
        "data_dir": opened.data_dir.as_ref().map(|d| d.display().to_string()),
        "served": opened.served,
        "live_adds_included": live_adds,
        "snapshot_only": a.snapshot_only,
        "data_checksum": format!("{:#018x}", h.data_checksum),
        "ones_recorded": layers.layers.iter().all(|l| l.stored_ones().is_some()),
        "dirty": h.is_dirty(),
        "whitelist_items": list.whitelist().len(),
        "verified": a.verify,
    });
    if a.json {
        writeln!(o, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(0);
    }
    writeln!(o, "file            {}", a.filter)?;
    writeln!(o, "format          version {}", h.version)?;
    writeln!(
        o,
        "layout          {} (k = {}{})",
        p.layout,
        p.k,
        if h.block_bits() > 0 {
            format!(", {}-bit blocks", h.block_bits())
        } else {
            String::new()
        }
    )?;
    writeln!(
        o,
        "size            {} bits = {}",
        thousands(bits),
        bytes(bits / 8)
    )?;
    if layers.layers.len() > 1 || growth != "fixed" {
        writeln!(
            o,
            "growth          {growth}{}, {} layer(s)",
            expansion
                .map(|e| format!(" (expansion {e})"))
                .unwrap_or_default(),
            layers.layers.len()
        )?;
        for (i, (l, (lones, _))) in layers.layers.iter().zip(&per_layer).enumerate() {
            let lp = l.params();
            writeln!(
                o,
                "  layer {i:<2}      {} bits, k = {}, {} of {} items, fill {:.4}, target {:.3e}",
                thousands(lp.bits),
                lp.k,
                thousands(l.items()),
                thousands(lp.planned_items),
                *lones as f64 / lp.bits as f64,
                lp.target_fp
            )?;
        }
    }
    if let Some(note) = policy_note {
        writeln!(o, "policy          {note}")?;
    }
    writeln!(
        o,
        "keys            {} ({} matching)",
        list.kind(),
        list.mode()
    )?;
    writeln!(o, "hash            xxh3-128, seed {:#018x}", p.seed)?;
    writeln!(
        o,
        "items           {} inserted, ~{} estimated from fill, {} planned",
        thousands(items),
        if estimated.is_finite() {
            thousands(estimated.round() as u64)
        } else {
            "∞".into()
        },
        thousands(planned)
    )?;
    writeln!(o, "fill ratio      {:.4}", fill)?;
    let (kind, mode) = (list.kind(), list.mode());
    let lookups = bloomgate_url::max_lookups(kind, mode);
    let q = |p| bloomgate_blacklist::spec::per_query_rate(kind, mode, p);
    writeln!(
        o,
        "false positives {:.3e} per query predicted at {} items, {:.3e} from the fill (target {:.3e} per query)",
        q(predicted_fp),
        thousands(items),
        q(fp_at_fill),
        q(layers.target_fp())
    )?;
    if lookups > 1 {
        writeln!(
            o,
            "  per lookup    {:.3e} predicted, {:.3e} from the fill (target {:.3e}): {kind} keys with {mode} matching make up to {lookups} lookups per query",
            predicted_fp,
            fp_at_fill,
            layers.target_fp()
        )?;
    }
    if let Some(dir) = &opened.data_dir {
        writeln!(
            o,
            "data directory  {}{}; {}",
            dir.display(),
            if opened.served {
                " (served by a running bloomgate serve)"
            } else {
                ""
            },
            match live_adds {
                Some(n) => format!(
                    "{} live add(s) from its journal and log included",
                    thousands(n)
                ),
                None => "live adds not included (--snapshot-only)".into(),
            }
        )?;
    }
    writeln!(o, "whitelist       {} items", list.whitelist().len())?;
    writeln!(
        o,
        "checksum        {:#018x}{}{}",
        h.data_checksum,
        if h.is_dirty() {
            " (stale: an in-place update was interrupted)"
        } else {
            ""
        },
        if a.verify { " verified" } else { "" }
    )?;
    Ok(0)
}

/// The fill policy as `--json` gives it, and the line `info` prints (none
/// for a fixed filter, whose growth line says it all).
fn policy_details(
    layers: &bloomgate_blacklist::layers::Layers,
) -> (serde_json::Value, Option<String>) {
    use bloomgate_blacklist::layers::{clear_items, FillPolicy as Policy, Forgetting};
    let policy = layers.policy();
    let mut v = json!({ "name": policy.name() });
    let note = match (&policy, &layers.rules.forgetting) {
        (Policy::Fixed, _) => None,
        (Policy::Rotate(r), Forgetting::Rotate { ring, .. }) => {
            v["generations"] = json!(r.generations);
            v["window"] = json!(r.window);
            v["window_secs"] = json!(r.window_secs);
            v["generation_items"] = json!(r.span());
            v["live_generations"] = json!(ring.len());
            v["generation_started"] = json!(ring.iter().map(|g| g.started).collect::<Vec<_>>());
            Some(format!(
                "{policy}: {} of {} generations live, {} items each; an entry stays at least {} adds{}",
                ring.len(),
                r.generations,
                thousands(r.span()),
                thousands(r.window),
                r.window_secs.map(|t| format!(" or {t} s")).unwrap_or_default()
            ))
        }
        (Policy::Clear { at }, Forgetting::Clear { clears, .. }) => {
            let l = layers.layers.last().expect("a layer");
            let lp = l.params();
            let n = clear_items(lp.bits, lp.k, *at);
            let fp = l.predicted_fp_for(n);
            v["clear_at"] = json!(at);
            v["clear_items"] = json!(n);
            v["fp_before_clear"] = json!(fp);
            v["clears"] = json!(clears);
            Some(format!(
                "{policy}: clears at ~{} items (predicted FP then {fp:.3e}), cleared {clears} time(s)",
                thousands(n)
            ))
        }
        (p, _) => Some(p.to_string()),
    };
    (v, note)
}
