//! The `tollgate` command: `serve`, `worker` and `migrate` (SPEC §1). `serve` and
//! `worker` reload their configuration on `SIGHUP` (SPEC §20).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tollgate::config::{Config, Sources, UsageTransport};
use tollgate::{Gateway, Worker, db, telemetry};

// mimalloc: under load the proxy and the usage listener allocate on one thread and free on
// another; glibc's arenas made that a measured bound of full mode (see README, Performance).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tollgate",
    version,
    about = "Metering gateway for paid HTTP APIs"
)]
struct Cli {
    /// An extra TOML configuration layer, above config/ and below the environment.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway: public, metrics and usage listeners, marker sync.
    Serve,
    /// Apply pending database migrations (and create the JetStream stream and consumer
    /// when `usage_check.transport = "jetstream"`).
    Migrate,
    /// Run the background half: accounting consumer (JetStream), marker sync,
    /// reconciliation, and metrics and probes on the metrics listener.
    Worker,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tollgate: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Once, on stderr: the log may go to the same terminal or file, so the
            // fatal line is not logged as well.
            let line = tollgate::error::anyhow_chain(e.as_ref()).replace('\n', " ");
            eprintln!("tollgate: {line}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = Config::load(&Sources::from_process(cli.config))?;
    match cli.command {
        Command::Migrate => migrate(&config).await,
        Command::Serve => serve(config).await,
        Command::Worker => worker(config).await,
    }
}

async fn migrate(config: &Config) -> anyhow::Result<()> {
    let report = db::migrate(&config.database.url).await?;
    if report.created_database {
        println!("created the database");
    }
    if report.applied.is_empty() {
        println!("schema up to date; no migration applied");
    }
    for name in &report.applied {
        println!("applied {name}");
    }
    if config.usage_check.transport == UsageTransport::Jetstream {
        let client = tollgate::nats::connect(&config.nats, "tollgate migrate", true).await?;
        let js = tollgate::nats::jetstream(client);
        let ensured = tollgate::nats::ensure(&js, &config.nats).await?;
        let said = |created| if created { "created" } else { "already there" };
        println!(
            "JetStream stream {}: {}",
            config.nats.stream,
            said(ensured.stream_created)
        );
        println!(
            "JetStream consumer {}: {}",
            config.nats.consumer,
            said(ensured.consumer_created)
        );
    }
    Ok(())
}

/// Starts logging, applies migrations when asked, and opens the pool.
async fn prepare(config: &Config) -> anyhow::Result<sqlx::PgPool> {
    telemetry::init_tracing(&config.log);
    if config.database.migrate_on_start {
        let report = db::migrate(&config.database.url).await?;
        for name in &report.applied {
            tracing::info!(migration = %name, "migration applied");
        }
    }
    db::connect(
        &config.database.url,
        config.database.max_connections,
        std::time::Duration::from_millis(config.database.acquire_timeout_ms),
    )
    .await
}

async fn worker(config: Config) -> anyhow::Result<()> {
    config.validate_for_worker()?;
    let pool = prepare(&config).await?;
    let metrics = tokio::net::TcpListener::bind(config.server.metrics_listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.server.metrics_listen))?;
    tracing::info!(
        metrics = %metrics.local_addr()?,
        stream = %config.nats.stream,
        consumer = %config.nats.consumer,
        throttle = config.throttle.enabled,
        "tollgate worker running"
    );
    let mut worker = Worker::build(config, pool).await?;
    #[cfg(unix)]
    worker
        .reload_on_hangup()
        .context("cannot catch SIGHUP for reloads")?;
    worker.run(metrics, shutdown_signal()).await
}

async fn serve(config: Config) -> anyhow::Result<()> {
    config.validate_for_serve()?;
    let pool = prepare(&config).await?;
    let public = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.server.listen))?;
    let metrics = tokio::net::TcpListener::bind(config.server.metrics_listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.server.metrics_listen))?;
    if config.is_local_profile() {
        tracing::warn!("local profile: metering and throttling are off");
    }
    tracing::info!(
        listen = %public.local_addr()?,
        metrics = %metrics.local_addr()?,
        tls = config.server.tls_cert.is_some(),
        throttle = config.throttle.enabled,
        metering = config.usage_check.enabled,
        "tollgate serving"
    );
    let mut gateway = Gateway::build(config, pool).await?;
    // Caught before /readyz answers, so a SIGHUP sent once the gateway is up reloads.
    #[cfg(unix)]
    gateway
        .reload_on_hangup()
        .context("cannot catch SIGHUP for reloads")?;
    gateway.run(public, Some(metrics), shutdown_signal()).await
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}
