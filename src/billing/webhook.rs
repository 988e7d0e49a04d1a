//! `POST /billing/v1/stripe`: Stripe's payment events (SPEC §11).
//!
//! The raw body is verified against `Stripe-Signature` before anything reads it
//! (`400 BAD_SIGNATURE` otherwise). Each event id is processed once: the event's row in
//! `stripe_event` is claimed first, in the same transaction as everything the event
//! does, so a redelivery (or a concurrent duplicate) finds it and answers 200 changing
//! nothing. Events that name an unknown account, customer or plan are recorded with
//! that outcome, logged and counted, and answered 200 — Stripe retrying would not
//! help. Only an unreachable database answers 503, so Stripe retries later.

use std::sync::LazyLock;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use chrono::{DateTime, Utc};
use secrecy::ExposeSecret;
use serde::Serialize;
use utoipa::ToSchema;

use super::apply::{Applied, Billing};
use super::event::{Envelope, Event};
use super::outcome::Outcome;
use super::signature::verify;
use crate::audit::Origin;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use crate::telemetry::RateLimitedLog;
use crate::usage::subscriptions::ActivationError;
use crate::web::client::ClientIp;

/// What the gateway answers Stripe (Stripe reads only the status).
#[derive(Debug, Serialize, ToSchema)]
pub struct EventReceived {
    pub id: String,
    /// `activated`, `pending`, `payment_failed`, `ended`, `ignored`, `duplicate`,
    /// `unknown_account`, `unknown_customer`, `unknown_plan` or `malformed`.
    pub outcome: String,
}

static BAD_SIGNATURE_LOG: LazyLock<RateLimitedLog> = LazyLock::new(RateLimitedLog::default);

/// Receives one Stripe event.
#[utoipa::path(post, path = "/billing/v1/stripe", tag = "billing",
    params(("Stripe-Signature" = String, Header,
        description = "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + \".\" + body)>")),
    request_body(content = Object, content_type = "application/json",
        description = "A Stripe event (a JSON object), exactly as Stripe sent it."),
    responses(
        (status = 200, description = "Processed, or recorded and ignored", body = EventReceived),
        (status = 400, description = "BAD_SIGNATURE: missing, invalid or stale signature (or MALFORMED_JSON: a signed body that is not an event)", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: the body exceeds 16 KiB", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: content-type is not application/json", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: never sent; a bad event is 400", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn stripe_webhook(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<EventReceived>), ApiError> {
    if !is_json(&headers) {
        return Err(ApiError::UnsupportedMediaType);
    }
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge,
        _ => ApiError::MalformedJson("it could not be read".into()),
    })?;
    let Some(secret) = state.config.billing.stripe_webhook_secret.as_ref() else {
        return Err(ApiError::NotFound);
    };
    // A header that is not text is as bad as a malformed one.
    let header = headers
        .get("stripe-signature")
        .map(|v| v.to_str().unwrap_or(""));
    let now = Utc::now();
    if let Err(why) = verify(
        header,
        &body,
        secret.expose_secret().as_bytes(),
        now.timestamp(),
    ) {
        metrics::counter!("tollgate_billing_signature_failures_total", "reason" => why.label())
            .increment(1);
        if BAD_SIGNATURE_LOG.allow() {
            tracing::warn!(
                reason = why.label(),
                suppressed = BAD_SIGNATURE_LOG.take_suppressed(),
                "stripe webhook refused"
            );
        }
        return Err(ApiError::BadSignature(why.label()));
    }
    let Some(envelope) = Envelope::parse(&body) else {
        return Err(ApiError::MalformedJson(
            "a Stripe event has an id, a type and data.object".into(),
        ));
    };
    let outcome = process(&state, &envelope, Origin::stripe(ip), now).await?;
    metrics::counter!("tollgate_billing_events_total",
        "type" => envelope.type_label(), "outcome" => outcome.label())
    .increment(1);
    Ok((
        StatusCode::OK,
        Json(EventReceived {
            id: envelope.id,
            outcome: outcome.label().into(),
        }),
    ))
}

/// Whether the request says its body is JSON (`application/json`, any parameters).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// Processes one verified event in one transaction; settles standings after commit.
#[tracing::instrument(skip_all, fields(event_id = %envelope.id, event_type = %envelope.kind))]
async fn process(
    state: &AppState,
    envelope: &Envelope,
    origin: Origin,
    now: DateTime<Utc>,
) -> Result<Outcome, ApiError> {
    let mut tx = state.db.begin().await?;
    let claimed: Option<String> = sqlx::query_scalar(
        "INSERT INTO stripe_event (id, type, outcome) VALUES ($1, $2, 'processing')
         ON CONFLICT (id) DO NOTHING RETURNING id",
    )
    .bind(&envelope.id)
    .bind(&envelope.kind)
    .fetch_optional(&mut *tx)
    .await?;
    if claimed.is_none() {
        tracing::info!("stripe event already processed");
        return Ok(Outcome::Duplicate);
    }
    let plans = state.catalogue.current();
    let billing = Billing {
        plans: &plans,
        allocation: &state.allocation,
        origin,
        now,
    };
    let applied = match envelope.read() {
        Err(why) => {
            tracing::warn!(why, "stripe event lacks what its type needs");
            Ok(Applied {
                outcome: Outcome::Malformed,
                ..Applied::default()
            })
        }
        Ok(Event::Other) => Ok(Applied::default()),
        Ok(Event::PaymentFailed) => Ok(Applied {
            outcome: Outcome::PaymentFailed,
            ..Applied::default()
        }),
        Ok(Event::Checkout(checkout)) => billing.checkout(&mut tx, &envelope.id, &checkout).await,
        Ok(Event::InvoicePaid(invoice)) => {
            billing.invoice_paid(&mut tx, &envelope.id, &invoice).await
        }
        Ok(Event::SubscriptionDeleted(deleted)) => {
            billing
                .subscription_deleted(&mut tx, &envelope.id, &deleted)
                .await
        }
    };
    let applied = match applied {
        Ok(applied) => applied,
        // The account vanished between the lookup and the activation.
        Err(ActivationError::AccountNotFound) => Applied {
            outcome: Outcome::UnknownAccount,
            ..Applied::default()
        },
        Err(ActivationError::Database(e)) => return Err(ApiError::from(e)),
    };
    sqlx::query(
        "UPDATE stripe_event SET outcome = $2, customer = $3, account_id = $4 WHERE id = $1",
    )
    .bind(&envelope.id)
    .bind(applied.outcome.label())
    .bind(&applied.customer)
    .bind(applied.account_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    for (account_id, standing) in &applied.settle {
        state.allocation.settle(standing.as_ref(), *account_id, now);
    }
    if applied.outcome.is_unapplied() {
        tracing::warn!(
            outcome = applied.outcome.label(),
            customer = applied.customer,
            account_id = applied.account_id,
            "stripe event recorded but not applied"
        );
    } else {
        tracing::info!(
            outcome = applied.outcome.label(),
            account_id = applied.account_id,
            "stripe event processed"
        );
    }
    Ok(applied.outcome)
}
