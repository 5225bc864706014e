//! The allocator setting the service runs with.
//!
//! glibc's `malloc` serves blocks from 128 KiB up with their own mappings,
//! but each time it frees such a block it raises that threshold to the
//! block's size (up to 32 MiB): afterwards, blocks of that size come from
//! its heaps, which keep freed memory resident. Clients' read buffers are
//! exactly such blocks, grown and freed by the thousand under a burst of
//! huge commands, so the process's resident memory then stays tens to
//! hundreds of MiB above what its buffers hold, and the input budget
//! (`crate::budget`) no longer bounds it (measured: 219–283 MiB peak under
//! the 60-client attack of `crates/cli/tests/serve_memory.rs`, once
//! 346 MiB, for a 256 MiB budget). A fixed threshold keeps every block of
//! [`MMAP_THRESHOLD`] or more in its own mapping, returned to the kernel
//! when freed. Such blocks are rare outside bursts: a filter is a file
//! mapping, and a connection keeps buffers of 16 KiB.

/// Blocks of this size or more get their own mapping.
pub const MMAP_THRESHOLD: usize = 1 << 20;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD`] (no effect with
/// other C libraries). Call before the runtime's threads start.
pub fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets a tunable of glibc's allocator; it is
    // called with a valid parameter and value, before other threads exist.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
    }
}
