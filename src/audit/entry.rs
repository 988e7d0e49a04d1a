//! What one audit row says and how it is written: who asked ([`Actor`], [`Origin`]),
//! what happened ([`Action`]) to what ([`Target`]), and a small detail of what changed.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sqlx::PgConnection;
use utoipa::ToSchema;

/// Who asked for a change (the `actor` column's CHECK lists the same four).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Actor {
    /// The customer, through a session of the account API or the portal (or signing up).
    Account,
    /// The operator, through the admin token or the console.
    Admin,
    /// A Stripe payment event.
    Stripe,
    /// The gateway by its own rules (the free subscription every account is given).
    System,
}

impl Actor {
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Account => "account",
            Actor::Admin => "admin",
            Actor::Stripe => "stripe",
            Actor::System => "system",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Actor::Account, Actor::Admin, Actor::Stripe, Actor::System]
            .into_iter()
            .find(|a| a.as_str() == text)
    }
}

/// Who asked for a change and from which client address (none when the face knows
/// none, or the gateway acted on its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub actor: Actor,
    pub ip: Option<IpAddr>,
}

impl Origin {
    /// The gateway by its own rules: no address.
    pub const SYSTEM: Origin = Origin {
        actor: Actor::System,
        ip: None,
    };

    /// The customer, from `ip` (the address the request's limits count under).
    pub fn account(ip: IpAddr) -> Self {
        Self::from(Actor::Account, ip)
    }

    /// The operator, from `ip`.
    pub fn admin(ip: IpAddr) -> Self {
        Self::from(Actor::Admin, ip)
    }

    /// A Stripe event, delivered from `ip`.
    pub fn stripe(ip: IpAddr) -> Self {
        Self::from(Actor::Stripe, ip)
    }

    /// `ip` as recorded: an IPv4 address mapped into IPv6 as the IPv4 address, and the
    /// unspecified address (a router served without a known peer) as none.
    fn from(actor: Actor, ip: IpAddr) -> Self {
        let ip = ip.to_canonical();
        Self {
            actor,
            ip: (!ip.is_unspecified()).then_some(ip),
        }
    }

    /// This origin recording `action`.
    pub fn cause(self, action: Action) -> Cause {
        Cause {
            origin: self,
            action,
            extra: Map::new(),
        }
    }
}

/// What happened, as the `action` column names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum Action {
    #[serde(rename = "key.created")]
    KeyCreated,
    /// A `PATCH` of its name, expiry, scopes, monthly limit or rate limit.
    #[serde(rename = "key.changed")]
    KeyChanged,
    #[serde(rename = "key.rolled")]
    KeyRolled,
    #[serde(rename = "key.revoked")]
    KeyRevoked,
    /// By an operator (admin API or console), or at signup (the free subscription).
    #[serde(rename = "subscription.activated")]
    SubscriptionActivated,
    /// A redemption code turned into a subscription.
    #[serde(rename = "code.redeemed")]
    CodeRedeemed,
    /// A paid checkout or invoice turned into a subscription.
    #[serde(rename = "payment.activated")]
    PaymentActivated,
    /// Ended early by a cancelled payment.
    #[serde(rename = "subscription.ended")]
    SubscriptionEnded,
    /// A top-up of credit.
    #[serde(rename = "grant.added")]
    GrantAdded,
}

impl Action {
    pub const ALL: [Action; 9] = [
        Action::KeyCreated,
        Action::KeyChanged,
        Action::KeyRolled,
        Action::KeyRevoked,
        Action::SubscriptionActivated,
        Action::CodeRedeemed,
        Action::PaymentActivated,
        Action::SubscriptionEnded,
        Action::GrantAdded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::KeyCreated => "key.created",
            Action::KeyChanged => "key.changed",
            Action::KeyRolled => "key.rolled",
            Action::KeyRevoked => "key.revoked",
            Action::SubscriptionActivated => "subscription.activated",
            Action::CodeRedeemed => "code.redeemed",
            Action::PaymentActivated => "payment.activated",
            Action::SubscriptionEnded => "subscription.ended",
            Action::GrantAdded => "grant.added",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Action::ALL.into_iter().find(|a| a.as_str() == text)
    }
}

/// What a change happened to, as the `target` column names it (`key:42`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Key(i64),
    Subscription(i64),
    Grant(i64),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Key(id) => write!(f, "key:{id}"),
            Target::Subscription(id) => write!(f, "subscription:{id}"),
            Target::Grant(id) => write!(f, "grant:{id}"),
        }
    }
}

/// Why a change is made, for a domain function that records under more than one action
/// (an activation is an operator's, a redemption's or a payment's): who asked, the
/// action, and what the caller adds to the detail (a code's id, a payment's event).
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    pub origin: Origin,
    pub action: Action,
    pub extra: Map<String, Value>,
}

impl Cause {
    /// This cause, its rows' detail also saying `key: value`.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    /// The entry of this cause about `target` of `account_id`, with `detail` (an
    /// object) and the cause's additions.
    pub fn entry(&self, account_id: i64, target: Target, detail: Value) -> Entry {
        let mut detail = match detail {
            Value::Object(map) => map,
            other => Map::from_iter([("value".to_owned(), other)]),
        };
        detail.extend(self.extra.clone());
        Entry {
            account_id,
            action: self.action,
            target,
            detail: Value::Object(detail),
        }
    }
}

/// One audit row as a change records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub account_id: i64,
    pub action: Action,
    pub target: Target,
    /// A small object of what changed; never a secret.
    pub detail: Value,
}

/// Writes `entry` as `origin`'s, on the connection of the change's own transaction.
/// (The crate's sqlx reads no `jsonb` or `inet`: both travel as text.)
pub async fn record(
    conn: &mut PgConnection,
    origin: Origin,
    entry: &Entry,
) -> Result<i64, sqlx::Error> {
    let id = sqlx::query_scalar!(
        "INSERT INTO audit_event (account_id, actor, action, target, detail, ip)
         VALUES ($1, $2, $3, $4, $5::text::jsonb, $6::text::inet) RETURNING id",
        entry.account_id,
        origin.actor.as_str(),
        entry.action.as_str(),
        entry.target.to_string(),
        entry.detail.to_string(),
        origin.ip.map(|ip| ip.to_string()),
    )
    .fetch_one(conn)
    .await?;
    tracing::debug!(
        audit_id = id,
        account_id = entry.account_id,
        action = entry.action.as_str(),
        "audit event recorded"
    );
    Ok(id)
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use serde_json::json;

    use super::*;

    #[test]
    fn actions_and_actors_read_back_as_written() {
        for action in Action::ALL {
            assert_eq!(Action::parse(action.as_str()), Some(action));
            assert_eq!(
                serde_json::to_value(action).unwrap(),
                json!(action.as_str())
            );
        }
        assert_eq!(Action::parse("key.deleted"), None);
        for actor in ["account", "admin", "stripe", "system"] {
            let parsed = Actor::parse(actor).unwrap();
            assert_eq!(serde_json::to_value(parsed).unwrap(), json!(actor));
        }
        assert_eq!(Actor::parse("root"), None);
    }

    #[test]
    fn an_unknown_peer_is_no_address_and_a_mapped_one_is_its_ipv4() {
        assert_eq!(Origin::admin(Ipv4Addr::UNSPECIFIED.into()).ip, None);
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(
            Origin::account(mapped).ip,
            Some(Ipv4Addr::new(192, 0, 2, 7).into())
        );
        assert_eq!(
            Origin::stripe(Ipv6Addr::LOCALHOST.into()).ip,
            Some(Ipv6Addr::LOCALHOST.into())
        );
        assert_eq!(Origin::SYSTEM.ip, None);
    }

    #[test]
    fn a_causes_additions_join_the_detail() {
        let cause = Origin::SYSTEM
            .cause(Action::CodeRedeemed)
            .with("code_id", 9);
        let entry = cause.entry(3, Target::Subscription(5), json!({"plan": "pro"}));
        assert_eq!(entry.detail, json!({"plan": "pro", "code_id": 9}));
        assert_eq!(entry.target.to_string(), "subscription:5");
        assert_eq!(entry.action, Action::CodeRedeemed);
    }
}
