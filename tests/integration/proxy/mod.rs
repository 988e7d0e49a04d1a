//! The metering proxy as a customer and the upstream see it.

mod errors;
mod forwarding;
mod paths;
mod tls_and_shutdown;

/// Asserts the gateway's own request id (a lowercase hyphenated UUID v4) and returns it.
fn assert_request_id(res: &reqwest::Response) -> String {
    let id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
    let parsed = uuid::Uuid::parse_str(&id).unwrap();
    assert_eq!(parsed.get_version_num(), 4);
    assert_eq!(id, parsed.hyphenated().to_string(), "lowercase hyphenated");
    id
}
