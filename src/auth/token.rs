//! API keys, session tokens and redemption codes: generation, hashing and redaction.
//!
//! A token is a fixed prefix followed by 40 random alphanumeric characters
//! (about 238 bits). Only its SHA-256 is stored; the clear text is shown once, when
//! it is created. `Debug` of a [`PlainToken`] never prints the secret.

use std::fmt;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use rand::Rng;
use rand::distr::Alphanumeric;
use sha2::{Digest, Sha256};

/// Prefix of customer API keys.
pub const API_KEY_PREFIX: &str = "tgk_";
/// Prefix of login session tokens.
pub const SESSION_PREFIX: &str = "tgs_";
/// Prefix of redemption codes.
pub const REDEMPTION_CODE_PREFIX: &str = "tgr_";
const RANDOM_LEN: usize = 40;
/// Characters of an API key kept in clear for listings (prefix plus 8).
const DISPLAY_LEN: usize = API_KEY_PREFIX.len() + 8;
/// Anything longer cannot be one of ours; refused without touching the database.
pub const MAX_TOKEN_LEN: usize = 128;

/// A freshly generated token, in clear. Exists only until it is shown to its owner.
#[derive(Clone)]
pub struct PlainToken(String);

impl PlainToken {
    pub fn generate(prefix: &str) -> Self {
        let random: String = rand::rng()
            .sample_iter(Alphanumeric)
            .take(RANDOM_LEN)
            .map(char::from)
            .collect();
        Self(format!("{prefix}{random}"))
    }

    pub fn hash(&self) -> TokenHash {
        TokenHash::of(&self.0)
    }

    /// The first characters, safe to list.
    pub fn display_prefix(&self) -> String {
        self.0.chars().take(DISPLAY_LEN).collect()
    }

    pub fn reveal(self) -> String {
        self.0
    }
}

impl fmt::Debug for PlainToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PlainToken({}…)", self.display_prefix())
    }
}

/// SHA-256 of a token, as stored.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenHash(pub [u8; 32]);

impl TokenHash {
    pub fn of(token: &str) -> Self {
        Self(Sha256::digest(token.as_bytes()).into())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenHash({}…)", hex::encode(&self.0[..4]))
    }
}

/// Whether `candidate` could be a token with `prefix` at all (shape only).
pub fn plausible(candidate: &str, prefix: &str) -> bool {
    candidate.len() <= MAX_TOKEN_LEN
        && candidate.starts_with(prefix)
        && candidate[prefix.len()..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric())
}

/// The token of an `Authorization: Bearer` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_carry_the_pinned_prefix_and_enough_randomness() {
        let key = PlainToken::generate(API_KEY_PREFIX).reveal();
        assert!(key.starts_with("tgk_"));
        assert_eq!(key.len(), 4 + 40);
        assert!(plausible(&key, API_KEY_PREFIX));
        // 40 characters over 62 symbols is about 238 bits, well above 128.
        assert!((40.0 * 62f64.log2()) > 128.0);
    }

    #[test]
    fn session_tokens_carry_their_own_prefix() {
        let token = PlainToken::generate(SESSION_PREFIX).reveal();
        assert!(token.starts_with("tgs_"));
        assert!(!plausible(&token, API_KEY_PREFIX));
    }

    #[test]
    fn redemption_codes_carry_their_own_prefix() {
        let code = PlainToken::generate(REDEMPTION_CODE_PREFIX).reveal();
        assert!(code.starts_with("tgr_"));
        assert_eq!(code.len(), 4 + 40);
        assert!(plausible(&code, REDEMPTION_CODE_PREFIX));
        assert!(!plausible(&code, API_KEY_PREFIX));
    }

    #[test]
    fn two_keys_differ() {
        assert_ne!(
            PlainToken::generate(API_KEY_PREFIX).reveal(),
            PlainToken::generate(API_KEY_PREFIX).reveal()
        );
    }

    #[test]
    fn debug_output_never_shows_the_secret() {
        let token = PlainToken::generate(API_KEY_PREFIX);
        let shown = format!("{token:?} {:?}", token.hash());
        let clear = token.reveal();
        assert!(!shown.contains(&clear[12..]), "{shown}");
    }

    #[test]
    fn the_stored_hash_is_sha256_of_the_key() {
        assert_eq!(
            hex::encode(TokenHash::of("abc").0),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn oversized_or_foreign_candidates_are_implausible() {
        assert!(!plausible(
            &format!("tgk_{}", "a".repeat(200)),
            API_KEY_PREFIX
        ));
        assert!(!plausible("tgk_abc-def", API_KEY_PREFIX));
        assert!(!plausible("sk_live_abc", API_KEY_PREFIX));
    }
}
