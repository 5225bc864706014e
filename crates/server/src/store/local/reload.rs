//! Replacing a served filter with a rebuilt file (HTTP reload, SIGHUP),
//! carrying its acknowledged live adds over.

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bloomgate_blacklist::layers::layer_path;
use bloomgate_engine::{Access, Filter};
use bloomgate_list::BloomList;

use crate::journal;
use crate::wal::{self, Record};

use super::replay::replay_into;
use super::*;

impl LocalStore {
    /// Replaces a filter with a rebuilt file. With `source`, the file is
    /// verified, copied into the data directory and renamed over `NAME.bgf`;
    /// without, `NAME.bgf` itself (already replaced by the operator) is
    /// verified and reopened. A file that does not verify is refused and the
    /// old filter keeps serving.
    ///
    /// Acknowledged live adds are carried over: before the new layers are
    /// published, every add in `NAME.live` and every add record of the
    /// filter's lineage still in the log is inserted into them (converted if
    /// the new file has other key rules), and the new file's seed joins the
    /// lineage. With `drop_live_adds` nothing is carried over and the journal
    /// is reset: the rebuilt file is the new truth.
    ///
    /// A damaged filter (see [`Damaged`]) is retried as it stands on disk:
    /// without `source` its further layers are kept (they may hold its
    /// grown state), and once everything loads it is served again, with
    /// its journal's and the log's adds. A damaged cuckoo filter is served
    /// again by a restart, after `NAME.cf` is restored.
    pub fn reload(
        &self,
        name: &str,
        source: Option<&Path>,
        drop_live_adds: bool,
    ) -> Result<Arc<Named>, StoreError> {
        if !valid_name(name) {
            return Err(StoreError::BadName(name.into()));
        }
        let _snap = lock(&self.snapshot_lock);
        let damaged = self.damaged(name);
        if let Some(d) = &damaged {
            if d.kind == "cuckoo" {
                return Err(d.clone().into());
            }
        }
        if let Some(n) = self.get(name) {
            let policy = n.layers().policy();
            if policy.forgets() {
                return Err(StoreError::Invalid(format!(
                    "'{name}' is {policy}: its state is the server's own (dedup or cache), not a rebuilt list, and is never reloaded from a file"
                )));
            }
        }
        let base = self.base(name);
        let src = source.unwrap_or(&base);
        let probe = Filter::open(src, Access::ReadOnly)?;
        probe.verify()?;
        drop(probe);
        if !drop_live_adds {
            // A damaged journal stops the reload before anything changes.
            journal::load(&journal::path(&self.dir, name), &self.metrics)?;
        }
        if let Some(src) = source {
            let same = std::fs::canonicalize(src).ok() == std::fs::canonicalize(&base).ok();
            if !same {
                let copy = write_atomic_from(&base, src);
                if let Err(e) = copy {
                    return Err(StoreError::io(
                        format_args!("cannot copy {} into place", src.display()),
                        e,
                    ));
                }
            }
        }
        // The rebuilt file replaces every layer (live adds that lived in
        // further layers are in the journal or the log). A damaged filter
        // reloaded as it stands keeps them.
        if damaged.is_none() || source.is_some() {
            for i in 1.. {
                let p = layer_path(&base, i);
                if std::fs::remove_file(&p).is_err() {
                    break;
                }
            }
        }
        let (mut layers, wl) = load_layers(&base)?;
        let id = file_id(&base);
        let current = self.get(name);
        // Hold off adds until the new layers are published: every add made
        // against the old layers is then queued before the rotation below,
        // so it is in one of the segments it returns.
        let _w = current.as_ref().map(|n| lock(&n.write));
        let new_lin = layers.lineage();
        let jpath = journal::path(&self.dir, name);
        let jerr = |e: std::io::Error| StoreError::io(jpath.display(), e);
        let mut inserted = 0u64;
        let lineage = if drop_live_adds {
            let mut m = Vec::new();
            journal::marker(&mut m, name, new_lin);
            journal::reset(&jpath, &m).map_err(jerr)?;
            vec![new_lin]
        } else {
            let segments = self.wal.rotate()?;
            let c = journal::load(&jpath, &self.metrics)?;
            let mut lineage = c.lineage;
            if let Some(n) = &current {
                for l in lock(&n.lineage).iter() {
                    if !lineage.iter().any(|x| x.seed == l.seed) {
                        lineage.push(*l);
                    }
                }
            }
            let mut failure = None;
            for (seed, key) in &c.adds {
                match replay_into(&mut layers, &lineage, *seed, key, &self.limits) {
                    Ok(true) => inserted += 1,
                    Ok(false) => {}
                    Err(e) => failure = Some(e),
                }
            }
            for seg in &segments {
                let rep = wal::read_segment(seg, |rec| {
                    if let Record::Add {
                        name: n, seed, key, ..
                    } = rec
                    {
                        if n == name && lineage.iter().any(|l| l.seed == seed) {
                            match replay_into(&mut layers, &lineage, seed, &key, &self.limits) {
                                Ok(true) => inserted += 1,
                                Ok(false) => {}
                                Err(e) => failure = Some(e),
                            }
                        }
                    }
                })
                .map_err(|e| StoreError::io(seg.display(), e))?;
                rep.check(seg).map_err(|e| StoreError::Files(e.into()))?;
            }
            if let Some(e) = failure {
                return Err(e);
            }
            if !lineage.iter().any(|l| l.seed == new_lin.seed) {
                let mut m = Vec::new();
                journal::marker(&mut m, name, new_lin);
                journal::append(&jpath, &m).map_err(jerr)?;
                lineage.push(new_lin);
            }
            lineage
        };
        if inserted > 0 {
            self.metrics.journal_replayed.fetch_add(inserted, Relaxed);
        }
        match &current {
            Some(named) => {
                named
                    .list
                    .store(Arc::new(BloomList::new(&base, layers, wl)));
                named.dirty.store(inserted > 0, Relaxed);
                *lock(&named.fill_cache) = None;
                *lock(&named.loaded) = id;
                *lock(&named.lineage) = lineage;
                Ok(named.clone())
            }
            None => {
                let named = Arc::new(Named::new(name.into(), &base, layers, wl, id));
                named.dirty.store(inserted > 0, Relaxed);
                *lock(&named.lineage) = lineage;
                self.change_filters(|m| m.insert(name.into(), named.clone()));
                if damaged.is_some() && self.undamage(name) {
                    tracing::info!(
                        "bloomgate serve: filter '{name}' is repaired and served again ({inserted} journaled or logged add(s) re-inserted)"
                    );
                }
                Ok(named)
            }
        }
    }

    /// SIGHUP: reloads every `NAME.bgf` whose file changed and serves new ones.
    pub fn reload_changed(&self) -> String {
        let mut report = Vec::new();
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return "cannot read the data directory".into();
        };
        for e in rd.flatten() {
            let path = e.path();
            if path.extension().and_then(|x| x.to_str()) != Some("bgf") {
                continue;
            }
            let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            if !valid_name(name) {
                continue;
            }
            if super::listed::served_by_list(&path) {
                report.extend(self.reload_listed_if_changed(name, &path));
                continue;
            }
            if let Some(layout) = super::deletable::deletable_layout(&path) {
                // Served by the cuckoo store, which reads such files at startup.
                if !self.cuckoo.has(name) {
                    report.push(format!(
                        "{name}: a {} filter file, served from the next start",
                        layout.name()
                    ));
                }
                continue;
            }
            let changed = match self.get(name) {
                Some(n) => *lock(&n.loaded) != file_id(&path),
                None => true,
            };
            if changed {
                match self.reload(name, None, false) {
                    Ok(_) => {
                        // A file of another layout it replaces stops serving.
                        self.forget_listed(name);
                        report.push(format!("reloaded {name}"));
                    }
                    Err(e) => report.push(format!("kept {name}: {e}")),
                }
            }
        }
        // A damaged filter whose file is gone was discarded by the operator.
        for d in self.damaged_all() {
            if !Path::new(&d.file).exists() {
                let _snap = lock(&self.snapshot_lock);
                if self.get(&d.name).is_none() && self.undamage(&d.name) {
                    report.push(format!("forgot damaged {}: {} was removed", d.name, d.file));
                }
            }
        }
        if report.is_empty() {
            "nothing changed".into()
        } else {
            report.join("; ")
        }
    }
}
