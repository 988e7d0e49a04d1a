//! The benchmark's load generator: one HTTP/1.1 keep-alive connection per concurrency
//! slot, a random API key and path per request, HdrHistogram latencies.
//!
//! Two modes, the same for every target so their figures compare:
//! - closed loop (no `--rate`): each connection sends its next request as soon as the
//!   previous answer is read, for `--duration` seconds;
//! - fixed rate (`--rate R`): request `k` of connection `c` is due at
//!   `start + (k + c / C) * C / R`. Latency is measured from that intended send time
//!   whenever the connection was still busy with an earlier answer at it, so a stalled
//!   server is charged for the requests it kept waiting (no coordinated omission). When
//!   the connection was idle, the generator's own timer slack (tokio's 1 ms wheel) is not
//!   charged: latency then starts at the actual send.
//!
//! Only requests sent after `--warmup` count in the figures; every answer, warmup and
//! the in-flight ones read after the deadline included, counts in `total_by_status`
//! (the benchmark compares that with the ledger). Prints one JSON object.
//!
//! With `--cpu NAME=PID[,PID...]` (repeatable) it also samples the CPU time of those
//! process trees, and its own, from `/proc` at the start and at the end of the measured
//! window (not the warmup), and reports them under `cpu` with `window_answers`, the
//! answers that arrived inside that window: their quotient is CPU time per call.
//!
//! `cargo run --release --example loadgen -- --url http://127.0.0.1:9000 --keys keys.txt \
//!    --concurrency 64 --duration 10 [--rate 5000] [--warmup 2]`

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpStream;

#[path = "support/proc_cpu.rs"]
mod proc_cpu;

#[derive(Parser, Debug)]
struct Args {
    /// Target root, `http://HOST:PORT` (plain HTTP, IP address).
    #[arg(long)]
    url: String,
    /// Request paths, picked at random per request.
    #[arg(long = "path", default_values_t = [
        "/vedic/v1/horoscope/daily?sign=leo".to_string(),
        "/western/v1/planets/positions?date=2024-01-01".to_string(),
    ])]
    paths: Vec<String>,
    /// File of API keys, one a line; one is picked at random per request.
    #[arg(long)]
    keys: Option<PathBuf>,
    /// Header the key is sent in.
    #[arg(long, default_value = "x-api-key")]
    key_header: String,
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Seconds measured, after the warmup.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Requests per second over all connections; absent = closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Most seconds to wait for the answers in flight at the deadline.
    #[arg(long, default_value_t = 10.0)]
    drain: f64,
    /// A name copied into the output.
    #[arg(long, default_value = "")]
    label: String,
    /// A process tree whose CPU time to sample over the measured window:
    /// `NAME=PID[,PID...]` (the PIDs' descendants count too). Repeatable.
    #[arg(long = "cpu", value_parser = proc_cpu::parse_group)]
    cpu: Vec<(String, Vec<u32>)>,
    /// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`).
    #[arg(long, default_value_t = 100.0)]
    clk_tck: f64,
}

/// What one connection saw.
struct Tally {
    hist: Histogram<u64>,
    measured: u64,
    by_status: BTreeMap<u16, u64>,
    measured_by_status: BTreeMap<u16, u64>,
    errors: u64,
    /// Answers that arrived inside the measured window.
    window_answers: u64,
    /// When the last measured answer arrived.
    last_done: Option<Instant>,
}

impl Tally {
    fn new() -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid bounds"),
            measured: 0,
            by_status: BTreeMap::new(),
            measured_by_status: BTreeMap::new(),
            errors: 0,
            window_answers: 0,
            last_done: None,
        }
    }
}

struct Plan {
    addr: SocketAddr,
    host: String,
    paths: Vec<String>,
    keys: Vec<String>,
    key_header: String,
    measure_from: Instant,
    deadline: Instant,
    drain_until: Instant,
    /// Seconds between two sends of one connection (fixed rate), else none.
    interval: Option<f64>,
    start: Instant,
    concurrency: usize,
}

/// A small xorshift: per-connection, no locking, good enough to pick keys.
struct Pick(u64);

impl Pick {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

async fn connect(plan: &Plan) -> std::io::Result<http1::SendRequest<Empty<Bytes>>> {
    let stream = TcpStream::connect(plan.addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

async fn connection(plan: Arc<Plan>, index: usize) -> Tally {
    let mut tally = Tally::new();
    let mut pick = Pick(0x9E37_79B9_7F4A_7C15 ^ ((index as u64 + 1) * 0xBF58_476D_1CE4_E5B9));
    let mut sender = None;
    let mut k: u64 = 0;
    let mut previous_done = plan.start;
    loop {
        let intended = match plan.interval {
            Some(every) => {
                let offset = (k as f64 + index as f64 / plan.concurrency as f64) * every;
                plan.start + Duration::from_secs_f64(offset)
            }
            None => Instant::now(),
        };
        k += 1;
        if intended >= plan.deadline {
            break;
        }
        if plan.interval.is_some() {
            tokio::time::sleep_until(intended.into()).await;
        }
        let sent = Instant::now();
        // Charge the wait to the server only when it still held this connection.
        let from = if previous_done > intended {
            intended
        } else {
            sent
        };
        if sender.is_none() {
            match connect(&plan).await {
                Ok(s) => sender = Some(s),
                Err(_) => {
                    tally.errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    previous_done = Instant::now();
                    continue;
                }
            }
        }
        let s = sender.as_mut().expect("connected above");
        let mut request = Request::get(plan.paths[pick.below(plan.paths.len())].as_str())
            .header(hyper::header::HOST, plan.host.as_str());
        if !plan.keys.is_empty() {
            request = request.header(
                plan.key_header.as_str(),
                plan.keys[pick.below(plan.keys.len())].as_str(),
            );
        }
        let request = request.body(Empty::new()).expect("valid request");
        let outcome = async {
            s.ready().await?;
            let response = s.send_request(request).await?;
            let status = response.status().as_u16();
            response.into_body().collect().await?;
            Ok::<u16, hyper::Error>(status)
        };
        let outcome = tokio::time::timeout_at(plan.drain_until.into(), outcome).await;
        let done = Instant::now();
        previous_done = done;
        match outcome {
            Ok(Ok(status)) => {
                *tally.by_status.entry(status).or_default() += 1;
                if done >= plan.measure_from && done < plan.deadline {
                    tally.window_answers += 1;
                }
                if intended >= plan.measure_from {
                    let micros = done.duration_since(from).as_micros().max(1) as u64;
                    tally.hist.saturating_record(micros);
                    tally.measured += 1;
                    *tally.measured_by_status.entry(status).or_default() += 1;
                    tally.last_done = Some(done);
                }
            }
            Ok(Err(_)) => {
                tally.errors += 1;
                sender = None;
            }
            Err(_) => {
                tally.errors += 1;
                break;
            }
        }
    }
    tally
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let root = args
        .url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("--url must be http://HOST:PORT"))?
        .trim_end_matches('/');
    let addr: SocketAddr = root.parse()?;
    let keys: Vec<String> = match &args.keys {
        Some(path) => std::fs::read_to_string(path)?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
        None => Vec::new(),
    };
    anyhow::ensure!(args.concurrency > 0, "--concurrency must be positive");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let deadline = measure_from + Duration::from_secs_f64(args.duration);
    let plan = Arc::new(Plan {
        addr,
        host: root.to_owned(),
        paths: args.paths.clone(),
        keys,
        key_header: args.key_header.clone(),
        measure_from,
        deadline,
        drain_until: deadline + Duration::from_secs_f64(args.drain),
        interval: args.rate.map(|r| args.concurrency as f64 / r),
        start,
        concurrency: args.concurrency,
    });
    // CPU samples on a thread of their own, at the window's edges, whatever the load does.
    let groups = args.cpu.clone();
    let clk_tck = args.clk_tck;
    let sampler = std::thread::spawn(move || -> anyhow::Result<serde_json::Value> {
        let sample = || -> anyhow::Result<Vec<proc_cpu::Ticks>> {
            let mut all = vec![proc_cpu::tree(&[std::process::id()])?];
            for (name, pids) in &groups {
                all.push(proc_cpu::tree(pids).map_err(|e| anyhow::anyhow!("--cpu {name}: {e}"))?);
            }
            Ok(all)
        };
        std::thread::sleep(measure_from.saturating_duration_since(Instant::now()));
        let (from, first) = (Instant::now(), sample()?);
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        let (to, last) = (Instant::now(), sample()?);
        let names = std::iter::once("loadgen").chain(groups.iter().map(|(n, _)| n.as_str()));
        let processes: serde_json::Map<_, _> = names
            .zip(last.iter().zip(&first))
            .map(|(name, (l, f))| (name.to_owned(), l.since(*f, clk_tck)))
            .collect();
        Ok(json!({
            "window_s": to.duration_since(from).as_secs_f64(),
            "processes": processes,
        }))
    });
    let tallies = runtime.block_on(async {
        let tasks: Vec<_> = (0..args.concurrency)
            .map(|i| tokio::spawn(connection(plan.clone(), i)))
            .collect();
        let mut tallies = Vec::new();
        for task in tasks {
            tallies.push(task.await.expect("connection task"));
        }
        tallies
    });

    let mut all = Tally::new();
    for t in tallies {
        all.hist.add(&t.hist).expect("same bounds");
        all.measured += t.measured;
        all.errors += t.errors;
        all.window_answers += t.window_answers;
        all.last_done = all.last_done.max(t.last_done);
        for (s, n) in t.by_status {
            *all.by_status.entry(s).or_default() += n;
        }
        for (s, n) in t.measured_by_status {
            *all.measured_by_status.entry(s).or_default() += n;
        }
    }
    // Requests sent in the window over the time until the last of them was answered: a
    // server that falls behind a fixed rate shows its real throughput.
    let elapsed = all
        .last_done
        .map_or(args.duration, |t| {
            t.duration_since(measure_from).as_secs_f64()
        })
        .max(args.duration);
    let ms = |q: f64| all.hist.value_at_quantile(q) as f64 / 1000.0;
    let statuses = |m: &BTreeMap<u16, u64>| {
        m.iter()
            .map(|(s, n)| (s.to_string(), json!(n)))
            .collect::<serde_json::Map<_, _>>()
    };
    let cpu = sampler
        .join()
        .map_err(|_| anyhow::anyhow!("the CPU sampler panicked"))??;
    let out = json!({
        "label": args.label,
        "mode": if args.rate.is_some() { "rate" } else { "closed" },
        "concurrency": args.concurrency,
        "target_rate": args.rate,
        "duration_s": args.duration,
        "elapsed_s": elapsed,
        "requests": all.measured,
        "rps": all.measured as f64 / elapsed,
        "latency_ms": {
            "p50": ms(0.5), "p90": ms(0.9), "p99": ms(0.99), "p999": ms(0.999),
            "max": all.hist.max() as f64 / 1000.0, "mean": all.hist.mean() / 1000.0,
        },
        "by_status": statuses(&all.measured_by_status),
        "total_by_status": statuses(&all.by_status),
        "errors": all.errors,
        "window_answers": all.window_answers,
        "cpu": cpu,
    });
    println!("{out}");
    Ok(())
}
