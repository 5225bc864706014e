//! Every sizing and rate function ends, in bounded time, for any
//! input: the whole `u64`/`u32` range and every `f64` class (NaN, ±∞,
//! subnormals, huge values); the rates stay in `[0, 1]`.

use super::*;
use proptest::prelude::*;
use std::time::{Duration, Instant};

/// Generous for a loaded machine: a loop that does not end takes
/// forever, a bounded one milliseconds.
const BOUND: Duration = Duration::from_secs(20);

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let v = f();
    assert!(t.elapsed() < BOUND, "{what} took {:?}", t.elapsed());
    v
}

fn rate(what: &str, fp: f64) {
    assert!((0.0..=1.0).contains(&fp), "{what} = {fp}");
}

/// Integers biased towards the edges (0, 1, 2⁵³ and up, u64::MAX)
/// as well as the whole range.
fn int() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        Just(0u64),
        Just(1u64),
        Just(u64::MAX),
        (53u32..64).prop_map(|e| 1u64 << e),
        0u64..100_000,
    ]
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        proptest::num::f64::ANY,
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(9.007_199_254_740_992e15),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
        (0u64..u64::MAX).prop_map(|v| v as f64),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn rates_end_and_stay_rates(m in int(), n in float(), ni in int(), k in any::<u32>(), small_k in 0u32..70) {
        for k in [k, small_k] {
            for n in [n, ni as f64] {
                for layout in [Layout::Blocked, Layout::Classic] {
                    let fp = timed("predicted_fp", || layout.predicted_fp(m, n, k));
                    if m > 0 && n >= 0.0 && !n.is_nan() {
                        rate("predicted_fp", fp);
                    }
                }
                rate("blocked_fp_mean_fill", timed("mean fill", || blocked_fp_mean_fill(m as f64, n, k, 512.0)));
                rate("counting_fp", timed("counting_fp", || counting_fp(m, n, k)));
                rate("counting_saturation", timed("saturation", || counting_saturation(m, n, k)));
                let _ = timed("estimate_items", || estimate_items(m, k, ni));
            }
        }
    }

    #[test]
    fn best_k_ends(m in int(), n in float(), ni in int()) {
        for n in [n, ni as f64] {
            for layout in [Layout::Blocked, Layout::Classic] {
                let k = timed("best_k", || layout.best_k(m, n));
                prop_assert!((1..=MAX_K).contains(&k));
            }
            let k = timed("counting_best_k", || counting_best_k(m, n));
            prop_assert!((1..=MAX_COUNTING_K).contains(&k));
        }
    }

    #[test]
    fn plans_end(items in int(), p in float(), b in any::<u32>()) {
        for layout in [Layout::Blocked, Layout::Classic] {
            if let Ok(pl) = timed("plan", || plan(layout, items, p)) {
                prop_assert!(pl.bits > 0 && pl.bits < 1 << 63);
            }
        }
        let _ = timed("plan_counting", || plan_counting(items, p));
        let _ = timed("plan_cuckoo", || plan_cuckoo(items, p, b));
        let _ = timed("plan_cuckoo", || plan_cuckoo(items, p, 4));
        let _ = timed("cuckoo_fp", || cuckoo_fp(b, b, p));
        let _ = timed("per_lookup_rate", || per_lookup_rate(p, b));
        let _ = timed("scaling_layer_rate", || scaling_layer_rate(p, b));
        let _ = timed("compound_fp", || compound_fp([p, p, 0.5]));
    }
}

/// The header of the frozen-server report: 2⁶⁴ − 1 items in 11,776
/// bits put λ near 2⁶³ items per block.
#[test]
fn overfull_filter_rate_is_one() {
    let n = u64::MAX as f64;
    assert_eq!(blocked_fp_mean_fill(11_776.0, n, 7, 512.0), 1.0);
    assert_eq!(Layout::Blocked.predicted_fp(11_776, n, 7), 1.0);
    assert_eq!(counting_saturation(128, n, 7), 1.0);
    let k = Layout::Blocked.best_k(11_776, n);
    assert!((1..=MAX_K).contains(&k));
}
