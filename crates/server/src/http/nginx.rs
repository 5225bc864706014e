//! The endpoint for nginx's `auth_request` (`docs/http-api.md`, "nginx
//! auth_request"; README, "Blocking listed URLs in nginx"):
//! `GET /v1/filters/NAME/auth`, or `GET /v1/auth` with the filter named in
//! the `X-Bloomgate-Filter` header.
//!
//! The item is the value of one request header: `X-Original-URI` unless the
//! query names another (`?header=X-Original-URL`, for a config that sends
//! `$scheme://$host$request_uri` there). The answer is what `auth_request`
//! understands: **403** when the item is listed (`X-Bloomgate-Matched`
//! names the entry that matched, for `auth_request_set`), **204** when it is
//! not (or is whitelisted: `X-Bloomgate-Verdict: whitelisted`). Anything
//! else is an error nginx turns into a 500 for its client, never a pass: a
//! missing or invalid item (400), an unknown filter (404), a filter that
//! cannot tell (503). A 401 (the token) stops the request too.
//!
//! The access checks are every read's (`http/gate.rs`): the token when one
//! is configured, and on a server open to the machine a loopback `Host`
//! (which is why the documented config sets `Host localhost`: nginx may
//! pass the original request's).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::error::{can_read, ApiError, ApiResult, St};
use crate::ask::{ask, Asked};
use crate::App;

/// The header the item is read from unless `?header=` names another.
pub const DEFAULT_ITEM_HEADER: &str = "X-Original-URI";
/// The header naming the filter on `GET /v1/auth`.
pub const FILTER_HEADER: &str = "X-Bloomgate-Filter";
/// The verdict's header: `hit`, `whitelisted` or `miss`. Its presence also
/// tells the metrics that a 403 is an answer, not an error.
pub const VERDICT_HEADER: &str = "X-Bloomgate-Verdict";
/// The entry that matched (on a hit or a whitelisted item).
pub const MATCHED_HEADER: &str = "X-Bloomgate-Matched";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuthQuery {
    header: Option<String>,
}

/// `GET /v1/filters/NAME/auth`.
pub(super) async fn by_path(
    State(app): St,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<AuthQuery>,
) -> ApiResult {
    answer(app, &headers, &name, q).await
}

/// `GET /v1/auth`, the filter in `X-Bloomgate-Filter`.
pub(super) async fn by_header(
    State(app): St,
    headers: HeaderMap,
    Query(q): Query<AuthQuery>,
) -> ApiResult {
    let name = one_header(&headers, FILTER_HEADER)?;
    let name = std::str::from_utf8(name)
        .map_err(|_| ApiError::bad(format!("{FILTER_HEADER} is not UTF-8")))?
        .to_string();
    answer(app, &headers, &name, q).await
}

/// The one value of header `name`: missing or repeated is an error.
fn one_header<'h>(headers: &'h HeaderMap, name: &str) -> Result<&'h [u8], ApiError> {
    let key = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| ApiError::bad(format!("{name:?} is not a header name")))?;
    let mut values = headers.get_all(&key).iter();
    match (values.next(), values.next()) {
        (Some(v), None) => Ok(v.as_bytes()),
        (None, _) => Err(ApiError::bad(format!("missing header {name}"))),
        (Some(_), Some(_)) => Err(ApiError::bad(format!("header {name} given more than once"))),
    }
}

/// A header value showing `s`: bytes outside printable ASCII are
/// percent-encoded.
fn header_value(s: &str) -> HeaderValue {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x21..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    HeaderValue::from_str(&out).unwrap_or(HeaderValue::from_static("?"))
}

async fn answer(app: Arc<App>, headers: &HeaderMap, name: &str, q: AuthQuery) -> ApiResult {
    can_read(&app, headers)?;
    let header = q.header.as_deref().unwrap_or(DEFAULT_ITEM_HEADER);
    let item = one_header(headers, header)?;
    let v = match ask(&app, name, item).await? {
        Asked::Verdict(v) => v,
        Asked::Invalid(e) => return Err(ApiError::bad(format!("invalid item: {e}"))),
    };
    let (status, verdict) = match (v.hit, v.whitelisted) {
        (true, _) => (StatusCode::FORBIDDEN, "hit"),
        (false, true) => (StatusCode::NO_CONTENT, "whitelisted"),
        (false, false) => (StatusCode::NO_CONTENT, "miss"),
    };
    let mut resp = if v.hit {
        let item = String::from_utf8_lossy(item);
        let body = json!({"item": item, "hit": true, "matched": v.matched});
        (status, Json(body)).into_response()
    } else {
        status.into_response()
    };
    let h = resp.headers_mut();
    h.insert(VERDICT_HEADER, HeaderValue::from_static(verdict));
    if let Some(m) = &v.matched {
        h.insert(MATCHED_HEADER, header_value(m));
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matched_entries_fit_a_header() {
        assert_eq!(header_value("evil.test/x/"), "evil.test/x/");
        assert_eq!(header_value("a b%\u{e9}\n"), "a%20b%25%C3%A9%0A");
    }
}
