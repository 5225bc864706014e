//! Creating a deletable filter over HTTP (`docs/http-api.md`, "Cuckoo and
//! counting filters"): `POST /v1/filters` with `"layout": "cuckoo"` or
//! `"counting"`, from the library's spec ([`DeletableSpec`]). Everything
//! else on such a filter is every filter's handler (`http.rs`): its
//! checks, adds (a copy each, as RedisBloom's `CF.ADD`: added twice, an
//! item needs two removes), removes (one copy; a Bloom filter refuses with
//! 409 `not_deletable`), whitelist edits and descriptions go through the
//! store's filter, whose lookups, adds, removes and whitelist edits are the
//! library's list's. Items are raw keys unless the filter was created with
//! a `kind` (or built by the CLI with one): then they are canonicalized as
//! the CLI does. Its whitelist applies to checks, as every filter's.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use super::error::{blocking, ApiError, ApiResult};
use crate::store::deletable::{CfLayout, DeletableSpec};
use crate::App;
use bloomgate_blacklist::DeletableArgs;

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
    let mut v = serde_json::to_value(n.cf_info()?).unwrap_or_default();
    v["type"] = json!(layout.name());
    Ok((StatusCode::CREATED, Json(v)).into_response())
}
