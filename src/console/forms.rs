//! The account page's forms: add a subscription, add a top-up.
//!
//! Each form is checked for the session's CSRF token first (`403` without it), then read
//! into the admin API's own request and checked by the admin API's own rules, and goes
//! through the same allocation service. Done: a one-time message and a redirect back to
//! the account (post, redirect, get). Refused: the account page again, `422`, with the
//! form as it was filled in and what was wrong. The audit log records each change as the
//! operator's (`admin`), from the address the form came from.

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};

use super::account::{Echo, SubscriptionFields, TopUpFields, render};
use super::page::{FlashKind, Problem, grouped};
use super::session::ConsoleSession;
use crate::audit::Origin;
use crate::error::ApiError;
use crate::month::Month;
use crate::state::AppState;
use crate::usage::requests::{GrantRequest, SubscriptionRequest, validate, validate_grant};
use crate::usage::rules::Enforcement;
use crate::web::client::ClientIp;

pub async fn add_subscription(
    State(state): State<AppState>,
    session: ConsoleSession,
    ClientIp(ip): ClientIp,
    Path(account_id): Path<String>,
    form: Result<Form<SubscriptionFields>, FormRejection>,
) -> Result<Response, Problem> {
    let Form(fields) = form.map_err(|e| Problem::bad_form(&e))?;
    session.check_csrf(fields.csrf.as_deref())?;
    let account_id: i64 = account_id.parse().map_err(|_| ApiError::AccountNotFound)?;
    let now = Utc::now();
    let outcome = async {
        let request = subscription_request(&fields)?;
        let new = validate(request, &state.catalogue.current(), now)?;
        state
            .allocation
            .activate(account_id, &new, Origin::admin(ip), now)
            .await
            .map_err(ApiError::from)
    }
    .await;
    match outcome {
        Ok(activated) => {
            let sub = activated.subscription;
            let text = format!(
                "Subscription {} added: {}, {} units a month.",
                sub.id,
                sub.plan,
                grouped(sub.monthly_allowance)
            );
            done(&state, &session, account_id, &text).await
        }
        Err(ApiError::Validation(why)) => {
            let echo = Echo {
                subscription: Some((fields, in_labels(&why))),
                ..Echo::default()
            };
            render(&state, &session, account_id, Month::containing(now), &echo).await
        }
        Err(other) => Err(Problem::from(other).back_to(
            format!("/console/accounts/{account_id}"),
            Some(session.csrf()),
        )),
    }
}

pub async fn add_top_up(
    State(state): State<AppState>,
    session: ConsoleSession,
    ClientIp(ip): ClientIp,
    Path(account_id): Path<String>,
    form: Result<Form<TopUpFields>, FormRejection>,
) -> Result<Response, Problem> {
    let Form(fields) = form.map_err(|e| Problem::bad_form(&e))?;
    session.check_csrf(fields.csrf.as_deref())?;
    let account_id: i64 = account_id.parse().map_err(|_| ApiError::AccountNotFound)?;
    let now = Utc::now();
    let outcome = async {
        let request = GrantRequest {
            calls: number("Units", fields.calls.as_deref())?
                .ok_or_else(|| ApiError::Validation("Units: give a number of units".into()))?,
            expires_at: instant("Expires", fields.expires_at.as_deref())?,
        };
        validate_grant(&request, now)?;
        state
            .allocation
            .add_credit(
                account_id,
                request.calls,
                request.expires_at,
                Origin::admin(ip),
                now,
            )
            .await
            .map_err(ApiError::from)
    }
    .await;
    match outcome {
        Ok(topup) => {
            let text = format!("Top-up {} added: {} units.", topup.id, grouped(topup.calls));
            done(&state, &session, account_id, &text).await
        }
        Err(ApiError::Validation(why)) => {
            let echo = Echo {
                top_up: Some((fields, in_labels(&why))),
                ..Echo::default()
            };
            render(&state, &session, account_id, Month::containing(now), &echo).await
        }
        Err(other) => Err(Problem::from(other).back_to(
            format!("/console/accounts/{account_id}"),
            Some(session.csrf()),
        )),
    }
}

/// Leaves `text` for the account page and goes back to it.
async fn done(
    state: &AppState,
    session: &ConsoleSession,
    account_id: i64,
    text: &str,
) -> Result<Response, Problem> {
    session
        .leave_flash(&state.db, FlashKind::Done, text)
        .await?;
    Ok(Redirect::to(&format!("/console/accounts/{account_id}")).into_response())
}

/// The admin API's subscription request from the form's text.
fn subscription_request(fields: &SubscriptionFields) -> Result<SubscriptionRequest, ApiError> {
    let enforcement = match fields.enforcement.as_deref().map(str::trim) {
        None | Some("") => None,
        Some("soft") => Some(Enforcement::Soft),
        Some("hard") => Some(Enforcement::Hard),
        Some(_) => {
            return Err(ApiError::Validation(
                "Enforcement: choose soft or hard".into(),
            ));
        }
    };
    Ok(SubscriptionRequest {
        plan: fields.plan.clone().unwrap_or_default(),
        monthly_allowance: number("Monthly allowance", fields.monthly_allowance.as_deref())?,
        // Left empty: the catalogue plan's, else none.
        daily_allowance: number("Daily allowance", fields.daily_allowance.as_deref())?.map(Some),
        enforcement,
        starts_at: instant("Starts", fields.starts_at.as_deref())?,
        expires_at: instant("Expires", fields.expires_at.as_deref())?,
        // The catalogue plan's, else none.
        rate_limit: None,
        features: None,
        minute_allowance: None,
        unit_price_micros: None,
        spend_cap_day_micros: None,
        spend_cap_month_micros: None,
    })
}

/// The admin API's message about a field, with the field named as the form labels it
/// (`calls must be…` beside a field labelled "Units" reads as `Units must be…`).
pub fn in_labels(why: &str) -> String {
    const LABELS: [(&str, &str); 7] = [
        ("monthly_allowance", "Monthly allowance"),
        ("daily_allowance", "Daily allowance"),
        ("enforcement", "Enforcement"),
        ("starts_at", "Starts"),
        ("expires_at", "Expires"),
        ("calls", "Units"),
        ("plan", "Plan"),
    ];
    let mut text = why.to_owned();
    for (field, label) in LABELS {
        text = text
            .split(' ')
            .map(|word| {
                let bare = word.trim_end_matches([',', ':', ';', '.']);
                if bare == field {
                    format!("{label}{}", &word[bare.len()..])
                } else {
                    word.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(" ");
    }
    text
}

/// A whole number (`1,000` and `1 000` read as 1000), or none when left empty.
fn number(field: &str, text: Option<&str>) -> Result<Option<i64>, ApiError> {
    let digits: String = text
        .unwrap_or_default()
        .chars()
        .filter(|c| !matches!(c, ',' | '_' | ' '))
        .collect();
    if digits.is_empty() {
        return Ok(None);
    }
    digits
        .parse()
        .map(Some)
        .map_err(|_| ApiError::Validation(format!("{field}: give a whole number")))
}

/// An instant in UTC: RFC 3339, what a `datetime-local` field sends
/// (`YYYY-MM-DDTHH:MM[:SS]`), or a day (its midnight); none when left empty.
fn instant(field: &str, text: Option<&str>) -> Result<Option<DateTime<Utc>>, ApiError> {
    let text = text.unwrap_or_default().trim();
    if text.is_empty() {
        return Ok(None);
    }
    crate::web::params::utc_instant(text)
        .map(Some)
        .ok_or_else(|| {
            ApiError::Validation(format!(
                "{field}: give a date and time in UTC, like 2026-12-01 00:00"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_take_separators_and_empty_means_none() {
        assert_eq!(number("n", Some("1,000")).unwrap(), Some(1000));
        assert_eq!(number("n", Some(" 12 500 ")).unwrap(), Some(12500));
        assert_eq!(number("n", Some("")).unwrap(), None);
        assert_eq!(number("n", None).unwrap(), None);
        assert!(number("n", Some("ten")).is_err());
    }

    #[test]
    fn instants_are_utc_in_the_forms_a_browser_sends() {
        let midnight: DateTime<Utc> = "2026-12-01T00:00:00Z".parse().unwrap();
        assert_eq!(
            instant("t", Some("2026-12-01T00:00")).unwrap(),
            Some(midnight)
        );
        assert_eq!(instant("t", Some("2026-12-01")).unwrap(), Some(midnight));
        assert_eq!(
            instant("t", Some("2026-12-01T01:00:00+01:00")).unwrap(),
            Some(midnight)
        );
        assert_eq!(instant("t", Some(" ")).unwrap(), None);
        assert!(instant("t", Some("tomorrow")).is_err());
    }

    #[test]
    fn api_field_names_read_as_the_forms_labels() {
        assert_eq!(
            in_labels("calls must be an integer from 1 to 1000000"),
            "Units must be an integer from 1 to 1000000"
        );
        assert_eq!(
            in_labels("expires_at must be after starts_at"),
            "Expires must be after Starts"
        );
        assert_eq!(
            in_labels("the plan: free is reserved"),
            "the Plan: free is reserved"
        );
        assert_eq!(in_labels("nothing to rename"), "nothing to rename");
    }

    #[test]
    fn a_bad_date_shows_an_example_in_the_labels_format() {
        let Err(ApiError::Validation(why)) = instant("Starts", Some("tomorrow")) else {
            panic!("refused");
        };
        assert!(why.contains("like 2026-12-01 00:00"), "{why}");
    }

    #[test]
    fn a_catalogue_plan_may_leave_its_figures_out() {
        let fields = SubscriptionFields {
            plan: Some("pro".into()),
            ..SubscriptionFields::default()
        };
        let req = subscription_request(&fields).unwrap();
        assert_eq!(req.monthly_allowance, None);
        assert_eq!(req.daily_allowance, None);
        assert_eq!(req.enforcement, None);
    }
}
