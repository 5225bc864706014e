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

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

mod cuckoo;

use crate::auth::Denied;
use crate::metrics::{Op, Proto};
use crate::store::{
    AddOutcome, FillPolicy, Filter, FilterSpec, LookupScratch, Purpose, StoreError,
};
use crate::App;
use bloomgate_blacklist::spec::{parse_purpose, FillArgs, SpecError};

/// An API error: status, machine code, message.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
    fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

/// The one place where store errors become HTTP errors.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let (status, code) = match &e {
            e if e.is_no_space() => (StatusCode::INSUFFICIENT_STORAGE, "no_space"),
            StoreError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            StoreError::Exists(_) => (StatusCode::CONFLICT, "exists"),
            StoreError::Ambiguous(_) => (StatusCode::CONFLICT, "ambiguous_delete"),
            StoreError::BadName(_) | StoreError::Invalid(_) => {
                (StatusCode::BAD_REQUEST, "bad_request")
            }
            StoreError::Io { .. }
            | StoreError::File(_)
            | StoreError::Files(_)
            | StoreError::DirBusy(_) => (StatusCode::UNPROCESSABLE_ENTITY, "file_error"),
            StoreError::Wal(_) => (StatusCode::SERVICE_UNAVAILABLE, "log_failed"),
            StoreError::Damaged(_) => (StatusCode::SERVICE_UNAVAILABLE, "damaged"),
            StoreError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            StoreError::Unsupported(_) => (StatusCode::NOT_IMPLEMENTED, "unsupported"),
            StoreError::OutOfMemory(_) => (StatusCode::INSUFFICIENT_STORAGE, "out_of_memory"),
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<Denied> for ApiError {
    fn from(d: Denied) -> Self {
        match d {
            Denied::NeedToken => {
                ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", d.message())
            }
            Denied::WritesDisabled => {
                ApiError::new(StatusCode::FORBIDDEN, "forbidden", d.message())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (
            self.status,
            Json(json!({"error": {"code": self.code, "message": self.message}})),
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        r
    }
}

type ApiResult = Result<Response, ApiError>;
type St = State<Arc<App>>;

fn authed(app: &App, headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .is_some_and(|t| app.access.token_matches(t.trim_ascii()))
}

fn can_read(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    Ok(app.access.check_read(authed(app, headers))?)
}

fn can_write(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    Ok(app.access.check_write(authed(app, headers))?)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))
}

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
        .route("/v1/filters/{name}/remove", post(cuckoo::remove))
        .route(
            "/v1/filters/{name}/whitelist",
            post(whitelist_add).delete(whitelist_remove),
        )
        .route("/v1/filters/{name}/reload", post(reload))
        .route("/v1/snapshot", post(snapshot))
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
        })
        .layer(axum::middleware::from_fn_with_state(app.clone(), observe))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(app)
}

/// Times every request, bounds its duration, and counts it.
async fn observe(State(app): St, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let path = req.uri().path();
    let op = if path.ends_with("/check") {
        Op::Check
    } else if path.ends_with("/add") {
        Op::Add
    } else if path.starts_with("/v1/filters") && req.method() == axum::http::Method::GET {
        Op::Info
    } else if path.starts_with("/v1/") {
        Op::Admin
    } else {
        Op::Other
    };
    if let Some(refused) = refuse_early(&app, &req) {
        app.metrics.record(Proto::Http, op, start.elapsed(), true);
        return refused.into_response();
    }
    // A body holds its share of the input budget while the request runs
    // (its announced length, or the largest allowed for a chunked one):
    // of the small budget of clients without the token, when one is
    // configured and was not presented.
    let body_bytes = declared_body(&req)
        .map(|n| n.min(app.limits.max_body_bytes as u64) as usize)
        .unwrap_or(0);
    let anonymous = app.access.has_token() && !authed(&app, req.headers());
    let budget = if anonymous {
        &app.input_unauth
    } else {
        &app.input
    };
    let _reserved = if body_bytes > 0 {
        match budget.reserve(body_bytes) {
            Some(r) => Some(r),
            None => {
                app.metrics.record(Proto::Http, op, start.elapsed(), true);
                let whose = if anonymous {
                    "clients without the token"
                } else {
                    "all clients"
                };
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "input_budget",
                    format!(
                        "the buffered input of {whose} is at its budget ({} MiB, --max-input-memory); retry later",
                        budget.limit() >> 20
                    ),
                )
                .into_response();
            }
        }
    } else {
        None
    };
    let timeout = app.limits.request_timeout;
    let resp = match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            "request took too long",
        )
        .into_response(),
    };
    let error = resp.status().is_client_error() || resp.status().is_server_error();
    let resp = if error { json_error(resp).await } else { resp };
    app.metrics.record(Proto::Http, op, start.elapsed(), error);
    resp
}

/// The body length a request announces: its `Content-Length`, `u64::MAX`
/// for a chunked body (any length), `None` for no body. An unparsable
/// `Content-Length` counts as no body here (hyper refuses the request).
fn declared_body(req: &Request) -> Option<u64> {
    let h = req.headers();
    if let Some(v) = h.get(header::CONTENT_LENGTH) {
        return v
            .to_str()
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0);
    }
    h.contains_key(header::TRANSFER_ENCODING)
        .then_some(u64::MAX)
}

/// True if a `Host` header names this machine's loopback: `localhost` or
/// a name under `.localhost` (which resolve to loopback by definition,
/// RFC 6761), or a loopback IPv4/IPv6 address; with or without a port.
fn loopback_host(host: &[u8]) -> bool {
    let Ok(host) = std::str::from_utf8(host) else {
        return false;
    };
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        // [IPv6]:port
        return rest
            .split_once(']')
            .and_then(|(ip, _)| ip.parse::<std::net::Ipv6Addr>().ok())
            .is_some_and(|ip| ip.is_loopback());
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if let Ok(ip) = name.parse::<std::net::Ipv4Addr>() {
        return ip.is_loopback();
    }
    name == "localhost" || name.ends_with(".localhost")
}

/// What is refused from the headers alone, before a byte of the body is
/// read or any of the input budget is taken:
///
/// * on a server open to the machine (no token, loopback listeners), a
///   `Host` that is not a loopback name (403 `foreign_host`): DNS
///   rebinding makes a web page's own name resolve to 127.0.0.1, and its
///   requests would then be same-origin;
/// * a `Content-Length` over the body limit: 413 at once (waiting for the
///   body would hold the connection until the request timeout);
/// * for a request that is not a plain read (any method but `GET`, `HEAD`
///   and `OPTIONS`), what a web page on another site could make a browser
///   send (cross-site request forgery; writes are open to anyone on the
///   machine when no token is configured): an `Origin` other than this
///   server's own (from its `Host`), a `Sec-Fetch-Site` other than
///   `same-origin` or `none` (403 `cross_origin`), and a body that is not
///   declared `application/json` (415): browsers send `text/plain`, form
///   and multipart bodies to other sites without asking, JSON only after a
///   CORS preflight, which this server never grants;
/// * a body from a client without the token where reads need it (401):
///   every endpoint refuses it anyway, so it is not read.
fn refuse_early(app: &App, req: &Request) -> Option<ApiError> {
    let body = declared_body(req);
    let max = app.limits.max_body_bytes as u64;
    if body.is_some_and(|n| n != u64::MAX && n > max) {
        return Some(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("a body of {} bytes; the limit is {max}", body.unwrap_or(0)),
        ));
    }
    let h = req.headers();
    if app.access.open_on_loopback() {
        if let Some(host) = h.get(header::HOST) {
            if !loopback_host(host.as_bytes()) {
                return Some(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "foreign_host",
                    format!(
                        "Host {:?} is not a loopback name: without --token-file this server answers only requests to localhost or a loopback address (a page whose own name resolves to 127.0.0.1 must not reach it)",
                        String::from_utf8_lossy(host.as_bytes())
                    ),
                ));
            }
        }
    }
    let method = req.method();
    let plain_read = method == axum::http::Method::GET
        || method == axum::http::Method::HEAD
        || method == axum::http::Method::OPTIONS;
    if !plain_read {
        if let Some(origin) = h.get(header::ORIGIN) {
            let host = h
                .get(header::HOST)
                .map(|v| v.as_bytes())
                .unwrap_or_default();
            let own = |scheme: &[u8]| {
                origin.as_bytes().strip_prefix(scheme) == Some(host) && !host.is_empty()
            };
            if !own(b"http://") && !own(b"https://") {
                return Some(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "cross_origin",
                    format!(
                        "requests from another origin ({}) may only read: this server grants no CORS",
                        String::from_utf8_lossy(origin.as_bytes())
                    ),
                ));
            }
        }
        if let Some(site) = h.get("sec-fetch-site") {
            if !matches!(site.as_bytes(), b"same-origin" | b"none") {
                return Some(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "cross_origin",
                    format!(
                        "a request from another site (Sec-Fetch-Site: {}) may only read",
                        String::from_utf8_lossy(site.as_bytes())
                    ),
                ));
            }
        }
        let json = h.get(header::CONTENT_TYPE).is_some_and(|v| {
            let v = v.as_bytes();
            let essence = v.split(|&b| b == b';').next().unwrap_or_default();
            essence
                .trim_ascii()
                .eq_ignore_ascii_case(b"application/json")
        });
        if body.is_some() && !json {
            return Some(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "a request body must be JSON, sent with Content-Type: application/json",
            ));
        }
    }
    if body.is_some()
        && req.uri().path() != "/healthz"
        && app.access.check_read(authed(app, h)).is_err()
    {
        return Some(Denied::NeedToken.into());
    }
    None
}

/// An error answer that is not JSON yet (axum's own: 405, a bad query
/// string or path, a body over the limit) in the API's error shape,
/// headers (`Allow`) kept.
async fn json_error(resp: Response) -> Response {
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let status = parts.status;
    let code = match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::REQUEST_TIMEOUT => "timeout",
        s if s.is_client_error() => "bad_request",
        _ => "internal",
    };
    let mut message = String::from_utf8_lossy(&text).trim().to_string();
    if message.is_empty() {
        message = status.canonical_reason().unwrap_or("error").to_string();
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_TYPE);
    let mut r = ApiError::new(status, code, message).into_response();
    for (k, v) in parts.headers.iter() {
        r.headers_mut().entry(k).or_insert(v.clone());
    }
    r
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
        crate::metrics::render_filters(&app.store, &mut out);
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
        .map(|n| serde_json::to_value(n.info()).unwrap_or_default())
        .collect();
    let damaged = app.store.damaged();
    Ok(
        Json(json!({ "filters": infos, "cuckoo_filters": cuckoo, "damaged_filters": damaged }))
            .into_response(),
    )
}

/// The filter called `name` (found off the event loop for a remote
/// store, which may ask the network for a name it does not serve yet).
async fn named(app: &Arc<App>, name: &str) -> Result<Filter, ApiError> {
    if app.store.is_remote() {
        let (app, name) = (app.clone(), name.to_string());
        return Ok(blocking(move || app.store.need(&name)).await??);
    }
    Ok(app.store.need(name)?)
}

async fn info(State(app): St, headers: HeaderMap, Path(name): Path<String>) -> ApiResult {
    can_read(&app, &headers)?;
    if let Some(n) = app.store.cf_get(&name) {
        return cuckoo::info(n).await;
    }
    let n = named(&app, &name).await?;
    let info = blocking(move || n.info(true)).await??;
    Ok(Json(info).into_response())
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
    can_read(&app, &headers)?;
    if let Some(n) = app.store.cf_get(&name) {
        return cuckoo::check_one(app, n, q).await;
    }
    let n = named(&app, &name).await?;
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
    can_read(&app, &headers)?;
    if let Some(n) = app.store.cf_get(&name) {
        return cuckoo::check_batch(app, n, &body).await;
    }
    let n = named(&app, &name).await?;
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
    can_write(&app, &headers)?;
    if let Some(n) = app.store.cf_get(&name) {
        return cuckoo::add(app, n, &body).await;
    }
    let n = named(&app, &name).await?;
    let items = parse_items(&app, &body)?;
    let app2 = app.clone();
    let (items, outcomes, ack) = maybe_blocking(app.store.is_remote(), move || {
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
        })
        .collect();
    Ok(Json(json!({"added": added, "results": results})).into_response())
}

async fn whitelist_change(
    app: Arc<App>,
    headers: HeaderMap,
    name: String,
    body: axum::body::Bytes,
    add: bool,
) -> ApiResult {
    can_write(&app, &headers)?;
    let n = named(&app, &name).await?;
    let items = parse_items(&app, &body)?;
    let app2 = app.clone();
    let results = blocking(move || {
        let refs: Vec<&[u8]> = items.iter().map(|s| s.as_bytes()).collect();
        app2.store.whitelist(&n, &refs, add).map(|r| (items, r))
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

async fn whitelist_add(
    State(app): St,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    whitelist_change(app, headers, name, body, true).await
}

async fn whitelist_remove(
    State(app): St,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    whitelist_change(app, headers, name, body, false).await
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
        Some("cuckoo") => Some(crate::store::cuckoo::CfLayout::Cuckoo),
        Some("counting") => Some(crate::store::cuckoo::CfLayout::Counting),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_the_machine_s_own_names() {
        for ok in [
            "localhost",
            "localhost:8080",
            "LOCALHOST.",
            "app.localhost:1",
            "127.0.0.1",
            "127.0.0.1:8080",
            "127.9.9.9",
            "[::1]:8080",
            "[::1]",
        ] {
            assert!(loopback_host(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "attacker.example",
            "attacker.example:8080",
            "127.0.0.1.attacker.example",
            "localhost.attacker.example",
            "10.0.0.1:8080",
            "[::2]:8080",
            "[::1",
            "localhost:80x",
            "",
            "\u{ff}",
        ] {
            assert!(!loopback_host(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn store_errors_become_http_errors() {
        let full = || std::io::Error::new(std::io::ErrorKind::StorageFull, "full");
        for (e, status, code) in [
            (StoreError::io("f.bgf.whitelist", full()), 507, "no_space"),
            (
                StoreError::Files(bloomgate_blacklist::Error::Io {
                    path: "f".into(),
                    source: full(),
                }),
                507,
                "no_space",
            ),
            (
                StoreError::io("f.bgf", std::io::ErrorKind::PermissionDenied.into()),
                422,
                "file_error",
            ),
            (StoreError::Unavailable("shard".into()), 503, "unavailable"),
            (StoreError::Unsupported("reload"), 501, "unsupported"),
            (StoreError::NotFound("f".into()), 404, "not_found"),
        ] {
            let a = ApiError::from(e);
            assert_eq!((a.status.as_u16(), a.code), (status, code), "{}", a.message);
        }
    }
}
