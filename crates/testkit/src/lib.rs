//! Local stand-ins for the remote services tollgate talks to, following their
//! published contracts: the upstream astrology API and Cloudflare Workers KV. Used
//! by the tests, the demo (`scripts/demo.sh`) and the benchmarks; never by `serve`.

pub mod fake_kv;
pub mod upstream;
