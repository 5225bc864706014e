//! bloomgate vs fastbloom, bloomfilter, sbbf-rs (and xorf BinaryFuse16) in one
//! process, on the same synthetic URL keys at the same bits per item.
//!
//! ```text
//! cargo run --release -p bloomgate-bench --bin filters -- quick     # sanity: 1 MiB + 64 MiB
//! cargo run --release -p bloomgate-bench --bin filters -- full      # 1 MiB + 2 GiB (DRAM)
//! options: --dram-mib N  --reps R  --hits N  --misses N  --no-thp-row  --no-classic
//!          --no-slow-peers (no fastbloom/bloomfilter)  --real-fill  --no-dram
//!          --hash-id 1|2|3 (bloomgate-blocked's hash; default what a new filter gets)
//!          (--no-classic and --no-slow-peers apply in cache and at DRAM size)
//! ```
//!
//! Every number printed is a median of `reps` repetitions. The harness checks
//! its answers: every looked-up inserted key must be found by every filter
//! (panic otherwise), and every measured false-positive count must be
//! plausible against the filter's own prediction (non-zero exit otherwise).

//! One module per role: `subject.rs` the trait every filter is timed
//! through, `ours.rs` bloomgate's filters, `peers.rs` the other libraries,
//! `measure.rs` the timed loops, `report.rs` the results and tables,
//! `scenario.rs` the in-cache and DRAM runs, `kernels.rs` the in-block
//! kernels alone.

mod kernels;
mod measure;
mod ours;
mod peers;
mod report;
mod scenario;
mod subject;

use std::time::Instant;

use bloomgate_bench::{cpu_model, num_arg, thp_policy};

use bloomgate_engine::{HashId, Layout};

use crate::kernels::kernel_dram;
use crate::ours::{hash_for, FORCED_HASH};
use crate::scenario::{bits_for, dram, in_cache, items_for, Cfg};
use crate::subject::TARGET_FP;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(|a| a == "kernel-dram").unwrap_or(false) {
        let mib = num_arg(&args, "--dram-mib").map_or(2048, |m| m as u64);
        kernel_dram(mib << 20, 5);
        return;
    }
    let full = args.iter().any(|a| a == "full");
    if let Some(id) = num_arg(&args, "--hash-id") {
        let hash = HashId::from_code(id as u8)
            .expect("--hash-id: 1 (xxh3-128), 2 (xxh3-64) or 3 (xxh3-64-words)");
        FORCED_HASH.set(hash).expect("set once");
    }
    let get = |name: &str| num_arg(&args, name);
    let cfg = Cfg {
        reps: get("--reps").map(|x| x as usize).unwrap_or(5),
        dram_bytes: (get("--dram-mib").unwrap_or(if full { 2048.0 } else { 64.0 })
            * (1 << 20) as f64) as u64,
        hits: get("--hits").map(|x| x as usize).unwrap_or(if full {
            10_000_000
        } else {
            1_000_000
        }),
        misses: get("--misses").map(|x| x as usize).unwrap_or(if full {
            10_000_000
        } else {
            1_000_000
        }),
        thp_row: !args.iter().any(|a| a == "--no-thp-row"),
        with_slow_peers: !args.iter().any(|a| a == "--no-slow-peers"),
        with_classic: !args.iter().any(|a| a == "--no-classic"),
        synthetic: !args.iter().any(|a| a == "--real-fill"),
    };
    let in_cache_bytes = (get("--cache-kib").unwrap_or(1024.0) * 1024.0) as u64;
    println!(
        "## filters benchmark ({})\n",
        if full { "full" } else { "quick" }
    );
    println!(
        "CPU: {} ({} logical CPUs), THP policy: {}, reps: {}, target p = {TARGET_FP:e}, keys: synthetic URLs `http://host<h>.example/path/<i>[?q=<x>]`; sbbf-rs and xorf get seeded xxh3-64 of the key (hashing inside the timing); sbbf-rs's buffer gets transparent huge pages (2 MiB aligned, MADV_HUGEPAGE before first touch) from 4 MiB on, like bloomgate's own filters.",
        cpu_model(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        thp_policy(),
        cfg.reps
    );
    println!(
        "bloomgate-blocked hashes with {} (hash id {}; `--hash-id 1`, `2` or `3` chooses), bloomgate-classic with {}.",
        hash_for(Layout::Blocked, 1 << 20, 12),
        hash_for(Layout::Blocked, 1 << 20, 12).code(),
        hash_for(Layout::Classic, 1 << 20, 12)
    );
    let t0 = Instant::now();
    let mut failures = vec![];
    let r = in_cache(&cfg, in_cache_bytes);
    let bits = bits_for(in_cache_bytes);
    r.print("In-cache", items_for(bits), bits / 8);
    failures.extend(r.failures);
    if !args.iter().any(|a| a == "--no-dram") {
        let r = dram(&cfg);
        let bits = bits_for(cfg.dram_bytes);
        r.print(
            if cfg.dram_bytes >= 2 << 30 {
                "DRAM-resident"
            } else {
                "Larger (quick)"
            },
            items_for(bits),
            bits / 8,
        );
        failures.extend(r.failures);
    }
    println!("\n(total {:.0} s)", t0.elapsed().as_secs_f64());
    if !failures.is_empty() {
        eprintln!("\nIMPLAUSIBLE RESULTS:");
        for f in &failures {
            eprintln!("  {f}");
        }
        std::process::exit(1);
    }
}
