//! The API's errors and access checks: [`ApiError`] (status, machine code,
//! message; the one place where store errors and access refusals become
//! HTTP errors), the token check of a request, and the blocking-pool
//! helper whose failure is one.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::auth::Denied;
use crate::store::StoreError;
use crate::App;

/// An API error: status, machine code, message.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub(super) fn new(
        status: StatusCode,
        code: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
    pub(super) fn bad(message: impl Into<String>) -> ApiError {
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
            StoreError::ReadOnly(_) => (StatusCode::CONFLICT, "read_only"),
            StoreError::NotDeletable(_) => (StatusCode::CONFLICT, "not_deletable"),
            StoreError::BadName(_) | StoreError::Invalid(_) | StoreError::TooLong { .. } => {
                (StatusCode::BAD_REQUEST, "bad_request")
            }
            StoreError::Io { .. }
            | StoreError::File(_)
            | StoreError::Files(_)
            | StoreError::List(_)
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

pub(super) type ApiResult = Result<Response, ApiError>;
pub(super) type St = State<Arc<App>>;

pub(super) fn authed(app: &App, headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .is_some_and(|t| app.access.token_matches(t.trim_ascii()))
}

pub(super) fn can_read(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    Ok(app.access.check_read(authed(app, headers))?)
}

pub(super) fn can_write(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    Ok(app.access.check_write(authed(app, headers))?)
}

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
