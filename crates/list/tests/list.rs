//! `List` on real files of every layout and on a real redis-server: the
//! same items give the same verdicts through every kind; damage is an
//! error, never "absent"; removal is refused with a typed error where the
//! layout cannot delete.

use std::path::{Path, PathBuf};

use bloomgate_engine::math::{plan_counting, plan_cuckoo, CUCKOO_DEFAULT_BUCKET_SIZE};
use bloomgate_engine::{
    plan, AnyFilter, CountingFilter, CountingParams, CuckooFilter, CuckooParams, Filter, Layout,
    Params, Removal,
};
use bloomgate_list::{CheckScratch, Error, List, OpenOptions, Verdict};
use bloomgate_url::{KeyKind, MatchMode};
use testkit::redis::{redis_missing, RedisServer};

const LAYOUTS: [&str; 4] = ["blocked", "classic", "counting", "cuckoo"];

/// A url/prefix filter file of `layout` (empty), planned for 1,000 entries
/// at 10⁻⁶ per lookup, with a fixed seed.
fn empty_file(dir: &Path, layout: &str) -> PathBuf {
    let path = dir.join(format!("{layout}.bgf"));
    let (kind, mode) = (KeyKind::Url.as_u8(), MatchMode::Prefix.as_u8());
    let f = match layout {
        "blocked" | "classic" => {
            let l = if layout == "blocked" {
                Layout::Blocked
            } else {
                Layout::Classic
            };
            let mut p = Params::from_plan(&plan(l, 1000, 1e-6).unwrap(), 7);
            (p.key_kind, p.match_mode) = (kind, mode);
            AnyFilter::Bloom(Filter::new(p).unwrap())
        }
        "counting" => {
            let mut p = CountingParams::from_plan(&plan_counting(1000, 1e-6).unwrap(), 7);
            (p.key_kind, p.match_mode) = (kind, mode);
            AnyFilter::Counting(CountingFilter::new(p).unwrap())
        }
        _ => {
            let plan = plan_cuckoo(1000, 1e-6, CUCKOO_DEFAULT_BUCKET_SIZE).unwrap();
            let mut p = CuckooParams::from_plan(&plan, 7);
            (p.key_kind, p.match_mode) = (kind, mode);
            AnyFilter::Cuckoo(CuckooFilter::new(p).unwrap())
        }
    };
    f.save(&path).unwrap();
    path
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn update() -> OpenOptions {
    OpenOptions {
        update: true,
        ..OpenOptions::default()
    }
}

fn entries() -> Vec<String> {
    (0..200)
        .map(|i| format!("http://evil{i}.example/phish/"))
        .collect()
}

/// A file of `layout` holding [`entries`] (added through [`List::add`])
/// and one whitelisted entry.
fn filled_file(dir: &Path, layout: &str) -> PathBuf {
    let path = empty_file(dir, layout);
    let mut list = List::open_with(s(&path), &update()).unwrap();
    for e in entries() {
        assert!(list.add(e.as_bytes()).unwrap(), "{layout}: {e} new");
    }
    assert!(list.whitelist_add(b"http://evil7.example/phish/").unwrap());
    list.save_whitelist().unwrap();
    list.save().unwrap();
    path
}

fn queries() -> Vec<String> {
    let mut q = Vec::new();
    for i in 0..200 {
        q.push(format!("http://evil{i}.example/phish/"));
        q.push(format!("HTTP://EVIL{i}.example:80/phish/./login.php#frag"));
        q.push(format!("http://good{i}.example/"));
        q.push(format!("http://evil{i}.example/other/"));
    }
    q.push("http://evil7.example/phish/x".into());
    q.push("http://[::1".into());
    q.push("http://a.example:99999/".into());
    q
}

/// The verdicts of `list` for [`queries`], errors as their messages.
fn verdicts(list: &List) -> Vec<Result<Verdict, String>> {
    let q = queries();
    let mut out = Vec::new();
    list.check_many(
        q.iter().map(String::as_bytes),
        &mut CheckScratch::default(),
        &mut out,
    )
    .unwrap();
    assert_eq!(out.len(), q.len());
    out.into_iter()
        .map(|r| r.map_err(|e| e.to_string()))
        .collect()
}

#[test]
fn the_same_items_give_the_same_verdicts_through_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    let mut answers = Vec::new();
    for layout in LAYOUTS {
        let path = filled_file(dir.path(), layout);
        let list = List::open(s(&path)).unwrap();
        assert_eq!(list.layout(), layout);
        assert_eq!(
            (list.kind(), list.mode()),
            (KeyKind::Url, MatchMode::Prefix)
        );
        answers.push((layout.to_string(), verdicts(&list)));
    }
    // A filter in Redis: the blocked file pushed, with its whitelist.
    let server = (!redis_missing()).then(|| RedisServer::start(dir.path(), &[]));
    if let Some(server) = &server {
        let address = format!("redis://{}/urls", server.addr());
        let a = bloomgate_redis::Address::parse(&address).unwrap();
        bloomgate_redis::push(&dir.path().join("blocked.bgf"), &a, false, &|_| {}).unwrap();
        let list = List::open(&address).unwrap();
        assert_eq!(list.layout(), "blocked");
        answers.push(("redis".into(), verdicts(&list)));
    }
    let (first, want) = &answers[0];
    // What the answers are: every entry and URL under it a hit matched by
    // the entry's expression, the whitelisted entry exempt, misses absent,
    // invalid queries errors.
    let q = queries();
    for (i, (query, v)) in q.iter().zip(want).enumerate() {
        match (i % 4, i < 800) {
            _ if query.to_lowercase().contains("//evil7.example") && query.contains("/phish/") => {
                assert_eq!(
                    v.as_ref().unwrap(),
                    &Verdict::Whitelisted {
                        matched: b"evil7.example/phish/".to_vec()
                    },
                    "{query}"
                )
            }
            (0 | 1, true) => {
                let host = format!("evil{}.example/phish/", i / 4);
                assert_eq!(
                    v.as_ref().unwrap(),
                    &Verdict::Present {
                        matched: host.into_bytes()
                    },
                    "{query}"
                );
            }
            (2 | 3, true) => assert_eq!(v.as_ref().unwrap(), &Verdict::Absent, "{query}"),
            _ => assert!(v.is_err(), "{query}: {v:?}"),
        }
    }
    for (name, got) in &answers[1..] {
        assert_eq!(got, want, "{name} against {first}");
    }
    assert_eq!(answers.len(), 4 + server.is_some() as usize);
}

#[test]
fn add_says_new_once_and_remove_takes_one_copy() {
    let dir = tempfile::tempdir().unwrap();
    for layout in LAYOUTS {
        let path = empty_file(dir.path(), layout);
        let mut list = List::open_with(s(&path), &update()).unwrap();
        assert!(list.add(b"http://x.example/a").unwrap(), "{layout}");
        assert!(!list.add(b"HTTP://X.example:80/a#b").unwrap(), "{layout}");
        list.save().unwrap();
        drop(list);
        let hit = |list: &List| list.check(b"http://x.example/a").unwrap().unwrap().hit();
        let mut list = List::open_with(s(&path), &update()).unwrap();
        assert!(hit(&list), "{layout}: saved");
        match layout {
            "counting" | "cuckoo" => {
                // Two copies were stored (a multiset): two removes.
                assert_eq!(
                    list.remove(b"http://x.example/a").unwrap(),
                    Removal::Removed
                );
                assert!(hit(&list), "{layout}: one copy left");
                assert_eq!(
                    list.remove(b"http://x.example/a").unwrap(),
                    Removal::Removed
                );
                assert!(!hit(&list), "{layout}: none left");
                assert_eq!(
                    list.remove(b"http://x.example/a").unwrap(),
                    Removal::NotPresent
                );
            }
            _ => assert!(matches!(
                list.remove(b"http://x.example/a"),
                Err(Error::CannotRemove { .. })
            )),
        }
        // Invalid entries are typed errors.
        assert!(matches!(
            list.add(b"http://[::1"),
            Err(Error::InvalidItem { .. })
        ));
        list.save().unwrap();
        drop(list);
        // A list opened for reading takes no changes.
        let mut read = List::open(s(&path)).unwrap();
        assert!(matches!(
            read.add(b"http://y.example/"),
            Err(Error::ReadOnly(_))
        ));
    }
}

#[test]
fn remove_on_a_bloom_list_is_a_typed_error_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for layout in ["blocked", "classic"] {
        let path = filled_file(dir.path(), layout);
        let before = std::fs::read(&path).unwrap();
        for options in [OpenOptions::default(), update()] {
            let mut list = List::open_with(s(&path), &options).unwrap();
            let e = list.removable().unwrap_err();
            assert!(
                matches!(&e, Error::CannotRemove { layout: l, .. } if *l == layout),
                "{e}"
            );
            assert!(e.to_string().contains("cannot delete entries"), "{e}");
            assert!(!e.is_usage());
            assert!(matches!(
                list.remove(b"http://evil1.example/phish/"),
                Err(Error::CannotRemove { .. })
            ));
            if options.update {
                list.save().unwrap();
            }
        }
        // Still every entry, and (after the update's reseal) the same bits.
        let list = List::open(s(&path)).unwrap();
        assert!(list
            .check(b"http://evil1.example/phish/")
            .unwrap()
            .unwrap()
            .hit());
        assert_eq!(
            std::fs::read(&path).unwrap()[4096..],
            before[4096..],
            "{layout}"
        );
    }
}

#[test]
fn a_damaged_or_truncated_file_is_an_error_never_absent() {
    let dir = tempfile::tempdir().unwrap();
    for layout in LAYOUTS {
        let path = filled_file(dir.path(), layout);
        let bytes = std::fs::read(&path).unwrap();
        // Truncated: the header records the length, so the open fails.
        let cut = dir.path().join(format!("cut-{layout}.bgf"));
        std::fs::write(&cut, &bytes[..bytes.len() - 64]).unwrap();
        assert!(List::open(s(&cut)).is_err(), "{layout}: truncated");
        let tiny = dir.path().join(format!("tiny-{layout}.bgf"));
        std::fs::write(&tiny, &bytes[..10]).unwrap();
        assert!(List::open(s(&tiny)).is_err(), "{layout}: ten bytes");
        // A flipped data byte: the checksum says so, at open with verify
        // and through verify().
        let flipped = dir.path().join(format!("flip-{layout}.bgf"));
        let mut b = bytes.clone();
        let at = b.len() - 100;
        b[at] ^= 0x10;
        std::fs::write(&flipped, &b).unwrap();
        let verify = OpenOptions {
            verify: true,
            ..OpenOptions::default()
        };
        assert!(List::open_with(s(&flipped), &verify).is_err(), "{layout}");
        assert!(
            List::open(s(&flipped)).unwrap().verify().is_err(),
            "{layout}"
        );
        List::open(s(&path)).unwrap().verify().unwrap();
    }
    let missing = dir.path().join("missing.bgf");
    let e = List::open(s(&missing)).unwrap_err();
    assert!(e.to_string().contains("missing.bgf"), "{e}");
}

#[test]
fn a_missing_redis_shard_is_an_error_never_absent() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), &[]);
    let path = filled_file(dir.path(), "blocked");
    let address = format!("redis://{}/urls", server.addr());
    let a = bloomgate_redis::Address::parse(&address).unwrap();
    bloomgate_redis::push(&path, &a, false, &|_| {}).unwrap();
    let mut list = List::open(&address).unwrap();
    assert!(list.info().unwrap().problems.is_empty());
    // Adds through Redis: new once (add-if-absent).
    assert!(list.add(b"http://fresh.example/").unwrap());
    assert!(!list.add(b"http://fresh.example/").unwrap());
    // Remove is refused; options of files are usage errors.
    assert!(matches!(
        list.remove(b"http://fresh.example/"),
        Err(Error::CannotRemove { .. })
    ));
    for options in [
        OpenOptions {
            verify: true,
            ..OpenOptions::default()
        },
        OpenOptions {
            snapshot_only: true,
            ..OpenOptions::default()
        },
    ] {
        let e = List::open_with(&address, &options).unwrap_err();
        assert!(e.is_usage(), "{e}");
    }
    assert!(List::open("redis://h:1/").unwrap_err().is_usage());
    // The only shard deleted (as an eviction would): lookups fail.
    let shard = bloomgate_redis::layout::shard_key("urls", 0);
    assert_eq!(server.cli(&["DEL", &shard]).trim(), "(integer) 1");
    let mut out = Vec::new();
    let e = list
        .check_many(
            [
                &b"http://good1.example/"[..],
                b"http://evil1.example/phish/",
            ],
            &mut CheckScratch::default(),
            &mut out,
        )
        .unwrap_err();
    assert!(
        matches!(&e, Error::Redis(r) if matches!(**r, bloomgate_redis::Error::Damaged { .. })),
        "{e}"
    );
    assert!(out.is_empty(), "no verdict when the store cannot tell");
    assert!(list.check(b"http://good1.example/").is_err());
    let info = list.info().unwrap();
    assert_eq!(info.problems.len(), 2, "{:?}", info.problems);
    assert!(info.json["shards_damaged"][0]["problem"] == "missing");
    // A server that is gone: an error too.
    drop(server);
    assert!(list.check(b"http://evil1.example/phish/").is_err());
}

#[test]
fn info_describes_every_kind_in_one_shape() {
    let dir = tempfile::tempdir().unwrap();
    for layout in LAYOUTS {
        let path = filled_file(dir.path(), layout);
        let info = List::open(s(&path)).unwrap().info().unwrap();
        assert_eq!(info.json["layout"], layout);
        assert_eq!(info.json["items"], 200, "{layout}");
        assert_eq!(info.json["whitelist_items"], 1, "{layout}");
        assert_eq!(info.lines[0], format!("file            {}", s(&path)));
        assert!(info.problems.is_empty());
    }
}

/// A Bloom list's batched answers (the library's one verdict,
/// [`List::check_many`]) are exactly the one-query-at-a-time answers of the
/// blacklist it opens ([`bloomgate_blacklist::Blacklist::check`], which
/// stops at the first hit), for every key kind: hits, whitelisted answers
/// by a listed query's canonical form and by a sub-expression, and invalid
/// queries. (Moved here from `bloomgate-blacklist`, whose own batch path
/// this replaces.)
#[test]
fn check_many_answers_exactly_as_check() {
    use bloomgate_blacklist::Blacklist;
    use bloomgate_engine::Access;

    let dir = tempfile::tempdir().unwrap();
    for (kind, mode) in [
        (KeyKind::Url, MatchMode::Prefix),
        (KeyKind::Url, MatchMode::Exact),
        (KeyKind::Host, MatchMode::Exact),
        (KeyKind::Raw, MatchMode::Exact),
    ] {
        let path = dir.path().join(format!("{kind:?}-{mode:?}.bgf"));
        let mut p = Params::from_plan(&plan(Layout::Blocked, 1000, 1e-6).unwrap(), 5);
        (p.key_kind, p.match_mode) = (kind.as_u8(), mode.as_u8());
        Filter::new(p).unwrap().save(&path).unwrap();
        let mut list = List::open_with(s(&path), &update()).unwrap();
        for e in [
            &b"http://evil.example/phish/"[..],
            b"http://bad.test/",
            b"evil.example",
        ] {
            let _ = list.add(e);
        }
        // Whitelist the canonical form of one listed query and a
        // sub-expression of another, so both whitelist rules are exercised.
        let allowed: &[&[u8]] = match kind {
            KeyKind::Url => &[b"http://bad.test/", b"evil.example/phish/"],
            KeyKind::Host => &[b"bad.test"],
            _ => &[b"http://bad.test/"],
        };
        for a in allowed {
            list.whitelist_add(a).unwrap();
        }
        list.save_whitelist().unwrap();
        list.save().unwrap();
        drop(list);

        let queries: Vec<&[u8]> = vec![
            b"http://evil.example/phish/login.php",
            b"HTTP://EVIL.example:80/phish/./x#y",
            b"http://bad.test/",
            b"http://bad.test/deeper/page",
            b"evil.example",
            b"a.b.evil.example",
            b"http://clean.example/",
            b"http://[::1/",
            b"",
            b"\xff\xfe",
            b"joe@evil.example",
        ];
        let list = List::open(s(&path)).unwrap();
        let mut out = Vec::new();
        list.check_many(
            queries.iter().copied(),
            &mut CheckScratch::default(),
            &mut out,
        )
        .unwrap();
        assert_eq!(out.len(), queries.len());
        let one_by_one = Blacklist::open(&path, Access::ReadOnly).unwrap();
        let mut keys = Vec::new();
        for (q, got) in queries.iter().zip(&out) {
            let want = one_by_one.check(q, &mut keys);
            match (want, got) {
                (Ok(w), Ok(g)) => assert_eq!(
                    (
                        w.hit,
                        w.whitelisted,
                        w.matched.as_deref().map(str::as_bytes)
                    ),
                    (g.hit(), g.whitelisted(), g.matched()),
                    "{kind:?}/{mode:?} {}",
                    String::from_utf8_lossy(q)
                ),
                (Err(w), Err(g)) => assert_eq!(w.to_string(), g.to_string()),
                (w, g) => panic!(
                    "{kind:?}/{mode:?} {}: {w:?} vs {g:?}",
                    String::from_utf8_lossy(q)
                ),
            }
        }
        // The mix really exercises hits, whitelisted answers and errors.
        assert!(out.iter().any(|v| matches!(v, Ok(Verdict::Present { .. }))));
        assert!(out.iter().any(|v| v.is_err()));
        assert!(out
            .iter()
            .any(|v| matches!(v, Ok(Verdict::Whitelisted { .. }))));
    }
}

#[test]
fn batched_adds_give_the_answers_and_bytes_of_adds_one_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    // 3,000 entries (with repeats) into filters planned for 1,000: past
    // their capacity, so keys of one batch also collide (false positives
    // caused by earlier keys of the same batch).
    let mut urls: Vec<String> = (0..3000)
        .map(|i| format!("http://evil{}.example/p/", i % 2500))
        .collect();
    urls.extend(urls[..100].to_vec());
    let keys: Vec<Vec<u8>> = urls
        .iter()
        .map(|u| {
            bloomgate_url::entry_key(KeyKind::Url, MatchMode::Prefix, u.as_bytes())
                .unwrap()
                .into_owned()
        })
        .collect();
    for layout in ["blocked", "classic"] {
        let empty = empty_file(dir.path(), layout);
        let one = dir.path().join(format!("{layout}-one.bgf"));
        let many = dir.path().join(format!("{layout}-many.bgf"));
        std::fs::copy(&empty, &one).unwrap();
        std::fs::copy(&empty, &many).unwrap();
        let mut a = List::open_with(s(&one), &update()).unwrap();
        let single: Vec<bool> = keys.iter().map(|k| a.add_key(k).unwrap()).collect();
        a.save().unwrap();
        let mut b = List::open_with(s(&many), &update()).unwrap();
        let mut batched = Vec::new();
        for chunk in keys.chunks(777) {
            let c = b.add_keys(chunk);
            assert!(c.error.is_none(), "{layout}: {:?}", c.error);
            batched.extend(c.outcomes.iter().map(|&c| c == bloomgate_list::Claim::New));
        }
        b.save().unwrap();
        assert_eq!(single, batched, "{layout}: the same answers");
        assert!(
            single.iter().filter(|&&n| n).count() < 2500,
            "{layout}: collisions seen"
        );
        assert_eq!(
            std::fs::read(&one).unwrap(),
            std::fs::read(&many).unwrap(),
            "{layout}: the same bytes"
        );
        drop((a, b));
        // And the file a batch wrote verifies and answers every key.
        let l = List::open(s(&many)).unwrap();
        l.verify().unwrap();
        let mut out = Vec::new();
        l.check_many(
            urls.iter().map(String::as_bytes),
            &mut CheckScratch::default(),
            &mut out,
        )
        .unwrap();
        assert!(out.iter().all(|v| v.as_ref().unwrap().hit()), "{layout}");
    }
}

/// A `BloomList` made of a Bloom file's layers and whitelist (what the
/// server publishes for its Bloom filters) answers every query as the file
/// opened with `List::open` does, through `List::check_many` and its own
/// `check_each`; its whitelist edits are the opened list's, made on a copy
/// that leaves the original as it was; and a list over grown layers keeps
/// the whitelist.
#[test]
fn a_bloom_list_of_layers_answers_as_the_opened_file() {
    use bloomgate_blacklist::layers::Layers;
    use bloomgate_blacklist::Whitelist;
    use bloomgate_engine::Access;
    use bloomgate_list::BloomList;

    let dir = tempfile::tempdir().unwrap();
    for layout in ["blocked", "classic"] {
        let path = filled_file(dir.path(), layout);
        let opened = List::open(s(&path)).unwrap();
        let want = verdicts(&opened);
        let layers = Layers::open(&path, Access::ReadOnly).unwrap();
        let whitelist = Whitelist::load(&Whitelist::path_for(&path)).unwrap();
        assert_eq!(whitelist.len(), 1, "{layout}");
        let bloom = BloomList::new(&path, layers, whitelist);
        assert_eq!(verdicts(bloom.list()), want, "{layout}");
        let q = queries();
        let refs: Vec<&[u8]> = q.iter().map(String::as_bytes).collect();
        let mut each = Vec::new();
        bloom.check_each(&refs, &mut CheckScratch::default(), |v| {
            each.push(v.map(Verdict::of).map_err(|e| e.to_string()))
        });
        assert_eq!(each, want, "{layout}");
        assert!(each.iter().any(|v| v.as_ref().is_ok_and(Verdict::hit)));
        assert!(each
            .iter()
            .any(|v| v.as_ref().is_ok_and(Verdict::whitelisted)));

        let items: [&[u8]; 4] = [
            b"http://evil3.example/phish/",
            b"http://good1.example/",
            b"http://[::1",
            b"http://evil7.example/phish/",
        ];
        let mut edited = bloom.clone();
        let mut reference = List::open(s(&path)).unwrap();
        let got = edited.list_mut().whitelist_edit(&items, true).unwrap();
        assert_eq!(got, reference.whitelist_edit(&items, true).unwrap());
        assert_eq!(got[0], Ok(true), "{layout}: a hit");
        assert_eq!(got[1], Ok(false), "{layout}: not a hit");
        assert!(got[2].is_err(), "{layout}: not a url");
        assert_eq!(verdicts(edited.list()), verdicts(&reference), "{layout}");
        assert_ne!(verdicts(edited.list()), want, "{layout}: the edit counts");
        assert_eq!(verdicts(bloom.list()), want, "{layout}: the original");
        let removed = edited.list_mut().whitelist_edit(&items[..1], false);
        assert_eq!(removed.unwrap(), vec![Ok(true)], "{layout}");

        let regrown = bloom.with_layers(bloom.layers().clone());
        assert_eq!(regrown.whitelist().len(), 1, "{layout}");
        assert_eq!(verdicts(regrown.list()), want, "{layout}");
    }
}

/// A table list over the chain a server holds answers as the file opened
/// by `List::open` (verdicts, whitelist); it grows the chain only when the
/// caller admits the new table; removes take one copy, and a delete that
/// cannot tell tables hashed apart is refused with nothing changed; the
/// empty raw item is an entry of it, and of no opened file.
#[test]
fn a_table_list_over_a_chain_answers_as_the_opened_file() {
    use bloomgate_blacklist::Whitelist;
    use bloomgate_engine::{Chain, ChainAdd, CuckooFilter, CuckooParams, DeletableTable, Removal};
    use bloomgate_list::TableList;

    let dir = tempfile::tempdir().unwrap();
    for layout in ["counting", "cuckoo"] {
        let path = filled_file(dir.path(), layout);
        let opened = List::open(s(&path)).unwrap();
        let want = verdicts(&opened);
        let table = DeletableTable::open(&path).unwrap().unwrap();
        let whitelist = Whitelist::load(&Whitelist::path_for(&path)).unwrap();
        let rules = (KeyKind::Url, MatchMode::Prefix);
        let list = TableList::new(Chain::new(table, 0), rules, whitelist);
        assert_eq!(verdicts(list.list()), want, "{layout}");
        let q = queries();
        let refs: Vec<&[u8]> = q.iter().map(String::as_bytes).collect();
        let mut each = Vec::new();
        list.check_each(&refs, &mut CheckScratch::default(), |v| {
            each.push(v.map(Verdict::of).map_err(|e| e.to_string()))
        });
        assert_eq!(each, want, "{layout}");
        // Not a raw list: the empty item is invalid, as in the file.
        assert!(list.entry_key(b"").is_err(), "{layout}");
        assert!(opened.entry_key(b"").is_err(), "{layout}");

        // A whitelist edit made on a copy answers as the file's, and
        // changes nothing until it is set.
        let mut list = list;
        let items: [&[u8]; 3] = [
            b"http://evil3.example/phish/",
            b"http://good1.example/",
            b"http://[::1",
        ];
        let mut reference = List::open(s(&path)).unwrap();
        let (edited, got) = list.whitelist_edited(&items, true).unwrap();
        assert_eq!(got, reference.whitelist_edit(&items, true).unwrap());
        assert_eq!(got[..2], [Ok(true), Ok(false)], "{layout}");
        assert!(got[2].is_err(), "{layout}: not a url");
        assert_eq!(verdicts(list.list()), want, "{layout}: not yet set");
        list.set_whitelist(edited);
        assert_eq!(verdicts(list.list()), verdicts(&reference), "{layout}");
        assert_ne!(verdicts(list.list()), want, "{layout}: the edit counts");
        let (edited, got) = list.whitelist_edited(&items[..2], false).unwrap();
        assert_eq!(got, [Ok(true), Ok(true)], "{layout}: both were added");
        list.set_whitelist(edited);
        assert_eq!(verdicts(list.list()), want, "{layout}: taken off");
    }

    // A raw cuckoo chain that may grow: only when admitted.
    let params = |seed| CuckooParams {
        buckets: 2,
        bucket_size: 2,
        fingerprint_bits: 16,
        max_kicks: 10,
        seed,
        bucket_shift: 0,
        key_kind: 0,
        match_mode: 0,
        planned_items: 4,
        target_fp: 0.01,
    };
    let table = |seed| DeletableTable::Cuckoo(CuckooFilter::new(params(seed)).unwrap());
    let rules = (KeyKind::Raw, MatchMode::Exact);
    let mut list = TableList::new(Chain::new(table(1), 2), rules, Whitelist::default());
    let mut added = Vec::new();
    for i in 0..100u32 {
        let key = i.to_le_bytes();
        match list.add_key(&key, false, false, |_, _| false) {
            ChainAdd::Added => added.push(key),
            ChainAdd::Full => break,
            ChainAdd::Exists => unreachable!("not nx"),
        }
    }
    assert_eq!(list.chain().len(), 1, "refused growth");
    let (edited, got) = list.whitelist_edited(&[&added[0]], true).unwrap();
    assert_eq!(got, [Ok(true)]);
    list.set_whitelist(edited);
    // Admitted: it grows (a later key finds no room in the first table).
    let mut i = 100u32;
    while list.chain().len() == 1 && i < 10_000 {
        assert_eq!(
            list.add_key(&i.to_le_bytes(), false, false, |_, _| true),
            ChainAdd::Added
        );
        added.push(i.to_le_bytes());
        i += 1;
    }
    assert_eq!(list.chain().len(), 2, "admitted growth");
    assert!(added.iter().all(|k| list.count(k) >= 1));
    // The chain grew in place: its whitelist is the one it had.
    assert_eq!(list.list().whitelist().len(), 1);
    assert!(list.list().check(&added[0]).unwrap().unwrap().whitelisted());
    // The empty raw item is an entry: added, counted, removed.
    let empty = list.entry_key(b"").unwrap().into_owned();
    assert_eq!(
        list.add_key(&empty, false, false, |_, _| true),
        ChainAdd::Added
    );
    assert_eq!(list.count(b""), 1);
    assert!(list.list().check(b"").unwrap().unwrap().hit());
    assert_eq!(list.remove_key(b"").unwrap(), Removal::Removed);
    assert_eq!(list.count(b""), 0);
    assert_eq!(list.list().check(b"").unwrap(), Ok(Verdict::Absent));
    assert_eq!(list.remove_key(&added[0]).unwrap(), Removal::Removed);

    // Tables hashed apart, both holding the item: refused, unchanged.
    let (a, b) = (table(2), table(3));
    let (a_in, b_in) = (
        bloomgate_engine::Table::insert(&a, b"x"),
        bloomgate_engine::Table::insert(&b, b"x"),
    );
    assert!(a_in.is_ok() && b_in.is_ok());
    let chain = Chain::from_tables(vec![a, b], 0).unwrap();
    let mut list = TableList::new(chain, rules, Whitelist::default());
    let e = list.remove_key(b"x").unwrap_err();
    assert!(matches!(e, bloomgate_list::Error::Ambiguous(_)), "{e}");
    assert_eq!(list.count(b"x"), 2, "nothing was deleted");
}
