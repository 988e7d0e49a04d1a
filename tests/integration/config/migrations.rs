//! Migrations: the `migrate` command, the schema's contract, and what each step does
//! to existing rows.

use super::{stderr_line, tollgate};
use crate::common::{TestDb, admin_url};

#[tokio::test]
async fn migrate_creates_the_database_and_a_second_run_changes_nothing() {
    let name = format!("tollgate_test_{}", uuid::Uuid::new_v4().simple());
    let admin = admin_url();
    let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
    let first = tollgate(&["migrate"], &[("TOLLGATE__DATABASE__URL", &url)]);
    let first_out = String::from_utf8_lossy(&first.stdout).to_string();
    assert!(first.status.success(), "{}", stderr_line(&first));
    assert!(first_out.contains("created the database"), "{first_out}");
    for name in tollgate::db::shipped_migrations() {
        assert!(
            first_out.contains(&format!("applied {name}")),
            "{first_out}"
        );
    }

    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let schema = |pool: sqlx::PgPool| async move {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT table_name::text, column_name::text, data_type::text
             FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        let history: i64 = sqlx::query_scalar("SELECT count(*) FROM refinery_schema_history")
            .fetch_one(&pool)
            .await
            .unwrap();
        (rows, history)
    };
    let before = schema(pool.clone()).await;

    let second = tollgate(&["migrate"], &[("TOLLGATE__DATABASE__URL", &url)]);
    assert!(second.status.success());
    let second_out = String::from_utf8_lossy(&second.stdout);
    assert!(second_out.contains("no migration applied"), "{second_out}");
    assert_eq!(schema(pool.clone()).await, before);
    assert_eq!(before.1, tollgate::db::shipped_migrations().len() as i64);
    pool.close().await;

    let admin_pool = sqlx::PgPool::connect(&admin).await.unwrap();
    sqlx::query(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
        .execute(&admin_pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_schema_keeps_the_contract_table_names() {
    let db = TestDb::new().await;
    for table in [
        "account",
        "api_key",
        "subscription",
        "subscription_tracking",
        "monthly_usage",
    ] {
        let exists: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_name = $1)",
        )
        .bind(table)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert!(exists, "{table}");
    }
}

#[tokio::test]
async fn v3_gives_existing_subscriptions_3000_calls_and_existing_accounts_a_free_plan() {
    let db = TestDb::migrated_to(Some(2)).await;
    let legacy: i64 = sqlx::query_scalar(
        "INSERT INTO account (email, password_hash) VALUES ('old@example.com', 'x') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let bare: i64 = sqlx::query_scalar(
        "INSERT INTO account (email, password_hash) VALUES ('bare@example.com', 'x') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO subscription (account_id, plan, starts_at) VALUES ($1, 'gold', now())",
    )
    .bind(legacy)
    .execute(&db.pool)
    .await
    .unwrap();

    tollgate::db::migrate(&secrecy::SecretString::from(db.url.clone()))
        .await
        .unwrap();

    let gold: i64 =
        sqlx::query_scalar("SELECT monthly_allowance FROM subscription WHERE plan = 'gold'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(gold, 3000);
    for account in [legacy, bare] {
        let free: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM subscription WHERE account_id = $1 AND plan = 'free'",
        )
        .bind(account)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(free, 1);
    }
}

#[tokio::test]
async fn the_database_refuses_a_second_free_grant_for_the_same_month() {
    let db = TestDb::new().await;
    let account: i64 = sqlx::query_scalar(
        "INSERT INTO account (email, password_hash) VALUES ('a@example.com', 'x') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let sub: i64 = sqlx::query_scalar(
        "INSERT INTO subscription (account_id, plan, starts_at, monthly_allowance)
         VALUES ($1, 'free', now(), 3000) RETURNING id",
    )
    .bind(account)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let insert = || {
        sqlx::query(
            "INSERT INTO monthly_usage (account_id, subscription_id, month_start, allowance, is_free)
             VALUES ($1, $2, '2026-11-01T00:00:00Z', 3000, true)",
        )
        .bind(account)
        .bind(sub)
        .execute(&db.pool)
    };
    insert().await.unwrap();
    let err = insert().await.unwrap_err();
    assert!(matches!(err, sqlx::Error::Database(e) if e.is_unique_violation()));
}
