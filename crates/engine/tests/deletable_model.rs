//! The deletable filters against a multiset model (proptest): random
//! sequences of insert / insert-if-absent / remove / contains / count on a
//! small key space, so that keys repeat, counters saturate, fingerprints
//! collide and a small cuckoo table fills. The one rule checked after every
//! step: an item inserted more times than deleted is present (no false
//! negative, ever), and a failed or refused operation changes nothing.

use std::collections::HashMap;

use bloomgate_engine::{
    plan_counting, ChainError, CountingFilter, CountingParams, CuckooChain, CuckooFilter,
    CuckooParams, Removal,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Insert(u16),
    InsertIfAbsent(u16),
    Remove(u16),
    Contains(u16),
}

fn ops(keys: u16, len: usize) -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            4 => (0..keys).prop_map(Op::Insert),
            1 => (0..keys).prop_map(Op::InsertIfAbsent),
            3 => (0..keys).prop_map(Op::Remove),
            2 => (0..keys).prop_map(Op::Contains),
        ],
        1..len,
    )
}

fn key(k: u16) -> [u8; 2] {
    k.to_le_bytes()
}

/// Checks the model's every live item is present.
fn no_false_negatives(model: &HashMap<u16, u32>, contains: impl Fn(&[u8]) -> bool) {
    for (&k, &n) in model {
        if n > 0 {
            assert!(
                contains(&key(k)),
                "false negative for key {k} (stored {n} times)"
            );
        }
    }
}

fn counting(counters: u64, k: u32, seed: u64) -> CountingFilter {
    CountingFilter::new(CountingParams {
        counters,
        k,
        seed,
        key_kind: 0,
        match_mode: 0,
        planned_items: counters / 16,
        target_fp: 0.01,
    })
    .unwrap()
}

fn cuckoo(buckets: u64, bucket_size: u32, f: u32, kicks: u32, seed: u64) -> CuckooFilter {
    CuckooFilter::new(cuckoo_params(buckets, bucket_size, f, kicks, seed)).unwrap()
}

fn cuckoo_params(buckets: u64, bucket_size: u32, f: u32, kicks: u32, seed: u64) -> CuckooParams {
    CuckooParams {
        buckets,
        bucket_size,
        fingerprint_bits: f,
        max_kicks: kicks,
        seed,
        bucket_shift: 0,
        key_kind: 0,
        match_mode: 0,
        planned_items: buckets * bucket_size as u64,
        target_fp: 0.01,
    }
}

/// A step on a chain: add a copy of a key, delete one of the stored copies
/// (the index picks which), or look a key up.
#[derive(Clone, Debug)]
enum ChainOp {
    Insert(u16),
    RemoveStored(usize),
    Contains(u16),
}

fn chain_ops(keys: u16, len: usize) -> impl Strategy<Value = Vec<ChainOp>> {
    proptest::collection::vec(
        prop_oneof![
            5 => (0..keys).prop_map(ChainOp::Insert),
            3 => any::<usize>().prop_map(ChainOp::RemoveStored),
            1 => (0..keys).prop_map(ChainOp::Contains),
        ],
        1..len,
    )
}

/// Runs `ops` on `chain` from the stored copies `stored` (one entry per
/// copy), checking after every step that each key stored more times than
/// deleted is present. Every delete of a stored copy must take a copy,
/// unless `may_refuse` (tables hashed apart), where it may instead be
/// refused, changing nothing. Returns the refusals.
fn run_chain(
    chain: &mut CuckooChain,
    ops: Vec<ChainOp>,
    mut stored: Vec<u16>,
    may_refuse: bool,
) -> Result<usize, TestCaseError> {
    let mut model: HashMap<u16, u32> = HashMap::new();
    for &x in &stored {
        *model.entry(x).or_default() += 1;
    }
    let mut refused = 0;
    for op in ops {
        match op {
            ChainOp::Insert(x) => match chain.insert(&key(x)) {
                Ok(_) => {
                    *model.entry(x).or_default() += 1;
                    stored.push(x);
                }
                // 64 tables of one slot each can fill up.
                Err(ChainError::Full { .. }) => {}
                Err(e) => return Err(TestCaseError::fail(format!("insert {x}: {e}"))),
            },
            ChainOp::RemoveStored(i) if !stored.is_empty() => {
                let x = stored[i % stored.len()];
                let (tables, items) = (chain.len(), chain.items());
                match chain.remove(&key(x)) {
                    Ok(r) => {
                        prop_assert_eq!(
                            r,
                            Removal::Removed,
                            "a stored copy of {} was not found",
                            x
                        );
                        stored.swap_remove(i % stored.len());
                        *model.get_mut(&x).unwrap() -= 1;
                    }
                    Err(e) => {
                        prop_assert!(may_refuse, "refused in a chain grown here: {}", e);
                        prop_assert!(e.tables.len() > 1, "{:?}", e);
                        prop_assert_eq!((chain.len(), chain.items()), (tables, items));
                        refused += 1;
                    }
                }
            }
            ChainOp::RemoveStored(_) => {}
            ChainOp::Contains(x) => {
                let n = model.get(&x).copied().unwrap_or(0);
                prop_assert!(chain.count(&key(x)) >= u64::from(n));
            }
        }
        no_false_negatives(&model, |i| chain.contains(i));
    }
    prop_assert_eq!(chain.items(), stored.len() as u64);
    Ok(refused)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// A chain grown from a first table of 1..=6 buckets (any count, not
    /// only powers of two) by expansion 1, 2 or 4, buckets of 1, 2 or 4
    /// slots, 3..=8-bit fingerprints: it grows to several tables, and
    /// copies of different keys share fingerprints and buckets within and
    /// across tables. A delete of a stored copy always takes one, and
    /// never another key's last one.
    #[test]
    fn cuckoo_chain_deletes_take_only_the_item_s_copy(
        ops in chain_ops(150, 500),
        buckets in 1u64..=6,
        bucket_size in prop::sample::select(vec![1u32, 2, 4]),
        expansion in prop::sample::select(vec![1u32, 2, 4]),
        f in 3u32..=8,
        kicks in 0u32..=30,
        seed in any::<u64>(),
    ) {
        let mut chain = CuckooChain::with_params(cuckoo_params(buckets, bucket_size, f, kicks, seed), expansion).unwrap();
        run_chain(&mut chain, ops, Vec::new(), false)?;
    }

    /// A chain of tables hashed apart (a seed and a size each, as files
    /// from before nested chains hold them), each filled first, then grown
    /// here: a delete that cannot tell whose copy it would take is refused,
    /// and nothing is ever lost.
    #[test]
    fn chains_of_tables_hashed_apart_refuse_rather_than_lose(
        ops in chain_ops(150, 400),
        sizes in proptest::collection::vec(1u64..=5, 2..=4),
        fill in 1usize..=12,
        f in 3u32..=6,
        seed in any::<u64>(),
    ) {
        let mut stored = Vec::new();
        let mut tables = Vec::new();
        for (t, &buckets) in sizes.iter().enumerate() {
            let table = cuckoo(buckets, 2, f, 20, seed.wrapping_add(t as u64));
            for x in 0..fill as u16 {
                let x = x * 7 + t as u16;
                if table.insert(&key(x)).is_ok() {
                    stored.push(x);
                }
            }
            tables.push(table);
        }
        let mut chain = CuckooChain::from_tables(tables, 2).unwrap();
        run_chain(&mut chain, ops, stored, true)?;
    }
}

/// What the rule prevents, so the properties above are not vacuous: in
/// the same chains of tables hashed apart, deleting from the newest table
/// with a match (the rule before nested chains) loses stored keys.
#[test]
fn newest_match_first_loses_keys_in_tables_hashed_apart() {
    let mut lost = 0;
    let mut refused = 0;
    for seed in 0..200u64 {
        let tables: Vec<CuckooFilter> = (0..3).map(|t| cuckoo(4, 2, 4, 20, seed * 3 + t)).collect();
        let mut model: HashMap<u16, u32> = HashMap::new();
        for (t, table) in tables.iter().enumerate() {
            for x in 0..6u16 {
                let x = x * 3 + t as u16;
                if table.insert(&key(x)).is_ok() {
                    *model.entry(x).or_default() += 1;
                }
            }
        }
        let naive: Vec<CuckooFilter> = tables
            .iter()
            .map(|t| CuckooFilter::from_bytes(&t.to_bytes()).unwrap())
            .collect();
        let chain = CuckooChain::from_tables(tables, 0).unwrap();
        let mut naive_model = model.clone();
        let keys: Vec<u16> = (0..18).collect();
        for &x in &keys[..9] {
            if model.get(&x).copied().unwrap_or(0) == 0 {
                continue;
            }
            // The rule before: the newest table holding a match.
            if naive
                .iter()
                .rev()
                .any(|t| t.remove(&key(x)) == Removal::Removed)
            {
                *naive_model.get_mut(&x).unwrap() -= 1;
            }
            match chain.remove(&key(x)) {
                Ok(Removal::Removed) => *model.get_mut(&x).unwrap() -= 1,
                Ok(Removal::NotPresent) => panic!("seed {seed}: stored key {x} not found"),
                Err(_) => refused += 1,
            }
            no_false_negatives(&model, |i| chain.contains(i));
        }
        lost += naive_model
            .iter()
            .filter(|&(&x, &n)| n > 0 && !naive.iter().any(|t| t.contains(&key(x))))
            .count();
    }
    assert!(
        lost > 0,
        "the old rule lost nothing: this test shows nothing"
    );
    assert!(refused > 0, "no delete was ambiguous");
    println!("the old rule lost {lost} keys; the chain refused {refused} deletes and lost none");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Counting filter: a small table (128 or 256 counters) and few keys,
    /// so counters are shared and saturate.
    #[test]
    fn counting_matches_multiset(
        ops in prop_oneof![ops(40, 400), ops(6, 400)],
        blocks in 1u64..=2,
        k in 1u32..=12,
        seed in any::<u64>(),
    ) {
        let f = counting(blocks * 128, k, seed);
        let mut model: HashMap<u16, u32> = HashMap::new();
        for op in ops {
            match op {
                Op::Insert(x) => {
                    let was = f.contains(&key(x));
                    let new = f.insert(&key(x));
                    prop_assert_eq!(new, !was);
                    if model.get(&x).copied().unwrap_or(0) > 0 {
                        prop_assert!(!new, "a stored item was reported new");
                    }
                    *model.entry(x).or_default() += 1;
                }
                Op::InsertIfAbsent(x) => {
                    let was = f.contains(&key(x));
                    let before = f.as_bytes().to_vec();
                    let added = f.insert_if_absent(&key(x));
                    prop_assert_eq!(added, !was);
                    if added {
                        *model.entry(x).or_default() += 1;
                    } else {
                        prop_assert_eq!(f.as_bytes(), &before[..]);
                    }
                }
                Op::Remove(x) => {
                    let n = model.get(&x).copied().unwrap_or(0);
                    if n > 0 {
                        prop_assert_eq!(f.remove(&key(x)), Removal::Removed);
                        model.insert(x, n - 1);
                    } else if !f.contains(&key(x)) {
                        // Only deletes of stored items are allowed (see
                        // `remove`); an absent one must change nothing.
                        let before = f.as_bytes().to_vec();
                        prop_assert_eq!(f.remove(&key(x)), Removal::NotPresent);
                        prop_assert_eq!(f.as_bytes(), &before[..]);
                    }
                }
                Op::Contains(x) => {
                    if model.get(&x).copied().unwrap_or(0) > 0 {
                        prop_assert!(f.contains(&key(x)));
                        prop_assert!(f.count(&key(x)) >= 1);
                    }
                }
            }
            no_false_negatives(&model, |i| f.contains(i));
        }
        prop_assert_eq!(f.items(), model.values().map(|&n| n as u64).sum::<u64>());
        // Drain: delete every stored copy, one at a time, checking after
        // each that the rest are all present (counts that went past 15
        // must not come back down to zero under a live item).
        let mut live: Vec<(u16, u32)> = model.iter().map(|(&k, &n)| (k, n)).filter(|&(_, n)| n > 0).collect();
        live.sort_unstable();
        while let Some((x, n)) = live.pop() {
            prop_assert_eq!(f.remove(&key(x)), Removal::Removed);
            model.insert(x, n - 1);
            if n > 1 {
                live.insert(0, (x, n - 1));
            }
            no_false_negatives(&model, |i| f.contains(i));
        }
        prop_assert_eq!(f.items(), 0);
    }

    /// Cuckoo filter: a table of 4..=64 slots, few-bit fingerprints (so
    /// fingerprints collide), bucket sizes 1..=8: inserts fail often, and a
    /// failure must leave the table byte for byte as it was.
    #[test]
    fn cuckoo_matches_multiset(
        ops in ops(60, 400),
        buckets_log2 in 0u32..=4,
        bucket_size in 1u32..=8,
        f in 2u32..=9,
        kicks in 0u32..=50,
        seed in any::<u64>(),
    ) {
        let t = cuckoo(1 << buckets_log2, bucket_size, f, kicks, seed);
        let mut model: HashMap<u16, u32> = HashMap::new();
        let mut failures = 0;
        for op in ops {
            match op {
                Op::Insert(x) | Op::InsertIfAbsent(x) => {
                    let only_if_absent = matches!(op, Op::InsertIfAbsent(_));
                    let was = t.contains(&key(x));
                    let before = t.as_bytes().to_vec();
                    let r = if only_if_absent { t.insert_if_absent(&key(x)) } else { t.insert(&key(x)) };
                    match r {
                        Ok(new) => {
                            prop_assert_eq!(new, !was);
                            if only_if_absent && was {
                                prop_assert_eq!(t.as_bytes(), &before[..]);
                            } else {
                                *model.entry(x).or_default() += 1;
                            }
                        }
                        Err(e) => {
                            failures += 1;
                            prop_assert_eq!(e.kicks, kicks);
                            prop_assert_eq!(t.as_bytes(), &before[..], "a failed insert changed the table");
                        }
                    }
                }
                Op::Remove(x) => {
                    let n = model.get(&x).copied().unwrap_or(0);
                    if n > 0 {
                        prop_assert_eq!(t.remove(&key(x)), Removal::Removed);
                        model.insert(x, n - 1);
                    } else if !t.contains(&key(x)) {
                        let before = t.as_bytes().to_vec();
                        prop_assert_eq!(t.remove(&key(x)), Removal::NotPresent);
                        prop_assert_eq!(t.as_bytes(), &before[..]);
                    }
                }
                Op::Contains(x) => {
                    let n = model.get(&x).copied().unwrap_or(0);
                    prop_assert!(t.count(&key(x)) >= n);
                }
            }
            no_false_negatives(&model, |i| t.contains(i));
        }
        let stored = model.values().map(|&n| n as u64).sum::<u64>();
        prop_assert_eq!(t.items(), stored);
        prop_assert_eq!(t.occupied_slots(), stored);
        let _ = failures;
        // Drain, checking the rest after every delete.
        let live: Vec<(u16, u32)> = model.iter().map(|(&k, &n)| (k, n)).collect();
        for (x, n) in live {
            for _ in 0..n {
                prop_assert_eq!(t.remove(&key(x)), Removal::Removed);
                *model.get_mut(&x).unwrap() -= 1;
                no_false_negatives(&model, |i| t.contains(i));
            }
        }
        prop_assert_eq!(t.occupied_slots(), 0);
    }
}

/// The saturation case of the brief, on a realistic plan: one item inserted
/// 20 times and deleted 20 times stays present with its counters at 15; its
/// neighbours are unaffected.
#[test]
fn saturated_item_survives_its_deletes() {
    let f = CountingFilter::with_plan(&plan_counting(10_000, 1e-4).unwrap(), 77).unwrap();
    for i in 0..5_000u32 {
        f.insert(&i.to_le_bytes());
    }
    for _ in 0..20 {
        f.insert(b"hot");
    }
    for _ in 0..20 {
        assert_eq!(f.remove(b"hot"), Removal::Removed);
    }
    assert!(f.contains(b"hot"));
    for c in f.counter_indices(b"hot") {
        assert_eq!(f.counter(c), Some(15));
    }
    for i in 0..5_000u32 {
        assert!(f.contains(&i.to_le_bytes()));
    }
}
