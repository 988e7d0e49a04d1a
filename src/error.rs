//! The HTTP error type every handler returns.
//!
//! Each variant is one SPEC error code with its status. Bodies are always
//! `{"code": "...", "message": "..."}`; 5xx bodies are generic and the cause is logged
//! inside the request span instead of being sent.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// The JSON error body of SPEC §3.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub code: &'static str,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("invalid API key")]
    InvalidApiKey,
    #[error("unauthorized")]
    Unauthorized,
    /// A route that takes a session or an API key got neither valid; holds the
    /// configured key header, to name it in the message.
    #[error("unauthorized: no valid session or API key")]
    SessionOrKeyRequired(String),
    #[error("invalid credentials")]
    InvalidCredentials,
    #[error("request throttled")]
    Throttled,
    #[error("email taken")]
    EmailTaken,
    #[error("validation failed: {0}")]
    Validation(String),
    #[error("malformed JSON: {0}")]
    MalformedJson(String),
    #[error("unsupported media type")]
    UnsupportedMediaType,
    #[error("payload too large")]
    PayloadTooLarge,
    #[error("not found")]
    NotFound,
    #[error("account not found")]
    AccountNotFound,
    #[error("key not found")]
    KeyNotFound,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("upstream unavailable: {0}")]
    UpstreamUnavailable(String),
    #[error("upstream timeout")]
    UpstreamTimeout,
    #[error("service unavailable: {0}")]
    ServiceUnavailable(String),
    #[error("database unavailable: {0}")]
    DatabaseUnavailable(#[source] sqlx::Error),
    #[error("internal error: {0}")]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        use ApiError::*;
        match self {
            InvalidApiKey => (StatusCode::UNAUTHORIZED, "INVALID_API_KEY"),
            Unauthorized | SessionOrKeyRequired(_) => (StatusCode::UNAUTHORIZED, "UNAUTHORIZED"),
            InvalidCredentials => (StatusCode::UNAUTHORIZED, "INVALID_CREDENTIALS"),
            Throttled => (StatusCode::TOO_MANY_REQUESTS, "REQUEST_THROTTLED"),
            EmailTaken => (StatusCode::CONFLICT, "EMAIL_TAKEN"),
            Validation(_) => (StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_FAILED"),
            MalformedJson(_) => (StatusCode::BAD_REQUEST, "MALFORMED_JSON"),
            UnsupportedMediaType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UNSUPPORTED_MEDIA_TYPE"),
            PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE"),
            NotFound => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            AccountNotFound => (StatusCode::NOT_FOUND, "ACCOUNT_NOT_FOUND"),
            KeyNotFound => (StatusCode::NOT_FOUND, "KEY_NOT_FOUND"),
            MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED"),
            UpstreamUnavailable(_) => (StatusCode::BAD_GATEWAY, "UPSTREAM_UNAVAILABLE"),
            UpstreamTimeout => (StatusCode::GATEWAY_TIMEOUT, "UPSTREAM_TIMEOUT"),
            DatabaseUnavailable(_) | ServiceUnavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "SERVICE_UNAVAILABLE")
            }
            Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
        }
    }

    fn public_message(&self) -> String {
        use ApiError::*;
        match self {
            InvalidApiKey => "Missing, unknown or revoked API key.".into(),
            Unauthorized => "Missing or invalid bearer token.".into(),
            SessionOrKeyRequired(key_header) => format!(
                "Send a valid session (Authorization: Bearer <token>) or API key ({key_header})."
            ),
            InvalidCredentials => "Email or password is wrong.".into(),
            Throttled => "Request throttled. Please try again.".into(),
            EmailTaken => "An account with this email already exists.".into(),
            Validation(why) => why.clone(),
            MalformedJson(why) => format!("Request body is not valid JSON: {why}"),
            UnsupportedMediaType => "Expected a body with content-type application/json.".into(),
            PayloadTooLarge => "Request body is too large.".into(),
            NotFound => "No such route.".into(),
            AccountNotFound => "No such account.".into(),
            KeyNotFound => "No such API key.".into(),
            MethodNotAllowed => "Method not allowed on this route.".into(),
            UpstreamUnavailable(_) => "The upstream API is unreachable.".into(),
            UpstreamTimeout => "The upstream API did not answer in time.".into(),
            DatabaseUnavailable(_) | ServiceUnavailable(_) => {
                "The service is temporarily unavailable.".into()
            }
            Internal(_) => "Internal error.".into(),
        }
    }

    /// Maps a database error: an unreachable or overloaded database is a 503, input
    /// PostgreSQL cannot store (SQLSTATE class 22, e.g. a NUL character) a 422, the
    /// rest 500s.
    pub fn from_db(err: sqlx::Error) -> Self {
        if crate::db::is_transient(&err) || matches!(err, sqlx::Error::PoolClosed) {
            return ApiError::DatabaseUnavailable(err);
        }
        match &err {
            sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("22")) => {
                ApiError::Validation(
                    "the request holds characters or values that cannot be stored".into(),
                )
            }
            _ => ApiError::Internal(anyhow::Error::new(err)),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        Self::from_db(err)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => ApiError::UnsupportedMediaType,
            JsonRejection::JsonDataError(e) => ApiError::Validation(e.body_text()),
            JsonRejection::JsonSyntaxError(e) => ApiError::MalformedJson(e.body_text()),
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::PayloadTooLarge
            }
            other => ApiError::MalformedJson(other.body_text()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::Validation(rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(_: PathRejection) -> Self {
        ApiError::NotFound
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            tracing::error!(error = ?anyhow_chain(&self), code, "request failed");
        } else {
            tracing::debug!(code, reason = %self, "request refused");
        }
        let body = ErrorBody {
            code,
            message: self.public_message(),
        };
        (status, Json(body)).into_response()
    }
}

/// Renders an error with its whole `source()` chain, `outer: cause: root`. A cause whose
/// text the previous one already shows (`sqlx::Error::Io` displays its `io::Error`, a
/// `thiserror` variant its `#[from]` source) is not repeated.
pub fn anyhow_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut previous = err.to_string();
    let mut out = previous.clone();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !previous.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        previous = text;
        source = cause.source();
    }
    out
}

/// JSON body extractor whose rejections are [`ApiError`]s.
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct JsonBody<T>(pub T);

/// Query extractor whose rejections are [`ApiError`]s.
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct QueryParams<T>(pub T);

/// Path extractor whose rejections are [`ApiError`]s.
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct PathParams<T>(pub T);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Shows(#[source] std::io::Error);

    #[test]
    fn a_cause_already_shown_by_the_previous_one_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let err = anyhow::Error::new(Shows(io)).context("cannot reach the database");
        assert_eq!(
            anyhow_chain(err.as_ref()),
            "cannot reach the database: refused"
        );
    }

    #[test]
    fn distinct_causes_are_all_shown() {
        let err = anyhow::anyhow!("root").context("middle").context("outer");
        assert_eq!(anyhow_chain(err.as_ref()), "outer: middle: root");
    }
}
