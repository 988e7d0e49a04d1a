//! What reading a stream's usage adds per chunk (SPEC §20): the event-stream scanner over
//! chunks as a language-model API sends them (a token event, and a usage event every
//! `k`-th chunk), and the spend of each usage event's growth in the account's minute
//! window, against copying the same chunks through untouched.
//!
//! `cargo bench --bench stream` prints nanoseconds per chunk for each, over 2,000,000
//! chunks; under `cargo test` it runs 20,000 as a smoke test. The hard plan's reserved
//! block is a map update like the minute's and is not measured apart.

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use chrono::Utc;
use tollgate::proxy::sse::UsageScanner;
use tollgate::throttle::minute::MinuteWindows;
use tollgate::throttle::rate::RateLimits;

fn chunks(count: usize, usage_every: usize) -> Vec<Bytes> {
    (0..count)
        .map(|i| {
            let mut chunk = format!(
                "event: token\ndata: {{\"text\": \"The moon in the seventh house {i}\"}}\n\n"
            );
            if i % usage_every == 0 {
                chunk.push_str(&format!("event: usage\ndata: {{\"units\": {}}}\n\n", i + 1));
            }
            Bytes::from(chunk)
        })
        .collect()
}

/// Nanoseconds per chunk of `run` over `chunks`, the best of three passes.
fn per_chunk(chunks: &[Bytes], mut run: impl FnMut(&[Bytes]) -> u64) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        black_box(run(chunks));
        best = best.min(started.elapsed().as_nanos() as f64 / chunks.len() as f64);
    }
    best
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let count = if benching { 2_000_000 } else { 20_000 };
    for usage_every in [1, 10] {
        let chunks = chunks(count, usage_every);
        let bytes: usize = chunks.iter().map(Bytes::len).sum();
        let copied = per_chunk(&chunks, |chunks| {
            let mut sum = 0u64;
            for chunk in chunks {
                let owned = black_box(chunk.clone());
                sum += owned.len() as u64;
            }
            sum
        });
        let scanned = per_chunk(&chunks, |chunks| {
            let mut scanner = UsageScanner::new();
            let mut last = 0u64;
            for chunk in chunks {
                scanner.scan(chunk, |e| last = e.units as u64);
            }
            last
        });
        let windows = MinuteWindows::new(RateLimits::new());
        let now = Utc::now();
        let spent = per_chunk(&chunks, |chunks| {
            let mut scanner = UsageScanner::new();
            let mut reported = 0i64;
            for chunk in chunks {
                scanner.scan(chunk, |e| {
                    let growth = e.units - reported;
                    reported = e.units;
                    black_box(windows.spend(42, i64::MAX, growth, now));
                });
            }
            reported as u64
        });
        println!(
            "stream of {count} chunks ({} bytes each on average), a usage event every {usage_every}: \
             pass-through {copied:.0} ns/chunk, scanned {scanned:.0} ns/chunk (+{:.0}), \
             scanned and spent in the minute window {spent:.0} ns/chunk (+{:.0})",
            bytes / count,
            scanned - copied,
            spent - copied,
        );
        assert!(scanned.is_finite() && spent.is_finite());
    }
}
