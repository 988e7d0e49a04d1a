//! Hardening of authentication (SPEC §9): precise key-cache invalidation, refused
//! unauthenticated traffic counted and logged sparingly, a trimmed admin token, and a
//! hashing queue that refuses at once when full.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::limits::{create_key, error_code};
use super::with_session;
use crate::common::*;

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

    // Room for the fifty wrong admin tokens below: past the limit they would be 429.
    let app = spawn_app_with(|c| c.admin.failures_per_hour = 100).await;
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
