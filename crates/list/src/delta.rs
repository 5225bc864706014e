//! Live adds on a static list: the *delta*, a small scaling Bloom filter
//! beside a ribbon filter, and the file of the keys it holds.
//!
//! A ribbon filter is solved once from all its keys; one more key means
//! solving again. A blacklist is rebuilt from its source far more often
//! than it is edited, but between two builds it still gets the odd urgent
//! entry — the URL reported an hour ago. Those go into a delta: a lookup is
//! a hit when the solution *or* the delta holds the key, an add goes into
//! the delta, and the next build folds the delta's keys into the solution
//! (`bloomgate build --layout ribbon --fold FILE`), after which the delta
//! is empty again.
//!
//! # What is stored, and where
//!
//! The durable state is the file of added keys, `NAME.bgf.delta`
//! (`bloomgate_blacklist::delta`): the exact keys, because a rebuild needs
//! them and a Bloom filter cannot list its keys. The delta's bits are not
//! stored: they follow from the keys, so opening the list reads the file
//! and inserts every key that the solution does not hold already into a
//! blocked Bloom filter in memory, whose first layer is planned for twice
//! those keys (at least [`DELTA_FIRST_ITEMS`]); adds made while the list is
//! open grow it by layers, as a scaling filter grows
//! (`bloomgate_blacklist::layers`, expansion 2, each layer at half the
//! previous one's rate). Keeping one file avoids a second one that would
//! have to agree with it after a crash; the price is the time to re-insert
//! the keys at each open (about 0.1 µs per key: a delta is meant to stay
//! small, and every build empties it). The first layer's seed is derived
//! from the solution's, so two opens of the same files answer alike.
//!
//! An add is durable before it is visible: its key is appended to the file
//! and synced, then inserted into the delta. A key is appended once (the
//! keys of the file are known exactly, by their 128-bit hashes, while the
//! list is open for update), whether or not the solution or the delta
//! already seemed to hold it: a key that was only a false positive of the
//! solution must still be in the next build.
//!
//! # The rate: union ≤ target
//!
//! For a key never added, the solution and the delta answer
//! independently, so the union's rate is `1 − (1 − FP_base)(1 − FP_delta)
//! ≤ FP_base + FP_delta` (the math: `bloomgate_engine::math`, "Room for
//! adds"). The delta is planned for what the solution leaves of the
//! file's target `p`: `q = p − FP_base`, FP_base being the solution's
//! predicted rate. Its layers take `q/2, q/4, …`, so their compound rate
//! stays below `q` however many keys are added, and the union below `p`.
//! A build keeps `1/32` of `p` for this by default (`--delta-share`). A
//! file takes adds when its build kept a share (its result bits encode a
//! rate below the target by at least [`MIN_DELTA_SHARE`], 1/1024) *and*
//! its solution's predicted rate leaves that much (`q ≥ p/1024`); any
//! other (`--delta-share 0`, a build from before adds were taken) refuses
//! adds, saying why — the alternative, a delta that pushes the union past
//! the target, is what the target forbids. (A file built for its whole
//! target can leave a little by the rounding of its blocks, but that is
//! no room anyone asked for, and it varies from build to build.)
//!
//! Measured (`union_rate_measured_at_a_million_stays_within_the_target`,
//! 2·10⁵ keys at 10⁻², 6·10⁴ added in batches of 1,000, 10⁶ strangers):
//! share 1/32, union 1.010·10⁻² measured against 0.997·10⁻² predicted
//! (solution 0.969, delta 0.029); share 1/4, 1.006·10⁻² against 0.976·10⁻²
//! (solution 0.750, delta 0.228). One standard deviation is 1 % there.
//!
//! # Never "absent" when unsure
//!
//! A damaged or cut delta file fails the open (every key of it must be
//! answered for); so does one whose keys were normalized by other rules
//! (another filter's). If inserting into the delta fails after the keys
//! were made durable (no memory for another layer), the delta is marked
//! broken and every later lookup of the list is an error until it is
//! opened again (which re-inserts them all), rather than an answer that
//! misses them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use bloomgate_blacklist::delta::{delta_path, DeltaKeys, DeltaWriter};
use bloomgate_blacklist::layers::{
    unix_now, Added, FillPolicy, Layers, Purpose, DEFAULT_EXPANSION,
};
use bloomgate_engine::hash::hash_item;
use bloomgate_engine::{Layout, Params, Ribbon};

use crate::{Claim, Error};

/// The least share of the target rate the delta must have for a list to
/// take adds (below it, the delta's bits per key grow past ~40).
pub const MIN_DELTA_SHARE: f64 = 1.0 / 1024.0;

/// Keys the delta's first layer is planned for at least.
pub const DELTA_FIRST_ITEMS: u64 = 1024;

/// Mixed into the solution's seed for the delta's first layer.
const DELTA_SEED: u64 = 0x6465_6c74_615f_6266;

/// A static list's delta (see the module documentation).
#[derive(Debug)]
pub(crate) struct Delta {
    path: PathBuf,
    rules: (u8, u8),
    seed: u64,
    /// The file's target rate per lookup.
    target: f64,
    /// The solution's predicted rate.
    base_fp: f64,
    /// The share of the target its build kept for the delta: `1 −` the
    /// rate its result bits were planned for, over the target.
    share: f64,
    /// The delta's layers; `None` while no key outside the solution was
    /// added.
    layers: Option<Layers>,
    /// Keys in the file (as this process read and appended them).
    records: u64,
    /// When open for update: the writer and the keys in the file.
    writer: Option<(DeltaWriter, HashSet<u128>)>,
    /// Why lookups cannot be answered (keys durable but not in memory).
    broken: Option<String>,
}

/// The exact identity of a key in the file: its 128-bit hash.
fn key_id(key: &[u8]) -> u128 {
    let h = hash_item(0, key);
    (h.hi as u128) << 64 | h.lo as u128
}

/// What `info` reports of a delta.
#[derive(Clone, Debug)]
pub(crate) struct DeltaInfo {
    pub path: String,
    pub exists: bool,
    pub records: u64,
    pub file_bytes: u64,
    pub items: u64,
    pub bits: u64,
    pub layers: usize,
    pub predicted_fp: f64,
    pub budget: f64,
    pub takes_adds: bool,
}

impl Delta {
    /// Opens the delta of the ribbon file `base`: reads its file (if any),
    /// checks it, and inserts the keys the solution lacks. With `update`,
    /// ready to take adds.
    pub(crate) fn open(
        base: &Path,
        ribbon: &Ribbon,
        rules: (u8, u8),
        update: bool,
    ) -> Result<Delta, Error> {
        let path = delta_path(base);
        let h = ribbon.header();
        let base_fp = ribbon.predicted_fp();
        let planned = (-(h.columns as f64)).exp2() * (1.0 - h.upper as f64 / 8_589_934_592.0);
        let mut d = Delta {
            path: path.clone(),
            rules,
            seed: h.seed ^ DELTA_SEED,
            target: h.target_fp,
            base_fp,
            share: 1.0 - planned / h.target_fp,
            layers: None,
            records: 0,
            writer: None,
            broken: None,
        };
        let keys = DeltaKeys::read(&path).map_err(bloomgate_blacklist::Error::from)?;
        let mut recorded = HashSet::new();
        if let Some(keys) = &keys {
            keys.check_rules(&path, rules.0, rules.1)
                .map_err(bloomgate_blacklist::Error::from)?;
            d.records = keys.len();
            let all: Vec<&[u8]> = keys.iter().collect();
            let mut in_base = Vec::new();
            ribbon.contains_many(&all, &mut in_base);
            let outside: Vec<&[u8]> = all
                .iter()
                .zip(&in_base)
                .filter(|(_, &b)| !b)
                .map(|(k, _)| *k)
                .collect();
            if !outside.is_empty() {
                let layers = d.layers_for(outside.len() as u64)?;
                let mut added = Vec::new();
                layers.add_batch(&outside, unix_now(), &mut added)?;
            }
            if update {
                recorded = all.iter().map(|k| key_id(k)).collect();
            }
        }
        if update {
            d.writer = Some((DeltaWriter::new(&path, rules.0, rules.1), recorded));
        }
        Ok(d)
    }

    /// The rate left for the delta: the target less the solution's rate.
    fn budget(&self) -> f64 {
        self.target - self.base_fp
    }

    /// The rate the delta is planned for: its budget, or when the file
    /// left none (it then takes no adds, and a delta file it has anyway is
    /// answered for at an honest rate above the target) the least share.
    fn rate(&self) -> f64 {
        self.budget().max(self.target * MIN_DELTA_SHARE)
    }

    /// Fails unless the file was built with room for a delta and its
    /// solution's rate leaves it some (see the module documentation); the
    /// reason, for the refusal.
    pub(crate) fn room(&self) -> Result<(), String> {
        let rebuild = "rebuild it with `bloomgate build --layout ribbon`, which keeps 1/32 of the rate for adds (--delta-share)";
        if self.share < MIN_DELTA_SHARE {
            return Err(format!(
                "it was built without room in its rate for added keys (--delta-share 0, or a build from before adds were taken); {rebuild}"
            ));
        }
        if self.budget() < self.target * MIN_DELTA_SHARE {
            return Err(format!(
                "its solution's predicted rate ({:.4e} per lookup) leaves no room in its target ({:.4e}) for a delta of added keys (the union of both must stay within the target); {rebuild}",
                self.base_fp, self.target
            ));
        }
        Ok(())
    }

    /// The layers, made for `expected` keys on first use.
    fn layers_for(&mut self, expected: u64) -> Result<&mut Layers, Error> {
        if self.layers.is_none() {
            let rate = self.rate();
            let policy = FillPolicy::Grow {
                expansion: DEFAULT_EXPANSION,
            };
            let items = expected.saturating_mul(2).max(DELTA_FIRST_ITEMS);
            let plan = Layers::plan_first(&policy, Layout::Blocked, items, rate)?;
            let mut params = Params::from_plan(&plan, self.seed);
            (params.key_kind, params.match_mode) = self.rules;
            let layers = Layers::create(params, &policy, Purpose::Blacklist, rate, unix_now())?;
            self.layers = Some(layers);
        }
        Ok(self.layers.as_mut().expect("made above"))
    }

    /// ORs into `found` (one answer per key) whether the delta (probably)
    /// holds each key; `spare` and `scratch` are buffers.
    pub(crate) fn or_into(
        &self,
        keys: &[&[u8]],
        found: &mut [bool],
        spare: &mut Vec<bool>,
        scratch: &mut Vec<bool>,
    ) -> Result<(), Error> {
        if let Some(why) = &self.broken {
            return Err(Error::Unsupported {
                address: self.path.display().to_string(),
                problem: why.clone(),
            });
        }
        let Some(layers) = &self.layers else {
            return Ok(());
        };
        layers.contains_batch(keys, spare, scratch);
        for (f, &d) in found.iter_mut().zip(spare.iter()) {
            *f |= d;
        }
        Ok(())
    }

    /// Adds normalized keys: durable in the file first, then in the delta.
    /// `claims` gets one answer per key: [`Claim::New`] when neither the
    /// solution nor the delta (nor an earlier key of the batch) held it.
    /// On an error before the keys were durable, `claims` is left as it
    /// was ([`Claim::NotAdded`]).
    pub(crate) fn add_keys<T: AsRef<[u8]>>(
        &mut self,
        ribbon: &Ribbon,
        keys: &[T],
        claims: &mut [Claim],
    ) -> Result<(), Error> {
        if let Err(problem) = self.room() {
            return Err(Error::Unsupported {
                address: ribbon.path().display().to_string(),
                problem,
            });
        }
        let Some((writer, recorded)) = self.writer.as_mut() else {
            return Err(Error::ReadOnly(ribbon.path().display().to_string()));
        };
        let mut fresh = Vec::new();
        let mut to_record: Vec<&[u8]> = Vec::new();
        for k in keys {
            let id = key_id(k.as_ref());
            if recorded.insert(id) {
                fresh.push(id);
                to_record.push(k.as_ref());
            }
        }
        if let Err(e) = writer.append(&to_record) {
            for id in &fresh {
                recorded.remove(id);
            }
            return Err(bloomgate_blacklist::Error::from(e).into());
        }
        self.records += to_record.len() as u64;
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_ref()).collect();
        let mut in_base = Vec::new();
        ribbon.contains_many(&keys, &mut in_base);
        let outside: Vec<&[u8]> = keys
            .iter()
            .zip(&in_base)
            .filter(|(_, &b)| !b)
            .map(|(k, _)| *k)
            .collect();
        let mut added = Vec::with_capacity(outside.len());
        if !outside.is_empty() {
            let inserted = self.layers_for(outside.len() as u64).and_then(|l| {
                l.add_batch(&outside, unix_now(), &mut added)
                    .map_err(Error::from)
            });
            if let Err(e) = inserted {
                self.broken = Some(format!(
                    "keys added to the delta file could not be put in memory ({e}); open the list again"
                ));
                return Err(e);
            }
        }
        let mut added = added.into_iter();
        for (c, &b) in claims.iter_mut().zip(&in_base) {
            *c = match b {
                true => Claim::Present,
                false => match added.next() {
                    Some(Added::New) => Claim::New,
                    _ => Claim::Present,
                },
            };
        }
        Ok(())
    }

    /// Bytes of the delta's bits (in memory).
    pub(crate) fn bytes(&self) -> u64 {
        self.layers.as_ref().map_or(0, Layers::bytes)
    }

    fn predicted_fp(&self) -> f64 {
        self.layers.as_ref().map_or(0.0, Layers::predicted_fp)
    }

    /// Items in the delta (keys outside the solution).
    pub(crate) fn items(&self) -> u64 {
        self.layers.as_ref().map_or(0, Layers::items)
    }

    /// What `info` reports.
    pub(crate) fn info(&self) -> DeltaInfo {
        let file = std::fs::metadata(&self.path).ok();
        DeltaInfo {
            path: self.path.display().to_string(),
            exists: file.is_some(),
            records: self.records,
            file_bytes: file.map_or(0, |m| m.len()),
            items: self.items(),
            bits: self.layers.as_ref().map_or(0, Layers::bits),
            layers: self.layers.as_ref().map_or(0, |l| l.layers.len()),
            predicted_fp: self.predicted_fp(),
            budget: self.budget(),
            takes_adds: self.room().is_ok(),
        }
    }
}
