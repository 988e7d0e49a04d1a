//! What the faces share, below all of them: the page faces' stylesheet, security headers,
//! problem page and number format ([`page`]), their charts ([`chart`]), their tables and
//! chart of an account's calls by route, key and day ([`analytics`]), their table of
//! an account's latest audit events ([`audit`]), cookies and CSRF tokens ([`session`]),
//! and for every face the client address a request counts under ([`client`]) and the
//! `?month=` parameter with the usage object it selects ([`params`]). No face is imported
//! here, and no face imports another.

pub mod analytics;
pub mod audit;
pub mod chart;
pub mod client;
pub mod page;
pub mod params;
pub mod session;
