//! Round trips and every corruption case of the file format, on real files.

use std::fs;
use std::io::{Seek, SeekFrom, Write};

use bloomgate_engine::{format, plan, Access, Error, Filter, FormatProblem, Layout, Params};

fn build(dir: &std::path::Path, layout: Layout) -> std::path::PathBuf {
    let path = dir.join("f.bgf");
    let p = Params::from_plan(&plan(layout, 10_000, 0.001).unwrap(), 99);
    let mut f = Filter::create_file(&path, p).unwrap();
    for i in 0..10_000u32 {
        f.insert(format!("item-{i}").as_bytes());
    }
    f.persist().unwrap();
    path
}

fn problem(err: Error) -> FormatProblem {
    match err {
        Error::Format { problem, .. } => problem,
        other => panic!("expected a format error, got {other}"),
    }
}

#[test]
fn round_trip_both_layouts() {
    let dir = tempfile::tempdir().unwrap();
    for layout in [Layout::Blocked, Layout::Classic] {
        let path = build(dir.path(), layout);
        let f = Filter::open(&path, Access::ReadOnly).unwrap();
        f.verify().unwrap();
        assert_eq!(f.params().layout, layout);
        assert_eq!(f.params().seed, 99);
        assert_eq!(f.items(), f.header().unwrap().items);
        assert!(f.items() > 9_900 && f.items() <= 10_000);
        for i in 0..10_000u32 {
            assert!(f.contains(format!("item-{i}").as_bytes()));
        }
        // No temp files left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        fs::remove_file(&path).unwrap();
    }
}

#[test]
fn save_and_reopen_heap_filter() {
    let dir = tempfile::tempdir().unwrap();
    let f = Filter::with_plan(&plan(Layout::Blocked, 1000, 0.01).unwrap()).unwrap();
    f.insert(b"x");
    let path = dir.path().join("h.bgf");
    f.save(&path).unwrap();
    let g = Filter::open(&path, Access::ReadOnly).unwrap();
    g.verify().unwrap();
    assert!(g.contains(b"x"));
    assert_eq!(g.params(), f.params());
    assert_eq!(g.as_bytes(), f.as_bytes());
}

#[test]
fn read_only_inserts_do_not_reach_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path(), Layout::Blocked);
    let before = fs::read(&path).unwrap();
    let f = Filter::open(&path, Access::ReadOnly).unwrap();
    f.insert(b"private");
    assert!(f.contains(b"private"));
    drop(f);
    assert_eq!(fs::read(&path).unwrap(), before);
}

#[test]
fn in_place_update_keeps_checksum_valid() {
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path(), Layout::Classic);
    let mut f = Filter::open(&path, Access::ReadWrite).unwrap();
    f.begin_update().unwrap();
    // While the update runs, the file is marked dirty on disk.
    let g = Filter::open(&path, Access::ReadOnly).unwrap();
    assert!(g.header().unwrap().is_dirty());
    assert_eq!(problem(g.verify().unwrap_err()), FormatProblem::Dirty);
    f.insert(b"new item");
    f.commit_update().unwrap();
    drop(f);
    let g = Filter::open(&path, Access::ReadOnly).unwrap();
    g.verify().unwrap();
    assert!(!g.header().unwrap().is_dirty());
    assert!(g.contains(b"new item"));
    assert!(g.contains(b"item-5"));
}

#[test]
fn truncated_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path(), Layout::Blocked);
    let len = fs::metadata(&path).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    let err = Filter::open(&path, Access::ReadOnly).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("f.bgf") && msg.contains("truncated"), "{msg}");
    assert!(!msg.contains('\n'));
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(100)
        .unwrap();
    assert_eq!(
        problem(Filter::open(&path, Access::ReadOnly).unwrap_err()),
        FormatProblem::TooShort(100)
    );
    fs::write(&path, b"").unwrap();
    assert_eq!(
        problem(Filter::open(&path, Access::ReadOnly).unwrap_err()),
        FormatProblem::TooShort(0)
    );
}

#[test]
fn trailing_bytes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path(), Layout::Blocked);
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"junk")
        .unwrap();
    assert_eq!(
        problem(Filter::open(&path, Access::ReadOnly).unwrap_err()),
        FormatProblem::Trailing { extra: 4 }
    );
}

fn poke(path: &std::path::Path, offset: u64, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn wrong_magic_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path(), Layout::Blocked);
    poke(&path, 0, b"NOTBLOOM");
    assert_eq!(
        problem(Filter::open(&path, Access::ReadOnly).unwrap_err()),
        FormatProblem::BadMagic
    );
    let text = dir.path().join("list.txt");
    fs::write(&text, "a\n".repeat(5000)).unwrap();
    let msg = Filter::open(&text, Access::ReadOnly)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("list.txt: not a bloomgate filter"), "{msg}");
}

#[test]
fn newer_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path(), Layout::Blocked);
    poke(&path, 8, &2u32.to_le_bytes());
    let err = Filter::open(&path, Access::ReadOnly).unwrap_err();
    assert_eq!(
        problem(err),
        FormatProblem::NewerVersion {
            found: 2,
            supported: 1
        }
    );
}

#[test]
fn corrupted_header_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path(), Layout::Blocked);
    // Flip one bit of k.
    let mut bytes = fs::read(&path).unwrap();
    bytes[20] ^= 1;
    fs::write(&path, &bytes).unwrap();
    assert_eq!(
        problem(Filter::open(&path, Access::ReadOnly).unwrap_err()),
        FormatProblem::HeaderChecksum
    );
    // A flipped bit in the unused part of the header too.
    bytes[20] ^= 1;
    bytes[3000] ^= 0x80;
    fs::write(&path, &bytes).unwrap();
    assert_eq!(
        problem(Filter::open(&path, Access::ReadOnly).unwrap_err()),
        FormatProblem::HeaderChecksum
    );
}

#[test]
fn corrupted_data_is_caught_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path(), Layout::Blocked);
    let len = fs::metadata(&path).unwrap().len();
    let mut bytes = fs::read(&path).unwrap();
    let at = (format::HEADER_LEN as u64 + (len - format::HEADER_LEN as u64) / 2) as usize;
    bytes[at] ^= 0x10;
    fs::write(&path, &bytes).unwrap();
    // Opening is cheap and does not read the data...
    let f = Filter::open(&path, Access::ReadOnly).unwrap();
    // ...verify does.
    match problem(f.verify().unwrap_err()) {
        FormatProblem::DataChecksum { .. } => {}
        other => panic!("{other}"),
    }
}

#[test]
fn directory_and_missing_file_errors() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Filter::open(dir.path(), Access::ReadOnly),
        Err(Error::Io { .. })
    ));
    let msg = Filter::open(dir.path().join("nope"), Access::ReadOnly)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("nope") && msg.contains("cannot open"), "{msg}");
}

#[test]
fn dropped_create_file_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = Params::from_plan(&plan(Layout::Blocked, 100, 0.01).unwrap(), 1);
    let f = Filter::create_file(dir.path().join("x.bgf"), p).unwrap();
    f.insert(b"a");
    drop(f);
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A filter of ~1.8 MB (hundreds of checksum pages) holding a few items.
fn build_big(dir: &std::path::Path, layout: Layout) -> std::path::PathBuf {
    let path = dir.join(format!("big-{layout}.bgf"));
    let p = Params::from_plan(&plan(layout, 1_000_000, 0.001).unwrap(), 7);
    let mut f = Filter::create_file(&path, p).unwrap();
    for i in 0..1000u32 {
        f.insert(format!("old-{i}").as_bytes());
    }
    f.persist().unwrap();
    path
}

#[test]
fn logged_update_moves_the_checksum_by_the_changed_pages() {
    let dir = tempfile::tempdir().unwrap();
    for layout in [Layout::Blocked, Layout::Classic] {
        let path = build_big(dir.path(), layout);
        let mut f = Filter::open(&path, Access::ReadWrite).unwrap();
        f.begin_update().unwrap();
        // Few enough items (≤ 80 pages) to stay under the whole-recompute
        // threshold (a quarter of ~470 pages) in both layouts.
        let items: Vec<String> = (0..8).map(|i| format!("new-{i}")).collect();
        // From several threads at once, as `bloomgate add` does.
        std::thread::scope(|s| {
            for chunk in items.chunks(2) {
                let f = &f;
                s.spawn(move || f.update_batch(chunk).unwrap());
            }
        });
        // A repeated item changes nothing and is not new.
        assert_eq!(f.update_batch(&["new-3"]).unwrap(), 0);
        f.commit_update().unwrap();
        drop(f);
        // The incrementally moved checksum equals a full recomputation.
        let g = Filter::open(&path, Access::ReadOnly).unwrap();
        g.verify().unwrap();
        assert!(!g.header().unwrap().is_dirty());
        for i in 0..8 {
            assert!(g.contains(format!("new-{i}").as_bytes()));
        }
        for i in 0..1000 {
            assert!(g.contains(format!("old-{i}").as_bytes()));
        }
    }
}

#[test]
fn logged_update_keeps_earlier_corruption_visible() {
    let dir = tempfile::tempdir().unwrap();
    for layout in [Layout::Blocked, Layout::Classic] {
        let path = build_big(dir.path(), layout);
        let len = fs::metadata(&path).unwrap().len();
        // Damage one data byte (the checksum is only read by verify).
        let at = format::HEADER_LEN as u64 + (len - format::HEADER_LEN as u64) / 2;
        let mut byte = [0u8; 1];
        {
            use std::io::Read;
            let mut file = fs::File::open(&path).unwrap();
            file.seek(SeekFrom::Start(at)).unwrap();
            file.read_exact(&mut byte).unwrap();
        }
        poke(&path, at, &[byte[0] ^ 0x10]);
        let mut f = Filter::open(&path, Access::ReadWrite).unwrap();
        f.begin_update().unwrap();
        f.update_batch(&["a", "b", "c"]).unwrap();
        f.commit_update().unwrap();
        drop(f);
        // Only the changed pages were rehashed, so the damage is still
        // caught; recomputing the whole checksum would have sealed it in.
        let g = Filter::open(&path, Access::ReadOnly).unwrap();
        let p = problem(g.verify().unwrap_err());
        assert!(
            matches!(p, FormatProblem::DataChecksum { .. }),
            "{layout}: {p:?}"
        );
    }
}

#[test]
fn large_or_untracked_updates_recompute_the_whole_checksum() {
    let dir = tempfile::tempdir().unwrap();
    for layout in [Layout::Blocked, Layout::Classic] {
        // Past a quarter of the pages: one pass over everything.
        let path = build_big(dir.path(), layout);
        let mut f = Filter::open(&path, Access::ReadWrite).unwrap();
        f.begin_update().unwrap();
        let items: Vec<String> = (0..20_000).map(|i| format!("many-{i}")).collect();
        f.update_batch(&items).unwrap();
        f.commit_update().unwrap();
        drop(f);
        Filter::open(&path, Access::ReadOnly)
            .unwrap()
            .verify()
            .unwrap();
        // A plain insert next to logged ones: the log cannot vouch for it.
        let mut f = Filter::open(&path, Access::ReadWrite).unwrap();
        f.begin_update().unwrap();
        f.update_batch(&["logged"]).unwrap();
        f.insert(b"unlogged");
        f.commit_update().unwrap();
        drop(f);
        let g = Filter::open(&path, Access::ReadOnly).unwrap();
        g.verify().unwrap();
        assert!(g.contains(b"logged") && g.contains(b"unlogged"));
    }
    // Without begin_update there is no log to write through.
    let path = build(dir.path(), Layout::Blocked);
    let f = Filter::open(&path, Access::ReadWrite).unwrap();
    assert!(f.update_batch(&["x"]).is_err());
}

/// The header's set-bit count, if it records one and these bits are the file's.
fn stored(path: &std::path::Path) -> Option<u64> {
    Filter::open(path, Access::ReadOnly).unwrap().stored_ones()
}

#[test]
fn every_seal_records_the_set_bit_count() {
    let dir = tempfile::tempdir().unwrap();
    for layout in [Layout::Blocked, Layout::Classic] {
        // persist (build)
        let path = build(dir.path(), layout);
        let f = Filter::open(&path, Access::ReadOnly).unwrap();
        assert_eq!(f.stored_ones(), Some(f.count_ones()), "{layout:?} persist");
        assert!(f.count_ones() > 0);
        // An in-place update moved by the changed pages only, and a large
        // one recomputed whole: both exact.
        for n in [8u32, 20_000] {
            let mut f = Filter::open(&path, Access::ReadWrite).unwrap();
            f.begin_update().unwrap();
            assert_eq!(f.stored_ones(), None, "dirty: not to be trusted");
            let items: Vec<String> = (0..n).map(|i| format!("upd-{n}-{i}")).collect();
            f.update_batch(&items).unwrap();
            f.commit_update().unwrap();
            drop(f);
            let g = Filter::open(&path, Access::ReadOnly).unwrap();
            assert_eq!(
                g.stored_ones(),
                Some(g.count_ones()),
                "{layout:?} update of {n}"
            );
            g.verify().unwrap();
        }
        // save (the server's snapshots), of a mapped filter that took
        // inserts: the stored count is no longer these bits', then the saved
        // file's is.
        let f = Filter::open(&path, Access::ReadOnly).unwrap();
        f.insert(b"in memory only");
        assert_eq!(f.stored_ones(), None);
        assert_eq!(f.ones(), f.count_ones());
        let saved = dir.path().join(format!("saved-{layout}.bgf"));
        f.save(&saved).unwrap();
        assert_eq!(stored(&saved), Some(f.count_ones()));
        // union (or_bytes_at + union_with + persist)
        let other = dir.path().join(format!("other-{layout}.bgf"));
        let q = Filter::open(&path, Access::ReadOnly)
            .unwrap()
            .params()
            .clone();
        let mut o = Filter::create_file(&other, q.clone()).unwrap();
        o.insert(b"only in other");
        o.persist().unwrap();
        let out = dir.path().join(format!("union-{layout}.bgf"));
        let mut u = Filter::create_file(&out, q).unwrap();
        u.or_bytes_at(0, Filter::open(&path, Access::ReadOnly).unwrap().as_bytes())
            .unwrap();
        u.union_with(&Filter::open(&other, Access::ReadOnly).unwrap())
            .unwrap();
        u.persist().unwrap();
        let g = Filter::open(&out, Access::ReadOnly).unwrap();
        assert_eq!(g.stored_ones(), Some(g.count_ones()));
    }
}

#[test]
fn fill_comes_from_the_header_and_verify_checks_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path(), Layout::Blocked);
    let truth = Filter::open(&path, Access::ReadOnly).unwrap().count_ones();
    // Corrupt the data without touching the header: the fill is still
    // reported from the header (the data is not read), verify catches it.
    poke(&path, format::HEADER_LEN as u64 + 100, &[0xff; 16]);
    let f = Filter::open(&path, Access::ReadOnly).unwrap();
    assert_eq!(f.ones(), truth);
    assert!(f.count_ones() > truth);
    assert!(matches!(
        problem(f.verify().unwrap_err()),
        FormatProblem::DataChecksum { .. }
    ));
    // A header whose count is wrong (resealed by hand, checksum intact) is
    // caught by verify too.
    let path = build(dir.path(), Layout::Classic);
    let mut h = Filter::open(&path, Access::ReadOnly)
        .unwrap()
        .header()
        .unwrap()
        .clone();
    h.ones = h.ones.map(|o| o + 1);
    poke(&path, 0, &h.encode());
    let err = Filter::open(&path, Access::ReadOnly)
        .unwrap()
        .verify()
        .unwrap_err();
    assert!(
        matches!(problem(err), FormatProblem::OnesMismatch { stored, found } if stored == found + 1)
    );
}

#[test]
fn files_without_a_count_still_read_and_report_the_fill() {
    // A header as written before the count existed: flag clear, field zero.
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path(), Layout::Blocked);
    let f = Filter::open(&path, Access::ReadOnly).unwrap();
    let truth = f.count_ones();
    let mut h = f.header().unwrap().clone();
    drop(f);
    h.ones = None;
    let bytes = h.encode();
    assert_eq!(&bytes[88..96], &[0u8; 8]);
    assert_eq!(u32::from_le_bytes(bytes[28..32].try_into().unwrap()), 0);
    poke(&path, 0, &bytes);
    let f = Filter::open(&path, Access::ReadOnly).unwrap();
    assert_eq!(f.stored_ones(), None);
    assert_eq!(f.ones(), truth);
    f.verify().unwrap();
    // An in-place update of such a file keeps it without a count (counting
    // would cost a pass the update avoids)...
    let mut f = Filter::open(&path, Access::ReadWrite).unwrap();
    f.begin_update().unwrap();
    f.update_batch(&["x"]).unwrap();
    f.commit_update().unwrap();
    drop(f);
    assert_eq!(stored(&path), None);
    Filter::open(&path, Access::ReadOnly)
        .unwrap()
        .verify()
        .unwrap();
}

#[test]
fn a_set_bit_count_field_without_its_mark_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path(), Layout::Blocked);
    let h = Filter::open(&path, Access::ReadOnly)
        .unwrap()
        .header()
        .unwrap()
        .clone();
    let mut bytes = h.encode();
    bytes[88..96].copy_from_slice(&5u64.to_le_bytes());
    // Reseal the header checksum so that only the field is wrong.
    bytes[120..128].fill(0);
    let sum = xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, 0);
    bytes[120..128].copy_from_slice(&sum.to_le_bytes());
    poke(&path, 0, &bytes);
    let err = Filter::open(&path, Access::ReadOnly).unwrap_err();
    assert!(matches!(problem(err), FormatProblem::BadField(f) if f.contains("set-bit count")));
}

#[test]
fn save_while_inserting_describes_the_bytes_it_wrote() {
    // Over 64 MiB: several 32 MiB chunks, another thread inserting throughout.
    let p = Params::from_plan(&plan(Layout::Blocked, 26_000_000, 1e-4).unwrap(), 3);
    assert!(p.bits / 8 > 64 << 20);
    let f = Filter::new(p).unwrap();
    for i in 0..200_000u32 {
        f.insert(format!("before-{i}").as_bytes());
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.bgf");
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                f.insert(format!("during-{i}").as_bytes());
                i += 1;
            }
        });
        f.save(&path).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let g = Filter::open(&path, Access::ReadOnly).unwrap();
    g.verify().unwrap();
    assert_eq!(g.stored_ones(), Some(g.count_ones()));
    for i in 0..200_000u32 {
        assert!(g.contains(format!("before-{i}").as_bytes()));
    }
}
