//! Wiring: build the state, start the background tasks, serve, shut down in order.
//!
//! [`Gateway::build`] starts the throttler worker, the usage pipeline (the listener, or
//! the JetStream publisher and consumer), the threshold webhooks' delivery (where usage
//! is accounted) and the ledger's monthly partitions there, the key cache's listener and
//! the reconciliation schedule, and builds the [`Reloader`] over the holders a reload
//! replaces (SPEC §20);
//! [`Gateway::run`] serves the public and metrics listeners until shutdown, then drains
//! in order: stop accepting and finish in-flight calls (bounded), drain the usage queue
//! (bounded), stop the rest. [`Worker`] is the
//! background half alone (`tollgate worker`): no public listener, no proxy.

use crate::accounts::last_used::LastUsed;
use crate::throttle::rate::RateLimits;
use crate::usage::analytics::RouteBook;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use secrecy::ExposeSecret;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::auth::account_limits::AccountLimits;
use crate::auth::attempts::Attempts;
use crate::auth::key_cache::KeyCache;
use crate::auth::password::Passwords;
use crate::cloudflare::{CallBudget, KvClient, KvSettings};
use crate::config::{Catalogue, Config, MarkerStoreKind, UsageTransport};
use crate::proxy::entitlements::Entitlements;
use crate::proxy::pricing::Pricing;
use crate::proxy::upstream::Upstream;
use crate::reload::{Live, Reloader};
use crate::state::{AppState, Shared};
use crate::telemetry::traces::Tracing;
use crate::throttle::fleet::budget::PgCallBudget;
use crate::throttle::{Fleet, MarkerCheck, MarkerStore, ThrottleSettings, Throttler};
use crate::usage;
use crate::usage::accounting::transport::{Pipeline, Role};
use crate::usage::accounting::{self, Accountant, UsagePublisher};
use crate::usage::key_limits::KeyLimits;
use crate::usage::standing::QuotaView;
use crate::usage::subscriptions::Allocation;

/// Installs ring as rustls' process-wide crypto provider (idempotent).
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A built gateway: state plus the background tasks serving it.
pub struct Gateway {
    state: AppState,
    /// The calls' traces (SPEC §22): off unless `telemetry.otlp_endpoint` is set.
    tracing: Tracing,
    accountant: Option<Accountant>,
    stop_listener: CancellationToken,
    stop_background: CancellationToken,
    usage: Option<Pipeline>,
    background: Vec<JoinHandle<()>>,
}

/// The marker store the configuration asks for. Cloudflare calls are bounded by this
/// process's budget and by the fleet's, counted in `db`.
pub fn marker_store(config: &Config, db: &PgPool) -> anyhow::Result<MarkerStore> {
    Ok(match config.throttle.store {
        MarkerStoreKind::Memory => MarkerStore::memory(),
        MarkerStoreKind::Cloudflare => {
            let cf = &config.cloudflare;
            match (&cf.account_id, &cf.namespace_id, &cf.api_token) {
                (Some(account_id), Some(namespace_id), Some(api_token)) => {
                    let http = reqwest::Client::builder()
                        .redirect(reqwest::redirect::Policy::none())
                        .build()?;
                    let t = &config.throttle;
                    let window = Duration::from_millis(t.kv_budget_window_ms);
                    let fleet_budget =
                        PgCallBudget::new(db.clone(), api_token, t.kv_call_budget, window);
                    MarkerStore::Cloudflare(KvClient::new(
                        KvSettings {
                            api_base: cf.api_base.clone(),
                            account_id: account_id.clone(),
                            namespace_id: namespace_id.clone(),
                            api_token: api_token.expose_secret().into(),
                            call_timeout: Duration::from_millis(t.kv_timeout_ms),
                            budget: CallBudget::new(t.kv_call_budget, window),
                            shared_budget: Some(Arc::new(fleet_budget)),
                        },
                        http,
                    ))
                }
                _ => {
                    tracing::warn!(
                        "cloudflare.account_id, namespace_id and api_token are not all set: \
                         exhaustion markers are off and every call is admitted (fail open)"
                    );
                    MarkerStore::Unconfigured
                }
            }
        }
    })
}

impl Gateway {
    /// Builds the state and starts the background tasks.
    pub async fn build(config: Config, db: PgPool) -> anyhow::Result<Self> {
        install_crypto();
        crate::telemetry::prometheus();
        let config = Arc::new(config);
        // Everything fallible comes before any task is spawned.
        let upstream = Arc::new(Upstream::from_config(&config)?);
        let store = if config.throttle.enabled {
            Some(marker_store(&config, &db)?)
        } else {
            None
        };
        let stop_background = CancellationToken::new();
        let stop_listener = CancellationToken::new();
        let mut background = Vec::new();
        let (tracing, exporter) = Tracing::start(&config.telemetry, stop_background.clone())?;
        background.extend(exporter);

        let throttler = start_throttler(&config, &db, store, &stop_background, &mut background);

        // What a reload replaces (SPEC §20), each held once and shared by its readers.
        let catalogue = Catalogue::from_config(&config);
        let routes = Arc::new(RouteBook::from_config(&config));
        let pricing = Arc::new(Pricing::from_config(&config.pricing)?);
        let entitlements = Arc::new(Entitlements::from_config(&config.entitlements));

        let quota = if config.usage_check.enabled {
            QuotaView::new(
                db.clone(),
                config.usage.free_monthly_calls,
                catalogue.clone(),
                throttler.clone(),
            )
        } else {
            QuotaView::disabled()
        };
        background.extend(quota.start(stop_background.clone()));
        let key_limits = if config.usage_check.enabled {
            KeyLimits::new(db.clone())
        } else {
            KeyLimits::disabled()
        };
        background.extend(key_limits.start(stop_background.clone()));

        let (publisher, accountant, usage) = if config.usage_check.enabled {
            let accountant =
                accountant(&config, &db, &throttler, routes.clone()).with_quota(quota.clone());
            background.push(accountant.merge_latencies(
                Duration::from_millis(config.analytics.latency_flush_ms),
                stop_background.clone(),
            ));
            let pipeline = Pipeline::start(
                &config,
                accountant.clone(),
                Role::Serve,
                stop_listener.clone(),
            )
            .await?;
            (pipeline.publisher(), Some(accountant), Some(pipeline))
        } else {
            (UsagePublisher::disabled(), None, None)
        };
        // Events are recorded where usage is accounted, and delivered from there too.
        let accounts_here =
            config.usage_check.transport == UsageTransport::Memory || config.usage_check.consume;
        if config.usage_check.enabled && accounts_here {
            start_accounting_chores(&config, &db, &stop_background, &mut background);
        }

        if config.throttle.enabled && config.usage_check.enabled {
            background.push(tokio::spawn(reconcile_schedule(
                db.clone(),
                throttler.clone(),
                config.usage.free_monthly_calls,
                Duration::from_millis(config.throttle.reconcile_interval_ms),
                stop_background.clone(),
            )));
        }

        background.push(tokio::spawn(purge_expired_sessions(
            db.clone(),
            stop_background.clone(),
        )));

        let limits = AccountLimits::new(Attempts::new(db.clone()), &config);
        background.push(tokio::spawn(housekeep_limits(
            limits.clone(),
            stop_background.clone(),
        )));

        let keys = if config.key_cache.enabled {
            KeyCache::new(config.key_cache.max_entries)
        } else {
            KeyCache::disabled()
        };
        background.extend(keys.start(db.clone(), stop_background.clone()));

        let allocation = Allocation {
            db: db.clone(),
            throttler: throttler.clone(),
            quota: quota.clone(),
            free_monthly_calls: config.usage.free_monthly_calls,
            metering: config.usage_check.enabled,
            plans: catalogue.clone(),
        };
        let reloader = Arc::new(Reloader::new(
            config.clone(),
            Live {
                catalogue: Some(catalogue.clone()),
                pricing: Some(pricing.clone()),
                entitlements: Some(entitlements.clone()),
                routes: Some(routes.clone()),
                accountant: accountant.clone(),
            },
            Config::validate_for_serve,
        ));
        let rates = RateLimits::new();
        background.push(crate::throttle::presence::start(
            db.clone(),
            uuid::Uuid::new_v4(),
            rates.clone(),
            stop_background.clone(),
        ));
        let last_used = LastUsed::new(keys.clone());
        background.push(last_used.start(db.clone(), stop_background.clone()));
        let state = AppState::new(
            Shared {
                catalogue,
                reloader,
                routes,
                past_days: Default::default(),
                minutes: crate::throttle::minute::MinuteWindows::new(rates.clone()),
                rates,
                last_used,
                quota,
                key_limits,
                allocation,
                config,
                db,
                usage: publisher,
                throttler,
                keys,
                passwords: Passwords::default(),
                limits,
            },
            upstream,
            pricing,
            entitlements,
        );
        Ok(Self {
            state,
            tracing,
            accountant,
            stop_listener,
            stop_background,
            usage,
            background,
        })
    }

    pub fn state(&self) -> AppState {
        self.state.clone()
    }

    /// The accountant the listener uses (absent in local mode).
    pub fn accountant(&self) -> Option<Accountant> {
        self.accountant.clone()
    }

    /// Reloads the configuration on every `SIGHUP` from now on (SPEC §20), until
    /// shutdown. Only `tollgate serve` asks: tests start gateways inside their own process.
    #[cfg(unix)]
    pub fn reload_on_hangup(&mut self) -> std::io::Result<()> {
        let reloader = self.state.reloader.clone();
        let task = crate::reload::on_hangup(reloader, self.stop_background.clone())?;
        self.background.push(task);
        Ok(())
    }

    /// Serves until `shutdown` resolves, then drains and stops everything.
    pub async fn run(
        self,
        public: TcpListener,
        metrics: Option<TcpListener>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let stop_metrics = CancellationToken::new();
        let metrics_task = metrics.map(|listener| {
            let stop = stop_metrics.clone();
            tokio::spawn(async move {
                let app = crate::http::metrics_router();
                if let Err(e) = axum::serve(listener, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await
                {
                    tracing::error!(error = %e, "metrics listener failed");
                }
            })
        });

        let served = serve_traced(public, self.state.clone(), self.tracing.clone(), shutdown).await;
        tracing::info!("public listener closed; draining usage queue");

        self.stop_listener.cancel();
        if let Some(usage) = self.usage {
            usage.stopped().await;
        }
        self.stop_background.cancel();
        stop_metrics.cancel();
        for task in self.background.into_iter().chain(metrics_task) {
            let _ = task.await;
        }
        tracing::info!("stopped");
        served.context("public listener failed")
    }
}

/// The background half of the gateway (`tollgate worker`, SPEC §1 and §8): the
/// JetStream accounting consumer, marker sync, reconciliation and the threshold
/// webhooks' delivery, with `/metrics`, `/healthz` and `/readyz` on the metrics listener
/// and no public listener.
pub struct Worker {
    db: PgPool,
    reloader: Arc<Reloader>,
    stop_usage: CancellationToken,
    stop_background: CancellationToken,
    usage: Pipeline,
    background: Vec<JoinHandle<()>>,
}

impl Worker {
    /// Starts the background tasks; refuses a configuration without the JetStream
    /// transport.
    pub async fn build(config: Config, db: PgPool) -> anyhow::Result<Self> {
        config.validate_for_worker()?;
        install_crypto();
        crate::telemetry::prometheus();
        let store = if config.throttle.enabled {
            Some(marker_store(&config, &db)?)
        } else {
            None
        };
        let stop_background = CancellationToken::new();
        let stop_usage = CancellationToken::new();
        let mut background = Vec::new();
        let throttler = start_throttler(&config, &db, store, &stop_background, &mut background);
        let routes = Arc::new(RouteBook::from_config(&config));
        let accountant = accountant(&config, &db, &throttler, routes.clone());
        background.push(accountant.merge_latencies(
            Duration::from_millis(config.analytics.latency_flush_ms),
            stop_background.clone(),
        ));
        let reloader = Arc::new(Reloader::new(
            Arc::new(config.clone()),
            Live {
                routes: Some(routes),
                accountant: Some(accountant.clone()),
                ..Live::default()
            },
            Config::validate_for_worker,
        ));
        let usage = Pipeline::start(&config, accountant, Role::Worker, stop_usage.clone()).await?;
        start_accounting_chores(&config, &db, &stop_background, &mut background);
        if config.throttle.enabled {
            background.push(tokio::spawn(reconcile_schedule(
                db.clone(),
                throttler,
                config.usage.free_monthly_calls,
                Duration::from_millis(config.throttle.reconcile_interval_ms),
                stop_background.clone(),
            )));
        }
        Ok(Self {
            db,
            reloader,
            stop_usage,
            stop_background,
            usage,
            background,
        })
    }

    /// Reloads the configuration on every `SIGHUP` from now on, until shutdown: the
    /// thresholds and route names of what this worker accounts, and the log filter.
    #[cfg(unix)]
    pub fn reload_on_hangup(&mut self) -> std::io::Result<()> {
        let task = crate::reload::on_hangup(self.reloader.clone(), self.stop_background.clone())?;
        self.background.push(task);
        Ok(())
    }

    /// Serves the metrics listener until `shutdown` resolves, then lets the consumer
    /// finish its batches (bounded) and stops the rest.
    pub async fn run(
        self,
        metrics: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let app = crate::http::worker_router(self.db.clone());
        let served = axum::serve(metrics, app)
            .with_graceful_shutdown(shutdown)
            .await;
        tracing::info!("stopping: finishing the batches being accounted");
        self.stop_usage.cancel();
        self.usage.stopped().await;
        self.stop_background.cancel();
        for task in self.background {
            let _ = task.await;
        }
        tracing::info!("stopped");
        served.context("metrics listener failed")
    }
}

/// The throttler the configuration asks for, its worker pushed onto `background`.
fn start_throttler(
    config: &Config,
    db: &PgPool,
    store: Option<MarkerStore>,
    stop: &CancellationToken,
    background: &mut Vec<JoinHandle<()>>,
) -> Throttler {
    let Some(store) = store else {
        return Throttler::disabled();
    };
    let settings = ThrottleSettings {
        admission_percent: config.throttle.admission_percent,
        refresh_interval: Duration::from_millis(config.throttle.refresh_interval_ms),
        max_staleness: Duration::from_millis(config.throttle.max_staleness_ms),
        kv_call_budget: config.throttle.kv_call_budget,
        kv_budget_window: Duration::from_millis(config.throttle.kv_budget_window_ms),
    };
    // Whoever writes a marker re-checks the account's standing in PostgreSQL.
    let check = config.usage_check.enabled.then(|| {
        Arc::new(usage::reconcile::StandingCheck {
            db: db.clone(),
            free_monthly_calls: config.usage.free_monthly_calls,
        }) as Arc<dyn MarkerCheck>
    });
    let fleet = Fleet::new(db.clone(), check);
    let (throttler, tasks) = Throttler::start(settings, store, fleet, stop.clone());
    background.extend(tasks);
    throttler
}

/// What runs beside the accounting consumer in the process that accounts usage (`serve`
/// with a consumer, or `worker`): threshold webhook delivery, the Stripe meter export and
/// the ledger's next partitions, pushed onto `background`.
fn start_accounting_chores(
    config: &Config,
    db: &PgPool,
    stop: &CancellationToken,
    background: &mut Vec<JoinHandle<()>>,
) {
    background.extend(crate::notify::start(&config.notify, db, stop.clone()));
    background.extend(crate::export::start(&config.billing, db, stop.clone()));
    background.push(tokio::spawn(accounting::partitions::keep_ahead(
        db.clone(),
        stop.clone(),
    )));
}

fn accountant(
    config: &Config,
    db: &PgPool,
    throttler: &Throttler,
    routes: Arc<RouteBook>,
) -> Accountant {
    let accountant = Accountant::new(
        db.clone(),
        config.usage.free_monthly_calls,
        true,
        throttler.clone(),
    )
    .with_lock_timeout(Duration::from_millis(config.usage_check.lock_timeout_ms))
    .with_routes(routes);
    if config.notify.enabled() {
        accountant.with_thresholds(&config.notify.percentages())
    } else {
        accountant
    }
}

/// Purges expired login sessions hourly, so the table stays small.
async fn purge_expired_sessions(db: PgPool, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(3600)) => {}
        }
        match crate::auth::session::purge_expired(&db).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(sessions = n, "expired sessions purged"),
            Err(e) => tracing::warn!(error = %e, "purging expired sessions failed"),
        }
    }
}

/// Deletes abuse-limit cells back at a fresh state every minute, so the table holds
/// only the last hour's subjects. Every replica runs it; the deletes are idempotent.
async fn housekeep_limits(limits: AccountLimits, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
        if let Err(e) = limits.housekeep(chrono::Utc::now()).await {
            tracing::warn!(error = %e, "abuse-limit housekeeping failed; retried in a minute");
        }
    }
}

/// Reconciles markers every `every`, on the fleet's lister only: one run per fleet, not
/// one per replica (a run lists KV).
async fn reconcile_schedule(
    db: PgPool,
    throttler: Throttler,
    free_monthly_calls: i64,
    every: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        if !throttler.is_lister() {
            continue;
        }
        match usage::reconcile::reconcile_markers(&db, &throttler, free_monthly_calls, Utc::now())
            .await
        {
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %crate::error::anyhow_chain(&e), "scheduled reconciliation failed")
            }
        }
    }
}

/// Serves the public router on `listener` (HTTPS when the config names a certificate)
/// within the connection limits of `server.*` until `shutdown` resolves; in-flight
/// requests then get `server.shutdown_grace_ms`. No traces: [`Gateway::run`] exports
/// them.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_traced(listener, state, Tracing::off(), shutdown).await
}

/// [`serve`], the calls traced by `tracing`.
async fn serve_traced(
    listener: TcpListener,
    state: AppState,
    tracing: Tracing,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    install_crypto();
    let server = &state.config.server;
    let limits = crate::server::Limits::from_config(server);
    let tls = match (&server.tls_cert, &server.tls_key) {
        (Some(cert), Some(key)) => {
            let config = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key).await?;
            Some(tokio_rustls::TlsAcceptor::from(config.get_inner()))
        }
        _ => None,
    };
    // Each connection worker's app has an upstream pool of its own, so a call's
    // upstream connection lives on the thread that serves the call.
    let apps = move || crate::http::Public::traced(state.with_own_upstream_pool(), tracing.clone());
    crate::server::run(listener, apps, tls, limits, shutdown).await
}
