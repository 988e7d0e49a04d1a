//! Reloading the configuration while serving (SPEC §20).
//!
//! `POST /admin/v1/reload` and `SIGHUP` ([`on_hangup`]) both call [`Reloader::reload`]:
//! it reads the layers the process started from again ([`Config::sources`]), runs the
//! checks `tollgate serve` (or `worker`) runs at start, and only when all pass puts the
//! reloadable parts in force, each swapped whole in its live holder: the plan catalogue
//! and the free grant's terms ([`Catalogue`]), prices ([`Pricing`]), entitlements
//! ([`Entitlements`]), the route names analytics use ([`RouteBook`]), the webhook
//! thresholds ([`Accountant`]) and the log filter. Requests read those holders, so every
//! call and activation after the swap sees the new figures, while calls in flight,
//! counters, windows, keys and active subscriptions are left as they are. A refused
//! configuration changes nothing. Settings read only at start are named in a warning
//! ([`crate::config::restart_needed`]), never applied.
//!
//! One reload at a time: the generation's lock is held from the first read to the last
//! swap.

use std::sync::{Arc, Mutex};

use crate::config::{Catalogue, Config, ConfigError, restart_needed};
use crate::proxy::entitlements::Entitlements;
use crate::proxy::pricing::Pricing;
use crate::sync::lock;
use crate::telemetry;
use crate::usage::accounting::Accountant;
use crate::usage::analytics::RouteBook;

/// The checks of the command the process runs, beside the configuration's own
/// (`Config::validate_for_serve`, `Config::validate_for_worker`).
pub type CommandChecks = fn(&Config) -> Result<(), ConfigError>;

/// What a reload swaps, each absent where this process has none (`tollgate worker`
/// prices and entitles no call, local mode accounts nothing).
#[derive(Clone, Default)]
pub struct Live {
    pub catalogue: Option<Catalogue>,
    pub pricing: Option<Arc<Pricing>>,
    pub entitlements: Option<Arc<Entitlements>>,
    pub routes: Option<Arc<RouteBook>>,
    pub accountant: Option<Accountant>,
}

/// Reloads the configuration of this process. Generation 1 is the configuration it
/// started with; each reload that puts a configuration in force adds one.
pub struct Reloader {
    /// The configuration loaded at start: what settings read only then still hold.
    started: Arc<Config>,
    checks: CommandChecks,
    live: Live,
    /// The generation in force, locked for a whole reload.
    generation: Mutex<u64>,
}

impl Reloader {
    pub fn new(started: Arc<Config>, live: Live, checks: CommandChecks) -> Self {
        Self {
            started,
            checks,
            live,
            generation: Mutex::new(1),
        }
    }

    /// The generation in force.
    pub fn generation(&self) -> u64 {
        *lock(&self.generation)
    }

    /// Reads the layers again and puts the reloadable parts in force, off the async
    /// workers (it reads files): the new generation, or the reason the configuration was
    /// refused (the running one stays). `by` names the trigger in the log.
    pub async fn reload(self: Arc<Self>, by: &'static str) -> Result<u64, ConfigError> {
        tokio::task::spawn_blocking(move || self.reload_now(by))
            .await
            .unwrap_or_else(|e| Err(ConfigError::new(format!("the reload stopped: {e}"))))
    }

    /// [`reload`](Self::reload), on the calling thread.
    pub fn reload_now(&self, by: &'static str) -> Result<u64, ConfigError> {
        let mut generation = lock(&self.generation);
        match self.prepare() {
            Ok(next) => {
                let config = self.live.apply(next);
                *generation += 1;
                tracing::info!(generation = *generation, by, "configuration reloaded");
                self.name_what_waits(&config, *generation);
                Ok(*generation)
            }
            Err(e) => {
                tracing::error!(generation = *generation, by, reason = %e,
                    "configuration reload refused; the running configuration stays");
                Err(e)
            }
        }
    }

    /// The configuration the layers hold now, checked as at start, with what is built
    /// from it; nothing is changed yet.
    fn prepare(&self) -> Result<Next, ConfigError> {
        let Some(sources) = &self.started.sources else {
            return Err(ConfigError::new(
                "this configuration was built in code, not read from files: there is \
                 nothing to read again",
            ));
        };
        let config = Config::load(sources)?;
        (self.checks)(&config)?;
        let log_filter = telemetry::next_log_filter(&config.log).map_err(ConfigError::new)?;
        let pricing = match &self.live.pricing {
            Some(_) => Some(
                Pricing::from_config(&config.pricing)
                    .map_err(|e| ConfigError::new(format!("pricing: {e}")))?,
            ),
            None => None,
        };
        Ok(Next {
            config,
            pricing,
            log_filter,
        })
    }

    /// Warns of what the reload could not put in force.
    fn name_what_waits(&self, config: &Config, generation: u64) {
        let waiting = restart_needed(&self.started, config);
        if !waiting.is_empty() {
            tracing::warn!(generation, settings = %waiting.join(", "),
                "changed settings take effect only after a restart");
        }
        if telemetry::filter_from_env() && config.log.filter != self.started.log.filter {
            tracing::warn!(
                generation,
                "log.filter changed but RUST_LOG is set and wins: the log filter stays"
            );
        }
    }
}

/// A checked configuration and what was built from it, ready to be put in force.
struct Next {
    config: Config,
    pricing: Option<Pricing>,
    log_filter: Option<telemetry::NextLogFilter>,
}

impl Live {
    /// Puts `next` in force, one holder after the other (each swapped whole; no swap
    /// can fail). Hands the configuration back.
    fn apply(&self, next: Next) -> Config {
        let Next {
            config,
            pricing,
            log_filter,
        } = next;
        if let Some(catalogue) = &self.catalogue {
            catalogue.replace(&config);
        }
        if let (Some(live), Some(new)) = (&self.pricing, pricing) {
            live.replace(new);
        }
        if let Some(entitlements) = &self.entitlements {
            entitlements.replace(Entitlements::from_config(&config.entitlements));
        }
        if let Some(routes) = &self.routes {
            routes.replace_prefixes(&config);
        }
        if let Some(accountant) = &self.accountant {
            accountant.replace_thresholds(&config.notify.percentages());
        }
        if let Some(filter) = log_filter {
            filter.apply();
        }
        config
    }
}

/// Reloads on every `SIGHUP` until `stop`; the process keeps running whatever comes of
/// a reload (its outcome is logged). The signal is caught from the moment this returns.
#[cfg(unix)]
pub fn on_hangup(
    reloader: Arc<Reloader>,
    stop: tokio_util::sync::CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                got = hangups.recv() => if got.is_none() { return },
            }
            let _ = reloader.clone().reload("SIGHUP").await;
        }
    }))
}
