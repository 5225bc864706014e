use super::*;
use crate::math::plan;

fn params() -> Params {
    Params::from_plan(&plan(Layout::Blocked, 1000, 0.01).unwrap(), 42)
}

const GOLDEN: u64 = 0xd82c_7656_fc56_a56e;
const GOLDEN_WITH_ONES: u64 = 0x72ea_511e_ae68_e643;

#[test]
fn golden_header_bytes() {
    // A format change must be deliberate: these hashes pin every byte of
    // the header for fixed parameters. Without a set-bit count the bytes
    // are exactly those of files written before the count existed.
    for (ones, golden) in [(None, GOLDEN), (Some(77), GOLDEN_WITH_ONES)] {
        let h = Header {
            version: 1,
            params: params(),
            hash_id: HASH_XXH3_128,
            flags: 0,
            items: 7,
            data_len: params().bits / 8,
            data_checksum: 0x1234,
            ones,
        };
        let bytes = h.encode();
        assert_eq!(&bytes[..8], b"BLOOMGT\x01");
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
