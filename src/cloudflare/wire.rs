//! How the Cloudflare v4 REST API looks on the wire: the JSON envelope, key encoding in
//! the path, and the `Retry-After` header.
//!
//! Every JSON answer is `{"success", "errors": [{"code", "message"}], "messages", "result"}`,
//! plus `result_info` on lists. Reading a value is the exception: on success its body is
//! the raw value, and only errors come as an envelope.

use std::time::Duration;

use chrono::{DateTime, Utc};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::StatusCode;
use serde::Deserialize;

use super::error::KvError;

/// Cloudflare's error code for "key not found" on a read.
pub(crate) const KEY_NOT_FOUND: u32 = 10009;

/// Longest key Cloudflare accepts, in UTF-8 bytes.
const MAX_KEY_BYTES: usize = 512;

/// Everything but RFC 3986 unreserved characters is percent-encoded; the marker keys
/// contain ':' and other keys may contain '/'.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The response envelope; `result` is decoded by the caller as the endpoint defines it.
#[derive(Debug, Deserialize)]
pub(crate) struct Envelope<T> {
    #[serde(default)]
    pub success: bool,
    #[serde(default)]
    pub errors: Vec<ApiMessage>,
    pub result: Option<T>,
    pub result_info: Option<ResultInfo>,
}

/// One entry of `errors` or `messages`.
#[derive(Debug, Deserialize)]
pub(crate) struct ApiMessage {
    pub code: Option<u32>,
    #[serde(default)]
    pub message: String,
}

/// `result_info` of a key listing; an empty or missing cursor means the last page.
#[derive(Debug, Deserialize)]
pub(crate) struct ResultInfo {
    pub cursor: Option<String>,
}

/// `result` of the bulk endpoints.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct BulkResult {
    #[serde(default)]
    pub unsuccessful_keys: Vec<String>,
}

/// Percent-encodes `text` for use as one path segment.
pub(crate) fn encode_segment(text: &str) -> String {
    utf8_percent_encode(text, PATH_SEGMENT).to_string()
}

/// Refuses keys that cannot be addressed in a URL path: URL parsers resolve `.` and `..`
/// segments (encoded or not), which would point the request at another resource.
pub(crate) fn check_key(key: &str) -> Result<(), KvError> {
    let problem = match key {
        "" => "the key is empty",
        "." | ".." => "the key is a dot segment",
        _ if key.len() > MAX_KEY_BYTES => "the key is longer than 512 bytes",
        _ => return Ok(()),
    };
    Err(KvError::InvalidKey(problem.to_owned()))
}

/// Builds the `Api` error for a non-2xx answer, from the envelope's first error when the
/// body is one, else from the status and the start of the body.
pub(crate) fn api_error(status: StatusCode, body: &[u8]) -> KvError {
    let first = serde_json::from_slice::<Envelope<serde_json::Value>>(body)
        .ok()
        .and_then(|envelope| envelope.errors.into_iter().next());
    let (code, message) = match first {
        Some(error) => (error.code, error.message),
        None => (None, describe_body(status, body)),
    };
    KvError::Api {
        status: status.as_u16(),
        code,
        message,
    }
}

/// Decodes a 2xx JSON envelope, turning `success: false` into an `Api` error.
pub(crate) fn decode_envelope<T: serde::de::DeserializeOwned>(
    status: StatusCode,
    body: &[u8],
) -> Result<Envelope<T>, KvError> {
    let envelope: Envelope<T> = serde_json::from_slice(body)
        .map_err(|error| KvError::UnexpectedResponse(format!("not a JSON envelope: {error}")))?;
    if envelope.success {
        Ok(envelope)
    } else {
        Err(api_error(status, body))
    }
}

/// Reads `Retry-After` as delay-seconds or as an HTTP-date relative to `now`.
pub(crate) fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = DateTime::parse_from_rfc2822(value).ok()?;
    let wait = at.with_timezone(&Utc) - now;
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

fn describe_body(status: StatusCode, body: &[u8]) -> String {
    const MAX_CHARS: usize = 200;
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return status.canonical_reason().unwrap_or("no body").to_owned();
    }
    text.chars().take(MAX_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_keys_have_their_colons_encoded() {
        assert_eq!(
            encode_segment("usage-exhausted:42:1764547200"),
            "usage-exhausted%3A42%3A1764547200"
        );
    }

    #[test]
    fn slashes_spaces_and_unicode_are_encoded_but_unreserved_characters_are_not() {
        assert_eq!(encode_segment("a/b c"), "a%2Fb%20c");
        assert_eq!(encode_segment("é%?#"), "%C3%A9%25%3F%23");
        assert_eq!(encode_segment("Az09-_.~"), "Az09-_.~");
    }

    #[test]
    fn keys_that_a_url_path_cannot_carry_are_refused() {
        for key in ["", ".", ".."] {
            assert!(
                matches!(check_key(key), Err(KvError::InvalidKey(_))),
                "{key:?}"
            );
        }
        assert!(check_key(&"k".repeat(513)).is_err());
        assert!(check_key(&"k".repeat(512)).is_ok());
        assert!(check_key("...").is_ok());
    }

    #[test]
    fn an_error_envelope_gives_its_first_code_and_message() {
        let body = br#"{"success":false,"errors":[{"code":10009,"message":"get: 'key not found'"},{"code":1,"message":"x"}],"messages":[],"result":null}"#;
        let KvError::Api {
            status,
            code,
            message,
        } = api_error(StatusCode::NOT_FOUND, body)
        else {
            panic!("expected an Api error");
        };
        assert_eq!((status, code), (404, Some(KEY_NOT_FOUND)));
        assert_eq!(message, "get: 'key not found'");
    }

    #[test]
    fn a_body_that_is_not_an_envelope_still_gives_the_status() {
        let error = api_error(StatusCode::BAD_GATEWAY, b"<html>bad gateway</html>");
        assert!(matches!(
            error,
            KvError::Api { status: 502, code: None, ref message } if message == "<html>bad gateway</html>"
        ));
        let error = api_error(StatusCode::SERVICE_UNAVAILABLE, b"");
        assert!(matches!(
            error,
            KvError::Api { status: 503, code: None, ref message } if message == "Service Unavailable"
        ));
    }

    #[test]
    fn retry_after_is_read_as_seconds_or_as_an_http_date() {
        let now = DateTime::parse_from_rfc3339("2015-10-21T07:27:00Z")
            .map(|t| t.with_timezone(&Utc))
            .expect("valid test time");
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
