//! A local stand-in for Cloudflare's Workers KV REST API, for tests, demos and benchmarks.
//!
//! `FakeKv` serves one account and one namespace on 127.0.0.1 with the real contract:
//! bearer-token auth, raw values on read, JSON envelopes everywhere else, 404 code 10009 for
//! a missing key, expirations refused under 60 s, cursor paging of sorted key listings, bulk
//! write and delete. Keys expire by the wall clock. Every request is recorded, and a
//! [`Fault`] can make every later answer a 500, a 429 or a slow one. It depends on nothing
//! in this crate, so it can serve any client.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

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

/// A running fake KV server; it stops when dropped.
pub struct FakeKv {
    addr: SocketAddr,
    shared: Shared,
    server: JoinHandle<()>,
}

/// A failure injected into every later answer, until replaced (`Fault::None` clears it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Fault {
    #[default]
    None,
    /// 500 with an envelope, code 10001.
    ServerError,
    /// 429 with an envelope, code 971, and `Retry-After` when given.
    RateLimited { retry_after_secs: Option<u64> },
    /// Answer normally after the delay.
    Delay(Duration),
}

/// One request as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCall {
    pub method: String,
    /// Percent-decoded path below the namespace, e.g. `/values/usage-exhausted:42:1764547200`
    /// or `/keys`; the whole decoded path when the request was not for a namespace.
    pub path: String,
    /// The raw query string.
    pub query: Option<String>,
}

impl FakeKv {
    pub const ACCOUNT_ID: &'static str = "test-account";
    pub const NAMESPACE_ID: &'static str = "test-namespace";
    pub const API_TOKEN: &'static str = "test-token";

    /// Starts a fake on a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start() -> FakeKv {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("the fake KV binds a free port on 127.0.0.1");
        Self::start_on(listener).await
    }

    /// Starts a fake serving `listener`.
    ///
    /// # Panics
    /// When the listener has no local address.
    pub async fn start_on(listener: TcpListener) -> FakeKv {
        let addr = listener
            .local_addr()
            .expect("the fake KV listener has a local address");
        let shared = Arc::new(Store::default());
        let app = router(Arc::clone(&shared));
        let server = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::warn!(%error, "fake KV server stopped");
            }
        });
        FakeKv {
            addr,
            shared,
            server,
        }
    }

    /// The address the fake listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The API root to configure a client with, e.g. `http://127.0.0.1:PORT/client/v4`.
    pub fn api_base(&self) -> String {
        format!("http://{}/client/v4", self.addr)
    }

    /// Makes every later answer fail as `fault` says, until set again.
    pub fn set_fault(&self, fault: Fault) {
        self.shared.lock().fault = fault;
    }

    /// Every request received so far, in order, faulted ones included.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.shared.lock().calls.clone()
    }

    /// Every request received so far with the instant it arrived, in order.
    pub fn timed_calls(&self) -> Vec<(Instant, RecordedCall)> {
        let state = self.shared.lock();
        state
            .call_times
            .iter()
            .copied()
            .zip(state.calls.iter().cloned())
            .collect()
    }

    /// Forgets the recorded requests.
    pub fn clear_calls(&self) {
        let mut state = self.shared.lock();
        state.calls.clear();
        state.call_times.clear();
    }

    /// Stores a value directly, without the API's validation (a past expiration is allowed
    /// and makes the key invisible).
    pub fn insert(&self, key: &str, value: &str, expiration: Option<i64>) {
        let entry = Entry {
            value: value.as_bytes().to_vec(),
            expiration,
        };
        self.shared.lock().entries.insert(key.to_owned(), entry);
    }

    /// The live value of `key` (lossily decoded as UTF-8) and its expiration.
    pub fn value(&self, key: &str) -> Option<(String, Option<i64>)> {
        let state = self.shared.lock();
        let entry = state.entries.get(key).filter(|e| e.is_live(unix_now()))?;
        Some((
            String::from_utf8_lossy(&entry.value).into_owned(),
            entry.expiration,
        ))
    }

    /// Every live key, sorted.
    pub fn keys(&self) -> Vec<String> {
        let now = unix_now();
        let state = self.shared.lock();
        let live = state.entries.iter().filter(|(_, e)| e.is_live(now));
        live.map(|(name, _)| name.clone()).collect()
    }
}

impl Drop for FakeKv {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[derive(Default)]
struct Store {
    state: Mutex<StoreState>,
}

impl Store {
    fn lock(&self) -> MutexGuard<'_, StoreState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
struct StoreState {
    entries: BTreeMap<String, Entry>,
    fault: Fault,
    calls: Vec<RecordedCall>,
    /// When each of `calls` arrived.
    call_times: Vec<Instant>,
}

struct Entry {
    value: Vec<u8>,
    expiration: Option<i64>,
}

impl Entry {
    fn is_live(&self, now: i64) -> bool {
        self.expiration.is_none_or(|at| at > now)
    }
}

/// The state handlers share.
type Shared = Arc<Store>;

fn router(shared: Shared) -> Router {
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
fn encode_cursor(last: &str) -> String {
    last.bytes().fold(String::new(), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    })
}

fn decode_cursor(cursor: &str) -> Option<String> {
    if !cursor.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..cursor.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(cursor.get(at..at + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

fn unix_now() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_secs()).unwrap_or(i64::MAX)
}

fn success(result: Value) -> Response {
    Json(json!({ "success": true, "errors": [], "messages": [], "result": result })).into_response()
}

fn bulk_success(count: usize) -> Response {
    success(json!({ "successful_key_count": count, "unsuccessful_keys": [] }))
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn http() -> Result<reqwest::Client, reqwest::Error> {
        reqwest::Client::builder().no_proxy().build()
    }

    fn namespace_url(fake: &FakeKv) -> String {
        format!(
            "{}/accounts/{}/storage/kv/namespaces/{}",
            fake.api_base(),
            FakeKv::ACCOUNT_ID,
            FakeKv::NAMESPACE_ID
        )
    }

    async fn send(request: reqwest::RequestBuilder) -> Result<(u16, Value), reqwest::Error> {
        let response = request.bearer_auth(FakeKv::API_TOKEN).send().await?;
        let status = response.status().as_u16();
        Ok((status, response.json().await?))
    }

    fn first_code(body: &Value) -> Option<u64> {
        body["errors"][0]["code"].as_u64()
    }

    #[tokio::test]
    async fn a_list_limit_outside_ten_to_a_thousand_is_a_400_envelope() -> TestResult {
        let fake = FakeKv::start().await;
        let http = http()?;
        let keys = format!("{}/keys", namespace_url(&fake));
        for limit in ["9", "1001", "many"] {
            let (status, body) = send(http.get(&keys).query(&[("limit", limit)])).await?;
            assert_eq!((status, body["success"].as_bool()), (400, Some(false)));
        }
        for limit in ["10", "1000"] {
            let (status, body) = send(http.get(&keys).query(&[("limit", limit)])).await?;
            assert_eq!((status, &body["result_info"]["cursor"]), (200, &json!("")));
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_missing_token_is_a_401_and_a_wrong_account_a_404() -> TestResult {
        let fake = FakeKv::start().await;
        let http = http()?;
        let url = format!("{}/values/k", namespace_url(&fake));
        let response = http.get(&url).send().await?;
        assert_eq!(response.status().as_u16(), 401);
        assert_eq!(first_code(&response.json().await?), Some(10_000));
        let other = url.replace(FakeKv::ACCOUNT_ID, "other-account");
        let (status, body) = send(http.get(&other)).await?;
        assert_eq!((status, first_code(&body)), (404, Some(7_003)));
        Ok(())
    }

    #[tokio::test]
    async fn a_missing_key_is_a_404_with_code_10009() -> TestResult {
        let fake = FakeKv::start().await;
        let url = format!("{}/values/absent", namespace_url(&fake));
        let (status, body) = send(http()?.get(&url)).await?;
        assert_eq!((status, first_code(&body)), (404, Some(10_009)));
        assert_eq!(body["errors"][0]["message"], "get: 'key not found'");
        Ok(())
    }

    #[tokio::test]
    async fn an_expiration_ttl_of_at_least_sixty_seconds_sets_the_expiration() -> TestResult {
        let fake = FakeKv::start().await;
        let http = http()?;
        let url = format!("{}/values/k", namespace_url(&fake));
        let short = http.put(&url).query(&[("expiration_ttl", 59)]).body("v");
        assert_eq!(send(short).await?.0, 400);
        let before = unix_now();
        let (status, body) =
            send(http.put(&url).query(&[("expiration_ttl", 60)]).body("v")).await?;
        assert_eq!((status, &body["success"]), (200, &json!(true)));
        let expiration = fake.value("k").and_then(|(_, at)| at).unwrap_or_default();
        assert!((before + 60..=unix_now() + 60).contains(&expiration));
        Ok(())
    }

    #[tokio::test]
    async fn every_request_is_recorded_even_when_faulted_or_unrouted() -> TestResult {
        let fake = FakeKv::start().await;
        let http = http()?;
        fake.set_fault(Fault::ServerError);
        let url = format!("{}/values/a%3Ab%2Fc", namespace_url(&fake));
        assert_eq!(send(http.get(&url)).await?.0, 500);
        fake.set_fault(Fault::None);
        let (status, body) = send(http.get(format!("{}/nowhere", fake.api_base()))).await?;
        assert_eq!((status, first_code(&body)), (404, Some(7_000)));
        let recorded = fake.calls();
        assert_eq!(recorded.len(), 2);
        assert_eq!(recorded[0].path, "/values/a:b/c");
        assert_eq!(recorded[1].path, "/client/v4/nowhere");
        fake.clear_calls();
        assert!(fake.calls().is_empty());
        Ok(())
    }

    #[tokio::test]
    async fn the_legacy_delete_on_bulk_also_deletes_keys() -> TestResult {
        let fake = FakeKv::start().await;
        fake.insert("a", "1", None);
        fake.insert("b", "2", None);
        let url = format!("{}/bulk", namespace_url(&fake));
        let (status, body) = send(http()?.delete(&url).json(&["a"])).await?;
        assert_eq!(
            (status, &body["result"]["successful_key_count"]),
            (200, &json!(1))
        );
        assert_eq!(fake.keys(), ["b"]);
        Ok(())
    }

    #[test]
    fn cursors_round_trip_any_key() {
        for key in ["", "usage-exhausted:42:1", "ünï/code"] {
            assert_eq!(decode_cursor(&encode_cursor(key)).as_deref(), Some(key));
        }
        assert_eq!(decode_cursor("zz"), None);
        assert_eq!(decode_cursor("abc"), None);
    }
}
