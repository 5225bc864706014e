//! Tests of the chain, its fill policies and its `.meta` files.

use super::meta::Meta;
use super::*;
use bloomgate_engine::Layout;

fn file(path: &Path, items: u64, fp: f64, key: &[u8]) {
    let mut f = Filter::create_file(
        path,
        Params::from_plan(&plan(Layout::Blocked, items, fp).unwrap(), 3),
    )
    .unwrap();
    f.insert(key);
    f.persist().unwrap();
}

#[test]
fn every_layer_is_read_and_a_stray_layer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("f.bgf");
    file(&base, 100, 0.005, b"zero");
    file(&layer_path(&base, 1), 200, 0.0025, b"one");
    // Layer files without growth settings: answering from layer 0 alone
    // could miss items, so opening fails and says what to do.
    let e = Layers::open(&base, Access::ReadOnly)
        .unwrap_err()
        .to_string();
    assert!(e.contains("growth settings are missing"), "{e}");
    std::fs::write(meta_path(&base), br#"{"expansion":2,"nonscaling":false}"#).unwrap();
    let l = Layers::open(&base, Access::ReadOnly).unwrap();
    assert_eq!(l.layers.len(), 2);
    assert!(l.contains(b"zero") && l.contains(b"one"));
    // Without a recorded rate, layer 0's stands in.
    assert_eq!(l.target_fp(), 0.005);
    let mut out = Vec::new();
    l.contains_batch(&[&b"one"[..], b"zero", b"none"], &mut out, &mut Vec::new());
    assert_eq!(out, [true, true, false]);
    // The next layer: expansion × capacity at half the newest's rate.
    let next = l.next_layer().unwrap().unwrap();
    assert_eq!(next.planned_items, 400);
    assert_eq!(next.target_fp, 0.00125);
}

#[test]
fn nonscaling_refuses_unless_forced_and_growth_respects_limits() {
    let mut p = Params::from_plan(&plan(Layout::Blocked, 2, 0.01).unwrap(), 1);
    p.planned_items = 2;
    let mut l = Layers::single(Filter::new(p).unwrap()).unwrap();
    l.fill = FillPolicy::Refuse;
    l.rate = Some(0.01);
    let mut mem = |p: Params| Filter::new(p).map_err(Error::from);
    for k in [&b"a"[..], b"b"] {
        assert_eq!(
            l.insert(k, false, GrowLimits::default(), &mut mem)
                .unwrap()
                .0,
            Added::New
        );
    }
    let (a, grown) = l
        .insert(b"c", false, GrowLimits::default(), &mut mem)
        .unwrap();
    assert_eq!((a, grown.is_none()), (Added::Full, true));
    assert!(!l.contains(b"c"));
    // An acknowledged add is never refused.
    assert_eq!(
        l.insert(b"c", true, GrowLimits::default(), &mut mem)
            .unwrap()
            .0,
        Added::New
    );
    assert!(l.contains(b"c"));
    // Scaling, but no room to grow: refused, or forced into the last layer.
    l.fill = FillPolicy::Grow { expansion: 2 };
    l.rate = None;
    let tight = GrowLimits {
        max_bytes: l.bytes(),
    };
    let e = l.insert(b"d", false, tight, &mut mem).unwrap_err();
    assert!(matches!(e, Error::CannotGrow(_)), "{e}");
    assert_eq!(l.insert(b"d", true, tight, &mut mem).unwrap().0, Added::New);
    let (a, grown) = l
        .insert(b"e", false, GrowLimits::default(), &mut mem)
        .unwrap();
    assert_eq!(a, Added::New);
    let grown = grown.expect("grew");
    assert_eq!(grown.layers.len(), 2);
    assert!(grown.contains(b"e") && grown.contains(b"a"));
}

fn raw_params(plan: &bloomgate_engine::Plan, seed: u64) -> Params {
    let mut p = Params::from_plan(plan, seed);
    p.key_kind = KeyKind::Raw.as_u8();
    p
}

/// A new in-memory filter of raw keys under `policy`.
fn state(policy: &FillPolicy, layout: Layout, capacity: u64, p: f64, seed: u64) -> Layers {
    let plan = Layers::plan_first(policy, layout, capacity, p).unwrap();
    Layers::create(raw_params(&plan, seed), policy, Purpose::Dedup, p, 1000).unwrap()
}

fn rotate(generations: u32, window: u64) -> FillPolicy {
    FillPolicy::Rotate(Rotate {
        generations,
        window,
        window_secs: None,
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
    /// The model: a HashSet of what was added. Never a false negative
    /// under grow and refuse; under rotate, never one within the window
    /// (counted in new adds since the key's own add). `New` is never
    /// told for a key the filter must still hold.
    #[test]
    fn policies_against_a_set(
        ops in proptest::collection::vec(0u32..600, 1..1500),
        which in 0u8..3,
        generations in 2u32..6,
        classic in proptest::prelude::any::<bool>(),
    ) {
        let layout = if classic { Layout::Classic } else { Layout::Blocked };
        let policy = match which {
            0 => FillPolicy::Grow { expansion: 2 },
            1 => FillPolicy::Refuse,
            _ => rotate(generations, 40),
        };
        let mut l = state(&policy, layout, 40, 0.01, 7);
        // key -> count of new adds when it was added
        let mut added: std::collections::HashMap<u32, u64> = Default::default();
        let mut news = 0u64;
        for (step, k) in ops.iter().enumerate() {
            let key = k.to_le_bytes();
            let must_hold = |at: &u64, news: u64| match &policy {
                FillPolicy::Rotate(r) => news - at < r.window,
                _ => true,
            };
            let held = added.get(k).is_some_and(|at| must_hold(at, news));
            let got = l.add(&key, 1000 + step as u64).unwrap();
            if held {
                proptest::prop_assert_eq!(got, Added::Exists, "step {} key {}", step, k);
            }
            match got {
                Added::New => {
                    added.insert(*k, news);
                    news += 1;
                }
                // A key reported present that was never added is a
                // false positive: nothing was inserted, nothing promised.
                Added::Exists => {}
                Added::Full => {
                    proptest::prop_assert_eq!(&policy, &FillPolicy::Refuse);
                    proptest::prop_assert!(l.items() >= 40);
                }
            }
            if step % 64 != 0 && step + 1 != ops.len() {
                continue;
            }
            for (key, at) in &added {
                if must_hold(at, news) {
                    proptest::prop_assert!(l.contains(&key.to_le_bytes()), "step {} lost {}", step, key);
                }
            }
        }
        if let FillPolicy::Rotate(r) = &policy {
            proptest::prop_assert!(l.layers.len() <= r.generations as usize);
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    /// Rotation across runs: each run opens the state saved by the one
    /// before (a new state for the first), adds `runs[i]` distinct keys
    /// and saves. At every size the state reopens, keeps its policy,
    /// holds every key of the last window of new adds, answers as the
    /// in-memory chain it was saved from, and leaves no stray files.
    #[test]
    fn rotation_survives_save_and_reopen_at_every_size(
        runs in proptest::collection::vec(0u64..130, 1..6),
        generations in 2u32..6,
        window in 4u64..40,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("r.bgf");
        let policy = rotate(generations, window);
        let mut next = 0u64;
        let mut news: Vec<u64> = Vec::new();
        for (run, &n) in runs.iter().enumerate() {
            let mut l = if run == 0 {
                state(&policy, Layout::Blocked, window, 1e-6, 9)
            } else {
                Layers::open(&base, Access::ReadOnly).unwrap()
            };
            for _ in 0..n {
                if l.add(&next.to_le_bytes(), 1000).unwrap() == Added::New {
                    news.push(next);
                }
                next += 1;
            }
            l.save(&base).unwrap();
            let back = Layers::open(&base, Access::ReadOnly);
            proptest::prop_assert!(back.is_ok(), "run {} ({} keys): {:?}", run, n, back.err());
            let back = back.unwrap();
            proptest::prop_assert_eq!(&back.policy(), &policy);
            proptest::prop_assert!(back.layers.len() <= generations as usize);
            let recent = news.len().saturating_sub(window as usize);
            for k in &news[recent..] {
                proptest::prop_assert!(back.contains(&k.to_le_bytes()), "run {} lost {}", run, k);
            }
            for k in 0..next + 50 {
                let key = k.to_le_bytes();
                proptest::prop_assert_eq!(back.contains(&key), l.contains(&key), "key {}", k);
            }
            let Forgetting::Rotate { ring, .. } = &back.rules.forgetting else {
                panic!("not a ring")
            };
            for i in 1..=(MAX_LAYERS * 2) {
                let listed = ring.iter().any(|g| g.file as usize == i);
                proptest::prop_assert_eq!(layer_path(&base, i).exists(), listed, "layer file {}", i);
            }
        }
    }
}

#[test]
fn a_new_ring_that_moved_past_its_first_file_saves_the_anchor() {
    // G = 4, N = 1000 (a generation of 334): 5,000 adds leave the ring
    // on files 1–4, so the first-layer file was never written.
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("r.bgf");
    let mut l = state(&rotate(4, 1000), Layout::Blocked, 1000, 1e-6, 5);
    for i in 0..5000u64 {
        l.add(&i.to_le_bytes(), 1000).unwrap();
    }
    let Forgetting::Rotate { ring, .. } = &l.rules.forgetting else {
        panic!("not a ring")
    };
    assert!(ring.iter().all(|g| g.file != 0), "{ring:?}");
    l.save(&base).unwrap();
    let back = Layers::open(&base, Access::ReadOnly).unwrap();
    assert_eq!(back.policy(), l.policy());
    assert!((4000..5000u64).all(|i| back.contains(&i.to_le_bytes())));
}

#[test]
fn add_batch_answers_as_add() {
    // (Grown layers get fresh random seeds, so two grown chains differ
    // in their false positives; the ring and the cleared filter keep
    // their seed, and batch and single adds must agree exactly.)
    for policy in [rotate(3, 500), FillPolicy::Clear { at: 0.3 }] {
        let keys: Vec<[u8; 8]> = (0..5000u64).map(|i| (i % 3000).to_le_bytes()).collect();
        let mut a = state(&policy, Layout::Blocked, 500, 0.01, 9);
        let mut b = state(&policy, Layout::Blocked, 500, 0.01, 9);
        let one: Vec<Added> = keys.iter().map(|k| a.add(k, 5).unwrap()).collect();
        let mut batch = Vec::new();
        for part in keys.chunks(777) {
            let mut out = Vec::new();
            b.add_batch(part, 5, &mut out).unwrap();
            batch.extend(out);
        }
        assert_eq!(one, batch, "{policy}");
        assert_eq!(a.items(), b.items(), "{policy}");
        assert_eq!(a.layers.len(), b.layers.len(), "{policy}");
    }
}

/// The server's path: a published chain stays as it was for readers
/// until a rotation or clear hands back a new one, the answers are
/// `add`'s, and the key went into the bits the published chain shares.
#[test]
fn add_published_answers_as_add_and_hands_back_changed_chains() {
    for policy in [rotate(3, 100), FillPolicy::Clear { at: 0.3 }] {
        let mut a = state(&policy, Layout::Blocked, 100, 0.01, 9);
        let mut published = Arc::new(state(&policy, Layout::Blocked, 100, 0.01, 9));
        let mut changes = 0;
        for i in 0..1000u64 {
            let k = (i % 700).to_le_bytes();
            let want = a.add(&k, 5).unwrap();
            let before = published.clone();
            let (got, next) = published.add_published(&k, 5).unwrap();
            assert_eq!(got, want, "{policy}: key {i}");
            match next {
                Some(n) => {
                    changes += 1;
                    published = Arc::new(n);
                }
                None => assert!(before.contains(&k), "{policy}: in the shared bits"),
            }
            assert_eq!(published.items(), a.items(), "{policy}");
            assert_eq!(published.layers.len(), a.layers.len(), "{policy}");
        }
        assert!(changes >= 3, "{policy}: {changes} rotations or clears");
    }
}

/// Measured FP of a chain after growth or rotation, against the
/// compound prediction, over never-added keys. Deterministic seeds;
/// 2·10⁵ probes at rates of ~1 % give ~2,000 false positives (±2.2 %
/// one sigma), so ±15 % is a real test of the formula, not of noise.
#[test]
fn measured_fp_within_15_percent_after_growth_and_rotation() {
    for (policy, adds) in [
        (FillPolicy::Grow { expansion: 2 }, 35_000u64),
        (rotate(4, 6_000), 40_000),
        (FillPolicy::Refuse, 5_000),
    ] {
        for layout in [Layout::Blocked, Layout::Classic] {
            let mut l = state(&policy, layout, 5_000, 0.02, 11);
            for i in 0..adds {
                let a = l.add(&(i | 1 << 40).to_le_bytes(), 0).unwrap();
                assert!(a != Added::Full || policy == FillPolicy::Refuse);
            }
            match &policy {
                FillPolicy::Grow { .. } => assert!(l.layers.len() >= 3, "{}", l.layers.len()),
                FillPolicy::Rotate(r) => {
                    assert_eq!(l.layers.len(), r.generations as usize);
                    // every generation at or below its planned load
                    assert!(l
                        .layers
                        .iter()
                        .all(|f| f.items() <= f.params().planned_items));
                }
                _ => {}
            }
            let probes = 200_000u64;
            let fps = (0..probes)
                .filter(|i| l.contains(&(i | 7 << 50).to_le_bytes()))
                .count() as f64;
            let measured = fps / probes as f64;
            let predicted = l.predicted_fp();
            let ratio = measured / predicted;
            assert!(
                (0.85..=1.15).contains(&ratio),
                "{policy} {layout}: measured {measured:.4e}, predicted {predicted:.4e} ({ratio:.3})"
            );
            // and the promise: at most the rate asked for (full chain)
            assert!(predicted <= 0.02 * 1.0001, "{policy} {layout}: {predicted}");
        }
    }
}

#[test]
fn clear_empties_at_the_fill_threshold_and_is_refused_for_url_and_host_blacklists() {
    let policy = FillPolicy::Clear { at: 0.5 };
    let mut l = state(&policy, Layout::Classic, 1000, 0.01, 3);
    let p = l.layers[0].params().clone();
    let n = clear_items(p.bits, p.k, 0.5);
    let mut i = 0u64;
    while l.items() < n {
        l.add(&i.to_le_bytes(), 0).unwrap();
        i += 1;
    }
    let fill = l.layers[0].count_ones() as f64 / p.bits as f64;
    assert!((fill - 0.5).abs() < 0.02, "fill {fill} at {n} items");
    assert!(matches!(
        l.rules.forgetting,
        Forgetting::Clear { clears: 0, .. }
    ));
    assert_eq!(l.add(b"next", 0).unwrap(), Added::New);
    assert_eq!(l.items(), 1);
    assert!(matches!(
        l.rules.forgetting,
        Forgetting::Clear { clears: 1, .. }
    ));
    assert!(!l.contains(&0u64.to_le_bytes()) || l.contains(b"never"));
    for kind in [KeyKind::Url, KeyKind::Host] {
        for forget in [FillPolicy::Clear { at: 0.8 }, rotate(3, 100)] {
            let e = check_policy(&forget, kind, Purpose::Blacklist).unwrap_err();
            assert!(e.to_string().contains("must never forget"), "{e}");
            check_policy(&forget, kind, Purpose::Dedup).unwrap();
        }
        check_policy(&FillPolicy::Grow { expansion: 2 }, kind, Purpose::Blacklist).unwrap();
    }
    check_policy(
        &FillPolicy::Clear { at: 0.8 },
        KeyKind::Raw,
        Purpose::Blacklist,
    )
    .unwrap();
    assert!(check_policy(&FillPolicy::Clear { at: 1.0 }, KeyKind::Raw, Purpose::Dedup).is_err());
    assert!(check_policy(&rotate(1, 100), KeyKind::Raw, Purpose::Dedup).is_err());
}

#[test]
fn time_window_rotates_and_forgets_after_it() {
    let policy = FillPolicy::Rotate(Rotate {
        generations: 3,
        window: 1_000_000,
        window_secs: Some(100),
    });
    let mut l = state(&policy, Layout::Blocked, 1000, 0.01, 5);
    // started at t = 1000; a generation lasts 50 s
    l.add(b"old", 1000).unwrap();
    l.add(b"mid", 1060).unwrap();
    assert_eq!(l.layers.len(), 2);
    assert!(l.contains(b"old") && l.contains(b"mid"));
    // 100 s after "old" was added it may go; at least 100 s it stays
    l.add(b"x", 1099).unwrap();
    assert!(l.contains(b"old"));
    l.add(b"y", 1160).unwrap();
    assert!(!l.contains(b"old") && l.contains(b"mid"));
    // a long pause forgets everything
    l.add(b"z", 5000).unwrap();
    assert!(!l.contains(b"mid") && l.contains(b"z"));
    assert!(l.layers.len() <= 3);
}

#[test]
fn save_and_reopen_and_an_uncommitted_save_keeps_the_previous_state() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("s.bgf");
    let mut l = state(&rotate(3, 200), Layout::Blocked, 200, 0.01, 21);
    let first: Vec<[u8; 8]> = (0..250u64).map(|i| i.to_le_bytes()).collect();
    for k in &first {
        l.add(k, 0).unwrap();
    }
    l.save(&base).unwrap();
    let mut r = Layers::open(&base, Access::ReadOnly).unwrap();
    assert_eq!(r.policy(), l.policy());
    assert_eq!(r.rules.purpose, Purpose::Dedup);
    assert_eq!(r.layers.len(), l.layers.len());
    assert!(first.iter().all(|k| r.contains(k)));
    // Rotate twice more in memory, write the layer files, but "crash"
    // before the .meta: the state on disk is still the previous one.
    // The keys of the last window: those added as new (a key reported
    // present is a false positive of the state before it, nothing was
    // inserted for it and nothing is promised, as in
    // `policies_against_a_set`).
    let mut last_window = Vec::new();
    for i in 1000..1400u64 {
        if r.add(&i.to_le_bytes(), 0).unwrap() == Added::New && i >= 1200 {
            last_window.push(i);
        }
    }
    assert!(last_window.len() > 190, "{}", last_window.len());
    r.write_layers(&base).unwrap();
    let back = Layers::open(&base, Access::ReadOnly).unwrap();
    assert!(
        first.iter().all(|k| back.contains(k)),
        "lost the committed state"
    );
    assert_eq!(back.layers.len(), l.layers.len());
    // The full save commits, drops the old generations' files, and a
    // further save reuses freed indices.
    r.save(&base).unwrap();
    let now = Layers::open(&base, Access::ReadOnly).unwrap();
    assert!(last_window.iter().all(|i| now.contains(&i.to_le_bytes())));
    let Forgetting::Rotate { ring, .. } = &now.rules.forgetting else {
        panic!("not a ring")
    };
    for i in 1..8usize {
        let listed = ring.iter().any(|g| g.file as usize == i);
        assert_eq!(layer_path(&base, i).exists(), listed, "layer file {i}");
    }
    // The server's and add's in-place path refuses a forgetting policy.
    let mut mem = |p: Params| Filter::new(p).map_err(Error::from);
    let e = now
        .insert(b"k", false, GrowLimits::default(), &mut mem)
        .unwrap_err();
    assert!(e.to_string().contains("rotate"), "{e}");
}

#[test]
fn old_metas_keep_their_behaviour_and_unknown_policies_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("f.bgf");
    file(&base, 100, 0.01, b"a");
    std::fs::write(meta_path(&base), br#"{"expansion":2,"nonscaling":true}"#).unwrap();
    let l = Layers::open(&base, Access::ReadOnly).unwrap();
    assert_eq!(l.policy(), FillPolicy::Refuse);
    std::fs::write(meta_path(&base), br#"{"expansion":4,"nonscaling":false}"#).unwrap();
    let l = Layers::open(&base, Access::ReadOnly).unwrap();
    assert_eq!(l.policy(), FillPolicy::Grow { expansion: 4 });
    // What is written back names the policy and keeps the old fields.
    let json = l.meta_json().unwrap();
    assert_eq!(
        std::str::from_utf8(&json).unwrap(),
        r#"{"expansion":4,"nonscaling":false,"policy":"grow"}"#
    );
    std::fs::write(
        meta_path(&base),
        br#"{"expansion":2,"nonscaling":true,"policy":"shrink"}"#,
    )
    .unwrap();
    let e = Layers::open(&base, Access::ReadOnly).unwrap_err();
    assert!(e.to_string().contains("unknown fill policy"), "{e}");
    std::fs::write(
        meta_path(&base),
        br#"{"expansion":2,"nonscaling":true,"policy":"grow"}"#,
    )
    .unwrap();
    assert!(Layers::open(&base, Access::ReadOnly).is_err());
    std::fs::remove_file(meta_path(&base)).unwrap();
    assert_eq!(
        Layers::open(&base, Access::ReadOnly).unwrap().policy(),
        FillPolicy::Fixed
    );
}

/// `.meta` files as this version's predecessor wrote them (the CLI's
/// `build --policy`, `dedup --state`, and the server's `BF.RESERVE`, which
/// writes the growth settings alone): read back to the same fill policy,
/// and written again byte for byte.
#[test]
fn golden_metas_of_the_previous_version_read_and_write_back_identically() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("g.bgf");
    file(&base, 1000, 0.01, b"a");
    for i in 1..=3 {
        file(&layer_path(&base, i), 1000, 0.01, b"a");
    }
    let golden: [(&str, FillPolicy, Option<&str>); 5] = [
        (
            r#"{"error_rate":0.01,"expansion":4,"nonscaling":false,"policy":"grow"}"#,
            FillPolicy::Grow { expansion: 4 },
            None,
        ),
        (
            r#"{"error_rate":0.01,"expansion":2,"nonscaling":true,"policy":"refuse"}"#,
            FillPolicy::Refuse,
            None,
        ),
        (
            r#"{"error_rate":0.01,"expansion":2,"generations":3,"nonscaling":true,"policy":"rotate","purpose":"dedup","ring":[{"file":3,"started":1700000100},{"file":0,"started":1700000100},{"file":1,"started":1700000100}],"window":1000,"window_secs":60}"#,
            FillPolicy::Rotate(Rotate {
                generations: 3,
                window: 1000,
                window_secs: Some(60),
            }),
            None,
        ),
        (
            r#"{"clear_at":0.5,"clears":2,"error_rate":0.01,"expansion":2,"nonscaling":true,"policy":"clear","purpose":"dedup"}"#,
            FillPolicy::Clear { at: 0.5 },
            None,
        ),
        (
            r#"{"expansion":2,"nonscaling":false,"error_rate":0.01}"#,
            FillPolicy::Grow { expansion: 2 },
            Some(r#"{"error_rate":0.01,"expansion":2,"nonscaling":false,"policy":"grow"}"#),
        ),
    ];
    for (bytes, policy, rewritten) in golden {
        std::fs::write(meta_path(&base), bytes).unwrap();
        let l = Layers::open(&base, Access::ReadOnly).unwrap();
        assert_eq!(l.policy(), policy, "{bytes}");
        assert_eq!(l.rate, Some(0.01), "{bytes}");
        assert_eq!(l.target_fp(), 0.01, "{bytes}");
        let json = l.meta_json().unwrap();
        assert_eq!(
            std::str::from_utf8(&json).unwrap(),
            rewritten.unwrap_or(bytes)
        );
        // The growth settings alone (what the server writes and a
        // BF.SCANDUMP header carries) are the old file's first fields.
        let meta: Meta = serde_json::from_str(bytes).unwrap();
        assert_eq!(l.growth_meta(), Some(meta), "{bytes}");
    }
    // The last golden (clear) keeps its count and purpose.
    let clear = golden_clear(&base);
    assert_eq!(clear.rules.forgetting, Forgetting::Clear { clears: 2 });
    assert_eq!(clear.rules.purpose, Purpose::Dedup);
}

fn golden_clear(base: &Path) -> Layers {
    std::fs::write(
        meta_path(base),
        r#"{"clear_at":0.5,"clears":2,"error_rate":0.01,"expansion":2,"nonscaling":true,"policy":"clear","purpose":"dedup"}"#,
    )
    .unwrap();
    Layers::open(base, Access::ReadOnly).unwrap()
}
