//! The one error type of the Cloudflare KV client.
//!
//! Every variant except "the key is absent" (which is `Ok(None)`, not an error) is something
//! the caller treats as fail-open: it logs a warning and carries on without KV. The variants
//! still say *why*, so logs and metrics can tell a refused call from a slow or broken one.

use std::time::Duration;

/// Why a KV call did not produce an answer.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// Cloudflare answered with an error status; `code` and `message` come from the first
    /// entry of the envelope's `errors` (absent when the body was not an envelope).
    #[error("Cloudflare KV answered {status} (code {code:?}): {message}")]
    Api {
        status: u16,
        code: Option<u32>,
        message: String,
    },
    /// Cloudflare answered 429. Further calls are refused locally (`BackingOff`) until
    /// `retry_after` (60 s when the header was missing) has passed.
    #[error("Cloudflare KV rate limited this token (Retry-After: {retry_after:?})")]
    RateLimited { retry_after: Option<Duration> },
    /// The whole call took longer than the configured `call_timeout`.
    #[error("Cloudflare KV call timed out")]
    Timeout,
    /// The request could not be sent or its answer could not be read.
    #[error("Cloudflare KV transport error: {0}")]
    Transport(#[source] reqwest::Error),
    /// A 2xx answer whose body is not what the API documents.
    #[error("Cloudflare KV sent an unexpected response: {0}")]
    UnexpectedResponse(String),
    /// Some items of a bulk write or delete were not applied; they should be retried.
    #[error("Cloudflare KV did not apply {} of the bulk items", unsuccessful_keys.len())]
    Incomplete { unsuccessful_keys: Vec<String> },
    /// The call budget (this process's, or the one shared by the fleet on the token) has no
    /// permit left; no request was sent.
    #[error("Cloudflare KV call budget exhausted; call not sent")]
    BudgetExhausted,
    /// An earlier 429 asked us to wait and that time is not over; no request was sent.
    #[error("backing off after a Cloudflare KV 429; call not sent")]
    BackingOff,
    /// The key can never be addressed through the REST path (empty, `.`, `..`, or longer
    /// than 512 bytes); no request was sent.
    #[error("invalid KV key: {0}")]
    InvalidKey(String),
}
