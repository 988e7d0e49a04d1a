//! The KV REST routes of the fake: auth, values, listings, bulk writes and deletes, and
//! the Cloudflare error envelope.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use percent_encoding::percent_decode_str;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Entry, FakeKv, Fault, RecordedCall, Shared, unix_now};

// Error codes in the envelopes. 10009 (key not found) and 971 (rate limited) are Cloudflare's
// own; the others are the best known match or the fake's choice (clients should rely on the
// status for those).
const AUTH_ERROR: u32 = 10000;
const INTERNAL_ERROR: u32 = 10001;
const KEY_NOT_FOUND: u32 = 10009;
const NAMESPACE_NOT_FOUND: u32 = 10013;
const INVALID_EXPIRATION: u32 = 10033;
const RATE_LIMITED: u32 = 971;
const NO_ROUTE: u32 = 7000;
const BAD_OBJECT_ID: u32 = 7003;
/// The fake's own code for other malformed requests (bad limit, cursor, key or body).
const BAD_REQUEST: u32 = 10026;

const NAMESPACE_ROUTE: &str = "/client/v4/accounts/{account}/storage/kv/namespaces/{namespace}";
const MAX_KEY_BYTES: usize = 512;
const MAX_BULK_ITEMS: usize = 10_000;
const MIN_EXPIRATION_SECS: i64 = 60;
pub(super) fn router(shared: Shared) -> Router {
    Router::new()
        .route(
            &format!("{NAMESPACE_ROUTE}/values/{{key}}"),
            get(read_value).put(write_value).delete(delete_value),
        )
        .route(&format!("{NAMESPACE_ROUTE}/keys"), get(list_keys))
        .route(
            &format!("{NAMESPACE_ROUTE}/bulk"),
            put(bulk_write).delete(bulk_delete),
        )
        .route(&format!("{NAMESPACE_ROUTE}/bulk/delete"), post(bulk_delete))
        .fallback(|| async {
            Refusal::new(StatusCode::NOT_FOUND, NO_ROUTE, "No route for that URI")
        })
        .method_not_allowed_fallback(|| async {
            Refusal::new(
                StatusCode::METHOD_NOT_ALLOWED,
                NO_ROUTE,
                "Method not allowed for this route",
            )
        })
        .layer(middleware::from_fn_with_state(
            Arc::clone(&shared),
            record_and_fault,
        ))
        .with_state(shared)
}

/// Records the request, then answers with the current fault or passes it on.
async fn record_and_fault(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    let call = RecordedCall {
        method: request.method().to_string(),
        path: path_below_namespace(request.uri().path()),
        query: request.uri().query().map(str::to_owned),
    };
    let fault = {
        let mut state = shared.lock();
        state.calls.push(call);
        state.call_times.push(Instant::now());
        state.fault.clone()
    };
    match fault {
        Fault::None => next.run(request).await,
        Fault::ServerError => Refusal::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            INTERNAL_ERROR,
            "Internal server error",
        )
        .into_response(),
        Fault::RateLimited { retry_after_secs } => {
            let mut response = Refusal::new(
                StatusCode::TOO_MANY_REQUESTS,
                RATE_LIMITED,
                "Please wait and consider throttling your request speed",
            )
            .into_response();
            if let Some(secs) = retry_after_secs {
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(secs));
            }
            response
        }
        Fault::Delay(delay) => {
            tokio::time::sleep(delay).await;
            next.run(request).await
        }
    }
}

fn path_below_namespace(path: &str) -> String {
    const MARKER: &str = "/storage/kv/namespaces/";
    let below = path.find(MARKER).map_or(path, |at| {
        let rest = &path[at + MARKER.len()..];
        rest.find('/').map_or("", |slash| &rest[slash..])
    });
    percent_decode_str(below).decode_utf8_lossy().into_owned()
}

/// A Cloudflare error envelope, ready to send.
struct Refusal {
    status: StatusCode,
    code: u32,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, code: u32, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, BAD_REQUEST, message)
    }

    fn invalid_expiration(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, INVALID_EXPIRATION, message)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = json!({
            "success": false,
            "errors": [{ "code": self.code, "message": self.message }],
            "messages": [],
            "result": null,
        });
        (self.status, Json(body)).into_response()
    }
}

/// A request with the right bearer token for the fake's account and namespace.
struct Authorized;

impl FromRequestParts<Shared> for Authorized {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<Self, Refusal> {
        let bearer = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        let auth_error = |status| Refusal::new(status, AUTH_ERROR, "Authentication error");
        match bearer {
            None => return Err(auth_error(StatusCode::UNAUTHORIZED)),
            Some(token) if token != FakeKv::API_TOKEN => {
                return Err(auth_error(StatusCode::FORBIDDEN));
            }
            Some(_) => {}
        }
        let Path(ids) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| Refusal::bad_request(rejection.body_text()))?;
        if ids.get("account").map(String::as_str) != Some(FakeKv::ACCOUNT_ID) {
            let message = format!(
                "Could not route to {}, perhaps your object identifier is invalid?",
                parts.uri.path()
            );
            return Err(Refusal::new(StatusCode::NOT_FOUND, BAD_OBJECT_ID, message));
        }
        if ids.get("namespace").map(String::as_str) != Some(FakeKv::NAMESPACE_ID) {
            let message = "namespace not found";
            return Err(Refusal::new(
                StatusCode::NOT_FOUND,
                NAMESPACE_NOT_FOUND,
                message,
            ));
        }
        Ok(Authorized)
    }
}

#[derive(Deserialize)]
struct KeyPath {
    key: String,
}

type Answer = Result<Response, Refusal>;

async fn read_value(
    _: Authorized,
    State(shared): State<Shared>,
    Path(path): Path<KeyPath>,
) -> Answer {
    let state = shared.lock();
    let entry = state
        .entries
        .get(&path.key)
        .filter(|e| e.is_live(unix_now()));
    let entry = entry.ok_or_else(|| {
        Refusal::new(StatusCode::NOT_FOUND, KEY_NOT_FOUND, "get: 'key not found'")
    })?;
    let content_type = [(CONTENT_TYPE, "application/octet-stream")];
    let mut response = (content_type, entry.value.clone()).into_response();
    if let Some(at) = entry.expiration {
        response
            .headers_mut()
            .insert("expiration", HeaderValue::from(at));
    }
    Ok(response)
}

async fn write_value(
    _: Authorized,
    State(shared): State<Shared>,
    Path(path): Path<KeyPath>,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Answer {
    let parse = |name: &str| match query.get(name) {
        None => Ok(None),
        Some(raw) => raw.parse().map(Some).map_err(|_| {
            Refusal::invalid_expiration(format!(
                "Invalid {name} of {raw}. Please specify an integer."
            ))
        }),
    };
    check_key(&path.key)?;
    let expiration = expiration_at(parse("expiration")?, parse("expiration_ttl")?, unix_now())?;
    let entry = Entry {
        value: body.to_vec(),
        expiration,
    };
    shared.lock().entries.insert(path.key, entry);
    Ok(success(json!({})))
}

async fn delete_value(
    _: Authorized,
    State(shared): State<Shared>,
    Path(path): Path<KeyPath>,
) -> Answer {
    check_key(&path.key)?;
    shared.lock().entries.remove(&path.key);
    Ok(success(json!({})))
}

async fn list_keys(
    _: Authorized,
    State(shared): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
) -> Answer {
    let limit = match query.get("limit").map(|raw| raw.parse::<usize>()) {
        None => 1_000,
        Some(Ok(limit)) if (10..=1_000).contains(&limit) => limit,
        Some(_) => {
            let message = "Invalid key limit: the limit must be between 10 and 1000";
            return Err(Refusal::bad_request(message));
        }
    };
    let after = match query.get("cursor").filter(|c| !c.is_empty()) {
        None => None,
        Some(cursor) => {
            Some(decode_cursor(cursor).ok_or_else(|| Refusal::bad_request("Invalid cursor"))?)
        }
    };
    let prefix = query.get("prefix").map_or("", String::as_str);
    let lower = match after {
        Some(after) if after.as_str() >= prefix => Bound::Excluded(after),
        _ => Bound::Included(prefix.to_owned()),
    };
    let now = unix_now();
    let state = shared.lock();
    let mut page: Vec<(&String, &Entry)> = state
        .entries
        .range((lower, Bound::Unbounded))
        .take_while(|(name, _)| name.starts_with(prefix))
        .filter(|(_, entry)| entry.is_live(now))
        .take(limit + 1)
        .collect();
    let more = page.len() > limit;
    page.truncate(limit);
    let cursor = match page.last() {
        Some((last, _)) if more => encode_cursor(last),
        _ => String::new(),
    };
    let keys: Vec<Value> = page
        .iter()
        .map(|(name, entry)| match entry.expiration {
            Some(at) => json!({ "name": name, "expiration": at }),
            None => json!({ "name": name }),
        })
        .collect();
    let count = keys.len();
    let body = json!({
        "success": true,
        "errors": [],
        "messages": [],
        "result": keys,
        "result_info": { "count": count, "cursor": cursor },
    });
    Ok(Json(body).into_response())
}

#[derive(Deserialize)]
struct BulkItem {
    key: String,
    value: String,
    expiration: Option<i64>,
    expiration_ttl: Option<i64>,
    #[serde(default)]
    base64: bool,
}

/// Writes every item or, when any item is invalid, none.
async fn bulk_write(_: Authorized, State(shared): State<Shared>, body: Bytes) -> Answer {
    let items: Vec<BulkItem> = parse_bulk(&body)?;
    let now = unix_now();
    let mut checked = Vec::with_capacity(items.len());
    for item in items {
        if item.base64 {
            return Err(Refusal::bad_request(
                "base64 values are not supported by this fake",
            ));
        }
        check_key(&item.key)?;
        let expiration = expiration_at(item.expiration, item.expiration_ttl, now)?;
        let entry = Entry {
            value: item.value.into_bytes(),
            expiration,
        };
        checked.push((item.key, entry));
    }
    let count = checked.len();
    shared.lock().entries.extend(checked);
    Ok(bulk_success(count))
}

async fn bulk_delete(_: Authorized, State(shared): State<Shared>, body: Bytes) -> Answer {
    let keys: Vec<String> = parse_bulk(&body)?;
    let mut state = shared.lock();
    for key in &keys {
        state.entries.remove(key);
    }
    Ok(bulk_success(keys.len()))
}

fn parse_bulk<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<Vec<T>, Refusal> {
    let items: Vec<T> = serde_json::from_slice(body)
        .map_err(|error| Refusal::bad_request(format!("Could not parse request body: {error}")))?;
    if items.len() > MAX_BULK_ITEMS {
        let message = "A bulk request may contain at most 10000 items";
        return Err(Refusal::bad_request(message));
    }
    Ok(items)
}

/// The absolute expiration for a write, refused as Cloudflare does when under 60 s away.
/// `expiration_ttl` wins over `expiration` when both are given.
fn expiration_at(
    expiration: Option<i64>,
    ttl: Option<i64>,
    now: i64,
) -> Result<Option<i64>, Refusal> {
    if let Some(ttl) = ttl {
        if ttl < MIN_EXPIRATION_SECS {
            return Err(Refusal::invalid_expiration(format!(
                "Invalid expiration_ttl of {ttl}. Expiration TTL must be at least 60."
            )));
        }
        return Ok(Some(now.saturating_add(ttl)));
    }
    match expiration {
        Some(at) if at <= now => Err(Refusal::invalid_expiration(format!(
            "Invalid expiration of {at}. Please specify integer greater than the current number of seconds since the UNIX epoch."
        ))),
        Some(at) if at < now + MIN_EXPIRATION_SECS => Err(Refusal::invalid_expiration(format!(
            "Invalid expiration of {at}. Expiration times must be at least 60 seconds in the future."
        ))),
        other => Ok(other),
    }
}

fn check_key(key: &str) -> Result<(), Refusal> {
    if key.is_empty() || key == "." || key == ".." {
        return Err(Refusal::bad_request("Invalid key name"));
    }
    if key.len() > MAX_KEY_BYTES {
        let message = format!(
            "UTF-8 encoded length of {} exceeds key length limit of {MAX_KEY_BYTES}.",
            key.len()
        );
        return Err(Refusal::new(StatusCode::URI_TOO_LONG, BAD_REQUEST, message));
    }
    Ok(())
}

/// Cursors are the hex of the last key returned: opaque to clients, stable for the fake.
pub(super) fn encode_cursor(last: &str) -> String {
    last.bytes().fold(String::new(), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    })
}

pub(super) fn decode_cursor(cursor: &str) -> Option<String> {
    if !cursor.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..cursor.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(cursor.get(at..at + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

fn success(result: Value) -> Response {
    Json(json!({ "success": true, "errors": [], "messages": [], "result": result })).into_response()
}

fn bulk_success(count: usize) -> Response {
    success(json!({ "successful_key_count": count, "unsuccessful_keys": [] }))
}
