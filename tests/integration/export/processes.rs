//! A real `tollgate serve` exporting, SIGKILLed while Stripe holds its event without
//! answering: the next exporter resends the same window and no unit is lost or doubled.

use std::process::Child;
use std::time::Duration;

use chrono::Utc;
use tollgate_testkit::stripe::{API_KEY, EVENT_NAME, FakeStripe, Fault};

use super::*;
use crate::jetstream::free_port;

/// A `tollgate serve` exporting to `stripe`, killed (SIGKILL) when dropped.
struct Serve(Child);

impl Serve {
    async fn start(app: &TestApp, stripe: &FakeStripe, logs: &std::path::Path) -> Self {
        let port = free_port();
        let env: Vec<(String, String)> = [
            ("TOLLGATE__DATABASE__URL", app.db.url.clone()),
            ("TOLLGATE__DATABASE__MAX_CONNECTIONS", "4".into()),
            ("TOLLGATE__UPSTREAM__BASE_URL", app.upstream.base_url()),
            ("TOLLGATE__UPSTREAM__SHARED_SECRET", SHARED_SECRET.into()),
            ("TOLLGATE__THROTTLE__STORE", "memory".into()),
            ("TOLLGATE__SERVER__LISTEN", format!("127.0.0.1:{port}")),
            (
                "TOLLGATE__SERVER__METRICS_LISTEN",
                format!("127.0.0.1:{}", free_port()),
            ),
            ("TOLLGATE__BILLING__STRIPE_API_KEY", API_KEY.into()),
            ("TOLLGATE__BILLING__METER_EVENT_NAME", EVENT_NAME.into()),
            ("TOLLGATE__BILLING__STRIPE_API_BASE", stripe.api_base()),
            ("TOLLGATE__BILLING__METER_INTERVAL_S", "1".into()),
            ("TOLLGATE__BILLING__METER_TIMEOUT_MS", "30000".into()),
            ("TOLLGATE__BILLING__METER_RETRY_INITIAL_MS", "100".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let log = logs.join(format!("serve-{port}.log"));
        let child = spawn_tollgate("serve", &env, &log);
        wait_until_ready(&format!("http://127.0.0.1:{port}"), &log).await;
        Self(child)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn an_exporter_killed_mid_window_loses_and_doubles_no_unit() {
    let app = spawn_app().await;
    let stripe = FakeStripe::start().await.unwrap();
    stripe.add_customer("cus_killed");
    let logs = tempfile::tempdir().unwrap();
    let customer = app.signup().await;
    map_customer(&app, customer.account_id, "cus_killed").await;
    account_calls(&app, &customer, 6, 1, Utc::now()).await;

    // Stripe records the event and never answers; the process is killed meanwhile.
    stripe.push_fault(Fault::HangAfterRecording);
    let mut first = Serve::start(&app, &stripe, logs.path()).await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            !stripe.requests().is_empty()
        })
        .await
    );
    let _ = first.0.kill();
    let _ = first.0.wait();
    assert_eq!(stripe.total("cus_killed"), 6);
    let windows = exports_of(&app, customer.account_id).await;
    assert_eq!(windows[0]["status"], "pending", "the cursor has not moved");

    // More units meanwhile; the dead process's lease is let run out (as its TTL would).
    account_calls(&app, &customer, 4, 1, Utc::now()).await;
    sqlx::query("UPDATE meter_export_lease SET expires_at = now()")
        .execute(&app.db.pool)
        .await
        .unwrap();
    let _second = Serve::start(&app, &stripe, logs.path()).await;
    let settled = eventually(Duration::from_secs(20), || async {
        stripe.total("cus_killed") == 10
    })
    .await;
    assert!(settled, "Stripe holds {}", stripe.total("cus_killed"));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        stripe.total("cus_killed"),
        ledger_units(&app, customer.account_id).await
    );
    let requests = stripe.requests();
    assert_eq!(
        requests[0], requests[1],
        "the open window was resent as it was"
    );
    let windows = exports_of(&app, customer.account_id).await;
    assert!(windows.iter().all(|w| w["status"] == "sent"));
    assert_eq!(windows.len(), 2);
}
