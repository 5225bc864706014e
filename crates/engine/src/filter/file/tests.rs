use super::*;
use crate::format::data_checksum;
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
    // order: the same items and seed must set the same bits forever.
    for (layout, golden) in [
        (Layout::Blocked, 0x2bdf_e930_20b6_d8d1_u64),
        (Layout::Classic, 0xff01_e29e_b789_1f74_u64),
    ] {
        let p = Params::from_plan(&plan(layout, 100, 0.01).unwrap(), 42);
        let f = Filter::new(p).unwrap();
        for c in b'a'..=b'z' {
            f.insert(&[c]);
        }
        let sum = data_checksum(f.as_bytes());
        assert_eq!(sum, golden, "{layout} bits changed: {sum:#x}");
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
            hash_id: HASH_XXH3_128,
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
