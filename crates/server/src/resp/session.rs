//! What a command may read and change of its connection: the [`Session`].
//!
//! A command is parsed from its frame alone ([`super::cmd`]) and then
//! applied to the store through the session: who the client is (`AUTH`,
//! `CLIENT SETNAME`), what it asked to end (`QUIT`), the write it left to
//! acknowledge, the lookup it queued in a remote store's batch, and the
//! connection's cache of the last filter it named. The connection
//! ([`super::conn`]) owns a session beside its socket, buffers and batches,
//! and reads back what the command left (the acknowledgement to wait for,
//! the queued request to answer); a command never sees the socket.

use std::sync::Arc;

use crate::store::{Ack, AddOutcome, AddReply, CheckReply, Filter, LookupScratch};
use crate::App;

/// The per-connection state commands read and change.
pub(super) struct Session {
    pub(super) app: Arc<App>,
    pub(super) authed: bool,
    /// Scratch for the outcomes of one add.
    pub(super) outcomes: Vec<AddOutcome>,
    /// The acknowledgement of the command being executed, if it wrote.
    pub(super) ack: Option<Ack>,
    pub(super) quit: bool,
    /// The client spoke HTTP, not RESP: close without another word.
    pub(super) hang_up: bool,
    pub(super) name: Option<Vec<u8>>,
    pub(super) id: u64,
    /// The filter of the last lookup (see [`Lookup`]).
    pub(super) last: Lookup,
    pub(super) lookup_scratch: LookupScratch,
    /// Items looked up and hits not yet added to the shared metrics.
    pub(super) items_checked: u64,
    pub(super) hits: u64,
    /// Whether a command may queue its request in a remote store's batch
    /// and leave its reply for later ([`Later`]): true on the event loop,
    /// false on the blocking pool (which waits for the answer instead).
    pub(super) queueing: bool,
    /// The queued request of the command being executed, if it queued one.
    pub(super) later: Option<Later>,
}

/// A command's request queued in a remote store's batch
/// ([`Filter::check_later`], [`Store::add_later`](crate::store::Store::add_later)):
/// its reply is written when the answer arrives, before the batch's
/// replies are sent. A connection queues lookups, or adds, one after the
/// other; any other command first waits for what is queued, so that
/// commands still take effect in the order they were sent (an add, then a
/// lookup of the same item, finds it).
pub(super) enum Later {
    /// `BF.EXISTS`/`BF.MEXISTS`; the filter's counters are added to when
    /// the answer arrives.
    Check {
        rx: CheckReply,
        multi: bool,
        filter: Filter,
    },
    /// `BF.ADD`/`BF.MADD`.
    Add { rx: AddReply, multi: bool },
}

/// A connection's cached name lookup. Pipelined lookups usually name one
/// filter over and over; while the store's generation is unchanged (no
/// filter created, replaced or deleted) the cached [`Filter`] is the one
/// [`Store::get`](crate::store::Store::get) would return, without taking the
/// map's lock, hashing the name or touching a shared reference count. The
/// filter's lookup counters are accumulated here and added once per batch.
#[derive(Default)]
pub(super) struct Lookup {
    pub(super) valid: bool,
    pub(super) generation: u64,
    pub(super) key: Vec<u8>,
    pub(super) named: Option<Filter>,
    pub(super) checks: u64,
    pub(super) hits: u64,
}

/// Longest filter name worth caching (longer ones are looked up each time).
const MAX_CACHED_NAME: usize = 256;

impl Session {
    /// A new connection's session: not authenticated, nothing cached.
    pub(super) fn new(app: Arc<App>, id: u64) -> Session {
        Session {
            app,
            authed: false,
            outcomes: Vec::new(),
            ack: None,
            quit: false,
            hang_up: false,
            name: None,
            id,
            last: Lookup::default(),
            lookup_scratch: LookupScratch::default(),
            items_checked: 0,
            hits: 0,
            queueing: true,
            later: None,
        }
    }

    /// The Bloom filter called `key`, if it is served.
    pub(super) fn named(&self, key: &[u8]) -> Option<Filter> {
        std::str::from_utf8(key)
            .ok()
            .and_then(|k| self.app.store.get(k))
    }

    /// Adds the cached filter's lookup counts to its shared counters.
    pub(super) fn flush_lookup_counts(&mut self) {
        let l = &mut self.last;
        if let Some(n) = &l.named {
            n.count(l.checks, l.hits);
        }
        l.checks = 0;
        l.hits = 0;
    }

    /// Points `self.last` at the filter called `key` (or at nothing).
    pub(super) fn look_up(&mut self, key: &[u8]) {
        let generation = self.app.store.generation();
        let l = &self.last;
        if l.valid && l.generation == generation && l.key == key {
            return;
        }
        self.flush_lookup_counts();
        let named = self.named(key);
        let l = &mut self.last;
        l.named = named;
        l.generation = generation;
        l.key.clear();
        l.valid = key.len() <= MAX_CACHED_NAME;
        if l.valid {
            l.key.extend_from_slice(key);
        }
    }

    /// True while a token is configured and this client has not presented
    /// it: its input is accounted in the separate budget of such clients.
    pub(super) fn anonymous(&self) -> bool {
        self.app.access.has_token() && !self.authed
    }
}
