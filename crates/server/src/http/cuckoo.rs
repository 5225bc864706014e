//! The HTTP API on deletable filters, cuckoo and counting
//! (`docs/http-api.md`, "Cuckoo and counting filters"): `POST …/add` and
//! `POST …/remove` answer for them here, and
//! `POST /v1/filters` with `"layout": "cuckoo"` or `"counting"` creates
//! one; `…/remove` on a Bloom filter is refused with 409 `not_deletable`.
//! Their checks and descriptions are every filter's (`http.rs`: one
//! lookup call on the store's filter, the library's verdict; one
//! `Filter::describe`).
//!
//! Items are raw keys unless the filter was created with a `kind` (or built
//! by the CLI with one): then they are canonicalized as the CLI does, and a
//! CLI-built filter's whitelist applies to checks. An
//! add adds a copy (RedisBloom's `CF.ADD`: added twice, an item needs two
//! removes), a remove deletes one copy. Replies wait for the log's fsync,
//! as Bloom adds do.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};

use super::error::{blocking, can_write, ApiError, ApiResult, St};
use super::parse_items;
use crate::store::deletable::{CfAdded, CfLayout, CfNamed, DeletableSpec};
use crate::App;
use bloomgate_blacklist::DeletableArgs;

fn too_long(app: &App, item: &str) -> bool {
    item.len() > app.limits.max_item_bytes
}

/// `POST /v1/filters/NAME/add` on a cuckoo filter: a copy of each item.
pub(super) async fn add(app: Arc<App>, n: Arc<CfNamed>, body: &[u8]) -> ApiResult {
    let items = parse_items(&app, body)?;
    if let Some(i) = items.iter().find(|i| too_long(&app, i)) {
        return Err(ApiError::bad(format!(
            "item is too long ({} bytes; the limit is {})",
            i.len(),
            app.limits.max_item_bytes
        )));
    }
    let refs: Vec<&[u8]> = items.iter().map(|s| s.as_bytes()).collect();
    let mut outcomes = Vec::with_capacity(refs.len());
    let ack = n.add(&refs, false, false, &mut outcomes)?;
    ack.wait().await?;
    let mut added = 0;
    let results: Vec<Value> = items
        .iter()
        .zip(&outcomes)
        .map(|(item, o)| match o {
            CfAdded::Added | CfAdded::Exists => {
                added += 1;
                json!({"item": item, "added": true})
            }
            CfAdded::Full => json!({"item": item, "error": "filter is full"}),
        })
        .collect();
    Ok(Json(json!({"added": added, "results": results})).into_response())
}

/// `POST /v1/filters/NAME/remove`: one copy of each item from a cuckoo
/// filter; a Bloom filter cannot, and says why.
pub(super) async fn remove(
    State(app): St,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    can_write(&app, &headers)?;
    let Some(n) = app.store.cf_get(&name) else {
        if let Some(f) = app.store.get(&name) {
            f.changeable()?;
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "not_deletable",
                format!(
                    "'{name}' is a Bloom filter, which cannot remove items: its bits are shared \
                     with other items, and clearing them would make those false negatives; a \
                     list that needs removals belongs in a cuckoo or counting filter (CF.RESERVE, or \
                     a create with \"layout\": \"cuckoo\" or \"counting\")"
                ),
            ));
        }
        if let Some(e) = app.store.damaged_error(&name) {
            return Err(e.into());
        }
        return Err(crate::store::StoreError::NotFound(name).into());
    };
    let items = parse_items(&app, &body)?;
    let mut results = Vec::with_capacity(items.len());
    let mut last_ack = None;
    let mut removed = 0;
    for item in &items {
        let (found, ack) = match n.delete_item(item.as_bytes()) {
            Ok(r) => r,
            // Refused for this item alone (nothing changed): said per item,
            // as a full filter is for an add.
            Err(e @ crate::store::StoreError::Ambiguous(_)) => {
                results.push(json!({"item": item, "removed": false, "error": e.to_string()}));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        removed += found as u64;
        results.push(json!({"item": item, "removed": found}));
        // The log acknowledges in order: the last ack covers all.
        last_ack = Some(ack);
    }
    if let Some(ack) = last_ack {
        ack.wait().await?;
    }
    Ok(Json(json!({"removed": removed, "results": results})).into_response())
}

/// `POST /v1/filters` with `"layout": "cuckoo"` or `"counting"`: the
/// library's defaults for the HTTP API ([`DeletableSpec::new`]: buckets of
/// 4, 500 evictions, growing by sub-filters of the same size) with `items`
/// at rate `fp` per sub-filter, checked by the same limits as `CF.RESERVE`.
pub(super) async fn create(
    app: Arc<App>,
    layout: CfLayout,
    name: String,
    items: u64,
    fp: f64,
    kind: bloomgate_url::KeyKind,
    mode: bloomgate_url::MatchMode,
) -> ApiResult {
    let args = DeletableArgs {
        capacity: i64::try_from(items).unwrap_or(i64::MAX),
        error_rate: Some(fp),
        ..DeletableArgs::default()
    };
    let defaults = DeletableSpec {
        kind,
        mode,
        ..DeletableSpec::new(layout, fp)
    };
    let spec = args
        .settle(&defaults)
        .map_err(|e| ApiError::bad(e.to_string()))?;
    let n = blocking(move || app.store.cf_create(&name, &spec)).await??;
    let mut v = serde_json::to_value(n.info()).unwrap_or_default();
    v["type"] = json!(layout.name());
    Ok((StatusCode::CREATED, Json(v)).into_response())
}
