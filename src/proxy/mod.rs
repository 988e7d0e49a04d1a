//! The metering proxy (SPEC §3.1): authenticate, admit, forward, account.
//!
//! Bodies stream both ways without being buffered whole. The usage event is published
//! when the upstream's response head arrives: every upstream status counts, while the
//! gateway's own 401/429/502/504 answers publish nothing.

mod connect;
pub mod entitlements;
pub mod headers;
mod metered;
pub mod path;
mod pool;
pub mod pricing;
pub mod quota_headers;
pub mod sse;
pub mod state;
pub mod upstream;

use std::net::SocketAddr;
use std::sync::LazyLock;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE, TE};
use axum::http::{HeaderMap, HeaderValue, Method, Response, Version};
use axum::response::IntoResponse;
use chrono::Utc;
use metrics::Histogram;

use crate::auth::api_key::authenticate_key;
use crate::auth::refusal::{Refusal, refused};
use crate::error::ApiError;
use crate::month::seconds_until;
use crate::request_id::RequestId;
use crate::server::body::RequestBodyError;
use crate::telemetry::traces::{ClientSpan, ServerSpan, TRACEPARENT};
use crate::telemetry::{RateLimitedLog, Registered};
use crate::throttle::minute::MinuteState;
use crate::throttle::rate::Burst;
use crate::usage::Standing;
use crate::usage::accounting::UsageEvent;
use crate::usage::key_limits::KeyVerdict;
use crate::usage::standing::{Verdict, Wall, known_wall};
use metered::{MeteredBody, Metering};
pub use state::{ProxyParts, ProxyState};

/// Longest route kept in a ledger row.
const MAX_ROUTE_CHARS: usize = 512;

/// Handles every request under the proxied prefixes. Once the caller is known, every
/// answer (the upstream's, or the gateway's own refusal) carries its quota headers.
/// A sampled call's server span (`trace`) gets the caller, the outcome and the upstream
/// request's client span (SPEC §22).
pub async fn handle(
    State(state): State<ProxyState>,
    request: Request,
    trace: Option<&ServerSpan>,
) -> Response<Body> {
    let mut quota = Quota::default();
    let mut key_limit = None;
    let mut response = match forward(&state, request, &mut quota, trace).await {
        Ok(response) => {
            if let Some(trace) = trace {
                trace.outcome("forwarded");
            }
            response
        }
        Err(e) => {
            if let Some(trace) = trace {
                trace.outcome(e.status_and_code().1);
            }
            if let ApiError::KeyQuotaExceeded { limit, .. } = e {
                key_limit = Some(limit);
            }
            e.into_response()
        }
    };
    if quota.standing.is_some() || quota.burst.is_some() {
        quota_headers::apply(
            response.headers_mut(),
            &quota_headers::Items {
                standing: quota.standing.as_ref(),
                key_limit,
                burst: quota.burst,
                minute: quota.minute,
            },
            Utc::now(),
        );
    }
    response
}

/// What the quota headers of a call say, as far as the call got.
#[derive(Default)]
struct Quota {
    standing: Option<Standing>,
    burst: Option<Burst>,
    /// The account's minute window, when its plan has one (SPEC §20).
    minute: Option<MinuteState>,
}

/// The connection's peer, and whether it is one of `server.trusted_proxies`.
fn peer_of(state: &ProxyState, request: &Request) -> headers::Peer {
    // An IPv4 client of a dual-stack listener shows as `::ffff:a.b.c.d`.
    let ip = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_canonical());
    let trusted = ip.is_some_and(|ip| {
        state
            .config
            .server
            .trusted_proxies
            .iter()
            .any(|net| net.contains(&ip))
    });
    headers::Peer { ip, trusted }
}

async fn forward(
    state: &ProxyState,
    request: Request,
    quota: &mut Quota,
    trace: Option<&ServerSpan>,
) -> Result<Response<Body>, ApiError> {
    let path = request.uri().path();
    if path::prefix_of(path).is_none() {
        return Err(ApiError::NotFound);
    }
    if !path::is_contained(path) {
        if let Some(suppressed) = refused(Refusal::EscapingPath) {
            tracing::warn!(path, suppressed, "path escaping its prefix refused");
        }
        return Err(ApiError::NotFound);
    }
    // TRACE would echo the request, shared secret included; CONNECT would open a tunnel.
    if matches!(*request.method(), Method::TRACE | Method::CONNECT) {
        return Err(ApiError::MethodNotAllowed);
    }
    let upstream = &state.upstream;
    let principal = authenticate_key(
        &state.db,
        &state.keys,
        request.headers(),
        upstream.key_header.as_str(),
    )
    .await?;
    let span = tracing::Span::current();
    span.record("account_id", principal.account_id);
    if let Some(trace) = trace {
        trace.caller(principal.account_id, principal.key_id);
    }
    if let Some(policy) = &principal.policy
        && !policy.allows(path)
    {
        if let Some(suppressed) = refused(Refusal::OutOfScope) {
            tracing::info!(
                key_id = principal.key_id,
                suppressed,
                "api key refused: out of scope"
            );
        }
        return Err(ApiError::KeyScopeDenied);
    }

    let request_id = request
        .extensions()
        .get::<RequestId>()
        .copied()
        .unwrap_or_else(RequestId::generate);
    let now = Utc::now();
    // What the plan allows besides units: its features, then the calls per second.
    let terms = state.quota.terms(principal.account_id, now).await?;
    if let Some(terms) = &terms
        && let Some(feature) = state.entitlements.feature_of(path)
        && !terms.has(feature)
    {
        return Err(ApiError::FeatureNotInPlan);
    }
    let account_rate = terms.as_ref().and_then(|t| t.rate_limit);
    let key_rate = principal.policy.as_ref().and_then(|p| p.rate_limit);
    match state.rates.check(
        account_rate.map(|l| (principal.account_id, l)),
        key_rate.map(|l| (principal.key_id, l)),
    ) {
        Ok(burst) => quota.burst = burst,
        Err(refused) => {
            quota.burst = Some(refused.burst);
            quota.standing = state.quota.standing(principal.account_id, now).await?;
            return Err(ApiError::RateLimited {
                retry_after: refused.retry_after,
            });
        }
    }
    let mut cost = state.pricing.route_cost(path);
    // The key's own limit first: refused there, nothing of the account is spent.
    let key_hold = match state
        .key_limits
        .check(principal.key_id, principal.limit_read, cost, now)
        .await?
    {
        KeyVerdict::Pass(hold) => hold,
        KeyVerdict::Refuse { retry_after, limit } => {
            quota.standing = state.quota.standing(principal.account_id, now).await?;
            return Err(ApiError::KeyQuotaExceeded { retry_after, limit });
        }
    };
    // The minute window refuses whatever the plan's enforcement, once used up (§20).
    let budget = terms.as_ref().map(|t| t.budget).unwrap_or_default();
    if let Some(allowance) = budget.minute_allowance {
        let minute = state.minutes.state(principal.account_id, allowance, now);
        quota.minute = Some(minute);
        if minute.used_up() {
            quota.standing = state.quota.standing(principal.account_id, now).await?;
            return Err(minute_refusal(quota.standing.as_ref(), minute, now));
        }
    }
    let reserved_by = match state.quota.check(principal.account_id, cost, now).await? {
        Verdict::Refuse {
            standing,
            retry_after,
            wall,
        } => {
            quota.standing = Some(standing);
            return Err(match wall {
                Wall::Quota => ApiError::QuotaExceeded { retry_after },
                Wall::SpendCap => ApiError::SpendCapReached { retry_after },
            });
        }
        Verdict::Forward {
            standing,
            reserved_by,
        } => {
            quota.standing = standing;
            reserved_by
        }
    };
    // A hard plan's call was admitted by its reservation, never by hash.
    if reserved_by.is_none()
        && !state
            .throttler
            .admit(principal.account_id, request_id.0, now)
            .admitted()
    {
        return Err(ApiError::Throttled);
    }

    if let Some(allowance) = budget.minute_allowance {
        quota.minute = Some(
            state
                .minutes
                .spend(principal.account_id, allowance, cost, now),
        );
    }

    // Accounting behind: let it catch up a little before forwarding (bounded).
    state.usage.pace().await;
    // The key's last use, for `api_key.last_used_at` (written every 30 s).
    let second = now.timestamp();
    if principal.used.load(Ordering::Relaxed) < second {
        principal.used.store(second, Ordering::Relaxed);
    }

    let peer = peer_of(state, &request);
    let (parts, body) = request.into_parts();
    let uri = upstream.uri(&parts.uri)?;
    let method = parts.method;
    let mut upstream_request = axum::http::Request::new(body);
    *upstream_request.method_mut() = method.clone();
    *upstream_request.uri_mut() = uri;
    let mut headers = headers::upstream_request_headers(
        parts.headers,
        &upstream.key_header,
        upstream.shared_secret.as_ref(),
        &request_id.header_value(),
        peer,
    );
    if let Some(host) = upstream.host() {
        headers.insert(axum::http::header::HOST, host.clone());
    }
    // A cost reported in a trailer reaches us only if we say we take trailers (§20).
    if state.pricing.reads_costs() {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
    // A sampled call's upstream request names its own client span, never the client's.
    let client_span = trace.map(|t| t.client(&method, upstream_request.uri()));
    if let Some(client_span) = &client_span {
        headers.insert(TRACEPARENT.clone(), client_span.traceparent());
    }
    *upstream_request.headers_mut() = headers;

    let started = Instant::now();
    let result = tokio::time::timeout(upstream.timeout, upstream.request(upstream_request)).await;
    let latency = started.elapsed();
    if let Some(client_span) = client_span {
        end_client_span(client_span, &result);
    }
    static UPSTREAM_DURATION: Registered<Histogram> = Registered::new();
    UPSTREAM_DURATION
        .get(|| metrics::histogram!("tollgate_upstream_duration_seconds"))
        .record(latency.as_secs_f64());
    let upstream_response = match result {
        Err(_) => {
            metrics::counter!("tollgate_upstream_errors_total", "kind" => "timeout").increment(1);
            tracing::warn!(
                timeout_ms = upstream.timeout.as_millis() as u64,
                "upstream timed out"
            );
            return Err(ApiError::UpstreamTimeout);
        }
        Ok(Err(e)) => {
            // The client's body failed (malformed, stalled): the client's fault, not
            // the upstream's; nothing was answered, so nothing is consumed.
            if let Some(fault) = RequestBodyError::find(&*e) {
                return Err(client_body_fault(fault));
            }
            // A connect timeout is a connect error (502), not a slow answer.
            metrics::counter!("tollgate_upstream_errors_total", "kind" => "unreachable")
                .increment(1);
            tracing::warn!(error = %crate::error::anyhow_chain(&*e), "upstream unreachable");
            return Err(ApiError::UpstreamUnavailable(e.to_string()));
        }
        Ok(Ok(r)) => r,
    };

    let (mut response, body) = upstream_response.into_parts();
    let head_cost = state.pricing.take_reported_cost(&mut response.headers);
    if let Some(reported) = head_cost {
        // The minute spends what the upstream reports beyond the route's price.
        if let Some(allowance) = budget.minute_allowance
            && reported > cost
        {
            let now = Utc::now();
            quota.minute = Some(state.minutes.spend(
                principal.account_id,
                allowance,
                reported - cost,
                now,
            ));
        }
        cost = reported;
    }
    // Streamed usage, or a cost in the trailer: the event waits for the body's end.
    let stream_usage = state.pricing.stream_usage() && is_event_stream(&response.headers);
    let trailer_cost = head_cost.is_none()
        && state.pricing.reads_costs()
        && !response.headers.contains_key(CONTENT_LENGTH);
    let mut metering = None;
    if state.usage.enabled() {
        let mut event = UsageEvent {
            transaction_id: request_id.0,
            account_id: principal.account_id,
            key_id: principal.key_id,
            occurred_at: now,
            method,
            route: route_of(parts.uri.path()),
            upstream_status: response.status.as_u16(),
            cost,
            reserved_by,
            key_reserved_by: None,
            latency_us: Some(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX)),
        };
        if stream_usage || trailer_cost {
            metering = Some(Metering {
                state: state.clone(),
                account_id: principal.account_id,
                budget,
                reserves: reserved_by.is_some(),
                stream_usage,
                spent: cost,
                event,
                key_hold,
            });
        } else {
            event.key_reserved_by = key_hold.settle(cost);
            state.usage.publish(event);
        }
    }

    headers::strip_hop_by_hop(&mut response.headers);
    response.version = Version::HTTP_11;
    response.extensions = Default::default();
    let body = match metering {
        Some(metering) => {
            if stream_usage {
                // Its length changes if it is cut off.
                response.headers.remove(CONTENT_LENGTH);
            }
            Body::new(MeteredBody::new(body, metering))
        }
        None => Body::new(body),
    };
    Ok(Response::from_parts(response, body))
}

/// Whether a response is an event stream (`text/event-stream`, any parameters).
fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// The refusal of a call whose minute window is used up: `429 QUOTA_EXCEEDED`, retry
/// after the latest wall among the windows already used up (the minute's end, or a
/// later one the account's month, day or spend caps already reached), with that wall's
/// code (SPEC §20).
fn minute_refusal(
    standing: Option<&Standing>,
    minute: MinuteState,
    now: chrono::DateTime<Utc>,
) -> ApiError {
    let later = standing
        .and_then(|s| known_wall(s, now))
        .map(|(ends, wall)| (seconds_until(ends, now), wall))
        .filter(|(seconds, _)| *seconds > minute.reset_in);
    match later {
        Some((retry_after, Wall::SpendCap)) => ApiError::SpendCapReached { retry_after },
        Some((retry_after, Wall::Quota)) => ApiError::QuotaExceeded { retry_after },
        None => ApiError::QuotaExceeded {
            retry_after: minute.reset_in,
        },
    }
}

/// Ends the upstream request's client span with what came of it.
fn end_client_span<T>(
    span: ClientSpan,
    result: &Result<Result<Response<T>, connect::BoxError>, tokio::time::error::Elapsed>,
) {
    match result {
        Ok(Ok(response)) => span.answered(response.status()),
        Ok(Err(e)) if RequestBodyError::find(&**e).is_some() => span.failed("client_body"),
        Ok(Err(_)) => span.failed("unreachable"),
        Err(_) => span.failed("timeout"),
    }
}

/// The route kept in a ledger row: the path, cut to [`MAX_ROUTE_CHARS`] characters.
fn route_of(path: &str) -> String {
    // No more bytes than the limit, so no more characters either.
    if path.len() <= MAX_ROUTE_CHARS {
        return path.to_owned();
    }
    match path.char_indices().nth(MAX_ROUTE_CHARS) {
        Some((end, _)) => path[..end].to_owned(),
        None => path.to_owned(),
    }
}

/// Counts and logs (rate-limited: any client can cause it) a request body the
/// client failed to deliver, and names the answer.
fn client_body_fault(fault: &RequestBodyError) -> ApiError {
    static LOG: LazyLock<RateLimitedLog> = LazyLock::new(RateLimitedLog::default);
    let kind = match fault {
        RequestBodyError::Stalled(_) => "body_stalled",
        RequestBodyError::Broken(_) => "body_malformed",
    };
    metrics::counter!("tollgate_client_errors_total", "kind" => kind).increment(1);
    if LOG.allow() {
        tracing::info!(
            error = %crate::error::anyhow_chain(fault),
            suppressed = LOG.take_suppressed(),
            "request body failed on the client's side"
        );
    }
    ApiError::from_request_body(fault)
}
