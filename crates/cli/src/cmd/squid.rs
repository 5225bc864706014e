//! `bloomgate squid-helper`: Squid's `external_acl_type` or
//! `url_rewrite_program` helper over lists (the protocol and the answering
//! loop are `bloomgate_squid`'s; this module parses arguments and opens
//! the lists).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use bloomgate_squid::squidguard::{valid_name, SgCategory};
use bloomgate_squid::{Category, Helper, Kind, Options};

use crate::args::{BuildArgs, KeysArg, MatchArg, SquidHelperArgs};
use crate::cmd::UsageError;

/// A list argument's category and address.
fn category_of(arg: &str) -> (String, &str) {
    if let Some((name, address)) = arg.split_once('=') {
        if valid_name(name) && !address.is_empty() {
            return (name.to_string(), address);
        }
    }
    let last = arg.rsplit('/').next().unwrap_or(arg);
    let name = last.strip_suffix(".bgf").unwrap_or(last);
    (name.to_string(), arg)
}

/// Runs the helper until Squid closes its standard input.
pub fn run(a: SquidHelperArgs) -> Result<i32> {
    let mut categories = Vec::with_capacity(a.lists.len());
    for arg in &a.lists {
        let (name, address) = category_of(arg);
        let c = Category::open(&name, address).map_err(|e| {
            let usage = e.is_usage();
            let err = anyhow::Error::new(e).context(format!("opening list {address}"));
            if usage {
                UsageError(crate::report::one_line(&err)).into()
            } else {
                err
            }
        })?;
        categories.push(c);
    }
    let options = Options {
        kind: if a.redirect.is_some() {
            Kind::Rewrite
        } else {
            Kind::Acl
        },
        concurrency: a.concurrency,
        redirect: a.redirect.unwrap_or_default(),
    };
    // Standard input as a plain file (a duplicate of descriptor 0), so the
    // helper's own buffer is the only one and it sees every waiting line.
    use std::os::fd::AsFd;
    let stdin = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .context("standard input")?;
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr();
    let stats = Helper::new(categories, options)
        .run(std::fs::File::from(stdin), &mut stdout, &mut stderr)
        .context("answering Squid")?;
    eprintln!(
        "bloomgate squid-helper: standard input closed after {} requests ({} listed, {} BH)",
        stats.requests, stats.listed, stats.unknown
    );
    Ok(0)
}

/// `bloomgate build --squidguard DIR`: the categories of a squidGuard/UT1
/// directory as `url` filters in `prefix` mode, one per category in the
/// directory `-o` (`CATEGORY.bgf`), or one for all when `-o` ends in `.bgf`.
/// Each is an ordinary `build` of the category's entries (spooled to a
/// temporary file beside the output), sized by their count unless
/// `--items` is given for a single filter.
pub fn build_squidguard(mut a: BuildArgs, dir: &Path) -> Result<i32> {
    use bloomgate_squid::squidguard::{categories, write_entries};
    if a.inputs != ["-"] {
        return Err(
            UsageError("--squidguard reads its directory: give no input files".into()).into(),
        );
    }
    let cats = categories(dir).with_context(|| format!("reading {}", dir.display()))?;
    if cats.is_empty() {
        return Err(UsageError(format!(
            "{}: no category (no subdirectory with a domains or urls file)",
            dir.display()
        ))
        .into());
    }
    a.keys.keys = KeysArg::Url;
    a.keys.match_mode = MatchArg::Prefix;
    let one = a.output.ends_with(".bgf");
    let out_dir = if one {
        Path::new(&a.output)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    } else {
        std::fs::create_dir_all(&a.output).with_context(|| format!("creating {}", a.output))?;
        PathBuf::from(&a.output)
    };
    let spool_dir = a.tmp_dir.clone().unwrap_or_else(|| out_dir.clone());
    let spool = |cats: &[SgCategory]| -> Result<tempfile::NamedTempFile> {
        let mut t = tempfile::Builder::new()
            .prefix(".squidguard-")
            .suffix(".txt")
            .tempfile_in(&spool_dir)
            .with_context(|| format!("a temporary file in {}", spool_dir.display()))?;
        let mut w = std::io::BufWriter::new(t.as_file_mut());
        for c in cats {
            write_entries(c, &mut w)?;
        }
        w.flush()?;
        drop(w);
        Ok(t)
    };
    let build_one = |b: &BuildArgs, cats: &[SgCategory], output: String| -> Result<i32> {
        let entries = spool(cats)?;
        let mut b = b.clone();
        b.inputs = vec![entries.path().to_string_lossy().into_owned()];
        b.output = output;
        let names: Vec<&str> = cats.iter().map(|c| c.name.as_str()).collect();
        eprintln!("bloomgate build: {} -> {}", names.join(", "), b.output);
        super::build::build(b)
    };
    if one {
        return build_one(&a, &cats, a.output.clone());
    }
    if a.size.items.is_some() {
        return Err(UsageError(
            "--items sizes one filter: leave it out with --squidguard and -o DIR (each category is counted)".into(),
        )
        .into());
    }
    let mut code = 0;
    for c in &cats {
        let output = out_dir.join(format!("{}.bgf", c.name));
        code = code.max(build_one(
            &a,
            std::slice::from_ref(c),
            output.to_string_lossy().into_owned(),
        )?);
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::category_of;

    #[test]
    fn categories_come_from_the_name_or_the_file() {
        assert_eq!(category_of("adult=/x/a.bgf"), ("adult".into(), "/x/a.bgf"));
        assert_eq!(
            category_of("/x/gambling.bgf"),
            ("gambling".into(), "/x/gambling.bgf")
        );
        assert_eq!(
            category_of("redis://h:1/ads"),
            ("ads".into(), "redis://h:1/ads")
        );
        assert_eq!(category_of("/x/a=b/c.bgf"), ("c".into(), "/x/a=b/c.bgf"));
    }
}
