//! Hardening of authentication (SPEC §2 `account.*`, §3.2, §9): abuse limits on signup,
//! login and keys, bounded key listings, precise key-cache invalidation, refused
//! unauthenticated traffic counted and logged sparingly, secrets kept out of `Debug`.

#[allow(dead_code)]
mod common;

use std::net::IpAddr;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// A client whose connections come from `ip` (any address of the loopback range).
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

async fn login_from(
    app: &TestApp,
    client: &reqwest::Client,
    email: &str,
    password: &str,
) -> reqwest::Response {
    client
        .post(app.url("/account/v1/login"))
        .json(&json!({"email": email, "password": password}))
        .send()
        .await
        .unwrap()
}

async fn with_session(app: &TestApp, method: Method, path: &str, token: &str) -> reqwest::Response {
    app.client
        .request(method, app.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

/// The status and error code of a JSON error response.
async fn error_code(res: reqwest::Response) -> (StatusCode, String) {
    let status = res.status();
    let body: Value = res.json().await.expect("error bodies are JSON");
    (status, body["code"].as_str().unwrap_or_default().to_owned())
}

/// Asserts a `429 TOO_MANY_REQUESTS` with a `Retry-After` of whole seconds; returns them.
async fn expect_too_many(res: reqwest::Response) -> u64 {
    let retry_after = res
        .headers()
        .get("retry-after")
        .expect("a 429 carries Retry-After")
        .to_str()
        .unwrap()
        .parse::<u64>()
        .expect("Retry-After is delay-seconds");
    assert_eq!(
        error_code(res).await,
        (StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_REQUESTS".into())
    );
    assert!(retry_after >= 1);
    retry_after
}

async fn create_key(app: &TestApp, token: &str) -> reqwest::Response {
    with_session(app, Method::POST, "/account/v1/keys", token).await
}

#[tokio::test]
async fn the_21st_signup_from_one_address_within_the_hour_is_429_with_retry_after() {
    let app = spawn_app().await;
    for _ in 0..20 {
        app.signup().await;
    }
    let res = app
        .post_json(
            "/account/v1/signup",
            &json!({"email": "one-more@example.com", "password": "long enough"}),
        )
        .await;
    let retry_after = expect_too_many(res).await;
    // 20 an hour: one more signup every three minutes.
    assert!(retry_after <= 180, "{retry_after}");

    let elsewhere = client_from("127.0.0.2")
        .post(app.url("/account/v1/signup"))
        .json(&json!({"email": "one-more@example.com", "password": "long enough"}))
        .send()
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), 201, "another address is not limited");
}

#[tokio::test]
async fn after_ten_failed_logins_for_an_email_even_the_right_password_is_429() {
    let app = spawn_app().await;
    let victim = app.signup().await;
    let attacker = client_from("127.0.0.2");
    for _ in 0..10 {
        let res = login_from(&app, &attacker, &victim.email, "wrong password").await;
        assert_eq!(res.status(), 401);
    }
    // From another address, with the right password: the email's limit is spent.
    let owner = client_from("127.0.0.3");
    expect_too_many(login_from(&app, &owner, &victim.email, &victim.password).await).await;
    // Another account from that other address is not affected.
    let other = app.signup().await;
    let res = login_from(&app, &owner, &other.email, &other.password).await;
    assert_eq!(res.status(), 200);
}

#[tokio::test]
async fn after_ten_failed_logins_from_an_address_every_login_from_it_is_429() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let guesser = client_from("127.0.0.2");
    for i in 0..10 {
        let res = login_from(&app, &guesser, &format!("nobody{i}@example.com"), "guess").await;
        assert_eq!(res.status(), 401);
    }
    let res = login_from(&app, &guesser, &customer.email, &customer.password).await;
    expect_too_many(res).await;
    // The customer's own address still logs in.
    let res = login_from(
        &app,
        &client_from("127.0.0.3"),
        &customer.email,
        &customer.password,
    )
    .await;
    assert_eq!(res.status(), 200);
}

#[tokio::test]
async fn successful_logins_do_not_count_toward_the_failure_limit() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let client = client_from("127.0.0.2");
    for _ in 0..12 {
        let res = login_from(&app, &client, &customer.email, &customer.password).await;
        assert_eq!(res.status(), 200);
    }
    for _ in 0..9 {
        let res = login_from(&app, &client, &customer.email, "wrong password").await;
        assert_eq!(res.status(), 401);
    }
    let res = login_from(&app, &client, &customer.email, &customer.password).await;
    assert_eq!(
        res.status(),
        200,
        "nine failures are under the limit of ten"
    );
}

#[tokio::test]
async fn an_account_holds_at_most_twenty_unrevoked_keys_and_revoking_frees_a_slot() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let mut ids = vec![customer.key_id];
    for _ in 1..20 {
        let res = create_key(&app, &token).await;
        assert_eq!(res.status(), 201);
        let body: Value = res.json().await.unwrap();
        ids.push(body["key_id"].as_i64().unwrap());
    }
    assert_eq!(
        error_code(create_key(&app, &token).await).await,
        (StatusCode::CONFLICT, "KEY_LIMIT".into())
    );

    let res = with_session(
        &app,
        Method::DELETE,
        &format!("/account/v1/keys/{}", ids[3]),
        &token,
    )
    .await;
    assert_eq!(res.status(), 204);
    assert_eq!(create_key(&app, &token).await.status(), 201);
    assert_eq!(
        error_code(create_key(&app, &token).await).await,
        (StatusCode::CONFLICT, "KEY_LIMIT".into())
    );
}

#[tokio::test]
async fn concurrent_key_creations_never_pass_the_limit() {
    let app = spawn_app_with(|c| c.account.max_keys = 3).await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let attempts = futures_util::future::join_all((0..8).map(|_| create_key(&app, &token))).await;
    let created = attempts.iter().filter(|r| r.status() == 201).count();
    let refused = attempts.iter().filter(|r| r.status() == 409).count();
    assert_eq!((created, refused), (2, 6));
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM api_key WHERE account_id = $1 AND revoked_at IS NULL",
    )
    .bind(customer.account_id)
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(live, 3);
}

#[tokio::test]
async fn key_listings_are_paged_in_id_order_with_a_next_link() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    for _ in 0..4 {
        assert_eq!(create_key(&app, &token).await.status(), 201);
    }
    let all: Value = with_session(&app, Method::GET, "/account/v1/keys", &token)
        .await
        .json()
        .await
        .unwrap();
    let all: Vec<i64> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key_id"].as_i64().unwrap())
        .collect();
    assert_eq!(all.len(), 5);
    assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");

    let mut seen = Vec::new();
    let mut next = Some("/account/v1/keys?limit=2".to_owned());
    while let Some(path) = next.take() {
        let res = with_session(&app, Method::GET, &path, &token).await;
        assert_eq!(res.status(), 200);
        next = res.headers().get("link").map(|link| {
            let link = link.to_str().unwrap();
            assert!(link.ends_with(r#">; rel="next""#), "{link}");
            link[1..link.find('>').unwrap()].to_owned()
        });
        let page: Value = res.json().await.unwrap();
        let page = page.as_array().unwrap();
        assert!(page.len() <= 2);
        seen.extend(page.iter().map(|k| k["key_id"].as_i64().unwrap()));
        assert!(seen.len() <= 6, "the pages end");
    }
    assert_eq!(seen, all);

    let after_third = format!("/account/v1/keys?after={}", all[2]);
    let rest: Value = with_session(&app, Method::GET, &after_third, &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(rest.as_array().unwrap().len(), 2);
    for bad in ["limit=0", "limit=1001", "limit=x", "after=x"] {
        let res = with_session(
            &app,
            Method::GET,
            &format!("/account/v1/keys?{bad}"),
            &token,
        )
        .await;
        assert_eq!(
            error_code(res).await,
            (StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_FAILED".into()),
            "{bad}"
        );
    }
}

const DAILY: &str = "/vedic/v1/horoscope/daily?sign=leo";

/// Whether `app`'s key cache holds `key` now (a lookup that would not ask PostgreSQL).
fn cached(app: &TestApp, key: &str) -> bool {
    app.state
        .keys
        .get(&tollgate::auth::token::TokenHash::of(key).0)
        .is_some()
}

async fn revoke(app: &TestApp, token: &str, key_id: i64) -> reqwest::Response {
    with_session(
        app,
        Method::DELETE,
        &format!("/account/v1/keys/{key_id}"),
        token,
    )
    .await
}

#[tokio::test]
async fn revoking_a_key_evicts_only_that_key_and_revoking_it_again_changes_nothing() {
    let a = spawn_app().await;
    let b = spawn_replica(
        std::sync::Arc::clone(&a.db),
        std::sync::Arc::clone(&a.upstream),
        (*a.state.config).clone(),
    )
    .await;
    let customer = a.signup().await;
    let token = a.login(&customer).await;
    let created: Value = create_key(&a, &token).await.json().await.unwrap();
    let (key_b, id_b) = (
        created["api_key"].as_str().unwrap().to_owned(),
        created["key_id"].as_i64().unwrap(),
    );
    let key_a = customer.api_key.clone();
    for app in [&a, &b] {
        assert!(
            eventually(std::time::Duration::from_secs(5), || async {
                app.state.keys.trusted()
            })
            .await,
            "the cache's listener is heard"
        );
        for key in [&key_a, &key_b] {
            assert_eq!(app.call(DAILY, key).await.status(), 200);
            assert!(cached(app, key));
        }
    }

    assert_eq!(revoke(&a, &token, id_b).await.status(), 204);
    assert!(!cached(&a, &key_b), "the revoked key is gone at once");
    assert!(
        cached(&a, &key_a),
        "the other key is still cached on the revoking replica"
    );
    assert!(
        eventually(std::time::Duration::from_secs(1), || async {
            !cached(&b, &key_b)
        })
        .await,
        "the other replica hears of the revocation"
    );
    assert!(cached(&b, &key_a), "and keeps the other key");

    let revoked_at = || async {
        sqlx::query_scalar::<_, Option<chrono::DateTime<chrono::Utc>>>(
            "SELECT revoked_at FROM api_key WHERE id = $1",
        )
        .bind(id_b)
        .fetch_one(&a.db.pool)
        .await
        .unwrap()
    };
    let first = revoked_at().await;
    assert!(first.is_some());

    // Again, and again: nothing changes, nothing is flushed anywhere.
    for _ in 0..3 {
        assert_eq!(revoke(&a, &token, id_b).await.status(), 204);
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for app in [&a, &b] {
        assert!(
            cached(app, &key_a),
            "a repeated revocation flushed the cache"
        );
        assert_eq!(app.state.keys.len(), 1);
        assert_eq!(app.call(DAILY, &key_b).await.status(), 401);
        assert_eq!(app.call(DAILY, &key_a).await.status(), 200);
    }
    assert_eq!(
        revoked_at().await,
        first,
        "the revocation time stays the first one"
    );
    assert_eq!(
        revoke(&a, &token, id_b + 1_000).await.status(),
        404,
        "an unknown key is still not found"
    );
}

/// Log lines of refused requests, as written by the gateway (WARN and INFO).
mod refusal_log {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Mutex, OnceLock};

    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, SubscriberExt};

    static LINES: AtomicUsize = AtomicUsize::new(0);
    static SAMPLE: Mutex<Vec<String>> = Mutex::new(Vec::new());

    struct Message(String);

    impl Visit for Message {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                self.0 = format!("{value:?}");
            }
        }
    }

    struct Counter;

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Counter {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            if *event.metadata().level() > tracing::Level::INFO {
                return;
            }
            let mut message = Message(String::new());
            event.record(&mut message);
            // Refusals of unauthenticated traffic; a failed login is not one.
            if message.0.contains("refused") && !message.0.starts_with("login") {
                LINES.fetch_add(1, Ordering::SeqCst);
                SAMPLE.lock().unwrap().push(message.0);
            }
        }
    }

    /// Lines written so far (the counting subscriber is installed on first use).
    pub fn lines() -> usize {
        static INSTALLED: OnceLock<()> = OnceLock::new();
        INSTALLED.get_or_init(|| {
            tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Counter))
                .expect("no other subscriber in this test binary");
        });
        LINES.load(Ordering::SeqCst)
    }

    pub fn sample() -> Vec<String> {
        SAMPLE.lock().unwrap().clone()
    }
}

/// The value of a counter on the process's Prometheus exposition (0 when absent).
fn counter(name_and_labels: &str) -> u64 {
    let text = tollgate::telemetry::prometheus().render();
    text.lines()
        .find_map(|line| {
            line.strip_prefix(name_and_labels)?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0, |v| v as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unauthenticated_calls_is_counted_but_hardly_logged() {
    use futures_util::StreamExt;

    let app = spawn_app().await;
    let lines_before = refusal_log::lines();
    let unknown_before = counter(r#"tollgate_auth_refused_total{reason="unknown_key"}"#);
    let paths_before = counter(r#"tollgate_auth_refused_total{reason="escaping_path"}"#);
    let admin_before = counter(r#"tollgate_auth_refused_total{reason="admin_token"}"#);
    let negative_before = counter(r#"tollgate_key_cache_total{result="negative_hit"}"#);

    // 900 calls with one unknown key and 100 with keys never seen before.
    let flood = "tgk_0123456789012345678901234567890123456789".to_owned();
    let statuses: Vec<StatusCode> = futures_util::stream::iter(0..1_000)
        .map(|i| {
            let key = if i < 900 {
                flood.clone()
            } else {
                format!("tgk_{:040}", i)
            };
            let app = &app;
            async move { app.call(DAILY, &key).await.status() }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == StatusCode::UNAUTHORIZED));
    for _ in 0..50 {
        let res = app.call("/vedic/v1/%252e%252e/admin", &flood).await;
        assert_eq!(res.status(), 404);
        let res = app
            .client
            .post(app.url("/admin/v1/reconcile"))
            .bearer_auth("not the admin token")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 401);
    }

    let lines = refusal_log::lines() - lines_before;
    println!("refusal log lines: {lines}: {:?}", refusal_log::sample());
    assert!(lines <= 10, "{lines} log lines for 1,100 refused requests");
    assert_eq!(
        counter(r#"tollgate_auth_refused_total{reason="unknown_key"}"#) - unknown_before,
        1_000
    );
    assert_eq!(
        counter(r#"tollgate_auth_refused_total{reason="escaping_path"}"#) - paths_before,
        50
    );
    assert_eq!(
        counter(r#"tollgate_auth_refused_total{reason="admin_token"}"#) - admin_before,
        50
    );
    let negative = counter(r#"tollgate_key_cache_total{result="negative_hit"}"#) - negative_before;
    assert!(
        negative >= 800,
        "only {negative} of 900 calls with one unknown key were answered without PostgreSQL"
    );
}

fn load_with_env(env: Vec<(&str, &str)>) -> tollgate::config::Config {
    let dir = tempfile::tempdir().unwrap();
    tollgate::config::Config::load(&tollgate::config::Sources {
        dir: dir.path().to_owned(),
        env: env
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ..Default::default()
    })
    .unwrap()
}

#[tokio::test]
async fn an_admin_token_configured_with_surrounding_spaces_is_trimmed_and_works() {
    use secrecy::ExposeSecret;

    let loaded = load_with_env(vec![("TOLLGATE__ADMIN__TOKEN", "  s3cret-admin \n")]);
    let token = loaded.admin.token.clone().expect("the token is set");
    assert_eq!(token.expose_secret(), "s3cret-admin");

    let app = spawn_app_with(|c| c.admin = loaded.admin.clone()).await;
    let res = app
        .client
        .post(app.url("/admin/v1/reconcile"))
        .bearer_auth("s3cret-admin")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    let blank = load_with_env(vec![("TOLLGATE__ADMIN__TOKEN", " \t ")]);
    assert!(
        blank.admin.token.is_none(),
        "an all-whitespace token leaves the admin API off"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signups_past_the_hashing_queue_are_refused_at_once_with_503_and_retry_after() {
    let app = spawn_app_with(|c| c.account.signups_per_ip_per_hour = 1_000).await;
    let slots = tollgate::auth::password::max_concurrent_hashes();
    let most_in_progress = slots * (1 + tollgate::auth::password::WAITING_PER_SLOT);
    let bodies: Vec<Value> = (0..100)
        .map(|i| json!({"email": format!("burst{i}@example.com"), "password": "long enough"}))
        .collect();
    let attempts = futures_util::future::join_all(
        bodies
            .iter()
            .map(|body| app.post_json("/account/v1/signup", body)),
    )
    .await;
    let mut created = 0;
    let mut refused = 0;
    for res in attempts {
        match res.status() {
            StatusCode::CREATED => created += 1,
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_eq!(res.headers()["retry-after"], "1");
                let (_, code) = error_code(res).await;
                assert_eq!(code, "SERVICE_UNAVAILABLE");
                refused += 1;
            }
            other => panic!("unexpected {other}"),
        }
    }
    println!(
        "100 concurrent signups: {created} created, {refused} refused (at most {most_in_progress} in progress)"
    );
    assert!(refused > 0, "a burst past the queue is refused");
    assert!(created >= slots, "the queue still works through its share");
    // Once the burst is over, signups go through again.
    app.signup().await;
}
