//! Usage reported while streaming: spent as it grows, accounted at its last figure, the
//! cut-off mid-stream, a vanishing client, a cost in the trailer.

use super::*;

const QUOTA_CUT: &str = "event: error\ndata: {\"code\":\"QUOTA_EXCEEDED\",\"message\":\"Quota exceeded for this period.\"}\n\n";
const SPEND_CUT: &str = "event: error\ndata: {\"code\":\"SPEND_CAP_REACHED\",\"message\":\"Spend cap reached for this period.\"}\n\n";

/// The headers and whole body of a streamed call.
async fn stream_text(app: &TestApp, path: &str, key: &str) -> (reqwest::header::HeaderMap, String) {
    let res = app.call(path, key).await;
    assert_eq!(res.status(), 200);
    let headers = res.headers().clone();
    (headers, res.text().await.unwrap())
}

/// The upstream's record of the stream at `path`, once it has ended.
async fn outcome(app: &TestApp, path: &str) -> tollgate_testkit::upstream::StreamOutcome {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(o) = app
            .upstream
            .streams()
            .into_iter()
            .find(|o| path.starts_with(&o.path))
        {
            return o;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the stream at {path} never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_stream_passes_unchanged_and_is_accounted_at_its_last_usage_figure() {
    let app = streaming_app().await;
    let customer = app.signup().await;
    let path = "/vedic/v1/stream/2,5,9?pace_ms=5";
    let (_, body) = stream_text(&app, path, &customer.api_key).await;
    for units in [2, 5, 9] {
        assert!(
            body.contains(&format!("event: usage\ndata: {{\"units\": {units}}}\n\n")),
            "{body}"
        );
    }
    assert!(body.ends_with("event: done\ndata: {}\n\n"), "{body}");
    assert!(!body.contains("event: error"));
    let usage = used(&app, customer.account_id, 9).await;
    assert_eq!(usage["remaining"], 3000 - 9);
    app.wait_for_ledger(customer.account_id, 1).await;
    assert!(outcome(&app, path).await.completed);
}

#[tokio::test]
async fn units_are_spent_as_the_stream_reports_them_not_at_its_end() {
    let app = streaming_app().await;
    let customer = customer_on(
        &app,
        json!({"plan": "minutes", "monthly_allowance": 100000, "minute_allowance": 100}),
    )
    .await;
    early_in_a_minute(15).await;
    let mut res = app
        .call("/vedic/v1/stream/10,20,30?pace_ms=1500", &customer.api_key)
        .await;
    assert_eq!(res.status(), 200);
    let mut seen = String::new();
    while !seen.contains("{\"units\": 20}") {
        let chunk = res.chunk().await.unwrap().expect("stream goes on");
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    // Mid-stream: 20 units of the minute are spent, and this call takes one more.
    let probe = app.call(DAILY, &customer.api_key).await;
    assert_eq!(probe.status(), 200);
    let (remaining, _) = item(&header(&probe, "ratelimit"), "minute").unwrap();
    assert_eq!(remaining, 100 - 21);
    let (allowance, window) = item(&header(&probe, "ratelimit-policy"), "minute").unwrap();
    assert_eq!((allowance, window), (100, 60));
    while res.chunk().await.unwrap().is_some() {}
    used(&app, customer.account_id, 31).await;
}

#[tokio::test]
async fn a_hard_plans_stream_is_cut_off_when_it_passes_the_month() {
    let app = streaming_app().await;
    let customer = customer_on(
        &app,
        json!({"plan": "metered", "monthly_allowance": 10, "enforcement": "hard"}),
    )
    .await;
    let path = "/vedic/v1/stream/4,8,12,16,20,24?pace_ms=100";
    let (_, body) = stream_text(&app, path, &customer.api_key).await;
    // Forwarded up to the usage event that crossed the month, then the error event
    // and the end.
    assert!(body.contains("{\"units\": 12}"), "{body}");
    assert!(!body.contains("{\"units\": 16}"), "{body}");
    assert!(body.ends_with(QUOTA_CUT), "{body}");
    assert!(!body.contains("event: done"));
    // Accounted with the units reported up to the cut: over by one event's growth.
    let usage = used(&app, customer.account_id, 12).await;
    assert_eq!(usage["exhausted"], true);
    // The upstream saw its connection closed before it could finish.
    let upstream = outcome(&app, path).await;
    assert!(!upstream.completed, "{upstream:?}");
    assert!(upstream.usage_events_sent < 6, "{upstream:?}");
    // Nothing left: the next call is refused before the upstream.
    let res = app.call(DAILY, &customer.api_key).await;
    assert_error(res, 429, "QUOTA_EXCEEDED").await;
    assert_eq!(app.upstream.recorded().len(), 1);
}

#[tokio::test]
async fn a_spend_cap_cuts_a_stream_off_with_its_own_code() {
    let app = streaming_app().await;
    let customer = customer_on(
        &app,
        json!({"plan": "metered", "monthly_allowance": 100000, "unit_price_micros": 1000,
               "spend_cap_day_micros": 5000}),
    )
    .await;
    let (_, body) = stream_text(
        &app,
        "/vedic/v1/stream/2,4,6,8?pace_ms=20",
        &customer.api_key,
    )
    .await;
    assert!(body.contains("{\"units\": 6}"), "{body}");
    assert!(body.ends_with(SPEND_CUT), "{body}");
    assert_eq!(spent(&app, customer.account_id, 6).await, (6000, 6000));
    let res = app.call(DAILY, &customer.api_key).await;
    assert_eq!(res.status(), 429);
    let retry: i64 = header(&res, "retry-after").parse().unwrap();
    let to_day_end = (Day::containing(Utc::now()).end() - Utc::now()).num_seconds();
    assert!(
        (to_day_end..=to_day_end + 2).contains(&retry),
        "{retry} vs {to_day_end}"
    );
    assert_error(res, 429, "SPEND_CAP_REACHED").await;
}

#[tokio::test]
async fn a_minute_window_cuts_a_stream_off_whatever_the_enforcement() {
    let app = streaming_app().await;
    let customer = customer_on(
        &app,
        json!({"plan": "minutes", "monthly_allowance": 100000, "minute_allowance": 5}),
    )
    .await;
    early_in_a_minute(20).await;
    let (_, body) = stream_text(
        &app,
        "/vedic/v1/stream/2,4,6,8?pace_ms=20",
        &customer.api_key,
    )
    .await;
    assert!(body.contains("{\"units\": 6}"), "{body}");
    assert!(body.ends_with(QUOTA_CUT), "{body}");
    used(&app, customer.account_id, 6).await;
    let res = app.call(DAILY, &customer.api_key).await;
    let (remaining, reset) = item(&header(&res, "ratelimit"), "minute").unwrap();
    assert_eq!(remaining, 0);
    let retry: i64 = header(&res, "retry-after").parse().unwrap();
    assert_eq!(retry, reset);
    assert!((1..=60).contains(&retry), "{retry}");
    assert_error(res, 429, "QUOTA_EXCEEDED").await;
}

#[tokio::test]
async fn a_client_that_vanishes_mid_stream_is_accounted_with_what_was_reported() {
    let app = streaming_app().await;
    let customer = app.signup().await;
    let path = "/vedic/v1/stream/1,2,3,4,5,6,7,8,9,10?pace_ms=200";
    let mut res = app.call(path, &customer.api_key).await;
    let mut seen = String::new();
    while !seen.contains("{\"units\": 2}") {
        let chunk = res.chunk().await.unwrap().expect("stream goes on");
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    drop(res);
    let upstream = outcome(&app, path).await;
    assert!(!upstream.completed, "the upstream stopped: {upstream:?}");
    app.wait_for_ledger(customer.account_id, 1).await;
    let usage = app.usage_of(customer.account_id).await;
    let used = usage["used"].as_i64().unwrap();
    assert!((2..10).contains(&used), "{usage}");
    assert!(used <= upstream.usage_events_sent as i64);
}

#[tokio::test]
async fn a_chunked_answer_may_report_its_cost_in_the_trailer() {
    let app = streaming_app().await;
    let customer = app.signup().await;
    let res = app.call("/vedic/v1/trailer/7", &customer.api_key).await;
    assert_eq!(res.status(), 200);
    assert!(res.headers().get("x-call-cost").is_none());
    assert_eq!(res.text().await.unwrap(), "part one, part two");
    used(&app, customer.account_id, 7).await;
    // The upstream was asked for trailers.
    let asked = &app.upstream.recorded()[0].headers;
    assert_eq!(asked.get("te").unwrap(), "trailers");
}

#[tokio::test]
async fn without_stream_usage_a_stream_costs_its_route_price() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let (_, body) = stream_text(&app, "/vedic/v1/stream/3,6?pace_ms=5", &customer.api_key).await;
    assert!(body.contains("{\"units\": 6}") && body.ends_with("event: done\ndata: {}\n\n"));
    used(&app, customer.account_id, 1).await;
}

#[tokio::test]
async fn two_replicas_streaming_a_hard_plan_overrun_it_by_at_most_one_event_each() {
    const ALLOWANCE: i64 = 20;
    let first = streaming_app().await;
    let customer = customer_on(
        &first,
        json!({"plan": "hard", "monthly_allowance": ALLOWANCE, "enforcement": "hard"}),
    )
    .await;
    let mut config = test_config(&first.db, &first.upstream);
    config.pricing.stream_usage = true;
    let second = spawn_replica(first.db.clone(), first.upstream.clone(), config).await;
    let path = "/vedic/v1/stream/2,4,6,8,10,12,14,16,18,20?pace_ms=30";
    let (a, b) = tokio::join!(
        stream_text(&first, path, &customer.api_key),
        stream_text(&second, path, &customer.api_key)
    );
    let last = |body: &str| {
        body.match_indices("{\"units\": ")
            .filter_map(|(i, _)| body[i + 10..].split('}').next()?.parse::<i64>().ok())
            .max()
            .unwrap_or(0)
    };
    let (units_a, units_b) = (last(&a.1), last(&b.1));
    println!("two streams on a hard plan of {ALLOWANCE}: {units_a} + {units_b} units");
    assert!(a.1.ends_with(QUOTA_CUT) || b.1.ends_with(QUOTA_CUT));
    // Each stream may pass the allowance by one event's growth (2 units).
    assert!(
        units_a + units_b <= ALLOWANCE + 2 * 2,
        "{units_a} + {units_b}"
    );
    assert!(
        units_a + units_b > ALLOWANCE,
        "the allowance was not used up"
    );
    used(&first, customer.account_id, units_a + units_b).await;
}
