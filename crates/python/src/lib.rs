//! `bloomgate._core`: the native half of the `bloomgate` Python package.
//!
//! A thin layer over the library's [`bloomgate_list::List`] and the
//! planners and makers the CLI uses ([`FilterSpec`], [`TablePlan`],
//! `bloomgate_redis::push`): it converts Python items to bytes (one rule,
//! `items`), library errors to Python exceptions (`errors`), and releases
//! the GIL while the library works (`list`). It holds no filter logic of
//! its own. The pure-Python half (`python/bloomgate/`) re-exports these
//! names, adds the type stubs and the Scrapy duplicate filter.
//!
//! Built by maturin (`crates/python/pyproject.toml`), which turns on the
//! `extension-module` feature; cargo's own builds of the workspace leave it
//! off and link libpython as an ordinary library.

mod errors;
mod items;
mod list;

use std::path::Path;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use bloomgate_blacklist::cf_file::CfLayout;
use bloomgate_blacklist::layers::unix_now;
use bloomgate_blacklist::layers::Layers;
use bloomgate_blacklist::{DeletableSpec, FilterSpec};
use bloomgate_engine::format::DeletableKind;
use bloomgate_engine::math;
use bloomgate_engine::ribbon::{self, RibbonSpec};
use bloomgate_engine::{random_seed, Layout, Params};
use bloomgate_list::{List as Inner, OpenOptions, TablePlan};
use bloomgate_url::{max_lookups, KeyKind, MatchMode};

use errors::{list_err, other_err, redis_err, Exists, InvalidItem};
use items::Packed;
use list::List;

/// Items handed to the library per batch while building.
const BATCH: usize = 1 << 16;

/// Opens a list: a `.bgf` file of any layout (memory-mapped), one in a
/// data directory served by `bloomgate serve` (its live adds included), or
/// `redis://HOST:PORT/NAME` / `redis+cluster://HOST:PORT[,…]/NAME`.
#[pyfunction]
#[pyo3(signature = (address, *, update = false, verify = false, snapshot_only = false, password_file = None))]
fn open(
    py: Python<'_>,
    address: &str,
    update: bool,
    verify: bool,
    snapshot_only: bool,
    password_file: Option<std::path::PathBuf>,
) -> PyResult<List> {
    let redis = bloomgate_redis::is_redis_address(address);
    let options = OpenOptions {
        snapshot_only,
        verify,
        password_file,
        lock: false,
        // A list in Redis takes changes in any case.
        update: update && !redis,
        served: false,
        in_memory: false,
    };
    py.detach(|| List::open(address, &options))
        .map_err(list_err)
}

fn parse_kind(keys: &str) -> PyResult<KeyKind> {
    keys.parse()
        .map_err(|e| PyValueError::new_err(format!("keys={keys:?}: {e}")))
}

fn parse_mode(mode: &str) -> PyResult<MatchMode> {
    mode.parse()
        .map_err(|e| PyValueError::new_err(format!("match={mode:?}: {e}")))
}

/// The layout asked for: a Bloom layout, a deletable table, or the static
/// ribbon (built whole from its entries: `build` only).
enum Shape {
    Bloom(Layout),
    Table(DeletableKind),
    Ribbon,
}

fn parse_layout(layout: &str) -> PyResult<Shape> {
    Ok(match layout {
        "blocked" => Shape::Bloom(Layout::Blocked),
        "classic" => Shape::Bloom(Layout::Classic),
        "counting" => Shape::Table(DeletableKind::Counting),
        "cuckoo" => Shape::Table(DeletableKind::Cuckoo),
        "ribbon" => Shape::Ribbon,
        other => {
            return Err(PyValueError::new_err(format!(
                "layout={other:?}: one of \"blocked\", \"classic\", \"counting\", \"cuckoo\", \"ribbon\""
            )))
        }
    })
}

/// What a new filter is: its size, rate, key rules and layout.
struct New {
    items: u64,
    fp: f64,
    kind: KeyKind,
    mode: MatchMode,
    shape: Shape,
    seed: u64,
}

impl New {
    /// Writes the new, empty filter file at `path`.
    fn make_file(&self, path: &str) -> PyResult<()> {
        match self.shape {
            Shape::Bloom(layout) => {
                let spec = FilterSpec {
                    kind: self.kind,
                    mode: self.mode,
                    layout,
                    ..FilterSpec::new(self.items, self.fp)
                };
                spec.validate()
                    .map_err(|e| PyValueError::new_err(e.to_string()))?;
                let mut layers = if layout == Layout::Classic {
                    // The least classic filter that meets the rate (the
                    // CLI's classic plan rounds up to whole bits per item).
                    let (n, rate) = spec.layer_rate();
                    let plan = math::plan_classic_least(n, rate)
                        .map_err(|e| PyValueError::new_err(e.to_string()))?;
                    let mut params = Params::from_plan(&plan, self.seed);
                    params.key_kind = self.kind.as_u8();
                    params.match_mode = self.mode.as_u8();
                    Layers::create(params, &spec.fill, spec.purpose, spec.lookup_rate(), unix_now())
                } else {
                    spec.create(self.seed, unix_now())
                }
                .map_err(|e| other_err(&e))?;
                layers.save(Path::new(path)).map_err(|e| other_err(&e))
            }
            Shape::Ribbon => Err(PyValueError::new_err(
                "a ribbon list is static: build it from its entries (bloomgate.build(..., layout=\"ribbon\"))",
            )),
            Shape::Table(which) => {
                let spec = DeletableSpec::for_build(
                    CfLayout::of(which),
                    self.items,
                    self.fp,
                    self.kind,
                    self.mode,
                );
                let plan = TablePlan::new(&spec, self.seed)
                    .map_err(|e| PyValueError::new_err(e.to_string()))?;
                let filter = plan.create().map_err(|e| other_err(&e))?;
                let mut list = Inner::from_table(filter, path).map_err(list_err)?;
                list.save().map_err(list_err)
            }
        }
    }

    /// Makes the filter at `address`: a file, or one pushed to Redis (the
    /// same file, made in a temporary directory, as `bloomgate create`).
    fn make(&self, address: &str, replace: bool) -> PyResult<()> {
        if !bloomgate_redis::is_redis_address(address) {
            if !replace && Path::new(address).exists() {
                return Err(Exists::new_err(format!("{address}: already exists")));
            }
            return self.make_file(address);
        }
        if !matches!(self.shape, Shape::Bloom(Layout::Blocked)) {
            return Err(PyValueError::new_err(
                "only the blocked layout can be stored in Redis",
            ));
        }
        let addr = bloomgate_redis::Address::parse(address).map_err(redis_err)?;
        let dir = tempfile::tempdir().map_err(|e| other_err(&e))?;
        let file = dir.path().join("new.bgf");
        self.make_file(&file.to_string_lossy())?;
        bloomgate_redis::push(&file, &addr, replace, &|_| {}).map_err(redis_err)?;
        Ok(())
    }
}

/// Makes a new, empty list at `address` (a file, or a filter in Redis) for
/// `items` entries at false-positive rate `fp` per query. Raises `Exists`
/// if one is there, unless replace=True. A classic list is the least that
/// meets the rate (whole k; the CLI's classic plan rounds up to whole bits
/// per item); a ribbon list is made only by `build`.
#[pyfunction]
#[pyo3(signature = (address, items, fp = 1e-4, *, keys = "url", r#match = "exact", layout = "blocked", replace = false, seed = None))]
#[allow(clippy::too_many_arguments)]
fn create(
    py: Python<'_>,
    address: &str,
    items: u64,
    fp: f64,
    keys: &str,
    r#match: &str,
    layout: &str,
    replace: bool,
    seed: Option<u64>,
) -> PyResult<()> {
    let new = New {
        items,
        fp,
        kind: parse_kind(keys)?,
        mode: parse_mode(r#match)?,
        shape: parse_layout(layout)?,
        seed: seed.unwrap_or_else(random_seed),
    };
    py.detach(|| new.make(address, replace))
}

/// Builds a list file at `path` from an iterable of entries (str or
/// bytes), planned for `items` entries (default: len(entries), or all of
/// them counted) at `fp` per query. Returns how many entries were new.
/// Raises `Exists` if the file is there, unless replace=True; on an invalid
/// entry raises `InvalidItem` and removes the file. layout="ribbon" makes a
/// static list (no adds; about 13.8 bits per entry at 1e-4) from the
/// entries held in memory as 8-byte hashes.
#[pyfunction]
#[pyo3(signature = (path, entries, items = None, fp = 1e-4, *, keys = "url", r#match = "exact", layout = "blocked", replace = false, seed = None))]
#[allow(clippy::too_many_arguments)]
fn build(
    py: Python<'_>,
    path: &str,
    entries: &Bound<'_, PyAny>,
    items: Option<u64>,
    fp: f64,
    keys: &str,
    r#match: &str,
    layout: &str,
    replace: bool,
    seed: Option<u64>,
) -> PyResult<u64> {
    if bloomgate_redis::is_redis_address(path) {
        return Err(PyValueError::new_err(
            "build writes a file; for Redis, build a file and push it (bloomgate push), or create() and add_many()",
        ));
    }
    // Without a count, the entries are read first: one pass to size the
    // filter, as `bloomgate build` counts its inputs.
    let (items, buffered) = match items.or_else(|| entries.len().ok().map(|n| n as u64)) {
        Some(n) => (n, None),
        None => {
            let p = Packed::from_iter(entries)?;
            (p.len() as u64, Some(p))
        }
    };
    let new = New {
        items: items.max(1),
        fp,
        kind: parse_kind(keys)?,
        mode: parse_mode(r#match)?,
        shape: parse_layout(layout)?,
        seed: seed.unwrap_or_else(random_seed),
    };
    if matches!(new.shape, Shape::Ribbon) {
        if !replace && Path::new(path).exists() {
            return Err(Exists::new_err(format!("{path}: already exists")));
        }
        let result = build_ribbon(py, path, entries, buffered, &new);
        if result.is_err() {
            let _ = std::fs::remove_file(path);
        }
        return result;
    }
    py.detach(|| new.make(path, replace))?;
    let result = fill(py, path, entries, buffered);
    if result.is_err() {
        let _ = std::fs::remove_file(path);
    }
    result
}

/// Hands the entries to `each` a batch at a time: the batch `buffered`
/// already holds, or the iterable `entries` read [`BATCH`] items at a time.
fn in_batches(
    entries: &Bound<'_, PyAny>,
    buffered: Option<Packed>,
    mut each: impl FnMut(&Packed) -> PyResult<()>,
) -> PyResult<()> {
    if let Some(p) = buffered {
        return each(&p);
    }
    let mut p = Packed::default();
    for e in entries.try_iter()? {
        p.push(&e?)?;
        if p.len() == BATCH {
            each(&p)?;
            p.clear();
        }
    }
    each(&p)
}

/// Builds the static ribbon file at `path` from every entry: each
/// normalized and hashed (the engine's ribbon key hash) as it is read, the
/// filter solved from the hashes in memory (8 bytes per entry), as
/// `bloomgate build --layout ribbon` does. Returns the distinct keys.
fn build_ribbon(
    py: Python<'_>,
    path: &str,
    entries: &Bound<'_, PyAny>,
    buffered: Option<Packed>,
    new: &New,
) -> PyResult<u64> {
    let rate = bloomgate_blacklist::per_lookup_rate(new.kind, new.mode, new.fp);
    let mut spec = RibbonSpec::new(rate, new.seed);
    spec.key_kind = new.kind.as_u8();
    spec.match_mode = new.mode.as_u8();
    // Room for adds (a delta beside the file), as the CLI's build keeps.
    spec.reserve = bloomgate_engine::math::RIBBON_DELTA_SHARE;
    let mut hashes: Vec<u64> = Vec::new();
    let hash = |py: Python<'_>, p: &Packed, hashes: &mut Vec<u64>| -> PyResult<()> {
        let seen = hashes.len();
        py.detach(|| {
            for (i, e) in p.items().into_iter().enumerate() {
                let k = bloomgate_url::entry_key(new.kind, new.mode, e)
                    .map_err(|err| InvalidItem::new_err(format!("entry {}: {err}", seen + i)))?;
                hashes.push(ribbon::key_hash(new.seed, &k));
            }
            Ok(())
        })
    };
    in_batches(entries, buffered, |p| hash(py, p, &mut hashes))?;
    let planned = hashes.len() as u64;
    let header = py
        .detach(|| ribbon::build(Path::new(path), &spec, planned, hashes))
        .map_err(|e| other_err(&e))?;
    Ok(header.items)
}

/// Adds the entries to the new file at `path` and saves it.
fn fill(
    py: Python<'_>,
    path: &str,
    entries: &Bound<'_, PyAny>,
    buffered: Option<Packed>,
) -> PyResult<u64> {
    let options = OpenOptions {
        update: true,
        ..OpenOptions::default()
    };
    let mut list = py
        .detach(|| Inner::open_with(path, &options))
        .map_err(list_err)?;
    let mut new = 0u64;
    let mut seen = 0usize;
    let mut add = |py: Python<'_>, p: &Packed, list: &mut Inner| -> PyResult<()> {
        py.detach(|| {
            let mut keys = Vec::with_capacity(p.len());
            for (i, e) in p.items().into_iter().enumerate() {
                let k = list.entry_key(e).map_err(|err| {
                    InvalidItem::new_err(format!("entry {}: {}", seen + i, errors::one_line(&err)))
                })?;
                keys.push(k.into_owned());
            }
            let claims = list.add_keys(&keys);
            if let Some(e) = claims.error {
                return Err(list_err(e));
            }
            new += claims
                .outcomes
                .iter()
                .filter(|&&c| c == bloomgate_list::Claim::New)
                .count() as u64;
            seen += p.len();
            Ok(())
        })
    };
    in_batches(entries, buffered, |p| add(py, p, &mut list))?;
    py.detach(|| list.save()).map_err(list_err)?;
    Ok(new)
}

/// The sizes of a filter for `items` entries at `fp` per query: both Bloom
/// layouts, the counting and cuckoo tables, and the classic optimum, as
/// `bloomgate plan --json` computes them, except that the classic row is
/// the classic list this package makes (the least that meets the rate).
#[pyfunction]
#[pyo3(signature = (items, fp = 1e-4, *, keys = "raw", r#match = "exact"))]
fn plan<'py>(
    py: Python<'py>,
    items: u64,
    fp: f64,
    keys: &str,
    r#match: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let kind = parse_kind(keys)?;
    let mode = parse_mode(r#match)?;
    let lookups = max_lookups(kind, mode);
    let per_lookup = math::per_lookup_rate(fp, lookups);
    let bad = |e: bloomgate_engine::PlanError| PyValueError::new_err(e.to_string());
    let per_query = |p: f64| 1.0 - (1.0 - p).powi(lookups as i32);
    let mut layouts = Vec::new();
    for layout in [Layout::Blocked, Layout::Classic] {
        // The classic row is the classic filter this package makes: the
        // least that meets the rate.
        let pl = match layout {
            Layout::Classic => math::plan_classic_least(items, per_lookup),
            _ => math::plan(layout, items, per_lookup),
        }
        .map_err(bad)?;
        layouts.push(serde_json::json!({
            "layout": pl.layout.name(),
            "bits": pl.bits,
            "bytes": pl.bytes(),
            "bits_per_item": pl.bits_per_item(),
            "k": pl.k,
            "predicted_fp": pl.predicted_fp,
            "predicted_fp_per_query": per_query(pl.predicted_fp),
        }));
    }
    let c = math::plan_counting(items, per_lookup).map_err(bad)?;
    layouts.push(serde_json::json!({
        "layout": "counting",
        "bytes": c.bytes(),
        "bits_per_item": c.bytes() as f64 * 8.0 / items as f64,
    }));
    let k = math::plan_cuckoo(items, per_lookup, math::CUCKOO_DEFAULT_BUCKET_SIZE).map_err(bad)?;
    layouts.push(serde_json::json!({
        "layout": "cuckoo",
        "bytes": k.bytes(),
        "bits_per_item": k.bytes() as f64 * 8.0 / items as f64,
    }));
    let (opt_bpi, opt_k) = math::classic_optimum(per_lookup);
    let out = serde_json::json!({
        "items": items,
        "target_fp": fp,
        "key_kind": kind.to_string(),
        "match_mode": mode.to_string(),
        "lookups_per_query": lookups,
        "per_lookup_fp": per_lookup,
        "classic_optimum": {"bits_per_item": opt_bpi, "k": opt_k, "bytes": opt_bpi * items as f64 / 8.0},
        "layouts": layouts,
    });
    Ok(py
        .import("json")?
        .call_method1("loads", (out.to_string(),))?
        .cast_into()?)
}

/// The canonical form of a URL (Safe Browsing's rules), as
/// `bloomgate url canon` prints it.
#[pyfunction]
fn canonicalize(url: &Bound<'_, PyAny>) -> PyResult<String> {
    let p = Packed::one(url)?;
    bloomgate_url::canonicalize(p.items()[0])
        .map(|c| c.into_owned())
        .map_err(|e| {
            InvalidItem::new_err(format!("{:?}: {e}", String::from_utf8_lossy(p.items()[0])))
        })
}

/// The host-suffix/path-prefix expressions of a URL that a query looks up,
/// as `bloomgate url expressions` prints them.
#[pyfunction]
fn expressions(url: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let p = Packed::one(url)?;
    bloomgate_url::expressions(p.items()[0]).map_err(|e| {
        InvalidItem::new_err(format!("{:?}: {e}", String::from_utf8_lossy(p.items()[0])))
    })
}

/// The module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    list::count_forks();
    errors::register(m)?;
    m.add_class::<List>()?;
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(create, m)?)?;
    m.add_function(wrap_pyfunction!(build, m)?)?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(canonicalize, m)?)?;
    m.add_function(wrap_pyfunction!(expressions, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
