//! The plans page (SPEC §11, §12, §17): the catalogue with each plan's features and rate
//! limit, the customer's current plan marked and what it includes (the entitlements of
//! `GET /account/v1/entitlements`), each plan with a `checkout_url` linking to the
//! payment provider's hosted page with `client_reference_id=<account_id>`
//! ([`PlanConfig::checkout_link`]), and a form redeeming a code through
//! `POST /account/v1/redeem`'s handler (same service, same failed-attempt limit).
//!
//! [`PlanConfig::checkout_link`]: crate::config::PlanConfig::checkout_link

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use maud::{Markup, html};
use serde::Deserialize;

use super::overview::Done;
use super::page::{Frame, PortalProblem, Section, notice, ok, shell};
use super::session::Customer;
use crate::accounts::codes;
use crate::error::ApiError;
use crate::plan::RateLimit;
use crate::state::AppState;
use crate::usage::report::entitlements;
use crate::web::client::ClientIp;
use crate::web::page::{csrf_field, grouped};

/// The redeem form (no `Debug`: it holds the code).
#[derive(Deserialize)]
pub struct RedeemForm {
    csrf: Option<String>,
    code: Option<String>,
}

/// The plans page.
pub async fn page(
    State(state): State<AppState>,
    customer: Customer,
    Query(done): Query<Done>,
) -> Result<Response, PortalProblem> {
    let plans = state.catalogue.current();
    let current = {
        let mut conn = state.db.acquire().await?;
        entitlements(
            &mut conn,
            customer.account_id,
            Utc::now(),
            state.config.usage.free_monthly_calls,
            &state.catalogue.free_terms(),
        )
        .await?
        .ok_or(ApiError::AccountNotFound)?
    };
    let content = html! {
        h1 { "Plans" }
        p #current-plan { "You are on the " strong { (current.plan) } " plan." }
        p #current-features {
            @if current.features.is_empty() {
                "It includes no features beyond the standard endpoints."
            } @else {
                "It includes " (features(&current.features)) "."
            }
        }
        @if plans.is_empty() {
            p.empty { "No plans are on offer." }
        } @else {
            table #plans {
                thead { tr {
                    th { "Plan" } th.num { "Units per month" } th.num { "Units per day" }
                    th { "Enforcement" } th { "Rate limit" } th { "Features" } th { "" }
                } }
                tbody {
                    @for plan in plans.iter() {
                        @let mine = plan.name == current.plan;
                        tr data-plan=(plan.name) aria-current=[mine.then_some("true")] {
                            td {
                                (plan.name)
                                @if mine { " " span.badge.active { "your plan" } }
                            }
                            td.num { (grouped(plan.monthly_allowance)) }
                            td.num { @match plan.daily_allowance { Some(n) => (grouped(n)), None => "—" } }
                            td { (plan.enforcement.as_str()) }
                            td.rate-limit { @match plan.terms().rate_limit { Some(r) => (rate_in_words(&r)), None => "—" } }
                            td.features {
                                @if plan.features.is_empty() { "—" } @else { (features(&plan.features)) }
                            }
                            td {
                                @if mine {
                                } @else if let Some(link) = plan.checkout_link(customer.account_id) {
                                    a.upgrade href=(link) rel="noopener noreferrer" { "Upgrade" }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Redeem a code" }
        form #redeem method="post" action="/portal/redeem" {
            (csrf_field(customer.csrf()))
            label for="code" { "Code" }
            input #code type="text" name="code" maxlength="200" autocomplete="off" required;
            button type="submit" { "Redeem" }
        }
    };
    let frame = Frame {
        section: Section::Plans,
        csrf: customer.csrf(),
        notice: notice(done.done.as_deref()),
    };
    Ok(ok(shell("Plans", Some(frame), content)))
}

/// A list of features, each as the entitlement routes name it.
fn features(names: &[String]) -> Markup {
    html! {
        @for (i, name) in names.iter().enumerate() {
            @if i > 0 { ", " }
            code.feature { (name) }
        }
    }
}

/// A rate limit in words: `10 calls a second, bursts of 20`.
pub(super) fn rate_in_words(limit: &RateLimit) -> String {
    format!(
        "{} calls a second, bursts of {}",
        grouped(i64::from(limit.per_second)),
        grouped(i64::from(limit.burst))
    )
}

/// Redeems a code; the overview shows the new plan.
pub async fn redeem(
    State(state): State<AppState>,
    customer: Customer,
    ClientIp(ip): ClientIp,
    form_data: Result<Form<RedeemForm>, FormRejection>,
) -> Result<Response, PortalProblem> {
    let redeemed = async {
        let Form(form_data) = form_data.map_err(|e| PortalProblem::bad_form(&e))?;
        customer.check_csrf(form_data.csrf.as_deref())?;
        let code = form_data.code.unwrap_or_default();
        let _created = codes::redeem(
            &state.db,
            &state.allocation,
            &state.limits,
            customer.account_id,
            &code,
            ip,
            Utc::now(),
        )
        .await?;
        Ok::<_, PortalProblem>(())
    }
    .await;
    redeemed.map_err(|p| p.back_to("/portal/plans", Some(customer.csrf())))?;
    Ok(Redirect::to("/portal/?done=redeemed").into_response())
}
