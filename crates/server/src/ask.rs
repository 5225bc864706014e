//! One item asked of one served filter, named by the asker: the question
//! of the front ends that speak other programs' protocols — nginx's
//! `auth_request` (`GET /v1/filters/NAME/auth`, in [`crate::http`]) and
//! Postfix's socketmap ([`crate::socketmap`]).
//!
//! The verdict is the store's ([`crate::store::Filter::check_batch`], for every kind of
//! filter): the same key rules and whitelist as `bloomgate check` and every
//! other front end;
//! nothing is decided here but how the three outcomes are told apart:
//!
//! * a [`Verdict`] (hit, whitelisted, or not on the list);
//! * [`Asked::Invalid`]: the item is not a key of the filter's kind (a
//!   string that is no URL for a `url` filter); each front end says what
//!   that means in its protocol;
//! * a [`StoreError`]: the filter cannot answer (unknown, damaged, a store
//!   that cannot be reached; [`StoreError::Invalid`] for an item longer
//!   than `--max-item-bytes`, which it does not look at) — never "absent".

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bloomgate_blacklist::Verdict;

use crate::store::{LookupScratch, StoreError};
use crate::App;

/// The answer about one item.
#[derive(Debug)]
pub enum Asked {
    /// The filter's verdict.
    Verdict(Verdict),
    /// The item cannot be a key of this filter; why.
    Invalid(String),
}

/// Asks filter `name` about `item`, off the event loop when the store's
/// calls may block. Counted in the server's metrics as a check.
pub async fn ask(app: &Arc<App>, name: &str, item: &[u8]) -> Result<Asked, StoreError> {
    if item.len() > app.limits.max_item_bytes {
        return Err(StoreError::Invalid(format!(
            "item is too long ({} bytes; the limit is {})",
            item.len(),
            app.limits.max_item_bytes
        )));
    }
    app.metrics.items_checked.fetch_add(1, Relaxed);
    let asked = if app.store.is_remote() {
        let (app, name, item) = (app.clone(), name.to_string(), item.to_vec());
        tokio::task::spawn_blocking(move || check(&app, &name, &item))
            .await
            .map_err(|e| StoreError::Unavailable(format!("lookup task failed: {e}")))??
    } else {
        check(app, name, item)?
    };
    if let Asked::Verdict(v) = &asked {
        if v.hit {
            app.metrics.hits.fetch_add(1, Relaxed);
        }
        if v.whitelisted {
            app.metrics.whitelisted.fetch_add(1, Relaxed);
        }
    }
    Ok(asked)
}

/// The filter's verdict through the store.
fn check(app: &App, name: &str, item: &[u8]) -> Result<Asked, StoreError> {
    let filter = app.store.need(name)?;
    let mut answer = None;
    filter.check_batch(&[item], &mut LookupScratch::default(), |v| answer = Some(v))?;
    match answer {
        Some(Ok(v)) => Ok(Asked::Verdict(v)),
        Some(Err(e)) => Ok(Asked::Invalid(e.to_string())),
        None => Err(StoreError::Unavailable(format!(
            "filter '{name}' gave no answer"
        ))),
    }
}
