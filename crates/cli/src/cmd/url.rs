//! `bloomgate url canon|expressions`.

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::os::unix::ffi::OsStrExt;

use anyhow::Result;

use crate::args::UrlCmd;

/// What to do with one URL: write its result lines, or say why not.
type Action = fn(&[u8], &mut dyn Write) -> Result<std::result::Result<(), String>>;

fn canon(url: &[u8], out: &mut dyn Write) -> Result<std::result::Result<(), String>> {
    Ok(match bloomgate_url::canonicalize(url) {
        Ok(c) => {
            writeln!(out, "{c}")?;
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    })
}

fn expressions(url: &[u8], out: &mut dyn Write) -> Result<std::result::Result<(), String>> {
    Ok(match bloomgate_url::expressions(url) {
        Ok(list) => {
            for e in list {
                writeln!(out, "{e}")?;
            }
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    })
}

pub fn run(c: UrlCmd) -> Result<i32> {
    let (urls, action): (Vec<OsString>, Action) = match c {
        UrlCmd::Canon { urls } => (urls, canon),
        UrlCmd::Expressions { urls } => (urls, expressions),
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut failed = 0u64;
    let mut one = |label: &dyn Fn() -> String, url: &[u8], out: &mut dyn Write| -> Result<()> {
        if let Err(e) = action(url, out)? {
            failed += 1;
            eprintln!(
                "bloomgate: {}: {:?}: {e}",
                label(),
                String::from_utf8_lossy(url)
            );
        }
        Ok(())
    };
    // Arguments are taken as bytes: URLs in the wild (and Safe Browsing's
    // own test cases) contain bytes that are not UTF-8.
    let stdin_only = [OsString::from("-")];
    let urls = if urls.is_empty() {
        &stdin_only[..]
    } else {
        &urls[..]
    };
    for (i, u) in urls.iter().enumerate() {
        if u != "-" {
            one(&|| format!("argument {}", i + 1), u.as_bytes(), &mut out)?;
            continue;
        }
        let stdin = std::io::stdin();
        let mut reader = stdin.lock();
        let mut line = Vec::new();
        let mut n = 0u64;
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            n += 1;
            let mut l = &line[..];
            if let [rest @ .., b'\n'] = l {
                l = rest;
            }
            if let [rest @ .., b'\r'] = l {
                l = rest;
            }
            one(&|| format!("line {n}"), l, &mut out)?;
        }
    }
    out.flush()?;
    Ok(if failed > 0 { 1 } else { 0 })
}
