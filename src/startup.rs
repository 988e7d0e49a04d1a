//! Wiring: build the state, start the background tasks, serve, shut down in order.
//!
//! [`Gateway::build`] starts the throttler worker, the usage listener, the key cache's
//! listener and the reconciliation schedule; [`Gateway::run`] serves the public and
//! metrics listeners until shutdown, then drains in order: stop accepting and finish
//! in-flight calls (bounded), drain the usage queue into PostgreSQL (bounded), stop the
//! rest.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use secrecy::ExposeSecret;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::auth::key_cache::KeyCache;
use crate::cloudflare::{CallBudget, KvClient, KvSettings};
use crate::config::{Config, MarkerStoreKind};
use crate::proxy::pricing::Pricing;
use crate::proxy::upstream::Upstream;
use crate::state::{AppState, Shared};
use crate::throttle::fleet::budget::PgCallBudget;
use crate::throttle::{Fleet, MarkerCheck, MarkerStore, ThrottleSettings, Throttler};
use crate::usage::quota::QuotaView;
use crate::usage::subscriptions::Allocation;
use crate::usage::{self, Accountant, UsagePublisher};

/// Installs ring as rustls' process-wide crypto provider (idempotent).
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A built gateway: state plus the background tasks serving it.
pub struct Gateway {
    state: AppState,
    accountant: Option<Accountant>,
    stop_listener: CancellationToken,
    stop_background: CancellationToken,
    listener_task: Option<JoinHandle<()>>,
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
        crate::cloudflare::describe_metrics();
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

        let throttler = match store {
            Some(store) => {
                let settings = ThrottleSettings {
                    admission_percent: config.throttle.admission_percent,
                    refresh_interval: Duration::from_millis(config.throttle.refresh_interval_ms),
                    max_staleness: Duration::from_millis(config.throttle.max_staleness_ms),
                    kv_call_budget: config.throttle.kv_call_budget,
                    kv_budget_window: Duration::from_millis(config.throttle.kv_budget_window_ms),
                };
                let check = config.usage_check.enabled.then(|| {
                    Arc::new(usage::reconcile::StandingCheck {
                        db: db.clone(),
                        free_monthly_calls: config.usage.free_monthly_calls,
                    }) as Arc<dyn MarkerCheck>
                });
                let fleet = Fleet::new(db.clone(), check);
                let (throttler, tasks) =
                    Throttler::start(settings, store, fleet, stop_background.clone());
                background.extend(tasks);
                throttler
            }
            None => Throttler::disabled(),
        };

        let quota = if config.usage_check.enabled {
            QuotaView::new(
                db.clone(),
                config.usage.free_monthly_calls,
                throttler.clone(),
            )
        } else {
            QuotaView::disabled()
        };
        background.extend(quota.start(stop_background.clone()));

        let (publisher, accountant, listener_task) = if config.usage_check.enabled {
            let (publisher, rx) = usage::event::queue(config.usage_check.queue_capacity);
            let accountant = Accountant::new(
                db.clone(),
                config.usage.free_monthly_calls,
                true,
                throttler.clone(),
            )
            .with_lock_timeout(Duration::from_millis(config.usage_check.lock_timeout_ms))
            .with_quota(quota.clone());
            let task = tokio::spawn(usage::listener::run(
                accountant.clone(),
                rx,
                usage::listener::ListenerSettings::from_config(
                    &config.usage_check,
                    config.database.max_connections,
                ),
                stop_listener.clone(),
            ));
            (publisher, Some(accountant), Some(task))
        } else {
            (UsagePublisher::disabled(), None, None)
        };

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

        let keys = if config.key_cache.enabled {
            KeyCache::new(config.key_cache.max_entries)
        } else {
            KeyCache::disabled()
        };
        background.extend(keys.start(db.clone(), stop_background.clone()));

        let pricing = Pricing::from_config(&config.pricing)?;
        let allocation = Allocation {
            db: db.clone(),
            throttler: throttler.clone(),
            quota: quota.clone(),
            free_monthly_calls: config.usage.free_monthly_calls,
            metering: config.usage_check.enabled,
        };
        let state = AppState::new(Shared {
            quota,
            pricing,
            allocation,
            upstream,
            config,
            db,
            usage: publisher,
            throttler,
            keys,
        });
        Ok(Self {
            state,
            accountant,
            stop_listener,
            stop_background,
            listener_task,
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

        let served = serve(public, self.state.clone(), shutdown).await;
        tracing::info!("public listener closed; draining usage queue");

        self.stop_listener.cancel();
        if let Some(task) = self.listener_task {
            let _ = task.await;
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
/// until `shutdown` resolves; in-flight requests then get `server.shutdown_grace_ms`.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    install_crypto();
    let grace = Duration::from_millis(state.config.server.shutdown_grace_ms);
    let tls = match (&state.config.server.tls_cert, &state.config.server.tls_key) {
        (Some(cert), Some(key)) => {
            Some(axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key).await?)
        }
        _ => None,
    };
    let app = crate::http::router(state).into_make_service_with_connect_info::<SocketAddr>();
    let handle = axum_server::Handle::new();
    tokio::spawn({
        let handle = handle.clone();
        async move {
            shutdown.await;
            tracing::info!(grace_ms = grace.as_millis() as u64, "shutting down");
            handle.graceful_shutdown(Some(grace));
        }
    });
    let listener = listener.into_std()?;
    match tls {
        Some(tls) => {
            axum_server::from_tcp_rustls(listener, tls)
                .handle(handle)
                .serve(app)
                .await
        }
        None => {
            axum_server::from_tcp(listener)
                .handle(handle)
                .serve(app)
                .await
        }
    }
}
