//! Local stand-ins for the remote services tollgate talks to, following their
//! published contracts: the upstream astrology API, Cloudflare Workers KV and Stripe's
//! meter events. Used
//! by the tests, the demo (`scripts/demo.sh`) and the benchmarks; never by `serve`.

pub mod fake_kv;
pub mod stripe;
pub mod upstream;
