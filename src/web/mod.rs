//! What the faces share, below all of them: the page faces' stylesheet, security headers,
//! problem page and number format ([`page`]), their charts ([`chart`]), cookies and CSRF
//! tokens ([`session`]), and for every face the client address a request counts under
//! ([`client`]) and the `?month=` parameter with the usage object it selects
//! ([`params`]). No face is imported here, and no face imports another.

pub mod chart;
pub mod client;
pub mod page;
pub mod params;
pub mod session;
