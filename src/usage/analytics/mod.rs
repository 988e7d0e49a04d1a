//! Usage analytics per route, key and day (SPEC §18): the rollup the accounting
//! transaction writes ([`rollup`]), how routes are named and bounded ([`routes`]), the
//! latency histograms ([`histogram`]) and the reports read from them ([`report`]).

pub mod histogram;
pub mod latency;
pub mod report;
pub mod rollup;
pub mod routes;

pub use latency::PendingLatencies;
pub use report::{AnalyticsQuery, AnalyticsReport, GroupBy, analytics};
pub use routes::RouteBook;
