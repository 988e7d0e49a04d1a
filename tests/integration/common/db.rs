//! A fresh PostgreSQL database per test: created and migrated on demand, dropped
//! when the test ends.

use std::time::Duration;

use secrecy::SecretString;
use sqlx::PgPool;

/// The server tests connect to for creating and dropping their databases.
pub fn admin_url() -> String {
    std::env::var("TOLLGATE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn url_for(database: &str) -> String {
    let admin = admin_url();
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
    format!("{base}/{database}")
}

/// A database of its own, migrated, dropped when the test ends.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
}

impl TestDb {
    /// Creates and fully migrates a fresh database.
    pub async fn new() -> Self {
        Self::migrated_to(None).await
    }

    /// Creates a fresh database migrated up to `target` (all when `None`).
    pub async fn migrated_to(target: Option<u32>) -> Self {
        let name = format!("tollgate_test_{}", uuid::Uuid::new_v4().simple());
        let url = url_for(&name);
        tollgate::db::migrate_to(&SecretString::from(url.clone()), target)
            .await
            .expect("test database can be created and migrated");
        let pool = tollgate::db::connect(
            &SecretString::from(url.clone()),
            20,
            Duration::from_secs(10),
        )
        .await
        .expect("test database answers");
        Self { name, url, pool }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop runs inside the test's runtime; use a thread with its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                if let Ok(pool) = sqlx::PgPool::connect(&admin_url()).await {
                    let _ =
                        sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                            .execute(&pool)
                            .await;
                }
            });
        })
        .join();
    }
}
