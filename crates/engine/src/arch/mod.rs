//! The in-block probe kernels of the blocked layout, with their SIMD twins.
//!
//! This is the only module with `unsafe` code besides `storage`. The rest of the
//! engine calls the safe functions here ([`block_contains`],
//! [`block_contains_at`], [`dispatch`],
//! [`block_mask`], [`block_mask_with`], [`block_insert`], [`prefetch`]) with a [`Kernel`]: AVX-512F or AVX2 once the
//! CPU has been checked for them (a `Kernel` value is the proof), otherwise
//! the portable scalar kernel in [`scalar`]. The scalar kernel is the
//! reference: the tests run every supported kernel on the same inputs and
//! require the scalar answers, bit for bit.
//!
//! Measured on the benchmark machine (`filters quick`, in-cache block, k = 12,
//! pre-hashed): AVX-512 2.9 ns, AVX2 5.1 ns, scalar 13–14 ns per lookup; the
//! former AVX2 gather kernel took 5.7–9 ns.
//!
//! # Probe derivation inside a block
//!
//! A block is 512 bits = sixteen 32-bit words. From a 32-bit value `h` (taken
//! from the item's hash, with its low bit forced to 1) probe `i` (0-based) is
//!
//! ```text
//! x_i = h · G^(i+1)  (mod 2³²),   G = 0x9E3779B9 (2³²/φ, odd)
//! position_i = x_i >> 23           (the top 9 bits: 0..511)
//! ```
//!
//! Multiplying by an odd constant is a bijection of the 32-bit integers whose
//! top bits depend on all the bits of `h`, so successive probes are close to
//! independent and uniform over the 512 positions, which is what the Putze
//! formula in `math` assumes (RocksDB's FastLocalBloom uses the same scheme and
//! measured FP within noise of the formula; our own measurement is in
//! BENCHMARKS.md and `tests/fp_rate.rs`). The powers `G^(i+1)` are a table, so
//! the probes are independent multiplications that the CPU (or 8–16 SIMD lanes)
//! computes in parallel.
//!
//! Why deriving all probes from 32 bits does not raise the FP rate: a query
//! collides with an item of its block *through the derivation* only when their
//! `h` values are equal, probability 2⁻³¹ per item in the block. With ~23 items
//! per block at p = 10⁻⁴ that adds about 10⁻⁸, a 0.01 % relative increase.
//! Plain double hashing modulo 512 (`h1 + i·h2`) would have only 9+8 bits of
//! pattern entropy: 23/2¹⁷ ≈ 1.8·10⁻⁴, more than the target rate itself —
//! the reason that scheme was rejected. Forcing the low bit to 1 avoids the
//! degenerate `h` with ≥ 23 trailing zeros, whose probes would all coincide.
//!
//! # Probes in consecutive words (hash id 3)
//!
//! Above, two probes may land in the same 32-bit word, so an insert's mask
//! cannot be built with one shift per lane: each probe is merged on its own
//! (about three vector operations per probe). Hash id 3 places the probes
//! in distinct words instead, [`Probes::Words`]:
//!
//! ```text
//! s = h mod 16                     (a start word: the low 4 bits of h)
//! position_i = 32 · ((s + i) mod 16) + (x_i >> 27),   i < k ≤ 16
//! ```
//!
//! so the `k` probes fill `k` consecutive words (mod 16) with one bit each.
//! An insert's mask is then one shift per lane and one permute that moves
//! lane `i` to word `s + i`; a batched lookup permutes the block by `h + i`
//! (the permute reads the low 4 bits), an index ready before the multiply
//! is, and a single lookup builds the insert's mask while the block loads
//! and tests the block against it ([`block_contains_at`]).
//! Here `h` is the hash's low 32 bits as they are, not made odd: the start
//! needs all 16 values, and an even `h` still gives uniform top bits `x_i >>
//! 27` (for a fixed `s`, the other 28 bits of `h` range over all values,
//! and so do the top bits of the product); only `h = 0`, probability 2⁻³²,
//! puts every probe at bit 0 of its word. Its false-positive rate is not
//! the Putze formula's: `math::words` computes it exactly, 4.5 % above the
//! formula's at the same bits (p = 10⁻⁴, k = 12), so plans are 0.6 % larger.
//! Measured (BENCHMARKS.md, "Hash id 3: the probes in consecutive words"):
//! the in-block insert kernel 3.0 ns against 9.4, lookups unchanged.

pub mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86_64;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// One block of the blocked layout: eight 64-bit words, one cache line.
pub type Block = [AtomicU64; 8];

/// How the `k` probes of an in-block hash are spread over its block; a
/// filter's hash id decides (`HashId::probes`). See the module docs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Probes {
    /// Hash ids 1 and 2: probe `i` at bit `x_i >> 23` of the block, anywhere
    /// (two probes may share a word). At most 64 probes.
    Anywhere,
    /// Hash id 3: probe `i` in word `(h + i) mod 16`, one bit per word. At
    /// most 16 probes.
    Words,
}

impl Probes {
    /// The most probes an item may have.
    pub const fn max_k(self) -> u32 {
        match self {
            Probes::Anywhere => 64,
            Probes::Words => 16,
        }
    }

    /// `k` capped at [`Probes::max_k`] (a filter's parameters never exceed
    /// it; the kernels cap it anyway so that no input indexes past a table).
    #[inline(always)]
    pub fn clamp(self, k: u32) -> u32 {
        k.min(self.max_k())
    }
}

/// `G^(i+1) mod 2³²` for `i` in `0..64`: the multipliers of the probes.
pub(crate) const POWERS: [u32; 64] = {
    let mut t = [0u32; 64];
    let mut x: u32 = 1;
    let mut i = 0;
    while i < 64 {
        x = x.wrapping_mul(scalar::GOLDEN32);
        t[i] = x;
        i += 1;
    }
    t
};

/// The instruction set the in-block kernels run with.
///
/// A `Kernel` other than [`Kernel::SCALAR`] can only be obtained after the
/// CPU was checked for its instructions ([`Kernel::best`], [`Kernel::supported`],
/// [`Kernel::by_name`]), so holding one is the proof the `unsafe` calls below
/// rely on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Kernel(Isa);

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Isa {
    Scalar,
    Avx2,
    Avx512,
}

impl Kernel {
    /// The portable reference kernel; runs everywhere.
    pub const SCALAR: Kernel = Kernel(Isa::Scalar);

    /// Every kernel this CPU can run, fastest first.
    pub fn supported() -> Vec<Kernel> {
        let mut v = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx2") {
                v.push(Kernel(Isa::Avx512));
            }
            if std::is_x86_feature_detected!("avx2") {
                v.push(Kernel(Isa::Avx2));
            }
        }
        v.push(Kernel::SCALAR);
        v
    }

    /// The fastest supported kernel, unless the environment variable
    /// `BLOOMGATE_KERNEL` names another supported one (`avx512`, `avx2` or
    /// `scalar`: e.g. to avoid AVX-512 on CPUs that lower their clock for it).
    /// Detected once per process.
    pub fn best() -> Kernel {
        static BEST: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            std::env::var("BLOOMGATE_KERNEL")
                .ok()
                .and_then(|name| Kernel::by_name(&name))
                .unwrap_or(Kernel::supported()[0])
        })
    }

    /// The supported kernel called `name` (`avx512`, `avx2`, `scalar`).
    pub fn by_name(name: &str) -> Option<Kernel> {
        Kernel::supported().into_iter().find(|k| k.name() == name)
    }

    /// The kernel's name.
    pub fn name(self) -> &'static str {
        match self.0 {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Runs `f` inside a function compiled for `kernel`'s instruction set.
///
/// `f` receives the kernel back as a constant, so every
/// [`block_contains`] in it resolves to one kernel and inlines, together
/// with the hashing and the loop around it: the whole lookup becomes one
/// straight-line body instead of a call per probe. This is how the engine's
/// loops are multiversioned without writing them once per instruction set.
///
/// Every kernel's body is its own function, the scalar one too (it could
/// inline into the caller, but then a caller doing one lookup would carry
/// the inlined hash's register saves on every kernel's path).
#[inline]
pub fn dispatch<R>(kernel: Kernel, f: impl FnOnce(Kernel) -> R) -> R {
    match kernel.0 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Kernel(Isa::Avx512)` only exists if the CPU has AVX-512F.
        Isa::Avx512 => unsafe { x86_64::run_avx512(f) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Kernel(Isa::Avx2)` only exists if the CPU has AVX2.
        Isa::Avx2 => unsafe { x86_64::run_avx2(f) },
        _ => run_scalar(f),
    }
}

/// The scalar arm of [`dispatch`], out of line.
#[inline(never)]
fn run_scalar<R>(f: impl FnOnce(Kernel) -> R) -> R {
    f(Kernel::SCALAR)
}

/// True when every one of the `k` probes of `h` finds its bit set in `block`.
///
/// Safe to call while other threads set bits in the block: each word is read
/// once, as an old or a new value, and bits are never cleared.
#[inline(always)]
pub fn block_contains(kernel: Kernel, probes: Probes, block: &Block, h: u32, k: u32) -> bool {
    match kernel.0 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Kernel(Isa::Avx512)` only exists if the CPU has AVX-512F.
        Isa::Avx512 => unsafe { x86_64::block_contains_avx512(probes, block, h, k) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Kernel(Isa::Avx2)` only exists if the CPU has AVX2.
        Isa::Avx2 => unsafe { x86_64::block_contains_avx2(probes, block, h, k) },
        _ => scalar::block_contains(probes, &load_block(block), h, k),
    }
}

/// [`block_contains`] of `blocks[i]` in one call into a function compiled
/// for the kernel: a single lookup, hashed by its caller.
///
/// One lookup at a time is bound by its chain of dependent steps (hash,
/// block address, load, test), and a call per lookup is unavoidable when
/// the caller is not compiled for the kernel's instruction set. This call
/// takes four registers and the kernel's function does the rest; with
/// [`Probes::Words`] its AVX-512 and AVX2 kernels build the probe mask while
/// the block's load is in flight and test the block against it once it
/// arrives (one instruction, one per half on AVX2), where
/// [`block_contains`] (the batched loops' kernel, whose lookups overlap
/// anyway) permutes the block first and needs one vector operation fewer. Measured in BENCHMARKS.md ("Single
/// lookups: one call, the mask before the load").
///
/// Panics if `i` is out of range, as indexing does.
#[inline]
pub fn block_contains_at(
    kernel: Kernel,
    probes: Probes,
    blocks: &[Block],
    i: usize,
    h: u32,
    k: u32,
) -> bool {
    match (kernel.0, probes) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Kernel(Isa::Avx512)` only exists if the CPU has AVX-512F.
        (Isa::Avx512, Probes::Words) => unsafe {
            x86_64::contains_at_avx512::<true>(blocks, i, h, k)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Isa::Avx512, Probes::Anywhere) => unsafe {
            x86_64::contains_at_avx512::<false>(blocks, i, h, k)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Kernel(Isa::Avx2)` only exists if the CPU has AVX2.
        (Isa::Avx2, Probes::Words) => unsafe { x86_64::contains_at_avx2::<true>(blocks, i, h, k) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Isa::Avx2, Probes::Anywhere) => unsafe {
            x86_64::contains_at_avx2::<false>(blocks, i, h, k)
        },
        _ => contains_at_scalar(probes, blocks, i, h, k),
    }
}

/// Where an item lives: its block among a filter's blocks and its 32-bit
/// in-block hash (the filter's hash and its reduction to a block, which
/// this module does not know).
pub(crate) trait Locate {
    /// `item`'s block index and in-block hash.
    fn locate(&self, item: &[u8]) -> (usize, u32);
}

/// A whole single lookup under [`Probes::Words`], compiled for one kernel:
/// [`WordsItem::contains`] locates the item ([`Locate`], inlined) and
/// tests its block as [`block_contains_at`] does, in one call through a
/// function pointer chosen once, when the kernel is.
///
/// A lookup of a filter in DRAM is one dependent miss; how many of them a
/// caller's loop overlaps is how many lookups fit in the CPU's reorder
/// window, so every instruction between two lookups' loads counts. With
/// the hash in the caller, the block's test one call away and the kernel
/// matched per lookup, the AMD EPYC of BENCHMARKS.md ran 111–125
/// instructions per lookup and took 1.24× sbbf-rs's time on a 2 GiB
/// filter (86 instructions); at 91 it takes 0.88–1.06× ("Single lookups
/// in DRAM: the reorder window").
pub(crate) struct WordsItem<L> {
    run: unsafe fn(&[Block], u32, &[u8], &L) -> bool,
}

impl<L> Clone for WordsItem<L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L> Copy for WordsItem<L> {}

impl<L: Locate> WordsItem<L> {
    /// The lookup compiled for `kernel`.
    pub(crate) fn new(kernel: Kernel) -> WordsItem<L> {
        let run: unsafe fn(&[Block], u32, &[u8], &L) -> bool = match kernel.0 {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => x86_64::words_item_avx512::<L>,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => x86_64::words_item_avx2::<L>,
            _ => words_item_scalar::<L>,
        };
        WordsItem { run }
    }

    /// Whether every probe of `item` (located by `at`) finds its bit set.
    /// Panics if `at` gives a block index out of range, as indexing does.
    #[inline(always)]
    pub(crate) fn contains(&self, blocks: &[Block], k: u32, item: &[u8], at: &L) -> bool {
        // SAFETY: `run` is the function of a `Kernel`, and a kernel value
        // only exists for an instruction set this CPU supports
        // ([`Kernel::supported`]); the function's other requirements are
        // its arguments' types.
        unsafe { (self.run)(blocks, k, item, at) }
    }
}

/// The scalar arm of [`WordsItem`].
fn words_item_scalar<L: Locate>(blocks: &[Block], k: u32, item: &[u8], at: &L) -> bool {
    let (i, h) = at.locate(item);
    contains_at_scalar(Probes::Words, blocks, i, h, k)
}

/// The scalar arm of [`block_contains_at`], out of line like
/// [`run_scalar`].
#[inline(never)]
fn contains_at_scalar(probes: Probes, blocks: &[Block], i: usize, h: u32, k: u32) -> bool {
    scalar::block_contains(probes, &load_block(&blocks[i]), h, k)
}

/// Reads a block word by word (Relaxed atomic loads).
#[inline(always)]
pub fn load_block(block: &Block) -> [u64; 8] {
    std::array::from_fn(|i| block[i].load(Relaxed))
}

/// The 512-bit mask of the probes of `h`, as eight 64-bit words.
#[inline]
pub fn block_mask(probes: Probes, h: u32, k: u32) -> [u64; 8] {
    scalar::block_mask(probes, h, k)
}

/// [`block_mask`] built with `kernel`: the same eight words. AVX-512 builds
/// the mask in a register and stores it once, as AVX2 does for
/// [`Probes::Words`]; the others use the scalar reference. For writers that
/// cannot use [`block_insert`] because they store word by word (a shared
/// filter's atomic stores).
#[inline(always)]
pub fn block_mask_with(kernel: Kernel, probes: Probes, h: u32, k: u32) -> [u64; 8] {
    match (kernel.0, probes) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Kernel(Isa::Avx512)` only exists if the CPU has AVX-512F.
        (Isa::Avx512, _) => unsafe { x86_64::block_mask_avx512(probes, h, k) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Kernel(Isa::Avx2)` only exists if the CPU has AVX2, and
        // the clamped k of Probes::Words is at most 16.
        (Isa::Avx2, Probes::Words) => unsafe { x86_64::words_block_mask_avx2(h, probes.clamp(k)) },
        _ => scalar::block_mask(probes, h, k),
    }
}

/// ORs the probes of `h` into a block the caller holds exclusively (plain
/// memory, no other reader or writer); whether a bit was new. The same bits
/// as [`block_mask`] OR-ed into the block word by word; a block that has
/// them all already is not written.
///
/// AVX-512 builds the mask in a vector register, and so does AVX2 for
/// [`Probes::Words`]; otherwise the scalar reference, which the compiler
/// vectorizes where it can.
#[inline(always)]
pub fn block_insert(kernel: Kernel, probes: Probes, block: &mut [u64; 8], h: u32, k: u32) -> bool {
    match (kernel.0, probes) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Kernel(Isa::Avx512)` only exists if the CPU has AVX-512F.
        (Isa::Avx512, _) => unsafe { x86_64::block_insert_avx512(probes, block, h, k) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Kernel(Isa::Avx2)` only exists if the CPU has AVX2, and
        // the clamped k of Probes::Words is at most 16.
        (Isa::Avx2, Probes::Words) => unsafe {
            x86_64::words_block_insert_avx2(block, h, probes.clamp(k))
        },
        _ => scalar::block_insert(probes, block, h, k),
    }
}

/// Hints the CPU to start loading the cache line at `ptr`. Never faults,
/// whatever the address: a prefetch is only a hint.
#[inline(always)]
pub fn prefetch<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: PREFETCHT0 is part of SSE, which every x86_64 CPU has, and
        // it never faults nor reads memory architecturally, for any address.
        #[allow(unused_unsafe)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(ptr as *const i8)
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn atomic(words: [u64; 8]) -> Block {
        words.map(AtomicU64::new)
    }

    /// The kernels `BLOOMGATE_EXPECT_KERNELS` (comma-separated names, set by
    /// `scripts/test.sh` from the CPU's flags) says this machine must run:
    /// each must be known and supported, so that the parity test below
    /// cannot pass by testing only the scalar kernel on a CPU that has more.
    fn assert_expected_kernels() {
        let Ok(names) = std::env::var("BLOOMGATE_EXPECT_KERNELS") else {
            return;
        };
        let supported: Vec<&str> = Kernel::supported().iter().map(|k| k.name()).collect();
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            assert!(
                ["avx512", "avx2", "scalar"].contains(&name),
                "BLOOMGATE_EXPECT_KERNELS names an unknown kernel {name:?}"
            );
            assert!(
                supported.contains(&name),
                "BLOOMGATE_EXPECT_KERNELS expects the {name} kernel, but this build on this CPU runs only {supported:?}"
            );
        }
    }

    #[test]
    fn expected_kernels_are_supported() {
        assert_expected_kernels();
    }

    /// Both probe schemes, with a `k` each allows.
    fn probes_and_k() -> impl Strategy<Value = (Probes, u32)> {
        prop_oneof![
            (1u32..=64).prop_map(|k| (Probes::Anywhere, k)),
            (1u32..=16).prop_map(|k| (Probes::Words, k)),
        ]
    }

    proptest! {
        #[test]
        fn every_kernel_matches_scalar(words in proptest::array::uniform8(any::<u64>()), h in any::<u32>(), (probes, k) in probes_and_k(), sparse in any::<bool>()) {
            // Dense random blocks say "yes" rarely; OR-ing in a rotation makes "yes" common too.
            let mut words = words;
            if sparse { words.iter_mut().for_each(|w| *w = !*w | w.rotate_left(7)); }
            // Every h, even ones: hash id 3 uses the low 32 bits as they are.
            let block = atomic(words);
            let mask = atomic(block_mask(probes, h, k));
            let want = scalar::block_contains(probes, &words, h, k);
            assert_expected_kernels();
            for kernel in Kernel::supported() {
                // Called directly, through `dispatch` (the inlined form the
                // batched loops use) and as one block of several (the single
                // lookup's call, with its own kernel for Probes::Words).
                prop_assert_eq!(block_contains(kernel, probes, &block, h, k), want, "kernel {}", kernel);
                prop_assert_eq!(dispatch(kernel, |kk| block_contains(kk, probes, &block, h, k)), want, "kernel {}", kernel);
                let blocks = [atomic(words.map(|w| !w)), atomic(words), atomic(words.map(|w| w | w.rotate_left(3)))];
                prop_assert_eq!(block_contains_at(kernel, probes, &blocks, 1, h, k), want, "kernel {}", kernel);
                prop_assert_eq!(block_contains_at(kernel, probes, &blocks, 2, h, k), scalar::block_contains(probes, &load_block(&blocks[2]), h, k), "kernel {}", kernel);
                // A block holding exactly the mask always contains it; with one
                // of its bits cleared, never.
                prop_assert!(block_contains(kernel, probes, &mask, h, k));
                prop_assert!(block_contains_at(kernel, probes, std::slice::from_ref(&mask), 0, h, k));
                let m = block_mask(probes, h, k);
                let (w, bit) = m.iter().enumerate().find(|(_, w)| **w != 0).map(|(i, w)| (i, w.trailing_zeros())).unwrap();
                let holed = atomic(m);
                holed[w].fetch_and(!(1u64 << bit), Relaxed);
                prop_assert!(!block_contains(kernel, probes, &holed, h, k), "kernel {}", kernel);
                prop_assert!(!block_contains_at(kernel, probes, std::slice::from_ref(&holed), 0, h, k), "kernel {}", kernel);
                // The whole single lookup (`WordsItem`): the block and hash
                // its locator gives, tested on the kernel's function.
                if probes == Probes::Words {
                    let item = WordsItem::<Fixed>::new(kernel);
                    prop_assert_eq!(item.contains(&blocks, k, b"x", &Fixed(1, h)), want, "kernel {}", kernel);
                    prop_assert_eq!(item.contains(&blocks, k, b"x", &Fixed(2, h)), scalar::block_contains(probes, &load_block(&blocks[2]), h, k), "kernel {}", kernel);
                    prop_assert!(item.contains(std::slice::from_ref(&mask), k, b"x", &Fixed(0, h)));
                    prop_assert!(!item.contains(std::slice::from_ref(&holed), k, b"x", &Fixed(0, h)), "kernel {}", kernel);
                }
            }
        }
    }

    /// A locator that puts every item at one block with one in-block hash.
    struct Fixed(usize, u32);

    impl Locate for Fixed {
        fn locate(&self, _: &[u8]) -> (usize, u32) {
            (self.0, self.1)
        }
    }

    proptest! {
        #[test]
        fn every_insert_kernel_matches_scalar(words in proptest::array::uniform8(any::<u64>()), h in any::<u32>(), (probes, k) in probes_and_k(), sparse in any::<bool>()) {
            // Random blocks rarely hold a whole mask; sparse ones (and the
            // second insert below) cover "nothing new" too.
            let words = if sparse { words.map(|w| w & w.rotate_left(13) & w.rotate_left(29)) } else { words };
            // Every h, even ones: hash id 3 uses the low 32 bits as they are.
            let mut want = words;
            let want_new = scalar::block_insert(probes, &mut want, h, k);
            let mask = block_mask(probes, h, k);
            let or: [u64; 8] = std::array::from_fn(|i| words[i] | mask[i]);
            prop_assert_eq!(want, or);
            prop_assert_eq!(want_new, or != words);
            assert_expected_kernels();
            for kernel in Kernel::supported() {
                prop_assert_eq!(block_mask_with(kernel, probes, h, k), mask, "kernel {}", kernel);
                prop_assert_eq!(dispatch(kernel, |kk| block_mask_with(kk, probes, h, k)), mask, "kernel {}", kernel);
                let mut got = words;
                let new = dispatch(kernel, |kk| block_insert(kk, probes, &mut got, h, k));
                prop_assert_eq!(got, want, "kernel {}", kernel);
                prop_assert_eq!(new, want_new, "kernel {}", kernel);
                prop_assert!(!block_insert(kernel, probes, &mut got, h, k), "kernel {}", kernel);
                prop_assert_eq!(got, want, "kernel {}", kernel);
            }
        }
    }

    /// Hash id 3's probes, written out from the module docs: k bits, one in
    /// each of the k consecutive words from `h mod 16`.
    #[test]
    fn word_probes_fill_k_consecutive_words_one_bit_each() {
        for h in [0u32, 1, 2, 3, 0x1f, 0xdead_beef, u32::MAX] {
            for k in 1..=16u32 {
                let m = block_mask(Probes::Words, h, k);
                let words: [u32; 16] = std::array::from_fn(|w| (m[w / 2] >> (32 * (w % 2))) as u32);
                let s = (h % 16) as usize;
                for (w, word) in words.iter().enumerate() {
                    let probed = (w + 16 - s % 16) % 16 < k as usize;
                    assert_eq!(word.count_ones(), probed as u32, "h {h:#x} k {k} word {w}");
                }
                for i in 0..k as usize {
                    let bit = h.wrapping_mul(POWERS[i]) >> 27;
                    assert_ne!(words[(s + i) % 16] & (1 << bit), 0);
                }
            }
        }
    }

    #[test]
    fn mask_has_at_most_k_bits() {
        for h in [1u32, 3, 0xdead_beef | 1, u32::MAX] {
            for k in [1u32, 8, 12, 16, 64] {
                let ones: u32 = block_mask(Probes::Anywhere, h, k)
                    .iter()
                    .map(|w| w.count_ones())
                    .sum();
                assert!(ones >= 1 && ones <= k);
            }
        }
    }

    #[test]
    fn kernels_are_named_and_scalar_is_always_there() {
        let all = Kernel::supported();
        assert_eq!(*all.last().unwrap(), Kernel::SCALAR);
        for k in &all {
            assert_eq!(Kernel::by_name(k.name()), Some(*k));
        }
        assert_eq!(Kernel::by_name("sse9"), None);
        assert!(all.contains(&Kernel::best()));
    }
}
