//! The Stripe meter export: windows, retries, refusals, the lease, late units.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{Months, Utc};
use tollgate_testkit::stripe::{FakeStripe, Fault};

use super::*;

/// Past the export interval (1 s in these tests): the account's next turn.
async fn next_turn() {
    tokio::time::sleep(Duration::from_millis(1_100)).await;
}

#[tokio::test]
async fn units_on_both_sides_of_a_window_boundary_are_each_sent_once() {
    let app = spawn_app().await;
    let stripe = FakeStripe::start().await.unwrap();
    stripe.add_customer("cus_boundary");
    let customer = app.signup().await;
    map_customer(&app, customer.account_id, "cus_boundary").await;
    let exporter = exporter(&app, &stripe);

    account_calls(&app, &customer, 3, 1, Utc::now()).await;
    let round = exporter.round().await.unwrap();
    assert_eq!((round.opened, round.accepted), (1, 1));
    account_calls(&app, &customer, 2, 5, Utc::now()).await;
    // Not the account's turn yet: nothing opens.
    assert_eq!(exporter.round().await.unwrap().opened, 0);
    next_turn().await;
    let round = exporter.round().await.unwrap();
    assert_eq!((round.opened, round.accepted), (1, 1));
    next_turn().await;
    assert_eq!(
        exporter.round().await.unwrap().opened,
        0,
        "nothing new to send"
    );

    let values: Vec<i64> = stripe.events().iter().map(|e| e.value).collect();
    assert_eq!(values, [3, 10]);
    assert_eq!(stripe.total("cus_boundary"), 13);
    assert_eq!(ledger_units(&app, customer.account_id).await, 13);

    let windows = exports_of(&app, customer.account_id).await;
    assert_eq!(windows.len(), 2);
    assert!(windows.iter().all(|w| w["status"] == "sent"));
    // Newest first; the second window starts where the first ends.
    assert_eq!(windows[0]["value"], 10);
    assert_eq!(windows[0]["from"], windows[1]["to"]);
    let sent: HashSet<String> = stripe.events().into_iter().map(|e| e.identifier).collect();
    for w in &windows {
        assert!(sent.contains(w["identifier"].as_str().unwrap()));
    }
}

#[tokio::test]
async fn a_retry_after_a_server_error_reuses_the_identifier() {
    let app = spawn_app().await;
    let stripe = FakeStripe::start().await.unwrap();
    stripe.add_customer("cus_retry");
    let customer = app.signup().await;
    map_customer(&app, customer.account_id, "cus_retry").await;
    let exporter = exporter(&app, &stripe);
    account_calls(&app, &customer, 4, 1, Utc::now()).await;

    stripe.push_fault(Fault::Status(500));
    stripe.push_fault(Fault::Status(429));
    let round = exporter.round().await.unwrap();
    assert_eq!(round.retried, 1);
    let windows = exports_of(&app, customer.account_id).await;
    assert_eq!(windows[0]["status"], "pending");
    assert_eq!(windows[0]["attempts"], 1);
    assert!(windows[0]["error"].as_str().unwrap().contains("500"));

    assert!(
        eventually(Duration::from_secs(5), || async {
            exporter.round().await.unwrap();
            stripe.total("cus_retry") == 4
        })
        .await
    );
    let requests = stripe.requests();
    assert_eq!(requests.len(), 3, "a 500, a 429, then accepted");
    assert!(requests.iter().all(|id| *id == requests[0]));
    let windows = exports_of(&app, customer.account_id).await;
    assert_eq!(windows.len(), 1);
    assert_eq!(windows[0]["status"], "sent");
    assert_eq!(windows[0]["identifier"], requests[0].as_str());
}

#[tokio::test]
async fn a_retry_after_a_lost_answer_reuses_the_identifier_and_counts_once() {
    let app = spawn_app().await;
    let stripe = FakeStripe::start().await.unwrap();
    stripe.add_customer("cus_timeout");
    let customer = app.signup().await;
    map_customer(&app, customer.account_id, "cus_timeout").await;
    let exporter = exporter(&app, &stripe);
    account_calls(&app, &customer, 7, 1, Utc::now()).await;

    // Stripe records the event but its answer never arrives; then it hangs outright.
    stripe.push_fault(Fault::HangAfterRecording);
    stripe.push_fault(Fault::Hang);
    assert_eq!(exporter.round().await.unwrap().retried, 1);
    assert!(
        eventually(Duration::from_secs(10), || async {
            exporter.round().await.unwrap();
            exports_of(&app, customer.account_id).await[0]["status"] == "sent"
        })
        .await
    );
    let requests = stripe.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|id| *id == requests[0]));
    assert_eq!(stripe.events().len(), 1, "the identifier is recorded once");
    assert_eq!(stripe.total("cus_timeout"), 7);
}

#[tokio::test]
async fn a_refused_event_is_recorded_failed_and_its_units_go_out_in_the_next_window() {
    let app = spawn_app().await;
    let stripe = FakeStripe::start().await.unwrap();
    let customer = app.signup().await;
    map_customer(&app, customer.account_id, "cus_unknown").await;
    let exporter = exporter(&app, &stripe);
    account_calls(&app, &customer, 2, 1, Utc::now()).await;

    let round = exporter.round().await.unwrap();
    assert_eq!(round.refused, 1);
    // Refused windows are not retried.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        exporter.round().await.unwrap().retried + stripe.requests().len(),
        1
    );
    let windows = exports_of(&app, customer.account_id).await;
    assert_eq!(windows[0]["status"], "failed");
    assert_eq!(windows[0]["error"], "No such customer: 'cus_unknown'");

    // Once the customer exists in Stripe, the next window carries every unit.
    stripe.add_customer("cus_unknown");
    account_calls(&app, &customer, 3, 1, Utc::now()).await;
    next_turn().await;
    assert_eq!(exporter.round().await.unwrap().accepted, 1);
    assert_eq!(stripe.total("cus_unknown"), 5);
    let windows = exports_of(&app, customer.account_id).await;
    assert_eq!(windows.len(), 2);
    assert_eq!(
        (windows[0]["status"].as_str(), windows[0]["value"].as_i64()),
        (Some("sent"), Some(5))
    );
    assert_ne!(windows[0]["identifier"], windows[1]["identifier"]);
}

#[tokio::test]
async fn units_accounted_late_fall_into_the_next_window() {
    let app = spawn_app().await;
    let stripe = FakeStripe::start().await.unwrap();
    stripe.add_customer("cus_late");
    let customer = app.signup().await;
    map_customer(&app, customer.account_id, "cus_late").await;
    let exporter = exporter(&app, &stripe);

    let now = Utc::now();
    account_calls(&app, &customer, 2, 1, now).await;
    exporter.round().await.unwrap();
    // Calls made before the first window was cut, accounted after it (a backlog, an
    // account set aside): one of this month, one of last month.
    account_calls(&app, &customer, 1, 1, now - chrono::Duration::minutes(5)).await;
    account_calls(
        &app,
        &customer,
        1,
        3,
        now.checked_sub_months(Months::new(1)).unwrap(),
    )
    .await;
    next_turn().await;
    exporter.round().await.unwrap();

    let values: Vec<i64> = stripe.events().iter().map(|e| e.value).collect();
    assert_eq!(values, [2, 4]);
    assert_eq!(
        stripe.total("cus_late"),
        ledger_units(&app, customer.account_id).await
    );
}

#[tokio::test]
async fn units_accounted_before_the_customer_was_known_are_not_billed() {
    let app = spawn_app().await;
    let stripe = FakeStripe::start().await.unwrap();
    stripe.add_customer("cus_new");
    let customer = app.signup().await;
    account_calls(&app, &customer, 5, 1, Utc::now()).await;
    map_customer(&app, customer.account_id, "cus_new").await;
    account_calls(&app, &customer, 2, 1, Utc::now()).await;
    exporter(&app, &stripe).round().await.unwrap();
    assert_eq!(stripe.total("cus_new"), 2);
}

#[tokio::test]
async fn two_exporters_share_one_lease_and_only_one_sends() {
    let app = spawn_app().await;
    let stripe = FakeStripe::start().await.unwrap();
    stripe.set_delay(Duration::from_millis(50));
    let mut customers = Vec::new();
    for i in 0..6 {
        let customer = app.signup().await;
        let name = format!("cus_pair_{i}");
        stripe.add_customer(&name);
        map_customer(&app, customer.account_id, &name).await;
        customers.push((customer, name));
    }
    let stop = tokio_util::sync::CancellationToken::new();
    let a = tokio::spawn(exporter(&app, &stripe).run(stop.clone()));
    let b = tokio::spawn(exporter(&app, &stripe).run(stop.clone()));
    for round in 0..3 {
        for (i, (customer, _)) in customers.iter().enumerate() {
            account_calls(&app, customer, i + round + 1, 1, Utc::now()).await;
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let mut all_sent = false;
    for _ in 0..100 {
        let mut done = true;
        for (customer, name) in &customers {
            done &= stripe.total(name) == ledger_units(&app, customer.account_id).await;
        }
        if done {
            all_sent = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    a.await.unwrap();
    b.await.unwrap();
    assert!(all_sent, "every unit reached Stripe");
    let requests = stripe.requests();
    let distinct: HashSet<&String> = requests.iter().collect();
    assert_eq!(distinct.len(), requests.len(), "no window was sent twice");
    let windows: i64 = sqlx::query_scalar("SELECT count(*) FROM meter_window")
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(windows as usize, requests.len());
}

#[tokio::test]
async fn over_a_run_of_proxied_calls_stripe_holds_exactly_the_ledgers_units() {
    let stripe = FakeStripe::start().await.unwrap();
    let app = spawn_app_with(|c| {
        super::use_stripe(c, &stripe);
        c.pricing.routes = vec![tollgate::config::RoutePrice {
            prefix: "/vedic/v1/kundli".into(),
            cost: 3,
        }];
    })
    .await;
    let mut customers = Vec::new();
    for i in 0..3 {
        let customer = app.signup().await;
        let name = format!("cus_run_{i}");
        stripe.add_customer(&name);
        map_customer(&app, customer.account_id, &name).await;
        customers.push((customer, name));
    }
    stripe.push_fault(Fault::Status(503));
    let mut calls = 0;
    for burst in 0..4 {
        for (i, (customer, _)) in customers.iter().enumerate() {
            for n in 0..(i + burst + 2) {
                let path = if n % 2 == 0 {
                    "/vedic/v1/kundli"
                } else {
                    "/western/v1/chart"
                };
                let res = app.call(path, &customer.api_key).await;
                assert_eq!(res.status(), 200);
                calls += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    assert!(calls > 0);
    for (customer, name) in &customers {
        let settled = eventually(Duration::from_secs(15), || async {
            let ledger = ledger_units(&app, customer.account_id).await;
            ledger > 0 && stripe.total(name) == ledger
        })
        .await;
        assert!(
            settled,
            "{name}: Stripe {} against the ledger's {}",
            stripe.total(name),
            ledger_units(&app, customer.account_id).await
        );
    }
}

#[tokio::test]
async fn the_exports_of_an_unknown_account_are_not_found() {
    let app = spawn_app().await;
    assert_error(
        app.admin_get("/admin/v1/accounts/999999/exports").await,
        404,
        "ACCOUNT_NOT_FOUND",
    )
    .await;
    assert_error(
        app.admin_get("/admin/v1/accounts/abc/exports").await,
        404,
        "ACCOUNT_NOT_FOUND",
    )
    .await;
    let customer = app.signup().await;
    let res = app
        .admin_get(&format!(
            "/admin/v1/accounts/{}/exports?limit=0",
            customer.account_id
        ))
        .await;
    assert_error(res, 422, "VALIDATION_FAILED").await;
    assert!(exports_of(&app, customer.account_id).await.is_empty());
    let res = app
        .client
        .get(app.url(&format!(
            "/admin/v1/accounts/{}/exports",
            customer.account_id
        )))
        .send()
        .await
        .unwrap();
    assert_error(res, 401, "UNAUTHORIZED").await;
}
