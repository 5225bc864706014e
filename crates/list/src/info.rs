//! What a list is, in words and in JSON: [`List::info`](crate::List::info).
//!
//! Each layout and store has its own facts to report (a Bloom file's
//! layers and fill policy, a counting table's saturated counters, a cuckoo
//! table's occupied slots, a Redis filter's shards), so each has its
//! describer here; what they return is one [`Info`] that a front end prints
//! without knowing which it got: `json` for machines, `lines` for people,
//! `problems` when the list cannot answer every lookup (missing Redis
//! shards), which a command line reports as a failure.

use serde_json::{json, Value};

use bloomgate_blacklist::Blacklist;
use bloomgate_engine::format::FORMAT_VERSION;
use bloomgate_engine::math::{self, CUCKOO_PLANNED_LOAD};
use bloomgate_engine::{DeletableTable, Ribbon, Table as _};
use bloomgate_redis::RedisFilter;
use bloomgate_url::{KeyKind, MatchMode};

use crate::delta::DeltaInfo;
use crate::units::{bytes, thousands};
use crate::{Error, OpenOptions};

/// How many damaged shards are named one by one.
const SHOW_DAMAGED: usize = 10;

/// A description of a list.
#[derive(Clone, Debug)]
pub struct Info {
    /// Every field, for machines (`bloomgate info --json`).
    pub json: Value,
    /// The description for people, one line each.
    pub lines: Vec<String>,
    /// What makes the list unable to answer every lookup (one line each;
    /// empty for a sound list).
    pub problems: Vec<String>,
}

/// Describes a Bloom filter file: from its headers (all its layers), its
/// fill policy, its data directory and whitelist.
pub(crate) fn bloom(path: &str, list: &Blacklist, o: &OpenOptions) -> Info {
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
            (ones, math::estimate_items(lp.bits, lp.k, ones))
        })
        .collect();
    let bits = layers.bits();
    // The layers' hashes, in order, each once (a filter grown since hash id
    // 2 existed may have older layers hashed with XXH3-128).
    let mut hashes: Vec<&str> = Vec::new();
    for l in &layers.layers {
        let name = l.params().hash.name();
        if !hashes.contains(&name) {
            hashes.push(name);
        }
    }
    let hashes = hashes.join(" + ");
    let ones: u64 = per_layer.iter().map(|(o, _)| o).sum();
    let fill = ones as f64 / bits as f64;
    let estimated: f64 = per_layer.iter().map(|(_, e)| e).sum();
    let items = layers.items();
    let planned = layers.capacity();
    let predicted_fp = layers.predicted_fp();
    let fp_at_fill = math::compound_fp(layers.layers.iter().map(|l| l.fp_at_fill()));
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
                "hash": lp.hash.name(),
                "items": l.items(),
                "planned_items": lp.planned_items,
                "target_fp": lp.target_fp,
                "fill_ratio": *ones as f64 / lp.bits as f64,
                "predicted_fp": l.predicted_fp(),
            })
        })
        .collect();
    let v = json!({
        "path": path,
        "format_version": h.version,
        "layout": p.layout.name(),
        "bits": bits,
        "bytes": bits / 8,
        "k": p.k,
        "block_bits": h.block_bits(),
        "hash": hashes,
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
        "snapshot_only": o.snapshot_only,
        "data_checksum": format!("{:#018x}", h.data_checksum),
        "ones_recorded": layers.layers.iter().all(|l| l.stored_ones().is_some()),
        "dirty": h.is_dirty(),
        "whitelist_items": list.whitelist().len(),
        "verified": o.verify,
    });
    let mut lines = Vec::new();
    lines.push(format!("file            {path}"));
    lines.push(format!("format          version {}", h.version));
    lines.push(format!(
        "layout          {} (k = {}{})",
        p.layout,
        p.k,
        if h.block_bits() > 0 {
            format!(", {}-bit blocks", h.block_bits())
        } else {
            String::new()
        }
    ));
    lines.push(format!(
        "size            {} bits = {}",
        thousands(bits),
        bytes(bits / 8)
    ));
    if layers.layers.len() > 1 || growth != "fixed" {
        lines.push(format!(
            "growth          {growth}{}, {} layer(s)",
            expansion
                .map(|e| format!(" (expansion {e})"))
                .unwrap_or_default(),
            layers.layers.len()
        ));
        for (i, (l, (lones, _))) in layers.layers.iter().zip(&per_layer).enumerate() {
            let lp = l.params();
            lines.push(format!(
                "  layer {i:<2}      {} bits, k = {}, {} of {} items, fill {:.4}, target {:.3e}",
                thousands(lp.bits),
                lp.k,
                thousands(l.items()),
                thousands(lp.planned_items),
                *lones as f64 / lp.bits as f64,
                lp.target_fp
            ));
        }
    }
    if let Some(note) = policy_note {
        lines.push(format!("policy          {note}"));
    }
    lines.push(format!(
        "keys            {} ({} matching)",
        list.kind(),
        list.mode()
    ));
    lines.push(format!("hash            {hashes}, seed {:#018x}", p.seed));
    lines.push(format!(
        "items           {} inserted, ~{} estimated from fill, {} planned",
        thousands(items),
        if estimated.is_finite() {
            thousands(estimated.round() as u64)
        } else {
            "∞".into()
        },
        thousands(planned)
    ));
    lines.push(format!("fill ratio      {:.4}", fill));
    let (kind, mode) = (list.kind(), list.mode());
    let lookups = bloomgate_url::max_lookups(kind, mode);
    let q = |p| bloomgate_blacklist::spec::per_query_rate(kind, mode, p);
    lines.push(format!("false positives {:.3e} per query predicted at {} items, {:.3e} from the fill (target {:.3e} per query)",
        q(predicted_fp),
        thousands(items),
        q(fp_at_fill),
        q(layers.target_fp())
    ));
    if lookups > 1 {
        lines.push(format!("  per lookup    {:.3e} predicted, {:.3e} from the fill (target {:.3e}): {kind} keys with {mode} matching make up to {lookups} lookups per query",
            predicted_fp,
            fp_at_fill,
            layers.target_fp()
        ));
    }
    if let Some(dir) = &opened.data_dir {
        lines.push(format!(
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
        ));
    }
    lines.push(format!("whitelist       {} items", list.whitelist().len()));
    lines.push(format!(
        "checksum        {:#018x}{}{}",
        h.data_checksum,
        if h.is_dirty() {
            " (stale: an in-place update was interrupted)"
        } else {
            ""
        },
        if o.verify { " verified" } else { "" }
    ));
    Info {
        json: v,
        lines,
        problems: Vec::new(),
    }
}

/// Describes a static ribbon filter file: from its header and directory,
/// and its delta of added keys (the union's rate is what a lookup meets).
pub(crate) fn ribbon(
    path: &str,
    f: &Ribbon,
    d: &DeltaInfo,
    (kind, mode): (KeyKind, MatchMode),
    whitelist: usize,
    o: &OpenOptions,
) -> Info {
    let h = f.header();
    let base_fp = f.predicted_fp();
    let predicted = math::compound_fp([base_fp, d.predicted_fp]);
    let q = |p| bloomgate_blacklist::spec::per_query_rate(kind, mode, p);
    let result_bits = h.columns as f64 + h.upper as f64 / 4_294_967_296.0;
    let bound = -h.target_fp.log2();
    let v = json!({
        "path": path,
        "format_version": h.version,
        "layout": "ribbon",
        "bytes": h.data_len,
        "file_bytes": f.file_len(),
        "hash": "xxh3-128",
        "seed": format!("{:#018x}", h.seed),
        "key_kind": kind.to_string(),
        "match_mode": mode.to_string(),
        "items": h.items + d.items,
        "base_items": h.items,
        "planned_items": h.planned_items,
        "target_fp": h.target_fp,
        "target_fp_per_query": q(h.target_fp),
        "bits_per_item": f.bits_per_item(),
        "bound_bits_per_item": bound,
        "result_bits": result_bits,
        "shards": h.shards,
        "retried_shards": f.retried_shards(),
        "predicted_fp": predicted,
        "predicted_fp_per_query": q(predicted),
        "base_predicted_fp": base_fp,
        "delta": {
            "path": d.path,
            "file_exists": d.exists,
            "added_keys": d.records,
            "file_bytes": d.file_bytes,
            "items": d.items,
            "bits": d.bits,
            "bytes": d.bits / 8,
            "layers": d.layers,
            "predicted_fp": d.predicted_fp,
            "budget_fp": d.budget,
            "takes_adds": d.takes_adds,
        },
        "data_checksum": format!("{:#018x}", h.data_checksum),
        "whitelist_items": whitelist,
        "static": true,
        "verified": o.verify,
    });
    let mut lines = vec![
        format!("file            {path}"),
        format!("format          version {}", h.version),
        format!(
            "layout          ribbon (static: 128-bit rows, {result_bits:.3} result bits per slot, {} shard(s), {} solved at a later seed)",
            thousands(h.shards),
            thousands(f.retried_shards())
        ),
        format!(
            "size            {} ({:.2} bits per item; the bound for the target is {bound:.2})",
            bytes(h.data_len),
            f.bits_per_item()
        ),
        format!("keys            {kind} ({mode} matching)"),
        format!("hash            xxh3-128, seed {:#018x}", h.seed),
        format!(
            "items           {} distinct stored, {} entries read",
            thousands(h.items),
            thousands(h.planned_items)
        ),
        format!(
            "false positives {:.3e} per query predicted (target {:.3e} per query; {predicted:.3e} per lookup: solution {base_fp:.3e} + delta {:.3e})",
            q(predicted),
            q(h.target_fp),
            d.predicted_fp
        ),
    ];
    lines.push(if d.records > 0 || d.exists {
        format!(
            "delta           {} added key(s) in {} ({}), {} outside the solution in a blocked delta of {} layer(s), {}; room {:.3e} per lookup{}",
            thousands(d.records),
            d.path,
            bytes(d.file_bytes),
            thousands(d.items),
            d.layers,
            bytes(d.bits / 8),
            d.budget,
            if d.takes_adds { "" } else { " (takes no adds: rebuild it)" }
        )
    } else if d.takes_adds {
        format!(
            "delta           none; adds go to {} (room {:.3e} per lookup)",
            d.path, d.budget
        )
    } else {
        format!(
            "delta           none; takes no adds (its solution leaves {:.3e} of the target per lookup)",
            d.budget
        )
    });
    lines.push(format!("whitelist       {whitelist} items"));
    lines.push(format!(
        "checksum        {:#018x}{}",
        h.data_checksum,
        if o.verify { " verified" } else { "" }
    ));
    Info {
        json: v,
        lines,
        problems: Vec::new(),
    }
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

/// Describes a counting or cuckoo filter file. Unlike a Bloom filter's
/// (headers only), it makes one pass over the data to count non-zero and
/// saturated counters, or occupied slots.
pub(crate) fn table(
    path: &str,
    f: &DeletableTable,
    whitelist: usize,
    o: &OpenOptions,
) -> Result<Info, Error> {
    let (kind, mode) = f.key_rules();
    let (kind, mode) = crate::open::rules_of(path, kind, mode)?;
    let data_bytes = f.bytes();
    let planned = f.planned();
    let mut v = json!({
        "path": path,
        "format_version": FORMAT_VERSION,
        "layout": f.kind().name(),
        "deletable": true,
        "bits": data_bytes * 8,
        "bytes": data_bytes,
        "bits_per_item": (data_bytes * 8) as f64 / planned.max(1) as f64,
        "hash": "xxh3-128",
        "seed": format!("{:#018x}", f.seed()),
        "key_kind": kind.to_string(),
        "match_mode": mode.to_string(),
        "items": f.items(),
        "planned_items": planned,
        "target_fp": f.target_fp(),
        "predicted_fp": f.predicted_fp(),
        "whitelist_items": whitelist,
        "verified": o.verify,
    });
    let mut rows: Vec<(&str, String)> = Vec::new();
    match f {
        DeletableTable::Counting(c) => {
            let p = c.params();
            let nonzero = c.nonzero_counters();
            let saturated = c.saturated_counters();
            v["counters"] = json!(p.counters);
            v["counter_bits"] = json!(math::COUNTER_BITS);
            v["k"] = json!(p.k);
            v["load"] = json!(c.load());
            v["nonzero_counters"] = json!(nonzero);
            v["fill_ratio"] = json!(nonzero as f64 / p.counters as f64);
            v["saturated_counters"] = json!(saturated);
            rows.push((
                "layout",
                format!(
                    "counting ({}-bit counters, {} to a 64-byte block, k = {})",
                    math::COUNTER_BITS,
                    math::COUNTING_BLOCK_COUNTERS,
                    p.k
                ),
            ));
            rows.push((
                "size",
                format!("{} counters = {}", thousands(p.counters), bytes(data_bytes)),
            ));
            rows.push((
                "load",
                format!(
                    "{:.4} ({} items of {} planned)",
                    c.load(),
                    thousands(c.items()),
                    thousands(planned)
                ),
            ));
            rows.push((
                "fill ratio",
                format!(
                    "{:.4} ({} counters above zero)",
                    nonzero as f64 / p.counters as f64,
                    thousands(nonzero)
                ),
            ));
            rows.push((
                "saturated",
                format!(
                    "{} counters at {} (never changed again: a delete cannot clear them)",
                    thousands(saturated),
                    math::COUNTER_MAX
                ),
            ));
        }
        DeletableTable::Cuckoo(c) => {
            let p = c.params();
            let occupied = c.occupied_slots();
            v["buckets"] = json!(p.buckets);
            v["bucket_size"] = json!(p.bucket_size);
            v["fingerprint_bits"] = json!(p.fingerprint_bits);
            v["max_kicks"] = json!(p.max_kicks);
            v["slots"] = json!(p.slots());
            v["occupied_slots"] = json!(occupied);
            v["load"] = json!(c.load());
            v["fill_ratio"] = json!(occupied as f64 / p.slots() as f64);
            rows.push((
                "layout",
                format!(
                    "cuckoo ({}-bit fingerprints, buckets of {} slots, up to {} evictions per insert)",
                    p.fingerprint_bits, p.bucket_size, p.max_kicks
                ),
            ));
            rows.push((
                "size",
                format!(
                    "{} buckets = {} slots = {}",
                    thousands(p.buckets),
                    thousands(p.slots()),
                    bytes(data_bytes)
                ),
            ));
            rows.push((
                "load",
                format!(
                    "{:.4} ({} of {} slots occupied; {} items planned, inserts may fail past about {:.0} %)",
                    occupied as f64 / p.slots() as f64,
                    thousands(occupied),
                    thousands(p.slots()),
                    thousands(planned),
                    CUCKOO_PLANNED_LOAD * 100.0
                ),
            ));
        }
    }
    let mut lines = Vec::new();
    lines.push(format!("file            {path}"));
    lines.push(format!("format          version {FORMAT_VERSION}"));
    for (name, line) in &rows[..2] {
        lines.push(format!("{name:<16}{line}"));
    }
    lines.push(format!("keys            {} ({} matching)", kind, mode));
    lines.push(format!("hash            xxh3-128, seed {:#018x}", f.seed()));
    lines.push(format!(
        "items           {} stored (adds minus removes), {} planned",
        thousands(f.items()),
        thousands(planned)
    ));
    for (name, line) in &rows[2..] {
        lines.push(format!("{name:<16}{line}"));
    }
    lines.push(format!(
        "false positives {:.3e} predicted at {} items (target {:.3e})",
        f.predicted_fp(),
        thousands(f.items()),
        f.target_fp()
    ));
    lines.push(format!("whitelist       {} items", whitelist));
    if o.verify {
        lines.push("checksum        verified".to_string());
    }
    Ok(Info {
        json: v,
        lines,
        problems: Vec::new(),
    })
}

/// Describes a filter in Redis: its metadata, and every shard's length and
/// bits set (the shards that are missing or of the wrong length are its
/// problems).
pub(crate) fn redis(filter: &RedisFilter) -> Result<Info, Error> {
    let i = filter.info()?;
    let m = filter.meta();
    let p = &m.params;
    let predicted = filter.predicted_fp(i.items);
    let fill = i.fill_ratio();
    let fp_at_fill = filter.fp_at_fill(i.ones);
    let estimated = bloomgate_engine::math::estimate_items(p.bits, p.k, i.ones);
    let v = json!({
        "address": filter.address().display(),
        "server": filter.store().server(),
        "cluster": filter.address().cluster,
        "name": filter.address().name,
        "redis_format": m.format,
        "layout": p.layout.name(),
        "bits": p.bits,
        "bytes": p.bits / 8,
        "k": p.k,
        "block_bits": 512,
        "hash": p.hash.name(),
        "seed": format!("{:#018x}", p.seed),
        "key_kind": filter.kind().to_string(),
        "match_mode": filter.mode().to_string(),
        "items": i.items,
        "planned_items": p.planned_items,
        "target_fp": p.target_fp,
        "bits_per_item": p.bits as f64 / p.planned_items.max(1) as f64,
        "predicted_fp": predicted,
        "ones": i.ones,
        "fill_ratio": fill,
        "estimated_items": estimated,
        "fp_at_fill": fp_at_fill,
        "shard_blocks": m.shard_blocks,
        "shards": i.shards,
        "shards_present": i.shards_present,
        "shards_damaged": i.damaged.iter().map(|(shard, problem)| json!({
            "shard": shard,
            "key": bloomgate_redis::layout::shard_key(&filter.address().name, *shard),
            "problem": problem,
        })).collect::<Vec<_>>(),
        "whitelist_items": i.whitelist,
    });
    let mut lines = Vec::new();
    lines.push(format!("redis           {}", filter.address().display()));
    lines.push(format!("format          redis layout version {}", m.format));
    lines.push(format!(
        "layout          {} (k = {}, 512-bit blocks)",
        p.layout, p.k
    ));
    lines.push(format!(
        "size            {} bits = {}",
        thousands(p.bits),
        bytes(p.bits / 8)
    ));
    lines.push(format!(
        "shards          {} of {} blocks ({} each), {} present",
        thousands(i.shards),
        thousands(m.shard_blocks),
        bytes(m.shard_blocks * 64),
        thousands(i.shards_present)
    ));
    lines.push(format!(
        "keys            {} ({} matching)",
        filter.kind(),
        filter.mode()
    ));
    lines.push(format!("hash            {}, seed {:#018x}", p.hash, p.seed));
    lines.push(format!(
        "items           {} inserted, ~{} estimated from fill, {} planned",
        thousands(i.items),
        thousands(estimated.min(u64::MAX as f64) as u64),
        thousands(p.planned_items)
    ));
    lines.push(format!(
        "fill ratio      {:.4} ({} of {} bits set)",
        fill,
        thousands(i.ones),
        thousands(p.bits)
    ));
    lines.push(format!(
        "false positives {:.3e} predicted at {} items, {:.3e} from the fill (target {:.3e})",
        predicted,
        thousands(i.items),
        fp_at_fill,
        p.target_fp
    ));
    lines.push(format!("whitelist       {} items", i.whitelist));
    if !i.damaged.is_empty() {
        lines.push(format!(
            "damaged         {} shards missing or of the wrong length",
            thousands(i.damaged.len() as u64)
        ));
    }
    Ok(Info {
        json: v,
        lines,
        problems: damage(filter, &i),
    })
}

/// The damaged shards, one line each (none for a sound filter).
fn damage(filter: &RedisFilter, i: &bloomgate_redis::Info) -> Vec<String> {
    let mut out = Vec::new();
    if i.damaged.is_empty() {
        return out;
    }
    let name = &filter.address().name;
    out.push(format!(
        "{}: the filter is damaged: {} of {} shards are missing or of the wrong length (evicted by Redis's maxmemory policy, or deleted); lookups that need them fail — push the filter again, and set maxmemory-policy noeviction",
        filter.address().display(),
        thousands(i.damaged.len() as u64),
        thousands(i.shards)
    ));
    for (shard, problem) in i.damaged.iter().take(SHOW_DAMAGED) {
        out.push(format!(
            "shard {shard} ({}): {problem}",
            bloomgate_redis::layout::shard_key(name, *shard)
        ));
    }
    if i.damaged.len() > SHOW_DAMAGED {
        out.push(format!(
            "... and {} more",
            thousands((i.damaged.len() - SHOW_DAMAGED) as u64)
        ));
    }
    out
}
