//! Password hashing stays bounded when clients disconnect mid-request (SPEC §9).
//!
//! Hundreds of signups and logins whose sockets close right after sending must not run
//! hundreds of argon2 hashes at once: the process's peak memory stays within the hashes
//! the gateway allows at a time, and its threads within the blocking jobs it allows.
//!

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::app::*;

const MIB: usize = 1024 * 1024;
const SIGNUPS: usize = 300;
const LOGINS: usize = 150;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// CPU time this process has used (user + system), in clock ticks.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Sends one JSON POST, waits `hold`, and closes the socket without reading the answer.
async fn send_and_hang_up(addr: std::net::SocketAddr, path: &str, body: String, hold: Duration) {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return;
    };
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(request.as_bytes()).await;
    tokio::time::sleep(hold).await;
    let _ = stream.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_hang_up_cannot_start_more_hashes_than_the_bound() {
    // Limits high enough that every request reaches the hashing gate.
    let _alone = measuring_alone().await;
    let app = spawn_app_with(|c| {
        c.account.signups_per_ip_per_hour = 10_000;
        c.account.login_failures_per_hour = 10_000;
    })
    .await;
    // Warm up: pools, the dummy hash of unknown-email logins, allocator pools.
    let customer = app.signup().await;
    let res = app
        .post_json(
            "/account/v1/login",
            &serde_json::json!({"email": customer.email, "password": PASSWORD}),
        )
        .await;
    assert_eq!(res.status(), 200, "login");
    let res = app
        .post_json(
            "/account/v1/login",
            &serde_json::json!({"email": "nobody@example.com", "password": "whatever pass"}),
        )
        .await;
    assert_eq!(res.status(), 401);

    let slots = tollgate::auth::password::max_concurrent_hashes();
    let hash_bytes = argon2::Params::DEFAULT_M_COST as usize * 1024;
    let idle_rss = status_bytes("VmRSS:");
    let idle_threads = threads();
    let budget = slots * hash_bytes + 48 * MIB;

    let started = Instant::now();
    let mut senders = Vec::new();
    for i in 0..SIGNUPS + LOGINS {
        let (path, body) = if i % 3 == 2 {
            (
                "/account/v1/login",
                format!(r#"{{"email":"nobody{i}@example.com","password":"whatever pass"}}"#),
            )
        } else {
            (
                "/account/v1/signup",
                format!(r#"{{"email":"gone{i}@example.com","password":"correct horse battery"}}"#),
            )
        };
        // Hang-ups spread over half a second: some while waiting, some while hashing.
        let hold = Duration::from_millis((i % 50) as u64 * 10);
        senders.push(tokio::spawn(send_and_hang_up(app.addr, path, body, hold)));
    }
    for sender in senders {
        sender.await.unwrap();
    }

    // Watch until the process has stopped working: two quiet seconds in a row.
    let mut peak_threads = idle_threads;
    let mut quiet_since: Option<Instant> = None;
    let mut last_cpu = cpu_ticks();
    let mut last_sample = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        peak_threads = peak_threads.max(threads());
        let peak = status_bytes("VmHWM:").saturating_sub(idle_rss);
        assert!(
            peak <= budget,
            "peak memory {} MiB over idle exceeds {} hashes' worth plus slack ({} MiB), \
             threads {idle_threads} -> {peak_threads}",
            peak / MIB,
            slots,
            budget / MIB
        );
        if last_sample.elapsed() >= Duration::from_millis(500) {
            let cpu = cpu_ticks();
            // Under a tenth of one core: nothing is hashing any more.
            let busy = (cpu - last_cpu) as f64 / 100.0 > last_sample.elapsed().as_secs_f64() / 10.0;
            last_cpu = cpu;
            last_sample = Instant::now();
            match (busy, quiet_since) {
                (true, _) => quiet_since = None,
                (false, None) => quiet_since = Some(Instant::now()),
                (false, Some(since)) if since.elapsed() >= Duration::from_secs(2) => break,
                (false, Some(_)) => {}
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the gateway never settled"
        );
    }

    let peak = status_bytes("VmHWM:").saturating_sub(idle_rss);
    println!(
        "{} requests hung up: RSS idle {} MiB, peak {} MiB over idle (budget {} MiB = {} \
         hashes of {} MiB + 48 MiB), threads idle {idle_threads}, peak {peak_threads}, \
         settled after {:.1} s",
        SIGNUPS + LOGINS,
        idle_rss / MIB,
        peak / MIB,
        budget / MIB,
        slots,
        hash_bytes / MIB,
        started.elapsed().as_secs_f64()
    );
    assert!(
        peak_threads <= idle_threads + slots + 4,
        "threads grew from {idle_threads} to {peak_threads} (hashing slots: {slots})"
    );
    // The gateway still serves once the noise is over.
    app.signup().await;
}
