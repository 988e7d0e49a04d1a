//! Bounds of the public API's requests that several routers share: a leaf module, so any
//! router may name them without importing another router.

/// Largest JSON body the account and admin APIs read.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
