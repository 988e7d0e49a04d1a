//! PostgreSQL: the connection pool, and the migrations of `migrations/`.
//!
//! Migrations run through refinery's tokio-postgres driver (refinery has no sqlx driver),
//! under a session advisory lock so replicas starting together apply them once. The
//! application itself talks to PostgreSQL through an sqlx pool; [`listen`] keeps a
//! per-replica view on a `NOTIFY` channel.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use sqlx::ConnectOptions;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio_util::sync::CancellationToken;

mod embedded {
    refinery::embed_migrations!("migrations");
}

/// Pause before a lost listener connects again.
const RELISTEN_PAUSE: Duration = Duration::from_millis(500);

/// Hands each notification of `channel` to `apply` until `stop`, connecting again after
/// a lost connection. What was sent while not listening is unknown, so `start_over` runs
/// once LISTEN has taken effect and again when the connection is lost; `what` names the
/// listener in the warning.
pub async fn listen(
    db: &PgPool,
    channel: &str,
    what: &str,
    stop: &CancellationToken,
    mut start_over: impl FnMut(),
    mut apply: impl FnMut(&str),
) {
    while !stop.is_cancelled() {
        let result = async {
            let mut listener = PgListener::connect_with(db).await?;
            listener.listen(channel).await?;
            start_over();
            loop {
                let notification = tokio::select! {
                    _ = stop.cancelled() => return Ok::<_, sqlx::Error>(()),
                    n = listener.recv() => n?,
                };
                apply(notification.payload());
            }
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "{what} listener lost; reconnecting");
            start_over();
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(RELISTEN_PAUSE) => {}
            }
        }
    }
}

/// Arbitrary but fixed key of the advisory lock that serializes `migrate` runs.
const MIGRATION_LOCK_KEY: i64 = 0x746f_6c6c_6761_7465; // "tollgate"

/// Connection options parsed from `database.url`.
pub fn connect_options(url: &SecretString) -> anyhow::Result<PgConnectOptions> {
    PgConnectOptions::from_str(url.expose_secret())
        .context("database.url is not a valid PostgreSQL URL")
}

/// Opens the pool and checks that the database answers.
pub async fn connect(
    url: &SecretString,
    max_connections: u32,
    acquire_timeout: Duration,
) -> anyhow::Result<PgPool> {
    let options = connect_options(url)?;
    let pool = pool_options(max_connections, acquire_timeout)
        .connect_with(options)
        .await
        .context("cannot reach the database")?;
    Ok(pool)
}

/// A pool that connects on first use; for callers that must start while the database is down.
pub fn connect_lazy(
    url: &SecretString,
    max_connections: u32,
    acquire_timeout: Duration,
) -> anyhow::Result<PgPool> {
    Ok(pool_options(max_connections, acquire_timeout).connect_lazy_with(connect_options(url)?))
}

fn pool_options(max_connections: u32, acquire_timeout: Duration) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
}

/// What one `migrate` run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// `V<n>__<name>` of each migration applied by this run, in order.
    pub applied: Vec<String>,
    pub created_database: bool,
}

/// Applies every pending migration, creating the database first when it does not exist.
pub async fn migrate(url: &SecretString) -> anyhow::Result<MigrationReport> {
    migrate_to(url, None).await
}

/// Applies pending migrations up to and including version `target` (all when `None`).
pub async fn migrate_to(
    url: &SecretString,
    target: Option<u32>,
) -> anyhow::Result<MigrationReport> {
    let created_database = create_database_if_missing(url).await?;
    let mut client = connect_raw(url.expose_secret()).await?;
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])
        .await
        .context("cannot take the migration lock")?;
    let target = match target {
        Some(version) => refinery::Target::Version(version as _),
        None => refinery::Target::Latest,
    };
    let result = embedded::migrations::runner()
        .set_target(target)
        .set_abort_divergent(true)
        .run_async(&mut client)
        .await;
    // The lock is released with the session anyway; unlocking early lets a waiter go on.
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY])
        .await;
    let report = result.context("migration failed")?;
    let applied = report
        .applied_migrations()
        .iter()
        .map(|m| format!("V{}__{}", m.version(), m.name()))
        .collect();
    Ok(MigrationReport {
        applied,
        created_database,
    })
}

async fn connect_raw(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .context("cannot reach the database")?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "migration connection closed");
        }
    });
    Ok(client)
}

/// `CREATE DATABASE` when the URL's database does not exist yet (SQLSTATE 3D000).
async fn create_database_if_missing(url: &SecretString) -> anyhow::Result<bool> {
    let options = connect_options(url)?;
    match options.connect().await {
        Ok(conn) => {
            drop(conn);
            Ok(false)
        }
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("3D000") => {
            let name = options
                .get_database()
                .context("database.url names no database")?
                .to_owned();
            let mut admin = options
                .clone()
                .database("postgres")
                .connect()
                .await
                .context("cannot reach the maintenance database `postgres`")?;
            let statement = format!("CREATE DATABASE \"{}\"", name.replace('"', "\"\""));
            match sqlx::query(&statement).execute(&mut admin).await {
                Ok(_) => Ok(true),
                // Another process created it first.
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => Ok(false),
                Err(e) => Err(e).context("cannot create the database"),
            }
        }
        Err(e) => Err(anyhow::Error::new(e).context("cannot reach the database")),
    }
}

/// Errors that say nothing about the request or the data: the same work succeeds once
/// the database is reachable again (lost connections, pool timeouts, failover and its
/// read-only phase, serialization failures, lock timeouts, resource exhaustion).
pub fn is_transient(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            ["08", "25006", "40", "53", "57", "55P03"]
                .iter()
                .any(|prefix| code.starts_with(prefix))
        }),
        _ => false,
    }
}

/// Takes the row locks of the `account` rows of `ids` for the rest of the transaction,
/// in id order (every writer of an account's usage, plan or keys locks this way, so
/// two transactions never wait for each other in a circle), and returns the ids found
/// and locked, ascending. `skip_busy`: rows another transaction holds are left out
/// instead of waited for. Accounting, plan changes, hard-plan reservations and key
/// creation all serialize on this lock.
pub async fn lock_accounts(
    conn: &mut sqlx::PgConnection,
    ids: &[i64],
    skip_busy: bool,
) -> Result<Vec<i64>, sqlx::Error> {
    let sql = if skip_busy {
        "SELECT id FROM account WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED"
    } else {
        "SELECT id FROM account WHERE id = ANY($1) ORDER BY id FOR UPDATE"
    };
    sqlx::query_scalar(sql).bind(ids).fetch_all(conn).await
}

/// [`lock_accounts`] for one account: whether it exists (and is now locked).
pub async fn lock_account(conn: &mut sqlx::PgConnection, id: i64) -> Result<bool, sqlx::Error> {
    Ok(!lock_accounts(conn, &[id], false).await?.is_empty())
}

/// Waits, for the rest of the transaction, until no other transaction holds the
/// `account` rows of `ids` for writing (a share lock in id order, see
/// [`lock_accounts`]): a read after it sees what the writers that held them committed.
pub async fn await_account_writers(
    conn: &mut sqlx::PgConnection,
    ids: &[i64],
) -> Result<(), sqlx::Error> {
    let sql = "SELECT id FROM account WHERE id = ANY($1) ORDER BY id FOR SHARE";
    sqlx::query(sql).bind(ids).execute(conn).await?;
    Ok(())
}

/// A lock wait that ran past `lock_timeout` (SQLSTATE 55P03).
pub fn is_lock_timeout(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03"))
}

/// Version of the newest migration shipped in this binary.
pub fn latest_migration_version() -> i64 {
    embedded::migrations::runner()
        .get_migrations()
        .iter()
        .map(|m| i64::from(m.version()))
        .max()
        .unwrap_or(0)
}

/// Version of the newest migration applied to the database; 0 when none ever was.
pub async fn applied_migration_version(db: &PgPool) -> Result<i64, sqlx::Error> {
    let applied = sqlx::query_scalar::<_, Option<i64>>(
        "SELECT max(version)::int8 FROM refinery_schema_history",
    )
    .fetch_one(db)
    .await;
    match applied {
        Ok(version) => Ok(version.unwrap_or(0)),
        // undefined_table: refinery never ran here.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => Ok(0),
        Err(e) => Err(e),
    }
}

/// Names of every migration shipped in this binary, `V<n>__<name>`.
pub fn shipped_migrations() -> Vec<String> {
    embedded::migrations::runner()
        .get_migrations()
        .iter()
        .map(|m| format!("V{}__{}", m.version(), m.name()))
        .collect()
}
