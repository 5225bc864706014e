use super::*;

#[test]
fn saturation_is_negligible_at_plan() {
    let c = plan_counting(1_000_000, 1e-4).unwrap();
    let s = counting_saturation(c.counters, 1e6, c.k);
    println!("saturation {s:e}");
    assert!(s < 1e-15, "{s}");
    // And it grows with overload, as it must.
    assert!(counting_saturation(c.counters, 3e7, c.k) > s);
}

#[test]
fn counting_costs_at_1e4_as_documented() {
    // The module docs' table: blocked 128-counter blocks need 30.94
    // counters (123.8 bits) per item with k = 10 at p = 1e-4, against
    // the classic optimum's 19.17 counters (76.7 bits).
    let c = plan_counting(10_000_000_000, 1e-4).unwrap();
    assert_eq!(c.k, 10);
    assert!(
        (123.7..123.9).contains(&c.bits_per_item()),
        "{}",
        c.bits_per_item()
    );
    assert!(
        (154.6e9..154.8e9).contains(&(c.bytes() as f64)),
        "{}",
        c.bytes()
    );
    assert!(c.predicted_fp <= 1e-4);
    // One block fewer misses the target.
    let fewer = c.counters - COUNTING_BLOCK_COUNTERS;
    assert!(counting_fp(fewer, 1e10, counting_best_k(fewer, 1e10)) > 1e-4);
    let (classic, _) = classic_optimum(1e-4);
    assert!((4.0 * classic - 76.68).abs() < 0.01, "{}", 4.0 * classic);
}

#[test]
fn cuckoo_plan_as_documented() {
    assert_eq!(cuckoo_fingerprint_bits(1e-4, 4), 17);
    assert_eq!(cuckoo_fingerprint_bits(1e-2, 4), 10);
    // At full load the rate is still within the target, and one bit
    // fewer would not be.
    for p in [1e-2, 1e-4, 1e-6] {
        for b in 1..=8 {
            let f = cuckoo_fingerprint_bits(p, b);
            assert!(cuckoo_fp(f, b, 1.0) <= p, "p {p} b {b}");
            assert!(cuckoo_fp(f - 1, b, 1.0) > p * 0.99, "p {p} b {b}");
        }
    }
    // Exact sizes: ~17.9 bits per item at any n, the load 95 %.
    let q = plan_cuckoo(10_000_000_000, 1e-4, 4).unwrap();
    assert_eq!((q.buckets, q.fingerprint_bits), (2_631_578_948, 17));
    assert!(
        (17.89..17.9).contains(&q.bits_per_item()),
        "{}",
        q.bits_per_item()
    );
    assert_eq!(q.bytes(), 22_368_421_120);
    for n in [1_000, 996_000, 1_000_000, 1_048_577, 123_456_789] {
        let q = plan_cuckoo(n, 1e-4, 4).unwrap();
        assert_eq!(q.buckets, (n as f64 / 3.8).ceil() as u64, "n {n}");
        assert!(
            (17.89..18.5).contains(&q.bits_per_item()),
            "n {n}: {}",
            q.bits_per_item()
        );
        assert!((0.94..=0.95).contains(&q.load()), "n {n}: {}", q.load());
        assert!(q.predicted_fp <= 1e-4, "n {n}");
    }
    assert_eq!(plan_cuckoo(1, 1e-4, 4).unwrap().buckets, 1);
    assert_eq!(plan_cuckoo(10, 1e-4, 9), Err(PlanError::BadBucketSize(9)));
    assert!(matches!(
        plan_cuckoo(10, 1e-12, 4),
        Err(PlanError::RateTooLow { .. })
    ));
}
