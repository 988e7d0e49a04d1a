//! Reading the audit log: pages newest first, each ending where the next begins (the
//! cursor is the last id shown), for the admin API (every account's events, or one
//! account's, or one action's) and the account API (the account's own); and the latest
//! few of an account for the console and the portal.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::ToSchema;

use super::entry::{Action, Actor};
use crate::error::ApiError;

/// Most events per page.
pub const MAX_LIMIT: i64 = 200;
/// Events per page when `limit` is left out.
pub const DEFAULT_LIMIT: i64 = 50;

/// One audit row as the APIs answer it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditEvent {
    #[schema(minimum = 1)]
    pub id: i64,
    /// When the change's transaction began, RFC 3339 UTC.
    pub at: DateTime<Utc>,
    /// The account changed; kept after the account is deleted.
    pub account_id: Option<i64>,
    pub actor: Actor,
    /// `key.created`, `key.changed`, `key.rolled`, `key.revoked`,
    /// `subscription.activated`, `code.redeemed`, `payment.activated`,
    /// `subscription.ended` or `grant.added`.
    #[schema(example = "key.created")]
    pub action: String,
    /// What it happened to: `key:<key_id>`, `subscription:<subscription_id>` or
    /// `grant:<grant_id>`.
    #[schema(example = "key:42")]
    pub target: String,
    /// What changed (a key's name, prefix, expiry, scopes and limits; a subscription's
    /// plan and allowances; a top-up's units); never a secret.
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
    /// The client address the change came from; null when none is known or the gateway
    /// acted on its own.
    #[schema(example = "203.0.113.7")]
    pub ip: Option<String>,
}

/// A page of events, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditPage {
    pub events: Vec<AuditEvent>,
    /// Pass as `cursor` for the next (older) page; `null` on the last one.
    pub next_cursor: Option<String>,
}

/// Which events a page holds: one account's, one action's, both or all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filter {
    pub account_id: Option<i64>,
    pub action: Option<Action>,
}

/// `limit` as given, checked: a whole number from 1 to 200, 50 when left out. Read as
/// text, so that a refusal is in the product's words, not the integer parser's.
pub fn checked_limit(limit: Option<&str>) -> Result<i64, ApiError> {
    match limit.map(str::parse::<i64>) {
        None => Ok(DEFAULT_LIMIT),
        Some(Ok(n)) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::Validation(format!(
            "limit must be a whole number from 1 to {MAX_LIMIT}"
        ))),
    }
}

/// `account_id` as given, checked: a whole number (the events of an account that never
/// existed are none). Read as text, as `limit` is.
pub fn checked_account_id(account_id: Option<&str>) -> Result<Option<i64>, ApiError> {
    account_id
        .map(|text| {
            text.parse().map_err(|_| {
                ApiError::Validation("account_id must be an account id (a whole number)".into())
            })
        })
        .transpose()
}

/// Where a page starts: below the id a `next_cursor` named; the newest event when
/// `cursor` is absent or empty.
pub fn checked_cursor(cursor: Option<&str>) -> Result<i64, ApiError> {
    match cursor {
        None | Some("") => Ok(i64::MAX),
        // The document's pattern: up to 18 digits, so every cursor it allows parses.
        Some(c) if c.len() <= 18 && c.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(c.parse().expect("18 digits fit an i64"))
        }
        Some(_) => Err(ApiError::Validation(
            "cursor is not one this API gave (up to 18 digits)".into(),
        )),
    }
}

/// `action` as given, checked: one of the actions recorded.
pub fn checked_action(action: Option<&str>) -> Result<Option<Action>, ApiError> {
    match action {
        None => Ok(None),
        Some(text) => Action::parse(text).map(Some).ok_or_else(|| {
            let names: Vec<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
            ApiError::Validation(format!("action must be one of {}", names.join(", ")))
        }),
    }
}

/// A row as stored (`detail` and `ip` as text: the crate's sqlx reads neither type).
struct Row {
    id: i64,
    at: DateTime<Utc>,
    account_id: Option<i64>,
    actor: String,
    action: String,
    target: String,
    detail: String,
    ip: Option<String>,
}

impl TryFrom<Row> for AuditEvent {
    type Error = sqlx::Error;

    fn try_from(row: Row) -> Result<Self, sqlx::Error> {
        // The column's CHECK allows only what `Actor` reads.
        let actor = Actor::parse(&row.actor)
            .ok_or_else(|| sqlx::Error::Decode(format!("audit actor {:?}", row.actor).into()))?;
        let detail =
            serde_json::from_str(&row.detail).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
        Ok(AuditEvent {
            id: row.id,
            at: row.at,
            account_id: row.account_id,
            actor,
            action: row.action,
            target: row.target,
            detail,
            ip: row.ip,
        })
    }
}

/// The events `filter` picks with ids below `before`, newest first, at most `limit`;
/// `next_cursor` set when older ones follow. Each filter reads its own index, so the
/// statements stay apart rather than one with optional conditions.
pub async fn page(
    conn: &mut PgConnection,
    filter: Filter,
    before: i64,
    limit: i64,
) -> Result<AuditPage, sqlx::Error> {
    let action = filter.action.map(Action::as_str);
    let take = limit + 1;
    let rows = match (filter.account_id, action) {
        (Some(account_id), action) => {
            sqlx::query_as!(
                Row,
                r#"SELECT id, at, account_id, actor, action, target, detail::text AS "detail!",
                          host(ip) AS ip
                   FROM audit_event
                   WHERE account_id = $1 AND id < $2 AND ($3::text IS NULL OR action = $3)
                   ORDER BY id DESC LIMIT $4"#,
                account_id,
                before,
                action,
                take,
            )
            .fetch_all(&mut *conn)
            .await?
        }
        (None, Some(action)) => {
            sqlx::query_as!(
                Row,
                r#"SELECT id, at, account_id, actor, action, target, detail::text AS "detail!",
                          host(ip) AS ip
                   FROM audit_event WHERE action = $1 AND id < $2
                   ORDER BY id DESC LIMIT $3"#,
                action,
                before,
                take,
            )
            .fetch_all(&mut *conn)
            .await?
        }
        (None, None) => {
            sqlx::query_as!(
                Row,
                r#"SELECT id, at, account_id, actor, action, target, detail::text AS "detail!",
                          host(ip) AS ip
                   FROM audit_event WHERE id < $1 ORDER BY id DESC LIMIT $2"#,
                before,
                take,
            )
            .fetch_all(&mut *conn)
            .await?
        }
    };
    let mut events = rows
        .into_iter()
        .map(AuditEvent::try_from)
        .collect::<Result<Vec<_>, _>>()?;
    let more = events.len() as i64 > limit;
    events.truncate(limit as usize);
    let next_cursor = more
        .then(|| events.last().map(|e| e.id.to_string()))
        .flatten();
    Ok(AuditPage {
        events,
        next_cursor,
    })
}

/// The account's latest `count` events, newest first (the console's and the portal's).
pub async fn latest(
    conn: &mut PgConnection,
    account_id: i64,
    count: i64,
) -> Result<Vec<AuditEvent>, sqlx::Error> {
    let filter = Filter {
        account_id: Some(account_id),
        action: None,
    };
    Ok(page(conn, filter, i64::MAX, count).await?.events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_1_to_200_and_50_when_left_out() {
        assert_eq!(checked_limit(None).unwrap(), 50);
        assert_eq!(checked_limit(Some("1")).unwrap(), 1);
        assert_eq!(checked_limit(Some("200")).unwrap(), 200);
        for bad in [
            "0",
            "201",
            "-1",
            "9223372036854775807",
            "99999999999999999999",
            "",
            "x",
            "1.5",
        ] {
            let Err(ApiError::Validation(why)) = checked_limit(Some(bad)) else {
                panic!("{bad} refused");
            };
            assert_eq!(why, "limit must be a whole number from 1 to 200");
        }
    }

    #[test]
    fn an_account_id_is_a_whole_number() {
        assert_eq!(checked_account_id(None).unwrap(), None);
        assert_eq!(checked_account_id(Some("42")).unwrap(), Some(42));
        assert_eq!(checked_account_id(Some("-3")).unwrap(), Some(-3));
        for bad in ["", "x", "1.5", "99999999999999999999"] {
            let Err(ApiError::Validation(why)) = checked_account_id(Some(bad)) else {
                panic!("{bad:?} refused");
            };
            assert!(why.starts_with("account_id"), "{why}");
        }
    }

    #[test]
    fn cursors_are_the_ids_pages_end_at() {
        assert_eq!(checked_cursor(None).unwrap(), i64::MAX);
        assert_eq!(checked_cursor(Some("")).unwrap(), i64::MAX);
        assert_eq!(checked_cursor(Some("42")).unwrap(), 42);
        for bad in ["-1", "x", "1234567890123456789", " 4"] {
            let Err(ApiError::Validation(why)) = checked_cursor(Some(bad)) else {
                panic!("{bad} refused");
            };
            assert!(why.starts_with("cursor"), "{why}");
        }
    }

    #[test]
    fn an_action_is_one_recorded() {
        assert_eq!(checked_action(None).unwrap(), None);
        assert_eq!(
            checked_action(Some("grant.added")).unwrap(),
            Some(Action::GrantAdded)
        );
        for bad in ["key.deleted", ""] {
            let Err(ApiError::Validation(why)) = checked_action(Some(bad)) else {
                panic!("{bad:?} refused");
            };
            assert!(
                why.starts_with("action") && why.contains("key.created"),
                "{why}"
            );
        }
    }
}
