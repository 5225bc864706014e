//! A Bloom list whose layers a caller holds and changes: [`BloomList`].
//!
//! [`List::open`](crate::List::open) reads a Bloom filter's files and
//! answers from them. A server's Bloom filter is the same list, but its
//! state is the server's own: live adds made durable by its write-ahead
//! log, layers grown in memory by the filter's fill policy, a whitelist
//! edited while lookups run. What it publishes for lookups after each such
//! change is a `BloomList`: a [`List`] of the Bloom shape over the layers
//! and whitelist it holds, so that the server's lookups, whitelist edits
//! and the verdict are the library's ([`List::check_each`]'s three steps,
//! [`List::whitelist_edit`]), and only the log, growth and snapshots stay
//! the server's.
//!
//! A `BloomList` is a `List` of the Bloom shape by construction (its
//! `List` is private and made only here), so its layers are at hand
//! without asking which shape it is: adds, growth and `info` read them.
//! Two `BloomList`s share the layers' bits (a [`Layers`] clone shares
//! them) and the whitelist's keys (a [`Whitelist`] clone shares them until
//! it is edited), nothing else: a change publishes a new one
//! ([`BloomList::with_layers`], or an edited clone), and a lookup that
//! loaded the old one finishes on it. However often a filter grows, it
//! holds one whitelist.

use std::convert::Infallible;
use std::path::Path;

use bloomgate_blacklist::layers::Layers;
use bloomgate_blacklist::{Blacklist, VerdictRef, Whitelist};
use bloomgate_url::KeyError;

use crate::check::{check_many, CheckScratch};
use crate::{List, Store};

/// A [`List`] of the Bloom shape made from layers and a whitelist a
/// caller holds (see the module documentation).
#[derive(Debug)]
pub struct BloomList {
    list: List,
}

impl BloomList {
    /// The list of `layers` and `whitelist`, whose files are at `path`
    /// (its first layer's file: the whitelist is saved beside it).
    pub fn new(path: &Path, layers: Layers, whitelist: Whitelist) -> BloomList {
        let store = Store::Bloom(Box::new(Blacklist::from_layers(layers, whitelist, path)));
        BloomList {
            list: List::held(path.display().to_string(), store, false),
        }
    }

    fn blacklist(&self) -> &Blacklist {
        match &self.list.store {
            Store::Bloom(b) => b,
            // `new` is the only maker of a BloomList's list.
            _ => unreachable!("a BloomList is made of Bloom layers"),
        }
    }

    /// The list.
    pub fn list(&self) -> &List {
        &self.list
    }

    /// The list, for its whitelist edits ([`List::whitelist_edit`],
    /// [`List::save_whitelist`]); its shape cannot change.
    pub fn list_mut(&mut self) -> &mut List {
        &mut self.list
    }

    /// The layers, with the key rules and the fill policy.
    pub fn layers(&self) -> &Layers {
        self.blacklist().layers()
    }

    /// The exact list of known false positives.
    pub fn whitelist(&self) -> &Whitelist {
        self.blacklist().whitelist()
    }

    /// The same list over `layers` (grown, or with a new generation): the
    /// same path, and the same whitelist (shared, not copied).
    pub fn with_layers(&self, layers: Layers) -> BloomList {
        BloomList::new(
            Path::new(self.list.address()),
            layers,
            self.whitelist().clone(),
        )
    }

    /// [`List::check_each`] on the layers, which cannot fail: their
    /// membership is a lookup in memory (the engine's pipelined batch
    /// lookup over every layer).
    #[inline]
    pub fn check_each(
        &self,
        queries: &[&[u8]],
        s: &mut CheckScratch,
        each: impl FnMut(Result<VerdictRef<'_>, KeyError>),
    ) {
        let layers = self.layers();
        let looked_up = check_many::<Infallible>(
            layers.kind,
            layers.mode,
            self.whitelist(),
            queries,
            s,
            |keys, found, spare| {
                layers.contains_batch(keys, found, spare);
                Ok(())
            },
            each,
        );
        let Ok(()) = looked_up;
    }
}

impl Clone for BloomList {
    /// The same list, to edit and publish in its place: the layers' bits
    /// shared, and the whitelist until the edit (copied on write).
    fn clone(&self) -> BloomList {
        self.with_layers(self.layers().clone())
    }
}
