//! The deletable filters' API end to end: insert, contains, remove, count,
//! saturation, a full cuckoo table, files and the any-kind opener.

use bloomgate_engine::format::{DeletableKind, LAYOUT_COUNTING, LAYOUT_CUCKOO};
use bloomgate_engine::{
    plan, plan_counting, plan_cuckoo, Access, AnyFilter, CountingFilter, CuckooChain, CuckooFilter,
    CuckooParams, Filter, FilterKind, Layout, Params, Removal,
};

#[test]
fn counting_insert_remove_with_multiplicity() {
    let f = CountingFilter::with_plan(&plan_counting(1000, 1e-3).unwrap(), 9).unwrap();
    assert!(f.insert(b"a"), "first insert is new");
    assert!(!f.insert(b"a"), "second is not");
    assert_eq!(f.items(), 2);
    assert_eq!(f.remove(b"a"), Removal::Removed);
    assert!(f.contains(b"a"), "inserted twice, deleted once");
    assert_eq!(f.remove(b"a"), Removal::Removed);
    assert!(!f.contains(b"a"));
    assert_eq!(f.remove(b"a"), Removal::NotPresent);
    assert_eq!(f.items(), 0);
    assert_eq!(f.nonzero_counters(), 0);
    assert!(!f.insert_if_absent(b"b") || f.contains(b"b"));
    assert!(!f.insert_if_absent(b"b"));
    assert_eq!(f.count(b"b"), 1);
}

#[test]
fn counting_saturates_at_15_and_never_loses_the_item() {
    let f = CountingFilter::with_plan(&plan_counting(1000, 1e-3).unwrap(), 9).unwrap();
    for _ in 0..20 {
        f.insert(b"hot");
    }
    let idx = f.counter_indices(b"hot");
    assert!(idx.iter().all(|&c| f.counter(c) == Some(15)));
    for _ in 0..20 {
        assert_eq!(f.remove(b"hot"), Removal::Removed);
    }
    assert!(
        f.contains(b"hot"),
        "saturated counters are never decremented"
    );
    assert!(idx.iter().all(|&c| f.counter(c) == Some(15)));
    assert_eq!(f.saturated_counters(), idx.len() as u64);
}

#[test]
fn counting_remove_of_absent_item_changes_nothing() {
    let f = CountingFilter::with_plan(&plan_counting(100, 1e-2).unwrap(), 1).unwrap();
    for i in 0..50u32 {
        f.insert(&i.to_le_bytes());
    }
    let before = f.as_bytes().to_vec();
    let mut absent = 0;
    for i in 1000..3000u32 {
        if !f.contains(&i.to_le_bytes()) {
            assert_eq!(f.remove(&i.to_le_bytes()), Removal::NotPresent);
            absent += 1;
        }
    }
    assert!(absent > 1900);
    assert_eq!(f.as_bytes(), &before[..]);
}

fn small_cuckoo(buckets: u64, b: u32, f: u32, kicks: u32) -> CuckooFilter {
    CuckooFilter::new(CuckooParams {
        buckets,
        bucket_size: b,
        fingerprint_bits: f,
        max_kicks: kicks,
        seed: 5,
        bucket_shift: 0,
        key_kind: 0,
        match_mode: 0,
        planned_items: buckets * b as u64,
        target_fp: 0.01,
    })
    .unwrap()
}

#[test]
fn cuckoo_insert_remove_count() {
    let f = CuckooFilter::with_plan(&plan_cuckoo(1000, 1e-4, 4).unwrap(), 3).unwrap();
    assert_eq!(f.params().fingerprint_bits, 17);
    assert_eq!(f.insert(b"x"), Ok(true));
    assert_eq!(f.insert(b"x"), Ok(false));
    assert_eq!(f.count(b"x"), 2);
    assert_eq!(f.remove(b"x"), Removal::Removed);
    assert!(f.contains(b"x"));
    assert_eq!(f.remove(b"x"), Removal::Removed);
    assert!(!f.contains(b"x"));
    assert_eq!(f.remove(b"x"), Removal::NotPresent);
    assert_eq!(f.insert_if_absent(b"y"), Ok(true));
    assert_eq!(f.insert_if_absent(b"y"), Ok(false));
    assert_eq!(f.count(b"y"), 1);
    assert_eq!(f.items(), 1);
}

#[test]
fn cuckoo_full_table_errors_and_keeps_everything() {
    for kicks in [0u32, 20, 500] {
        let f = small_cuckoo(64, 4, 12, kicks);
        let mut stored = Vec::new();
        let mut failures = 0;
        for i in 0..2000u32 {
            let key = i.to_le_bytes();
            let before = f.as_bytes().to_vec();
            match f.insert(&key) {
                Ok(_) => stored.push(key),
                Err(e) => {
                    failures += 1;
                    assert_eq!(e.kicks, kicks);
                    assert_eq!(
                        f.as_bytes(),
                        &before[..],
                        "a failed insert changed the table"
                    );
                }
            }
        }
        assert!(failures > 0, "a 256-slot table took 2000 items");
        assert_eq!(f.items(), stored.len() as u64);
        assert_eq!(f.occupied_slots(), stored.len() as u64);
        for key in &stored {
            assert!(f.contains(key), "lost a stored item (kicks {kicks})");
        }
        println!(
            "kicks {kicks}: load at first failure region {:.3}",
            f.load()
        );
        if kicks >= 500 {
            assert!(f.load() > 0.9, "load {}", f.load());
        }
    }
}

#[test]
fn cuckoo_chain_grows_and_keeps_items() {
    let base = small_cuckoo(16, 4, 12, 100).params().clone();
    let mut chain = CuckooChain::with_params(base.clone(), 2).unwrap();
    for i in 0..1000u32 {
        chain.insert(&i.to_le_bytes()).unwrap();
    }
    assert!(chain.len() > 1);
    for i in 0..1000u32 {
        assert!(chain.contains(&i.to_le_bytes()));
    }
    assert_eq!(chain.items(), 1000);
    assert_eq!(chain.remove(&7u32.to_le_bytes()), Ok(Removal::Removed));
    let mut fixed = CuckooChain::with_params(base, 0).unwrap();
    let mut err = None;
    for i in 0..1000u32 {
        if let Err(e) = fixed.insert(&i.to_le_bytes()) {
            err = Some(e);
            break;
        }
    }
    let msg = err.expect("a non-scaling chain fills").to_string();
    assert!(msg.contains("full"), "{msg}");
    assert_eq!(fixed.len(), 1);
}

#[test]
fn files_round_trip_and_open_by_kind() {
    let dir = tempfile::tempdir().unwrap();
    let c = CountingFilter::with_plan(&plan_counting(500, 1e-3).unwrap(), 11).unwrap();
    let q = CuckooFilter::with_plan(&plan_cuckoo(500, 1e-3, 4).unwrap(), 12).unwrap();
    for i in 0..400u32 {
        c.insert(&i.to_le_bytes());
        q.insert(&i.to_le_bytes()).unwrap();
    }
    let (cp, qp, bp) = (
        dir.path().join("c.bgf"),
        dir.path().join("q.bgf"),
        dir.path().join("b.bgf"),
    );
    c.save(&cp).unwrap();
    q.save(&qp).unwrap();
    let bloom = Filter::new(Params::from_plan(
        &plan(Layout::Blocked, 100, 0.01).unwrap(),
        1,
    ))
    .unwrap();
    bloom.save(&bp).unwrap();
    // Bit-identical through the file and through bytes.
    assert_eq!(std::fs::read(&cp).unwrap(), c.to_bytes());
    assert_eq!(std::fs::read(&qp).unwrap(), q.to_bytes());
    let c2 = CountingFilter::open(&cp).unwrap();
    c2.verify().unwrap();
    assert_eq!(c2.to_bytes(), c.to_bytes());
    assert_eq!(c2.items(), 400);
    let q2 = CuckooFilter::from_bytes(&q.to_bytes()).unwrap();
    assert_eq!(q2.to_bytes(), q.to_bytes());
    for i in 0..400u32 {
        assert!(c2.contains(&i.to_le_bytes()) && q2.contains(&i.to_le_bytes()));
    }
    // The opener dispatches on the layout code.
    let kinds: Vec<FilterKind> = [&cp, &qp, &bp]
        .iter()
        .map(|p| AnyFilter::open(p, Access::ReadOnly).unwrap().kind())
        .collect();
    assert_eq!(
        kinds,
        [
            FilterKind::Counting,
            FilterKind::Cuckoo,
            FilterKind::Bloom(Layout::Blocked)
        ]
    );
    assert_eq!(std::fs::read(&cp).unwrap()[16], LAYOUT_COUNTING);
    assert_eq!(std::fs::read(&qp).unwrap()[16], LAYOUT_CUCKOO);
    assert_eq!(
        DeletableKind::from_code(LAYOUT_CUCKOO),
        Some(DeletableKind::Cuckoo)
    );
    // The Bloom opener names what the file holds; so do the others.
    let e = Filter::open(&cp, Access::ReadOnly).unwrap_err().to_string();
    assert!(
        e.contains("holds a counting filter, not a Bloom filter"),
        "{e}"
    );
    let e = Filter::open(&qp, Access::ReadOnly).unwrap_err().to_string();
    assert!(
        e.contains("holds a cuckoo filter, not a Bloom filter"),
        "{e}"
    );
    let e = CuckooFilter::open(&cp).unwrap_err().to_string();
    assert!(
        e.contains("holds a counting filter, not a cuckoo filter"),
        "{e}"
    );
    let e = CountingFilter::open(&bp).unwrap_err().to_string();
    assert!(
        e.contains("holds a blocked Bloom filter, not a counting filter"),
        "{e}"
    );
}

#[test]
fn any_filter_answers_for_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    let c = CountingFilter::with_plan(&plan_counting(1000, 1e-3).unwrap(), 21).unwrap();
    let q = CuckooFilter::with_plan(&plan_cuckoo(1000, 1e-3, 4).unwrap(), 22).unwrap();
    let b = Filter::new(Params::from_plan(
        &plan(Layout::Classic, 1000, 1e-3).unwrap(),
        23,
    ))
    .unwrap();
    for i in 0..600u32 {
        c.insert(&i.to_le_bytes());
        q.insert(&i.to_le_bytes()).unwrap();
        b.insert(&i.to_le_bytes());
    }
    let paths = ["c", "q", "b"].map(|n| dir.path().join(n));
    c.save(&paths[0]).unwrap();
    q.save(&paths[1]).unwrap();
    b.save(&paths[2]).unwrap();
    for (path, kind, seed) in [
        (&paths[0], FilterKind::Counting, 21),
        (&paths[1], FilterKind::Cuckoo, 22),
        (&paths[2], FilterKind::Bloom(Layout::Classic), 23),
    ] {
        let f = AnyFilter::open(path, Access::ReadOnly).unwrap();
        assert_eq!(f.kind(), kind);
        assert_eq!(kind.deletable(), !matches!(kind, FilterKind::Bloom(_)));
        assert_eq!(f.seed(), seed);
        assert_eq!(
            (f.items(), f.planned_items(), f.target_fp()),
            (600, 1000, 1e-3)
        );
        assert!(
            f.predicted_fp() > 0.0 && f.predicted_fp() < 1e-3,
            "{kind}: {}",
            f.predicted_fp()
        );
        assert!(f.data_bytes() > 0);
        f.verify().unwrap();
        for i in 0..600u32 {
            assert!(f.contains(&i.to_le_bytes()), "{kind}");
        }
    }
    assert_eq!(FilterKind::Counting.to_string(), "counting");
    assert_eq!(FilterKind::Bloom(Layout::Blocked).name(), "blocked");
    // Not a filter at all: the Bloom opener's errors.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![7u8; 5000]).unwrap();
    let e = AnyFilter::open(&junk, Access::ReadOnly)
        .unwrap_err()
        .to_string();
    assert!(e.contains("wrong magic"), "{e}");
    let e = AnyFilter::open(dir.path(), Access::ReadOnly)
        .unwrap_err()
        .to_string();
    assert!(e.contains("is a directory"), "{e}");
}
