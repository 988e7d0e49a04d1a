//! A local Cloudflare Workers KV server, for the benchmark and manual runs.
//!
//! `cargo run --example fake_kv -- 127.0.0.1:9100` serves [`FakeKv`] on that address and
//! prints its `api_base` on the first line of stdout. Configure the gateway with that
//! base and `FakeKv::ACCOUNT_ID`, `NAMESPACE_ID` and `API_TOKEN`
//! (`test-account`, `test-namespace`, `test-token`). Stops on Ctrl-C or SIGTERM.

use tollgate_testkit::fake_kv::FakeKv;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9100".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let kv = FakeKv::start_on(listener).await;
    println!("{}", kv.api_base());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
