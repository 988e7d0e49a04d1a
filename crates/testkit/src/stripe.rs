//! A local stand-in for Stripe's Billing Meter Events API (`POST
//! /v1/billing/meter_events`), following its documented contract.
//!
//! - The body is form-encoded: `event_name`, `timestamp` (Unix seconds, within the past
//!   35 days and at most 5 minutes ahead), `identifier` (at most 100 characters),
//!   `payload[stripe_customer_id]`, `payload[value]` (a whole number).
//! - Authentication is `Authorization: Bearer <secret key>`; any other key is a 401.
//! - An `identifier` already recorded is refused with a 400 ("An event already exists
//!   with identifier …"), and the event is not counted again.
//! - Errors are `{"error": {"type", "code", "message"}}`; an unknown customer is a 400
//!   (`resource_missing`).
//!
//! Tests register customers, queue faults ([`Fault`]: a status, a hang, or a hang after
//! the event was recorded, as when Stripe's answer is lost), and read what was recorded
//! per customer.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The secret key the stand-in accepts.
pub const API_KEY: &str = "sk_test_tollgate_standin";
/// The meter's event name.
pub const EVENT_NAME: &str = "api_units";

/// What the next request gets instead of the normal answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer this status with Stripe's error envelope, recording nothing.
    Status(u16),
    /// Never answer, recording nothing.
    Hang,
    /// Record the event, then never answer (the answer is lost on the way).
    HangAfterRecording,
}

/// One recorded meter event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterEvent {
    pub identifier: String,
    pub customer: String,
    pub value: i64,
    pub timestamp: i64,
}

#[derive(Default)]
struct Shared {
    customers: HashSet<String>,
    events: Vec<MeterEvent>,
    identifiers: HashSet<String>,
    /// The identifier of every request received, in order (faulted ones included).
    requests: Vec<String>,
    faults: VecDeque<Fault>,
    delay: Duration,
}

/// A running stand-in on 127.0.0.1.
pub struct FakeStripe {
    pub addr: std::net::SocketAddr,
    shared: Arc<Mutex<Shared>>,
    task: JoinHandle<()>,
}

impl FakeStripe {
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let app = Router::new()
            .route("/v1/billing/meter_events", post(create_meter_event))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, shared, task })
    }

    /// `billing.stripe_api_base` for this stand-in.
    pub fn api_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `customer` (`cus_…`) known.
    pub fn add_customer(&self, customer: &str) {
        self.lock().customers.insert(customer.to_owned());
    }

    /// Queues a fault for the next request not yet faulted.
    pub fn push_fault(&self, fault: Fault) {
        self.lock().faults.push_back(fault);
    }

    /// Makes every answer wait `delay` first.
    pub fn set_delay(&self, delay: Duration) {
        self.lock().delay = delay;
    }

    /// The sum of `payload[value]` recorded for `customer`.
    pub fn total(&self, customer: &str) -> i64 {
        self.lock()
            .events
            .iter()
            .filter(|e| e.customer == customer)
            .map(|e| e.value)
            .sum()
    }

    /// Every event recorded, oldest first.
    pub fn events(&self) -> Vec<MeterEvent> {
        self.lock().events.clone()
    }

    /// The identifier of every request received, oldest first.
    pub fn requests(&self) -> Vec<String> {
        self.lock().requests.clone()
    }
}

impl Drop for FakeStripe {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn error(status: StatusCode, kind: &str, code: &str, message: &str) -> Response {
    let body = json!({"error": {"type": kind, "code": code, "message": message}});
    (status, axum::Json(body)).into_response()
}

fn invalid(code: &str, message: &str) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        code,
        message,
    )
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

async fn create_meter_event(
    State(shared): State<Arc<Mutex<Shared>>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let lock = || shared.lock().unwrap_or_else(|e| e.into_inner());
    let delay = lock().delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer != Some(API_KEY) {
        return error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "api_key_invalid",
            "Invalid API Key provided.",
        );
    }
    let identifier = form.get("identifier").cloned().unwrap_or_default();
    let fault = {
        let mut shared = lock();
        shared.requests.push(identifier.clone());
        shared.faults.pop_front()
    };
    match fault {
        Some(Fault::Status(429)) => {
            return error(
                StatusCode::TOO_MANY_REQUESTS,
                "invalid_request_error",
                "rate_limit",
                "Request rate limit exceeded.",
            );
        }
        Some(Fault::Status(status)) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error(status, "api_error", "", "An unknown error occurred.");
        }
        Some(Fault::Hang) => std::future::pending::<()>().await,
        Some(Fault::HangAfterRecording) | None => {}
    }
    let field = |name: &str| form.get(name).filter(|v| !v.is_empty());
    let Some(event_name) = field("event_name") else {
        return invalid("parameter_missing", "Missing required param: event_name.");
    };
    if event_name != EVENT_NAME {
        return invalid(
            "resource_missing",
            &format!("No active meter was found matching event_name {event_name}."),
        );
    }
    let Some(customer) = field("payload[stripe_customer_id]") else {
        return invalid(
            "parameter_missing",
            "Missing required param: payload[stripe_customer_id].",
        );
    };
    let Some(value) = field("payload[value]").and_then(|v| v.parse::<i64>().ok()) else {
        return invalid(
            "parameter_invalid_integer",
            "Invalid integer: payload[value].",
        );
    };
    let now = now_unix();
    let timestamp = match field("timestamp") {
        None => now,
        Some(t) => match t.parse::<i64>() {
            Ok(t) => t,
            Err(_) => return invalid("parameter_invalid_integer", "Invalid integer: timestamp."),
        },
    };
    if timestamp < now - 35 * 24 * 3600 {
        return invalid(
            "timestamp_too_far_in_past",
            "The timestamp must be within the past 35 calendar days.",
        );
    }
    if timestamp > now + 5 * 60 {
        return invalid(
            "timestamp_in_future",
            "The timestamp cannot be more than 5 minutes in the future.",
        );
    }
    if identifier.chars().count() > 100 {
        return invalid(
            "parameter_invalid_string_too_long",
            "identifier must be at most 100 characters.",
        );
    }
    {
        let mut shared = lock();
        if !shared.customers.contains(customer) {
            return invalid(
                "resource_missing",
                &format!("No such customer: '{customer}'"),
            );
        }
        if !identifier.is_empty() && !shared.identifiers.insert(identifier.clone()) {
            return invalid(
                "resource_already_exists",
                &format!("An event already exists with identifier {identifier}."),
            );
        }
        shared.events.push(MeterEvent {
            identifier: identifier.clone(),
            customer: customer.clone(),
            value,
            timestamp,
        });
    }
    if fault == Some(Fault::HangAfterRecording) {
        std::future::pending::<()>().await;
    }
    axum::Json(json!({
        "object": "billing.meter_event",
        "created": now,
        "event_name": event_name,
        "identifier": identifier,
        "livemode": false,
        "payload": {"stripe_customer_id": customer, "value": value.to_string()},
        "timestamp": timestamp,
    }))
    .into_response()
}
