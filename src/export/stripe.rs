//! Stripe's Billing Meter Events API (`POST /v1/billing/meter_events`) and nothing else:
//! one meter event per call, and what Stripe's answer means for it.
//!
//! The body is form-encoded (`event_name`, `timestamp`, `identifier`,
//! `payload[stripe_customer_id]`, `payload[value]`), authenticated with the secret key
//! as a bearer token. Stripe keeps an `identifier` unique for at least 24 hours and
//! answers a second event with the same one with a 400 ("An event already exists with
//! identifier …"): since an identifier names one window and is sent only for it, that
//! answer means the window was already recorded, and counts as accepted. Errors come as
//! `{"error": {"type", "code", "message"}}`; the message is kept (it is safe to show),
//! the key never is.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// Most bytes of an answer read (Stripe's answers are a few hundred).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// What one window's event carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterEvent<'a> {
    pub identifier: &'a str,
    pub customer: &'a str,
    pub value: i64,
    /// Unix seconds: the window's end.
    pub timestamp: i64,
}

/// What Stripe's answer means for the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 200, or the identifier already recorded: the units are in Stripe.
    Accepted,
    /// 429, 5xx, a timeout or no connection: try again later with the same identifier.
    Retry(String),
    /// Any other 4xx: Stripe's message; the event was not recorded.
    Refused(String),
}

/// The meter events client.
#[derive(Debug, Clone)]
pub struct MeterClient {
    http: reqwest::Client,
    url: String,
    api_key: SecretString,
    event_name: String,
}

#[derive(Debug, Deserialize)]
struct Envelope {
    error: StripeError,
}

#[derive(Debug, Deserialize)]
struct StripeError {
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Option<String>,
}

impl MeterClient {
    pub fn new(
        api_base: &str,
        api_key: SecretString,
        event_name: String,
        timeout: Duration,
    ) -> Self {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .expect("the HTTP client builds");
        Self {
            http,
            url: format!("{}/v1/billing/meter_events", api_base.trim_end_matches('/')),
            api_key,
            event_name,
        }
    }

    /// Sends one meter event.
    pub async fn send(&self, event: &MeterEvent<'_>) -> Answer {
        let timestamp = event.timestamp.to_string();
        let value = event.value.to_string();
        let form = [
            ("event_name", self.event_name.as_str()),
            ("timestamp", timestamp.as_str()),
            ("identifier", event.identifier),
            ("payload[stripe_customer_id]", event.customer),
            ("payload[value]", value.as_str()),
        ];
        let sent = self
            .http
            .post(&self.url)
            .bearer_auth(self.api_key.expose_secret())
            .form(&form)
            .send()
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(e) if e.is_timeout() => return Answer::Retry("timed out".into()),
            Err(e) => return Answer::Retry(format!("unreachable: {}", without_url(&e))),
        };
        let status = response.status().as_u16();
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = MAX_ANSWER_BYTES.saturating_sub(body.len());
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if room <= chunk.len() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) if e.is_timeout() => return Answer::Retry("timed out".into()),
                Err(e) => return Answer::Retry(format!("answer cut: {}", without_url(&e))),
            }
        }
        judge(status, &body)
    }
}

/// What an answer of `status` with `body` means (pure).
pub fn judge(status: u16, body: &[u8]) -> Answer {
    let error = serde_json::from_slice::<Envelope>(body)
        .ok()
        .map(|e| e.error);
    let message = || {
        error
            .as_ref()
            .and_then(|e| e.message.clone())
            .unwrap_or_else(|| format!("HTTP {status}"))
    };
    match status {
        200..=299 => Answer::Accepted,
        429 | 500..=599 => Answer::Retry(format!("HTTP {status}: {}", message())),
        400..=499 => {
            let duplicate = error.as_ref().is_some_and(|e| {
                e.code.as_deref() == Some("resource_already_exists")
                    || e.message
                        .as_deref()
                        .is_some_and(|m| m.contains("already exists with identifier"))
            });
            if duplicate {
                Answer::Accepted
            } else {
                Answer::Refused(message())
            }
        }
        _ => Answer::Retry(format!("HTTP {status}")),
    }
}

/// A transport error's text without the URL (it holds nothing secret, but is noise).
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "stripe");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(kind: &str, code: &str, message: &str) -> Vec<u8> {
        serde_json::json!({"error": {"type": kind, "code": code, "message": message}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn a_200_is_accepted() {
        assert_eq!(
            judge(200, b"{\"object\":\"billing.meter_event\"}"),
            Answer::Accepted
        );
    }

    #[test]
    fn rate_limits_and_server_errors_are_retried() {
        for status in [429, 500, 502, 503] {
            assert!(matches!(judge(status, b""), Answer::Retry(_)), "{status}");
        }
    }

    #[test]
    fn other_client_errors_are_refused_with_stripes_message() {
        let body = error(
            "invalid_request_error",
            "resource_missing",
            "No such customer: 'cus_x'",
        );
        assert_eq!(
            judge(400, &body),
            Answer::Refused("No such customer: 'cus_x'".into())
        );
        assert_eq!(judge(401, b"not json"), Answer::Refused("HTTP 401".into()));
    }

    #[test]
    fn an_identifier_already_recorded_counts_as_accepted() {
        let body = serde_json::json!({"error": {"type": "invalid_request_error",
            "message": "An event already exists with identifier tollgate:1:abc."}})
        .to_string();
        assert_eq!(judge(400, body.as_bytes()), Answer::Accepted);
    }
}
