//! Signing up and signing in (the `account` table, SPEC §3.2, §12, §21): the email and
//! password rules, the account created with its free subscription and first key in one
//! transaction, and a login counted against the fleet's abuse limits before it is
//! verified. The account API's handlers and the portal's forms both call these.

use std::net::IpAddr;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::keys::{KeySettings, created_entry, insert_key};
use crate::audit::{self, Action, Entry, Origin, Target};
use crate::auth::account_limits::{AccountLimits, EMAIL_SLOWDOWN};
use crate::auth::password::Passwords;
use crate::auth::session;
use crate::auth::token::{API_KEY_PREFIX, PlainToken};
use crate::error::ApiError;

pub const MIN_PASSWORD_CHARS: usize = 8;
pub const MAX_PASSWORD_CHARS: usize = 1024;
pub const MAX_EMAIL_CHARS: usize = 254;

/// What signing up and in need: the database, the password-hashing gate and the abuse
/// limits.
pub struct Credentials<'a> {
    pub db: &'a PgPool,
    pub passwords: &'a Passwords,
    pub limits: &'a AccountLimits,
}

/// A new account: its id, its first key's id, and that key (shown once).
pub struct SignedUp {
    pub account_id: i64,
    pub key_id: i64,
    pub api_key: PlainToken,
}

pub fn normalize_email(raw: &str) -> Result<String, ApiError> {
    let email = raw.trim().to_lowercase();
    // Counted as given, like the document's maxLength: trimming shortens, and lowercasing
    // can lengthen a few characters (`İ` is two).
    let valid = raw.chars().count() <= MAX_EMAIL_CHARS
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
        Err(ApiError::Validation(format!(
            "email must be an address like ann@example.com: at most {MAX_EMAIL_CHARS} \
             characters, one @ after at least one character, a domain with a dot inside \
             it, no spaces or control characters"
        )))
    }
}

pub fn check_password(password: &str) -> Result<(), ApiError> {
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

/// Creates an account of `email` with its free subscription, its first API key and
/// (when `metering`) the free grant of the current month, in one transaction. Counted
/// per client address before the costly hash; invalid requests cost nothing and are not
/// counted. The audit log records the key as the customer's (from `ip`) and the free
/// subscription as the system's: every account is given it by rule, nobody chose it.
pub async fn sign_up(
    parts: &Credentials<'_>,
    email: &str,
    password: String,
    ip: IpAddr,
    now: DateTime<Utc>,
    free_monthly_calls: i64,
    metering: bool,
) -> Result<SignedUp, ApiError> {
    let email = normalize_email(email)?;
    check_password(&password)?;
    parts.limits.signup(ip, now).await?;
    let password_hash = parts.passwords.hash(password).await?;
    let key = PlainToken::generate(API_KEY_PREFIX);

    let mut tx = parts.db.begin().await?;
    let account_id = sqlx::query_scalar!(
        "INSERT INTO account (email, password_hash) VALUES ($1, $2) RETURNING id",
        email,
        password_hash,
    )
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| match &e {
        sqlx::Error::Database(db) if db.constraint() == Some("account_email_key") => {
            ApiError::EmailTaken
        }
        _ => ApiError::from(e),
    })?;
    let free = crate::usage::grants::create_free_subscription(
        &mut tx,
        account_id,
        now,
        free_monthly_calls,
        metering,
    )
    .await?;
    let key_id = insert_key(&mut tx, account_id, &key).await?;
    let subscription = Entry {
        account_id,
        action: Action::SubscriptionActivated,
        target: Target::Subscription(free.id),
        detail: crate::usage::subscriptions::detail(&free),
    };
    audit::record(&mut tx, Origin::SYSTEM, &subscription).await?;
    let created = created_entry(account_id, key_id, &key, &KeySettings::default());
    audit::record(&mut tx, Origin::account(ip), &created).await?;
    tx.commit().await?;
    tracing::info!(account_id, "account created");
    Ok(SignedUp {
        account_id,
        key_id,
        api_key: key,
    })
}

/// A session of the account whose email and password these are, valid `ttl_seconds`.
/// Counted before anything is verified: past the failure limit of this address (or of
/// this email from it) nothing is, not even the right password; an email that failed
/// past its limit from elsewhere is only slowed.
pub async fn log_in(
    parts: &Credentials<'_>,
    given_email: &str,
    password: String,
    ip: IpAddr,
    now: DateTime<Utc>,
    ttl_seconds: i64,
) -> Result<(PlainToken, DateTime<Utc>), ApiError> {
    let email = given_email.trim().to_lowercase();
    let attempt = parts.limits.login(&email, ip, now).await?;
    if attempt.slowed {
        tokio::time::sleep(EMAIL_SLOWDOWN).await;
    }
    let account_id = match verify_login(parts, &email, given_email, password).await {
        Ok(Some(account_id)) => {
            parts.limits.give_back(attempt, now).await?;
            account_id
        }
        Ok(None) => {
            parts.limits.failed(attempt, now).await?;
            tracing::info!("login refused");
            return Err(ApiError::InvalidCredentials);
        }
        // Not a failed guess (the database or the hashing queue): nothing stays counted.
        Err(e) => {
            parts.limits.give_back(attempt, now).await?;
            return Err(e);
        }
    };
    Ok(session::create(parts.db, account_id, ttl_seconds, now).await?)
}

/// The account whose email and password these are, if any.
async fn verify_login(
    parts: &Credentials<'_>,
    email: &str,
    given_email: &str,
    password: String,
) -> Result<Option<i64>, ApiError> {
    // No stored account can match these; answer without asking the database.
    if password.chars().count() > MAX_PASSWORD_CHARS
        || given_email.chars().count() > MAX_EMAIL_CHARS
        || given_email.contains('\0')
    {
        return Ok(None);
    }
    let row = sqlx::query!(
        "SELECT id, password_hash FROM account WHERE lower(email) = $1",
        email,
    )
    .fetch_optional(parts.db)
    .await?
    .map(|r| (r.id, r.password_hash));
    let (account_id, phc) = match row {
        Some((id, phc)) => (Some(id), Some(phc)),
        None => (None, None),
    };
    let matches = parts.passwords.verify(password, phc).await?;
    Ok(account_id.filter(|_| matches))
}
