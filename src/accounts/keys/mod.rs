//! API keys (the `api_key` table, SPEC §3.2, §13, §15, §16): created (at most
//! `account.max_keys` live, with a name, an expiry, scopes, a monthly limit and a rate
//! limit), listed with each key's use this month, changed, rolled, revoked. The account API and the portal both call these; no face writes
//! `api_key` itself. Each change writes its audit row ([`crate::audit`]) in its own
//! transaction, as the `origin` its caller names.

mod change;
mod create;
mod listing;
mod roll;
mod rules;

pub use change::{KeyChange, change_key, revoke, set_key_limit};
pub use create::{KeyCreated, create_account_key};
pub(crate) use create::{created_entry, insert_key};
pub use listing::{KeySummary, key_of, keys_in_month, keys_of};
pub use roll::{KeyRoll, KeyRolled, roll};
pub use rules::{
    DEFAULT_GRACE_SECONDS, DEFAULT_KEY_NAME, KeySettings, MAX_GRACE_SECONDS, MAX_KEY_LIMIT,
    MAX_KEY_NAME_CHARS, MAX_SCOPE_BYTES, MAX_SCOPES, checked_expiry, checked_limit, checked_name,
    checked_scopes,
};
