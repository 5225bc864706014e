//! squidGuard and UT1 blacklist directories, read as bloomgate entries.
//!
//! A squidGuard blacklist directory holds one subdirectory per category
//! (`adult/`, `gambling/`, …), each with up to two lists, one entry per
//! line, `#` starting a comment: `domains` (a domain blocks itself and
//! every subdomain) and `urls` (a host and path: blocks that page and
//! everything under it). The UT1 lists of the Université Toulouse
//! Capitole use the same shape.
//!
//! Both translate into one `url` filter in `prefix` mode (Safe Browsing
//! expressions: a query is looked up as its host suffixes times its path
//! prefixes): a domain `evil.example` becomes the entry `evil.example/`,
//! which matches every URL on that host and its subdomains; a URL entry
//! `evil.example/phish` is kept as it is (that page) and also as
//! `evil.example/phish/` (everything under it), as squidGuard matches it.
//! A leading `.` (`.evil.example`, found in some lists) is dropped, as is
//! a trailing `\r`. What remains invalid is left to `build`, which names
//! it and skips it.

use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

/// One category of a squidGuard directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SgCategory {
    /// The subdirectory's name.
    pub name: String,
    /// Its `domains` file, when there is one.
    pub domains: Option<PathBuf>,
    /// Its `urls` file, when there is one.
    pub urls: Option<PathBuf>,
}

/// The categories of directory `dir`, sorted by name: every subdirectory
/// with a `domains` or `urls` file. A category name is kept only when it
/// is a plain name (letters, digits, `.`, `_`, `-`), since it becomes a
/// file name and a `tag=` value; others are an error.
pub fn categories(dir: &Path) -> io::Result<Vec<SgCategory>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let path = entry.path();
        let file = |name: &str| Some(path.join(name)).filter(|p| p.is_file());
        let (domains, urls) = (file("domains"), file("urls"));
        if domains.is_none() && urls.is_none() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if !valid_name(&name) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: a category name must be letters, digits, '.', '_' or '-'",
                    path.display()
                ),
            ));
        }
        out.push(SgCategory {
            name,
            domains,
            urls,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Whether `name` can be a category (a file name and a `tag=` value).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Which list a line comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A `domains` file.
    Domains,
    /// A `urls` file.
    Urls,
}

/// Appends the entries of one list line to `out` (one per line; none for
/// an empty line or a comment).
pub fn entries(line: &[u8], source: Source, out: &mut Vec<u8>) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = match line.iter().position(|&b| b == b'#') {
        Some(i) => &line[..i],
        None => line,
    };
    let line = line.trim_ascii();
    let line = line.strip_prefix(b".").unwrap_or(line);
    if line.is_empty() {
        return;
    }
    match source {
        Source::Domains => {
            out.extend_from_slice(line);
            if !line.ends_with(b"/") {
                out.push(b'/');
            }
            out.push(b'\n');
        }
        Source::Urls => {
            out.extend_from_slice(line);
            out.push(b'\n');
            if !line.ends_with(b"/") && !line.contains(&b'?') {
                out.extend_from_slice(line);
                out.extend_from_slice(b"/\n");
            }
        }
    }
}

/// Writes the entries of category `c` to `out`; returns the lines read.
pub fn write_entries(c: &SgCategory, out: &mut dyn Write) -> io::Result<u64> {
    let mut lines = 0;
    let mut buf = Vec::with_capacity(1 << 16);
    for (path, source) in [(&c.domains, Source::Domains), (&c.urls, Source::Urls)] {
        let Some(path) = path else { continue };
        let file = std::fs::File::open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let mut r = io::BufReader::with_capacity(1 << 16, file);
        let mut line = Vec::new();
        loop {
            line.clear();
            if r.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            lines += 1;
            let l = line.strip_suffix(b"\n").unwrap_or(&line);
            entries(l, source, &mut buf);
            if buf.len() >= 1 << 16 {
                out.write_all(&buf)?;
                buf.clear();
            }
        }
    }
    out.write_all(&buf)?;
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(line: &str, s: Source) -> String {
        let mut out = Vec::new();
        entries(line.as_bytes(), s, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lines_become_prefix_entries() {
        assert_eq!(conv("evil.example", Source::Domains), "evil.example/\n");
        assert_eq!(conv(".evil.example\r", Source::Domains), "evil.example/\n");
        assert_eq!(conv("# a comment", Source::Domains), "");
        assert_eq!(conv("   ", Source::Urls), "");
        assert_eq!(
            conv("evil.example/phish # seen 2024", Source::Urls),
            "evil.example/phish\nevil.example/phish/\n"
        );
        assert_eq!(
            conv("evil.example/dir/", Source::Urls),
            "evil.example/dir/\n"
        );
    }

    #[test]
    fn names_are_plain() {
        assert!(valid_name("adult") && valid_name("ads_2.x-y"));
        assert!(
            !valid_name("") && !valid_name(".hidden") && !valid_name("a b") && !valid_name("a/b")
        );
    }
}
