//! The targets a benchmark run is judged by, one line each (PASS or MISS with the
//! figures), for `bench_report`.

use serde_json::{Map, Value, json};

fn num(v: &Value, pointer: &str) -> f64 {
    v.pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
}

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "MISS" }
}

/// PostgreSQL µs of CPU per unit (accounted row or call) of a target over both phases.
fn pg_us(phases: &Map<String, Value>, target: &str) -> f64 {
    let (mut cpu, mut per) = (0.0, 0.0);
    for phase in ["closed", "rate"] {
        let pg = &phases[phase][target]["pg"];
        cpu += num(pg, "/user_s") + num(pg, "/system_s");
        per += if pg["per"] == json!("accounted row") {
            num(pg, "/rows")
        } else {
            num(pg, "/calls")
        };
    }
    if per > 0.0 { cpu * 1e6 / per } else { f64::NAN }
}

/// Prints the checks and returns them as JSON: `{name: {"status", "detail"}}`.
pub fn print(
    phases: &Map<String, Value>,
    memory: &Value,
    jetstream: &Value,
    pg_baseline_us: Option<f64>,
) -> Value {
    let (closed, rate) = (&phases["closed"], &phases["rate"]);
    // In the order printed (a JSON map may sort its keys).
    let mut checks: Vec<(String, Value)> = Vec::new();
    let mut add = |name: &str, status: &str, detail: String| {
        checks.push((name.into(), json!({"status": status, "detail": detail})));
    };

    let ngx = num(closed, "/nginx/rps");
    for (target, floor) in [("full", 0.7), ("local", 0.9)] {
        let rps = num(closed, &format!("/{target}/rps"));
        add(
            &format!("{target} req/s >= {floor}x nginx, closed loop"),
            verdict(rps / ngx >= floor),
            format!("{:.2}x ({rps:.0} / {ngx:.0} req/s)", rps / ngx),
        );
    }
    let ngx_p99 = num(rate, "/nginx/p99_ms");
    for (target, informational) in [("full", false), ("fulljs", true)] {
        let p99 = num(rate, &format!("/{target}/p99_ms"));
        let pass = p99 <= ngx_p99 + 2.0;
        add(
            &format!("{target} p99 <= nginx p99 + 2 ms, fixed rate"),
            if informational { "INFO" } else { verdict(pass) },
            format!(
                "{p99:.3} ms vs {:.3} ms ({}){}",
                ngx_p99 + 2.0,
                if pass { "within" } else { "over" },
                if informational { ", informational" } else { "" }
            ),
        );
    }
    let mut dropped = Vec::new();
    let mut unequal = Vec::new();
    let (mut dropped_sum, mut all_equal) = (0, true);
    for (target, acc) in [("full", memory), ("fulljs", jetstream)] {
        for phase in ["closed", "rate"] {
            let a = &acc[phase];
            let d = a["dropped"].as_u64().unwrap_or(u64::MAX);
            dropped_sum += d.min(1 << 40);
            dropped.push(format!("{target}/{phase} {d}"));
            let equal = a["ledger_equals_responses"] == json!(true);
            all_equal &= equal;
            unequal.push(format!(
                "{target}/{phase} {}{}{}",
                a["ledger_rows"].as_u64().unwrap_or(0),
                if equal { "=" } else { "≠" },
                a["upstream_responses"].as_u64().unwrap_or(0)
            ));
        }
    }
    add(
        "zero usage events dropped",
        verdict(dropped_sum == 0),
        dropped.join(", "),
    );
    add(
        "ledger = upstream answers, every phase",
        verdict(all_equal),
        unequal.join(", "),
    );
    for target in ["full", "fulljs"] {
        let us = pg_us(phases, target);
        let (status, detail) = match pg_baseline_us {
            Some(base) => {
                let halved = us <= base / 2.0;
                (
                    if target == "full" {
                        verdict(halved)
                    } else {
                        "INFO"
                    },
                    format!(
                        "{us:.1} µs vs baseline {base:.1} µs: {:.2}x, {}",
                        us / base,
                        if halved { "halved" } else { "not halved" }
                    ),
                )
            }
            None => (
                "INFO",
                format!("{us:.1} µs (no BENCH_PG_BASELINE_US to compare)"),
            ),
        };
        add(
            &format!("{target}: PostgreSQL CPU per accounted call halved"),
            status,
            detail,
        );
    }
    // Sanity: the upstream and nginx never reach PostgreSQL, so whatever it spent during
    // their runs was someone else's work. Local mode looks keys up until its cache is warm.
    let idle = pg_us(phases, "upstream").max(pg_us(phases, "nginx"));
    add(
        "PostgreSQL CPU ~0 without metering",
        if idle < 1.0 { "INFO" } else { "WARN" },
        format!(
            "µs per call: upstream {:.2}, nginx {:.2}, local {:.2} (key lookups){}",
            pg_us(phases, "upstream"),
            pg_us(phases, "nginx"),
            pg_us(phases, "local"),
            if idle < 1.0 {
                ""
            } else {
                "; PostgreSQL was busy with other work: its figures are upper bounds"
            }
        ),
    );

    println!();
    println!("targets");
    for (name, c) in &checks {
        println!(
            "  {:<4}  {:<50} {}",
            c["status"].as_str().unwrap_or("?"),
            name,
            c["detail"].as_str().unwrap_or("")
        );
    }
    Value::Object(checks.into_iter().collect())
}
