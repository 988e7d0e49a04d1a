//! The quickstarts, run: the README's and the full walkthrough's (`docs/quickstart.md`).
//! Every command block between a document's `quickstart` markers runs in one bash
//! session against a real gateway in the demo's configuration (its admin token and plan
//! catalogue, a local upstream), and what comes back is compared with the sample printed
//! under it — statuses, error codes, header names, JSON field names, and the status
//! codes of call loops — so the samples cannot go stale.

use std::collections::BTreeSet;
use std::path::PathBuf;

use secrecy::SecretString;
use serde_json::Value;
use tollgate::config::{Config, PlanConfig, Sources};

use crate::common::*;

const DEMO_GATEWAY: &str = "http://127.0.0.1:8080";
const DEMO_ADMIN_TOKEN: &str = "demo-admin-token";
const END: &str = "@@quickstart-block-end@@";

/// `(commands, sample output)` of each block of a document's quickstart, in order.
fn quickstart(doc: &str) -> Vec<(String, String)> {
    let start = doc
        .find("<!-- quickstart -->")
        .expect("a quickstart marker");
    let end = doc
        .find("<!-- /quickstart -->")
        .expect("a quickstart end marker");
    let mut blocks = Vec::new();
    let mut fences = doc[start..end].split("```").skip(1).step_by(2);
    let mut pending: Option<String> = None;
    for fence in fences.by_ref() {
        let (info, body) = fence.split_once('\n').unwrap_or((fence, ""));
        if info.trim() == "sh" {
            if let Some(commands) = pending.take() {
                blocks.push((commands, String::new()));
            }
            pending = Some(body.to_owned());
        } else if let Some(commands) = pending.take() {
            blocks.push((commands, body.to_owned()));
        }
    }
    if let Some(commands) = pending {
        blocks.push((commands, String::new()));
    }
    blocks
}

/// What the comparison looks at in one output.
#[derive(Debug, Default)]
struct Shape {
    statuses: Vec<String>,
    codes: Vec<String>,
    /// Header names of each HTTP answer.
    headers: Vec<BTreeSet<String>>,
    /// Field names of each JSON object printed on a line of its own.
    fields: Vec<BTreeSet<String>>,
    /// Status codes printed by loops (`200 429 …`).
    loop_codes: Vec<BTreeSet<String>>,
}

fn shape(output: &str) -> Shape {
    let mut shape = Shape::default();
    let mut in_head = false;
    for line in output.lines().map(|l| l.trim_end_matches('\r')) {
        if let Some(rest) = line.strip_prefix("HTTP/1.1 ") {
            shape.statuses.push(rest[..3].to_owned());
            shape.headers.push(BTreeSet::new());
            in_head = true;
            continue;
        }
        if in_head {
            match line.split_once(':') {
                Some((name, _)) if !line.is_empty() => {
                    shape
                        .headers
                        .last_mut()
                        .unwrap()
                        .insert(name.to_lowercase());
                    continue;
                }
                _ => in_head = false,
            }
        }
        if let Ok(Value::Object(object)) = serde_json::from_str::<Value>(line) {
            if let Some(Value::String(code)) = object.get("code") {
                shape.codes.push(code.clone());
            }
            shape.fields.push(object.keys().cloned().collect());
            continue;
        }
        let tokens: Vec<&str> = line.split_whitespace().collect();
        if !tokens.is_empty()
            && tokens
                .iter()
                .all(|t| t.len() == 3 && t.bytes().all(|b| b.is_ascii_digit()))
        {
            shape
                .loop_codes
                .push(tokens.into_iter().map(str::to_owned).collect());
        }
    }
    shape
}

fn compare(commands: &str, sample: &str, actual: &str) {
    let (want, got) = (shape(sample), shape(actual));
    let context = format!("commands:\n{commands}\nsample:\n{sample}\nactual:\n{actual}");
    assert_eq!(want.statuses, got.statuses, "statuses differ; {context}");
    assert_eq!(want.codes, got.codes, "error codes differ; {context}");
    assert_eq!(want.headers.len(), got.headers.len(), "{context}");
    for (want, got) in want.headers.iter().zip(&got.headers) {
        let missing: Vec<_> = want.difference(got).collect();
        assert!(
            missing.is_empty(),
            "headers {missing:?} not sent; {context}"
        );
    }
    assert_eq!(want.fields, got.fields, "JSON fields differ; {context}");
    assert_eq!(want.loop_codes.len(), got.loop_codes.len(), "{context}");
    for (want, got) in want.loop_codes.iter().zip(&got.loop_codes) {
        assert!(
            got.is_subset(want),
            "loop codes {got:?} vs {want:?}; {context}"
        );
        assert_eq!(
            want.contains("429"),
            got.contains("429"),
            "refusals differ; {context}"
        );
    }
}

/// The repository's root.
fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The demo's plan catalogue (`scripts/demo.toml`), read as `scripts/demo.sh` reads it.
fn demo_plans() -> Vec<PlanConfig> {
    let sources = Sources {
        dir: repository().join("config"),
        file: Some(repository().join("scripts/demo.toml")),
        ..Sources::default()
    };
    Config::load(&sources)
        .expect("the demo's configuration")
        .plans
}

/// Runs the quickstart of `file` (a path in the repository) against a gateway in the
/// demo's configuration and compares each block's output with its sample.
async fn run_quickstart(file: &str) {
    let doc = std::fs::read_to_string(repository().join(file)).expect(file);
    let blocks = quickstart(&doc);
    assert!(blocks.len() >= 3, "the quickstart of {file} has its blocks");
    let plans = demo_plans();
    let app = spawn_app_with(|c| {
        c.admin.token = Some(SecretString::from(DEMO_ADMIN_TOKEN));
        c.plans = plans;
    })
    .await;

    let mut script = String::from("set -u\n");
    for (commands, _) in &blocks {
        script.push_str(&commands.replace(DEMO_GATEWAY, &app.base));
        script.push_str(&format!("\necho {END}\n"));
    }
    let dir = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .output()
        .await
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{file}: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let outputs: Vec<&str> = stdout.split(&format!("{END}\n")).collect();
    assert_eq!(outputs.len(), blocks.len() + 1, "{file}: {stdout}");
    for ((commands, sample), actual) in blocks.iter().zip(outputs) {
        compare(commands, sample, actual);
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{file} leaves files behind: {left:?}");
}

#[tokio::test]
async fn the_readme_quickstart_answers_what_it_shows() {
    run_quickstart("README.md").await;
}

#[tokio::test]
async fn the_docs_quickstart_answers_what_it_shows() {
    run_quickstart("docs/quickstart.md").await;
}
