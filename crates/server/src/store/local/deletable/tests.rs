//! Unit tests of the served deletable filters: the chain as the server
//! grows it, its file, exactly-once replay, and logged changes after a
//! reopen. (The codec's own tests are in `bloomgate_blacklist::cf_file`.)

use super::*;
use crate::metrics::Metrics;
use crate::store::local::LocalStore;
use bloomgate_blacklist::cf_file;
use bloomgate_blacklist::wal::CuckooOp;
use bloomgate_engine::{random_seed, DeletableTable, Table};
use bloomgate_url::{KeyKind, MatchMode};
use dump::cut;
use proptest::prelude::*;

/// The header and each table's image, copied.
fn serialize(c: &Chain) -> (cf_file::CfHeader, Vec<Vec<u8>>) {
    let (h, body) = c.image();
    (h, body.iter().map(|b| b.pieces().concat()).collect())
}

/// A chain from `NAME.cf`'s bytes, with its export hashes.
fn decode_file(bytes: &[u8]) -> Result<(Chain, Option<Vec<u64>>), String> {
    let c = cf_file::decode(bytes).map_err(|e| e.to_string())?;
    let export = c.header.bgf.clone();
    Ok((Chain::from_contents(c)?, export))
}

/// A chain from its header and its tables' bytes.
fn from_parts(h: &cf_file::CfHeader, body: &[u8]) -> Result<Chain, String> {
    Chain::from_contents(cf_file::decode_body(h.clone(), body).map_err(|e| e.to_string())?)
}

fn store(dir: &Path) -> LocalStore {
    LocalStore::open(dir, Limits::default(), Arc::new(Metrics::default())).unwrap()
}

fn spec(capacity: u64, expansion: u32) -> DeletableSpec {
    DeletableSpec {
        layout: CfLayout::Cuckoo,
        capacity,
        bucket_size: 4,
        max_iterations: 100,
        expansion,
        error_rate: Some(1e-6),
        kind: KeyKind::Raw,
        mode: MatchMode::Exact,
    }
}

fn items(n: usize, prefix: &str) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .collect()
}

#[test]
fn default_rate_is_redisbloom_s_and_sizes_8_bit_fingerprints() {
    assert!((redisbloom_rate(2) - 4.0 / 255.0).abs() < 1e-12);
    let c = Chain::new(&DeletableSpec::redis_default(1024), &Limits::default()).unwrap();
    assert_eq!(c.info("x").fingerprint_bits, 8);
    let c = Chain::new(&spec(1000, 1), &Limits::default()).unwrap();
    // ⌈log2(2·4 / 1e-6)⌉ = 23.
    assert_eq!(c.info("x").fingerprint_bits, 23);
}

/// A dump's chunks cut from the pieces are the chunks of their
/// concatenation.
#[test]
fn cut_is_a_slice_of_the_concatenation() {
    let pieces: Vec<Vec<u8>> = [0usize, 3, 0, 7, 1, 10]
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| (i * 16 + j) as u8).collect())
        .collect();
    let whole = pieces.concat();
    for start in 0..=whole.len() as u64 + 2 {
        for len in [1, 2, 4, 5, 30] {
            let want: Vec<u8> = whole
                .iter()
                .skip(start as usize)
                .take(len)
                .copied()
                .collect();
            assert_eq!(cut(pieces.iter().map(Vec::as_slice), start, len), want);
        }
    }
}

/// The file keeps everything (parameters, counters, seq, tables) and
/// any damaged byte is refused, never read as a filter.
#[test]
fn file_round_trip_and_corruption() {
    let mut c = Chain::new(&spec(50, 2), &Limits::default()).unwrap();
    for it in items(300, "a") {
        assert_eq!(c.add(&it, false, &Limits::default(), false), CfAdded::Added);
    }
    assert!(c.tables().len() > 1);
    assert!(c.delete(b"a7").unwrap());
    c.seq = 301;
    let (h, body) = serialize(&c);
    let file = cf_file::encode(&h, &body);
    let mut streamed = Vec::new();
    let (h2, images) = c.image();
    assert_eq!(h2, h);
    cf_file::write(&mut streamed, &h, &images).unwrap();
    assert_eq!(streamed, file);
    let (back, _) = decode_file(&file).unwrap();
    assert_eq!(serialize(&back), (h.clone(), body.clone()));
    assert_eq!((back.items, back.deletes, back.seq), (299, 1, 301));
    assert!(!back.contains(b"a7") && back.contains(b"a8"));
    // Read from a file in bounded memory: the same chain, the same
    // faults.
    let dir = tempfile::tempdir().unwrap();
    let on_disk = |bytes: &[u8]| {
        let p = dir.path().join("t.cf");
        std::fs::write(&p, bytes).unwrap();
        files::load(&p)
    };
    let (loaded, _) = on_disk(&file).unwrap();
    assert_eq!(serialize(&loaded), (h.clone(), body.clone()));
    for at in [0, 9, 20, file.len() / 2, file.len() - 1] {
        let mut bad = file.clone();
        bad[at] ^= 0x40;
        assert!(decode_file(&bad).is_err(), "byte {at}");
        assert_eq!(on_disk(&bad).err(), decode_file(&bad).err(), "byte {at}");
    }
    for cut in [0, 5, 8, 15, 19, 30, file.len() - 1] {
        assert_eq!(
            on_disk(&file[..cut]).err(),
            decode_file(&file[..cut]).err(),
            "{cut} bytes"
        );
    }
    assert!(decode_file(&file[..file.len() - 1]).is_err());
    assert!(decode_file(b"").is_err());
}

/// A counting chain: one filter that takes every add (no growth past
/// capacity), keeps its layout through its file, and refuses a file
/// whose header names the other layout.
#[test]
fn counting_chain_never_grows_and_keeps_its_layout() {
    let sp = DeletableSpec {
        layout: CfLayout::Counting,
        ..spec(50, 2)
    };
    let mut c = Chain::new(&sp, &Limits::default()).unwrap();
    for it in items(500, "c") {
        assert_eq!(c.add(&it, false, &Limits::default(), false), CfAdded::Added);
    }
    assert_eq!((c.tables().len(), c.spec.expansion), (1, 0));
    // (At 10× its capacity the filter answers "present" for much that
    // was never added: only the counts are checked here.)
    let before = c.count(b"c7");
    assert!(c.delete(b"c7").unwrap());
    assert!(c.count(b"c7") < before || before == 15, "{before}");
    let info = c.info("x");
    assert_eq!((info.layout, info.items), ("counting", 499));
    assert!(info.load > 9.0 && info.predicted_fp > 1e-6, "{info:?}");
    let (h, body) = serialize(&c);
    let file = cf_file::encode(&h, &body);
    let (back, _) = decode_file(&file).unwrap();
    assert_eq!(back.spec.layout, CfLayout::Counting);
    assert_eq!(serialize(&back), (h.clone(), body.clone()));
    assert!(back.contains(b"c8"));
    // The same bytes read as cuckoo tables are refused, not misread.
    let mut h2 = h.clone();
    h2.layout = CfLayout::Cuckoo;
    assert!(from_parts(&h2, &body.concat()).is_err());
    // A cuckoo chain's header leaves the field out (files written
    // before counting filters were served read the same).
    let (hc, _) = serialize(&Chain::new(&spec(50, 1), &Limits::default()).unwrap());
    assert!(!String::from_utf8(serde_json::to_vec(&hc).unwrap())
        .unwrap()
        .contains("layout"));
}

/// Replay applies a record once: not one the file has, not twice, not
/// one of another incarnation.
#[test]
fn replay_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let n = s.cf_create("c", &spec(1000, 1)).unwrap();
    let id = read(&n.state).id;
    let rec = |seq, op, item: &[u8]| CuckooRecord {
        name: "c".into(),
        id,
        seq,
        op,
        item: item.to_vec(),
    };
    let cf = s.deletables();
    cf.replay(rec(1, CuckooOp::Add, b"x"));
    cf.replay(rec(2, CuckooOp::Add, b"x"));
    cf.replay(rec(3, CuckooOp::Delete, b"x"));
    assert_eq!(n.count(b"x"), 1);
    // Already applied: nothing happens.
    cf.replay(rec(3, CuckooOp::Delete, b"x"));
    cf.replay(rec(2, CuckooOp::Add, b"x"));
    assert_eq!(n.count(b"x"), 1);
    // Another incarnation's records never apply.
    cf.replay(CuckooRecord {
        id: id ^ 1,
        ..rec(4, CuckooOp::Delete, b"x")
    });
    assert_eq!(n.count(b"x"), 1);
    cf.replay(rec(4, CuckooOp::Delete, b"x"));
    assert_eq!(n.count(b"x"), 0);
    let i = n.info();
    assert_eq!((i.items, i.deletes), (0, 2));
}

/// Adds and deletes through the store are logged and come back after
/// a reopen (no snapshot: from the log alone), counts exact.
#[test]
fn logged_changes_come_back_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = store(dir.path());
        let n = s.cf_create("c", &spec(1000, 1)).unwrap();
        let its = items(100, "k");
        let refs: Vec<&[u8]> = its.iter().map(Vec::as_slice).collect();
        let mut out = Vec::new();
        let ack = n.add(&refs, false, &mut out).unwrap();
        ack.wait_blocking().unwrap();
        let ack = n.add(&refs[..10], false, &mut out).unwrap();
        ack.wait_blocking().unwrap();
        for it in &refs[..30] {
            let (found, ack) = n.delete_item(it).unwrap();
            assert!(found);
            ack.wait_blocking().unwrap();
        }
        let (found, ack) = n.delete_item(b"never").unwrap();
        assert!(!found);
        ack.wait_blocking().unwrap();
        s.shutdown();
    }
    let s = store(dir.path());
    let n = s.deletables().get("c").unwrap();
    for i in 0..100 {
        let want = match i {
            0..10 => 1,
            10..30 => 0,
            _ => 1,
        };
        assert_eq!(n.count(format!("k{i}").as_bytes()), want, "k{i}");
    }
    assert_eq!((n.info().items, n.info().deletes), (80, 30));
}

/// A step on a chain: add a copy of a key, delete one of the stored
/// copies (the index picks which), or look a key up.
#[derive(Clone, Debug)]
enum Step {
    Add(u16),
    DeleteStored(usize),
    Lookup(u16),
}

fn steps(keys: u16, len: usize) -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        prop_oneof![
            5 => (0..keys).prop_map(Step::Add),
            3 => any::<usize>().prop_map(Step::DeleteStored),
            1 => (0..keys).prop_map(Step::Lookup),
        ],
        1..len,
    )
}

fn key(k: u16) -> Vec<u8> {
    format!("item-{k}").into_bytes()
}

/// Runs `steps` on `c`, which holds the copies `stored` (one entry per
/// copy), checking after every step that each key stored more times
/// than deleted is present. A delete of a stored copy must find one,
/// unless `may_refuse` (sub-filters hashed apart), where it may
/// instead be refused, changing nothing. Returns the refusals.
fn run(
    c: &mut Chain,
    steps: Vec<Step>,
    mut stored: Vec<u16>,
    may_refuse: bool,
) -> Result<usize, TestCaseError> {
    let limits = Limits::default();
    let mut model: HashMap<u16, u64> = HashMap::new();
    for &x in &stored {
        *model.entry(x).or_default() += 1;
    }
    let mut refused = 0;
    for step in steps {
        match step {
            Step::Add(x) => match c.add(&key(x), false, &limits, false) {
                CfAdded::Added => {
                    *model.entry(x).or_default() += 1;
                    stored.push(x);
                }
                // 32 sub-filters of a few slots can fill up.
                CfAdded::Full => {}
                CfAdded::Exists => prop_assert!(false, "ADD answered exists"),
            },
            Step::DeleteStored(i) if !stored.is_empty() => {
                let x = stored[i % stored.len()];
                let before = serialize(c);
                match c.delete(&key(x)) {
                    Ok(found) => {
                        prop_assert!(found, "a stored copy of {} was not found", x);
                        stored.swap_remove(i % stored.len());
                        *model.get_mut(&x).unwrap() -= 1;
                    }
                    Err(e) => {
                        prop_assert!(may_refuse, "refused in a chain made here: {:?}", e);
                        let bloomgate_list::Error::Ambiguous(e) = e else {
                            return Err(TestCaseError::fail(format!("not a refusal: {e}")));
                        };
                        prop_assert!(e.tables.len() > 1);
                        prop_assert!(serialize(c) == before, "a refused delete changed the chain");
                        refused += 1;
                    }
                }
            }
            Step::DeleteStored(_) => {}
            Step::Lookup(x) => {
                let n = model.get(&x).copied().unwrap_or(0);
                prop_assert!(c.count(&key(x)) >= n.min(1));
            }
        }
        for (&x, &n) in &model {
            prop_assert!(
                n == 0 || c.contains(&key(x)),
                "false negative: {} (stored {})",
                x,
                n
            );
        }
    }
    prop_assert_eq!(c.items, stored.len() as u64);
    // The file keeps every stored copy.
    let (h, body) = serialize(c);
    let (back, _) = decode_file(&cf_file::encode(&h, &body)).unwrap();
    for (&x, &n) in &model {
        prop_assert!(n == 0 || back.contains(&key(x)), "lost in the file: {}", x);
    }
    Ok(refused)
}

fn layouts() -> impl Strategy<Value = CfLayout> {
    prop::sample::select(vec![CfLayout::Cuckoo, CfLayout::Counting])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// Chains as the server makes them, of every layout: cuckoo with
    /// buckets of 1, 2 or 4, expansion 1, 2 or 4, a first sub-filter
    /// of 2..=12 items and rates that give 3- to 6-bit fingerprints, so
    /// a few hundred adds grow it to several sub-filters and copies of
    /// different keys share fingerprints and buckets across them; and
    /// counting chains (one filter, never grown). Every delete of a
    /// stored copy finds one and takes no other key's.
    #[test]
    fn deletes_in_grown_chains_take_only_the_item_s_copy(
        steps in steps(200, 500),
        layout in layouts(),
        capacity in 2u64..=12,
        bucket_size in prop::sample::select(vec![1u16, 2, 4]),
        expansion in prop::sample::select(vec![1u32, 2, 4]),
        error_rate in prop::sample::select(vec![0.4, 0.2, 0.1]),
        max_iterations in 1u16..=30,
    ) {
        let sp = DeletableSpec {
            layout,
            capacity,
            bucket_size,
            max_iterations,
            expansion,
            error_rate: Some(error_rate),
            ..DeletableSpec::redis_default(capacity)
        };
        let mut c = Chain::new(&sp, &Limits::default()).unwrap();
        run(&mut c, steps, Vec::new(), false)?;
        if layout == CfLayout::Cuckoo {
            // (Counting chains hold one filter whatever is added.)
            prop_assert!(c.tables().len() > 1 || c.items < 40, "{} items in one sub-filter", c.items);
        }
    }

    /// Chains whose sub-filters were hashed apart — a seed each, sized
    /// one by one, as files and dumps from before nested chains hold
    /// them; or several counting filters, as a dump may carry — each
    /// filled first, then changed here (a cuckoo chain grows nested
    /// sub-filters after its old ones): a delete that cannot tell whose
    /// copy it would take is refused, and nothing is lost.
    #[test]
    fn chains_hashed_apart_refuse_rather_than_lose(
        steps in steps(200, 400),
        layout in layouts(),
        subs in 2usize..=4,
        fill in 1u16..=20,
        error_rate in prop::sample::select(vec![0.4, 0.2]),
    ) {
        let sp = DeletableSpec {
            layout,
            bucket_size: 2,
            expansion: 2,
            error_rate: Some(error_rate),
            ..DeletableSpec::redis_default(4)
        };
        let mut c = Chain::new(&sp, &Limits::default()).unwrap();
        let mut tables = Vec::new();
        let mut stored = Vec::new();
        for t in 0..subs {
            let sub = DeletableTable::new(layout.kind(), 4 << t, error_rate, 2, 20, random_seed(), (0, 0)).unwrap();
            for x in 0..fill {
                let x = x * 5 + t as u16;
                if sub.insert(&key(x)).is_ok() {
                    stored.push(x);
                }
            }
            tables.push(sub);
        }
        let tables = bloomgate_engine::Chain::from_tables(tables, 2).unwrap();
        c.list = bloomgate_list::TableList::new(tables, (sp.kind, sp.mode), Default::default());
        c.items = stored.len() as u64;
        run(&mut c, steps, stored, true)?;
    }
}

/// `EXPANSION 0`: a full chain refuses, and keeps every item it took.
#[test]
fn full_chain_refuses_and_keeps_everything() {
    let mut c = Chain::new(&spec(20, 0), &Limits::default()).unwrap();
    let mut taken = Vec::new();
    for it in items(500, "f") {
        match c.add(&it, false, &Limits::default(), false) {
            CfAdded::Added => taken.push(it),
            CfAdded::Full => {}
            CfAdded::Exists => unreachable!(),
        }
    }
    assert!(taken.len() >= 20 && taken.len() < 500);
    assert_eq!(c.tables().len(), 1);
    for it in &taken {
        assert_eq!(c.count(it), 1);
    }
    // A replayed add is placed anyway (the chain grows).
    assert_eq!(
        c.add(b"late", false, &Limits::default(), true),
        CfAdded::Added
    );
    assert!(c.contains(b"late"));
}

/// A whitelist edit is durable when it returns, in `NAME.cf.whitelist`,
/// and a delete takes the file with it; a filter served from the CLI's
/// `NAME.bgf` keeps its whitelist in `NAME.bgf.whitelist` until a
/// replayed add grows its chain past one table (no longer written back):
/// the next save moves the whitelist to `NAME.cf.whitelist`, which the
/// next start reads.
#[test]
fn the_whitelist_is_kept_beside_the_filter_and_follows_its_export() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = store(d);
    let n = s.cf_create("own", &spec(100, 1)).unwrap();
    let (w, x, v): (&[u8], &[u8], &[u8]) = (b"w", b"x", b"v");
    assert_eq!(n.whitelist(&[w, v], true).unwrap(), [Ok(false), Ok(false)]);
    let own = d.join("own.cf.whitelist");
    assert_eq!(Whitelist::load(&own).unwrap().len(), 2, "durable");
    assert_eq!(n.whitelist(&[w, x], false).unwrap(), [Ok(true), Ok(false)]);
    assert_eq!(Whitelist::load(&own).unwrap().len(), 1);
    assert!(s.deletables().delete("own"));
    assert!(!own.exists(), "deleted with the filter");
    s.shutdown();
    drop(s);

    let bgf = d.join("c.bgf");
    let kind = bloomgate_engine::format::DeletableKind::Cuckoo;
    let table = DeletableTable::new(kind, 8, 0.01, 2, 20, 7, (0, 0)).unwrap();
    table.save(&bgf).unwrap();
    let s = store(d);
    let n = s.deletables().get("c").unwrap();
    n.whitelist(&[w], true).unwrap();
    assert!(Whitelist::load(&Whitelist::path_for(&bgf))
        .unwrap()
        .contains(b"w"));
    assert!(!d.join("c.cf.whitelist").exists());
    // Replayed adds grow the chain whatever its expansion.
    let (id, mut seq) = (read(&n.state).id, read(&n.state).seq);
    while n.filters() < 2 && seq < 10_000 {
        seq += 1;
        s.deletables().replay(CuckooRecord {
            name: "c".into(),
            id,
            seq,
            op: CuckooOp::Add,
            item: format!("k{seq}").into_bytes(),
        });
    }
    assert_eq!(n.filters(), 2, "grown by replayed adds");
    s.snapshot().unwrap();
    assert!(lock(&n.export).is_none(), "no longer written back");
    let moved = Whitelist::load(&d.join("c.cf.whitelist")).unwrap();
    assert!(moved.contains(b"w"), "moved to its own file");
    s.shutdown();
    drop(s);
    let s = store(d);
    let n = s.deletables().get("c").unwrap();
    assert!(n.filters() >= 2);
    assert!(read(&n.state).list.list().whitelist().contains(b"w"));
}
