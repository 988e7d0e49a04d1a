//! Console sessions and their CSRF tokens (SPEC §10).
//!
//! Signing in with the admin token opens a session: a random id (`tgc_` + 40
//! alphanumerics) sent once as an `HttpOnly; SameSite=Strict; Path=/console` cookie
//! (`Secure` when the public listener speaks TLS), and stored in PostgreSQL only as its
//! SHA-256, with an expiry 12 hours on. Every replica reads the same table, so a
//! session works across the fleet, and signing out deletes the row, which ends it
//! everywhere.
//!
//! Each session has its CSRF token: the SHA-256 of the session id under a label of its
//! own. Only a holder of the cookie can compute it (the cookie is out of reach of
//! scripts and never sent cross-site), it needs no storage, and every form that changes
//! something carries it; it is compared in constant time. The sign-in form, sent before
//! any session exists, is bound the same way to a short-lived cookie of its own (a
//! double-submitted token).

use axum::extract::FromRequestParts;
use axum::http::header::SET_COOKIE;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Duration, Utc};
use sqlx::PgPool;

use super::page::{Flash, FlashKind};
use crate::auth::token::{PlainToken, TokenHash, plausible};
use crate::state::AppState;
use crate::web::page::Problem;
pub use crate::web::session::{cookie, secure};
use crate::web::session::{csrf_of, form_token, form_token_matches, same, set_cookie_under};

/// The session cookie.
pub const COOKIE_NAME: &str = "tollgate_console";
/// The sign-in form's cookie, until a session exists.
pub const SIGN_IN_COOKIE: &str = "tollgate_console_sign_in";
/// Where an operator without a session is sent.
pub const SIGN_IN: &str = "/console/sign-in";
/// Prefix of console session ids.
const PREFIX: &str = "tgc_";
/// How long a session lasts from sign-in.
pub const LIFETIME: Duration = Duration::hours(12);

/// A signed-in operator: the session found by its cookie.
#[derive(Debug)]
pub struct ConsoleSession {
    hash: TokenHash,
    csrf: String,
    /// The message left by the form sent just before, shown once.
    pub flash: Option<Flash>,
}

impl ConsoleSession {
    /// The token this session's forms carry.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Refuses a form without this session's token.
    pub fn check_csrf(&self, given: Option<&str>) -> Result<(), Problem> {
        match given {
            Some(given) if same(given.as_bytes(), self.csrf.as_bytes()) => Ok(()),
            _ => Err(Problem::forged()),
        }
    }

    /// Leaves `text` for the next page of this session.
    pub async fn leave_flash(
        &self,
        db: &PgPool,
        kind: FlashKind,
        text: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query("UPDATE console_session SET flash_kind = $2, flash = $3 WHERE token_hash = $1")
            .bind(self.hash.as_bytes())
            .bind(kind.as_str())
            .bind(text)
            .execute(db)
            .await?;
        Ok(())
    }

    /// Ends the session on every replica.
    pub async fn close(&self, db: &PgPool) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM console_session WHERE token_hash = $1")
            .bind(self.hash.as_bytes())
            .execute(db)
            .await?;
        Ok(())
    }
}

/// Opens a session from `now`, first deleting the expired ones; returns its id, for
/// the cookie only.
pub async fn open(db: &PgPool, now: DateTime<Utc>) -> Result<PlainToken, sqlx::Error> {
    sqlx::query("DELETE FROM console_session WHERE expires_at <= $1")
        .bind(now)
        .execute(db)
        .await?;
    let token = PlainToken::generate(PREFIX);
    sqlx::query(
        "INSERT INTO console_session (token_hash, created_at, expires_at) VALUES ($1, $2, $3)",
    )
    .bind(token.hash().as_bytes())
    .bind(now)
    .bind(now + LIFETIME)
    .execute(db)
    .await?;
    Ok(token)
}

/// The live session whose id is `candidate`; a page read (`take_flash`) also takes its
/// pending message.
pub async fn find(
    db: &PgPool,
    candidate: &str,
    take_flash: bool,
) -> Result<Option<ConsoleSession>, sqlx::Error> {
    if !plausible(candidate, PREFIX) {
        return Ok(None);
    }
    let hash = TokenHash::of(candidate);
    let row: Option<(Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT flash_kind, flash FROM console_session WHERE token_hash = $1 AND expires_at > now()",
    )
    .bind(hash.as_bytes())
    .fetch_optional(db)
    .await?;
    let Some((kind, text)) = row else {
        return Ok(None);
    };
    let flash = match (kind, text) {
        (Some(kind), Some(text)) if take_flash => {
            // Only the page that shows a message clears it.
            sqlx::query(
                "UPDATE console_session SET flash_kind = NULL, flash = NULL
                 WHERE token_hash = $1 AND flash = $2",
            )
            .bind(hash.as_bytes())
            .bind(&text)
            .execute(db)
            .await?;
            Some(Flash {
                kind: FlashKind::parse(&kind),
                text,
            })
        }
        _ => None,
    };
    Ok(Some(ConsoleSession {
        csrf: csrf_of(candidate),
        hash,
        flash,
    }))
}

/// A `Set-Cookie` value under `/console`, readable by no script and sent on no
/// cross-site request; `max_age` 0 deletes it.
pub fn set_cookie(name: &str, value: &str, max_age: Duration, secure: bool) -> HeaderValue {
    set_cookie_under("/console", name, value, max_age, secure)
}

/// A fresh sign-in form's cookie, and the token the form carries.
pub fn sign_in_token(secure: bool) -> (HeaderValue, String) {
    form_token("/console", SIGN_IN_COOKIE, secure)
}

/// Whether a sign-in form's token matches the cookie it was issued with.
pub fn sign_in_token_matches(headers: &HeaderMap, given: Option<&str>) -> bool {
    form_token_matches(headers, SIGN_IN_COOKIE, given)
}

/// The redirect of a request without a valid session (which also drops a dead cookie).
fn to_sign_in(had_cookie: bool, secure: bool) -> Response {
    let mut response = Redirect::to(SIGN_IN).into_response();
    if had_cookie {
        response.headers_mut().append(
            SET_COOKIE,
            set_cookie(COOKIE_NAME, "", Duration::zero(), secure),
        );
    }
    response
}

impl FromRequestParts<AppState> for ConsoleSession {
    type Rejection = Response;

    /// No session, or an expired or closed one: `303` to the sign-in page.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let Some(candidate) = cookie(&parts.headers, COOKIE_NAME) else {
            return Err(to_sign_in(false, secure(state)));
        };
        let take_flash = parts.method == Method::GET;
        match find(&state.db, candidate, take_flash).await {
            Ok(Some(session)) => Ok(session),
            Ok(None) => Err(to_sign_in(true, secure(state))),
            Err(e) => Err(Problem::from(e).into_response()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csrf_token_is_the_sessions_and_no_other() {
        let a = csrf_of("tgc_a");
        assert_eq!(a, csrf_of("tgc_a"));
        assert_ne!(a, csrf_of("tgc_b"));
        // Not the stored hash of the session id either.
        assert_ne!(a, hex::encode(TokenHash::of("tgc_a").0));
    }

    #[test]
    fn comparison_needs_every_byte() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        assert!(!same(b"", b"a"));
    }

    #[test]
    fn cookies_are_http_only_strict_and_scoped_to_the_console() {
        let plain = set_cookie(COOKIE_NAME, "v", LIFETIME, false);
        assert_eq!(
            plain,
            "tollgate_console=v; Path=/console; HttpOnly; SameSite=Strict; Max-Age=43200"
        );
        let tls = set_cookie(COOKIE_NAME, "v", LIFETIME, true);
        assert!(tls.to_str().unwrap().ends_with("; Secure"));
        let portal = set_cookie_under("/portal", "tollgate_portal", "v", LIFETIME, true);
        assert_eq!(
            portal,
            "tollgate_portal=v; Path=/portal; HttpOnly; SameSite=Strict; Max-Age=43200; Secure"
        );
    }
}
