//! What every request passes through before (and after) its handler:
//! timing and counting ([`observe`]), the refusals made before a body is
//! read (declared length, browsers' cross-site requests to a loopback
//! service), and errors turned into JSON.

use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::{authed, ApiError, St};
use crate::auth::Denied;
use crate::metrics::{Op, Proto};
use crate::App;

/// Times every request, bounds its duration, and counts it.
pub(super) async fn observe(State(app): St, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let path = req.uri().path();
    let op = if path.ends_with("/check") || path.ends_with("/auth") {
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
    // An auth_request verdict of 403 ("listed") is an answer, not an error.
    let error = (resp.status().is_client_error() || resp.status().is_server_error())
        && !resp.headers().contains_key(super::nginx::VERDICT_HEADER);
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
}
