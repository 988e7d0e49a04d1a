//! Bounds of the public API's requests: the router applies them to the account and admin
//! APIs, and the OpenAPI document declares them.

/// Largest JSON body the account and admin APIs read.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
