//! Redis's glob patterns (`KEYS`, `SCAN MATCH`, `CONFIG GET`), matched in
//! time linear in the pattern and the name ([`glob`]), with the recursive
//! definition it is tested against ([`glob_reference`]).

/// Glob matching as Redis's `KEYS` and `SCAN MATCH` do (`stringmatchlen`):
/// `*` any run, `?` any byte, `[abc]`, `[^abc]`, `[a-z]` (reversed ranges
/// swapped, `\` escaping inside), `\x` a literal `x`; a `[` without its
/// `]` takes the rest of the pattern as its class.
///
/// Redis's matcher recursed at every `*`, which made `*a*a*a*a*a*b` against
/// a long run of `a`s exponential (CVE-2022-36021, 40 s for a 200-byte
/// name here); Redis then cut the recursion short. This one is iterative:
/// every token but `*` consumes exactly one byte, so on a mismatch only
/// the last `*` needs to take one more byte (an earlier `*` taking more
/// could only leave less to the tokens after the last one), which bounds
/// the work by `pattern.len() × name.len()` token steps (a class costs its
/// length). [`glob_reference`] is the recursive definition it is tested
/// against.
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    // The last `*` seen: the pattern position after it, and the name
    // position it has been tried up to.
    let mut star: Option<(usize, usize)> = None;
    loop {
        if pi < p.len() && p[pi] == b'*' {
            while pi < p.len() && p[pi] == b'*' {
                pi += 1;
            }
            if pi == p.len() {
                return true;
            }
            star = Some((pi, si));
            continue;
        }
        if si == s.len() {
            // Only stars may be left (handled above): Redis's trailing `*`s.
            return pi == p.len();
        }
        if pi < p.len() {
            if let Some(next) = token_matches(p, pi, s[si]) {
                pi = next;
                si += 1;
                continue;
            }
        }
        // Mismatch (or pattern done with name left): the last `*` takes one
        // more byte, if there was one.
        match star {
            Some((after, from)) if from < s.len() => {
                star = Some((after, from + 1));
                pi = after;
                si = from + 1;
            }
            _ => return false,
        }
    }
}

/// If the single-byte token at `p[i]` (not `*`) matches `c`, the pattern
/// position after it.
fn token_matches(p: &[u8], i: usize, c: u8) -> Option<usize> {
    match p[i] {
        b'?' => Some(i + 1),
        b'[' => {
            let (hit, next) = class(p, i + 1, c);
            hit.then_some(next)
        }
        b'\\' if i + 1 < p.len() => (p[i + 1] == c).then_some(i + 2),
        x => (x == c).then_some(i + 1),
    }
}

/// A `[...]` class whose body starts at `p[i]`: whether `c` is in it, and
/// the pattern position after it (Redis's parsing, quirks included).
fn class(p: &[u8], mut i: usize, c: u8) -> (bool, usize) {
    let not = p.get(i) == Some(&b'^');
    if not {
        i += 1;
    }
    let mut hit = false;
    loop {
        if p.get(i) == Some(&b'\\') && i + 1 < p.len() {
            i += 1;
            hit |= p[i] == c;
        } else if p.get(i) == Some(&b']') {
            break;
        } else if i >= p.len() {
            // Unterminated: the class ends with the pattern.
            return (hit != not, p.len());
        } else if i + 2 < p.len() && p[i + 1] == b'-' {
            let (a, b) = (p[i].min(p[i + 2]), p[i].max(p[i + 2]));
            hit |= (a..=b).contains(&c);
            i += 2;
        } else {
            hit |= p[i] == c;
        }
        i += 1;
    }
    (hit != not, i + 1)
}

/// Redis's `stringmatchlen`, recursive at every `*` as Redis wrote it
/// (exponential on some patterns): the definition [`glob`] is tested
/// against, on small inputs.
pub fn glob_reference(p: &[u8], s: &[u8]) -> bool {
    if p.is_empty() {
        return s.is_empty();
    }
    if p[0] == b'*' {
        return (0..=s.len()).any(|k| glob_reference(&p[1..], &s[k..]));
    }
    if s.is_empty() {
        return false;
    }
    let next = match p[0] {
        b'?' => Some(1),
        b'[' => {
            let (hit, next) = class(p, 1, s[0]);
            hit.then_some(next)
        }
        b'\\' if p.len() > 1 => (p[1] == s[0]).then_some(2),
        x => (x == s[0]).then_some(1),
    };
    next.is_some_and(|n| glob_reference(&p[n..], &s[1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globbing() {
        assert!(glob(b"*", b"abc"));
        assert!(glob(b"a?c", b"abc"));
        assert!(glob(b"a[b-d]c", b"acc"));
        assert!(!glob(b"a[^b]c", b"abc"));
        assert!(glob(b"bf:*", b"bf:1"));
        assert!(!glob(b"bf:*", b"x"));
        // Redis's quirks: reversed ranges, escapes in and out of classes,
        // an unterminated class, a trailing backslash.
        assert!(glob(b"[d-b]", b"c"));
        assert!(glob(b"[\\]]x", b"]x"));
        assert!(glob(b"a\\*", b"a*") && !glob(b"a\\*", b"ab"));
        assert!(glob(b"a[bc", b"ac") && !glob(b"a[bc", b"ad"));
        assert!(glob(b"a\\", b"a\\"));
        assert!(glob(b"[]a", b"a") == glob_reference(b"[]a", b"a"));
    }

    /// The patterns that took seconds (and then minutes) against a name of
    /// 200 `a`s answer at once, and right.
    #[test]
    fn hostile_patterns_are_linear() {
        let name = vec![b'a'; 200];
        let t = std::time::Instant::now();
        for stars in 1..=40 {
            let mut p = b"*a".repeat(stars);
            p.push(b'b');
            assert!(!glob(&p, &name));
            p.pop();
            assert!(glob(&p, &name));
        }
        let long = b"*a".repeat(5000);
        assert!(!glob(&long, &name));
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
        /// The iterative matcher agrees with the recursive definition.
        #[test]
        fn glob_agrees_with_the_reference(
            p in proptest::collection::vec(proptest::sample::select(b"ab*?[]^-\\".to_vec()), 0..10),
            s in proptest::collection::vec(proptest::sample::select(b"ab]-*\\".to_vec()), 0..10),
        ) {
            proptest::prop_assert_eq!(glob(&p, &s), glob_reference(&p, &s));
        }
    }
}
