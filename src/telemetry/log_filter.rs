//! The log filter (`log.filter`, or `RUST_LOG` when set), replaceable while the process
//! runs (SPEC §20).
//!
//! [`LiveFilter`] is the global filter layer: it asks the filter in force, which a
//! reload swaps whole ([`ArcSwap`]), then has every callsite's interest computed again.
//! A callback that asks the filter costs one `ArcSwap` load, no lock; span callbacks,
//! which only an [`EnvFilter`] reads, cost a relaxed flag read under the static
//! [`Targets`] filter.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::Context;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::LogConfig;
use crate::sync::lock;

/// The log filter for `directives`. Levels by target (`info`,
/// `tollgate=debug,sqlx=warn`) get the static [`Targets`] filter; span and field
/// directives (`[request]=debug`, `[request{account_id=7}]=debug`) need [`EnvFilter`],
/// which takes a lock on every span enter and exit, so it is used only when asked for.
#[allow(clippy::large_enum_variant)] // built at start and on a reload only
pub(super) enum LogFilter {
    Targets(Targets),
    Env(EnvFilter),
}

impl LogFilter {
    /// `None` when `directives` is not a valid filter.
    pub(super) fn parse(directives: &str) -> Option<Self> {
        // `Targets` would read a span directive as a target named `[request]`.
        let spans = directives.contains(['[', '{']);
        if !spans && let Ok(targets) = directives.parse::<Targets>() {
            return Some(Self::Targets(targets));
        }
        EnvFilter::try_new(directives).ok().map(Self::Env)
    }

    /// [`parse`](Self::parse), saying on stderr (logging is not up yet) when the
    /// directives from `source` are not usable.
    pub(super) fn parse_or_warn(source: &str, directives: &str) -> Option<Self> {
        let filter = Self::parse(directives);
        if filter.is_none() {
            eprintln!("tollgate: ignoring {source} = {directives:?}: not a valid log filter");
        }
        filter
    }

    /// Everything at `info` and above: the filter when none given is usable.
    pub(super) fn info() -> Self {
        Self::Targets(Targets::new().with_default(tracing::Level::INFO))
    }

    fn reads_spans(&self) -> bool {
        matches!(self, Self::Env(_))
    }
}

/// The filter layer whose filter a reload replaces.
#[derive(Clone)]
pub(super) struct LiveFilter(Arc<Current>);

struct Current {
    filter: ArcSwap<LogFilter>,
    /// Whether `filter` is an [`EnvFilter`], which follows spans.
    spans: AtomicBool,
}

impl LiveFilter {
    pub(super) fn new(filter: LogFilter) -> Self {
        Self(Arc::new(Current {
            spans: AtomicBool::new(filter.reads_spans()),
            filter: ArcSwap::from_pointee(filter),
        }))
    }

    /// Puts `filter` in force for every callsite, those already seen included.
    fn replace(&self, filter: LogFilter) {
        let spans = filter.reads_spans();
        self.0.filter.store(Arc::new(filter));
        self.0.spans.store(spans, Ordering::Release);
        tracing::callsite::rebuild_interest_cache();
    }

    /// The filter in force when it follows spans.
    fn span_filter(&self) -> Option<arc_swap::Guard<Arc<LogFilter>>> {
        self.0
            .spans
            .load(Ordering::Acquire)
            .then(|| self.0.filter.load())
    }
}

impl<S: Subscriber> Layer<S> for LiveFilter {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        match &**self.0.filter.load() {
            LogFilter::Targets(f) => Layer::<S>::register_callsite(f, metadata),
            LogFilter::Env(f) => Layer::<S>::register_callsite(f, metadata),
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        match &**self.0.filter.load() {
            LogFilter::Targets(f) => Layer::<S>::enabled(f, metadata, ctx),
            LogFilter::Env(f) => Layer::<S>::enabled(f, metadata, ctx),
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        match &**self.0.filter.load() {
            LogFilter::Targets(f) => Layer::<S>::max_level_hint(f),
            LogFilter::Env(f) => Layer::<S>::max_level_hint(f),
        }
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(filter) = self.span_filter()
            && let LogFilter::Env(f) = &**filter
        {
            f.on_new_span(attrs, id, ctx);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(filter) = self.span_filter()
            && let LogFilter::Env(f) = &**filter
        {
            f.on_record(id, values, ctx);
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(filter) = self.span_filter()
            && let LogFilter::Env(f) = &**filter
        {
            Layer::<S>::on_enter(f, id, ctx);
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(filter) = self.span_filter()
            && let LogFilter::Env(f) = &**filter
        {
            Layer::<S>::on_exit(f, id, ctx);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(filter) = self.span_filter()
            && let LogFilter::Env(f) = &**filter
        {
            Layer::<S>::on_close(f, id, ctx);
        }
    }
}

/// The process's filter layer, once [`super::init_tracing`] installed it.
struct Installed {
    live: LiveFilter,
    /// Whether `RUST_LOG` chose the filter: it wins over `log.filter` for the life of
    /// the process.
    from_env: bool,
    /// The `log.filter` directives in force.
    directives: Mutex<String>,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Remembers the filter layer of the global subscriber, for reloads.
pub(super) fn installed(live: LiveFilter, from_env: bool, directives: &str) {
    let _ = INSTALLED.set(Installed {
        live,
        from_env,
        directives: Mutex::new(directives.to_owned()),
    });
}

/// A log filter a reload has checked and will put in force ([`NextLogFilter::apply`]).
pub struct NextLogFilter {
    filter: LogFilter,
    directives: String,
}

/// What `config` would change in the log filter: `Ok(None)` when nothing (the same
/// directives, `RUST_LOG` in force, or logging not set up by this crate), `Err` with the
/// reason when `log.filter` is not a valid filter.
pub fn next_log_filter(config: &LogConfig) -> Result<Option<NextLogFilter>, String> {
    let Some(installed) = INSTALLED.get() else {
        return Ok(None);
    };
    if installed.from_env || *lock(&installed.directives) == config.filter {
        return Ok(None);
    }
    match LogFilter::parse(&config.filter) {
        Some(filter) => Ok(Some(NextLogFilter {
            filter,
            directives: config.filter.clone(),
        })),
        None => Err(format!(
            "log.filter {:?} is not a valid log filter",
            config.filter
        )),
    }
}

/// Whether `RUST_LOG` holds the log filter, so `log.filter` is not read.
pub fn filter_from_env() -> bool {
    INSTALLED.get().is_some_and(|i| i.from_env)
}

impl NextLogFilter {
    /// Puts the filter in force for every line logged from now on.
    pub fn apply(self) {
        if let Some(installed) = INSTALLED.get() {
            installed.live.replace(self.filter);
            *lock(&installed.directives) = self.directives;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[test]
    fn levels_by_target_use_the_static_filter() {
        for directives in ["info", "tollgate=debug,sqlx=warn,info"] {
            let filter = LogFilter::parse(directives);
            assert!(
                matches!(filter, Some(LogFilter::Targets(_))),
                "{directives}"
            );
        }
    }

    #[test]
    fn span_and_field_directives_keep_their_meaning() {
        for directives in [
            "info,[request{account_id=7}]=debug",
            "[request]=debug",
            "tollgate[request]=debug",
            "[request{account_id}]=debug",
        ] {
            let filter = LogFilter::parse(directives);
            assert!(matches!(filter, Some(LogFilter::Env(_))), "{directives}");
        }
    }

    #[test]
    fn an_invalid_filter_is_refused_rather_than_guessed() {
        assert!(LogFilter::parse("tollgate=loud").is_none());
    }

    /// Keeps the message of every event it is shown.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<String>>>);

    impl<S: Subscriber> Layer<S> for Lines {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            struct Message<'a>(&'a mut Vec<String>);
            impl tracing::field::Visit for Message<'_> {
                fn record_debug(
                    &mut self,
                    field: &tracing::field::Field,
                    value: &dyn std::fmt::Debug,
                ) {
                    if field.name() == "message" {
                        self.0.push(format!("{value:?}"));
                    }
                }
            }
            event.record(&mut Message(&mut lock(&self.0)));
        }
    }

    fn log_each_level() {
        tracing::debug!("debug line");
        tracing::info!("info line");
        tracing::warn!("warn line");
        let span = tracing::info_span!("request", account_id = 7);
        let _entered = span.enter();
        tracing::debug!("debug in request");
    }

    #[test]
    fn a_replaced_filter_decides_the_next_lines_of_callsites_already_seen() {
        let live = LiveFilter::new(LogFilter::parse("warn").unwrap());
        let lines = Lines::default();
        let subscriber = tracing_subscriber::registry()
            .with(live.clone())
            .with(lines.clone());
        tracing::subscriber::with_default(subscriber, || {
            log_each_level();
            assert_eq!(*lock(&lines.0), ["warn line"]);

            live.replace(LogFilter::parse("debug").unwrap());
            lock(&lines.0).clear();
            log_each_level();
            assert_eq!(
                *lock(&lines.0),
                ["debug line", "info line", "warn line", "debug in request"]
            );

            // Span directives: debug lines only inside the request span.
            live.replace(LogFilter::parse("info,[request]=debug").unwrap());
            lock(&lines.0).clear();
            log_each_level();
            assert_eq!(
                *lock(&lines.0),
                ["info line", "warn line", "debug in request"]
            );

            live.replace(LogFilter::parse("error").unwrap());
            lock(&lines.0).clear();
            log_each_level();
            assert!(lock(&lines.0).is_empty());
        });
    }
}
