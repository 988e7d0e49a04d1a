//! Signup and login.

use std::fmt;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::keys::insert_key;
use super::limits::ClientIp;
use crate::auth::session;
use crate::auth::token::{API_KEY_PREFIX, PlainToken};
use crate::error::{ApiError, ErrorBody, JsonBody};
use crate::state::AppState;
use crate::usage;

const MIN_PASSWORD_CHARS: usize = 8;
const MAX_PASSWORD_CHARS: usize = 1024;
const MAX_EMAIL_CHARS: usize = 254;

/// `Debug` shows the email and never the password.
#[derive(Deserialize, ToSchema)]
pub struct SignupRequest {
    pub email: String,
    pub password: String,
}

impl fmt::Debug for SignupRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignupRequest")
            .field("email", &self.email)
            .field("password", &REDACTED)
            .finish()
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SignupResponse {
    pub account_id: i64,
    pub key_id: i64,
    /// Shown once; only its hash is kept.
    pub api_key: String,
}

/// `Debug` shows the email and never the password.
#[derive(Deserialize, ToSchema)]
pub struct LoginRequest {
    pub email: String,
    pub password: String,
}

impl fmt::Debug for LoginRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoginRequest")
            .field("email", &self.email)
            .field("password", &REDACTED)
            .finish()
    }
}

/// Stands in for a secret in `Debug` output.
struct Redacted;

const REDACTED: Redacted = Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LoginResponse {
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
        (status = 201, body = SignupResponse),
        (status = 409, description = "EMAIL_TAKEN", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED", body = ErrorBody),
        (status = 429, description = "TOO_MANY_REQUESTS: account.signups_per_ip_per_hour", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: too many password checks in progress", body = ErrorBody),
    ))]
pub async fn signup(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    JsonBody(req): JsonBody<SignupRequest>,
) -> Result<(StatusCode, Json<SignupResponse>), ApiError> {
    let email = normalize_email(&req.email)?;
    check_password(&req.password)?;
    // Counted before the costly hash; invalid requests cost nothing and are not counted.
    state.limits.signup(ip)?;
    let password_hash = state.passwords.hash(req.password).await?;
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
        (status = 200, body = LoginResponse),
        (status = 401, description = "INVALID_CREDENTIALS", body = ErrorBody),
        (status = 429, description = "TOO_MANY_REQUESTS: account.login_failures_per_hour", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: too many password checks in progress", body = ErrorBody),
    ))]
pub async fn login(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    JsonBody(req): JsonBody<LoginRequest>,
) -> Result<Json<LoginResponse>, ApiError> {
    let email = req.email.trim().to_lowercase();
    // Past the failure limit nothing is verified, not even the right password.
    state.limits.login_allowed(&email, ip)?;
    // No stored account can match these; answer without asking the database.
    if req.password.chars().count() > MAX_PASSWORD_CHARS
        || req.email.chars().count() > MAX_EMAIL_CHARS
        || req.email.contains('\0')
    {
        state.limits.login_failed(&email, ip);
        return Err(ApiError::InvalidCredentials);
    }
    let row: Option<(i64, String)> =
        sqlx::query_as("SELECT id, password_hash FROM account WHERE lower(email) = $1")
            .bind(&email)
            .fetch_optional(&state.db)
            .await?;
    let (account_id, phc) = match row {
        Some((id, phc)) => (Some(id), Some(phc)),
        None => (None, None),
    };
    let matches = state.passwords.verify(req.password, phc).await?;
    let Some(account_id) = account_id.filter(|_| matches) else {
        state.limits.login_failed(&email, ip);
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
    fn debug_output_of_signup_and_login_bodies_hides_the_password() {
        let signup = SignupRequest {
            email: "ann@example.com".into(),
            password: "hunter2-hunter2".into(),
        };
        let login = LoginRequest {
            email: "ann@example.com".into(),
            password: "hunter2-hunter2".into(),
        };
        for shown in [format!("{signup:?}"), format!("{login:#?}")] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("ann@example.com"), "{shown}");
        }
    }

    #[test]
    fn passwords_need_eight_to_1024_characters() {
        assert!(check_password("short").is_err());
        assert!(check_password("long enough").is_ok());
        assert!(check_password(&"x".repeat(1025)).is_err());
    }
}
