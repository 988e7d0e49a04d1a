//! A stand-in for the upstream astrology API, for the demo and the benchmarks.
//!
//! `cargo run --example demo_upstream -- 127.0.0.1:9000` answers every path under
//! `/vedic/v1/` and `/western/v1/` with a small JSON body (see `tollgate_testkit::upstream`).

use tollgate_testkit::upstream::UpstreamServer;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let server = UpstreamServer::start_on(listener, false).await?;
    println!("demo upstream listening on {}", server.base_url());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
