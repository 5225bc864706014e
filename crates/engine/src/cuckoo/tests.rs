//! Unit tests of the cuckoo table: slot packing, the alternate-bucket
//! map, split tables nesting in their chain, and their headers.

use super::*;

fn filter(f: u32, b: u32, buckets: u64) -> CuckooFilter {
    CuckooFilter::new(CuckooParams {
        buckets,
        bucket_size: b,
        fingerprint_bits: f,
        max_kicks: 100,
        seed: 1,
        bucket_shift: 0,
        key_kind: 0,
        match_mode: 0,
        planned_items: buckets * b as u64,
        target_fp: 0.01,
    })
    .unwrap()
}

#[test]
fn slots_round_trip_across_word_boundaries() {
    for f in [2u32, 7, 13, 17, 31, 32] {
        let t = filter(f, 4, 64);
        let mask = (1u64 << f) - 1;
        let value = |s: u64| (s.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7) & mask;
        for s in 0..t.capacity() {
            t.write(s, value(s));
        }
        for s in 0..t.capacity() {
            assert_eq!(t.read(s), value(s), "f {f} slot {s}");
        }
        // Rewriting one slot leaves its neighbours alone.
        t.write(5, 0);
        assert_eq!(t.read(4), value(4));
        assert_eq!(t.read(6), value(6));
        assert_eq!(t.read(5), 0);
    }
}

#[test]
fn alt_is_an_involution_for_any_bucket_count() {
    for n in [1u64, 2, 3, 7, 1000, 1 << 10, 263_158, (1 << 40) + 7] {
        let t = filter(17, 4, n.min(1 << 20));
        // The arithmetic alone, at the larger counts too.
        let t = CuckooFilter {
            params: CuckooParams {
                buckets: n,
                ..t.params.clone()
            },
            base: n,
            ..t
        };
        let mut same = 0u64;
        for fp in 1..3000u64 {
            for i in [0, 1, n / 2, n - 1] {
                let i = i % n;
                let j = t.alt(i, fp);
                assert!(j < n, "n {n} fp {fp} i {i} -> {j}");
                assert_eq!(t.alt(j, fp), i, "n {n} fp {fp} i {i}");
                same += u64::from(i == j);
            }
        }
        // Two buckets coincide only where 2i = H (mod n).
        if n >= 1000 {
            assert!(same <= 3 * 12_000 / 500, "n {n}: {same} fixed points");
        }
    }
}

/// A table of base `n` buckets split `s` times, for the arithmetic
/// alone (its data is a small table's: only `locate` and `alt` run).
fn shaped(n: u64, s: u32, seed: u64) -> CuckooFilter {
    let t = filter(8, 2, 8);
    CuckooFilter {
        params: CuckooParams {
            buckets: n << s,
            bucket_shift: s,
            seed,
            ..t.params.clone()
        },
        base: n,
        ..t
    }
}

/// The chain's lemma ("Chains"): in a table split `s` times, `alt` is
/// an involution inside the table, and mapping its buckets onto an
/// earlier table's (`i >> (s − t)`) maps an item's first bucket to its
/// first bucket there and `alt` to `alt`, for bucket counts that are
/// not powers of two; so two items whose buckets meet in the later
/// table have the same buckets in the earlier one.
#[test]
fn split_tables_nest_in_their_chain() {
    let items: Vec<[u8; 4]> = (0..3000u32).map(|i| i.to_le_bytes()).collect();
    for n in [1u64, 2, 3, 7, 1000, 263_158, (1 << 30) + 7] {
        for (t, s) in [
            (0, 0),
            (0, 1),
            (0, 3),
            (1, 2),
            (2, 7),
            (0, 20),
            (5, 30),
            (3, 33),
        ] {
            if n.checked_mul(1 << s).is_none() {
                continue;
            }
            let (coarse, fine) = (shaped(n, t, 9), shaped(n, s, 9));
            let pi = |i: u64| i >> (s - t);
            let nb = fine.params.buckets;
            let mut low_bits = std::collections::HashSet::new();
            for fp in 1..256u64 {
                let spread = fp.wrapping_mul(0x2545_F491_4F6C_DD1D) % nb;
                for i in [0, 1 % nb, nb / 2, nb - 1, spread] {
                    let j = fine.alt(i, fp);
                    assert!(j < nb, "n {n} s {s} fp {fp}: {i} -> {j}");
                    assert_eq!(fine.alt(j, fp), i, "n {n} s {s} fp {fp} i {i}");
                    assert_eq!(
                        pi(j),
                        coarse.alt(pi(i), fp),
                        "n {n} t {t} s {s} fp {fp} i {i}"
                    );
                }
                low_bits.insert(fine.alt(0, fp) & ((1 << s.min(3)) - 1));
            }
            // The split bits of the second bucket vary with the
            // fingerprint (not one fixed offset).
            assert_eq!(low_bits.len(), 1 << s.min(3), "n {n} s {s}");
            for it in &items {
                let (i1, fp) = fine.locate(it);
                assert_eq!(coarse.locate(it), (pi(i1), fp), "n {n} t {t} s {s}");
            }
            assert!(fine.refines(&coarse) && coarse.refines(&coarse));
            assert_eq!(coarse.refines(&fine), t == s);
        }
    }
    // Tables hashed apart refine nothing but themselves.
    let a = shaped(1000, 0, 9);
    assert!(!shaped(1000, 1, 10).refines(&a), "another seed");
    assert!(!shaped(999, 1, 9).refines(&a), "another base");
    let xor = CuckooFilter {
        xor_alt: true,
        ..shaped(1024, 0, 9)
    };
    assert!(xor.refines(&xor) && !shaped(1024, 1, 9).refines(&xor));
    let wide = CuckooFilter {
        params: CuckooParams {
            fingerprint_bits: 9,
            ..shaped(1000, 1, 9).params.clone()
        },
        ..shaped(1000, 1, 9)
    };
    assert!(!wide.refines(&a), "another fingerprint width");
}

/// A table appended by a chain: its parameters, its header flag, and a
/// round trip through its file image.
#[test]
fn split_tables_say_so_in_their_header_and_come_back() {
    let first = filter(12, 4, 300);
    let p = first.params().next_in_chain(2).unwrap();
    assert_eq!((p.buckets, p.bucket_shift), (1200, 2));
    assert_eq!(p.planned_items, first.params().planned_items * 4);
    assert_eq!((p.seed, p.fingerprint_bits), (1, 12));
    let p3 = p.next_in_chain(0).unwrap();
    assert_eq!((p3.buckets, p3.bucket_shift), (1200, 2));
    assert!(p.next_in_chain(62).is_none(), "shift 64");
    assert!(CuckooParams {
        buckets: u64::MAX >> 2,
        bucket_shift: 0,
        ..p.clone()
    }
    .next_in_chain(3)
    .is_none());
    let t = CuckooFilter::new(p).unwrap();
    assert!(t.refines(&first));
    let items: Vec<[u8; 4]> = (0..3000u32).map(|i| i.to_le_bytes()).collect();
    for it in &items {
        t.insert(it).unwrap();
    }
    assert_eq!(
        t.header().flags,
        format::FLAG_CUCKOO_EXACT | format::FLAG_CUCKOO_SHIFT
    );
    let back = CuckooFilter::from_bytes(&t.to_bytes()).unwrap();
    assert_eq!(back.params(), t.params());
    assert_eq!(back.as_bytes(), t.as_bytes());
    assert!(items.iter().all(|it| back.contains(it)));
    assert!(back.refines(&first));
}

#[test]
fn files_without_the_exact_flag_keep_xor_buckets() {
    let t = filter(13, 4, 1 << 8);
    let t = CuckooFilter { xor_alt: true, ..t };
    for fp in 1..2000u64 {
        for i in [0u64, 5, 255] {
            assert_eq!(t.alt(i, fp), i ^ reduce(fp.wrapping_mul(ALT_MULT), 1 << 8));
        }
    }
    let items: Vec<Vec<u8>> = (0..900u32).map(|i| i.to_le_bytes().to_vec()).collect();
    for it in &items {
        t.insert(it).unwrap();
    }
    let bytes = t.to_bytes();
    let back = CuckooFilter::from_bytes(&bytes).unwrap();
    assert!(back.xor_alt);
    assert!(items.iter().all(|it| back.contains(it)));
    // The same file read as an exact-size table would lose items: the flag
    // is what keeps them.
    let exact = CuckooFilter {
        xor_alt: false,
        ..CuckooFilter::from_bytes(&bytes).unwrap()
    };
    assert!(items.iter().any(|it| !exact.contains(it)));
    // Every table made now is exact-size and says so in its header.
    let n = filter(13, 4, 300);
    assert_eq!(n.header().flags, format::FLAG_CUCKOO_EXACT);
    assert!(!CuckooFilter::from_bytes(&n.to_bytes()).unwrap().xor_alt);
}
