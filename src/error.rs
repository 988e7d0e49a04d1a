//! The HTTP error type every handler returns.
//!
//! Each variant is one SPEC error code with its status. Bodies are always
//! `{"code": "...", "message": "..."}`; 5xx bodies are generic and the cause is logged
//! inside the request span instead of being sent.

use std::sync::LazyLock;

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;

use crate::server::body::RequestBodyError;

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
    /// No key in the key header, but an API key in `Authorization`; holds the configured
    /// key header, to say where the key goes.
    #[error("API key sent in Authorization")]
    KeyInAuthorization(String),
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
    #[error("quota exceeded")]
    QuotaExceeded { retry_after: i64 },
    /// A spend cap of the day or month is reached (SPEC §20).
    #[error("spend cap reached")]
    SpendCapReached { retry_after: i64 },
    /// The calling key's monthly limit (`limit` units) is used up (SPEC §13).
    #[error("key quota exceeded")]
    KeyQuotaExceeded { retry_after: i64, limit: i64 },
    /// The key's expiry has passed (SPEC §15).
    #[error("API key expired")]
    KeyExpired,
    /// The key's scopes do not cover the path (SPEC §15).
    #[error("API key scope denied")]
    KeyScopeDenied,
    /// A revoked or expired key cannot be rolled (SPEC §15).
    #[error("API key inactive")]
    KeyInactive,
    /// Over a rate limit per second (SPEC §16); retry after that many seconds.
    #[error("rate limited")]
    RateLimited { retry_after: u64 },
    /// The route's feature is not in the account's plan (SPEC §17).
    #[error("feature not in plan")]
    FeatureNotInPlan,
    /// An abuse limit of the account API (SPEC §2 `account.*`); retry after that many seconds.
    #[error("too many requests; retry after {retry_after_secs} s")]
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
    /// Too many header fields, or too many bytes of them.
    #[error("request headers too large")]
    HeadersTooLarge,
    /// The client's request body could not be read (bad framing, cut short).
    #[error("bad request body")]
    BadRequestBody,
    /// The client's request body stopped arriving.
    #[error("request body timed out")]
    RequestTimeout,
    #[error("not found")]
    NotFound,
    #[error("account not found")]
    AccountNotFound,
    #[error("key not found")]
    KeyNotFound,
    /// The account holds `account.max_keys` unrevoked keys already.
    #[error("key limit of {0} reached")]
    KeyLimit(u32),
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
    /// Too much work of this kind in progress (password hashing); retry shortly.
    #[error("overloaded")]
    Overloaded,
    #[error("database unavailable: {0}")]
    DatabaseUnavailable(#[source] sqlx::Error),
    #[error("internal error: {0}")]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        use ApiError::*;
        match self {
            InvalidApiKey | KeyInAuthorization(_) => (StatusCode::UNAUTHORIZED, "INVALID_API_KEY"),
            Unauthorized | SessionOrKeyRequired(_) => (StatusCode::UNAUTHORIZED, "UNAUTHORIZED"),
            InvalidCredentials => (StatusCode::UNAUTHORIZED, "INVALID_CREDENTIALS"),
            Throttled => (StatusCode::TOO_MANY_REQUESTS, "REQUEST_THROTTLED"),
            QuotaExceeded { .. } => (StatusCode::TOO_MANY_REQUESTS, "QUOTA_EXCEEDED"),
            SpendCapReached { .. } => (StatusCode::TOO_MANY_REQUESTS, "SPEND_CAP_REACHED"),
            KeyQuotaExceeded { .. } => (StatusCode::TOO_MANY_REQUESTS, "KEY_QUOTA_EXCEEDED"),
            TooManyRequests { .. } => (StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_REQUESTS"),
            KeyExpired => (StatusCode::UNAUTHORIZED, "KEY_EXPIRED"),
            KeyScopeDenied => (StatusCode::FORBIDDEN, "KEY_SCOPE_DENIED"),
            KeyInactive => (StatusCode::CONFLICT, "KEY_INACTIVE"),
            RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED"),
            FeatureNotInPlan => (StatusCode::FORBIDDEN, "FEATURE_NOT_IN_PLAN"),
            EmailTaken => (StatusCode::CONFLICT, "EMAIL_TAKEN"),
            Validation(_) => (StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_FAILED"),
            MalformedJson(_) => (StatusCode::BAD_REQUEST, "MALFORMED_JSON"),
            UnsupportedMediaType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UNSUPPORTED_MEDIA_TYPE"),
            PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE"),
            HeadersTooLarge => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "HEADERS_TOO_LARGE",
            ),
            BadRequestBody => (StatusCode::BAD_REQUEST, "BAD_REQUEST_BODY"),
            RequestTimeout => (StatusCode::REQUEST_TIMEOUT, "REQUEST_TIMEOUT"),
            NotFound => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            AccountNotFound => (StatusCode::NOT_FOUND, "ACCOUNT_NOT_FOUND"),
            KeyNotFound => (StatusCode::NOT_FOUND, "KEY_NOT_FOUND"),
            KeyLimit(_) => (StatusCode::CONFLICT, "KEY_LIMIT"),
            CodeNotFound => (StatusCode::NOT_FOUND, "CODE_NOT_FOUND"),
            CodeUsed => (StatusCode::CONFLICT, "CODE_USED"),
            CodeExpired => (StatusCode::GONE, "CODE_EXPIRED"),
            BadSignature(_) => (StatusCode::BAD_REQUEST, "BAD_SIGNATURE"),
            MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED"),
            UpstreamUnavailable(_) => (StatusCode::BAD_GATEWAY, "UPSTREAM_UNAVAILABLE"),
            UpstreamTimeout => (StatusCode::GATEWAY_TIMEOUT, "UPSTREAM_TIMEOUT"),
            DatabaseUnavailable(_) | ServiceUnavailable(_) | Overloaded => {
                (StatusCode::SERVICE_UNAVAILABLE, "SERVICE_UNAVAILABLE")
            }
            Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
        }
    }

    /// Seconds a client should wait before trying again, sent as `Retry-After` on
    /// every 429 (and on 503s of an overloaded server): a throttled call may be admitted
    /// on its next try, a hard limit only once its window ends.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            ApiError::Throttled => Some(1),
            ApiError::QuotaExceeded { retry_after }
            | ApiError::SpendCapReached { retry_after }
            | ApiError::KeyQuotaExceeded { retry_after, .. } => Some((*retry_after).max(1) as u64),
            ApiError::TooManyRequests { retry_after_secs } => Some((*retry_after_secs).max(1)),
            ApiError::RateLimited { retry_after } => Some((*retry_after).max(1)),
            ApiError::Overloaded => Some(1),
            _ => None,
        }
    }

    /// The message safe to show to whoever sent the request.
    pub fn public_message(&self) -> String {
        use ApiError::*;
        match self {
            InvalidApiKey => "Missing, unknown or revoked API key.".into(),
            KeyInAuthorization(key_header) => format!(
                "Send the API key in the {key_header} header; Authorization is not read for API calls."
            ),
            Unauthorized => "Missing or invalid bearer token.".into(),
            SessionOrKeyRequired(key_header) => format!(
                "Send a valid session (Authorization: Bearer <token>) or API key ({key_header})."
            ),
            InvalidCredentials => "Email or password is wrong.".into(),
            Throttled => "Request throttled. Please try again.".into(),
            QuotaExceeded { .. } => "Quota exceeded for this period.".into(),
            SpendCapReached { .. } => "Spend cap reached for this period.".into(),
            KeyQuotaExceeded { .. } => "This key's monthly limit is used up.".into(),
            TooManyRequests { .. } => "Too many attempts. Please try again later.".into(),
            KeyExpired => "This API key has expired.".into(),
            KeyScopeDenied => "This API key may not call this path.".into(),
            KeyInactive => "This API key is revoked or expired.".into(),
            RateLimited { .. } => "Too many requests. Please slow down.".into(),
            FeatureNotInPlan => "This endpoint is not included in your plan.".into(),
            EmailTaken => "An account with this email already exists.".into(),
            Validation(why) => why.clone(),
            MalformedJson(why) => format!("Request body is not valid JSON: {why}"),
            UnsupportedMediaType => "Expected a body with content-type application/json.".into(),
            PayloadTooLarge => "Request body is too large.".into(),
            HeadersTooLarge => "The request's headers are too many or too large.".into(),
            BadRequestBody => {
                "The request body is malformed or was cut short (e.g. bad chunked encoding).".into()
            }
            RequestTimeout => "The request body stopped arriving before it was complete.".into(),
            NotFound => "No such route.".into(),
            AccountNotFound => "No such account.".into(),
            KeyNotFound => "No such API key.".into(),
            KeyLimit(max) => {
                format!("This account already has {max} active API keys; revoke one first.")
            }
            CodeNotFound => "No such redemption code.".into(),
            CodeUsed => "This redemption code has already been used.".into(),
            CodeExpired => "This redemption code has expired.".into(),
            BadSignature(_) => "The webhook signature is missing, invalid or stale.".into(),
            MethodNotAllowed => "This method is not allowed here.".into(),
            UpstreamUnavailable(_) => "The upstream API is unreachable.".into(),
            UpstreamTimeout => "The upstream API did not answer in time.".into(),
            DatabaseUnavailable(_) | ServiceUnavailable(_) | Overloaded => {
                "The service is temporarily unavailable.".into()
            }
            Internal(_) => "Internal error.".into(),
        }
    }

    /// The answer to a request body the client failed to deliver.
    pub fn from_request_body(err: &RequestBodyError) -> Self {
        match err {
            RequestBodyError::Stalled(_) => ApiError::RequestTimeout,
            RequestBodyError::Broken(_) => ApiError::BadRequestBody,
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
        if let Some(body) = RequestBodyError::find(&rejection) {
            return ApiError::from_request_body(body);
        }
        match rejection {
            JsonRejection::MissingJsonContentType(_) => ApiError::UnsupportedMediaType,
            JsonRejection::JsonDataError(e) => {
                ApiError::Validation(crate::rejection::field_problem(&e.body_text()))
            }
            JsonRejection::JsonSyntaxError(e) => {
                ApiError::MalformedJson(crate::rejection::syntax_problem(&e.body_text()))
            }
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::PayloadTooLarge
            }
            _ => ApiError::MalformedJson("it could not be read".into()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::Validation(crate::rejection::field_problem(&rejection.body_text()))
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
        // A refusal under load is counted and logged (rate-limited) where it is decided.
        if status.is_server_error() && !matches!(self, ApiError::Overloaded) {
            tracing::error!(error = ?anyhow_chain(&self), code, "request failed");
        } else {
            tracing::debug!(code, reason = %self, "request refused");
        }
        let mut response = match self.fixed_body() {
            Some(body) => (
                status,
                [(
                    axum::http::header::CONTENT_TYPE,
                    axum::http::HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            None => {
                let body = ErrorBody {
                    code,
                    message: self.public_message(),
                };
                (status, Json(body)).into_response()
            }
        };
        if let Some(secs) = self.retry_after_secs() {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        response
    }
}

/// The bodies of the refusals a proxied call can get whose text never changes,
/// serialised once: `401 INVALID_API_KEY`, `429 REQUEST_THROTTLED`, `429
/// QUOTA_EXCEEDED`, `404 NOT_FOUND`, `405 METHOD_NOT_ALLOWED`.
static FIXED_BODIES: LazyLock<[Bytes; 5]> = LazyLock::new(|| {
    [
        ApiError::InvalidApiKey,
        ApiError::Throttled,
        ApiError::QuotaExceeded { retry_after: 0 },
        ApiError::NotFound,
        ApiError::MethodNotAllowed,
    ]
    .map(|e| {
        let body = ErrorBody {
            code: e.status_and_code().1,
            message: e.public_message(),
        };
        Bytes::from(serde_json::to_vec(&body).expect("an error body serialises"))
    })
});

impl ApiError {
    /// The body of [`FIXED_BODIES`] this error answers with, if it is one of them.
    fn fixed_body(&self) -> Option<Bytes> {
        let index = match self {
            ApiError::InvalidApiKey => 0,
            ApiError::Throttled => 1,
            ApiError::QuotaExceeded { .. } => 2,
            ApiError::NotFound => 3,
            ApiError::MethodNotAllowed => 4,
            _ => return None,
        };
        Some(FIXED_BODIES[index].clone())
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

/// JSON body extractor whose rejections are [`ApiError`]s. The body must be a JSON
/// object (see [`Object`]): every request body of the account and admin APIs is one.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonBody<T>(pub T);

impl<S, T> axum::extract::FromRequest<S> for JsonBody<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let axum::Json(Object(value)) = axum::Json::<Object<T>>::from_request(req, state).await?;
        Ok(JsonBody(value))
    }
}

/// A request body read from a JSON object only. serde's derived structs also read an
/// array of their fields in order (`[null, null]` as a change's first two fields), which
/// no document allows and no client means: that is refused (`422`, "the body must be an
/// object") like any other value of the wrong type. Errors inside the object keep their
/// field's path.
#[derive(Debug, Default)]
pub struct Object<T>(pub T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);

        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Fields<T> {
            type Value = T;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }

        deserializer
            .deserialize_map(Fields(std::marker::PhantomData))
            .map(Object)
    }
}

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
    fn fixed_bodies_are_the_errors_own_json() {
        for error in [
            ApiError::InvalidApiKey,
            ApiError::Throttled,
            ApiError::QuotaExceeded { retry_after: 5 },
            ApiError::NotFound,
            ApiError::MethodNotAllowed,
        ] {
            let body: serde_json::Value =
                serde_json::from_slice(&error.fixed_body().unwrap()).unwrap();
            assert_eq!(
                body,
                serde_json::json!({
                    "code": error.status_and_code().1,
                    "message": error.public_message(),
                })
            );
        }
        assert!(ApiError::UpstreamTimeout.fixed_body().is_none());
    }

    #[test]
    fn distinct_causes_are_all_shown() {
        let err = anyhow::anyhow!("root").context("middle").context("outer");
        assert_eq!(anyhow_chain(err.as_ref()), "outer: middle: root");
    }
}
