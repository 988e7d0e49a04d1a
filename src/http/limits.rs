//! Bounds of the public API's requests: the router applies them to the account and admin
//! APIs, and the OpenAPI document declares them; every public request's head is held to
//! [`MAX_HEADERS`] and [`MAX_HEADER_BYTES`].

use axum::http::HeaderMap;

/// Largest JSON body the account and admin APIs read.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// Most header fields a request may carry; more is `431` with the JSON error body. The
/// HTTP/1 parser takes up to `server::PARSER_MAX_HEADERS`, well past it, so a head between
/// the two gets this JSON answer rather than the parser's bare one.
pub const MAX_HEADERS: usize = 100;

/// Most bytes of header names and values a request may carry; more is `431`.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// Whether a request's head breaks [`MAX_HEADERS`] or [`MAX_HEADER_BYTES`].
pub fn head_too_large(headers: &HeaderMap) -> bool {
    headers.len() > MAX_HEADERS
        || headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len())
            .sum::<usize>()
            > MAX_HEADER_BYTES
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderName, HeaderValue};

    use super::*;

    #[test]
    fn the_payment_webhook_reads_what_the_json_apis_read() {
        assert_eq!(crate::billing::MAX_EVENT_BYTES, MAX_BODY_BYTES);
    }

    #[test]
    fn a_head_is_too_large_past_a_hundred_fields_or_32_kib() {
        let mut headers = HeaderMap::new();
        for i in 0..MAX_HEADERS {
            let name = HeaderName::try_from(format!("x-h{i}")).unwrap();
            headers.insert(name, HeaderValue::from_static("1"));
        }
        assert!(!head_too_large(&headers));
        headers.append("x-h0", HeaderValue::from_static("2"));
        assert!(head_too_large(&headers));

        let mut big = HeaderMap::new();
        let value = HeaderValue::try_from("v".repeat(MAX_HEADER_BYTES - 5)).unwrap();
        big.insert("x-big", value.clone());
        assert!(!head_too_large(&big));
        big.insert("x-bigger", value);
        assert!(head_too_large(&big));
    }
}
