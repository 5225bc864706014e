//! What a sliced build's writes cost: items inserted into one slice of a
//! filter's bit array, written directly (each item's bits as it is hashed,
//! prefetched a few items ahead) and staged (records sorted by 2 MiB bucket,
//! then written; `bloomgate_engine::slice::Slice`'s "Staged writes"), for
//! both layouts and several slice sizes, on every core.
//!
//! ```text
//! cargo run --release -p bloomgate-bench --bin slice_writes -- [--gib 1,4,11] [--items 1e8] [--reps 3]
//! ```
//!
//! Each run fills a fresh slice once untimed (the first touch of its pages)
//! and then times inserting `--items` more keys (raw 8-byte keys, so hashing
//! is cheap and the same for both); the two ways must leave identical bits
//! (compared by checksum). Prints ns per item, the median of `--reps`.

use std::time::Instant;

use bloomgate_bench::{cpu_model, median, thp_policy};
use bloomgate_engine::slice::{plan_slices, Slice};
use bloomgate_engine::{plan, Layout, Params};
use clap::Parser;
use rayon::prelude::*;

#[derive(Parser)]
#[command(about = "Direct vs staged (sorted) writes into a large slice")]
struct Opts {
    /// Slice sizes in GiB.
    #[arg(long, value_delimiter = ',', default_values_t = [1.0, 4.0, 11.0])]
    gib: Vec<f64>,
    /// Items inserted in each timed round.
    #[arg(long, default_value_t = 1e8)]
    items: f64,
    /// Timed rounds (the median is printed).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Layouts: blocked, classic.
    #[arg(long, value_delimiter = ',', default_values_t = ["blocked".to_string(), "classic".to_string()])]
    layout: Vec<String>,
}

/// Keys per batch: about what one 4 MiB input chunk of URLs holds.
const BATCH: u64 = 65_536;

fn fill(s: &Slice, from: u64, n: u64) {
    (0..n.div_ceil(BATCH)).into_par_iter().for_each(|b| {
        let lo = from + b * BATCH;
        let hi = (lo + BATCH).min(from + n);
        let keys: Vec<[u8; 8]> = (lo..hi).map(|i| i.to_le_bytes()).collect();
        s.insert_batch(&keys);
    });
}

fn main() -> anyhow::Result<()> {
    let o = Opts::parse();
    println!(
        "CPU: {} · {} threads · THP {}",
        cpu_model(),
        rayon::current_num_threads(),
        thp_policy()
    );
    println!("layout    slice      direct ns/item   staged ns/item   staged/direct");
    let items = o.items as u64;
    for layout in &o.layout {
        let layout: Layout = layout.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
        for &gib in &o.gib {
            let bytes = (gib * (1u64 << 30) as f64) as u64;
            // A filter whose first slice under a budget of `bytes` is the
            // slice measured: planned for twice that, so the slice is half.
            let bits_per_item = match layout {
                Layout::Blocked => 22.03,
                Layout::Classic => 20.0,
            };
            let n = (2.0 * bytes as f64 * 8.0 / bits_per_item) as u64;
            let params = Params::from_plan(&plan(layout, n, 1e-4)?, 7);
            let range = plan_slices(&params, bytes)[0].clone();
            let mut times = [Vec::new(), Vec::new()];
            let mut sums = [0u64; 2];
            for rep in 0..o.reps {
                for (way, time) in times.iter_mut().enumerate() {
                    let s = Slice::new(&params, range.clone())?;
                    let s = if way == 0 { s.with_staging(0) } else { s };
                    fill(&s, 0, items / 4);
                    s.checksum();
                    let t = Instant::now();
                    fill(&s, 1 << 40, items);
                    s.new_items(); // writes what is still staged
                    time.push(t.elapsed().as_nanos() as f64 / items as f64);
                    let sum = s.checksum();
                    if rep == 0 {
                        sums[way] = sum;
                    }
                }
            }
            anyhow::ensure!(sums[0] == sums[1], "staged and direct bits differ");
            let (d, st) = (median(&times[0]), median(&times[1]));
            println!(
                "{:<9} {:>5.1} GiB {:>13.1} {:>16.1} {:>15.2}",
                layout.to_string(),
                (range.end - range.start) as f64 * 8.0 / (1u64 << 30) as f64,
                d,
                st,
                st / d
            );
        }
    }
    Ok(())
}
