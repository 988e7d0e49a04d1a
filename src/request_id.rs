//! The gateway's id of one request (SPEC §3.1.2).
//!
//! Every request gets a fresh UUID v4, whatever the client sent. It names the request's
//! span, is the admission hash's input and the ledger's transaction id, and is returned
//! as `X-Request-Id` on every response.

use axum::http::{HeaderName, HeaderValue};
use uuid::Uuid;

/// The header the id travels in, both ways.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The gateway's id of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestId(pub Uuid);

impl RequestId {
    pub fn generate() -> Self {
        Self(Uuid::new_v4())
    }

    /// Lowercase, hyphenated.
    pub fn header_value(&self) -> HeaderValue {
        let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
        let text = self.0.hyphenated().encode_lower(&mut buf);
        HeaderValue::from_str(text).expect("a UUID is a valid header value")
    }
}
