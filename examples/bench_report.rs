//! Turns one benchmark run's raw files into the table and the results JSON.
//!
//! `bench/run.sh` leaves in its run folder one `loadgen` output per phase and target
//! (`closed-upstream.json`, ..., `rate-fulljs.json`: the target's median round; every
//! round is kept as `<phase>-<target>.round<N>.json`), one
//! `accounting-<phase>-<target>.json` per phase of each full mode (metrics scraped after
//! the load stopped, ledger rows), one `pg-<phase>-<target>.round<N>.json` per run
//! (PostgreSQL's CPU time before the run and once the ledger held its calls, the calls,
//! the rows accounted, the lag) and `machine.json`. This prints the tables and the
//! targets' checks, and writes the combined JSON to `--out`.
//!
//! `cargo run --release --example bench_report -- --run-dir DIR --out FILE`

use std::path::{Path, PathBuf};

use clap::Parser;
use serde_json::{Value, json};

#[path = "support/bench_checks.rs"]
mod bench_checks;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    run_dir: PathBuf,
    #[arg(long)]
    out: PathBuf,
    /// PostgreSQL µs of CPU per accounted call to compare full mode's with.
    #[arg(long)]
    pg_baseline_us: Option<f64>,
}

const TARGETS: [(&str, &str); 5] = [
    ("upstream", "upstream (direct)"),
    ("nginx", "nginx"),
    ("local", "tollgate local"),
    ("full", "tollgate full"),
    ("fulljs", "tollgate full (jetstream)"),
];
/// The full modes, by target, with the transport of their usage events and their
/// index in [`TARGETS`].
const FULL_MODES: [(&str, &str, usize); 2] = [("full", "memory", 3), ("fulljs", "jetstream", 4)];
const PHASES: [&str; 2] = ["closed", "rate"];
/// Statuses the gateway answers itself; every other one came from the upstream.
const LOCAL_STATUSES: [&str; 5] = ["401", "429", "502", "503", "504"];

fn read(dir: &Path, name: &str) -> anyhow::Result<Value> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn num(v: &Value, pointer: &str) -> f64 {
    v.pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
}

/// Answers of one loadgen run that came from the upstream, warmup and drain included.
fn upstream_answers(run: &Value) -> u64 {
    run.get("total_by_status")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(s, _)| !LOCAL_STATUSES.contains(&s.as_str()))
                .filter_map(|(_, n)| n.as_u64())
                .sum()
        })
        .unwrap_or(0)
}

/// Every round of a full mode in `phase` (`<phase>-<target>.round<N>.json`), or
/// `counted` alone when the run had no rounds.
fn full_mode_rounds(
    dir: &Path,
    phase: &str,
    target: &str,
    counted: &Value,
) -> anyhow::Result<Vec<Value>> {
    let mut rounds = every_round(dir, &format!("{phase}-{target}"))?;
    if rounds.is_empty() {
        rounds.push(counted.clone());
    }
    Ok(rounds)
}

/// Every `<stem>.round<N>.json` in the run folder.
fn every_round(dir: &Path, stem: &str) -> anyhow::Result<Vec<Value>> {
    let prefix = format!("{stem}.round");
    let mut rounds = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) && name.ends_with(".json") {
            rounds.push(read(dir, &name)?);
        }
    }
    Ok(rounds)
}

/// Microseconds of CPU per call of one process group in a loadgen output:
/// `{"user", "system", "total"}`, over the answers inside the measured window.
fn cpu_per_call(run: &Value, group: &str) -> Value {
    let answers = num(run, "/window_answers");
    let cpu = &run["cpu"]["processes"][group];
    if cpu.is_null() {
        return Value::Null;
    }
    let (u, s) = (num(cpu, "/user_s"), num(cpu, "/system_s"));
    let us = |x: f64| ratio(x * 1e6, answers);
    json!({"user": us(u), "system": us(s), "total": us(u + s)})
}

/// PostgreSQL's CPU over every run of a target in a phase, per accounted row (full
/// modes) or per call (the others, where it should be ~0).
fn pg_per_call(dir: &Path, phase: &str, target: &str) -> anyhow::Result<Value> {
    let (mut user, mut system, mut rows, mut calls, mut lag) = (0.0, 0.0, 0.0, 0.0, 0f64);
    let runs = every_round(dir, &format!("pg-{phase}-{target}"))?;
    let metered = runs.iter().any(|r| r["metered"] == json!(true));
    for r in &runs {
        user += num(r, "/end/user_s") - num(r, "/start/user_s");
        system += num(r, "/end/system_s") - num(r, "/start/system_s");
        rows += num(r, "/rows");
        calls += num(r, "/calls");
        lag = lag.max(r["lag_s"].as_f64().unwrap_or(0.0));
    }
    let per = if metered { rows } else { calls };
    Ok(json!({
        "runs": runs.len(), "user_s": user, "system_s": system, "rows": rows, "calls": calls,
        "per": if metered { "accounted row" } else { "call" },
        "us_user": ratio(user * 1e6, per), "us_system": ratio(system * 1e6, per),
        "us_per_call": ratio((user + system) * 1e6, per),
        "max_lag_s": if metered { json!(lag) } else { Value::Null },
    }))
}

fn cell(v: &Value, pointer: &str) -> String {
    match v.pointer(pointer).and_then(Value::as_f64) {
        Some(x) if x.is_finite() => format!("{x:.1}"),
        _ => "-".into(),
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = &args.run_dir;
    let machine = read(dir, "machine.json")?;
    let mut phases = serde_json::Map::new();
    // By transport, then phase.
    let mut accounting: serde_json::Map<String, Value> = FULL_MODES
        .iter()
        .map(|(_, transport, _)| (transport.to_string(), json!({})))
        .collect();
    let mut unanswered_so_far = [0u64; FULL_MODES.len()];
    let mut responses_so_far = [0u64; FULL_MODES.len()];

    println!();
    println!(
        "tollgate benchmark: {} cores, {}, {} s per phase after {} s warmup, median of {} interleaved rounds, {} connections",
        machine["nproc"],
        machine["cpu"].as_str().unwrap_or("?"),
        machine["duration_s"],
        machine["warmup_s"],
        machine["rounds"].as_u64().unwrap_or(1),
        machine["concurrency"]
    );
    for phase in PHASES {
        let runs: Vec<Value> = TARGETS
            .iter()
            .map(|(t, _)| read(dir, &format!("{phase}-{t}.json")))
            .collect::<anyhow::Result<_>>()?;
        let (up, ngx) = (&runs[0], &runs[1]);
        println!();
        match phase {
            "closed" => println!("closed loop: as fast as each connection is answered"),
            _ => println!(
                "fixed rate: {:.0} req/s offered (1/{} of nginx's closed-loop max), latency from the intended send time",
                num(up, "/target_rate"),
                machine["rate_divisor"]
            ),
        }
        println!(
            "{:<26} {:>9} {:>6} {:>6} | {:>8} {:>6} {:>6} | {:>8} {:>6} {:>6} | {:>8} {:>6} {:>6} | {:>6}",
            "target",
            "req/s",
            "×up",
            "×ngx",
            "p50 ms",
            "×up",
            "×ngx",
            "p99 ms",
            "×up",
            "×ngx",
            "p99.9 ms",
            "×up",
            "×ngx",
            "errors"
        );
        let mut entries = serde_json::Map::new();
        for ((key, name), run) in TARGETS.iter().zip(&runs) {
            let mut line = format!("{name:<26} {:>9.0} ", num(run, "/rps"));
            line += &format!(
                "{:>6.2} {:>6.2}",
                ratio(num(run, "/rps"), num(up, "/rps")),
                ratio(num(run, "/rps"), num(ngx, "/rps"))
            );
            let mut figures = json!({
                "rps": num(run, "/rps"),
                "rps_vs_upstream": ratio(num(run, "/rps"), num(up, "/rps")),
                "rps_vs_nginx": ratio(num(run, "/rps"), num(ngx, "/rps")),
            });
            for q in ["p50", "p99", "p999"] {
                let p = format!("/latency_ms/{q}");
                let (v, vu, vn) = (num(run, &p), num(up, &p), num(ngx, &p));
                line += &format!(" | {v:>8.3} {:>6.2} {:>6.2}", ratio(v, vu), ratio(v, vn));
                figures[format!("{q}_ms")] = json!(v);
                figures[format!("{q}_vs_upstream")] = json!(ratio(v, vu));
                figures[format!("{q}_vs_nginx")] = json!(ratio(v, vn));
            }
            line += &format!(" | {:>6}", run["errors"]);
            println!("{line}");
            for group in ["target", "nats", "upstream", "kv", "loadgen"] {
                figures["cpu_us_per_call"][group] = cpu_per_call(run, group);
            }
            figures["window_answers"] = run["window_answers"].clone();
            figures["pg"] = pg_per_call(dir, phase, key)?;
            figures["raw"] = run.clone();
            entries.insert((*key).into(), figures);
        }
        println!();
        println!(
            "CPU µs per call, measured window: target = its own processes (user + kernel), then beside it; PG = PostgreSQL over every round until accounted"
        );
        println!(
            "{:<26} {:>9} | {:>7} {:>7} {:>7} | {:>7} {:>8} {:>7} {:>7} | {:>7} {:>7} {:>7} {:>7}",
            "target",
            "calls",
            "target",
            "user",
            "kernel",
            "nats",
            "upstream",
            "kv",
            "loadgen",
            "PG",
            "user",
            "kernel",
            "per"
        );
        for (key, name) in TARGETS {
            let f = &entries[key];
            let c = &f["cpu_us_per_call"];
            println!(
                "{name:<26} {:>9} | {:>7} {:>7} {:>7} | {:>7} {:>8} {:>7} {:>7} | {:>7} {:>7} {:>7} {:>7}",
                f["window_answers"].as_u64().unwrap_or(0),
                cell(c, "/target/total"),
                cell(c, "/target/user"),
                cell(c, "/target/system"),
                cell(c, "/nats/total"),
                cell(c, "/upstream/total"),
                cell(c, "/kv/total"),
                cell(c, "/loadgen/total"),
                cell(&f["pg"], "/us_per_call"),
                cell(&f["pg"], "/us_user"),
                cell(&f["pg"], "/us_system"),
                if f["pg"]["per"] == json!("accounted row") {
                    "row"
                } else {
                    "call"
                },
            );
        }
        for (mode, (target, transport, index)) in FULL_MODES.iter().enumerate() {
            let acc = read(dir, &format!("accounting-{phase}-{target}.json"))?;
            let (responses, unanswered) =
                (&mut responses_so_far[mode], &mut unanswered_so_far[mode]);
            if *responses == 0 {
                *responses = acc["probe_calls"].as_u64().unwrap_or(0);
            }
            // Every round fed the ledger, not only the one whose figures count.
            for run in full_mode_rounds(dir, phase, target, &runs[*index])? {
                *responses += upstream_answers(&run);
                // A request the generator gave up on may still have been answered
                // upstream (and so accounted): the ledger may exceed the answers seen by
                // that many.
                *unanswered += run["errors"].as_u64().unwrap_or(0);
            }
            let ledger = acc["ledger_rows"].as_u64().unwrap_or(0);
            let mut acc_out = acc.clone();
            // The longest wait of the phase's runs, from each run's end until the ledger
            // held its calls (the scrape after the phase finds it caught up already).
            if let Some(lag) = entries[*target]["pg"]["max_lag_s"].as_f64() {
                acc_out["lag_s"] = json!(lag);
            }
            acc_out["upstream_responses"] = json!(*responses);
            acc_out["unanswered"] = json!(*unanswered);
            acc_out["ledger_equals_responses"] =
                json!((*responses..=*responses + *unanswered).contains(&ledger));
            accounting[*transport][phase] = acc_out;
        }
        phases.insert(phase.into(), Value::Object(entries));
    }

    println!();
    println!("full mode accounting (cumulative: warmups and the one probe call included)");
    println!(
        "{:<10} {:<8} {:>10} {:>10} {:>10} {:>8} {:>10} {:>10} {:>9} {:>12}",
        "events",
        "after",
        "published",
        "acked",
        "accounted",
        "lost",
        "responses",
        "ledger",
        "equal",
        "max lag"
    );
    for (_, transport, _) in FULL_MODES {
        for phase in PHASES {
            let a = &accounting[transport][phase];
            // Only the JetStream transport has a stream to acknowledge events.
            let acked = match transport {
                "jetstream" => a["acked"].as_u64().unwrap_or(0).to_string(),
                _ => "-".into(),
            };
            println!(
                "{:<10} {:<8} {:>10} {:>10} {:>10} {:>8} {:>10} {:>10} {:>9} {:>10.3} s",
                transport,
                phase,
                a["published"].as_u64().unwrap_or(0),
                acked,
                a["accounted"].as_u64().unwrap_or(0),
                a["dropped"].as_u64().unwrap_or(0),
                a["upstream_responses"].as_u64().unwrap_or(0),
                a["ledger_rows"].as_u64().unwrap_or(0),
                if a["ledger_equals_responses"] == json!(true) {
                    "yes"
                } else {
                    "NO"
                },
                num(a, "/lag_s"),
            );
        }
    }

    let checks = bench_checks::print(
        &phases,
        &accounting["memory"],
        &accounting["jetstream"],
        args.pg_baseline_us,
    );

    let out = json!({
        "machine": machine,
        "phases": phases,
        "accounting": accounting["memory"],
        "accounting_jetstream": accounting["jetstream"],
        "targets": checks,
    });
    std::fs::write(&args.out, serde_json::to_string_pretty(&out)? + "\n")?;
    println!();
    println!("written to {}", args.out.display());
    Ok(())
}
