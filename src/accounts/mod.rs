//! The accounts domain: accounts, their API keys, sign-up and sign-in, and redemption
//! codes. Each table here is written by one module, and every face (the account and admin
//! APIs, the portal, the console) calls these functions rather than another face's
//! handlers.

pub mod codes;
pub mod credentials;
pub mod keys;
pub mod last_used;
