use serde_json::{Value, json};

use super::api::{decode_cursor, encode_cursor};
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
    let (status, body) = send(http.put(&url).query(&[("expiration_ttl", 60)]).body("v")).await?;
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
