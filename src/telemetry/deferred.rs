//! Span fields formatted only when a log line will show them.
//!
//! The log formatter writes a span's fields out as text when the span opens and again
//! each time a field is recorded, whether or not any line is ever logged inside it.
//! For the per-request span (opened on every call, while a successful call logs
//! nothing at `info`) that was most of the span's cost. [`Deferred`] wraps the
//! formatter: a span whose values are all strings, integers or booleans has them kept
//! as they are, and handed to the formatter only when the first event inside the span
//! is about to be logged; a span closed before any event costs no formatting at all.
//! Spans with any other value (`?debug`, `%display`) go to the formatter at once, as
//! before.
//!
//! A deferred span's string fields print as `%` (Display) fields do: pass a text field
//! as `field = text.as_str()` to defer it and have it read as `field = %text` would.
//! Fields recorded later (`span.record`) are kept the same way; recorded twice, the
//! last value is shown.

use std::any::TypeId;
use std::fmt;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Defers the span formatting of the layer it wraps (the log formatter).
pub struct Deferred<L> {
    inner: L,
}

impl<L> Deferred<L> {
    pub fn new(inner: L) -> Self {
        Self { inner }
    }
}

/// One kept value.
#[derive(Debug, Clone, Copy)]
enum Kept {
    I64(i64),
    U64(u64),
    Bool(bool),
    /// A range of [`Pending::text`].
    Str(usize, usize),
}

/// A deferred span's values, by field index, until they are handed over.
#[derive(Debug, Default)]
struct Pending {
    values: Vec<Option<Kept>>,
    text: String,
    /// Whether anything was not one of the kept kinds (the span cannot be deferred).
    other: bool,
}

impl Visit for Pending {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.keep(field, Kept::I64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.keep(field, Kept::U64(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.keep(field, Kept::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let start = self.text.len();
        self.text.push_str(value);
        self.keep(field, Kept::Str(start, self.text.len()));
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn fmt::Debug) {
        self.other = true;
    }
}

impl Pending {
    fn keep(&mut self, field: &Field, value: Kept) {
        if let Some(slot) = self.values.get_mut(field.index()) {
            *slot = Some(value);
        } else {
            self.other = true;
        }
    }

    /// Hands the values over as the span's attributes, to `open`.
    fn hand_over(&self, metadata: &'static Metadata<'static>, open: impl FnOnce(&Attributes<'_>)) {
        let fields = metadata.fields();
        let text: Vec<_> = self
            .values
            .iter()
            .map(|v| match *v {
                Some(Kept::Str(start, end)) => {
                    Some(tracing::field::display(&self.text[start..end]))
                }
                _ => None,
            })
            .collect();
        let values: Vec<Option<&dyn tracing::Value>> = self
            .values
            .iter()
            .zip(&text)
            .map(|(value, text)| match value {
                Some(Kept::I64(v)) => Some(v as &dyn tracing::Value),
                Some(Kept::U64(v)) => Some(v as &dyn tracing::Value),
                Some(Kept::Bool(v)) => Some(v as &dyn tracing::Value),
                Some(Kept::Str(..)) => text.as_ref().map(|t| t as &dyn tracing::Value),
                None => None,
            })
            .collect();
        let set = fields.value_set_all(&values);
        open(&Attributes::new(metadata, &set));
    }
}

impl<S, L> Layer<S> for Deferred<L>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    L: Layer<S>,
{
    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        self.inner.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.inner.on_layer(subscriber);
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.inner.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.enabled(metadata, ctx)
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut pending = Pending {
            values: vec![None; attrs.metadata().fields().len()],
            // The request span's text (a request id, a method and a route) fits.
            text: String::with_capacity(96),
            other: false,
        };
        attrs.record(&mut pending);
        if !pending.other
            && let Some(span) = ctx.span(id)
        {
            span.extensions_mut().insert(pending);
            return;
        }
        self.inner.on_new_span(attrs, id, ctx);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut extensions = span.extensions_mut();
            if let Some(pending) = extensions.get_mut::<Pending>() {
                values.record(pending);
                if !pending.other {
                    return;
                }
                // A value of another kind: hand everything over now.
                let pending = extensions.remove::<Pending>().expect("just seen");
                drop(extensions);
                pending.hand_over(span.metadata(), |attrs| {
                    self.inner.on_new_span(attrs, id, ctx.clone())
                });
            }
        }
        self.inner.on_record(id, values, ctx);
    }

    fn on_follows_from(&self, span: &Id, follows: &Id, ctx: Context<'_, S>) {
        self.inner.on_follows_from(span, follows, ctx);
    }

    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.event_enabled(event, ctx)
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope {
                let pending = span.extensions_mut().remove::<Pending>();
                if let Some(pending) = pending {
                    pending.hand_over(span.metadata(), |attrs| {
                        self.inner.on_new_span(attrs, &span.id(), ctx.clone())
                    });
                }
            }
        }
        self.inner.on_event(event, ctx);
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_exit(id, ctx);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        self.inner.on_close(id, ctx);
    }

    fn on_id_change(&self, old: &Id, new: &Id, ctx: Context<'_, S>) {
        self.inner.on_id_change(old, new, ctx);
    }

    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // SAFETY: forwarded to the wrapped layer, which answers for its own types.
        unsafe { self.inner.downcast_raw(id) }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    impl Lines {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// A request span as the observability middleware opens it, an account recorded
    /// into it, and one warning inside it.
    fn log_a_request() {
        let id = "00000000-0000-4000-8000-000000000000";
        let span = tracing::info_span!(
            "request",
            request_id = id,
            method = "GET",
            route = "/vedic/v1",
            account_id = tracing::field::Empty,
        );
        span.record("account_id", 42);
        span.in_scope(|| tracing::warn!(status = 502, "upstream unreachable"));
    }

    #[test]
    fn text_lines_show_a_deferred_spans_fields_as_before() {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::registry().with(Deferred::new(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(lines.clone()),
        ));
        tracing::subscriber::with_default(subscriber, log_a_request);
        let text = lines.text();
        assert!(
            text.contains(
                "request{request_id=00000000-0000-4000-8000-000000000000 method=GET \
                 route=/vedic/v1 account_id=42}"
            ),
            "{text}"
        );
        assert!(text.contains("upstream unreachable status=502"), "{text}");
    }

    #[test]
    fn json_lines_carry_a_deferred_spans_fields() {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::registry().with(Deferred::new(
            tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(false)
                .with_writer(lines.clone()),
        ));
        tracing::subscriber::with_default(subscriber, log_a_request);
        let line: serde_json::Value = serde_json::from_str(lines.text().trim()).unwrap();
        assert_eq!(
            line["span"],
            serde_json::json!({
                "name": "request",
                "request_id": "00000000-0000-4000-8000-000000000000",
                "method": "GET",
                "route": "/vedic/v1",
                "account_id": 42,
            })
        );
        assert_eq!(line["fields"]["status"], 502);
    }

    #[test]
    fn spans_of_other_values_and_nested_spans_are_shown_too() {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::registry().with(Deferred::new(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(lines.clone()),
        ));
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("outer", items = 3u64);
            let _outer = outer.enter();
            let inner = tracing::info_span!("kv_get", key = %"usage-exhausted:7");
            let _inner = inner.enter();
            tracing::info!("listed");
        });
        let text = lines.text();
        assert!(
            text.contains("outer{items=3}:kv_get{key=usage-exhausted:7}: "),
            "{text}"
        );
    }
}
