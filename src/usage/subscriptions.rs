//! The subscription allocation service behind `POST /admin/v1/accounts/{id}/subscriptions`.
//!
//! Activation locks the account (the same lock the listener takes, so accounting and
//! activation serialize), inserts the subscription, records it in the audit log as its
//! cause says (an operator's, a redeemed code's, a payment's) and, when metering,
//! writes its current-month snapshot, all in the same transaction. An upgrade only
//! changes the ceiling: the calls already used this month stay counted.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sqlx::{PgConnection, PgPool};
use utoipa::ToSchema;

use super::announce::announce;
use super::grants::{Grant, ensure_free_subscriptions, ensure_snapshots, load_subscriptions};
use super::report::standings;
use super::rules::{
    Enforcement, MarkerAction, Standing, Subscription, daily_marker_action, marker_action,
};
use super::standing::QuotaView;
use crate::audit::{self, Action, Cause, Origin, Target};
use crate::config::Catalogue;
use crate::error::ApiError;
use crate::month::{Day, Month};
use crate::plan::{PlanTerms, RateLimit};
use crate::throttle::Throttler;

/// What an operator asks for.
#[derive(Debug, Clone)]
pub struct NewSubscription {
    pub plan: String,
    pub monthly_allowance: i64,
    pub starts_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub daily_allowance: Option<i64>,
    pub enforcement: Enforcement,
    /// Features and rate limit, fixed at activation.
    pub terms: PlanTerms,
}

#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    #[error("account not found")]
    AccountNotFound,
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl From<ActivationError> for ApiError {
    fn from(err: ActivationError) -> Self {
        match err {
            ActivationError::AccountNotFound => ApiError::AccountNotFound,
            ActivationError::Database(e) => ApiError::from(e),
        }
    }
}

/// An activated subscription as the admin API and redemption answer it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SubscriptionCreated {
    #[schema(minimum = 1)]
    pub subscription_id: i64,
    #[schema(minimum = 1)]
    pub account_id: i64,
    /// As given, surrounding whitespace trimmed.
    pub plan: String,
    #[schema(minimum = 0)]
    pub monthly_allowance: i64,
    pub starts_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub daily_allowance: Option<i64>,
    pub enforcement: Enforcement,
    /// The features it includes (SPEC §17).
    pub features: Vec<String>,
    /// Calls per second and burst (SPEC §16); null = none.
    pub rate_limit: Option<RateLimit>,
    /// Units per fixed minute (SPEC §20); null = none.
    pub minute_allowance: Option<i64>,
    /// Micro-USD per unit; null = no price.
    pub unit_price_micros: Option<i64>,
    /// The most a UTC day may cost, in micro-USD; null = no cap.
    pub spend_cap_day_micros: Option<i64>,
    /// The most a UTC month may cost, in micro-USD; null = no cap.
    pub spend_cap_month_micros: Option<i64>,
}

impl From<Subscription> for SubscriptionCreated {
    fn from(sub: Subscription) -> Self {
        let terms = sub.terms();
        Self {
            features: terms.features,
            rate_limit: terms.rate_limit,
            minute_allowance: terms.budget.minute_allowance,
            unit_price_micros: terms.budget.unit_price_micros,
            spend_cap_day_micros: terms.budget.spend_cap_day_micros,
            spend_cap_month_micros: terms.budget.spend_cap_month_micros,
            subscription_id: sub.id,
            account_id: sub.account_id,
            plan: sub.plan,
            monthly_allowance: sub.monthly_allowance,
            starts_at: sub.starts_at,
            expires_at: sub.expires_at,
            daily_allowance: sub.daily_allowance,
            enforcement: sub.enforcement,
        }
    }
}

/// A subscription as the audit log records it: its plan and figures, nothing else.
pub fn detail(sub: &Subscription) -> Value {
    json!({
        "plan": sub.plan,
        "monthly_allowance": sub.monthly_allowance,
        "daily_allowance": sub.daily_allowance,
        "enforcement": sub.enforcement.as_str(),
        "starts_at": sub.starts_at,
        "expires_at": sub.expires_at,
        "features": sub.features,
        "rate_limit": RateLimit::from_columns(sub.rate_per_second, sub.rate_burst),
        "minute_allowance": sub.budget.minute_allowance,
        "unit_price_micros": sub.budget.unit_price_micros,
        "spend_cap_day_micros": sub.budget.spend_cap_day_micros,
        "spend_cap_month_micros": sub.budget.spend_cap_month_micros,
    })
}

/// The stored subscription and the account's standing in the current month after it.
#[derive(Debug, Clone)]
pub struct Activated {
    pub subscription: Subscription,
    pub standing: Option<Standing>,
}

/// The subscription allocation service: every activation — by an operator, a
/// redeemed code or a payment — and every top-up goes through it, so each writes its
/// snapshot in its own transaction and leaves the account's markers right.
#[derive(Clone)]
pub struct Allocation {
    pub db: PgPool,
    pub throttler: Throttler,
    pub quota: QuotaView,
    pub free_monthly_calls: i64,
    /// False in local mode: no snapshots, no markers.
    pub metering: bool,
    /// The plan catalogue as it stands, whose features and rate limits a subscription
    /// of a catalogue plan is activated with.
    pub plans: Catalogue,
}

impl Allocation {
    /// The features and rate limit of the catalogue plan named `plan`; none elsewhere.
    pub fn catalogue_terms(&self, plan: &str) -> PlanTerms {
        self.plans.terms(plan)
    }

    /// Activates `new` for `account_id` in a transaction of its own, recorded as
    /// `origin`'s `subscription.activated`. Once committed, the account's markers follow
    /// its new standing: removed when it has units again, written when it has none.
    pub async fn activate(
        &self,
        account_id: i64,
        new: &NewSubscription,
        origin: Origin,
        now: DateTime<Utc>,
    ) -> Result<Activated, ActivationError> {
        let cause = origin.cause(Action::SubscriptionActivated);
        let mut tx = self.db.begin().await?;
        let activated = self
            .activate_in(&mut tx, account_id, new, &cause, now)
            .await?;
        tx.commit().await?;
        self.settle(activated.standing.as_ref(), account_id, now);
        Ok(activated)
    }

    /// Activates inside the caller's transaction (which may record more beside it, as
    /// a redeemed code), with the audit row `cause` names. The caller commits, then
    /// calls [`Allocation::settle`].
    #[tracing::instrument(skip_all, fields(account_id = account_id))]
    pub async fn activate_in(
        &self,
        tx: &mut PgConnection,
        account_id: i64,
        new: &NewSubscription,
        cause: &Cause,
        now: DateTime<Utc>,
    ) -> Result<Activated, ActivationError> {
        lock_account(&mut *tx, account_id).await?;
        let subscription: Subscription = sqlx::query_as(
            "INSERT INTO subscription
                 (account_id, plan, starts_at, expires_at, monthly_allowance, daily_allowance,
                  enforcement, features, rate_per_second, rate_burst, minute_allowance,
                  unit_price_micros, spend_cap_day_micros, spend_cap_month_micros)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
             RETURNING id, account_id, plan, monthly_allowance, starts_at, expires_at,
                       daily_allowance, enforcement, features, rate_per_second, rate_burst,
                       minute_allowance, unit_price_micros, spend_cap_day_micros,
                       spend_cap_month_micros",
        )
        .bind(account_id)
        .bind(&new.plan)
        .bind(new.starts_at)
        .bind(new.expires_at)
        .bind(new.monthly_allowance)
        .bind(new.daily_allowance)
        .bind(new.enforcement.as_str())
        .bind(&new.terms.features)
        .bind(RateLimit::columns(new.terms.rate_limit).0)
        .bind(RateLimit::columns(new.terms.rate_limit).1)
        .bind(new.terms.budget.minute_allowance)
        .bind(new.terms.budget.unit_price_micros)
        .bind(new.terms.budget.spend_cap_day_micros)
        .bind(new.terms.budget.spend_cap_month_micros)
        .fetch_one(&mut *tx)
        .await?;
        let entry = cause.entry(
            account_id,
            Target::Subscription(subscription.id),
            detail(&subscription),
        );
        audit::record(&mut *tx, cause.origin, &entry).await?;

        let standing = self
            .restand(&mut *tx, account_id, now, |s| {
                s.id == subscription.id && s.overlaps(Month::containing(now))
            })
            .await?;
        tracing::info!(subscription_id = subscription.id, plan = %subscription.plan,
            monthly_allowance = subscription.monthly_allowance, "subscription activated");
        Ok(Activated {
            subscription,
            standing,
        })
    }

    /// After a change of the locked account's subscriptions or credits, in the same
    /// transaction: when metering, the current month's snapshots of its free grant and of
    /// the paid subscriptions `include` picks are written, and its new standing is
    /// returned; other replicas are told to read it again.
    pub(super) async fn restand(
        &self,
        tx: &mut PgConnection,
        account_id: i64,
        now: DateTime<Utc>,
        include: impl Fn(&Subscription) -> bool,
    ) -> Result<Option<Standing>, ActivationError> {
        let current = Month::containing(now);
        let mut standing = None;
        if self.metering {
            let free = self.free_monthly_calls;
            ensure_free_subscriptions(&mut *tx, &[account_id], free).await?;
            let subs = load_subscriptions(&mut *tx, &[account_id]).await?;
            let grants: Vec<Grant> = subs
                .get(&account_id)
                .into_iter()
                .flatten()
                .filter(|s| s.is_free() || include(s))
                .map(|s| Grant::for_month(s, current, free))
                .collect();
            ensure_snapshots(&mut *tx, &grants).await?;
            standing = standings(&mut *tx, &[account_id], current, now, free)
                .await?
                .into_iter()
                .next();
        }
        announce(&mut *tx, self.quota.replica(), &[account_id]).await?;
        Ok(standing)
    }

    /// After a committed change of the account's standing: this replica's view forgets
    /// it, and its markers follow it.
    pub fn settle(&self, standing: Option<&Standing>, account_id: i64, now: DateTime<Utc>) {
        self.quota.forget(&[account_id]);
        if let Some(standing) = standing {
            apply_markers(&self.throttler, standing, now);
        }
    }
}

/// Takes the account's row lock (the one accounting takes), or says it does not exist.
pub(super) async fn lock_account(
    tx: &mut PgConnection,
    account_id: i64,
) -> Result<(), ActivationError> {
    match crate::db::lock_account(tx, account_id).await? {
        true => Ok(()),
        false => Err(ActivationError::AccountNotFound),
    }
}

/// Makes the account's markers follow a standing that just changed outside accounting
/// (an activation, a top-up): another replica's marker may stand whatever this
/// replica's view says, so an account with units again is always restored.
pub fn apply_markers(throttler: &Throttler, standing: &Standing, now: DateTime<Utc>) {
    let account_id = standing.account_id;
    match marker_action(standing, true) {
        MarkerAction::Exhaust => throttler.exhaust(account_id, Month::containing(now), now),
        MarkerAction::Restore => throttler.restore(account_id, now),
        MarkerAction::Keep => {}
    }
    let marked_today = throttler.is_marked_today(account_id, now);
    match daily_marker_action(standing, marked_today) {
        MarkerAction::Exhaust => throttler.exhaust_day(account_id, Day::containing(now), now),
        MarkerAction::Restore => throttler.restore_day(account_id, now),
        MarkerAction::Keep => {}
    }
}
