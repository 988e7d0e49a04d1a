//! Liveness and readiness probes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Whether this router has seen every shipped migration applied. Migrations only ever
/// add, so once true it stays true and the probe is back to a plain `SELECT 1`.
#[derive(Debug, Clone, Default)]
pub struct SchemaSeen(Arc<AtomicBool>);

/// What the probe found wrong.
enum NotReady {
    Database(Option<sqlx::Error>),
    /// (applied, needed) migration versions.
    Migrations(i64, i64),
}

/// 200 when the database answers and holds every migration of this build, else 503
/// (with `database.migrate_on_start = false`, every request would fail until
/// `tollgate migrate` has run).
pub async fn readyz(
    State(state): State<AppState>,
    schema: SchemaSeen,
) -> (StatusCode, Json<Value>) {
    readiness(&state.db, &schema).await
}

/// `/readyz` of a process without the public state (`tollgate worker`).
pub async fn readyz_of_pool(
    State(db): State<PgPool>,
    schema: SchemaSeen,
) -> (StatusCode, Json<Value>) {
    readiness(&db, &schema).await
}

async fn readiness(db: &PgPool, schema: &SchemaSeen) -> (StatusCode, Json<Value>) {
    let probe = tokio::time::timeout(std::time::Duration::from_secs(2), probe(db, schema))
        .await
        .unwrap_or(Err(NotReady::Database(None)));
    let message = match probe {
        Ok(()) => return (StatusCode::OK, Json(json!({"status": "ready"}))),
        Err(NotReady::Database(e)) => {
            if let Some(e) = e {
                tracing::warn!(error = %e, "readiness: database unavailable");
            }
            "The database does not answer.".to_owned()
        }
        Err(NotReady::Migrations(applied, needed)) => {
            tracing::warn!(applied, needed, "readiness: database migrations pending");
            let applied = match applied {
                0 => "none applied".to_owned(),
                v => format!("applied up to V{v}"),
            };
            format!("Database migrations are pending: {applied}, this build needs V{needed}.")
        }
    };
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"code": "SERVICE_UNAVAILABLE", "message": message})),
    )
}

async fn probe(db: &PgPool, schema: &SchemaSeen) -> Result<(), NotReady> {
    if schema.0.load(Ordering::Relaxed) {
        return sqlx::query_scalar::<_, i32>("SELECT 1")
            .fetch_one(db)
            .await
            .map(drop)
            .map_err(|e| NotReady::Database(Some(e)));
    }
    let applied = crate::db::applied_migration_version(db)
        .await
        .map_err(|e| NotReady::Database(Some(e)))?;
    let needed = crate::db::latest_migration_version();
    if applied < needed {
        return Err(NotReady::Migrations(applied, needed));
    }
    schema.0.store(true, Ordering::Relaxed);
    Ok(())
}
