//! URL canonicalization throughput benchmark for `bloomgate-url`.
//!
//! Generates deterministic synthetic URLs (splitmix64): ~80% already
//! canonical (the allocation-free fast path) and ~20% messy ones (uppercase,
//! ports, fragments, dot segments, `//`, percent-escapes, IPv4 spellings,
//! IDN, user info, whitespace, ~2% invalid). Every messy URL is derived from a
//! canonical one by transformations that must not change its canonical key,
//! so the benchmark verifies every answer before timing anything; a broken
//! implementation fails instead of looking fast. Also times the (canonical)
//! URL shape of the CLI benchmark, `http://host<h>.example/path/<i>`, and the
//! url/prefix query path.
//!
//! Run: `cargo run --release -p bloomgate-bench --bin url_canon [-- N]`

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use bloomgate_url::{canonical_key, query_keys, KeyKind, MatchMode};

struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (((self.next() >> 32) * n as u64) >> 32) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

const SUBS: &[&str] = &[
    "www", "m", "login", "secure", "mail", "cdn", "static", "api", "shop", "news", "accounts",
    "img", "blog", "support", "app",
];
const WORDS: &[&str] = &[
    "paypal", "example", "google", "amazon", "bank", "verify", "update", "account", "free",
    "prize", "download", "video", "news", "weather", "shop", "cheap", "pharma", "crypto", "wallet",
    "login", "support", "cloud", "photos", "travel", "deals", "secure", "portal", "service",
    "online", "center",
];
const TLDS: &[&str] = &[
    "com", "net", "org", "info", "io", "co.uk", "de", "ru", "xyz", "top", "com.br", "fr",
];
const SEGS: &[&str] = &[
    "index.html",
    "login",
    "account",
    "verify",
    "images",
    "img",
    "static",
    "js",
    "css",
    "app.js",
    "wp-content",
    "uploads",
    "2024",
    "05",
    "signin",
    "update.php",
    "a",
    "b",
    "files",
    "download",
    "products",
    "item",
    "view",
    "u",
    "p",
    "en-us",
    "docs",
    "api",
    "v1",
    "search",
];
const QUERIES: &[&str] = &[
    "id=12345",
    "ref=home&lang=en",
    "session=ab12cd34ef",
    "q=cheap+flights",
    "utm_source=mail&utm_medium=link",
    "page=2",
    "redirect=https://example.com/next",
];

/// A canonical URL: (input with or without scheme, canonical key).
fn gen_canonical(r: &mut SplitMix64, url: &mut String, key: &mut String) {
    key.clear();
    url.clear();
    if r.chance(10) {
        // Canonical dotted quad.
        let ip = r.next() as u32 | 0x0100_0000;
        let o = ip.to_be_bytes();
        key.push_str(&format!("{}.{}.{}.{}", o[0], o[1], o[2], o[3]));
    } else {
        for _ in 0..r.below(3) {
            key.push_str(r.pick(SUBS));
            key.push('.');
        }
        key.push_str(r.pick(WORDS));
        if r.chance(30) {
            key.push('-');
            key.push_str(r.pick(WORDS));
        }
        key.push('.');
        key.push_str(r.pick(TLDS));
    }
    key.push('/');
    let nseg = r.below(5);
    for i in 0..nseg {
        key.push_str(r.pick(SEGS));
        if i + 1 < nseg || r.chance(30) {
            key.push('/');
        }
    }
    if r.chance(30) {
        key.push('?');
        key.push_str(r.pick(QUERIES));
    }
    match r.below(10) {
        0..=5 => url.push_str("http://"),
        6..=8 => url.push_str("https://"),
        _ => {}
    }
    url.push_str(key);
}

/// Percent-encode some unreserved characters of `s` (decoding restores them).
fn percent_some(r: &mut SplitMix64, s: &str, out: &mut String) {
    for c in s.chars() {
        if c.is_ascii_alphanumeric() && r.chance(25) {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
}

/// A messy URL whose canonical key is `key`, or an invalid URL (returns false).
fn gen_messy(r: &mut SplitMix64, url: &mut String, key: &mut String) -> bool {
    let mut base = String::new();
    gen_canonical(r, &mut base, key);
    url.clear();
    if r.chance(2) {
        // Invalid: no host / bad IPv6 / bad port.
        url.push_str(r.pick(&[
            "http:///nohost/x",
            "http://[::g]/",
            "http://evil.com:99999/",
            "   ",
            "http://#frag",
        ]));
        key.clear();
        return false;
    }
    let orig = key.clone();
    let slash = orig.find('/').unwrap_or(orig.len());
    let (host, rest) = orig.split_at(slash);
    let (path, query) = match rest.find('?') {
        Some(q) => (&rest[..q], Some(&rest[q..])),
        None => (rest, None),
    };
    let is_ip = host.bytes().all(|b| b.is_ascii_digit() || b == b'.');

    if r.chance(20) {
        url.push_str(" \t");
    }
    url.push_str(r.pick(&["HTTP://", "Http://", "https://", "HTTPS://", "http://", ""]));
    if r.chance(10) {
        url.push_str("user:secret@");
    }
    // Host spelling.
    if is_ip && r.chance(70) {
        let mut ip: u32 = 0;
        for p in host.split('.') {
            ip = (ip << 8) | p.parse::<u32>().unwrap_or(0);
        }
        match r.below(3) {
            0 => url.push_str(&ip.to_string()),
            1 => url.push_str(&format!("0x{ip:08X}")),
            _ => {
                let o = ip.to_be_bytes();
                url.push_str(&format!("0{:o}.0x{:x}.{}.{}", o[0], o[1], o[2], o[3]));
            }
        }
    } else if !is_ip && r.chance(8) {
        // IDN: replace the host with a Unicode name whose Punycode we know.
        let (uni, puny) = [
            ("Bücher.example", "xn--bcher-kva.example"),
            ("MÜNCHEN.de", "xn--mnchen-3ya.de"),
            ("пример.рф", "xn--e1afmkfd.xn--p1ai"),
            ("例え.テスト", "xn--r8jz45g.xn--zckzah"),
        ][r.below(4)];
        // Rewrite the expected key's host.
        let new_key = format!("{puny}{rest}");
        *key = new_key;
        url.push_str(uni);
    } else {
        if r.chance(10) {
            url.push('.');
        }
        for c in host.chars() {
            if r.chance(30) {
                url.push(c.to_ascii_uppercase());
            } else {
                url.push(c);
            }
        }
        if r.chance(15) {
            url.push_str("..");
        }
    }
    if r.chance(25) {
        url.push_str(r.pick(&[":80", ":443", ":8080", ":0"]));
    }
    // Path with noise that resolves away.
    let key_path = path.to_string();
    if key_path == "/" && query.is_none() && r.chance(30) {
        // Missing path entirely.
    } else {
        let segs: Vec<&str> = key_path.split('/').collect();
        for (i, s) in segs.iter().enumerate() {
            if i == 0 {
                url.push('/');
                continue;
            }
            if r.chance(15) {
                url.push_str("./");
            }
            if r.chance(10) {
                url.push_str("junk/../");
            }
            if r.chance(10) {
                url.push('/');
            }
            if r.chance(20) {
                percent_some(r, s, url);
            } else {
                url.push_str(s);
            }
            if i + 1 < segs.len() {
                url.push('/');
            }
        }
    }
    if let Some(q) = query {
        url.push_str(q);
    }
    if r.chance(30) {
        url.push_str(r.pick(&["#top", "#section-2", "#", "#a/../b"]));
    }
    if r.chance(10) {
        url.push('\n');
    }
    true
}

/// Inputs in one contiguous buffer.
struct Corpus {
    data: Vec<u8>,
    ranges: Vec<(u32, u32)>,
}

impl Corpus {
    fn new() -> Self {
        Corpus {
            data: Vec::new(),
            ranges: Vec::new(),
        }
    }
    fn push(&mut self, s: &[u8]) {
        let start = self.data.len() as u32;
        self.data.extend_from_slice(s);
        self.ranges.push((start, self.data.len() as u32));
    }
    fn get(&self, i: usize) -> &[u8] {
        let (a, b) = self.ranges[i];
        &self.data[a as usize..b as usize]
    }
    fn len(&self) -> usize {
        self.ranges.len()
    }
}

struct Totals {
    ok: usize,
    err: usize,
    bytes: usize,
}

/// On-CPU time of the current thread in ns (Linux schedstat), so numbers
/// stay meaningful on a shared machine. `None` elsewhere.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Measures `f` over `n` items: (CPU ns/item, wall ns/item).
fn timed(n: usize, f: impl FnOnce()) -> (f64, f64) {
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    f();
    let wall = start.elapsed().as_nanos() as f64 / n as f64;
    let cpu = match (cpu0, thread_cpu_ns()) {
        (Some(a), Some(b)) => b.saturating_sub(a) as f64 / n as f64,
        _ => wall,
    };
    (cpu, wall)
}

fn run_once(c: &Corpus, order: &[u32]) -> ((f64, f64), Totals) {
    let mut t = Totals {
        ok: 0,
        err: 0,
        bytes: 0,
    };
    let ns = timed(order.len(), || {
        for &i in order {
            match canonical_key(black_box(c.get(i as usize))) {
                Ok(k) => {
                    t.ok += 1;
                    t.bytes += k.len();
                }
                Err(_) => t.err += 1,
            }
        }
    });
    (ns, t)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> ExitCode {
    let total: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let reps = 5;

    let mut r = SplitMix64(0xB100_6A7E_2024_0001);
    let mut corpus = Corpus::new();
    let mut expected = Corpus::new(); // expected key per input ("" for invalid)
    let mut is_messy = Vec::with_capacity(total);
    let (mut url, mut key) = (String::new(), String::new());
    let mut expected_errors = 0usize;
    // Interleave deterministically: every 5th URL is messy.
    for i in 0..total {
        let messy = i % 5 == 4;
        if messy {
            if !gen_messy(&mut r, &mut url, &mut key) {
                expected_errors += 1;
            }
        } else {
            gen_canonical(&mut r, &mut url, &mut key);
        }
        corpus.push(url.as_bytes());
        expected.push(key.as_bytes());
        is_messy.push(messy);
    }
    let canon_idx: Vec<u32> = (0..total as u32)
        .filter(|&i| !is_messy[i as usize])
        .collect();
    let messy_idx: Vec<u32> = (0..total as u32)
        .filter(|&i| is_messy[i as usize])
        .collect();
    let mix_idx: Vec<u32> = (0..total as u32).collect();

    // Verify every answer first.
    let mut wrong = 0usize;
    let mut borrowed = 0usize;
    for i in 0..corpus.len() {
        let want = expected.get(i);
        match canonical_key(corpus.get(i)) {
            Ok(k) => {
                if matches!(k, std::borrow::Cow::Borrowed(_)) {
                    borrowed += 1;
                }
                if &*k != want {
                    wrong += 1;
                    if wrong <= 5 {
                        eprintln!(
                            "MISMATCH: input {:?}\n  got  {:?}\n  want {:?}",
                            String::from_utf8_lossy(corpus.get(i)),
                            String::from_utf8_lossy(&k),
                            String::from_utf8_lossy(want)
                        );
                    }
                }
            }
            Err(e) => {
                if !want.is_empty() {
                    wrong += 1;
                    if wrong <= 5 {
                        eprintln!(
                            "UNEXPECTED ERROR {e}: input {:?}",
                            String::from_utf8_lossy(corpus.get(i))
                        );
                    }
                }
            }
        }
    }
    if wrong > 0 {
        eprintln!("FAIL: {wrong} wrong answers out of {}", corpus.len());
        return ExitCode::FAILURE;
    }
    let canon_fast = canon_idx
        .iter()
        .filter(|&&i| {
            matches!(
                canonical_key(corpus.get(i as usize)),
                Ok(std::borrow::Cow::Borrowed(_))
            )
        })
        .count();
    if canon_fast != canon_idx.len() {
        eprintln!(
            "FAIL: only {canon_fast}/{} canonical URLs took the fast path",
            canon_idx.len()
        );
        return ExitCode::FAILURE;
    }

    let avg_len = corpus.data.len() as f64 / corpus.len() as f64;
    println!(
        "url_canon: {} URLs ({} canonical, {} messy incl. {} invalid), avg {:.1} bytes, {} reps, all answers verified, fast path {:.1}%",
        total,
        canon_idx.len(),
        messy_idx.len(),
        expected_errors,
        avg_len,
        reps,
        100.0 * borrowed as f64 / total as f64
    );
    println!();
    println!("| set | URLs | median CPU ns/URL | URLs/s per core | median wall ns/URL |");
    println!("|---|---:|---:|---:|---:|");
    for (name, idx, errs) in [
        ("canonical (fast path)", &canon_idx, 0usize),
        ("messy (full algorithm)", &messy_idx, expected_errors),
        ("mix 80/20", &mix_idx, expected_errors),
    ] {
        let (mut cpu, mut wall) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
        for _ in 0..reps {
            let ((c, w), t) = run_once(&corpus, idx);
            if t.err != errs || t.ok != idx.len() - errs {
                eprintln!(
                    "FAIL: {name}: {} ok / {} errors, expected {errs} errors",
                    t.ok, t.err
                );
                return ExitCode::FAILURE;
            }
            black_box(t.bytes);
            cpu.push(c);
            wall.push(w);
        }
        let (med, medw) = (median(cpu), median(wall));
        println!(
            "| {name} | {} | {med:.1} | {:.2} M | {medw:.1} |",
            idx.len(),
            1e3 / med
        );
    }

    // The URL shape of the CLI benchmark (crates/bench/run-cli-bench.sh), all
    // canonical: what `bloomgate build --keys url` canonicalizes per line there.
    let mut cli = Corpus::new();
    for i in 0..total as u64 {
        let url = format!(
            "http://host{}.example/path/{i}",
            (i * 2_654_435_761) % 1_000_003
        );
        cli.push(url.as_bytes());
    }
    for i in 0..cli.len() {
        let url = cli.get(i);
        if !matches!(canonical_key(url), Ok(std::borrow::Cow::Borrowed(k)) if k == &url[7..]) {
            eprintln!(
                "FAIL: CLI-shaped URL {:?} not returned borrowed without its scheme",
                String::from_utf8_lossy(url)
            );
            return ExitCode::FAILURE;
        }
    }
    let cli_idx: Vec<u32> = (0..cli.len() as u32).collect();
    let (mut cpu, mut wall) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let ((c, w), t) = run_once(&cli, &cli_idx);
        if t.err != 0 || t.ok != cli_idx.len() {
            eprintln!("FAIL: CLI-shaped URLs: {} ok / {} errors", t.ok, t.err);
            return ExitCode::FAILURE;
        }
        black_box(t.bytes);
        cpu.push(c);
        wall.push(w);
    }
    let (med, medw) = (median(cpu), median(wall));
    println!(
        "| CLI-bench shape `http://host<h>.example/path/<i>` (fast path) | {} | {med:.1} | {:.2} M | {medw:.1} |",
        cli_idx.len(),
        1e3 / med
    );

    // Bonus row: the url+prefix query path (canonical key + up to 30 expressions).
    let sub: Vec<u32> = mix_idx.iter().copied().take(200_000).collect();
    let mut out = Vec::new();
    let (mut cpu, mut wall) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let mut n_keys = 0usize;
        let (c, w) = timed(sub.len(), || {
            for &i in &sub {
                if query_keys(
                    KeyKind::Url,
                    MatchMode::Prefix,
                    corpus.get(i as usize),
                    &mut out,
                )
                .is_ok()
                {
                    n_keys += out.len();
                }
            }
        });
        black_box(n_keys);
        cpu.push(c);
        wall.push(w);
    }
    let (med, medw) = (median(cpu), median(wall));
    println!(
        "| mix, `query_keys(url, prefix)` (≤ 30 expressions) | {} | {med:.1} | {:.2} M | {medw:.1} |",
        sub.len(),
        1e3 / med
    );
    ExitCode::SUCCESS
}
