//! A response whose cost is known only as it streams (SPEC §20): usage events read from a
//! `text/event-stream` as they pass, or a final cost in the trailer named
//! `pricing.cost_header`. The call's usage event is published when the body ends
//! (read to its end, cut off, failed, or dropped by a vanishing client), with the last
//! figure reported.
//!
//! Each usage event's growth is spent at once in the windows that refuse mid-stream:
//! the account's minute, and, for a hard plan or one with a spend cap, the units this
//! replica reserved (another block is reserved when it runs out, the only wait a chunk
//! may meet). When the growth takes the account past one of them, the response stops
//! there: the bytes up to that usage event are forwarded, then an `event: error` naming
//! the refusal, then the end of the response, and the upstream's body is dropped at once
//! (its connection closed), so a stalled client cannot keep the upstream generating.

use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll, ready};

use axum::http::HeaderMap;
use bytes::Bytes;
use chrono::Utc;
use futures_util::future::BoxFuture;
use hyper::body::{Body as HttpBody, Frame, SizeHint};

use super::sse::UsageScanner;
use super::state::ProxyState;
use crate::plan::Budget;
use crate::telemetry::RateLimitedLog;
use crate::usage::accounting::UsageEvent;
use crate::usage::key_limits::KeyHold;
use crate::usage::standing::Wall;

/// The error event that ends a stream cut off by a window of units.
const QUOTA_CUT: &[u8] = b"event: error\ndata: {\"code\":\"QUOTA_EXCEEDED\",\"message\":\"Quota exceeded for this period.\"}\n\n";
/// The error event that ends a stream cut off by a spend cap.
const SPEND_CUT: &[u8] = b"event: error\ndata: {\"code\":\"SPEND_CAP_REACHED\",\"message\":\"Spend cap reached for this period.\"}\n\n";

/// What the body does with what it reads.
pub struct Metering {
    pub state: ProxyState,
    pub account_id: i64,
    pub budget: Budget,
    /// The call spends reserved units (a hard plan, or a spend cap).
    pub reserves: bool,
    /// Read `event: usage` (the response is an event stream and `pricing.stream_usage`).
    pub stream_usage: bool,
    /// The units already spent when the call was let through (its route's price).
    pub spent: i64,
    /// The call's usage event, its cost still to be settled, and the key's hold.
    pub event: UsageEvent,
    pub key_hold: KeyHold,
}

/// The upstream's body, metered.
pub struct MeteredBody<B> {
    /// `None` once dropped (the end, or a cut).
    inner: Option<B>,
    meter: Meter,
    scanner: Option<UsageScanner>,
    /// What is left to send after a usage event's growth is spent: the rest of a chunk
    /// whose events are still being judged.
    held: Option<Held>,
    /// An error event to send, then the end.
    cut: Option<&'static [u8]>,
}

struct Held {
    chunk: Bytes,
    /// Each usage event of `chunk`: where it ends and the units it reports.
    events: Vec<(usize, i64)>,
    /// The first event not yet spent.
    next: usize,
    /// A reservation under way for that event.
    reserving: Option<BoxFuture<'static, Option<Wall>>>,
}

/// The accounting side of the body: settles and publishes the call's event exactly once.
struct Meter {
    metering: Option<Metering>,
    /// The last cumulative figure a usage event reported.
    reported: Option<i64>,
    /// The cost a trailer reported.
    trailer_cost: Option<i64>,
}

impl Meter {
    fn finish(&mut self) {
        let Some(m) = self.metering.take() else {
            return;
        };
        let mut event = m.event;
        // A trailer's cost beyond what the stream already spent counts in the minute.
        if let (Some(cost), Some(allowance)) = (self.trailer_cost, m.budget.minute_allowance)
            && cost > m.spent
        {
            m.state
                .minutes
                .spend(m.account_id, allowance, cost - m.spent, Utc::now());
        }
        event.cost = self.trailer_cost.or(self.reported).unwrap_or(event.cost);
        event.key_reserved_by = m.key_hold.settle(event.cost);
        m.state.usage.publish(event);
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<B> MeteredBody<B> {
    pub fn new(inner: B, metering: Metering) -> Self {
        let scanner = metering.stream_usage.then(UsageScanner::new);
        Self {
            inner: Some(inner),
            meter: Meter {
                metering: Some(metering),
                reported: None,
                trailer_cost: None,
            },
            scanner,
            held: None,
            cut: None,
        }
    }

    /// Spends `units` (a usage event's cumulative figure) now if no reservation is
    /// needed: `Ok(None)` spent, `Ok(Some(wall))` the stream must stop, `Err(future)` a
    /// reservation to wait for.
    fn spend(&mut self, units: i64) -> Result<Option<Wall>, BoxFuture<'static, Option<Wall>>> {
        let Some(m) = self.meter.metering.as_mut() else {
            return Ok(None);
        };
        self.meter.reported = Some(units);
        let growth = units - m.spent;
        if growth <= 0 {
            return Ok(None);
        }
        m.spent = units;
        let now = Utc::now();
        if let Some(allowance) = m.budget.minute_allowance {
            let minute = m.state.minutes.spend(m.account_id, allowance, growth, now);
            if minute.used > minute.allowance {
                return Ok(Some(Wall::Quota));
            }
        }
        if !m.reserves || m.state.quota.try_spend(m.account_id, growth, now) {
            return Ok(None);
        }
        let quota = m.state.quota.clone();
        let account_id = m.account_id;
        Err(Box::pin(async move {
            match quota.spend_more(account_id, growth, Utc::now()).await {
                Ok(wall) => wall,
                Err(e) => {
                    // The call was let through; a database that does not answer does
                    // not cut a customer's stream.
                    static LOG: LazyLock<RateLimitedLog> = LazyLock::new(RateLimitedLog::default);
                    if LOG.allow() {
                        tracing::warn!(error = %e, suppressed = LOG.take_suppressed(),
                            "reserving a stream's units failed; the stream goes on");
                    }
                    None
                }
            }
        }))
    }

    /// Stops the stream: the upstream's body is dropped (its connection closed) and the
    /// error event goes out next.
    fn stop(&mut self, wall: Wall) {
        self.inner = None;
        self.held = None;
        self.cut = Some(match wall {
            Wall::Quota => QUOTA_CUT,
            Wall::SpendCap => SPEND_CUT,
        });
        metrics::counter!("tollgate_stream_cutoffs_total",
            "code" => match wall { Wall::Quota => "QUOTA_EXCEEDED", Wall::SpendCap => "SPEND_CAP_REACHED" })
        .increment(1);
        self.meter.finish();
    }

    /// Works through a held chunk: spends its events in order, and answers what may go
    /// out (the whole chunk, or the part before a cut). `Pending` while a reservation is
    /// under way.
    fn poll_held(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        loop {
            let Some(held) = self.held.as_mut() else {
                return Poll::Ready(None);
            };
            let Some(&(end, units)) = held.events.get(held.next) else {
                return Poll::Ready(self.held.take().map(|h| h.chunk));
            };
            let wall = match held.reserving.as_mut() {
                Some(reserving) => {
                    let wall = ready!(reserving.as_mut().poll(cx));
                    held.reserving = None;
                    wall
                }
                None => match self.spend(units) {
                    Ok(wall) => wall,
                    Err(reserving) => {
                        if let Some(held) = self.held.as_mut() {
                            held.reserving = Some(reserving);
                        }
                        continue;
                    }
                },
            };
            let Some(held) = self.held.as_mut() else {
                return Poll::Ready(None);
            };
            held.next += 1;
            if let Some(wall) = wall {
                let sent = held.chunk.slice(..end);
                self.stop(wall);
                return Poll::Ready(Some(sent));
            }
        }
    }
}

impl<B> HttpBody for MeteredBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        loop {
            if this.held.is_some()
                && let Some(bytes) = ready!(this.poll_held(cx))
            {
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            if let Some(cut) = this.cut.take() {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(cut)))));
            }
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(None);
            };
            let frame = match ready!(Pin::new(inner).poll_frame(cx)) {
                None => {
                    this.inner = None;
                    this.meter.finish();
                    return Poll::Ready(None);
                }
                Some(Err(e)) => {
                    this.inner = None;
                    this.meter.finish();
                    return Poll::Ready(Some(Err(e.into())));
                }
                Some(Ok(frame)) => frame,
            };
            let frame = match frame.into_data() {
                Ok(chunk) => {
                    if let Some(scanner) = this.scanner.as_mut() {
                        let mut events = Vec::new();
                        scanner.scan(&chunk, |e| events.push((e.end, e.units)));
                        if !events.is_empty() {
                            this.held = Some(Held {
                                chunk,
                                events,
                                next: 0,
                                reserving: None,
                            });
                            continue;
                        }
                    }
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                Err(frame) => frame,
            };
            match frame.into_trailers() {
                Ok(mut trailers) => {
                    if let Some(cost) = take_cost(&this.meter, &mut trailers) {
                        this.meter.trailer_cost = Some(cost);
                    }
                    if !trailers.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                    }
                }
                Err(other) => return Poll::Ready(Some(Ok(other))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.cut.is_none()
            && self.held.is_none()
            && self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.inner, &self.scanner) {
            (Some(inner), None) => inner.size_hint(),
            _ => SizeHint::default(),
        }
    }
}

/// The cost a trailer reports under `pricing.cost_header` (taken off the trailers, as off
/// a head).
fn take_cost(meter: &Meter, trailers: &mut HeaderMap) -> Option<i64> {
    meter
        .metering
        .as_ref()?
        .state
        .pricing
        .take_reported_cost(trailers)
}
