//! `bloomgate union A B -o C`.

use anyhow::{bail, Context, Result};

use bloomgate_blacklist::Whitelist;
use bloomgate_engine::Filter;

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
    for path in [&a.a, &a.b] {
        crate::cmd::ribbon::refuse_static(path, "a union")?;
    }
    // Each input's file is read whole and checked against its data checksum
    // first: a union ORs every byte of both, so damaged data in either
    // would pass into a file whose own checksum then vouches for it. (The
    // check reads the files as they are; the union below also re-inserts a
    // served directory's live adds in memory, which the files' checksums do
    // not cover, so the two cannot share one read.)
    for path in [&a.a, &a.b] {
        crate::cmd::verify_files(path).with_context(|| {
            format!("{path}: refusing to combine a filter whose data fails its checksum")
        })?;
    }
    // Each input as a whole: every layer, and in a served data directory the
    // live adds its files lack (re-inserted in memory).
    let la = crate::cmd::open_read(&a.a, false)?;
    let lb = crate::cmd::open_read(&a.b, false)?;
    for (path, list) in [(&a.a, &la), (&a.b, &lb)] {
        let n = list.layers().layers.len();
        if n > 1 {
            bail!(
                "{path} has grown to {n} layers; union combines single-layer filters of the same size and seed: rebuild it with `bloomgate build --seed`"
            );
        }
    }
    let (fa, fb) = (la.filter(), lb.filter());
    fa.check_compatible(fb)
        .with_context(|| format!("cannot combine {} and {}", a.a, a.b))?;
    let mut out = Filter::create_file(&a.output, fa.params().clone())?;
    out.or_bytes_at(0, fa.as_bytes())?;
    out.set_items(fa.items());
    out.union_with(fb)?;
    out.persist()?;
    // What was written reads back whole and matches its checksum.
    Filter::open(&a.output, bloomgate_engine::Access::ReadOnly)
        .and_then(|f| f.verify())
        .with_context(|| format!("{}: the union just written fails to verify", a.output))?;
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
    let (na, nb) = (fa.items(), fb.items());
    let op = out.params();
    eprintln!(
        "wrote {}: ~{} items ({}), {}",
        a.output,
        thousands(out.items()),
        estimate_note(op.layout, op.bits, op.k, out.items(), na, nb),
        crate::report::rates(la.kind(), la.mode(), out.predicted_fp(), op.target_fp)
    );
    Ok(0)
}

/// How good the union's item count is: it is estimated from the bits set
/// (`−(m/k)·ln(1 − X/m)`), since which items the two inputs share is not
/// known. One standard error of that estimate for uniformly set bits is
/// `√(m/k²·(e^{kn/m} − 1 − kn/m))` (Swamidass & Baldi, 2007); the blocked
/// layout sets an item's k bits in one block, where they collide more
/// often than uniform bits (an item sets about `(k − 1)/1024` of a bit
/// fewer per bit in a 512-bit block), so its estimate runs low by up to
/// that fraction.
/// The inputs' counts bound the true one.
fn estimate_note(
    layout: bloomgate_engine::Layout,
    m_bits: u64,
    k: u32,
    n: u64,
    a: u64,
    b: u64,
) -> String {
    let (m, k, nf) = (m_bits as f64, f64::from(k.max(1)), n as f64);
    let x = k * nf / m;
    let sigma = (m / (k * k) * (x.exp() - 1.0 - x)).max(0.0).sqrt();
    format!(
        "an estimate from the bits set, not a count: one standard error is ±{}{}; the inputs held {} and {}, so the union holds between {} and {}",
        thousands(sigma.ceil() as u64),
        if layout == bloomgate_engine::Layout::Blocked {
            format!(
                ", and the blocked layout's estimate runs low by up to about {:.1} %",
                (k - 1.0) / 1024.0 * 100.0
            )
        } else {
            String::new()
        },
        thousands(a),
        thousands(b),
        thousands(a.max(b)),
        thousands(a.saturating_add(b))
    )
}
