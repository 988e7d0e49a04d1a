//! Signup and login.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::keys::insert_key;
use crate::auth::password;
use crate::auth::session;
use crate::auth::token::{API_KEY_PREFIX, PlainToken};
use crate::error::{ApiError, ErrorBody, JsonBody};
use crate::state::AppState;
use crate::usage;

pub(crate) const MIN_PASSWORD_CHARS: usize = 8;
pub(crate) const MAX_PASSWORD_CHARS: usize = 1024;
pub(crate) const MAX_EMAIL_CHARS: usize = 254;

/// Unknown fields are ignored.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SignupRequest {
    /// Surrounding whitespace is trimmed and the address lowercased; an address that is
    /// already taken in any case answers 409.
    #[schema(format = Email, max_length = 254, example = "ann@example.com")]
    pub email: String,
    /// 8 to 1024 characters (Unicode code points).
    #[schema(format = Password, min_length = 8, max_length = 1024, example = "correct horse")]
    pub password: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SignupResponse {
    #[schema(minimum = 1)]
    pub account_id: i64,
    #[schema(minimum = 1)]
    pub key_id: i64,
    /// Shown once; only its hash is kept.
    #[schema(pattern = "^tgk_[A-Za-z0-9]{40}$")]
    pub api_key: String,
}

/// Unknown fields are ignored. Longer values than signup accepts match no account (401).
#[derive(Debug, Deserialize, ToSchema)]
pub struct LoginRequest {
    /// Compared trimmed and lowercased.
    #[schema(max_length = 254, example = "ann@example.com")]
    pub email: String,
    #[schema(format = Password, max_length = 1024, example = "correct horse")]
    pub password: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LoginResponse {
    #[schema(pattern = "^tgs_[A-Za-z0-9]{40}$")]
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

fn normalize_email(raw: &str) -> Result<String, ApiError> {
    let email = raw.trim().to_lowercase();
    let valid = email.chars().count() <= MAX_EMAIL_CHARS
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
        && match email.split_once('@') {
            Some((local, domain)) => {
                !local.is_empty()
                    && !domain.contains('@')
                    && domain.contains('.')
                    && !domain.starts_with('.')
                    && !domain.ends_with('.')
            }
            None => false,
        };
    if valid {
        Ok(email)
    } else {
        Err(ApiError::Validation("email is not a valid address".into()))
    }
}

fn check_password(password: &str) -> Result<(), ApiError> {
    let n = password.chars().count();
    if n < MIN_PASSWORD_CHARS {
        return Err(ApiError::Validation(format!(
            "password must have at least {MIN_PASSWORD_CHARS} characters"
        )));
    }
    if n > MAX_PASSWORD_CHARS {
        return Err(ApiError::Validation(format!(
            "password must have at most {MAX_PASSWORD_CHARS} characters"
        )));
    }
    Ok(())
}

/// Creates an account with its free subscription, its first API key and (unless
/// metering is off) the free grant of the current month, in one transaction.
#[utoipa::path(post, path = "/account/v1/signup", tag = "account",
    request_body = SignupRequest,
    responses(
        (status = 201, description = "Account created; `api_key` is shown this once", body = SignupResponse),
        (status = 400, description = "MALFORMED_JSON: the body is not JSON", body = ErrorBody),
        (status = 409, description = "EMAIL_TAKEN", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: the body exceeds 16 KiB", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: content-type is not application/json", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: a field is missing, of the wrong type, or breaks its constraints", body = ErrorBody),
        (status = 429, description = "TOO_MANY_REQUESTS: more signups from this address than `account.signups_per_ip_per_hour`", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer, or the password-hashing queue is full", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait (hashing queue full)"))),
    ))]
pub async fn signup(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<SignupRequest>,
) -> Result<(StatusCode, Json<SignupResponse>), ApiError> {
    let email = normalize_email(&req.email)?;
    check_password(&req.password)?;
    let password_hash = password::hash(req.password).await?;
    let key = PlainToken::generate(API_KEY_PREFIX);
    let now = Utc::now();

    let mut tx = state.db.begin().await?;
    let account_id: i64 = sqlx::query_scalar(
        "INSERT INTO account (email, password_hash) VALUES ($1, $2) RETURNING id",
    )
    .bind(&email)
    .bind(&password_hash)
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| match &e {
        sqlx::Error::Database(db) if db.constraint() == Some("account_email_key") => {
            ApiError::EmailTaken
        }
        _ => ApiError::from(e),
    })?;
    usage::grants::create_free_subscription(
        &mut tx,
        account_id,
        now,
        state.config.usage.free_monthly_calls,
        state.metering(),
    )
    .await?;
    let key_id = insert_key(&mut tx, account_id, &key).await?;
    tx.commit().await?;

    tracing::info!(account_id, "account created");
    Ok((
        StatusCode::CREATED,
        Json(SignupResponse {
            account_id,
            key_id,
            api_key: key.reveal(),
        }),
    ))
}

/// Exchanges email and password for a session token.
#[utoipa::path(post, path = "/account/v1/login", tag = "account",
    request_body = LoginRequest,
    responses(
        (status = 200, description = "A session token for `Authorization: Bearer`", body = LoginResponse),
        (status = 400, description = "MALFORMED_JSON: the body is not JSON", body = ErrorBody),
        (status = 401, description = "INVALID_CREDENTIALS: no account has this email and password", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: the body exceeds 16 KiB", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: content-type is not application/json", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: a field is missing or of the wrong type", body = ErrorBody),
        (status = 429, description = "TOO_MANY_REQUESTS: more failed logins for this email or address than `account.login_failures_per_hour`", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer, or the password-hashing queue is full", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait (hashing queue full)"))),
    ))]
pub async fn login(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<LoginRequest>,
) -> Result<Json<LoginResponse>, ApiError> {
    // No stored account can match these; answer without asking the database.
    if req.password.chars().count() > MAX_PASSWORD_CHARS
        || req.email.chars().count() > MAX_EMAIL_CHARS
        || req.email.contains('\0')
    {
        return Err(ApiError::InvalidCredentials);
    }
    let email = req.email.trim().to_lowercase();
    let row: Option<(i64, String)> =
        sqlx::query_as("SELECT id, password_hash FROM account WHERE lower(email) = $1")
            .bind(&email)
            .fetch_optional(&state.db)
            .await?;
    let (account_id, phc) = match row {
        Some((id, phc)) => (Some(id), Some(phc)),
        None => (None, None),
    };
    let matches = password::verify(req.password, phc).await?;
    let Some(account_id) = account_id.filter(|_| matches) else {
        tracing::info!("login refused");
        return Err(ApiError::InvalidCredentials);
    };

    let ttl = i64::try_from(state.config.account.session_ttl_seconds).unwrap_or(i64::MAX);
    let (token, expires_at) = session::create(&state.db, account_id, ttl, Utc::now()).await?;
    Ok(Json(LoginResponse {
        token: token.reveal(),
        expires_at,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_trimmed_lowercased_and_checked() {
        assert_eq!(
            normalize_email("  Ann@Example.COM ").unwrap(),
            "ann@example.com"
        );
        for bad in [
            "",
            "ann",
            "@example.com",
            "ann@",
            "ann@example",
            "a b@c.de",
            "a@@b.cd",
        ] {
            assert!(normalize_email(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn passwords_need_eight_to_1024_characters() {
        assert!(check_password("short").is_err());
        assert!(check_password("long enough").is_ok());
        assert!(check_password(&"x".repeat(1025)).is_err());
    }
}
