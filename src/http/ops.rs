//! Liveness and readiness probes.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::state::AppState;

/// 200 while the process runs.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// 200 when the database answers, else 503.
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let probe = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&state.db),
    )
    .await;
    match probe {
        Ok(Ok(_)) => (StatusCode::OK, Json(json!({"status": "ready"}))),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness: database unavailable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(
                    json!({"code": "SERVICE_UNAVAILABLE", "message": "The database does not answer."}),
                ),
            )
        }
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(
                json!({"code": "SERVICE_UNAVAILABLE", "message": "The database does not answer."}),
            ),
        ),
    }
}
