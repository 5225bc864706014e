use super::*;
use crate::{format::data_checksum, plan, Filter, HashId};

/// Every layout with every hash id it may have: new files (blocked, hash id
/// 3) and the files of earlier builds (hash ids 2 and 1) are sliced alike.
const LAYOUTS: [(Layout, HashId); 4] = [
    (Layout::Blocked, HashId::Xxh3_64Words),
    (Layout::Blocked, HashId::Xxh3_64),
    (Layout::Blocked, HashId::Xxh3_128),
    (Layout::Classic, HashId::Xxh3_128),
];

fn items(n: usize, salt: &str) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("http://{salt}{}.example/{i}", i % 977).into_bytes())
        .collect()
}

#[test]
fn slices_are_as_few_and_as_even_as_the_budget_allows() {
    let params = Params::from_plan(&plan(Layout::Blocked, 1e10 as u64, 1e-4).unwrap(), 1);
    let words = params.words();
    for (budget, count) in [(12u64 << 30, 3), (14 << 30, 2), (1 << 40, 1), (1 << 30, 26)] {
        let ranges = plan_slices(&params, budget);
        assert_eq!(ranges.len(), count, "budget {budget}");
        assert_eq!((ranges[0].start, ranges[count - 1].end), (0, words));
        let sizes: Vec<u64> = ranges.iter().map(|r| r.end - r.start).collect();
        assert!(sizes.iter().all(|&w| w * 8 <= budget));
        assert!(sizes[..count - 1].iter().all(|&w| w % PAGE_WORDS == 0));
        let (max, min) = (sizes.iter().max().unwrap(), sizes.iter().min().unwrap());
        assert!(max - min <= count as u64 * PAGE_WORDS, "{sizes:?}");
        assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
    }
}

/// Staging capacities the tests build slices with: written directly,
/// staged in buffers of 100 records (many sorted writes, some items of a
/// batch written before others are staged), and staged until read.
const STAGINGS: [usize; 3] = [0, 100, 1 << 30];

#[test]
fn slices_are_bit_identical() {
    for (layout, hash) in LAYOUTS {
        // 40,000 items at 1e-4: ~110 KB, 27 pages; budgets of 1, 3, 8
        // and 100 pages give 27, 9, 4 and 1 slices (the last ragged).
        let mut params = Params::from_plan(&plan(layout, 40_000, 1e-4).unwrap(), 0x5eed);
        params.hash = hash;
        let data = items(40_000, "a");
        let whole = Filter::new(params.clone()).unwrap();
        let whole_new = whole.insert_batch(&data);
        for (pages, staging) in [1u64, 3, 8, 100]
            .into_iter()
            .flat_map(|p| STAGINGS.map(|s| (p, s)))
        {
            let ranges = plan_slices(&params, pages * 4096);
            assert_eq!(ranges.first().unwrap().start, 0);
            assert_eq!(ranges.last().unwrap().end, params.words());
            let mut bytes = Vec::new();
            let (mut sum, mut new, mut ones) = (0u64, 0u64, 0u64);
            for r in &ranges {
                let s = Slice::new(&params, r.clone())
                    .unwrap()
                    .with_staging(staging);
                // Two threads at once, in two halves of several
                // batches each, as a build does.
                let (x, y) = data.split_at(data.len() / 2);
                std::thread::scope(|sc| {
                    sc.spawn(|| x.chunks(3000).for_each(|c| s.insert_batch(c)));
                    y.chunks(3000).for_each(|c| s.insert_batch(c));
                });
                bytes.extend_from_slice(s.as_bytes());
                new += s.new_items();
                sum = sum.wrapping_add(s.checksum());
                ones += s.count_ones();
            }
            let case = format!("{layout:?} {hash}, {pages}-page slices, staging {staging}");
            assert!(bytes == whole.as_bytes(), "{case}");
            assert_eq!(sum, data_checksum(whole.as_bytes()), "{case}");
            assert_eq!(ones, whole.count_ones(), "{case}");
            // Counts agree up to the order-dependent few (an item whose
            // bits all happen to be set by others): 0.1 % here.
            let slack = data.len() as u64 / 1000;
            assert!(
                new + slack >= whole_new && new <= data.len() as u64,
                "{case}: {new} vs {whole_new}"
            );
            if layout == Layout::Blocked {
                assert!(new <= whole_new + slack, "{case}: {new} vs {whole_new}");
            }
        }
    }
}

#[test]
fn staged_writes_are_seen_by_every_reader() {
    // Staged until read: each way of reading the slice writes them first.
    let params = Params::from_plan(&plan(Layout::Blocked, 40_000, 1e-4).unwrap(), 3);
    let data = items(20_000, "s");
    let whole = Filter::new(params.clone()).unwrap();
    whole.insert_batch(&data);
    let range = plan_slices(&params, 1 << 30)[0].clone();
    let make = || {
        let s = Slice::new(&params, range.clone())
            .unwrap()
            .with_staging(1 << 30);
        s.insert_batch(&data);
        s
    };
    assert!(make().as_bytes() == whole.as_bytes());
    assert_eq!(make().count_ones(), whole.count_ones());
    assert_eq!(make().checksum(), data_checksum(whole.as_bytes()));
    let s = make();
    assert!(data
        .iter()
        .all(|d| s.rules_out(&position_of(&params, d)) == Some(false)));
    let s = make();
    let prepared: Vec<Prepared> = data.iter().map(|d| position_of(&params, d)).collect();
    let mut out = Vec::new();
    s.rules_out_batch(&prepared, &mut out);
    assert!(out.iter().all(|&v| v == Some(false)));
    assert!(make().new_items() > 19_900);
}

#[test]
fn slices_built_from_spilled_records_are_bit_identical() {
    // The first slice spills the items of every later one; each later
    // slice is then built from its records alone.
    for (staging, hash) in STAGINGS
        .into_iter()
        .flat_map(|s| [HashId::Xxh3_64Words, HashId::Xxh3_64, HashId::Xxh3_128].map(|h| (s, h)))
    {
        let mut params = Params::from_plan(&plan(Layout::Blocked, 40_000, 1e-4).unwrap(), 0x5eed);
        params.hash = hash;
        let data = items(40_000, "a");
        let whole = Filter::new(params.clone()).unwrap();
        let whole_new = whole.insert_batch(&data);
        let ranges = plan_slices(&params, 8 * 4096);
        assert!(ranges.len() >= 3, "{}", ranges.len());
        let first = Slice::new(&params, ranges[0].clone())
            .unwrap()
            .with_staging(staging);
        let mut spills = vec![Vec::new(); ranges.len() - 1];
        let (x, y) = data.split_at(data.len() / 2);
        first.insert_and_spill(x, &ranges[1..], &mut spills);
        first.insert_and_spill(y, &ranges[1..], &mut spills);
        spills.insert(0, Vec::new());
        let mut bytes = first.as_bytes().to_vec();
        let mut new = first.new_items();
        let mut records = 0;
        for (i, r) in ranges.iter().enumerate().skip(1) {
            let s = Slice::new(&params, r.clone())
                .unwrap()
                .with_staging(staging);
            // Two threads at once, as a build does.
            let (x, y) = spills[i].split_at(spills[i].len() / 16 * 8);
            std::thread::scope(|sc| {
                sc.spawn(|| s.insert_records(x).unwrap());
                s.insert_records(y).unwrap();
            });
            records += spills[i].len() as u64 / RECORD_BYTES;
            bytes.extend_from_slice(s.as_bytes());
            new += s.new_items();
        }
        assert!(bytes == whole.as_bytes(), "staging {staging}, {hash}");
        // Every item of a later slice was spilled exactly once.
        let in_first = data
            .iter()
            .filter(|d| ranges[0].contains(&position_of(&params, d).a))
            .count() as u64;
        assert_eq!(records + in_first, data.len() as u64);
        let slack = data.len() as u64 / 1000;
        assert!(
            new + slack >= whole_new && new <= whole_new + slack,
            "staging {staging}: {new} vs {whole_new}"
        );
        // A record naming no block of its slice, or a torn one, is an
        // error, and none of the batch is set.
        let s = Slice::new(&params, ranges[1].clone())
            .unwrap()
            .with_staging(staging);
        let blocks = (ranges[1].end - ranges[1].start) / 8;
        let mut bad = spills[1][..800].to_vec();
        bad.extend_from_slice(&(blocks << 32).to_le_bytes());
        assert!(s.insert_records(&bad).is_err());
        assert!(s.insert_records(&spills[1][..spills[1].len() - 3]).is_err());
        assert_eq!(s.count_ones(), 0, "staging {staging}");
        assert!(s
            .insert_records(&((blocks - 1) << 32).to_le_bytes())
            .is_ok());
        assert!(s.count_ones() > 0);
    }
}

#[test]
fn positions_are_the_filters() {
    for (layout, hash) in LAYOUTS {
        let mut params = Params::from_plan(&plan(layout, 1000, 1e-3).unwrap(), 9);
        params.hash = hash;
        let f = Filter::new(params.clone()).unwrap();
        for item in items(500, "p") {
            assert_eq!(position_of(&params, &item), f.prepare(&item));
        }
    }
}

#[test]
fn bad_ranges_are_refused() {
    let params = Params::from_plan(&plan(Layout::Blocked, 40_000, 1e-4).unwrap(), 1);
    let w = params.words();
    assert!(Slice::new(&params, 1..PAGE_WORDS).is_err());
    assert!(Slice::new(&params, 0..PAGE_WORDS + 1).is_err());
    assert!(Slice::new(&params, 0..w + PAGE_WORDS).is_err());
    assert!(Slice::new(&params, PAGE_WORDS..w).is_ok());
    assert_eq!(plan_slices(&params, 0).len() as u64, w.div_ceil(PAGE_WORDS));
}

#[test]
fn a_sliced_file_is_the_in_memory_file() {
    let dir = tempfile::tempdir().unwrap();
    for (layout, hash) in LAYOUTS {
        let mut params = Params::from_plan(&plan(layout, 30_000, 1e-4).unwrap(), 77);
        params.hash = hash;
        let data = items(30_000, "f");
        let whole_path = dir.path().join(format!("whole-{layout}-{hash}.bgf"));
        let mut whole = Filter::create_file(&whole_path, params.clone()).unwrap();
        whole.insert_batch(&data);
        whole.persist().unwrap();
        let sliced_path = dir.path().join(format!("sliced-{layout}-{hash}.bgf"));
        let mut w = SliceWriter::create(&sliced_path, &params).unwrap();
        for r in plan_slices(&params, 5 * 4096) {
            let s = Slice::new(&params, r).unwrap().with_staging(1000);
            s.insert_batch(&data);
            w.write(&s).unwrap();
        }
        w.finish().unwrap();
        let (a, b) = (
            std::fs::read(&whole_path).unwrap(),
            std::fs::read(&sliced_path).unwrap(),
        );
        assert_eq!(a.len(), b.len());
        assert!(a[HEADER_LEN..] == b[HEADER_LEN..], "{layout:?} data");
        let f = Filter::open(&sliced_path, crate::Access::ReadOnly).unwrap();
        f.verify().unwrap();
        assert_eq!(f.params(), whole.params());
        for item in &data {
            assert!(f.contains(item));
        }
    }
    // Unfinished (an error on the way): nothing at the path, no temporary.
    let params = Params::from_plan(&plan(Layout::Blocked, 30_000, 1e-4).unwrap(), 1);
    let target = dir.path().join("unfinished.bgf");
    let mut w = SliceWriter::create(&target, &params).unwrap();
    let first = plan_slices(&params, 4096)[0].clone();
    let s = Slice::new(&params, first).unwrap();
    w.write(&s).unwrap();
    // Out of order is refused.
    assert!(w.write(&s).is_err());
    assert!(w.finish().is_err());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("unfinished"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn loaded_slices_answer_as_the_filter() {
    let dir = tempfile::tempdir().unwrap();
    for (layout, hash) in LAYOUTS {
        let mut params = Params::from_plan(&plan(layout, 20_000, 1e-3).unwrap(), 5);
        params.hash = hash;
        let path = dir.path().join(format!("{layout}-{hash}.bgf"));
        let mut f = Filter::create_file(&path, params.clone()).unwrap();
        let data = items(20_000, "q");
        f.insert_batch(&data);
        f.persist().unwrap();
        let f = Filter::open(&path, crate::Access::ReadOnly).unwrap();
        let slices: Vec<Slice> = plan_slices(&params, 3 * 4096)
            .into_iter()
            .map(|r| Slice::load(&f, r).unwrap())
            .collect();
        let mut hits = 0;
        for (i, q) in items(20_000, "q")
            .into_iter()
            .chain(items(20_000, "absent"))
            .enumerate()
        {
            let p = position_of(&params, &q);
            let verdicts: Vec<bool> = slices.iter().filter_map(|s| s.rules_out(&p)).collect();
            assert!(!verdicts.is_empty());
            if layout == Layout::Blocked {
                assert_eq!(verdicts.len(), 1, "a block lies in one slice");
            }
            let present = !verdicts.iter().any(|&out| out);
            assert_eq!(present, f.contains(&q), "{layout:?} {i}");
            hits += present as u32;
        }
        assert!((20_000..20_100).contains(&hits), "{hits}");
        // The batched, prefetching path answers item for item as the
        // one-at-a-time path, appending after what `out` held.
        let all: Vec<Prepared> = items(20_000, "q")
            .iter()
            .chain(&items(20_000, "absent"))
            .map(|q| position_of(&params, q))
            .collect();
        for s in &slices {
            let mut got = vec![Some(true)];
            s.rules_out_batch(&all, &mut got);
            let want: Vec<Option<bool>> = all.iter().map(|p| s.rules_out(p)).collect();
            assert_eq!(got[0], Some(true));
            assert!(got[1..] == want[..], "{layout:?}");
            assert!(want.iter().any(|v| v == &Some(false)) && want.contains(&None));
        }
    }
}
