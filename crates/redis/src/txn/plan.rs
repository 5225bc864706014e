//! A transaction's plan: from the blocks its `WATCH` round read, which
//! items are new (in order: an item is new when some of its bits is 0 in
//! its block as the items before it left it) and which blocks gain bits
//! and are written back whole between `MULTI` and `EXEC`.

use super::{Block, Tx};
use crate::layout::BLOCK_BYTES;

/// A transaction's writes and answers, planned from its blocks as read.
pub(super) struct Plan {
    /// Per item, in order: the caller's index, whether it is new, and
    /// the index in `writes` of its block's write (for a new item).
    pub(super) items: Vec<(usize, bool, Option<usize>)>,
    /// The blocks that gain bits: the shard (its index in the
    /// transaction), the byte offset in the shard, the bytes to write.
    pub(super) writes: Vec<(usize, u64, Block)>,
    /// New items.
    pub(super) new: u64,
}

impl Plan {
    /// The count it queues (`HINCRBY`), if any.
    pub(super) fn count<'a>(&self, tx: &'a Tx) -> Option<(&'a str, u64)> {
        match (&tx.count_key, self.new) {
            (Some(key), n) if n > 0 => Some((key.as_str(), n)),
            _ => None,
        }
    }
}

/// Whether every bit of `mask` is set in `block`.
fn has(block: &Block, mask: &[u64; 8]) -> bool {
    mask.iter().enumerate().all(|(w, &m)| {
        let word = u64::from_le_bytes(block[w * 8..w * 8 + 8].try_into().expect("8 bytes"));
        word & m == m
    })
}

/// Sets the bits of `mask` in `block`.
fn set(block: &mut Block, mask: &[u64; 8]) {
    for (w, &m) in mask.iter().enumerate() {
        let word = u64::from_le_bytes(block[w * 8..w * 8 + 8].try_into().expect("8 bytes"));
        block[w * 8..w * 8 + 8].copy_from_slice(&(word | m).to_le_bytes());
    }
}

/// What transaction `tx` writes and answers, from its items' blocks as
/// read (`read`: per shard, per item, 64 bytes): each item in order is
/// new when some of its bits is 0 in its block as the items before it
/// left it, and each block that gains bits is written whole.
pub(super) fn plan(tx: &Tx, read: &[Vec<Option<&[u8]>>]) -> Plan {
    let mut items = Vec::with_capacity(tx.items());
    let mut writes = Vec::new();
    let mut new_items = 0;
    for (si, (s, blocks)) in tx.shards.iter().zip(read).enumerate() {
        // The shard's blocks as the items so far left them, each with the
        // index of its write once it gains bits.
        let mut touched: Vec<(u64, Block, Option<usize>)> = Vec::new();
        for ((id, offset, mask), bytes) in s.items.iter().zip(blocks) {
            let b = match touched.iter().position(|t| t.0 == *offset) {
                Some(b) => b,
                None => {
                    let block: Block = bytes.expect("checked whole").try_into().expect("64 bytes");
                    touched.push((*offset, block, None));
                    touched.len() - 1
                }
            };
            let t = &mut touched[b];
            let new = !has(&t.1, mask);
            if new {
                new_items += 1;
                set(&mut t.1, mask);
                if t.2.is_none() {
                    t.2 = Some(writes.len());
                    writes.push((si, *offset, [0; BLOCK_BYTES as usize]));
                }
            }
            items.push((*id, new, t.2.filter(|_| new)));
        }
        for (offset, block, w) in touched {
            if let Some(w) = w {
                writes[w] = (si, offset, block);
            }
        }
    }
    Plan {
        items,
        writes,
        new: new_items,
    }
}
