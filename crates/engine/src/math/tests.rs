use super::*;

#[test]
fn seeds_worked_example_classic() {
    // n = 10^10, p = 1e-4: 19.17 bits per item exact, 20 rounded, 25 GB, k = 14, ~0.006 %.
    let (bpi, k) = classic_optimum(1e-4);
    assert!((bpi - 19.17).abs() < 0.01, "{bpi}");
    assert!((k - 13.29).abs() < 0.01, "{k}");
    let plan = plan(Layout::Classic, 10_000_000_000, 1e-4).unwrap();
    assert_eq!(plan.bits, 200_000_000_000);
    assert_eq!(plan.bytes(), 25_000_000_000);
    assert_eq!(plan.k, 14);
    assert!(
        plan.predicted_fp > 0.00006 && plan.predicted_fp < 0.00007,
        "{}",
        plan.predicted_fp
    );
}

#[test]
fn blocked_plan_matches_putze() {
    let plan = plan(Layout::Blocked, 10_000_000_000, 1e-4).unwrap();
    let bpi = plan.bits_per_item();
    // Sized for hash id 3's probes (`math::words`): 22.16 bits per item,
    // where the probes of hash ids 1 and 2 need 22.03 (and the mean-fill
    // formula, which under-predicts by 3.9 %, says 21.9).
    assert!((22.1..22.2).contains(&bpi), "{bpi}");
    assert_eq!(plan.k, 12);
    assert!(plan.predicted_fp <= 1e-4);
    assert!(plan.bytes() < 30_000_000_000);
    assert!((27.6e9..27.8e9).contains(&(plan.bytes() as f64)));
    assert!(blocked_fp(plan.bits as f64, 1e10, 12, 512.0) < 0.99e-4);
    // The smallest m: one block less does not meet the target.
    let fewer = plan.bits - BLOCK_BITS;
    let k = Layout::Blocked.best_k(fewer, 1e10);
    assert!(Layout::Blocked.predicted_fp(fewer, 1e10, k) > 1e-4);
}

#[test]
fn blocked_fp_tends_to_classic_for_big_blocks() {
    // With one huge block the mixture collapses to the classic formula.
    let m = 1e6;
    let c = classic_fp(m, 5e4, 10);
    let b = blocked_fp(m, 5e4, 10, m);
    assert!((c - b).abs() / c < 0.01, "{c} vs {b}");
}

#[test]
fn bad_inputs() {
    assert_eq!(plan(Layout::Blocked, 0, 0.1), Err(PlanError::NoItems));
    assert!(matches!(
        plan(Layout::Blocked, 10, 0.0),
        Err(PlanError::BadRate(_))
    ));
    assert!(matches!(
        plan(Layout::Classic, 10, 1.0),
        Err(PlanError::BadRate(_))
    ));
    assert!(matches!(
        plan(Layout::Classic, 10, f64::NAN),
        Err(PlanError::BadRate(_))
    ));
    assert!(matches!(
        plan(Layout::Classic, u64::MAX, 1e-9),
        Err(PlanError::TooLarge { .. })
    ));
}

#[test]
fn estimator_inverts_expected_fill() {
    let m = 1u64 << 20;
    let (k, n) = (7u32, 50_000f64);
    let ones = (m as f64 * (1.0 - (-(k as f64) * n / m as f64).exp())) as u64;
    let est = estimate_items(m, k, ones);
    assert!((est - n).abs() / n < 0.001);
}

#[test]
fn per_lookup_rate_is_consistent() {
    let r = per_lookup_rate(1e-4, 30);
    assert!((1.0 - (1.0 - r).powi(30) - 1e-4).abs() < 1e-12);
    assert_eq!(per_lookup_rate(1e-4, 1), 1e-4);
}

#[test]
fn scaling_series_stays_below_the_requested_rate() {
    for p in [0.1, 0.01, 1e-4, 1e-9] {
        assert_eq!(scaling_layer_rate(p, 0), p / 2.0);
        assert_eq!(scaling_layer_rate(p, 3), p / 16.0);
        let mut sum = 0.0;
        for layers in 1..=64u32 {
            sum += scaling_layer_rate(p, layers - 1);
            let c = compound_fp((0..layers).map(|i| scaling_layer_rate(p, i)));
            // Up to rounding; past 2^−53 the partial sums round to p.
            assert!(
                c <= sum * (1.0 + 1e-12) && sum <= p && c < p,
                "p {p} layers {layers}: {c} {sum}"
            );
        }
    }
    // Past the smallest f64 the rate is 0, never NaN.
    assert_eq!(scaling_layer_rate(0.5, u32::MAX), 0.0);
}

#[test]
fn occupancy_model_exceeds_mean_fill_by_jensen() {
    // At the p = 1e-4 optimum the exact occupancy model predicts 3.9 %
    // more than the mean-fill formula (measured: +4.4 % ± 1 %).
    let (m, n) = (21.9e6, 1e6);
    let exact = blocked_fp(m, n, 12, 512.0);
    let mean = blocked_fp_mean_fill(m, n, 12, 512.0);
    let ratio = exact / mean;
    assert!((1.03..1.05).contains(&ratio), "{ratio}");
    // One item per block: its own k probes can repeat, so fewer than k
    // bits are set: E[(S/B)^k] for S = occupancy of k throws. Checked
    // against direct enumeration for a tiny block (B = 4, k = 2).
    // Occupancy after 2 throws into 4 bins: 1 w.p. 1/4, 2 w.p. 3/4;
    // E[(S/4)^2] = 1/4·1/16 + 3/4·4/16 = 13/64.
    let lambda: f64 = 1.0;
    let m4 = 4.0 * 1e4;
    let got = blocked_fp(m4, 1e4 * lambda, 2, 4.0);
    // Σ Pois(i;1)·E_i, with E_0 = 0, E_1 = 13/64, E_2.. from the DP.
    let mut d = [1.0f64, 0.0, 0.0, 0.0, 0.0];
    let mut want = 0.0;
    for i in 0..60u32 {
        let w = (-(lambda)).exp() / (1..=i).map(f64::from).product::<f64>();
        let e: f64 = (0..5).map(|s| d[s] * (s as f64 / 4.0).powi(2)).sum();
        if i == 1 {
            assert!((e - 13.0 / 64.0).abs() < 1e-12);
        }
        want += w * e;
        for _ in 0..2 {
            for s in (1..5).rev() {
                d[s] = d[s] * s as f64 / 4.0 + d[s - 1] * (4 - (s - 1)) as f64 / 4.0;
            }
            d[0] = 0.0;
        }
    }
    assert!((got - want).abs() < 1e-9, "{got} vs {want}");
}

/// [`blocked_fp`]'s occupancy recurrence as it was first written: in place,
/// from the top occupancy down, both factors divided out at every step.
fn blocked_fp_in_place(m: f64, n: f64, k: u32, block_bits: f64) -> f64 {
    let lambda = block_bits * n / m;
    let b = block_bits as usize;
    let bf = block_bits;
    let cover: Vec<f64> = (0..=b).map(|s| (s as f64 / bf).powi(k as i32)).collect();
    let mut dist = vec![0.0f64; b + 1];
    dist[0] = 1.0;
    let mut top = 0usize;
    let mut sum = 0.0;
    let mode = lambda.floor();
    let mut i = 0.0f64;
    loop {
        let w = (i * lambda.ln() - lambda - ln_factorial(i)).exp();
        if w > 0.0 {
            let e: f64 = dist[..=top].iter().zip(&cover).map(|(p, c)| p * c).sum();
            sum += w * e;
        }
        if (i > mode && w < 1e-18) || i > mode + 10_000.0 {
            break;
        }
        for _ in 0..k {
            let new_top = (top + 1).min(b);
            for s in (1..=new_top).rev() {
                dist[s] = dist[s] * (s as f64 / bf) + dist[s - 1] * ((bf - (s - 1) as f64) / bf);
            }
            dist[0] = 0.0;
            top = new_top;
        }
        i += 1.0;
    }
    sum.min(1.0)
}

#[test]
fn blocked_fp_equals_the_in_place_recurrence_bit_for_bit() {
    // Plans (and so the files `build` writes) depend on every bit of these
    // rates: the vectorized recurrence must round exactly as the original.
    for block_bits in [4.0, 64.0, 128.0, 512.0, 1000.0] {
        for lambda in [0.01, 0.5, 1.0, 3.7, 23.0, 23.4, 41.9, 130.0] {
            for k in [1, 2, 7, 12, 16, 31, 64] {
                let m = block_bits * 1000.0;
                let n = lambda * 1000.0;
                let got = blocked_fp(m, n, k, block_bits);
                let want = blocked_fp_in_place(m, n, k, block_bits);
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "B = {block_bits}, λ = {lambda}, k = {k}: {got:e} vs {want:e}"
                );
            }
        }
    }
}

#[test]
fn least_classic_plan_meets_the_rate_with_the_fewest_blocks() {
    for (n, p) in [
        (10_000_000u64, 1e-4),
        (1_000, 1e-2),
        (123_457, 1e-6),
        (1, 0.5),
    ] {
        let least = plan_classic_least(n, p).unwrap();
        assert_eq!(least.layout, Layout::Classic);
        assert!(least.predicted_fp <= p, "{n} {p}: {least:?}");
        assert_eq!(least.bits % BLOCK_BITS, 0);
        // One block fewer misses the rate for every whole k.
        let fewer = least.bits - BLOCK_BITS;
        if fewer > 0 {
            assert!((1..=MAX_K).all(|k| classic_fp(fewer as f64, n as f64, k) > p));
        }
        // Never larger than the whole-bits plan.
        assert!(least.bits <= plan(Layout::Classic, n, p).unwrap().bits);
    }
    // 10⁷ at 10⁻⁴: k = 13, within 0.02 % of the unrounded optimum.
    let least = plan_classic_least(10_000_000, 1e-4).unwrap();
    let (opt, _) = classic_optimum(1e-4);
    assert_eq!(least.k, 13);
    assert!(least.bits_per_item() < opt * 1.0002, "{least:?}");
}
