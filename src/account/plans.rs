//! `GET /account/v1/plans`: the plan catalogue as customers see it (SPEC §11).

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::config::PlanConfig;
use crate::error::ErrorBody;
use crate::plan::RateLimit;
use crate::state::AppState;
use crate::usage::rules::Enforcement;

/// One catalogue plan; the payment provider's price id is not shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PlanSummary {
    pub name: String,
    pub monthly_allowance: i64,
    pub daily_allowance: Option<i64>,
    pub enforcement: Enforcement,
    /// The features the plan includes (SPEC §17).
    pub features: Vec<String>,
    /// Calls per second and burst (SPEC §16); null = none.
    pub rate_limit: Option<RateLimit>,
    /// Units per fixed minute (SPEC §20); null = none.
    pub minute_allowance: Option<i64>,
    /// Micro-USD per unit; null = none.
    pub unit_price_micros: Option<i64>,
    /// The most a UTC day may cost, in micro-USD; null = no cap.
    pub spend_cap_day_micros: Option<i64>,
    /// The most a UTC month may cost, in micro-USD; null = no cap.
    pub spend_cap_month_micros: Option<i64>,
}

impl From<&PlanConfig> for PlanSummary {
    fn from(plan: &PlanConfig) -> Self {
        Self {
            name: plan.name.clone(),
            monthly_allowance: plan.monthly_allowance,
            daily_allowance: plan.daily_allowance,
            enforcement: plan.enforcement,
            features: plan.features.clone(),
            rate_limit: plan.terms().rate_limit,
            minute_allowance: plan.minute_allowance,
            unit_price_micros: plan.unit_price_micros,
            spend_cap_day_micros: plan.spend_cap_day_micros,
            spend_cap_month_micros: plan.spend_cap_month_micros,
        }
    }
}

/// The plans on offer, in catalogue order. No authentication.
#[utoipa::path(get, path = "/account/v1/plans", tag = "account",
    responses(
        (status = 200, description = "The plan catalogue, without payment price ids", body = [PlanSummary]),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
    ))]
pub async fn list_plans(State(state): State<AppState>) -> Json<Vec<PlanSummary>> {
    Json(
        state
            .catalogue
            .current()
            .iter()
            .map(PlanSummary::from)
            .collect(),
    )
}
