//! The engine's error kinds.

use std::path::PathBuf;

use crate::math::PlanError;

/// Everything that can go wrong in the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call on a file failed.
    #[error("{path}: cannot {op}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// What was being done ("open", "write", "map", …).
        op: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A filter file is not valid: see [`FormatProblem`].
    #[error("{path}: {problem}")]
    Format {
        /// The file involved.
        path: PathBuf,
        /// What is wrong with it.
        problem: FormatProblem,
    },
    /// Two filters cannot be combined (different layout, size, k or seed).
    #[error("filters are incompatible: {0}")]
    Incompatible(String),
    /// Parameters that do not describe a valid filter.
    #[error("invalid filter parameters: {0}")]
    InvalidParams(String),
    /// Sizing failed.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The operation needs a writable, file-backed filter.
    #[error("{0}")]
    NotWritable(&'static str),
    /// Memory for the bit array could not be allocated.
    #[error("cannot allocate {0} bytes for the bit array")]
    OutOfMemory(u64),
    /// Records spilled for a later slice of a build are damaged.
    #[error("damaged spill: {0}")]
    BadSpill(String),
}

/// What is wrong with a filter file. Each reads as one line after the file name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatProblem {
    /// Shorter than a header.
    #[error("not a bloomgate filter: only {0} bytes, shorter than the 4096-byte header")]
    TooShort(u64),
    /// The first eight bytes are not the magic.
    #[error("not a bloomgate filter (wrong magic bytes)")]
    BadMagic,
    /// Written by a newer version of the format.
    #[error("format version {found} is newer than this bloomgate supports (up to {supported}); upgrade bloomgate")]
    NewerVersion {
        /// Version in the file.
        found: u32,
        /// Newest version this build reads.
        supported: u32,
    },
    /// The header's checksum does not match its bytes.
    #[error("header is corrupted (header checksum mismatch)")]
    HeaderChecksum,
    /// A header field has an impossible value.
    #[error("header is invalid: {0}")]
    BadField(String),
    /// The file is shorter than its header says.
    #[error("file is truncated: header promises {expected} bytes, file has {found}")]
    Truncated {
        /// Bytes the header implies.
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// The file is longer than its header says.
    #[error("file has {extra} unexpected trailing bytes")]
    Trailing {
        /// Bytes past the end of the data.
        extra: u64,
    },
    /// The bit array does not match its checksum.
    #[error("data is corrupted (data checksum {found:#018x}, header says {expected:#018x})")]
    DataChecksum {
        /// Checksum in the header.
        expected: u64,
        /// Checksum of the data as read.
        found: u64,
    },
    /// The header's set-bit count does not match the data.
    #[error("the header records {stored} set bits, the data has {found}")]
    OnesMismatch {
        /// Count in the header.
        stored: u64,
        /// Count in the data as read.
        found: u64,
    },
    /// The file holds another kind of filter than the one asked for (a
    /// counting or cuckoo filter opened as a Bloom filter, or the reverse).
    #[error("holds a {found} filter, not a {expected} filter")]
    WrongKind {
        /// The kind the file holds (`blocked Bloom`, `classic Bloom`, `counting`, `cuckoo`).
        found: &'static str,
        /// The kind the caller asked for.
        expected: &'static str,
    },
    /// An in-place update was interrupted, so the data checksum is stale.
    #[error("an in-place update was interrupted: the bits are usable but the data checksum is stale (run `bloomgate add` on it with no input to reseal it)")]
    Dirty,
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err<'a>(
    path: &'a std::path::Path,
    op: &'static str,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}
