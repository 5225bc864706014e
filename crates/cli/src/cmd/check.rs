//! `bloomgate check`: which input lines are (probably) on the blacklist.

use std::io::Write;

use anyhow::Result;
use serde_json::json;

use bloomgate_blacklist::CheckScratch;

use crate::args::CheckArgs;
use crate::input::{self, Progress};

#[derive(Clone, Copy, PartialEq)]
enum Output {
    Lines,
    Count,
    Json,
}

struct ChunkOut {
    text: Vec<u8>,
    hits: u64,
    errors: Vec<(u64, String)>,
}

pub fn run(a: CheckArgs) -> Result<i32> {
    if a.verify {
        crate::cmd::verify_files(&a.filter)?;
    }
    let list = crate::cmd::open_read(&a.filter, a.snapshot_only)?;
    crate::cmd::check_kind(&a.filter, &list, a.keys, a.match_mode)?;
    let output = if a.count {
        Output::Count
    } else if a.json {
        Output::Json
    } else {
        Output::Lines
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut hits = 0u64;
    let mut failed = 0u64;
    let names = a.inputs.clone();
    input::process(
        a.inputs.clone(),
        Progress::default(),
        |chunk| {
            let mut r = ChunkOut {
                text: Vec::new(),
                hits: 0,
                errors: Vec::new(),
            };
            let mut lines = Vec::new();
            chunk.for_each_line(|line_no, line| match line {
                Ok(l) => lines.push((line_no, l)),
                Err(reason) => r.errors.push((line_no, reason)),
            });
            // All lookups of the chunk (~4 MiB of input) in one pipelined
            // batch (see Blacklist::check_many), then the answers in order.
            let mut verdicts = Vec::new();
            list.check_many(
                lines.iter().map(|&(_, l)| l),
                &mut CheckScratch::default(),
                &mut verdicts,
            );
            for (&(line_no, line), verdict) in lines.iter().zip(verdicts) {
                match verdict {
                    Ok(v) => {
                        r.hits += v.hit as u64;
                        match output {
                            Output::Lines if v.hit => {
                                r.text.extend_from_slice(line);
                                r.text.push(b'\n');
                            }
                            Output::Json => {
                                let j = json!({
                                    "item": String::from_utf8_lossy(line),
                                    "hit": v.hit,
                                    "whitelisted": v.whitelisted,
                                    "matched": v.matched,
                                });
                                r.text.extend_from_slice(j.to_string().as_bytes());
                                r.text.push(b'\n');
                            }
                            _ => {}
                        }
                    }
                    Err(e) => {
                        if output == Output::Json {
                            let j = json!({
                                "item": String::from_utf8_lossy(line),
                                "hit": false,
                                "error": e.to_string(),
                            });
                            r.text.extend_from_slice(j.to_string().as_bytes());
                            r.text.push(b'\n');
                        }
                        r.errors.push((line_no, e.to_string()));
                    }
                }
            }
            r
        },
        |chunk, r| {
            hits += r.hits;
            let mut errors = r.errors;
            errors.sort_by_key(|(l, _)| *l);
            for (line, reason) in errors {
                failed += 1;
                if failed <= 10 {
                    eprintln!(
                        "bloomgate: {}:{line}: invalid {} query: {reason}",
                        names[chunk.input],
                        list.kind()
                    );
                }
            }
            out.write_all(&r.text)?;
            Ok(())
        },
    )?;
    if output == Output::Count {
        writeln!(out, "{hits}")?;
    }
    out.flush()?;
    if failed > 10 {
        eprintln!("bloomgate: ... and {} more invalid queries", failed - 10);
    }
    Ok(if failed > 0 { 1 } else { 0 })
}
