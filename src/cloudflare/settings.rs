//! What the KV client needs to know: where the namespace is, the token, and its limits.

use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;

use super::budget::{CallBudget, SharedBudget};

/// Where the namespace is and how to call it.
#[derive(Debug)]
pub struct KvSettings {
    /// API root, e.g. `https://api.cloudflare.com/client/v4` (a trailing slash is ignored).
    pub api_base: String,
    pub account_id: String,
    pub namespace_id: String,
    /// Sent as `Authorization: Bearer`; never logged (its `Debug` is redacted).
    pub api_token: SecretString,
    /// Bound on one whole call, answer body included.
    pub call_timeout: Duration,
    /// Shared by every clone of the client built from these settings: this process's calls.
    pub budget: CallBudget,
    /// The calls of every process on the token; each call needs a permit of both.
    pub shared_budget: Option<Arc<dyn SharedBudget>>,
}

impl KvSettings {
    /// Cloudflare's public API root.
    pub const DEFAULT_API_BASE: &'static str = "https://api.cloudflare.com/client/v4";
    /// Default bound on one call.
    pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

    /// Settings for Cloudflare's public API with the default timeout and call budget.
    pub fn new(
        account_id: impl Into<String>,
        namespace_id: impl Into<String>,
        api_token: SecretString,
    ) -> Self {
        Self {
            api_base: Self::DEFAULT_API_BASE.to_owned(),
            account_id: account_id.into(),
            namespace_id: namespace_id.into(),
            api_token,
            call_timeout: Self::DEFAULT_CALL_TIMEOUT,
            budget: CallBudget::default(),
            shared_budget: None,
        }
    }
}
