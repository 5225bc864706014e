use super::*;
use crate::format::data_checksum;
use crate::hash::HashId;
use crate::math::plan;
use crate::math::Layout;

fn params() -> Params {
    Params::from_plan(&plan(Layout::Blocked, 1000, 0.01).unwrap(), 42)
}

#[test]
fn one_writer_per_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.bgf");
    Filter::new(params()).unwrap().save(&path).unwrap();
    let first = Filter::open(&path, Access::ReadWrite).unwrap();
    let err = Filter::open(&path, Access::ReadWrite)
        .unwrap_err()
        .to_string();
    assert!(err.contains("another process is writing"), "{err}");
    // Readers are not blocked.
    Filter::open(&path, Access::ReadOnly).unwrap();
    drop(first);
    Filter::open(&path, Access::ReadWrite).unwrap();
}

#[test]
fn golden_filter_bits() {
    // Pins the hash, the probe derivation of both layouts and the bit
    // order: the same items and seed must set the same bits forever, for
    // every hash id (files of hash id 1 stay readable as they were written).
    for (layout, hash, golden) in [
        (Layout::Blocked, HashId::Xxh3_128, 0x2bdf_e930_20b6_d8d1_u64),
        (Layout::Classic, HashId::Xxh3_128, 0xff01_e29e_b789_1f74_u64),
        (Layout::Blocked, HashId::Xxh3_64, 0xc8fc_4d76_49b6_07e8_u64),
        (
            Layout::Blocked,
            HashId::Xxh3_64Words,
            0x6535_7f23_8f4e_09c0_u64,
        ),
    ] {
        let mut p = Params::from_plan(&plan(layout, 100, 0.01).unwrap(), 42);
        p.hash = hash;
        let f = Filter::new(p).unwrap();
        for c in b'a'..=b'z' {
            f.insert(&[c]);
        }
        let sum = data_checksum(f.as_bytes());
        assert_eq!(sum, golden, "{layout} {hash} bits changed: {sum:#x}");
    }
}

#[test]
fn files_of_both_hash_ids_save_open_and_answer() {
    // Files written before hash ids 2 and 3 (XXH3-128, XXH3-64 with its
    // probes anywhere in the block) keep their hash through an open, an
    // in-place add and a save; a new blocked file gets hash id 3.
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<Vec<u8>> = (0..3000)
        .map(|i| format!("http://h{i}.example/p").into_bytes())
        .collect();
    for hash in [HashId::Xxh3_128, HashId::Xxh3_64, HashId::Xxh3_64Words] {
        let path = dir.path().join(format!("{hash}.bgf"));
        let mut p = Params::from_plan(&plan(Layout::Blocked, 5000, 1e-3).unwrap(), 7);
        p.hash = hash;
        let f = Filter::new(p).unwrap();
        f.insert_batch(&keys[..2000]);
        f.save(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes[17], hash.code(), "hash id at offset 17");
        let mut f = Filter::open(&path, Access::ReadWrite).unwrap();
        assert_eq!(f.params().hash, hash);
        f.begin_update().unwrap();
        f.update_batch(&keys[2000..]).unwrap();
        f.commit_update().unwrap();
        drop(f);
        let f = Filter::open(&path, Access::ReadOnly).unwrap();
        assert_eq!(f.params().hash, hash);
        assert!(
            keys.iter().all(|k| f.contains(k)),
            "{hash}: a key went missing"
        );
        f.verify().unwrap();
        // Its items are where the hash id says, not where the other hash
        // would put them: the other hash's filter misses most of them.
        let mut other = f.params().clone();
        other.hash = match hash {
            HashId::Xxh3_128 => HashId::Xxh3_64,
            HashId::Xxh3_64 => HashId::Xxh3_64Words,
            HashId::Xxh3_64Words => HashId::Xxh3_128,
        };
        let g = Filter::new(other).unwrap();
        g.insert_batch(&keys);
        assert_ne!(g.as_bytes(), f.as_bytes());
    }
}

/// A filter file larger than memory (`larger_than_memory`).
mod larger_than_memory {
    use super::*;
    use crate::{plan, Layout};

    /// A filter file twice the size of this machine's memory (sparse: it
    /// costs no disk) opens read-only and answers: the private mapping a
    /// read-only open makes must not ask the kernel to reserve memory for a
    /// copy of every page (it refused a 27.5 GB filter on a 24 GiB machine
    /// with ENOMEM).
    #[test]
    fn a_file_larger_than_memory_opens_and_answers() {
        let total = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| {
                let line = t.lines().find(|l| l.starts_with("MemTotal:"))?.to_string();
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map_or(64 << 30, |kib| kib * 1024);
        let items = 2 * total * 8 / 20;
        let params = Params::from_plan(&plan(Layout::Blocked, items, 1e-4).unwrap(), 3);
        assert!(params.bits / 8 > total);
        let header = Header {
            version: FORMAT_VERSION,
            params: params.clone(),
            flags: 0,
            items: 0,
            data_len: params.bits / 8,
            data_checksum: 0,
            ones: None,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.bgf");
        let file = File::create(&path).unwrap();
        use std::io::Write;
        (&file).write_all(&header.encode()).unwrap();
        file.set_len(HEADER_LEN as u64 + params.bits / 8).unwrap();
        for access in [Access::ReadOnly, Access::ReadWrite] {
            let f = Filter::open(&path, access).unwrap_or_else(|e| panic!("{access:?}: {e}"));
            assert_eq!(f.params().bits, params.bits);
            assert!(!f.contains(b"http://example.com/"));
        }
    }
}
