use super::*;
use crate::math::plan;

/// The parameters of the golden header: a blocked filter hashed with
/// XXH3-128 (hash id 1), as every file written before hash id 2.
fn params() -> Params {
    let mut p = Params::from_plan(&plan(Layout::Blocked, 1000, 0.01).unwrap(), 42);
    p.hash = HashId::Xxh3_128;
    p
}

const GOLDEN: u64 = 0xd82c_7656_fc56_a56e;
const GOLDEN_WITH_ONES: u64 = 0x72ea_511e_ae68_e643;
/// [`GOLDEN`]'s header with hash id 2 (XXH3-64).
const GOLDEN_XXH3_64: u64 = 0x87f7_62da_ef75_35f0;
/// [`GOLDEN`]'s header with hash id 3 (XXH3-64, probes in consecutive
/// words): what a new blocked filter's header is.
const GOLDEN_XXH3_64_WORDS: u64 = 0x6820_3246_8791_007f;

#[test]
fn golden_header_bytes() {
    // A format change must be deliberate: these hashes pin every byte of
    // the header for fixed parameters. Without a set-bit count the bytes
    // are exactly those of files written before the count existed.
    for (ones, hash, golden) in [
        (None, HashId::Xxh3_128, GOLDEN),
        (Some(77), HashId::Xxh3_128, GOLDEN_WITH_ONES),
        (None, HashId::Xxh3_64, GOLDEN_XXH3_64),
        (None, HashId::Xxh3_64Words, GOLDEN_XXH3_64_WORDS),
    ] {
        let mut params = params();
        params.hash = hash;
        let h = Header {
            version: 1,
            params: params.clone(),
            flags: 0,
            items: 7,
            data_len: params.bits / 8,
            data_checksum: 0x1234,
            ones,
        };
        let bytes = h.encode();
        assert_eq!(&bytes[..8], b"BLOOMGT\x01");
        assert_eq!(bytes[OFF_HASH], hash.code());
        assert_eq!(
            Header::decode(&bytes, HEADER_LEN as u64 + h.data_len).unwrap(),
            h
        );
        assert_eq!(
            xxh3_64_with_seed(&bytes, 0),
            golden,
            "header encoding changed: {:#x}",
            xxh3_64_with_seed(&bytes, 0)
        );
    }
}

#[test]
fn new_blocked_filters_get_hash_id_3_and_headers_name_only_known_hashes() {
    let blocked = Params::from_plan(&plan(Layout::Blocked, 1000, 0.01).unwrap(), 42);
    assert_eq!(blocked.hash, HashId::Xxh3_64Words);
    // More than 16 probes: hash id 2.
    let strict = Params::from_plan(&plan(Layout::Blocked, 1000, 1e-9).unwrap(), 42);
    assert!(strict.k > 16, "{}", strict.k);
    assert_eq!(strict.hash, HashId::Xxh3_64);
    let classic = Params::from_plan(&plan(Layout::Classic, 1000, 0.01).unwrap(), 42);
    assert_eq!(classic.hash, HashId::Xxh3_128);
    let h = Header {
        version: 1,
        params: classic.clone(),
        flags: 0,
        items: 0,
        data_len: classic.bits / 8,
        data_checksum: 0,
        ones: None,
    };
    let len = HEADER_LEN as u64 + h.data_len;
    let good = h.encode();
    assert_eq!(
        Header::decode(&good, len).unwrap().params.hash,
        HashId::Xxh3_128
    );
    // A classic filter cannot be addressed with one 64-bit hash; an
    // unknown id is refused, never read as another hash.
    for (id, what) in [
        (2u8, "id 2 (xxh3-64) for a classic"),
        (3, "id 3 (xxh3-64-words) for a classic"),
        (0, "unknown hash function id 0"),
        (4, "unknown hash function id 4"),
    ] {
        let mut bad = good.clone();
        bad[OFF_HASH] = id;
        let sum = header_checksum(&bad);
        bad[OFF_HEADER_SUM..][..8].copy_from_slice(&sum.to_le_bytes());
        let err = Header::decode(&bad, len).unwrap_err().to_string();
        assert!(err.contains(what), "{id}: {err}");
    } // Hash id 3 places at most 16 probes: a blocked header asking more is
      // refused, not read with its probes capped.
    let mut words = blocked.clone();
    words.k = 17;
    let h = Header {
        version: 1,
        params: words.clone(),
        flags: 0,
        items: 0,
        data_len: words.bits / 8,
        data_checksum: 0,
        ones: None,
    };
    let err = Header::decode(&h.encode(), HEADER_LEN as u64 + h.data_len)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("id 3 (xxh3-64-words)") && err.contains("k = 17"),
        "{err}"
    );
}
