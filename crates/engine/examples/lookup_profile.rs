//! A profiling harness for the lookup hot path (not a benchmark: see
//! crates/bench). Run under `perf record`:
//!
//! ```text
//! cargo build --release -p bloomgate-engine --example lookup_profile
//! perf record target/release/examples/lookup_profile
//! ```

use std::time::Instant;

use bloomgate_engine::{plan, Filter, Layout, Params};

fn main() {
    let n = 380_000u64; // ~1 MiB blocked filter at 1e-4: cache-resident
    let f = Filter::new(Params::from_plan(
        &plan(Layout::Blocked, n, 1e-4).unwrap(),
        7,
    ))
    .unwrap();
    let keys: Vec<String> = (0..n)
        .map(|i| format!("http://host{i}.example.com/path/{i}/index.html"))
        .collect();
    f.insert_batch(&keys);
    let misses: Vec<String> = (0..n)
        .map(|i| format!("http://other{i}.example.com/path/{i}/index.html"))
        .collect();
    let mut found = 0u64;
    let start = Instant::now();
    let rounds = 20;
    for _ in 0..rounds {
        for k in &misses {
            found += f.contains(k.as_bytes()) as u64;
        }
        for k in &keys {
            found += f.contains(k.as_bytes()) as u64;
        }
    }
    let per = start.elapsed().as_nanos() as f64 / (rounds as f64 * 2.0 * n as f64);
    assert!(found >= rounds * n, "false negative");
    println!("{per:.1} ns per lookup ({found} found)");
}
