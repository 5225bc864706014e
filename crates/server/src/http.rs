//! The HTTP/JSON API (axum), documented in `docs/http-api.md`.
//!
//! The accept loop is our own (hyper's HTTP/1 connection builder) rather
//! than `axum::serve`, so that it can enforce a connection limit and a
//! header-read timeout; bodies are bounded by axum's `DefaultBodyLimit`, and
//! a middleware bounds each request's total time. Errors are JSON
//! `{"error": {"code": "...", "message": "..."}}` with a fitting status.
//!
//! CPU-light handlers (checks, adds) run inline on the runtime; anything that
//! may touch whole files (create, reload, delete, snapshot, metrics with
//! fill ratios) runs on the blocking pool.
//!
//! This file holds the router, the filters' handlers (every kind through
//! the store's one interface: a check, an add, a remove, a whitelist edit
//! or an info is one call whatever the filter) and the accept loop;
//! `http/error.rs` the errors ([`ApiError`]) and access checks,
//! `http/gate.rs` the middleware every request passes (timing, counting,
//! refusals before the body is read, JSON errors), `http/cuckoo.rs` the
//! creation of deletable filters, `http/nginx.rs` the endpoint of nginx's
//! `auth_request`.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

mod cuckoo;
mod error;
mod gate;
mod nginx;

pub use error::ApiError;
use error::{blocking, can_read, can_write, ApiResult, St};
use gate::observe;

use crate::metrics::Proto;
use crate::store::{
    AddOutcome, FillPolicy, Filter, FilterSpec, LookupScratch, Purpose, StoreError,
};
use crate::App;
use bloomgate_blacklist::spec::{parse_purpose, FillArgs, SpecError};
/// The router (without the accept loop), for embedding and tests.
pub fn router(app: Arc<App>) -> Router {
    let limit = app.limits.max_body_bytes;
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/filters", get(list).post(create))
        .route("/v1/filters/{name}", get(info).delete(delete))
        .route("/v1/filters/{name}/check", get(check_one).post(check_batch))
        .route("/v1/filters/{name}/add", post(add))
        .route("/v1/filters/{name}/remove", post(remove))
        .route(
            "/v1/filters/{name}/whitelist",
            get(whitelist_list)
                .post(whitelist::<true>)
                .delete(whitelist::<false>),
        )
        .route("/v1/filters/{name}/reload", post(reload))
        .route("/v1/filters/{name}/auth", get(nginx::by_path))
        .route("/v1/auth", get(nginx::by_header))
        .route("/v1/snapshot", post(snapshot))
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
        })
        .layer(axum::middleware::from_fn_with_state(app.clone(), observe))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(app)
}

/// Always 200 while the server answers (reads work); `status` is
/// `read_only`, with the reason, while writes are refused (a full disk),
/// and `degraded`, with `damaged` listing them, while filters are damaged
/// (their files failed to load; the others are served). With a remote
/// store (Redis), its state too: 503 `store_unavailable` while a master
/// does not answer `PING`.
async fn healthz(State(app): St) -> Response {
    if app.store.is_remote() {
        let store = app.store.clone();
        let Ok(Some(h)) = blocking(move || store.remote_health()).await else {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        let state = json!({
            "reachable": h.reachable,
            "error": h.error,
            "last_error": h.last_error,
            "unavailable_answers": h.unavailable_answers,
        });
        return if h.reachable {
            Json(json!({"status": "ok", "writable": true, "store": state})).into_response()
        } else {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "store_unavailable", "writable": false, "store": state})),
            )
                .into_response()
        };
    }
    let mut v = match app.store.write_failure() {
        None => json!({"status": "ok", "writable": true}),
        Some(e) => json!({
            "status": "read_only",
            "writable": false,
            "reason": e.to_string(),
        }),
    };
    let damaged = app.store.damaged();
    if !damaged.is_empty() {
        v["status"] = json!("degraded");
        v["damaged"] = json!(damaged);
    }
    Json(v).into_response()
}

async fn metrics(State(app): St, headers: HeaderMap) -> ApiResult {
    can_read(&app, &headers)?;
    let text = blocking(move || {
        let mut out = String::with_capacity(16 << 10);
        app.metrics.render(&mut out);
        app.store.render_metrics(&mut out);
        crate::metrics::render_input(&app.input, &mut out);
        out
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

async fn list(State(app): St, headers: HeaderMap) -> ApiResult {
    can_read(&app, &headers)?;
    let app2 = app.clone();
    let infos = maybe_blocking(app.store.is_remote(), move || {
        app2.store
            .filters()
            .iter()
            .map(|n| n.info(false))
            .collect::<Result<Vec<_>, _>>()
    })
    .await??;
    let cuckoo: Vec<Value> = app
        .store
        .cf_all()
        .iter()
        .filter_map(|n| n.cf_info().ok())
        .map(|i| serde_json::to_value(i).unwrap_or_default())
        .collect();
    let damaged = app.store.damaged();
    Ok(
        Json(json!({ "filters": infos, "cuckoo_filters": cuckoo, "damaged_filters": damaged }))
            .into_response(),
    )
}

/// What a request on a filter needs of its token.
#[derive(Clone, Copy)]
enum Access {
    Read,
    Write,
}

/// The filter called `name`, for a request whose token grants `access`
/// (refused before the filter is looked up, or the body read): the
/// prologue of every handler on one filter. Found off the event loop for
/// a remote store, which may ask the network for a name it does not
/// serve yet.
async fn named(
    app: &Arc<App>,
    headers: &HeaderMap,
    access: Access,
    name: &str,
) -> Result<Filter, ApiError> {
    match access {
        Access::Read => can_read(app, headers)?,
        Access::Write => can_write(app, headers)?,
    }
    if app.store.is_remote() {
        let (app, name) = (app.clone(), name.to_string());
        return Ok(blocking(move || app.store.need(&name)).await??);
    }
    Ok(app.store.need(name)?)
}

async fn info(State(app): St, headers: HeaderMap, Path(name): Path<String>) -> ApiResult {
    let n = named(&app, &headers, Access::Read, &name).await?;
    Ok(Json(blocking(move || n.describe()).await??).into_response())
}

#[derive(Deserialize)]
struct ItemQuery {
    item: Option<String>,
}

/// Runs `f` on the blocking pool when `off_loop` (a remote store's calls),
/// else right here.
async fn maybe_blocking<T: Send + 'static>(
    off_loop: bool,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    if off_loop {
        blocking(f).await
    } else {
        Ok(f())
    }
}

/// The verdicts on `items`, one JSON object each (an item too long or not
/// a valid key gets an `error` instead).
fn check_items(app: &App, n: &Filter, items: &[String]) -> Result<Vec<Value>, StoreError> {
    app.metrics
        .items_checked
        .fetch_add(items.len() as u64, Relaxed);
    let max = app.limits.max_item_bytes;
    let queries: Vec<&[u8]> = items
        .iter()
        .filter(|i| i.len() <= max)
        .map(|i| i.as_bytes())
        .collect();
    let mut verdicts = Vec::with_capacity(queries.len());
    n.check_batch(&queries, &mut LookupScratch::default(), |v| {
        verdicts.push(v)
    })?;
    let mut verdicts = verdicts.into_iter();
    Ok(items
        .iter()
        .map(|item| {
            if item.len() > max {
                return json!({"item": item, "error": "item is too long"});
            }
            match verdicts.next() {
                Some(Ok(v)) => {
                    if v.hit {
                        app.metrics.hits.fetch_add(1, Relaxed);
                    }
                    if v.whitelisted {
                        app.metrics.whitelisted.fetch_add(1, Relaxed);
                    }
                    json!({"item": item, "hit": v.hit, "whitelisted": v.whitelisted, "matched": v.matched})
                }
                Some(Err(e)) => json!({"item": item, "error": e.to_string()}),
                None => json!({"item": item, "error": "no answer"}),
            }
        })
        .collect())
}

/// [`check_items`], off the event loop when the store's calls block.
async fn check_off_loop(
    app: Arc<App>,
    n: Filter,
    items: Vec<String>,
) -> Result<Vec<Value>, ApiError> {
    Ok(maybe_blocking(app.store.is_remote(), move || check_items(&app, &n, &items)).await??)
}

async fn check_one(
    State(app): St,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<ItemQuery>,
) -> ApiResult {
    let n = named(&app, &headers, Access::Read, &name).await?;
    let item = q
        .item
        .ok_or_else(|| ApiError::bad("missing query parameter 'item'"))?;
    let v = check_off_loop(app, n, vec![item])
        .await?
        .pop()
        .unwrap_or_default();
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        return Err(ApiError::bad(format!("invalid item: {e}")));
    }
    Ok(Json(v).into_response())
}

/// A batch body's object form, `{"items": [...]}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ItemsObject {
    items: Vec<String>,
}

/// Parses a batch body: a JSON array of strings, or `{"items": [...]}`
/// (and no other field: a misspelt one is an error naming it, not ignored).
pub fn parse_item_list(body: &[u8]) -> Result<Vec<String>, serde_json::Error> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => serde_json::from_slice::<ItemsObject>(body).map(|o| o.items),
        _ => serde_json::from_slice::<Vec<String>>(body),
    }
}

fn parse_items(app: &App, body: &[u8]) -> Result<Vec<String>, ApiError> {
    let items = parse_item_list(body).map_err(|e| {
        ApiError::bad(format!(
            "body must be a JSON array of strings or {{\"items\": [...]}}: {e}"
        ))
    })?;
    if items.len() > app.limits.max_batch {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_many_items",
            format!(
                "{} items in one request; the limit is {}",
                items.len(),
                app.limits.max_batch
            ),
        ));
    }
    Ok(items)
}

async fn check_batch(
    State(app): St,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    let n = named(&app, &headers, Access::Read, &name).await?;
    let items = parse_items(&app, &body)?;
    let results = check_off_loop(app, n, items).await?;
    Ok(Json(json!({ "results": results })).into_response())
}

async fn add(
    State(app): St,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    let n = named(&app, &headers, Access::Write, &name).await?;
    let items = parse_items(&app, &body)?;
    let app2 = app.clone();
    // Off the event loop when the add may wait: a remote store's, a static
    // list's (it syncs its file of added keys before it returns), one
    // behind a lock another thread holds.
    let off_loop = n.add_would_block();
    let (items, outcomes, ack) = maybe_blocking(off_loop, move || {
        let refs: Vec<&[u8]> = items.iter().map(|s| s.as_bytes()).collect();
        let mut outcomes = Vec::with_capacity(refs.len());
        let ack = app2.store.add(&n, &refs, &mut outcomes)?;
        Ok::<_, StoreError>((items, outcomes, ack))
    })
    .await??;
    ack.wait().await?;
    let mut added = 0;
    let results: Vec<Value> = items
        .iter()
        .zip(outcomes.iter().map(Some).chain(std::iter::repeat(None)))
        .map(|(item, o)| match o {
            Some(AddOutcome::New) => {
                added += 1;
                json!({"item": item, "added": true})
            }
            Some(AddOutcome::Exists) => json!({"item": item, "added": false}),
            Some(AddOutcome::Invalid(e)) => {
                json!({"item": item, "error": format!("invalid item: {e}")})
            }
            Some(AddOutcome::TooLong) => json!({"item": item, "error": "item is too long"}),
            Some(AddOutcome::Full) | None => {
                json!({"item": item, "error": "filter is full (non-scaling)"})
            }
            Some(AddOutcome::NoRoom) => json!({"item": item, "error": "filter is full"}),
        })
        .collect();
    Ok(Json(json!({"added": added, "results": results})).into_response())
}

/// `POST /v1/filters/NAME/remove`: one copy of each item from a deletable
/// filter; any other filter refuses before the body is read (a Bloom
/// filter with 409 `not_deletable`, saying why).
async fn remove(
    State(app): St,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    let n = named(&app, &headers, Access::Write, &name).await?;
    n.removable()?;
    let items = parse_items(&app, &body)?;
    let mut results = Vec::with_capacity(items.len());
    let mut last_ack = None;
    let mut removed = 0;
    for item in &items {
        let (found, ack) = match app.store.remove(&n, item.as_bytes()) {
            Ok(r) => r,
            // Refused for this item alone (nothing changed): said per item,
            // as a full filter is for an add.
            Err(e @ StoreError::Ambiguous(_)) => {
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

/// `POST /v1/filters/NAME/whitelist` (`ADD`) and `DELETE` (not `ADD`):
/// whitelist edits of any filter, durable when answered.
async fn whitelist<const ADD: bool>(
    State(app): St,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    let add = ADD;
    let n = named(&app, &headers, Access::Write, &name).await?;
    let items = parse_items(&app, &body)?;
    let results = blocking(move || {
        let refs: Vec<&[u8]> = items.iter().map(|s| s.as_bytes()).collect();
        app.store.whitelist(&n, &refs, add).map(|r| (items, r))
    })
    .await??;
    let (items, r) = results;
    let key = if add { "was_hit" } else { "removed" };
    let results: Vec<Value> = items
        .iter()
        .zip(r)
        .map(|(item, r)| match r {
            Ok(b) => json!({"item": item, key: b}),
            Err(e) => json!({"item": item, "error": format!("invalid item: {e}")}),
        })
        .collect();
    Ok(Json(json!({ "results": results })).into_response())
}

/// `GET /v1/filters/NAME/whitelist` paging: at most `limit` entries
/// (default and most [`WHITELIST_PAGE`]) after the key `after` (or
/// `after_hex`, a key that is not UTF-8, in hex).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WhitelistPage {
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    after_hex: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

/// Whitelist entries per `GET /v1/filters/NAME/whitelist` answer, at most.
const WHITELIST_PAGE: usize = 10_000;

/// `GET /v1/filters/NAME/whitelist`: the whitelisted keys (normalized, as
/// lookups match them), sorted, a page at a time: `{"count", "entries",
/// "next"}`, where `next` holds the query parameters of the next page
/// (`{"after": KEY}` or `{"after_hex": HEX}`; `null` after the last). A key
/// that is not UTF-8 (a raw key built from bytes) is given as
/// `{"hex": "…"}`.
async fn whitelist_list(
    State(app): St,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(page): Query<WhitelistPage>,
) -> ApiResult {
    let n = named(&app, &headers, Access::Read, &name).await?;
    let limit = page.limit.unwrap_or(WHITELIST_PAGE);
    if !(1..=WHITELIST_PAGE).contains(&limit) {
        return Err(ApiError::bad(format!(
            "limit must be 1..={WHITELIST_PAGE}, got {limit}"
        )));
    }
    let after: Option<Vec<u8>> = match (page.after, page.after_hex) {
        (Some(_), Some(_)) => return Err(ApiError::bad("give 'after' or 'after_hex', not both")),
        (Some(a), None) => Some(a.into_bytes()),
        (None, Some(h)) => Some(unhex(&h).ok_or_else(|| ApiError::bad("after_hex is not hex"))?),
        (None, None) => None,
    };
    let w = blocking(move || n.whitelisted()).await??;
    let mut keys = w.iter_after(after.as_deref());
    let page: Vec<&[u8]> = keys.by_ref().take(limit).collect();
    let next = match (keys.next(), page.last()) {
        (Some(_), Some(last)) => match std::str::from_utf8(last) {
            Ok(s) => json!({ "after": s }),
            Err(_) => json!({ "after_hex": hex(last) }),
        },
        _ => Value::Null,
    };
    let entries: Vec<Value> = page
        .iter()
        .map(|k| match std::str::from_utf8(k) {
            Ok(s) => json!(s),
            Err(_) => json!({ "hex": hex(k) }),
        })
        .collect();
    Ok(Json(json!({"count": w.len(), "entries": entries, "next": next})).into_response())
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex string (either case), or `None`.
fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A create request. Unknown fields are refused (a misspelt `"polcy"`
/// would otherwise make a filter of the default policy without a word).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    /// Items to plan for.
    items: u64,
    /// False-positive rate per query.
    fp: f64,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    layout: Option<String>,
    /// Fill policy: `fixed` (default), `grow`, `refuse`, `rotate`, `clear`.
    #[serde(default)]
    policy: Option<String>,
    /// `grow`: capacity multiplier of each new layer (default 2).
    #[serde(default)]
    expansion: Option<u64>,
    /// `rotate`: generations in the ring (default 4).
    #[serde(default)]
    generations: Option<u64>,
    /// `rotate`: window in new adds (default `items`).
    #[serde(default)]
    window: Option<u64>,
    /// `rotate`: window in seconds (optional).
    #[serde(default)]
    window_secs: Option<u64>,
    /// `clear`: the fill ratio that clears (default 0.8, the seeds').
    #[serde(default)]
    clear_at: Option<f64>,
    /// `blacklist` (default) or `dedup`: only dedup/cache filters of url
    /// or host keys may forget entries.
    #[serde(default)]
    purpose: Option<String>,
}

/// The fill policy and purpose a create request asks for (defaults and
/// limits: [`FilterSpec`]).
fn create_policy(b: &CreateBody) -> Result<(FillPolicy, Purpose), SpecError> {
    let purpose = b
        .purpose
        .as_deref()
        .map_or(Ok(Purpose::Blacklist), parse_purpose)?;
    let fill = FillArgs {
        policy: b.policy.as_deref(),
        expansion: b.expansion.map(|v| ("expansion", v)),
        generations: b.generations.map(|v| ("generations", v)),
        window: b.window.map(|v| ("window", v)),
        window_secs: b.window_secs.map(|v| ("window_secs", v)),
        clear_at: b.clear_at.map(|v| ("clear_at", v)),
    }
    .resolve(b.items, "fixed")?;
    Ok((fill, purpose))
}

async fn create(State(app): St, headers: HeaderMap, body: axum::body::Bytes) -> ApiResult {
    can_write(&app, &headers)?;
    let b: CreateBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad(format!("bad create request: {e}")))?;
    let kind = match &b.kind {
        Some(k) => k
            .parse()
            .map_err(|e: bloomgate_url::ParseKindError| ApiError::bad(e.to_string()))?,
        None => bloomgate_url::KeyKind::Raw,
    };
    let mode = match &b.mode {
        Some(m) => m
            .parse()
            .map_err(|e: bloomgate_url::ParseKindError| ApiError::bad(e.to_string()))?,
        None => bloomgate_url::MatchMode::Exact,
    };
    let deletable = match b.layout.as_deref() {
        Some("cuckoo") => Some(crate::store::deletable::CfLayout::Cuckoo),
        Some("counting") => Some(crate::store::deletable::CfLayout::Counting),
        _ => None,
    };
    if let Some(layout) = deletable {
        if b.policy.is_some() {
            return Err(ApiError::bad(
                "a fill policy applies to Bloom filters; a cuckoo filter grows by sub-filters and a counting filter never fills",
            ));
        }
        return cuckoo::create(app, layout, b.name, b.items, b.fp, kind, mode).await;
    }
    let layout = match b.layout.as_deref() {
        None | Some("blocked") => bloomgate_engine::Layout::Blocked,
        Some("classic") => bloomgate_engine::Layout::Classic,
        Some(other) => {
            return Err(ApiError::bad(format!(
                "unknown layout '{other}' (blocked, classic, cuckoo, counting)"
            )))
        }
    };
    let bad = |e: SpecError| ApiError::bad(e.to_string());
    let mut spec = FilterSpec {
        kind,
        mode,
        layout,
        ..FilterSpec::new(b.items, b.fp)
    };
    spec.validate().map_err(bad)?;
    (spec.fill, spec.purpose) = create_policy(&b).map_err(bad)?;
    spec.validate().map_err(bad)?;
    let name = b.name;
    let info =
        blocking(move || app.store.create(&name, &spec).and_then(|n| n.info(true))).await??;
    Ok((StatusCode::CREATED, Json(info)).into_response())
}

async fn delete(State(app): St, headers: HeaderMap, Path(name): Path<String>) -> ApiResult {
    can_write(&app, &headers)?;
    let n2 = name.clone();
    let existed = blocking(move || app.store.delete(&n2)).await??;
    if !existed {
        return Err(StoreError::NotFound(name).into());
    }
    Ok(Json(json!({"deleted": name})).into_response())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ReloadBody {
    path: Option<String>,
    /// Discard acknowledged live adds (and reset the journal) instead of
    /// carrying them over into the reloaded file.
    #[serde(default)]
    drop_live_adds: bool,
}

async fn reload(
    State(app): St,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    can_write(&app, &headers)?;
    let b: ReloadBody = if body.iter().all(u8::is_ascii_whitespace) {
        ReloadBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad(format!("bad reload request: {e}")))?
    };
    let info = blocking(move || {
        app.store
            .reload(
                &name,
                b.path.as_deref().map(std::path::Path::new),
                b.drop_live_adds,
            )
            .and_then(|n| n.info(true))
    })
    .await??;
    Ok(Json(info).into_response())
}

async fn snapshot(State(app): St, headers: HeaderMap) -> ApiResult {
    can_write(&app, &headers)?;
    let rep = blocking(move || app.store.snapshot()).await??;
    Ok(Json(rep).into_response())
}

/// Accepts HTTP connections until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let sem = Arc::new(Semaphore::new(app.limits.max_connections));
    let router = router(app.clone());
    let header_timeout = app.limits.request_timeout;
    let idle = app.limits.idle_timeout;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let Ok(permit) = sem.clone().try_acquire_owned() else {
            app.metrics.connections_rejected[Proto::Http as usize].fetch_add(1, Relaxed);
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let mut stream = stream;
                let body = r#"{"error":{"code":"too_many_connections","message":"connection limit reached"}}"#;
                let msg = format!(
                    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ =
                    tokio::time::timeout(Duration::from_secs(1), stream.write_all(msg.as_bytes()))
                        .await;
            });
            continue;
        };
        let svc = hyper_util::service::TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            app.metrics.connections[Proto::Http as usize].fetch_add(1, Relaxed);
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout.min(idle))
                .keep_alive(true);
            // The connection comes back when hyper is done with it, to be
            // closed gracefully: an answer given before the body was read
            // (413 from the headers, 401) reaches a client that is still
            // sending it, instead of being lost to a reset.
            let conn = builder
                .serve_connection(TokioIo::new(stream), svc)
                .without_shutdown();
            if let Ok(parts) = conn.await {
                let mut stream = parts.io.into_inner();
                crate::resp::close_gracefully(&mut stream).await;
            }
            app.metrics.connections[Proto::Http as usize].fetch_sub(1, Relaxed);
            drop(permit);
        });
    }
}

/// Builds an empty body (helper for tests).
pub fn empty() -> Body {
    Body::empty()
}
