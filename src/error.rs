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
    #[error("invalid credentials")]
    InvalidCredentials,
    #[error("request throttled")]
    Throttled,
    #[error("quota exceeded")]
    QuotaExceeded { retry_after: i64 },
    #[error("too many requests")]
    TooManyRequests { retry_after_secs: u64 },
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
    #[error("redemption code not found")]
    CodeNotFound,
    #[error("redemption code already used")]
    CodeUsed,
    #[error("redemption code expired")]
    CodeExpired,
    #[error("bad webhook signature: {0}")]
    BadSignature(&'static str),
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
            Unauthorized => (StatusCode::UNAUTHORIZED, "UNAUTHORIZED"),
            InvalidCredentials => (StatusCode::UNAUTHORIZED, "INVALID_CREDENTIALS"),
            Throttled => (StatusCode::TOO_MANY_REQUESTS, "REQUEST_THROTTLED"),
            QuotaExceeded { .. } => (StatusCode::TOO_MANY_REQUESTS, "QUOTA_EXCEEDED"),
            TooManyRequests { .. } => (StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_REQUESTS"),
            EmailTaken => (StatusCode::CONFLICT, "EMAIL_TAKEN"),
            Validation(_) => (StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_FAILED"),
            MalformedJson(_) => (StatusCode::BAD_REQUEST, "MALFORMED_JSON"),
            UnsupportedMediaType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UNSUPPORTED_MEDIA_TYPE"),
            PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE"),
            NotFound => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            AccountNotFound => (StatusCode::NOT_FOUND, "ACCOUNT_NOT_FOUND"),
            KeyNotFound => (StatusCode::NOT_FOUND, "KEY_NOT_FOUND"),
            CodeNotFound => (StatusCode::NOT_FOUND, "CODE_NOT_FOUND"),
            CodeUsed => (StatusCode::CONFLICT, "CODE_USED"),
            CodeExpired => (StatusCode::GONE, "CODE_EXPIRED"),
            BadSignature(_) => (StatusCode::BAD_REQUEST, "BAD_SIGNATURE"),
            MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED"),
            UpstreamUnavailable(_) => (StatusCode::BAD_GATEWAY, "UPSTREAM_UNAVAILABLE"),
            UpstreamTimeout => (StatusCode::GATEWAY_TIMEOUT, "UPSTREAM_TIMEOUT"),
            DatabaseUnavailable(_) | ServiceUnavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "SERVICE_UNAVAILABLE")
            }
            Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
        }
    }

    /// Seconds a client should wait before trying again, sent as `Retry-After` on
    /// every 429: a throttled call may be admitted on its next try, a hard limit only
    /// once its window ends.
    pub fn retry_after(&self) -> Option<i64> {
        match self {
            ApiError::Throttled => Some(1),
            ApiError::QuotaExceeded { retry_after } => Some(*retry_after),
            ApiError::TooManyRequests { retry_after_secs } => {
                Some(i64::try_from(*retry_after_secs).unwrap_or(i64::MAX).max(1))
            }
            _ => None,
        }
    }

    fn public_message(&self) -> String {
        use ApiError::*;
        match self {
            InvalidApiKey => "Missing, unknown or revoked API key.".into(),
            Unauthorized => "Missing or invalid bearer token.".into(),
            InvalidCredentials => "Email or password is wrong.".into(),
            Throttled => "Request throttled. Please try again.".into(),
            QuotaExceeded { .. } => "Quota exceeded for this period.".into(),
            TooManyRequests { .. } => "Too many requests. Please try again later.".into(),
            EmailTaken => "An account with this email already exists.".into(),
            Validation(why) => why.clone(),
            MalformedJson(why) => format!("Request body is not valid JSON: {why}"),
            UnsupportedMediaType => "Expected a body with content-type application/json.".into(),
            PayloadTooLarge => "Request body is too large.".into(),
            NotFound => "No such route.".into(),
            AccountNotFound => "No such account.".into(),
            KeyNotFound => "No such API key.".into(),
            CodeNotFound => "No such redemption code.".into(),
            CodeUsed => "This redemption code has already been used.".into(),
            CodeExpired => "This redemption code has expired.".into(),
            BadSignature(_) => "The webhook signature is missing, invalid or stale.".into(),
            MethodNotAllowed => "This method is not allowed here.".into(),
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
        let mut response = (status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after() {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

/// Renders an error with its whole `source()` chain.
pub fn anyhow_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
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
