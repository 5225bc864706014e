//! A profiling harness for the insert hot path (not a benchmark: see
//! crates/bench). Counts are taken with callgrind, which is exact and
//! repeatable on a loaded machine; the difference between two modes is the
//! cost of what one adds:
//!
//! ```text
//! cargo build --release -p bloomgate-engine --example insert_profile
//! valgrind --tool=callgrind target/release/examples/insert_profile single 200000
//! ```
//!
//! Modes: `keys` (building the keys only), `hash` (+ XXH3-128 of each key),
//! `single` (`Filter::insert`), `batch` (`Filter::insert_batch`),
//! `owned` (`Filter::insert_owned`), `owned-batch` (`Filter::insert_batch_owned`),
//! `contains` / `contains-batch` (an owned batch insert, then `n` lookups of
//! absent keys one at a time / through `Filter::contains_batch`).

use std::hint::black_box;

use bloomgate_engine::hash::hash_item;
use bloomgate_engine::{plan, Filter, Layout, Params};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map_or("single", String::as_str);
    let n: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    // ~1 MiB blocked filter at 1e-4 for 380,000 items: cache-resident.
    let mut f = Filter::new(Params::from_plan(
        &plan(Layout::Blocked, 380_000, 1e-4).unwrap(),
        7,
    ))
    .unwrap();
    let keys: Vec<String> = (0..n)
        .map(|i| format!("http://host{i}.example.com/path/{i}/index.html"))
        .collect();
    let mut new = 0u64;
    match mode {
        "keys" => new = keys.len() as u64,
        "hash" => {
            for k in &keys {
                new += black_box(hash_item(7, k.as_bytes())).lo & 1;
            }
        }
        "single" => {
            for k in &keys {
                new += f.insert(k.as_bytes()) as u64;
            }
        }
        "batch" => new = f.insert_batch(&keys),
        "owned" => {
            for k in &keys {
                new += f.insert_owned(k.as_bytes()) as u64;
            }
        }
        "owned-batch" => new = f.insert_batch_owned(&keys),
        "contains" | "contains-batch" => {
            f.insert_batch_owned(&keys);
            let probe: Vec<String> = (0..n)
                .map(|i| format!("http://host{i}.example.com/path/{i}/index.htm{}", i & 1))
                .collect();
            new = lookups(&f, &probe, mode == "contains-batch");
        }
        other => panic!("unknown mode {other}"),
    }
    println!("{mode}: {new} new of {n}");
}

/// The timed part of the lookup modes, apart so that callgrind can count it
/// alone (`--toggle-collect='*lookups*'`).
#[inline(never)]
fn lookups(f: &Filter, probe: &[String], batch: bool) -> u64 {
    if batch {
        let mut out = Vec::new();
        f.contains_batch(probe, &mut out);
        out.iter().filter(|&&b| b).count() as u64
    } else {
        probe
            .iter()
            .map(|k| f.contains(black_box(k.as_bytes())) as u64)
            .sum()
    }
}
