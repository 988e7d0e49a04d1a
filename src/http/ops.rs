//! Liveness and readiness probes.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::state::AppState;

/// 200 while the process runs.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// 200 when the database answers, else 503.
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    database_ready(&state.db).await
}

/// `/readyz` of a process without the public state (`tollgate worker`).
pub async fn readyz_of_pool(State(db): State<PgPool>) -> (StatusCode, Json<Value>) {
    database_ready(&db).await
}

async fn database_ready(db: &PgPool) -> (StatusCode, Json<Value>) {
    let probe = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(db),
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
