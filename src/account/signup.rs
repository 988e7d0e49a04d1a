//! Signup and login.

use std::fmt;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use crate::accounts::credentials::{MAX_EMAIL_CHARS, MAX_PASSWORD_CHARS, MIN_PASSWORD_CHARS};
#[cfg(test)]
use crate::accounts::credentials::{check_password, normalize_email};
use crate::accounts::credentials::{log_in, sign_up};
use crate::error::{ApiError, ErrorBody, JsonBody};
use crate::state::AppState;
use crate::web::client::ClientIp;

/// Unknown fields are refused (422), as on every account and admin route. `Debug` shows
/// the email and never the password.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignupRequest {
    /// An email address: one `@` after at least one character, no whitespace or control
    /// character, a domain with a dot that neither starts nor ends with one. Surrounding
    /// whitespace is trimmed and the address lowercased; an address already taken in any
    /// case answers 409.
    // The pattern is `normalize_email` as a regular expression (whitespace as Rust's
    // `trim` sees it); a property test holds the two together. No `format: email`: the
    // handler takes addresses that format refuses (`é@b.co`, `a@b..co`) and refuses
    // some it takes (`a@b`), and a document must not promise either way.
    #[schema(
        max_length = 254,
        pattern = r"^[\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*[^@\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+@[^@.\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+\.[^@\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*[^@.\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$",
        example = "ann@example.com"
    )]
    pub email: String,
    /// 8 to 1024 characters (Unicode code points).
    #[schema(format = Password, min_length = 8, max_length = 1024, example = "correct horse")]
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
    #[schema(minimum = 1)]
    pub account_id: i64,
    #[schema(minimum = 1)]
    pub key_id: i64,
    /// Shown once; only its hash is kept.
    #[schema(pattern = "^tgk_[A-Za-z0-9]{40}$")]
    pub api_key: String,
}

/// Unknown fields are refused (422). Longer values than signup accepts match no account
/// (401). `Debug` shows the email and never the password.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    /// Compared trimmed and lowercased.
    #[schema(max_length = 254, example = "ann@example.com")]
    pub email: String,
    #[schema(format = Password, max_length = 1024, example = "correct horse")]
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
    #[schema(pattern = "^tgs_[A-Za-z0-9]{40}$")]
    pub token: String,
    pub expires_at: DateTime<Utc>,
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
    ClientIp(ip): ClientIp,
    JsonBody(req): JsonBody<SignupRequest>,
) -> Result<(StatusCode, Json<SignupResponse>), ApiError> {
    let created = sign_up(
        &state.credentials(),
        &req.email,
        req.password,
        ip,
        Utc::now(),
        state.config.usage.free_monthly_calls,
        state.metering(),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(SignupResponse {
            account_id: created.account_id,
            key_id: created.key_id,
            api_key: created.api_key.reveal(),
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
    ClientIp(ip): ClientIp,
    JsonBody(req): JsonBody<LoginRequest>,
) -> Result<Json<LoginResponse>, ApiError> {
    let ttl = i64::try_from(state.config.account.session_ttl_seconds).unwrap_or(i64::MAX);
    let (token, expires_at) = log_in(
        &state.credentials(),
        &req.email,
        req.password,
        ip,
        Utc::now(),
        ttl,
    )
    .await?;
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
    fn emails_are_counted_as_given_neither_trimmed_nor_lowercased() {
        // `İ` lowercases to two characters.
        let email = format!("{}@example.com", "İ".repeat(MAX_EMAIL_CHARS - 12));
        assert_eq!(email.chars().count(), MAX_EMAIL_CHARS);
        assert!(normalize_email(&email).is_ok());
        let padded = format!("{email} ");
        assert!(normalize_email(&padded).is_err());
    }

    #[test]
    fn passwords_need_eight_to_1024_characters() {
        assert!(check_password("short").is_err());
        assert!(check_password("long enough").is_ok());
        assert!(check_password(&"x".repeat(1025)).is_err());
    }
}

/// The documented email pattern is `normalize_email`'s rule, checked with the engine the
/// fuzz suite validates with.
#[cfg(test)]
mod prop_tests {
    use proptest::prelude::*;
    use utoipa::PartialSchema;

    use super::*;
    use crate::prop_support::{pattern_at, space};

    /// The pattern as `/openapi.json` states it, compiled once.
    fn documented_pattern() -> &'static fancy_regex::Regex {
        static PATTERN: std::sync::LazyLock<fancy_regex::Regex> = std::sync::LazyLock::new(|| {
            let schema = serde_json::to_value(SignupRequest::schema()).unwrap();
            pattern_at(&schema, "/properties/email/pattern")
        });
        &PATTERN
    }

    /// Mostly characters an address may hold, sometimes one the rule treats differently.
    fn address_char() -> impl Strategy<Value = char> {
        prop_oneof![
            8 => prop::sample::select(vec!['a', 'Z', '0', '-', '_', '+', '"', 'é', 'İ', 'ß']),
            1 => prop::sample::select(vec!['@', '.']),
            1 => space(),
            1 => prop::sample::select(vec!['\0', '\u{1}', '\u{1f}', '\u{7f}', '\u{9f}']),
            1 => any::<char>(),
        ]
    }

    fn email_like() -> impl Strategy<Value = String> {
        let pad = || prop::collection::vec(space(), 0..3).prop_map(String::from_iter);
        let part = || prop::collection::vec(address_char(), 0..5).prop_map(String::from_iter);
        prop_oneof![
            4 => (pad(), part(), part(), part(), pad()).prop_map(|(pad, local, label, tld, end)| {
                format!("{pad}{local}@{label}.{tld}{end}")
            }),
            1 => prop::collection::vec(address_char(), 0..16).prop_map(String::from_iter),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn the_documented_email_pattern_is_the_handlers_rule(email in email_like()) {
            let pattern = documented_pattern();
            let short_enough = email.chars().count() <= MAX_EMAIL_CHARS;
            prop_assert_eq!(
                pattern.is_match(&email).unwrap() && short_enough,
                normalize_email(&email).is_ok(),
                "{:?}",
                email
            );
        }
    }
}
