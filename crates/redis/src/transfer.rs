//! Moving whole filters between `.bgf` files and Redis: [`push`] uploads a
//! file's data shard by shard, [`pull`] writes it back to a file whose
//! header and data checksum equal the original's (byte for byte when the
//! filter was not changed in Redis).
//!
//! A push sends each shard whole with one `SET` (1 MB; see
//! [`layout`] for why every shard, zeros included, is
//! created whole), from one thread per master node (the shards are grouped
//! by the slot map read with `CLUSTER SLOTS`), a few shards per pipeline.
//! The cluster client still follows `MOVED`/`ASK`, so a slot map that
//! changes during the push only costs a redirect. The metadata is written
//! last: until then the filter does not exist for readers, and a push that
//! fails leaves no filter behind (its shards and whitelist are overwritten
//! by the next push of that name; shard keys past the next push's last
//! shard stay until deleted by hand). Replacing a filter (`force`) deletes
//! its metadata first, then its whitelist and shards.
//!
//! A pull reads the shards in order, a window at a time in one pipeline
//! (so every node sends its part at once), hashes the data as it writes it
//! (the engine's page checksums, carried across shard boundaries), and
//! writes the header last, to a temporary file renamed into place.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use bloomgate_blacklist::layers::Layers;
use bloomgate_blacklist::Whitelist;
use bloomgate_engine::format::{pages_checksum_and_ones, FORMAT_VERSION, HEADER_LEN};
use bloomgate_engine::{Access, Header};

use crate::address::Address;
use crate::client::Store;
use crate::error::{Error, Result};
use crate::filter::{bytes, read_meta, read_whitelist};
use crate::layout::{self, Meta};

/// Shards per pipeline of a push (4 MB in flight per node thread).
const PUSH_PIPELINE: usize = 4;
/// Shards per pipeline of a pull.
const PULL_WINDOW: u64 = 8;
/// Checksum page (the engine's).
const PAGE: usize = 4096;

/// What a push or pull did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transferred {
    /// Shards written or read.
    pub shards: u64,
    /// Bytes of data.
    pub bytes: u64,
    /// Whitelisted keys.
    pub whitelist: u64,
    /// Items (the count in the header or the metadata).
    pub items: u64,
    /// The data checksum of the file (as in its header).
    pub data_checksum: u64,
}

fn io<'p>(path: &'p Path, op: &'static str) -> impl FnOnce(std::io::Error) -> Error + 'p {
    move |source| Error::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// Deletes a filter's metadata, whitelist and shards. Returns whether
/// there was one.
pub fn delete(address: &Address) -> Result<bool> {
    let store = Store::new(address)?;
    delete_in(&store, &address.name)
}

fn delete_in(store: &Store, name: &str) -> Result<bool> {
    let Some(meta) = read_meta(store, name)? else {
        return Ok(false);
    };
    // Metadata first: from here on readers see no filter, never a partial one.
    store.run(&[
        redis::cmd("DEL").arg(layout::meta_key(name)).clone(),
        redis::cmd("DEL").arg(layout::whitelist_key(name)).clone(),
    ])?;
    let all: Vec<u64> = (0..meta.shards()).collect();
    for batch in all.chunks(1024) {
        let cmds: Vec<redis::Cmd> = batch
            .iter()
            .map(|&i| redis::cmd("UNLINK").arg(layout::shard_key(name, i)).clone())
            .collect();
        store.run(&cmds)?;
    }
    Ok(true)
}

/// Uploads the filter file at `path` (and its whitelist file) as the filter
/// named by `address`. Refuses a classic filter ([`Error::WrongLayout`]),
/// a filter that grew to several layers, and an existing filter unless
/// `force`. `progress` is called with the bytes of each batch of shards
/// sent, from the sending threads.
pub fn push(
    path: &Path,
    address: &Address,
    force: bool,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Transferred> {
    let layers = Layers::open(path, Access::ReadOnly).map_err(|e| match e {
        bloomgate_blacklist::Error::Engine(e) => Error::Engine(e),
        other => Error::WrongLayout(other.to_string()),
    })?;
    if layers.layers.len() != 1 {
        return Err(Error::WrongLayout(format!(
            "{}: a filter that grew to {} layers cannot be pushed; Redis filters have one layer",
            path.display(),
            layers.layers.len()
        )));
    }
    let filter = &layers.layers[0];
    let header = filter
        .header()
        .ok_or_else(|| Error::WrongLayout(format!("{}: not a filter file", path.display())))?;
    if header.is_dirty() {
        return Err(Error::WrongLayout(format!(
            "{}: an in-place update did not finish; finish or repair it before pushing",
            path.display()
        )));
    }
    let mut meta = Meta::new(header.params.clone(), header.items)?;
    // Tells open handles that this is another filter than the one they read.
    meta.generation = bloomgate_engine::random_seed();
    let whitelist = Whitelist::load(&Whitelist::path_for(path))
        .map_err(|e| Error::WrongLayout(format!("{}: whitelist: {e}", path.display())))?;
    let data = filter.as_bytes();
    debug_assert_eq!(data.len() as u64, meta.data_len());
    let store = Store::new(address)?;
    let name = &address.name;
    if read_meta(&store, name)?.is_some() {
        if !force {
            return Err(Error::Exists {
                server: store.server().to_string(),
                name: name.clone(),
            });
        }
        delete_in(&store, name)?;
    }
    // One list of shards per master, by the slot each shard's tag selects.
    let (nodes, master_of) = store.masters_by_slot()?;
    let mut per_master: Vec<Vec<u64>> = vec![Vec::new(); nodes.len().max(1)];
    for i in 0..meta.shards() {
        let owner = master_of[layout::shard_slot(name, i) as usize];
        let owner = if (owner as usize) < per_master.len() {
            owner as usize
        } else {
            i as usize % per_master.len()
        };
        per_master[owner].push(i);
    }
    tracing::debug!(shards = meta.shards(), nodes = nodes.len(), "push");
    std::thread::scope(|scope| {
        let workers: Vec<_> = per_master
            .iter()
            .map(|shards| {
                let (store, meta) = (&store, &meta);
                scope.spawn(move || -> Result<()> {
                    for batch in shards.chunks(PUSH_PIPELINE) {
                        let mut sent = 0;
                        let cmds: Vec<redis::Cmd> = batch
                            .iter()
                            .map(|&i| {
                                let r = meta.shard_bytes(i);
                                sent += r.end - r.start;
                                redis::cmd("SET")
                                    .arg(layout::shard_key(name, i))
                                    .arg(&data[r.start as usize..r.end as usize])
                                    .clone()
                            })
                            .collect();
                        store.run(&cmds)?;
                        progress(sent);
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a push thread panicked"))
    })?;
    let wkey = layout::whitelist_key(name);
    // A push that failed before its metadata may have left a whitelist.
    store.one(redis::cmd("DEL").arg(&wkey).clone())?;
    let members: Vec<&[u8]> = whitelist.iter().collect();
    for batch in members.chunks(1024) {
        store.one(redis::cmd("SADD").arg(&wkey).arg(batch).clone())?;
    }
    let mut hset = redis::cmd("HSET");
    hset.arg(layout::meta_key(name));
    for (k, v) in meta.to_fields() {
        hset.arg(k).arg(v);
    }
    store.one(hset)?;
    verify_shards(&store, name, &meta)?;
    Ok(Transferred {
        shards: meta.shards(),
        bytes: meta.data_len(),
        whitelist: members.len() as u64,
        items: meta.items,
        data_checksum: header.data_checksum,
    })
}

/// Checks that every shard of a filter just pushed is there, whole
/// (`STRLEN` of each, pipelined): a Redis that evicts keys (`allkeys-*`
/// at `maxmemory`) may drop shards during the push itself.
fn verify_shards(store: &Store, name: &str, meta: &Meta) -> Result<()> {
    let all: Vec<u64> = (0..meta.shards()).collect();
    for batch in all.chunks(1024) {
        let cmds: Vec<redis::Cmd> = batch
            .iter()
            .map(|&i| redis::cmd("STRLEN").arg(layout::shard_key(name, i)).clone())
            .collect();
        for (reply, &i) in store.run(&cmds)?.iter().zip(batch) {
            let len = crate::filter::int(store, reply)?;
            let r = meta.shard_bytes(i);
            if len != (r.end - r.start) as i64 {
                return Err(Error::Damaged {
                    server: store.server().to_string(),
                    name: name.to_string(),
                    shard: i,
                    key: layout::shard_key(name, i),
                    problem: match len {
                        0 => "missing right after the push (evicted during it?)".to_string(),
                        n => format!(
                            "{n} bytes long right after the push instead of {}",
                            r.end - r.start
                        ),
                    },
                });
            }
        }
    }
    Ok(())
}

/// The page checksum of data written in pieces of any length: whole pages
/// are hashed as they complete, the rest waits for the next piece.
struct Checksum {
    pending: Vec<u8>,
    next_page: u64,
    sum: u64,
    ones: u64,
}

impl Checksum {
    fn add(&mut self, mut data: &[u8]) {
        if !self.pending.is_empty() {
            let take = (PAGE - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() < PAGE {
                return;
            }
            let page = std::mem::take(&mut self.pending);
            self.pages(&page);
        }
        let whole = data.len() / PAGE * PAGE;
        self.pages(&data[..whole]);
        self.pending.extend_from_slice(&data[whole..]);
    }

    fn pages(&mut self, pages: &[u8]) {
        if pages.is_empty() {
            return;
        }
        let (s, o) = pages_checksum_and_ones(pages, self.next_page);
        self.sum = self.sum.wrapping_add(s);
        self.ones += o;
        self.next_page += (pages.len() / PAGE) as u64;
    }

    fn finish(mut self) -> (u64, u64) {
        let last = std::mem::take(&mut self.pending);
        self.pages(&last);
        (self.sum, self.ones)
    }
}

/// Removes a temporary file unless disarmed.
struct TempFile(Option<PathBuf>);

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Downloads the filter named by `address` into a `.bgf` file at `path`
/// (and its whitelist beside it), atomically. Refuses to replace an
/// existing file unless `force`. `progress` is called with the bytes of
/// each window of shards written.
pub fn pull(
    address: &Address,
    path: &Path,
    force: bool,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Transferred> {
    if !force && path.exists() {
        return Err(Error::Io {
            path: path.to_path_buf(),
            op: "create",
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "the file exists (replace it with --force)",
            ),
        });
    }
    let store = Store::new(address)?;
    let name = &address.name;
    let meta = read_meta(&store, name)?.ok_or_else(|| Error::NotFound {
        server: store.server().to_string(),
        name: name.clone(),
    })?;
    let mut tmp_name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    tmp_name.push(format!(".pull-{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(io(&tmp, "create"))?;
    let mut guard = TempFile(Some(tmp.clone()));
    let mut out = std::io::BufWriter::with_capacity(1 << 20, &mut file);
    out.write_all(&[0u8; HEADER_LEN])
        .map_err(io(&tmp, "write"))?;
    let mut sum = Checksum {
        pending: Vec::new(),
        next_page: 0,
        sum: 0,
        ones: 0,
    };
    let shards = meta.shards();
    let mut first = 0;
    while first < shards {
        let last = (first + PULL_WINDOW).min(shards);
        let cmds: Vec<redis::Cmd> = (first..last)
            .map(|i| redis::cmd("GET").arg(layout::shard_key(name, i)).clone())
            .collect();
        let mut written = 0;
        for (i, reply) in (first..last).zip(store.run(&cmds)?) {
            let r = meta.shard_bytes(i);
            let len = (r.end - r.start) as usize;
            let shard = bytes(&store, reply)?;
            if shard.len() != len {
                // Shards are written whole: a missing or short one is lost
                // data, which a file must not silently fill with zeros.
                return Err(Error::Damaged {
                    server: store.server().to_string(),
                    name: name.clone(),
                    shard: i,
                    key: layout::shard_key(name, i),
                    problem: match shard.len() {
                        0 => "missing".to_string(),
                        n => format!("{n} bytes long instead of {len}"),
                    },
                });
            }
            sum.add(&shard);
            out.write_all(&shard).map_err(io(&tmp, "write"))?;
            written += len as u64;
        }
        progress(written);
        first = last;
    }
    out.flush().map_err(io(&tmp, "write"))?;
    drop(out);
    let (data_checksum, ones) = sum.finish();
    let header = Header {
        version: FORMAT_VERSION,
        params: meta.params.clone(),
        flags: 0,
        items: meta.items,
        data_len: meta.data_len(),
        data_checksum,
        ones: Some(ones),
    };
    file.seek(SeekFrom::Start(0)).map_err(io(&tmp, "seek"))?;
    file.write_all(&header.encode())
        .map_err(io(&tmp, "write"))?;
    file.sync_all().map_err(io(&tmp, "fsync"))?;
    drop(file);
    // The whitelist first: a filter file never appears without it.
    let whitelist = read_whitelist(&store, name)?;
    let wpath = Whitelist::path_for(path);
    if !whitelist.is_empty() {
        whitelist
            .save(&wpath)
            .map_err(|e| Error::WrongLayout(format!("{}: {e}", wpath.display())))?;
    } else if wpath.exists() {
        std::fs::remove_file(&wpath).map_err(io(&wpath, "remove the old whitelist"))?;
    }
    std::fs::rename(&tmp, path).map_err(io(path, "rename into place"))?;
    guard.0 = None;
    Ok(Transferred {
        shards,
        bytes: meta.data_len(),
        whitelist: whitelist.len() as u64,
        items: meta.items,
        data_checksum,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_in_pieces_is_the_files() {
        // 3.6 pages of varied bytes, fed in pieces that end inside pages,
        // on page boundaries, and one byte at a time.
        let data: Vec<u8> = (0..14_800u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let want = pages_checksum_and_ones(&data, 0);
        for piece in [1, 7, 1000, 4096, 5000, 8192, 20_000] {
            let mut sum = Checksum {
                pending: Vec::new(),
                next_page: 0,
                sum: 0,
                ones: 0,
            };
            for p in data.chunks(piece) {
                sum.add(p);
            }
            assert_eq!(sum.finish(), want, "pieces of {piece}");
        }
        assert_eq!(
            want.0,
            bloomgate_engine::format::data_checksum(&data),
            "the file's checksum"
        );
    }
}
