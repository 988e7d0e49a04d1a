//! The KV client against `FakeKv`, the local server that follows Cloudflare's REST contract:
//! what a caller sees for each answer, and which calls never reach the network.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use secrecy::SecretString;

use crate::cloudflare::{BulkWrite, CallBudget, KeyInfo, KvClient, KvError, KvSettings};
use tollgate_testkit::fake_kv::{FakeKv, Fault, RecordedCall};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const MARKER: &str = "usage-exhausted:42:1764547200";

fn settings_for(fake: &FakeKv) -> KvSettings {
    KvSettings {
        api_base: fake.api_base(),
        account_id: FakeKv::ACCOUNT_ID.to_owned(),
        namespace_id: FakeKv::NAMESPACE_ID.to_owned(),
        api_token: SecretString::from(FakeKv::API_TOKEN),
        call_timeout: Duration::from_secs(5),
        budget: CallBudget::default(),
        shared_budget: None,
    }
}

fn client(settings: KvSettings) -> Result<KvClient, reqwest::Error> {
    let http = reqwest::Client::builder().no_proxy().build()?;
    Ok(KvClient::new(settings, http))
}

fn client_for(fake: &FakeKv) -> Result<KvClient, reqwest::Error> {
    client(settings_for(fake))
}

fn unix_now() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_secs()).unwrap_or(i64::MAX)
}

fn api_code(error: &KvError) -> Option<(u16, Option<u32>)> {
    match error {
        KvError::Api { status, code, .. } => Some((*status, *code)),
        _ => None,
    }
}

fn call(method: &str, path: &str, query: Option<&str>) -> RecordedCall {
    RecordedCall {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.map(str::to_owned),
    }
}

#[tokio::test]
async fn reading_an_absent_key_gives_none() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    assert_eq!(kv.get(MARKER).await?, None);
    Ok(())
}

#[tokio::test]
async fn a_written_value_reads_back_byte_for_byte() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    let value = b"\x00\xffnot utf-8";
    kv.put(MARKER, value, None).await?;
    assert_eq!(kv.get(MARKER).await?, Some(Bytes::from_static(value)));
    Ok(())
}

#[tokio::test]
async fn a_write_with_an_expiration_stores_and_lists_that_expiration() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    let at = unix_now() + 3_600;
    kv.put(MARKER, b"1", Some(at)).await?;
    assert_eq!(fake.value(MARKER), Some(("1".to_owned(), Some(at))));
    let page = kv.list_page("usage-exhausted:", None, 1_000).await?;
    let expected = KeyInfo {
        name: MARKER.to_owned(),
        expiration: Some(at),
    };
    assert_eq!(page.keys, vec![expected]);
    let put = &fake.calls()[0];
    assert_eq!(
        put.query.as_deref(),
        Some(format!("expiration={at}").as_str())
    );
    Ok(())
}

#[tokio::test]
async fn an_expiration_under_sixty_seconds_away_is_refused_with_code_10033() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    for too_soon in [unix_now() - 10, unix_now() + 30] {
        let error = kv.put(MARKER, b"1", Some(too_soon)).await.err();
        assert_eq!(error.as_ref().and_then(api_code), Some((400, Some(10033))));
    }
    assert_eq!(fake.value(MARKER), None);
    kv.put(MARKER, b"1", Some(unix_now() + 120)).await?;
    assert!(fake.value(MARKER).is_some());
    Ok(())
}

#[tokio::test]
async fn a_deleted_key_reads_as_absent_and_deleting_it_again_succeeds() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    fake.insert(MARKER, "1", None);
    kv.delete(MARKER).await?;
    assert_eq!(kv.get(MARKER).await?, None);
    kv.delete(MARKER).await?;
    assert!(fake.keys().is_empty());
    Ok(())
}

#[tokio::test]
async fn listing_all_keys_follows_the_cursor_across_pages_of_a_thousand() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    let expected: Vec<String> = (0..2_345)
        .map(|account| format!("usage-exhausted:{account:05}:1764547200"))
        .collect();
    for key in &expected {
        fake.insert(key, "1", None);
    }
    fake.insert("other:1", "1", None);

    let listed = kv.list_all("usage-exhausted:").await?;

    let names: Vec<String> = listed.into_iter().map(|key| key.name).collect();
    assert_eq!(names, expected);
    let calls = fake.calls();
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|c| c.method == "GET" && c.path == "/keys"));
    let queries: Vec<&str> = calls.iter().filter_map(|c| c.query.as_deref()).collect();
    assert_eq!(queries[0], "limit=1000&prefix=usage-exhausted%3A");
    assert!(queries[1].contains("&cursor=") && queries[2].contains("&cursor="));
    assert_ne!(queries[1], queries[2]);
    Ok(())
}

#[tokio::test]
async fn a_page_holds_only_prefixed_keys_and_the_last_page_has_no_cursor() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    for n in 0..15 {
        fake.insert(&format!("a:{n:02}"), "1", None);
    }
    fake.insert("b:00", "1", None);
    fake.insert("Z", "1", None);

    // A limit below Cloudflare's minimum of 10 is raised to it.
    let first = kv.list_page("a:", None, 3).await?;
    assert_eq!(first.keys.len(), 10);
    assert!(first.keys.iter().all(|key| key.name.starts_with("a:")));
    let second = kv.list_page("a:", first.cursor.as_deref(), 10).await?;
    let names: Vec<&str> = second.keys.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["a:10", "a:11", "a:12", "a:13", "a:14"]);
    assert_eq!(second.cursor, None);
    assert_eq!(
        fake.calls()[0].query.as_deref(),
        Some("limit=10&prefix=a%3A")
    );
    Ok(())
}

#[tokio::test]
async fn keys_with_colons_slashes_and_reserved_characters_round_trip() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    let keys = [MARKER, "a/b/c", "sp ace?&=#%+", "ünïcode"];
    for key in keys {
        kv.put(key, key.as_bytes(), None).await?;
        assert_eq!(
            kv.get(key).await?,
            Some(Bytes::from(key.as_bytes().to_vec()))
        );
    }
    let mut sorted = keys.map(str::to_owned).to_vec();
    sorted.sort();
    assert_eq!(fake.keys(), sorted);
    let expected_path = format!("/values/{MARKER}");
    assert_eq!(fake.calls()[0], call("PUT", &expected_path, None));
    Ok(())
}

#[tokio::test]
async fn a_server_error_is_an_api_error_with_its_status_and_code() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    fake.set_fault(Fault::ServerError);
    let error = kv.get(MARKER).await.err();
    assert_eq!(error.as_ref().and_then(api_code), Some((500, Some(10001))));
    let error = kv.put(MARKER, b"1", None).await.err();
    assert_eq!(error.as_ref().and_then(api_code), Some((500, Some(10001))));
    Ok(())
}

#[tokio::test]
async fn an_error_body_that_is_not_json_is_still_an_api_error_with_the_status() -> TestResult {
    let app = axum::Router::new().fallback(|| async {
        (
            axum::http::StatusCode::BAD_GATEWAY,
            "<html>bad gateway</html>",
        )
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let mut settings = KvSettings::new("acct", "ns", SecretString::from("token"));
    settings.api_base = format!("http://{addr}/client/v4/");
    let kv = client(settings)?;

    let error = kv.get(MARKER).await.err();

    server.abort();
    assert_eq!(error.as_ref().and_then(api_code), Some((502, None)));
    Ok(())
}

#[tokio::test]
async fn a_429_is_rate_limited_and_later_calls_back_off_without_a_request() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    fake.set_fault(Fault::RateLimited {
        retry_after_secs: Some(120),
    });
    let error = kv.get(MARKER).await.err();
    assert!(matches!(
        error,
        Some(KvError::RateLimited { retry_after: Some(wait) }) if wait == Duration::from_secs(120)
    ));

    fake.set_fault(Fault::None);
    fake.clear_calls();
    assert!(matches!(kv.get(MARKER).await, Err(KvError::BackingOff)));
    assert!(matches!(
        kv.put(MARKER, b"1", None).await,
        Err(KvError::BackingOff)
    ));
    assert!(matches!(kv.list_all("").await, Err(KvError::BackingOff)));
    assert!(matches!(
        kv.clone().delete(MARKER).await,
        Err(KvError::BackingOff)
    ));
    assert_eq!(fake.calls(), Vec::new());
    Ok(())
}

#[tokio::test]
async fn a_429_without_retry_after_still_backs_off() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    fake.set_fault(Fault::RateLimited {
        retry_after_secs: None,
    });
    let error = kv.get(MARKER).await.err();
    assert!(matches!(
        error,
        Some(KvError::RateLimited { retry_after: None })
    ));
    fake.set_fault(Fault::None);
    assert!(matches!(kv.get(MARKER).await, Err(KvError::BackingOff)));
    assert_eq!(fake.calls().len(), 1);
    Ok(())
}

#[tokio::test]
async fn calls_go_out_again_once_the_back_off_has_passed() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    fake.set_fault(Fault::RateLimited {
        retry_after_secs: Some(0),
    });
    assert!(matches!(
        kv.get(MARKER).await,
        Err(KvError::RateLimited { .. })
    ));
    fake.set_fault(Fault::None);
    assert_eq!(kv.get(MARKER).await?, None);
    assert_eq!(fake.calls().len(), 2);
    Ok(())
}

#[tokio::test]
async fn an_answer_slower_than_the_call_timeout_is_a_timeout() -> TestResult {
    let fake = FakeKv::start().await;
    let mut settings = settings_for(&fake);
    settings.call_timeout = Duration::from_millis(200);
    let kv = client(settings)?;
    fake.set_fault(Fault::Delay(Duration::from_secs(3)));

    let started = Instant::now();
    let outcome = kv.get(MARKER).await;

    assert!(matches!(outcome, Err(KvError::Timeout)));
    assert!(started.elapsed() < Duration::from_secs(2));
    Ok(())
}

#[tokio::test]
async fn a_delay_within_the_call_timeout_is_answered_normally() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    fake.insert(MARKER, "1", None);
    fake.set_fault(Fault::Delay(Duration::from_millis(50)));
    assert_eq!(kv.get(MARKER).await?, Some(Bytes::from_static(b"1")));
    Ok(())
}

#[tokio::test]
async fn an_exhausted_budget_refuses_calls_without_a_request() -> TestResult {
    let fake = FakeKv::start().await;
    let mut settings = settings_for(&fake);
    settings.budget = CallBudget::new(2, Duration::from_secs(300));
    let kv = client(settings)?;
    let other_handle = kv.clone();

    assert_eq!(kv.get(MARKER).await?, None);
    other_handle.put(MARKER, b"1", None).await?;
    assert!(matches!(
        kv.get(MARKER).await,
        Err(KvError::BudgetExhausted)
    ));
    assert!(matches!(
        other_handle.list_all("").await,
        Err(KvError::BudgetExhausted)
    ));
    assert_eq!(fake.calls().len(), 2);
    Ok(())
}

/// A shared budget that grants a fixed number of permits, as other processes would leave.
#[derive(Debug)]
struct FleetLeaves(std::sync::atomic::AtomicU32);

#[async_trait::async_trait]
impl crate::cloudflare::SharedBudget for FleetLeaves {
    async fn try_acquire_leaving(&self, _reserve: u32) -> bool {
        use std::sync::atomic::Ordering;
        self.0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

#[tokio::test]
async fn a_call_the_shared_budget_refuses_is_not_sent_and_costs_no_local_permit() -> TestResult {
    let fake = FakeKv::start().await;
    let mut settings = settings_for(&fake);
    settings.budget = CallBudget::new(2, Duration::from_secs(300));
    let fleet = std::sync::Arc::new(FleetLeaves(std::sync::atomic::AtomicU32::new(1)));
    settings.shared_budget = Some(fleet.clone());
    let kv = client(settings)?;

    assert_eq!(kv.get(MARKER).await?, None);
    for _ in 0..5 {
        assert!(matches!(
            kv.get(MARKER).await,
            Err(KvError::BudgetExhausted)
        ));
    }
    assert_eq!(fake.calls().len(), 1);
    // The refused attempts gave their local permits back: the fleet decides again.
    fleet.0.store(1, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(kv.get(MARKER).await?, None);
    assert_eq!(fake.calls().len(), 2);
    Ok(())
}

#[tokio::test]
async fn bulk_write_and_bulk_delete_apply_every_item() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    let at = unix_now() + 3_600;
    let items: Vec<BulkWrite> = ["k:1", "k:2", "k/3"]
        .into_iter()
        .map(|key| BulkWrite {
            key: key.to_owned(),
            value: format!("v-{key}"),
            expiration: (key == "k:2").then_some(at),
        })
        .collect();

    kv.bulk_put(&items).await?;
    assert_eq!(fake.keys(), ["k/3", "k:1", "k:2"]);
    assert_eq!(fake.value("k:2"), Some(("v-k:2".to_owned(), Some(at))));

    kv.bulk_delete(&["k:1".to_owned(), "k/3".to_owned(), "never".to_owned()])
        .await?;
    assert_eq!(fake.keys(), ["k:2"]);
    assert_eq!(
        fake.calls(),
        [
            call("PUT", "/bulk", None),
            call("POST", "/bulk/delete", None)
        ]
    );

    kv.bulk_put(&[]).await?;
    kv.bulk_delete(&[]).await?;
    assert_eq!(fake.calls().len(), 2);
    Ok(())
}

#[tokio::test]
async fn a_bulk_write_with_one_bad_expiration_writes_nothing() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    let items = [
        BulkWrite {
            key: "good".to_owned(),
            value: "1".to_owned(),
            expiration: None,
        },
        BulkWrite {
            key: "bad".to_owned(),
            value: "1".to_owned(),
            expiration: Some(unix_now() + 5),
        },
    ];
    let error = kv.bulk_put(&items).await.err();
    assert_eq!(error.as_ref().and_then(api_code), Some((400, Some(10033))));
    assert!(fake.keys().is_empty());
    Ok(())
}

#[tokio::test]
async fn a_wrong_token_is_an_authentication_error() -> TestResult {
    let fake = FakeKv::start().await;
    let mut settings = settings_for(&fake);
    settings.api_token = SecretString::from("wrong-token");
    let kv = client(settings)?;
    let error = kv.get(MARKER).await.err();
    assert_eq!(error.as_ref().and_then(api_code), Some((403, Some(10000))));
    Ok(())
}

#[tokio::test]
async fn a_wrong_namespace_is_an_error_and_not_an_absent_key() -> TestResult {
    let fake = FakeKv::start().await;
    let mut settings = settings_for(&fake);
    settings.namespace_id = "other-namespace".to_owned();
    let kv = client(settings)?;
    let error = kv.get(MARKER).await.err();
    assert_eq!(error.as_ref().and_then(api_code), Some((404, Some(10013))));
    Ok(())
}

#[tokio::test]
async fn dot_segment_keys_are_refused_without_a_request() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    assert!(matches!(kv.delete("..").await, Err(KvError::InvalidKey(_))));
    assert!(matches!(kv.get(".").await, Err(KvError::InvalidKey(_))));
    assert!(matches!(
        kv.put("", b"1", None).await,
        Err(KvError::InvalidKey(_))
    ));
    assert!(fake.calls().is_empty());
    Ok(())
}

#[tokio::test]
async fn expired_keys_are_neither_read_nor_listed() -> TestResult {
    let fake = FakeKv::start().await;
    let kv = client_for(&fake)?;
    fake.insert(MARKER, "1", Some(unix_now() - 1));
    assert_eq!(kv.get(MARKER).await?, None);
    assert!(kv.list_all("").await?.is_empty());
    Ok(())
}

#[test]
fn debug_output_of_settings_and_client_never_shows_the_token() -> TestResult {
    let settings = KvSettings::new("acct", "ns", SecretString::from("super-secret-token"));
    let printed = format!("{settings:?}");
    assert!(!printed.contains("super-secret-token"));
    assert!(printed.contains("acct"));
    let kv = client(settings)?;
    assert!(!format!("{kv:?}").contains("super-secret-token"));
    Ok(())
}
