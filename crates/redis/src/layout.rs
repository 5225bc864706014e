//! How a blocked filter is laid out in Redis: key names, shards, hash tags,
//! bit offsets and the metadata record. `docs/redis-layout.md` describes
//! the same layout for readers of the keys (redis-cli, other languages).
//!
//! # Shards
//!
//! The filter's data (the bytes after a `.bgf` file's 4096-byte header) is
//! cut into shards of [`SHARD_BLOCKS`] 64-byte blocks; the last shard may be
//! shorter. Shard `i` is one Redis string holding bytes
//! `[i·S·64, min((i+1)·S, blocks)·64)` of the data, byte for byte. A block
//! never straddles two shards, so an item's `k` bits (all in its block) live
//! in one key: a lookup is one `GETRANGE` of 64 bytes, an add one
//! `BITFIELD`, whatever the filter's size.
//!
//! # Shard size
//!
//! Measured on Redis 7.0.15 (jemalloc 5.3.0): `MEMORY USAGE` of keys set
//! whole with `SET`:
//!
//! | blocks  | payload bytes | MEMORY USAGE | overhead |
//! |--------:|--------------:|-------------:|---------:|
//! |   1,023 |        65,472 |       65,592 |   0.18 % |
//! |   1,024 |        65,536 |       81,976 |  25.1 %  |
//! |   4,095 |       262,080 |      262,200 |   0.05 % |
//! |   4,096 |       262,144 |      327,736 |  25.0 %  |
//! |  16,383 |     1,048,512 |    1,048,632 |   0.01 % |
//! |  16,384 |     1,048,576 |    1,310,776 |  25.0 %  |
//! |  65,535 |     4,194,240 |    4,194,360 |   0.00 % |
//!
//! A whole filter agrees: a push of a 1.03 GiB filter (1,051 shards) raised
//! `used_memory` to 1,102,749,192 bytes for 1,101,510,912 bytes of data.
//!
//! A power-of-two payload plus Redis's string header lands just past a
//! jemalloc size class and costs a quarter more; one block less does not.
//! 16,383 blocks (1,048,512 bytes) is chosen: per byte as cheap as larger
//! shards and cheaper than smaller ones (120 bytes per key), small enough that writing, migrating (`MIGRATE` during a
//! reshard) or deleting one key blocks Redis for about a millisecond, and
//! fine enough that a filter of a few GB spreads over thousands of slots
//! (10¹⁰ URLs at 10⁻⁴, 27.7 GB: 26,423 shards). The size is recorded in the
//! metadata ([`Meta::shard_blocks`]), so it can change without a format
//! change.
//!
//! Strings grown by writes cost more: a shard created by a `BITFIELD` at
//! its first byte and grown to its full length by later ones measured
//! 1,310,768 bytes (sds growth rounds up), against 1,048,624 when its last
//! byte was written first. Shards are therefore always created whole (a
//! push writes every shard, zeros included) and never grown.
//!
//! # Missing shards are damage
//!
//! Since every shard is written whole before the metadata, a shard key
//! that is missing (or of another length) under existing metadata is lost
//! data — evicted by a `maxmemory` policy, deleted or overwritten — never
//! an empty shard. Every path says so ([`Error::Damaged`]) instead of
//! reading zeros: a lookup's `GETRANGE` of a block of a whole shard
//! returns exactly 64 bytes, so a shorter reply (`""` for a missing key)
//! is the check, at no extra cost; an add's write runs in a transaction
//! that checked the shard's length after `WATCH`ing it, so it refuses a
//! shard of the wrong length instead of creating it anew as zeros.
//!
//! # Hash tags
//!
//! Shard keys are `bg:{TAG}:NAME:i`, where `TAG` is a short string from a
//! table (built once, [`tag_for_slot`]) whose CRC16 is the slot the shard
//! should live in: `(crc16(NAME) + i · STRIDE) mod 16384`. `STRIDE` is odd,
//! so 16,384 consecutive shards take 16,384 distinct slots, and it is
//! 16384/φ rounded, so consecutive shards jump across the slot space and
//! any range of slots (what one master owns) holds its share of the shards
//! to within a few (the three-distance theorem): a filter spreads evenly
//! over all masters, and a push in shard order keeps every master busy.
//! Without tags the key names would hash anywhere, evenly only on average;
//! with one tag per filter every shard would sit on one master.
//!
//! # Bit order
//!
//! The engine stores a block as eight little-endian `u64` words and numbers
//! bit `j` of a word from its least significant end, so data bit `b` is bit
//! `b mod 8` (from the least significant) of byte `b / 8`. Redis numbers
//! bits of a string from the most significant bit of byte 0 (`SETBIT`,
//! `BITFIELD`, `GETBIT`). Data bit `b` of shard `i` is therefore Redis bit
//! `(b/8 − first byte of i)·8 + 7 − b mod 8` ([`redis_bit`]), which keeps
//! the shard byte-identical to the file.

use bloomgate_engine::math::BLOCK_BITS;
use bloomgate_engine::place::Locator;
use bloomgate_engine::slice::for_each_position;
use bloomgate_engine::{HashId, Layout, Params};

use crate::error::{Error, Result};

/// Bytes of one block.
pub const BLOCK_BYTES: u64 = BLOCK_BITS / 8;

/// Blocks per shard of a new filter (see the module documentation for the
/// measurement): 1,048,512 bytes, one block short of a power of two.
pub const SHARD_BLOCKS: u64 = 16_383;

/// The most blocks a shard may hold: a Redis string is at most 512 MiB.
/// Metadata that says more is refused before any range is computed from it.
pub const MAX_SHARD_BLOCKS: u64 = (512 << 20) / BLOCK_BYTES;

/// The most shards a filter may have: 2²⁰, a 1 TiB filter at
/// [`SHARD_BLOCKS`] (a stored filter is refused past this before anything
/// loops over its shards).
pub const MAX_SHARDS: u64 = 1 << 20;

/// Redis Cluster's slots.
pub const SLOTS: u16 = 16_384;

/// Slot distance of consecutive shards: an odd number (coprime to 16384,
/// so a full cycle visits every slot) close to 16384/φ = 10125.87. The
/// nearest odd number is 10125; 10127, two more, was chosen when the
/// layout was made and stays: it is part of every stored filter's key
/// names. Its continued fraction spreads shards as evenly (any range of
/// slots holds its share to within a few, checked by the tests).
pub const STRIDE: u16 = 10_127;

/// Version of this layout, stored in the metadata (`format`). Readers
/// refuse versions they do not know.
pub const FORMAT: u32 = 1;

/// The layout version of a filter hashed with XXH3-64 (hash id 2): the
/// same shards, keys and bit order as [`FORMAT`]. Builds from before hash
/// id 2 never read the `hash` field, so a filter they could misplace
/// items in carries a version they refuse ([`Meta::format_for`]).
pub const FORMAT_XXH3_64: u32 = 2;

/// The layout version of a filter with hash id 3 (XXH3-64, the probes in
/// consecutive words of the block): the same shards, keys and bit order
/// again; a build that knows only versions 1 and 2 would test other bits.
pub const FORMAT_XXH3_64_WORDS: u32 = 3;

/// CRC16 as Redis Cluster defines it (XMODEM: polynomial 0x1021, initial
/// value 0, no reflection); `crc16(b"123456789") == 0x31C3`.
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of a key: the CRC16 of its hash tag (the bytes between the
/// first `{` and the next `}`, when not empty) or of the whole key.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&c| c == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&c| c == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS
}

/// The hash tag table: for every slot, the first string of the sequence
/// `0, 1, …, 9, a, …, z, 10, 11, …` (base 36) whose CRC16 is that slot.
/// Built on first use (about 10⁵ CRCs of 3–4 bytes, a millisecond).
fn tag_table() -> &'static [String] {
    static TABLE: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = vec![String::new(); SLOTS as usize];
        let mut left = SLOTS as usize;
        let mut n: u64 = 0;
        while left > 0 {
            let tag = base36(n);
            let slot = (crc16(tag.as_bytes()) % SLOTS) as usize;
            if table[slot].is_empty() {
                table[slot] = tag;
                left -= 1;
            }
            n += 1;
        }
        table
    })
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII digits")
}

/// A hash tag whose CRC16 is `slot` (below [`SLOTS`]).
pub fn tag_for_slot(slot: u16) -> &'static str {
    &tag_table()[(slot % SLOTS) as usize]
}

/// The slot of shard `shard` of filter `name`.
pub fn shard_slot(name: &str, shard: u64) -> u16 {
    let base = crc16(name.as_bytes()) as u64 % SLOTS as u64;
    ((base + shard.wrapping_mul(STRIDE as u64) % SLOTS as u64) % SLOTS as u64) as u16
}

/// The metadata key of filter `name` (a hash, [`Meta`]).
pub fn meta_key(name: &str) -> String {
    format!("bg:{{{name}}}")
}

/// The whitelist key of filter `name` (a set of keys), in the metadata's slot.
pub fn whitelist_key(name: &str) -> String {
    format!("bg:{{{name}}}:whitelist")
}

/// The key of shard `shard` of filter `name`.
pub fn shard_key(name: &str, shard: u64) -> String {
    format!(
        "bg:{{{}}}:{name}:{shard}",
        tag_for_slot(shard_slot(name, shard))
    )
}

/// Where one item lives in a sharded filter: its shard, the byte offset of
/// its block in that shard, and the mask of its bits in the block (eight
/// little-endian words, as the engine's `block_mask`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemPlace {
    /// Shard index.
    pub shard: u64,
    /// Byte offset of the item's block within the shard.
    pub offset: u64,
    /// The item's bits in its block.
    pub mask: [u64; 8],
}

impl ItemPlace {
    /// The Redis bit offsets (within the shard) of the item's bits, for
    /// `BITFIELD … SET u1 OFFSET 1`: one per distinct bit, at most `k`.
    pub fn redis_bits(&self) -> impl Iterator<Item = u64> + '_ {
        self.mask.iter().enumerate().flat_map(move |(w, &m)| {
            (0..64u64)
                .filter(move |j| m >> j & 1 == 1)
                .map(move |j| redis_bit(self.offset * 8 + w as u64 * 64 + j))
        })
    }

    /// How many bits the item sets (the length of [`ItemPlace::redis_bits`]).
    pub fn bit_count(&self) -> usize {
        self.mask.iter().map(|m| m.count_ones() as usize).sum()
    }

    /// True if every bit of the item is set in `block`, the 64 bytes of its
    /// block as stored (a shorter slice is padded with zeros: the bytes a
    /// short or missing shard lacks are zeros). The mask is the engine's
    /// (`slice::for_each_position`, built by its reference kernel), so this
    /// answers exactly as `Filter::contains` does on the same bytes.
    pub fn found_in(&self, block: &[u8]) -> bool {
        let mut bytes = [0u8; BLOCK_BYTES as usize];
        let n = block.len().min(bytes.len());
        bytes[..n].copy_from_slice(&block[..n]);
        self.mask.iter().enumerate().all(|(w, &m)| {
            let word = u64::from_le_bytes(bytes[w * 8..w * 8 + 8].try_into().expect("8 bytes"));
            word & m == m
        })
    }
}

/// Redis's bit number for data bit `b` of a shard (counted from the
/// shard's first byte): Redis counts from the most significant bit of each
/// byte, the engine from the least (see the module documentation).
pub fn redis_bit(b: u64) -> u64 {
    (b / 8) * 8 + (7 - b % 8)
}

/// The shard geometry and key rules of one filter.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    /// The filter's parameters (layout always blocked; the hash, stored
    /// as the `hash` field with the `.bgf` header's hash id, is
    /// `params.hash`).
    pub params: Params,
    /// Blocks per shard.
    pub shard_blocks: u64,
    /// Items added (the `.bgf` header's count at push, plus each add that
    /// set a new bit).
    pub items: u64,
    /// Layout version ([`FORMAT`], or [`FORMAT_XXH3_64`] for hash id 2,
    /// [`FORMAT_XXH3_64_WORDS`] for hash id 3).
    pub format: u32,
    /// A random number written by each push (0 for filters pushed before
    /// this field existed): open handles compare it to notice that the
    /// filter was replaced.
    pub generation: u64,
    /// Changes of the whitelist so far (each whitelist change made through
    /// this crate adds 1): open handles compare it to reload the whitelist.
    pub whitelist_changes: u64,
}

impl Meta {
    /// Metadata for a filter with `params`, refusing what cannot be sharded.
    pub fn new(params: Params, items: u64) -> Result<Meta> {
        if params.layout != Layout::Blocked {
            return Err(Error::WrongLayout(format!(
                "a {} filter cannot be stored in Redis: an item's bits are spread over the whole bit array, so one lookup would read k shards on up to k nodes and one add could not be a single atomic command; build the filter with --layout blocked (each item's bits in one 64-byte block, hence in one shard)",
                params.layout.name()
            )));
        }
        params.validate()?;
        Ok(Meta {
            format: Meta::format_for(params.hash),
            params,
            shard_blocks: SHARD_BLOCKS,
            items,
            generation: 0,
            whitelist_changes: 0,
        })
    }

    /// The layout version a filter hashed with `hash` is stored with.
    pub fn format_for(hash: HashId) -> u32 {
        match hash {
            HashId::Xxh3_128 => FORMAT,
            HashId::Xxh3_64 => FORMAT_XXH3_64,
            HashId::Xxh3_64Words => FORMAT_XXH3_64_WORDS,
        }
    }

    /// Number of blocks.
    pub fn blocks(&self) -> u64 {
        self.params.bits / BLOCK_BITS
    }

    /// Bytes of data (the `.bgf` file's data length).
    pub fn data_len(&self) -> u64 {
        self.params.bits / 8
    }

    /// Number of shards.
    pub fn shards(&self) -> u64 {
        self.blocks().div_ceil(self.shard_blocks)
    }

    /// The byte range of the data that shard `i` holds.
    pub fn shard_bytes(&self, i: u64) -> std::ops::Range<u64> {
        let start = i * self.shard_blocks;
        let end = (start + self.shard_blocks).min(self.blocks());
        start * BLOCK_BYTES..end * BLOCK_BYTES
    }

    /// Where `key` (a normalized key, as the engine hashes it) lives.
    pub fn place(&self, key: &[u8]) -> ItemPlace {
        self.place_with(&Locator::new(&self.params), key)
    }

    /// [`Meta::place`] with this filter's locator made once, for callers
    /// placing many keys.
    pub fn place_with(&self, locator: &Locator, key: &[u8]) -> ItemPlace {
        let p = locator.prepare(key);
        let mut mask = [0u64; 8];
        let mut block = 0;
        for_each_position(&self.params, &p, |word, m| {
            block = word / 8;
            mask[(word % 8) as usize] = m;
        });
        ItemPlace {
            shard: block / self.shard_blocks,
            offset: (block % self.shard_blocks) * BLOCK_BYTES,
            mask,
        }
    }

    /// The metadata as hash fields (`HSET bg:{NAME} field value …`).
    pub fn to_fields(&self) -> Vec<(&'static str, String)> {
        let p = &self.params;
        vec![
            ("format", self.format.to_string()),
            ("layout", p.layout.name().to_string()),
            ("bits", p.bits.to_string()),
            ("k", p.k.to_string()),
            ("seed", p.seed.to_string()),
            ("hash", p.hash.code().to_string()),
            ("key_kind", p.key_kind.to_string()),
            ("match_mode", p.match_mode.to_string()),
            ("planned_items", p.planned_items.to_string()),
            // `{:?}` prints the shortest decimal that parses back to the same f64.
            ("target_fp", format!("{:?}", p.target_fp)),
            ("shard_blocks", self.shard_blocks.to_string()),
            ("items", self.items.to_string()),
            ("generation", self.generation.to_string()),
            ("whitelist_changes", self.whitelist_changes.to_string()),
        ]
    }

    /// Decodes the metadata hash (`HGETALL bg:{NAME}`); `Err` names what
    /// is missing or wrong.
    pub fn from_fields(fields: &[(String, String)]) -> Result<Meta, String> {
        let get = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
                .ok_or_else(|| format!("metadata field {name:?} is missing"))
        };
        fn num<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, String> {
            v.parse()
                .map_err(|_| format!("metadata field {name:?} is not a number: {v:?}"))
        }
        // Fields added to version 1 later: absent in older filters.
        let optional = |name: &str| -> Result<u64, String> {
            match fields.iter().find(|(k, _)| k == name) {
                Some((_, v)) => num(name, v),
                None => Ok(0),
            }
        };
        let format: u32 = num("format", get("format")?)?;
        if ![FORMAT, FORMAT_XXH3_64, FORMAT_XXH3_64_WORDS].contains(&format) {
            return Err(format!(
                "layout version {format} is not known to this build (it reads versions {FORMAT}, {FORMAT_XXH3_64} and {FORMAT_XXH3_64_WORDS})"
            ));
        }
        // Hash 0 was written by early pushes and meant XXH3-128.
        let hash_id: u8 = num("hash", get("hash")?)?;
        let hash = match hash_id {
            0 => Some(HashId::Xxh3_128),
            id => HashId::from_code(id),
        }
        .ok_or_else(|| {
            format!(
                "metadata field \"hash\" is {hash_id}, a hash function this build does not know"
            )
        })?;
        if format != Meta::format_for(hash) {
            return Err(format!(
                "layout version {format} with hash function id {hash_id}: a filter hashed with {hash} has layout version {}",
                Meta::format_for(hash)
            ));
        }
        let layout = match get("layout")? {
            "blocked" => Layout::Blocked,
            other => return Err(format!("layout {other:?} cannot be stored in Redis")),
        };
        let params = Params {
            layout,
            bits: num("bits", get("bits")?)?,
            k: num("k", get("k")?)?,
            seed: num("seed", get("seed")?)?,
            hash,
            key_kind: num("key_kind", get("key_kind")?)?,
            match_mode: num("match_mode", get("match_mode")?)?,
            planned_items: num("planned_items", get("planned_items")?)?,
            target_fp: num("target_fp", get("target_fp")?)?,
        };
        params.validate().map_err(|e| e.to_string())?;
        let shard_blocks: u64 = num("shard_blocks", get("shard_blocks")?)?;
        if !(1..=MAX_SHARD_BLOCKS).contains(&shard_blocks) {
            return Err(format!(
                "metadata field \"shard_blocks\" is {shard_blocks}, not in 1..={MAX_SHARD_BLOCKS} (a Redis string holds at most 512 MiB)"
            ));
        }
        let meta = Meta {
            params,
            shard_blocks,
            items: num("items", get("items")?)?,
            format,
            generation: optional("generation")?,
            whitelist_changes: optional("whitelist_changes")?,
        };
        if meta.shards() > MAX_SHARDS {
            return Err(format!(
                "{} shards of {shard_blocks} blocks, more than {MAX_SHARDS}",
                meta.shards()
            ));
        }
        bloomgate_engine::format::check_items(meta.items, meta.params.bits)?;
        Ok(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_engine::{plan, Filter};

    /// The key names and slots docs/redis-layout.md shows for `words`.
    #[test]
    fn documented_shard_keys_of_words() {
        let keys: Vec<String> = (0..3).map(|i| shard_key("words", i)).collect();
        assert_eq!(
            keys,
            ["bg:{ois}:words:0", "bg:{44x}:words:1", "bg:{6mo}:words:2"]
        );
        assert_eq!(key_slot(keys[0].as_bytes()), 2076);
        assert_eq!(key_slot(keys[1].as_bytes()), 12203);
        assert_eq!(shard_slot("words", 1), 12203);
    }

    #[test]
    fn crc16_matches_the_cluster_spec() {
        // The test vector of the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        // Slots as `CLUSTER KEYSLOT` reports them (Redis 7.0).
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(key_slot(b"foo{{bar}}zap"), crc16(b"{bar") % SLOTS);
    }

    #[test]
    fn every_slot_has_a_tag() {
        for slot in 0..SLOTS {
            let tag = tag_for_slot(slot);
            assert!(!tag.is_empty() && tag.len() <= 4 && !tag.contains(['{', '}']));
            assert_eq!(crc16(tag.as_bytes()) % SLOTS, slot);
        }
        // The table is part of the layout: pin a few entries.
        assert_eq!(tag_for_slot(crc16(b"0") % SLOTS), "0");
        assert_eq!(tag_for_slot(crc16(b"z") % SLOTS), "z");
    }

    #[test]
    fn shard_keys_land_in_their_slots_evenly() {
        let name = "urls";
        let mut per_third = [0u64; 3];
        let shards = 3000;
        for i in 0..shards {
            let key = shard_key(name, i);
            assert_eq!(key_slot(key.as_bytes()), shard_slot(name, i), "{key}");
            per_third[(shard_slot(name, i) as usize * 3) / SLOTS as usize] += 1;
        }
        // Three masters of equal slot ranges: each gets its third, within 1 %.
        for n in per_third {
            assert!(n.abs_diff(shards / 3) <= shards / 100, "{per_third:?}");
        }
        // 16,384 consecutive shards take every slot once.
        let mut seen = vec![false; SLOTS as usize];
        for i in 0..SLOTS as u64 {
            seen[shard_slot("x", i) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(key_slot(meta_key(name).as_bytes()), crc16(b"urls") % SLOTS);
        assert_eq!(
            key_slot(whitelist_key(name).as_bytes()),
            key_slot(meta_key(name).as_bytes())
        );
    }

    #[test]
    fn redis_bit_order() {
        // Data bit 0 is the least significant bit of byte 0: Redis bit 7.
        assert_eq!(redis_bit(0), 7);
        assert_eq!(redis_bit(7), 0);
        assert_eq!(redis_bit(8), 15);
        assert_eq!(redis_bit(63), 56);
        assert_eq!(redis_bit(64), 71);
    }

    fn blocked(items: u64, seed: u64) -> Params {
        Params::from_plan(&plan(Layout::Blocked, items, 1e-3).unwrap(), seed)
    }

    #[test]
    fn places_agree_with_the_engine() {
        // A filter several shards long: set each item's bits at its place
        // (through Redis bit numbers, translated back as Redis would store
        // them) and compare the bytes with the engine's own filter.
        for hash in [HashId::Xxh3_64Words, HashId::Xxh3_64, HashId::Xxh3_128] {
            let mut params = blocked(20_000, 7);
            params.hash = hash;
            places_agree_with_the_engine_for(params);
        }
    }

    fn places_agree_with_the_engine_for(params: Params) {
        let mut meta = Meta::new(params, 0).unwrap();
        meta.shard_blocks = 100;
        assert!(meta.shards() > 3);
        let filter = Filter::new(meta.params.clone()).unwrap();
        let mut data = vec![0u8; meta.data_len() as usize];
        for i in 0..3000u32 {
            let key = format!("item-{i}");
            filter.insert(key.as_bytes());
            let place = meta.place(key.as_bytes());
            let shard_start = meta.shard_bytes(place.shard).start;
            assert!(place.offset + BLOCK_BYTES <= meta.shard_bytes(place.shard).end - shard_start);
            let bits: Vec<u64> = place.redis_bits().collect();
            assert!(!bits.is_empty() && bits.len() <= meta.params.k as usize);
            for rb in bits {
                // Redis bit rb: byte rb/8, bit 7 - rb%8 counted from the LSB.
                data[(shard_start + rb / 8) as usize] |= 0x80 >> (rb % 8);
            }
        }
        assert_eq!(&data[..], filter.as_bytes());
        for i in 0..6000u32 {
            let key = format!("item-{i}");
            let place = meta.place(key.as_bytes());
            let start = (meta.shard_bytes(place.shard).start + place.offset) as usize;
            assert_eq!(
                place.found_in(&data[start..start + 64]),
                filter.contains(key.as_bytes()),
                "{key}"
            );
        }
    }

    #[test]
    fn shards_cover_the_data_once() {
        let meta = Meta::new(blocked(1_000_000, 1), 0).unwrap();
        let mut next = 0;
        for i in 0..meta.shards() {
            let r = meta.shard_bytes(i);
            assert_eq!(r.start, next);
            assert!(r.end > r.start && r.end - r.start <= SHARD_BLOCKS * 64);
            next = r.end;
        }
        assert_eq!(next, meta.data_len());
    }

    #[test]
    fn metadata_round_trip_and_refusals() {
        let mut p = blocked(1000, u64::MAX - 3);
        p.key_kind = 1;
        p.match_mode = 1;
        p.target_fp = 1.0 / 3.0;
        let mut meta = Meta::new(p, 42).unwrap();
        assert_eq!(
            (meta.format, meta.params.hash),
            (FORMAT_XXH3_64_WORDS, HashId::Xxh3_64Words)
        );
        meta.generation = u64::MAX - 7;
        meta.whitelist_changes = 3;
        let fields: Vec<(String, String)> = meta
            .to_fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(Meta::from_fields(&fields).unwrap(), meta);
        let without = |name: &str| -> Vec<(String, String)> {
            fields.iter().filter(|(k, _)| k != name).cloned().collect()
        };
        assert!(Meta::from_fields(&without("bits"))
            .unwrap_err()
            .contains("bits"));
        // Filters pushed before `generation` and `whitelist_changes` existed.
        let old = Meta::from_fields(&without("generation")).unwrap();
        assert_eq!((old.generation, old.whitelist_changes), (0, 3));
        let mut future = fields.clone();
        future[0].1 = "4".into();
        assert!(Meta::from_fields(&future)
            .unwrap_err()
            .contains("version 4"));
        // Numbers from the store are range-checked before any shard range
        // or loop is computed from them.
        let with = |name: &str, v: &str| -> Vec<(String, String)> {
            let mut f = without(name);
            f.push((name.to_string(), v.to_string()));
            f
        };
        for bad in ["0", "8388609", &u64::MAX.to_string()] {
            let e = Meta::from_fields(&with("shard_blocks", bad)).unwrap_err();
            assert!(e.contains("shard_blocks") && e.contains("512 MiB"), "{e}");
        }
        assert!(Meta::from_fields(&with("shard_blocks", "8388608")).is_ok());
        let over = (meta.params.bits + 1).to_string();
        let e = Meta::from_fields(&with("items", &over)).unwrap_err();
        assert!(e.contains(&format!("item count {over}")), "{e}");
        let mut huge = with("bits", &(1u64 << 62).to_string());
        huge.retain(|(k, _)| !["shard_blocks", "hash", "format"].contains(&k.as_str()));
        huge.push(("shard_blocks".into(), "1".into()));
        // XXH3-64 addresses at most 2^32 blocks; the XXH3-128 filter of
        // this size is refused for its shard count.
        huge.extend([("hash".into(), "1".into()), ("format".into(), "1".into())]);
        let e = Meta::from_fields(&huge).unwrap_err();
        assert!(e.contains("shards"), "{e}");
        let classic = Params::from_plan(&plan(Layout::Classic, 1000, 1e-3).unwrap(), 1);
        let e = Meta::new(classic, 0).unwrap_err();
        assert!(matches!(e, Error::WrongLayout(_)));
        assert!(e.to_string().contains("--layout blocked"), "{e}");
    }

    #[test]
    fn metadata_of_both_hashes_and_of_filters_pushed_before_hash_id_2() {
        let mut p = blocked(1000, 9);
        p.hash = HashId::Xxh3_128;
        let meta = Meta::new(p, 0).unwrap();
        assert_eq!(meta.format, FORMAT);
        let fields: Vec<(String, String)> = meta
            .to_fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert!(fields.contains(&("hash".into(), "1".into())));
        assert!(fields.contains(&("format".into(), "1".into())));
        assert_eq!(Meta::from_fields(&fields).unwrap(), meta);
        let with = |pairs: &[(&str, &str)]| -> Result<Meta, String> {
            let mut f: Vec<(String, String)> = fields
                .iter()
                .filter(|(k, _)| !pairs.iter().any(|(n, _)| n == k))
                .cloned()
                .collect();
            f.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            Meta::from_fields(&f)
        };
        // Hash 0, written by early pushes, is XXH3-128.
        assert_eq!(
            with(&[("hash", "0")]).unwrap().params.hash,
            HashId::Xxh3_128
        );
        // A version-1 filter never says XXH3-64 (builds that wrote version 1
        // could not place its items), a version-2 filter always does, and
        // an unknown hash is refused, never read as another.
        let e = with(&[("hash", "2")]).unwrap_err();
        assert!(
            e.contains("layout version 1 with hash function id 2"),
            "{e}"
        );
        let e = with(&[("format", "2")]).unwrap_err();
        assert!(
            e.contains("layout version 2 with hash function id 1"),
            "{e}"
        );
        let e = with(&[("hash", "7"), ("format", "2")]).unwrap_err();
        assert!(e.contains("\"hash\" is 7"), "{e}");
        let e = with(&[("hash", "3"), ("format", "2")]).unwrap_err();
        assert!(
            e.contains("layout version 2 with hash function id 3"),
            "{e}"
        );
        let words = with(&[("hash", "3"), ("format", "3")]).unwrap();
        assert_eq!(words.params.hash, HashId::Xxh3_64Words);
        let new = with(&[("hash", "2"), ("format", "2")]).unwrap();
        assert_eq!(new.params.hash, HashId::Xxh3_64);
        // Hash ids 2 and 3 put the same key in the same block, at other bits.
        let moved = (0..64u32)
            .filter(|i| {
                let key = format!("k{i}");
                let (a, b) = (new.place(key.as_bytes()), words.place(key.as_bytes()));
                assert_eq!((a.shard, a.offset), (b.shard, b.offset));
                a.mask != b.mask
            })
            .count();
        assert!(moved > 60, "{moved}");
        // The two hashes place the same key differently: the metadata's
        // hash decides, as the file's hash id does.
        let places = (0..64u32)
            .filter(|i| {
                let key = format!("k{i}");
                meta.place(key.as_bytes()) != new.place(key.as_bytes())
            })
            .count();
        assert!(places > 50, "{places}");
    }
}
