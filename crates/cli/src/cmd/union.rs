//! `bloomgate union A B -o C`.

use anyhow::{Context, Result};

use bloomgate_blacklist::Whitelist;
use bloomgate_engine::{Access, Filter};

use crate::args::UnionArgs;
use crate::report::thousands;

pub fn run(a: UnionArgs) -> Result<i32> {
    if !a.force && std::path::Path::new(&a.output).exists() {
        return Err(crate::cmd::UsageError(format!(
            "{}: already exists (use --force to overwrite)",
            a.output
        ))
        .into());
    }
    let fa = Filter::open(&a.a, Access::ReadOnly)?;
    let fb = Filter::open(&a.b, Access::ReadOnly)?;
    fa.check_compatible(&fb)
        .with_context(|| format!("cannot combine {} and {}", a.a, a.b))?;
    let mut out = Filter::create_file(&a.output, fa.params().clone())?;
    out.or_bytes_at(0, fa.as_bytes())?;
    out.set_items(fa.items());
    out.union_with(&fb)?;
    out.persist()?;
    // Whitelists are not merged: an item exempted in A may be a real entry of
    // B, and a union must never let a blacklisted item through.
    let wa = Whitelist::load(&Whitelist::path_for(a.a.as_ref()))?;
    let wb = Whitelist::load(&Whitelist::path_for(a.b.as_ref()))?;
    if !wa.is_empty() || !wb.is_empty() {
        eprintln!(
            "bloomgate: note: whitelists are not merged ({} + {} items); re-add the ones still needed with `bloomgate whitelist add {}`",
            wa.len(),
            wb.len(),
            a.output
        );
    }
    eprintln!(
        "wrote {}: ~{} items, predicted FP {:.3e}",
        a.output,
        thousands(out.items()),
        out.predicted_fp()
    );
    Ok(0)
}
