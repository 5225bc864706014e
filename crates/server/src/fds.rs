//! The process's descriptor limit.
//!
//! Each connection holds a descriptor, and so did each served filter file
//! until read-only filters closed theirs once mapped (the mapping keeps the
//! file). The soft limit many shells and service managers start processes
//! with (1,024) is far below what a server of thousands of connections
//! needs, while the hard limit (often 524,288 or more) is what the
//! administrator allows: the service raises its soft limit to the hard one
//! at start, as Redis raises it towards `maxclients`.

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. Returns the limits
/// before and after (`None` where they cannot be read or set: the service
/// then runs with what it has).
pub fn raise_nofile_limit() -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `getrlimit` writes one `rlimit` to a valid pointer.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return None;
        }
        let before: u64 = lim.rlim_cur;
        if lim.rlim_cur >= lim.rlim_max {
            return Some((before, before));
        }
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `setrlimit` reads one valid `rlimit`; raising the soft
        // limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Some((before, before));
        }
        Some((before, lim.rlim_max))
    }
    #[cfg(not(unix))]
    {
        None
    }
}
