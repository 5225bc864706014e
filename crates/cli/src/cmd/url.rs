//! `bloomgate url canon|expressions`.

use std::io::{BufRead, Write};

use anyhow::Result;

use crate::args::UrlCmd;

pub fn run(c: UrlCmd) -> Result<i32> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut failed = 0u64;
    match c {
        UrlCmd::Canon { urls } => {
            let mut one = |n: u64, input: &[u8], out: &mut dyn Write| -> Result<()> {
                match bloomgate_url::canonicalize(input) {
                    Ok(c) => writeln!(out, "{c}")?,
                    Err(e) => {
                        failed += 1;
                        eprintln!(
                            "bloomgate: line {n}: {:?}: {e}",
                            String::from_utf8_lossy(input)
                        );
                    }
                }
                Ok(())
            };
            if urls.is_empty() {
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
                    one(n, l, &mut out)?;
                }
            } else {
                for (i, u) in urls.iter().enumerate() {
                    one(i as u64 + 1, u.as_bytes(), &mut out)?;
                }
            }
        }
        UrlCmd::Expressions { urls } => {
            for (i, u) in urls.iter().enumerate() {
                match bloomgate_url::expressions(u.as_bytes()) {
                    Ok(list) => {
                        for e in list {
                            writeln!(out, "{e}")?;
                        }
                    }
                    Err(e) => {
                        failed += 1;
                        eprintln!("bloomgate: argument {}: {u:?}: {e}", i + 1);
                    }
                }
            }
        }
    }
    out.flush()?;
    Ok(if failed > 0 { 1 } else { 0 })
}
