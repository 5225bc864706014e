//! The peer libraries as subjects: fastbloom, bloomfilter, sbbf-rs and
//! xorf's BinaryFuse16, each configured as BENCHMARKS.md states, and the
//! synthetic prefill of the slow classic peers at DRAM size.

use bloomgate_bench::mix64;
use bloomgate_engine::arch;
use rayon::prelude::*;
use xorf::Filter as _;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::subject::{Subject, PIPE, SEED};

pub(crate) struct FastBloom {
    f: fastbloom::BloomFilter,
    synthetic: bool,
}

/// Random words in which each bit is set with probability `d` (16-bit
/// binary expansion of `d`), generated in parallel.
pub(crate) fn random_words(words: usize, d: f64, seed: u64) -> Vec<u64> {
    let q = (d * 65536.0).round() as u32;
    let mut v = vec![0u64; words];
    v.par_chunks_mut(1 << 16)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut st = mix64(seed ^ (c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            for w in chunk {
                let mut x = 0u64;
                for b in 0..16 {
                    st = st.wrapping_add(0x9E37_79B9_7F4A_7C15);
                    let r = mix64(st);
                    x = if (q >> b) & 1 == 1 { x | r } else { x & r };
                }
                *w = x;
            }
        });
    v
}

pub(crate) fn classic_density(m: u64, n: u64, k: u32) -> f64 {
    1.0 - (-(k as f64) * n as f64 / m as f64).exp()
}

impl FastBloom {
    pub(crate) fn new(bits: u64, n: u64) -> FastBloom {
        // Same bit count as ours, fastbloom's own optimal k for n items.
        let f = fastbloom::BloomFilter::with_num_bits(bits as usize)
            .seed(&(SEED as u128))
            .expected_items(n as usize);
        FastBloom {
            f,
            synthetic: false,
        }
    }
}

impl Subject for FastBloom {
    fn name(&self) -> String {
        if self.synthetic {
            "fastbloom 0.17 (synthetic prefill)".into()
        } else {
            "fastbloom 0.17".into()
        }
    }
    fn prefill_synthetic(&mut self, n: u64) -> bool {
        let k = self.f.num_hashes();
        let d = classic_density(self.bits(), n, k);
        let words = random_words(self.f.as_slice().len(), d, 1);
        self.f = fastbloom::BloomFilter::from_vec(words)
            .seed(&(SEED as u128))
            .hashes(k);
        self.synthetic = true;
        true
    }
    fn bits(&self) -> u64 {
        self.f.num_bits() as u64
    }
    fn k(&self) -> String {
        self.f.num_hashes().to_string()
    }
    fn predicted_fp(&self, n: u64) -> f64 {
        self.f.expected_false_pos(n as usize)
    }
    fn insert(&mut self, key: &[u8]) {
        self.f.insert(key);
    }
    fn contains(&self, key: &[u8]) -> bool {
        self.f.contains(key)
    }
}

pub(crate) struct BloomFilterCrate {
    f: bloomfilter::Bloom<[u8]>,
    synthetic: bool,
}

impl BloomFilterCrate {
    pub(crate) fn new(bits: u64, n: u64) -> BloomFilterCrate {
        let mut seed = [0u8; 32];
        for (i, c) in seed.chunks_mut(8).enumerate() {
            c.copy_from_slice(&mix64(SEED + i as u64).to_le_bytes());
        }
        let f = bloomfilter::Bloom::new_with_seed((bits / 8) as usize, n as usize, &seed).unwrap();
        BloomFilterCrate {
            f,
            synthetic: false,
        }
    }
}

impl Subject for BloomFilterCrate {
    fn name(&self) -> String {
        if self.synthetic {
            "bloomfilter 3 (synthetic prefill)".into()
        } else {
            "bloomfilter 3".into()
        }
    }
    fn prefill_synthetic(&mut self, n: u64) -> bool {
        let k = self.f.number_of_hash_functions();
        let bits = self.bits();
        let d = classic_density(bits, n, k);
        let f = std::mem::replace(
            &mut self.f,
            bloomfilter::Bloom::new_with_seed(8, 1, &[0; 32]).unwrap(),
        );
        let mut bytes = f.into_bytes();
        let header = bytes.len() - (bits / 8) as usize;
        let words = random_words((bits / 64) as usize, d, 2);
        for (dst, w) in bytes[header..].chunks_exact_mut(8).zip(words) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
        self.f = bloomfilter::Bloom::from_bytes(bytes).unwrap();
        assert_eq!(self.f.number_of_hash_functions(), k);
        self.synthetic = true;
        true
    }
    fn bits(&self) -> u64 {
        self.f.len()
    }
    fn k(&self) -> String {
        self.f.number_of_hash_functions().to_string()
    }
    fn predicted_fp(&self, n: u64) -> f64 {
        classic_fp(
            self.bits() as f64,
            n as f64,
            self.f.number_of_hash_functions(),
        )
    }
    fn insert(&mut self, key: &[u8]) {
        self.f.set(key);
    }
    fn contains(&self, key: &[u8]) -> bool {
        self.f.check(key)
    }
}

/// sbbf-rs (`bloomgate_bench::sbbf`), keys hashed with seeded xxh3-64,
/// hashing included in every timing.
pub(crate) struct Sbbf(bloomgate_bench::sbbf::Sbbf);

impl Sbbf {
    pub(crate) fn new(bits: u64) -> Sbbf {
        Sbbf(bloomgate_bench::sbbf::Sbbf::new(bits))
    }
    #[inline(always)]
    fn hash(key: &[u8]) -> u64 {
        xxh3_64_with_seed(key, SEED)
    }
}

impl Subject for Sbbf {
    fn name(&self) -> String {
        self.0.name()
    }
    fn bits(&self) -> u64 {
        self.0.bits()
    }
    fn k(&self) -> String {
        "8".into()
    }
    fn predicted_fp(&self, n: u64) -> f64 {
        self.0.predicted_fp(n)
    }
    fn insert(&mut self, key: &[u8]) {
        self.0.insert_hash(Self::hash(key));
    }
    fn contains(&self, key: &[u8]) -> bool {
        self.0.contains_hash(Self::hash(key))
    }
    fn memory(&self) -> Option<(*const u8, usize)> {
        Some(self.0.memory())
    }
    fn has_batch(&self) -> bool {
        true
    }
    fn insert_all_batch(&mut self, keys: &[&[u8]]) {
        let mut hs = [0u64; PIPE];
        for chunk in keys.chunks(PIPE) {
            for (h, k) in hs.iter_mut().zip(chunk) {
                *h = Self::hash(k);
                arch::prefetch(self.0.bucket_ptr(*h));
            }
            for &h in &hs[..chunk.len()] {
                self.0.insert_hash(h);
            }
        }
    }
    fn count_batch(&self, keys: &[&[u8]], _out: &mut Vec<bool>) -> u64 {
        let mut hs = [0u64; PIPE];
        let mut c = 0;
        for chunk in keys.chunks(PIPE) {
            for (h, k) in hs.iter_mut().zip(chunk) {
                *h = Self::hash(k);
                arch::prefetch(self.0.bucket_ptr(*h));
            }
            for &h in &hs[..chunk.len()] {
                c += self.0.contains_hash(h) as u64;
            }
        }
        c
    }
}

/// xorf BinaryFuse16 (static: built from all keys at once), keys hashed with xxh3-64.
pub(crate) struct Fuse16 {
    f: xorf::BinaryFuse16,
}

impl Fuse16 {
    pub(crate) fn build(keys: &[&[u8]]) -> Fuse16 {
        let hashes: Vec<u64> = keys.iter().map(|k| xxh3_64_with_seed(k, SEED)).collect();
        Fuse16 {
            f: xorf::BinaryFuse16::try_from(&hashes).expect("BinaryFuse16 construction"),
        }
    }
}

impl Subject for Fuse16 {
    fn name(&self) -> String {
        "xorf BinaryFuse16".into()
    }
    fn bits(&self) -> u64 {
        self.f.len() as u64 * 16
    }
    fn k(&self) -> String {
        "3 (16-bit fp)".into()
    }
    fn predicted_fp(&self, _n: u64) -> f64 {
        1.0 / 65536.0
    }
    fn insert(&mut self, _key: &[u8]) {
        unreachable!("static filter")
    }
    fn contains(&self, key: &[u8]) -> bool {
        self.f.contains(&xxh3_64_with_seed(key, SEED))
    }
}

pub(crate) fn classic_fp(m: f64, n: f64, k: u32) -> f64 {
    (1.0 - (-(k as f64) * n / m).exp()).powi(k as i32)
}
