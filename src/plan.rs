//! The vocabulary of plans every layer shares: the reserved name of the free grant and
//! how an exhausted account is treated. A leaf module (it imports nothing of the crate),
//! so configuration can name these without importing the usage rules.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The reserved plan name of every account's free grant.
pub const FREE_PLAN: &str = "free";

/// How an exhausted account is treated (SPEC §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Enforcement {
    /// Throttled by the admission hash; admitted calls are still accounted.
    #[default]
    Soft,
    /// Refused with `429 QUOTA_EXCEEDED`, never forwarded.
    Hard,
}

impl Enforcement {
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Soft => "soft",
            Enforcement::Hard => "hard",
        }
    }
}

impl TryFrom<String> for Enforcement {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        match value.as_str() {
            "soft" => Ok(Enforcement::Soft),
            "hard" => Ok(Enforcement::Hard),
            other => Err(format!("unknown enforcement `{other}`")),
        }
    }
}
