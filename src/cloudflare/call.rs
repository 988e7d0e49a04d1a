//! One guarded call to Cloudflare: the local gates, the timeout, the 429 back-off, metrics.
//!
//! Before a request goes out it must pass the back-off (after a 429 nothing is sent until
//! its `Retry-After` has passed) and take a permit from the call budget — this process's
//! first, then the one shared by every process on the token; refused calls send nothing. The whole exchange, answer body included, runs under `call_timeout`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::RETRY_AFTER;
use reqwest::{RequestBuilder, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;

use super::budget::{CallBudget, SharedBudget};
use super::error::KvError;
use super::wire::{self, Envelope};
use crate::sync::lock;

/// Back-off after a 429 that carried no usable `Retry-After`.
const DEFAULT_BACKOFF: Duration = Duration::from_secs(60);
/// Longest back-off honoured, whatever `Retry-After` says (Cloudflare blocks for 5 minutes).
const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);

/// The operations, as named in logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Get,
    Put,
    Delete,
    List,
    BulkPut,
    BulkDelete,
}

impl Op {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Put => "put",
            Op::Delete => "delete",
            Op::List => "list",
            Op::BulkPut => "bulk_put",
            Op::BulkDelete => "bulk_delete",
        }
    }
}

/// What came back from the network: any status except 429, with the whole body.
pub(crate) struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

impl Answer {
    /// For writes and deletes: any 2xx is success unless its body is an envelope that
    /// says otherwise (some KV-compatible servers answer a bare 200 or 204).
    pub(crate) fn accepted(&self) -> Result<(), KvError> {
        if !self.status.is_success() {
            return Err(wire::api_error(self.status, &self.body));
        }
        match serde_json::from_slice::<Envelope<serde_json::Value>>(&self.body) {
            Ok(envelope) if !envelope.success => Err(wire::api_error(self.status, &self.body)),
            _ => Ok(()),
        }
    }

    /// The `Api` error of a non-2xx answer, or the decoded envelope of a 2xx one.
    pub(crate) fn envelope<T: DeserializeOwned>(&self) -> Result<Envelope<T>, KvError> {
        if self.status.is_success() {
            wire::decode_envelope(self.status, &self.body)
        } else {
            Err(wire::api_error(self.status, &self.body))
        }
    }
}

/// Sends requests for one token, sharing its budget and back-off across clones of the client.
#[derive(Debug)]
pub(crate) struct Caller {
    pub http: reqwest::Client,
    api_token: SecretString,
    call_timeout: Duration,
    budget: CallBudget,
    shared_budget: Option<Arc<dyn SharedBudget>>,
    /// Set by a 429: no call goes out before this instant.
    blocked_until: Mutex<Option<Instant>>,
}

impl Caller {
    pub(crate) fn new(
        http: reqwest::Client,
        api_token: SecretString,
        call_timeout: Duration,
        budget: CallBudget,
        shared_budget: Option<Arc<dyn SharedBudget>>,
    ) -> Self {
        Self {
            http,
            api_token,
            call_timeout,
            budget,
            shared_budget,
            blocked_until: Mutex::new(None),
        }
    }

    /// Passes the local gates, then sends `request` under the call timeout. A 429 becomes
    /// `RateLimited` and starts the back-off; every other status is returned as is.
    pub(crate) async fn execute(&self, op: Op, request: RequestBuilder) -> Result<Answer, KvError> {
        self.admit(op, Instant::now()).await?;
        let request = request.bearer_auth(self.api_token.expose_secret());
        let exchange = async {
            let response = request.send().await?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| wire::parse_retry_after(value, chrono::Utc::now()));
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, retry_after, body))
        };
        let (status, retry_after, body) =
            match tokio::time::timeout(self.call_timeout, exchange).await {
                Err(_elapsed) => return Err(KvError::Timeout),
                Ok(Err(error)) if error.is_timeout() => return Err(KvError::Timeout),
                Ok(Err(error)) => return Err(KvError::Transport(error)),
                Ok(Ok(exchanged)) => exchanged,
            };
        if status == StatusCode::TOO_MANY_REQUESTS {
            let wait = retry_after.unwrap_or(DEFAULT_BACKOFF).min(MAX_BACKOFF);
            self.block_for(wait);
            tracing::warn!(
                op = op.as_str(),
                backoff_secs = wait.as_secs(),
                "Cloudflare KV rate limited this token; backing off"
            );
            return Err(KvError::RateLimited { retry_after });
        }
        Ok(Answer { status, body })
    }

    /// Refuses the call locally while backing off or when a budget is spent. Listing
    /// keeps the fleet's view of the markers alive, so writes and reads leave a tenth of
    /// the budget for it. The local budget is asked first, so a process that has spent
    /// its own permits costs the shared budget nothing; a permit the shared budget then
    /// refuses is given back.
    async fn admit(&self, op: Op, now: Instant) -> Result<(), KvError> {
        {
            let mut blocked = lock(&self.blocked_until);
            match *blocked {
                Some(until) if now < until => return Err(KvError::BackingOff),
                Some(_) => *blocked = None,
                None => {}
            }
        }
        let reserve = match op {
            Op::List => 0,
            _ => self.budget.max_calls() / 10,
        };
        if !self.budget.try_acquire_leaving(now, reserve) {
            return Err(KvError::BudgetExhausted);
        }
        if let Some(shared) = &self.shared_budget
            && !shared.try_acquire_leaving(reserve).await
        {
            self.budget.refund();
            return Err(KvError::BudgetExhausted);
        }
        Ok(())
    }

    fn block_for(&self, wait: Duration) {
        let until = Instant::now() + wait;
        let mut blocked = lock(&self.blocked_until);
        *blocked = Some(blocked.map_or(until, |current| current.max(until)));
    }
}

/// Counts the outcome of one call in the metrics and logs it at debug level. Calls refused
/// locally have their own counters and are not counted in `tollgate_kv_calls_total`.
pub(crate) fn record<T>(op: Op, outcome: &Result<T, KvError>, absent: bool) {
    let result = match outcome {
        Ok(_) if absent => "absent",
        Ok(_) => "ok",
        Err(KvError::BudgetExhausted) => {
            metrics::counter!("tollgate_kv_budget_skipped_total", "op" => op.as_str()).increment(1);
            tracing::debug!(op = op.as_str(), "KV call skipped: call budget exhausted");
            return;
        }
        Err(KvError::BackingOff) => {
            metrics::counter!("tollgate_kv_backoff_skipped_total").increment(1);
            tracing::debug!(op = op.as_str(), "KV call skipped: backing off after a 429");
            return;
        }
        Err(error @ KvError::InvalidKey(_)) => {
            tracing::debug!(op = op.as_str(), %error, "KV call refused: invalid key");
            return;
        }
        Err(KvError::RateLimited { .. }) => "rate_limited",
        Err(KvError::Timeout) => "timeout",
        Err(_) => "error",
    };
    metrics::counter!("tollgate_kv_calls_total", "op" => op.as_str(), "result" => result)
        .increment(1);
    match outcome {
        Err(error) => tracing::debug!(op = op.as_str(), result, %error, "KV call failed"),
        Ok(_) => tracing::debug!(op = op.as_str(), result, "KV call done"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            body: Bytes::from(body.to_owned()),
        }
    }

    #[test]
    fn a_write_is_accepted_on_any_2xx_unless_the_envelope_says_it_failed() {
        assert!(
            answer(
                200,
                r#"{"success":true,"errors":[],"messages":[],"result":{}}"#
            )
            .accepted()
            .is_ok()
        );
        assert!(answer(204, "").accepted().is_ok());
        assert!(answer(200, "OK").accepted().is_ok());
        let refused = r#"{"success":false,"errors":[{"code":10033,"message":"bad"}],"messages":[],"result":null}"#;
        assert!(matches!(
            answer(200, refused).accepted(),
            Err(KvError::Api {
                code: Some(10033),
                ..
            })
        ));
        assert!(matches!(
            answer(500, "oops").accepted(),
            Err(KvError::Api { status: 500, .. })
        ));
    }
}
