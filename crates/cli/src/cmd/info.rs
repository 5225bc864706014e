//! `bloomgate info`: header fields and statistics of a filter file.

use std::io::Write;

use anyhow::Result;
use serde_json::json;

use bloomgate_blacklist::Blacklist;
use bloomgate_engine::Access;

use crate::args::InfoArgs;
use crate::report::{bytes, thousands};

pub fn run(a: InfoArgs) -> Result<i32> {
    let stdout = std::io::stdout();
    let mut o = stdout.lock();
    let list = Blacklist::open(&a.filter, Access::ReadOnly)?;
    let f = list.filter();
    if a.verify {
        f.verify()?;
    }
    let h = f.header().expect("opened from a file");
    let p = f.params();
    let ones = f.count_ones();
    let fill = ones as f64 / p.bits as f64;
    let estimated = bloomgate_engine::math::estimate_items(p.bits, p.k, ones);
    let v = json!({
        "path": a.filter,
        "format_version": h.version,
        "layout": p.layout.name(),
        "bits": p.bits,
        "bytes": p.bits / 8,
        "k": p.k,
        "block_bits": h.block_bits(),
        "hash": "xxh3-128",
        "seed": format!("{:#018x}", p.seed),
        "key_kind": list.kind().to_string(),
        "match_mode": list.mode().to_string(),
        "items": f.items(),
        "planned_items": p.planned_items,
        "target_fp": p.target_fp,
        "bits_per_item": p.bits as f64 / p.planned_items.max(1) as f64,
        "fill_ratio": fill,
        "estimated_items": if estimated.is_finite() { json!(estimated.round()) } else { json!(null) },
        "predicted_fp": f.predicted_fp(),
        "fp_at_fill": f.fp_at_fill(),
        "data_checksum": format!("{:#018x}", h.data_checksum),
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
        thousands(p.bits),
        bytes(p.bits / 8)
    )?;
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
        thousands(f.items()),
        if estimated.is_finite() {
            thousands(estimated.round() as u64)
        } else {
            "∞".into()
        },
        thousands(p.planned_items)
    )?;
    writeln!(o, "fill ratio      {:.4}", fill)?;
    writeln!(
        o,
        "false positives {:.3e} predicted at {} items, {:.3e} from the fill (target {:.3e})",
        f.predicted_fp(),
        thousands(f.items()),
        f.fp_at_fill(),
        p.target_fp
    )?;
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
