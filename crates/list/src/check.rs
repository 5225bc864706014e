//! The verdict on a query, computed once for every store: [`check_many`].
//!
//! Every lookup bloomgate answers — the CLI's `check`, a [`List`](crate::List)
//! of any layout, and each filter the server serves (a data directory's
//! Bloom filters, its counting and cuckoo filters, a filter in Redis) —
//! takes the same three steps:
//!
//! 1. **The keys of the queries** ([`QueryKeys`]): each query becomes its
//!    lookup keys by the list's key kind and match mode
//!    ([`bloomgate_url::query_keys`]); a query that is not valid for the
//!    kind gets its [`KeyError`] and no keys. A raw query is its own one
//!    key, so [`check_many`] looks raw queries up where they are, without
//!    copying them.
//! 2. **Membership**: the store says, for the whole batch at once, which
//!    keys it (probably) holds. This is the only step that differs between
//!    stores, and the caller supplies it (the engine's pipelined batch
//!    lookup over a filter's layers, a lookup per key in a counting or
//!    cuckoo table, a Redis pipeline per node). A store that cannot answer
//!    returns its error, and no verdict is given: never "absent".
//! 3. **The whitelist rule** ([`verdict`], over
//!    [`bloomgate_blacklist::verdict_ref`]): a query's keys and their
//!    answers become one verdict (hit, whitelisted, the key that matched).
//!
//! [`check_many`] is the three steps in one call, for a store that answers
//! a batch in one piece; a store that answers parts of a batch separately
//! (the server's Redis store fails only the requests with a key on a node
//! that is down) takes the steps one by one with [`QueryKeys`] and
//! [`verdict`].
//!
//! The verdict is handed to a callback in its borrowed form
//! ([`VerdictRef`]: the matched key is a slice of the query or of the
//! scratch buffers), so that a lookup that only needs "hit or not" (the
//! server's `BF.EXISTS`, a few hundred nanoseconds) allocates nothing once
//! the buffers have grown; [`Verdict`] is the owned form.

use std::ops::Range;

use bloomgate_blacklist::{verdict_ref, VerdictRef, Whitelist};
use bloomgate_url::{push_query_keys, KeyError, KeyKind, MatchMode};

/// The answer to one query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No lookup key of the query is on the list.
    Absent,
    /// The query is (probably) on the list: `matched` is the lookup key
    /// that matched (for url/prefix the Safe Browsing expression, for host
    /// the domain).
    Present {
        /// The matching lookup key.
        matched: Vec<u8>,
    },
    /// The list matched, but the whitelist exempts the query.
    Whitelisted {
        /// The lookup key that matched.
        matched: Vec<u8>,
    },
}

impl Verdict {
    /// The owned verdict of the whitelist rule's borrowed form.
    pub fn of(v: VerdictRef<'_>) -> Verdict {
        match (v.hit, v.matched) {
            (true, Some(m)) => Verdict::Present {
                matched: m.to_vec(),
            },
            (false, Some(m)) => Verdict::Whitelisted {
                matched: m.to_vec(),
            },
            (_, None) => Verdict::Absent,
        }
    }

    /// True for [`Verdict::Present`]: the query is a hit.
    pub fn hit(&self) -> bool {
        matches!(self, Verdict::Present { .. })
    }

    /// True for [`Verdict::Whitelisted`].
    pub fn whitelisted(&self) -> bool {
        matches!(self, Verdict::Whitelisted { .. })
    }

    /// The matching lookup key, when there is one.
    pub fn matched(&self) -> Option<&[u8]> {
        match self {
            Verdict::Absent => None,
            Verdict::Present { matched } | Verdict::Whitelisted { matched } => Some(matched),
        }
    }

    /// The verdict as the whitelist rule's borrowed form
    /// ([`bloomgate_blacklist::VerdictRef`]: hit, whitelisted, matched key).
    pub fn as_ref(&self) -> VerdictRef<'_> {
        VerdictRef {
            hit: self.hit(),
            whitelisted: self.whitelisted(),
            matched: self.matched(),
        }
    }
}

/// The lookup keys of a batch of queries (step 1 of a check): all keys
/// one after the other in one buffer, and per query the range of its keys
/// or why it is not a valid query.
#[derive(Debug, Default)]
pub struct QueryKeys {
    arena: Vec<u8>,
    ends: Vec<usize>,
    spans: Vec<Result<Range<usize>, KeyError>>,
}

impl QueryKeys {
    /// Forgets the queries pushed so far (keeping the buffers).
    pub fn clear(&mut self) {
        self.arena.clear();
        self.ends.clear();
        self.spans.clear();
    }

    /// Appends the keys of one query, by the key kind and match mode.
    pub fn push(&mut self, kind: KeyKind, mode: MatchMode, query: &[u8]) {
        let first = self.ends.len();
        let span = push_query_keys(kind, mode, query, &mut self.arena, &mut self.ends)
            .map(|n| first..first + n);
        self.spans.push(span);
    }

    /// Every key of every query pushed, in order: what the store is asked.
    pub fn keys(&self) -> Vec<&[u8]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let key = &self.arena[start..end];
                start = end;
                key
            })
            .collect()
    }

    /// [`QueryKeys::keys`] into `out` (emptied first), keeping its buffer:
    /// a caller that answers batch after batch allocates it once.
    pub fn keys_into<'a>(&'a self, out: &mut Vec<&'a [u8]>) {
        out.clear();
        let mut start = 0;
        out.extend(self.ends.iter().map(|&end| {
            let key = &self.arena[start..end];
            start = end;
            key
        }));
    }

    /// Per query pushed, in order: the range of its keys in
    /// [`QueryKeys::keys`], or why it is not a valid query.
    pub fn spans(&self) -> &[Result<Range<usize>, KeyError>] {
        &self.spans
    }
}

/// The whitelist rule (step 3 of a check): the verdict on one query from
/// its lookup keys, in order, and whether the store holds each.
pub fn verdict<'k>(whitelist: &Whitelist, keys: &[&'k [u8]], found: &[bool]) -> VerdictRef<'k> {
    verdict_ref(whitelist, keys.iter().copied().zip(found.iter().copied()))
}

/// Reusable buffers of [`check_many`] (keep one per thread or connection).
#[derive(Debug, Default)]
pub struct CheckScratch {
    keys: QueryKeys,
    found: Vec<bool>,
    spare: Vec<bool>,
}

/// Answers a batch of queries: their keys by `kind` and `mode`, their
/// membership by `contains_many`, the verdicts by the whitelist rule (see
/// the [module documentation](self)).
///
/// `contains_many(keys, found, spare)` must leave in `found` one answer
/// per key, in order (`spare` is a buffer it may use, e.g. for a filter of
/// several layers), or return why the store cannot answer. `each` then gets
/// one result per query, in order: its verdict, or why the query is not a
/// valid query of the kind. When `contains_many` fails, `each` is not
/// called and its error is returned: no verdict rather than "absent".
pub fn check_many<E>(
    kind: KeyKind,
    mode: MatchMode,
    whitelist: &Whitelist,
    queries: &[&[u8]],
    s: &mut CheckScratch,
    contains_many: impl FnOnce(&[&[u8]], &mut Vec<bool>, &mut Vec<bool>) -> Result<(), E>,
    mut each: impl FnMut(Result<VerdictRef<'_>, KeyError>),
) -> Result<(), E> {
    if kind == KeyKind::Raw {
        // A raw query is its own one key: looked up in place. (An empty one
        // is looked up too, and answered as the invalid query it is.)
        contains_many(queries, &mut s.found, &mut s.spare)?;
        for (&q, &f) in queries.iter().zip(&s.found) {
            each(match q.is_empty() {
                true => Err(KeyError::Empty),
                false => Ok(verdict(whitelist, &[q], &[f])),
            });
        }
        return Ok(());
    }
    s.keys.clear();
    for q in queries {
        s.keys.push(kind, mode, q);
    }
    let keys = s.keys.keys();
    contains_many(&keys, &mut s.found, &mut s.spare)?;
    for span in s.keys.spans() {
        each(
            span.clone()
                .map(|r| verdict(whitelist, &keys[r.clone()], &s.found[r])),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(
        kind: KeyKind,
        mode: MatchMode,
        wl: &Whitelist,
        on: &[&[u8]],
        q: &[&[u8]],
    ) -> Vec<Result<Verdict, KeyError>> {
        let mut out = Vec::new();
        let r: Result<(), ()> = check_many(
            kind,
            mode,
            wl,
            q,
            &mut CheckScratch::default(),
            |keys, found, _| {
                found.clear();
                found.extend(keys.iter().map(|k| on.contains(k)));
                Ok(())
            },
            |v| out.push(v.map(Verdict::of)),
        );
        r.unwrap();
        out
    }

    #[test]
    fn raw_queries_are_their_own_keys() {
        let wl = Whitelist::default();
        let v = answers(
            KeyKind::Raw,
            MatchMode::Exact,
            &wl,
            &[b"a"],
            &[b"a", b"b", b""],
        );
        assert_eq!(
            v[0],
            Ok(Verdict::Present {
                matched: b"a".to_vec()
            })
        );
        assert_eq!(v[1], Ok(Verdict::Absent));
        assert_eq!(v[2], Err(KeyError::Empty));
    }

    #[test]
    fn host_queries_match_a_parent_domain_unless_whitelisted() {
        let mut wl = Whitelist::default();
        let on: &[&[u8]] = &[b"evil.example"];
        let q: &[&[u8]] = &[b"a.evil.example", b"good.example"];
        let v = answers(KeyKind::Host, MatchMode::Exact, &wl, on, q);
        assert_eq!(
            v[0],
            Ok(Verdict::Present {
                matched: b"evil.example".to_vec()
            })
        );
        assert_eq!(v[1], Ok(Verdict::Absent));
        wl.insert(b"a.evil.example".to_vec());
        let v = answers(KeyKind::Host, MatchMode::Exact, &wl, on, q);
        assert_eq!(
            v[0],
            Ok(Verdict::Whitelisted {
                matched: b"evil.example".to_vec()
            })
        );
    }

    #[test]
    fn a_store_that_cannot_answer_gives_no_verdict() {
        let mut called = false;
        let r = check_many(
            KeyKind::Raw,
            MatchMode::Exact,
            &Whitelist::default(),
            &[b"a"],
            &mut CheckScratch::default(),
            |_, _, _| Err("down"),
            |_| called = true,
        );
        assert_eq!(r, Err("down"));
        assert!(!called);
    }
}
