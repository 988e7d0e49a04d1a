//! One gateway delivering: what is sent, how it is signed, and how delivery rides out a
//! receiver that fails, hangs or is down.

use std::time::Duration;

use chrono::Utc;
use tollgate::config::RoutePrice;

use super::*;
use crate::common::spawn_app_with;

#[tokio::test]
async fn the_receiver_gets_one_signed_event_for_each_threshold_an_account_crosses() {
    let receiver = Receiver::start().await;
    let app = spawn_app_with(|c| notify_to(c, &receiver)).await;
    let customer = app.signup().await;
    app.plan(&customer, 10).await;

    app.calls(&customer, DAILY, 7).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(receiver.requests().is_empty(), "nothing crossed at 70 %");
    app.calls(&customer, DAILY, 1).await;
    wait_for_delivered(&receiver, 1, Duration::from_secs(5)).await;
    app.calls(&customer, DAILY, 4).await;
    wait_for_delivered(&receiver, 2, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let delivered = receiver.delivered();
    assert_eq!(receiver.requests().len(), 2, "{:?}", summary(&receiver));
    let month_start = tollgate::month::Month::containing(Utc::now()).start();
    for (event, (threshold, used)) in delivered.iter().zip([(80, 8), (100, 10)]) {
        let body = &event.json;
        assert_eq!(
            fields(body),
            [
                "account_id",
                "allowance",
                "id",
                "month_start",
                "occurred_at",
                "threshold",
                "type",
                "used"
            ]
        );
        assert_eq!(body["type"], "usage.threshold");
        assert_eq!(body["account_id"], customer.account_id);
        assert_eq!(body["threshold"], threshold);
        assert_eq!(body["used"], used);
        assert_eq!(body["allowance"], 10);
        let month: chrono::DateTime<Utc> = body["month_start"].as_str().unwrap().parse().unwrap();
        assert_eq!(month, month_start);
        let occurred: chrono::DateTime<Utc> =
            body["occurred_at"].as_str().unwrap().parse().unwrap();
        assert!((Utc::now() - occurred).num_seconds() < 60, "{body}");
        assert!(uuid::Uuid::parse_str(body["id"].as_str().unwrap()).is_ok());
        assert_eq!(event.content_type.as_deref(), Some("application/json"));

        let signature = event.signature.as_deref().expect("Tollgate-Signature");
        assert!(
            signature_verifies(signature, &event.body, SECRET),
            "{signature}"
        );
        assert!(!signature_verifies(
            signature,
            &event.body,
            "another secret"
        ));
        let mut forged = event.body.to_vec();
        let last_digit = forged.len() - 2;
        forged[last_digit] ^= 1;
        assert!(!signature_verifies(signature, &forged, SECRET));
        assert!((Utc::now().timestamp() - signed_at(signature)).abs() < 60);
    }
    // The same account's usage object says the same.
    let usage = app.usage_of(customer.account_id).await;
    assert_eq!(usage["used"], 12);
}

#[tokio::test]
async fn a_priced_call_over_several_thresholds_gives_one_event_for_each() {
    let receiver = Receiver::start().await;
    let app = spawn_app_with(|c| {
        notify_to(c, &receiver);
        c.notify.thresholds = vec![50, 80, 100];
        c.pricing.routes = vec![RoutePrice {
            prefix: "/vedic/v1/kundli".into(),
            cost: 25,
        }];
    })
    .await;
    let customer = app.signup().await;
    app.plan(&customer, 20).await;
    app.calls(&customer, DAILY, 1).await;
    app.calls(&customer, "/vedic/v1/kundli/match", 1).await;
    wait_for_delivered(&receiver, 3, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let delivered = receiver.delivered();
    assert_eq!(delivered_pairs(&receiver), {
        let a = customer.account_id;
        vec![(a, 50), (a, 80), (a, 100)]
    });
    for event in &delivered {
        assert_eq!(event.json["used"], 26);
        assert_eq!(event.json["allowance"], 20);
        assert_eq!(event.json["occurred_at"], delivered[0].json["occurred_at"]);
    }
    assert_eq!(receiver.requests().len(), 3);
}

#[tokio::test]
async fn events_wait_while_the_receiver_is_down_and_all_arrive_once_it_is_back() {
    let mut receiver = Receiver::start().await;
    let app = spawn_app_with(|c| notify_to(c, &receiver)).await;
    receiver.down().await;
    let mut customers = Vec::new();
    for _ in 0..3 {
        let customer = app.signup().await;
        app.plan(&customer, 4).await;
        app.calls(&customer, DAILY, 4).await;
        customers.push(customer);
    }
    let recorded = eventually(Duration::from_secs(5), || async {
        outbox(&app.db.pool).await.len() == 6
    })
    .await;
    assert!(recorded, "{:?}", outbox(&app.db.pool).await);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Back, but failing: every attempt is a 500, then every attempt hangs.
    receiver.up().await;
    receiver.answer(Answer::Status(500));
    let failing = eventually(Duration::from_secs(5), || async {
        receiver.requests().len() >= 6
    })
    .await;
    assert!(failing, "{:?}", summary(&receiver));
    receiver.answer(Answer::Hang);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(receiver.delivered().is_empty());
    assert!(
        outbox(&app.db.pool)
            .await
            .iter()
            .all(|(_, _, d, f)| !d && !f)
    );

    receiver.answer(Answer::Ok);
    wait_for_delivered(&receiver, 6, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let counts = deliveries_per_id(&receiver);
    assert_eq!(counts.len(), 6, "{counts:?}");
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
    // Every try of an event carried the same id and the same body.
    for r in receiver.requests() {
        let final_body = receiver
            .delivered()
            .into_iter()
            .find(|d| d.account_id() == r.account_id() && d.threshold() == r.threshold())
            .expect("delivered in the end")
            .body;
        assert_eq!(r.body, final_body);
    }
    // Each account's first event was tried while the receiver was away.
    let attempts: i64 = sqlx::query_scalar(
        "SELECT min(attempts)::int8 FROM notification_outbox WHERE threshold = 80",
    )
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    assert!(attempts >= 2, "{attempts} attempts");
    assert!(outbox(&app.db.pool).await.iter().all(|(_, _, d, _)| *d));
}

#[tokio::test]
async fn an_account_whose_oldest_event_fails_holds_back_only_its_own_later_events() {
    let receiver = Receiver::start().await;
    let app = spawn_app_with(|c| notify_to(c, &receiver)).await;
    let (stuck, free) = (app.signup().await, app.signup().await);
    for customer in [&stuck, &free] {
        app.plan(customer, 5).await;
    }
    receiver.fail_account(stuck.account_id);
    for customer in [&stuck, &free] {
        app.calls(customer, DAILY, 4).await;
    }
    for customer in [&stuck, &free] {
        app.calls(customer, DAILY, 1).await;
    }
    wait_for_delivered(&receiver, 2, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;

    let (s, f) = (stuck.account_id, free.account_id);
    assert_eq!(delivered_pairs(&receiver), [(f, 80), (f, 100)]);
    let tried: Vec<(i64, i64)> = receiver
        .requests()
        .iter()
        .filter(|r| r.account_id() == s)
        .map(|r| (r.account_id(), r.threshold()))
        .collect();
    assert!(tried.len() >= 2, "the failing event is retried: {tried:?}");
    assert!(
        tried.iter().all(|(_, t)| *t == 80),
        "the later event waits behind the failing one: {tried:?}"
    );

    receiver.heal();
    wait_for_delivered(&receiver, 4, Duration::from_secs(5)).await;
    assert_eq!(
        delivered_pairs(&receiver),
        [(f, 80), (f, 100), (s, 80), (s, 100)]
    );
}

#[tokio::test]
async fn an_event_failing_for_a_day_is_given_up_and_the_next_one_goes_out() {
    let receiver = Receiver::start().await;
    let app = spawn_app_with(|c| notify_to(c, &receiver)).await;
    let customer = app.signup().await;
    receiver.fail_threshold(80);
    // Two events of this month recorded a day and an hour ago, as after a long outage.
    let month = tollgate::month::Month::containing(Utc::now()).start();
    for (threshold, age) in [(80i16, "25 hours"), (100, "1 hour")] {
        sqlx::query(
            "INSERT INTO notification_outbox
                 (id, account_id, month_start, threshold, used, allowance, occurred_at,
                  recorded_at, attempts)
             VALUES ($1, $2, $3, $4, $5, 3000, now() - $6::interval, now() - $6::interval, 40)",
        )
        .bind(uuid::Uuid::new_v4())
        .bind(customer.account_id)
        .bind(month)
        .bind(threshold)
        .bind(i64::from(threshold) * 30)
        .bind(age)
        .execute(&app.db.pool)
        .await
        .unwrap();
    }
    wait_for_delivered(&receiver, 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    assert_eq!(
        summary(&receiver),
        [
            (customer.account_id, 80, Some(500)),
            (customer.account_id, 100, Some(200)),
        ]
    );
    let (attempts, error): (i32, Option<String>) =
        sqlx::query_as("SELECT attempts, last_error FROM notification_outbox WHERE threshold = 80")
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    assert_eq!((attempts, error.as_deref()), (41, Some("HTTP 500")));
    assert_eq!(
        outbox(&app.db.pool).await,
        [
            (customer.account_id, 80, false, true),
            (customer.account_id, 100, true, false),
        ]
    );
}
