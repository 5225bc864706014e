//! Saving a chain crash-safely (see the module docs of [`super`],
//! "Saving"): layer files first, the `.meta` last as the commit.

use std::path::Path;

use bloomgate_engine::atomic::write_atomic;
use bloomgate_engine::Filter;

use super::{layer_path, meta_path, Forgetting, Layers, MAX_LAYERS};
use crate::Error;

impl Layers {
    /// The `.meta` JSON of this filter: the growth settings and the
    /// policy's fields. `None` for a fixed filter (no `.meta`).
    pub fn meta_json(&self) -> Option<Vec<u8>> {
        super::meta::meta_json(&self.fill, self.rate, &self.rules)
    }

    /// Writes the whole filter to `base` and its layer files so that a
    /// crash at any moment leaves the state on disk as it was or as it is
    /// now (see the module docs, "Saving"): layer files first, each
    /// replaced atomically (unchanged ones skipped), then the `.meta` (the
    /// commit), then files of dropped generations are removed.
    pub fn save(&mut self, base: &Path) -> Result<(), Error> {
        let files = self.write_layers(base)?;
        self.commit_meta(base, files)
    }

    /// The first step of [`Layers::save`]: every changed layer to its file.
    /// Returns the file index of each layer.
    pub(super) fn write_layers(&self, base: &Path) -> Result<Vec<u32>, Error> {
        let files: Vec<u32> = match &self.rules.forgetting {
            Forgetting::Rotate { ring, .. } => ring.iter().map(|g| g.file).collect(),
            _ => (0..self.layers.len() as u32).collect(),
        };
        for (f, &i) in self.layers.iter().zip(&files) {
            let path = layer_path(base, i as usize);
            let unchanged = f.path() == Some(path.as_path())
                && f.header().is_some_and(|h| h.items == f.items());
            if !unchanged {
                f.save(&path)?;
            }
        }
        if !files.contains(&0) && !base.exists() {
            // A ring that moved past generation 0 before its first save
            // (a new state that rotated G + 1 times or more): the
            // first-layer file is the anchor `open` reads the key rules
            // from, so an empty generation of the same parameters stands in.
            let params = self.layers.last().expect("a layer").params().clone();
            Filter::new(params)?.save(base)?;
        }
        Ok(files)
    }

    /// The commit of [`Layers::save`]: the `.meta`, then the removal of
    /// dropped generations' files.
    fn commit_meta(&mut self, base: &Path, files: Vec<u32>) -> Result<(), Error> {
        let mpath = meta_path(base);
        match self.meta_json() {
            Some(json) => write_atomic(&mpath, &json).map_err(|e| Error::Io {
                path: mpath.clone(),
                source: e.into(),
            })?,
            None => {
                if mpath.exists() {
                    return Err(Error::Layers {
                        path: mpath,
                        problem:
                            "a fixed filter cannot be saved over a filter with growth settings"
                                .into(),
                    });
                }
            }
        }
        if self.rules.forgetting != Forgetting::None {
            // Generations dropped since the last save (and strays of saves
            // that did not commit), except the first-layer file, which
            // stays as the filter's anchor.
            for i in 1..=(MAX_LAYERS as u32 * 2) {
                if !files.contains(&i) {
                    match std::fs::remove_file(layer_path(base, i as usize)) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => tracing::warn!(
                            "{}: cannot remove a dropped generation: {e}",
                            layer_path(base, i as usize).display()
                        ),
                    }
                }
            }
            bloomgate_engine::atomic::sync_parent(base);
        }
        self.rules.committed = files;
        Ok(())
    }
}
