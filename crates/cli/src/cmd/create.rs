//! `bloomgate create`: an empty filter from a [`FilterSpec`], as a file or
//! in Redis.
//!
//! The arguments are translated into a [`FilterSpec`] (its defaults and
//! limits are the library's, the same as `build`, `dedup`, the HTTP API
//! and `BF.RESERVE`), which makes the filter: a file with its `.meta` when
//! it has a fill policy, saved atomically by [`Layers::save`]. A Redis
//! address gets the same file, made in a temporary directory and uploaded
//! as `bloomgate push` uploads it (blocked layout, one layer: fixed or
//! refuse).

use std::path::Path;

use anyhow::{Context, Result};

use bloomgate_blacklist::layers::{unix_now, FillPolicy, Layers, Purpose};
use bloomgate_blacklist::FilterSpec;
use bloomgate_engine::random_seed;

use crate::args::{CreateArgs, PurposeArg, PushArgs};
use crate::cmd::UsageError;
use crate::report::{self, bytes, thousands};

/// Runs `bloomgate create`.
pub fn run(a: CreateArgs) -> Result<i32> {
    let items = a.size.items.ok_or_else(|| {
        UsageError("create needs --items (how many entries the filter must hold)".into())
    })?;
    let purpose = match a.purpose {
        PurposeArg::Blacklist => Purpose::Blacklist,
        PurposeArg::Dedup => Purpose::Dedup,
    };
    let spec = FilterSpec {
        kind: a.keys.keys.into(),
        mode: a.keys.match_mode.into(),
        layout: a.layout.into(),
        fill: crate::cmd::dedup::policy_from(&a.policy, items, "fixed")?,
        purpose,
        ..FilterSpec::new(items, a.size.fp)
    };
    spec.validate().map_err(|e| UsageError(e.to_string()))?;
    let seed = a.seed.unwrap_or_else(random_seed);
    if crate::cmd::redis::is_address(&a.filter) {
        return to_redis(&a, &spec, seed);
    }
    let path = Path::new(&a.filter);
    if !a.force && path.exists() {
        return Err(UsageError(format!(
            "{}: already exists (use --force to replace it)",
            a.filter
        ))
        .into());
    }
    if a.force {
        // A stale fill policy or layers of the filter replaced would be
        // read with the new first layer.
        remove_policy_files(path)?;
    }
    let mut layers = make(&spec, seed)?;
    layers
        .save(path)
        .with_context(|| format!("{}: cannot write the new filter", a.filter))?;
    describe(&a.filter, &spec, &layers);
    Ok(0)
}

/// The new, empty filter of `spec`.
fn make(spec: &FilterSpec, seed: u64) -> Result<Layers> {
    spec.create(seed, unix_now())
        .map_err(|e| UsageError(e.to_string()).into())
}

/// Removes the `.meta` and `.layerN` files beside `base`.
fn remove_policy_files(base: &Path) -> Result<()> {
    use bloomgate_blacklist::layers::{layer_path, meta_path, MAX_LAYERS};
    for p in
        std::iter::once(meta_path(base)).chain((1..=2 * MAX_LAYERS).map(|i| layer_path(base, i)))
    {
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("{}: cannot remove", p.display())),
        }
    }
    Ok(())
}

/// Creates the filter in Redis: the same file, pushed.
fn to_redis(a: &CreateArgs, spec: &FilterSpec, seed: u64) -> Result<i32> {
    if !matches!(spec.fill, FillPolicy::Fixed | FillPolicy::Refuse) {
        return Err(UsageError(format!(
            "a filter stored in Redis has one layer that never grows or is replaced: --policy {} needs a file (or a server's data directory); use no --policy, or --policy refuse",
            spec.fill.name()
        ))
        .into());
    }
    if spec.layout != bloomgate_engine::Layout::Blocked {
        return Err(UsageError("only the blocked layout can be stored in Redis".into()).into());
    }
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let file = dir.path().join("new.bgf");
    let mut layers = make(spec, seed)?;
    layers.save(&file)?;
    describe(&a.filter, spec, &layers);
    crate::cmd::redis::push(PushArgs {
        file: file.to_string_lossy().into_owned(),
        address: a.filter.clone(),
        force: a.force,
        redis: a.redis.clone(),
    })
}

/// Says on stderr what was made.
fn describe(name: &str, spec: &FilterSpec, layers: &Layers) {
    let p = layers.layers[0].params();
    eprintln!(
        "created {name}: {} items, {}, {} keys ({} matching), {} layout, k = {}, policy {}; {}",
        thousands(spec.items),
        bytes(layers.bytes()),
        spec.kind,
        spec.mode,
        p.layout,
        p.k,
        spec.fill,
        report::rates(
            spec.kind,
            spec.mode,
            layers.predicted_fp(),
            layers.target_fp()
        )
    );
}
