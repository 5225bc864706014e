//! The partition files of a ribbon build: every key hash of the inputs,
//! written once and read back once, in about 5.25 bytes each.
//!
//! A 64-bit key hash goes to one of 256 files by its top 8 bits, which the
//! file's name therefore implies. Each file is a sequence of *blocks*: the
//! hashes a partition collected in memory (about 65 536 at a time) grouped
//! by their next [`HIGH_BITS`] = 16 bits, the *bucket*. A block stores
//!
//! ```text
//! n            u32 LE    hashes in the block, 1..=MAX_BLOCK
//! buckets      (n + 2^16) bits, LSB first, zero-padded to whole bytes:
//!              for each bucket in order, one 1 bit per hash in it, then a 0
//! low          n × 5 bytes: the low 40 bits of each hash, in bucket order
//! checksum     u64 LE    xxh3 of the bytes above
//! ```
//!
//! so a hash costs its 40 low bits plus two bits of bucket counts at the
//! usual block size (the Elias–Fano split of a sorted run: 42 bits for
//! 56 unknown bits in runs of 2¹⁶, against 56 for the previous fixed
//! 7-byte records). The order of hashes within a bucket, and of blocks in
//! a file, is whatever the inputs gave: the reader sorts a partition's
//! hashes anyway, so the filter does not depend on it.
//!
//! Disk needed by the files of `n` keys is at most [`disk_bytes`]`(n)`:
//! `5.25·n` bytes for full blocks plus one short block per partition
//! (8 KiB of bucket bits each, 2 MiB in all). A block whose length,
//! bucket bits or checksum does not add up, a file cut short or one with
//! more or fewer hashes than were written is an error, never a wrong set.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use xxhash_rust::xxh3::xxh3_64;

/// Bits of key hash that choose a partition file.
pub(crate) const PARTITION_BITS: u32 = 8;
/// Partition files of a build.
pub(crate) const PARTITIONS: usize = 1 << PARTITION_BITS;
/// Bits of key hash implied by a hash's bucket within a block.
pub(crate) const HIGH_BITS: u32 = 16;
const BUCKETS: usize = 1 << HIGH_BITS;
/// Bytes of each hash stored as they are.
const LOW_BYTES: usize = 5;
const LOW_BITS: u32 = 8 * LOW_BYTES as u32;
const _: () = assert!(PARTITION_BITS + HIGH_BITS + LOW_BITS == 64);
/// Hashes a partition collects before it writes a block.
pub(crate) const BLOCK: usize = 1 << 16;
/// The largest block a reader accepts (a writer's block is at most
/// [`BLOCK`] plus one input chunk's share).
const MAX_BLOCK: usize = 1 << 24;

/// Bytes of a block of `n` hashes.
fn block_bytes(n: usize) -> usize {
    4 + (n + BUCKETS).div_ceil(8) + n * LOW_BYTES + 8
}

/// At most the bytes the partition files of `keys` key hashes take.
pub(crate) fn disk_bytes(keys: u64) -> u64 {
    // A block of n ≥ BLOCK hashes takes at most 5.25·n + 13 bytes; each
    // partition's last one at most 5.125·n + block_bytes(0).
    keys * 21 / 4
        + (keys / BLOCK as u64 + PARTITIONS as u64) * 16
        + PARTITIONS as u64 * block_bytes(0) as u64
}

/// The partition a key hash belongs to.
pub(crate) fn partition_of(g: u64) -> usize {
    (g >> (64 - PARTITION_BITS)) as usize
}

fn bucket_of(g: u64) -> usize {
    ((g >> LOW_BITS) as usize) & (BUCKETS - 1)
}

/// Appends the block of `hashes` (all of partition `p`, at least one) to
/// `out`. `counts` is scratch space.
pub(crate) fn encode_block(hashes: &[u64], counts: &mut Vec<u32>, out: &mut Vec<u8>) {
    debug_assert!(!hashes.is_empty() && hashes.len() <= MAX_BLOCK);
    let n = hashes.len();
    counts.clear();
    counts.resize(BUCKETS + 1, 0);
    for &g in hashes {
        counts[bucket_of(g) + 1] += 1;
    }
    let start = out.len();
    out.extend_from_slice(&(n as u32).to_le_bytes());
    let bits_at = out.len();
    out.resize(bits_at + (n + BUCKETS).div_ceil(8), 0);
    // Bucket b's hashes are 1 bits at [first + b, first + b + count): the
    // hashes before it plus one 0 per bucket before it.
    let mut first = 0usize;
    for b in 0..BUCKETS {
        let c = counts[b + 1] as usize;
        for bit in first + b..first + b + c {
            out[bits_at + bit / 8] |= 1 << (bit % 8);
        }
        counts[b + 1] = first as u32;
        first += c;
    }
    let low_at = out.len();
    out.resize(low_at + n * LOW_BYTES, 0);
    for &g in hashes {
        let slot = &mut counts[bucket_of(g) + 1];
        let at = low_at + *slot as usize * LOW_BYTES;
        *slot += 1;
        out[at..at + LOW_BYTES].copy_from_slice(&g.to_le_bytes()[..LOW_BYTES]);
    }
    let sum = xxh3_64(&out[start..]);
    out.extend_from_slice(&sum.to_le_bytes());
}

/// Decodes the block at the start of `body` (everything after its
/// 4-byte count `n`, at least `block_bytes(n) - 4` bytes) of partition
/// `p`, appending its hashes to `keys`. `None` when it does not add up.
fn decode_block(p: usize, n: usize, body: &[u8], keys: &mut Vec<u64>) -> Option<()> {
    let bits_len = (n + BUCKETS).div_ceil(8);
    let low_len = n * LOW_BYTES;
    let (bits, rest) = body.split_at_checked(bits_len)?;
    let (low, rest) = rest.split_at_checked(low_len)?;
    let sum = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&(n as u32).to_le_bytes());
    h.update(bits);
    h.update(low);
    if h.digest() != sum {
        return None;
    }
    let top = (p as u64) << (64 - PARTITION_BITS);
    let total = n + BUCKETS;
    let mut lows = low.chunks_exact(LOW_BYTES);
    let (mut bucket, mut seen) = (0u64, 0usize);
    for (i, &byte) in bits.iter().enumerate() {
        let valid = (total - (i * 8).min(total)).min(8) as u32;
        let mut w = byte as u32;
        let mut left = valid;
        while left > 0 {
            let ones = w.trailing_ones().min(left);
            for _ in 0..ones {
                if bucket >= BUCKETS as u64 {
                    return None;
                }
                let mut b = [0u8; 8];
                b[..LOW_BYTES].copy_from_slice(lows.next()?);
                keys.push(top | bucket << LOW_BITS | u64::from_le_bytes(b));
                seen += 1;
            }
            w = w.checked_shr(ones).unwrap_or(0);
            left -= ones;
            let zeros = w.trailing_zeros().min(left);
            bucket += zeros as u64;
            w = w.checked_shr(zeros).unwrap_or(0);
            left -= zeros;
        }
        if valid < 8 && byte >> valid != 0 {
            return None;
        }
    }
    (seen == n && bucket == BUCKETS as u64).then_some(())
}

/// The file of partition `p` in `dir`.
pub(crate) fn path(dir: &Path, p: usize) -> PathBuf {
    dir.join(format!("part-{p:03}"))
}

/// Writes key hashes into the partition files of a directory.
pub(crate) struct PartitionWriter {
    dir: PathBuf,
    files: Vec<File>,
    pending: Vec<Vec<u64>>,
    /// Hashes written per partition.
    pub(crate) counts: Vec<u64>,
    /// Bytes written to all files.
    pub(crate) bytes: u64,
    scratch: Vec<u32>,
    block: Vec<u8>,
    /// Time spent encoding blocks.
    pub(crate) encoding: std::time::Duration,
    /// Time spent in writes.
    pub(crate) writing: std::time::Duration,
}

impl PartitionWriter {
    /// Creates the [`PARTITIONS`] empty files in `dir`.
    pub(crate) fn create(dir: &Path) -> Result<PartitionWriter> {
        let mut files = Vec::with_capacity(PARTITIONS);
        for p in 0..PARTITIONS {
            let path = path(dir, p);
            files.push(
                File::create(&path)
                    .with_context(|| format!("{}: cannot create", path.display()))?,
            );
        }
        Ok(PartitionWriter {
            dir: dir.to_path_buf(),
            files,
            pending: vec![Vec::new(); PARTITIONS],
            counts: vec![0; PARTITIONS],
            bytes: 0,
            scratch: Vec::new(),
            block: Vec::new(),
            encoding: Default::default(),
            writing: Default::default(),
        })
    }

    /// Adds hashes of partition `p`, writing a block when it has enough.
    pub(crate) fn extend(&mut self, p: usize, hashes: &[u64]) -> Result<()> {
        debug_assert!(hashes.iter().all(|&g| partition_of(g) == p));
        self.pending[p].extend_from_slice(hashes);
        self.counts[p] += hashes.len() as u64;
        if self.pending[p].len() >= BLOCK {
            self.flush(p)?;
        }
        Ok(())
    }

    fn flush(&mut self, p: usize) -> Result<()> {
        if self.pending[p].is_empty() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        self.block.clear();
        encode_block(&self.pending[p], &mut self.scratch, &mut self.block);
        self.pending[p].clear();
        let encoded = std::time::Instant::now();
        self.files[p]
            .write_all(&self.block)
            .with_context(|| format!("{}: cannot write", path(&self.dir, p).display()))?;
        self.bytes += self.block.len() as u64;
        self.encoding += encoded - started;
        self.writing += encoded.elapsed();
        Ok(())
    }

    /// Writes every partition's last block and closes the files; returns
    /// the hashes written per partition.
    pub(crate) fn finish(&mut self) -> Result<Vec<u64>> {
        for p in 0..PARTITIONS {
            self.flush(p)?;
        }
        self.files.clear();
        Ok(std::mem::take(&mut self.counts))
    }
}

/// Asks the kernel to read partition `p`'s file into the page cache in
/// the background (`POSIX_FADV_WILLNEED`), so that reading it later waits
/// less on the disk. A hint: a file that cannot be opened is skipped.
pub(crate) fn will_need(dir: &Path, p: usize) {
    if let Ok(file) = File::open(path(dir, p)) {
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::WillNeed);
    }
}

/// Appends partition `p`'s key hashes (`expected` of them) to `keys`.
pub(crate) fn read(dir: &Path, p: usize, expected: u64, keys: &mut Vec<u64>) -> Result<()> {
    let path = path(dir, p);
    let damaged = || format!("{}: damaged partition file", path.display());
    let file = File::open(&path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut r = BufReader::with_capacity(1 << 20, file);
    let before = keys.len();
    let mut body = Vec::new();
    loop {
        let mut n = [0u8; 4];
        match crate::input::read_full(&mut r, &mut n)
            .with_context(|| format!("{}: cannot read", path.display()))?
        {
            0 => break,
            4 => {}
            _ => bail!(damaged()),
        }
        let n = u32::from_le_bytes(n) as usize;
        if n == 0 || n > MAX_BLOCK {
            bail!(damaged());
        }
        body.resize(block_bytes(n) - 4, 0);
        r.read_exact(&mut body).with_context(damaged)?;
        decode_block(p, n, &body, keys).with_context(damaged)?;
        if (keys.len() - before) as u64 > expected {
            bail!(damaged());
        }
    }
    if (keys.len() - before) as u64 != expected {
        bail!(
            "{}: {} key hashes, {expected} were written",
            damaged(),
            keys.len() - before
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(p: usize, hashes: &[u64]) -> Vec<u64> {
        let mut out = Vec::new();
        encode_block(hashes, &mut Vec::new(), &mut out);
        assert_eq!(out.len(), block_bytes(hashes.len()));
        let n = u32::from_le_bytes(out[..4].try_into().unwrap()) as usize;
        let mut keys = Vec::new();
        decode_block(p, n, &out[4..], &mut keys).expect("decodes");
        keys
    }

    /// xorshift64*: deterministic random hashes without a dependency.
    fn hashes(seed: u64, n: usize, p: usize, spread: u32) -> Vec<u64> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
                // `spread` bits of randomness below the partition's byte:
                // small spreads crowd a few buckets.
                let below = r >> (64 - spread) << (56 - spread);
                let below = below | (r & ((1 << (56 - spread)) - 1));
                (p as u64) << 56 | (below & ((1 << 56) - 1))
            })
            .collect()
    }

    #[test]
    fn partition_records_round_trip() {
        // Random hashes of every size class and crowding: each block gives
        // back exactly its multiset of hashes.
        for (i, n) in [
            1usize,
            2,
            7,
            100,
            4095,
            BLOCK - 1,
            BLOCK,
            BLOCK + 4321,
            3 * BLOCK,
        ]
        .into_iter()
        .enumerate()
        {
            for spread in [56, 20, 16, 8, 1] {
                let p = (i * 37 + spread as usize) % PARTITIONS;
                let h = hashes(i as u64 * 1000 + spread as u64, n, p, spread);
                let mut want = h.clone();
                let mut got = round_trip(p, &h);
                want.sort_unstable();
                got.sort_unstable();
                assert_eq!(got, want, "n {n} spread {spread}");
            }
        }
        // Extremes: all zero low bits, all ones, repeats.
        for p in [0, 255] {
            let top = (p as u64) << 56;
            let h = vec![
                top,
                top | ((1 << 56) - 1),
                top,
                top | 1 << 40,
                top | ((1 << 40) - 1),
            ];
            let mut got = round_trip(p, &h);
            let mut want = h.clone();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn damaged_blocks_are_refused() {
        let h = hashes(9, 5000, 17, 56);
        let mut out = Vec::new();
        encode_block(&h, &mut Vec::new(), &mut out);
        let n = h.len();
        for at in (4..out.len()).step_by(997).chain([4, out.len() - 1]) {
            let mut bad = out.clone();
            bad[at] ^= 0x10;
            assert!(
                decode_block(17, n, &bad[4..], &mut Vec::new()).is_none(),
                "flip at {at}"
            );
        }
        assert!(decode_block(17, n, &out[4..out.len() - 1], &mut Vec::new()).is_none());
        assert!(decode_block(17, n - 1, &out[4..], &mut Vec::new()).is_none());
    }

    #[test]
    fn files_round_trip_and_count() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = PartitionWriter::create(dir.path()).unwrap();
        let mut all: Vec<Vec<u64>> = vec![Vec::new(); PARTITIONS];
        for (i, g) in hashes(5, 3 * BLOCK, 0, 56).into_iter().enumerate() {
            let g = g ^ ((i as u64 * 7 % 3) << 56);
            all[partition_of(g)].push(g);
            w.extend(partition_of(g), &[g]).unwrap();
        }
        let written = w.bytes;
        let counts = w.finish().unwrap();
        let on_disk: u64 = (0..PARTITIONS)
            .map(|p| std::fs::metadata(path(dir.path(), p)).unwrap().len())
            .sum();
        assert!(
            on_disk >= written && on_disk <= disk_bytes(3 * BLOCK as u64),
            "{on_disk}"
        );
        for p in 0..3 {
            let mut keys = Vec::new();
            read(dir.path(), p, counts[p], &mut keys).unwrap();
            keys.sort_unstable();
            all[p].sort_unstable();
            assert_eq!(keys, all[p]);
            let err = read(dir.path(), p, counts[p] + 1, &mut Vec::new()).unwrap_err();
            assert!(
                format!("{err:#}").contains("damaged partition file"),
                "{err:#}"
            );
        }
        // Cut short: refused.
        let f = path(dir.path(), 1);
        let len = std::fs::metadata(&f).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let err = read(dir.path(), 1, counts[1], &mut Vec::new()).unwrap_err();
        assert!(
            format!("{err:#}").contains("damaged partition file"),
            "{err:#}"
        );
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn random_hashes_round_trip(p in 0usize..PARTITIONS, low in proptest::collection::vec(any::<u64>(), 1..3000), crowd in 0u32..57) {
            // `crowd` high bits of the 56 below the partition's byte zeroed:
            // from spread over every bucket to all in bucket 0.
            let mask = ((1u64 << 56) - 1) >> crowd;
            let hashes: Vec<u64> = low.iter().map(|&r| (p as u64) << 56 | (r & mask)).collect();
            let mut out = Vec::new();
            encode_block(&hashes, &mut Vec::new(), &mut out);
            let mut got = Vec::new();
            prop_assert!(decode_block(p, hashes.len(), &out[4..], &mut got).is_some());
            let mut want = hashes.clone();
            want.sort_unstable();
            got.sort_unstable();
            prop_assert_eq!(got, want);
        }
    }
}
