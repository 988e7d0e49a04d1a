//! The command line as an operator meets it: the demo script refusing busy ports.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn free_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

#[test]
fn demo_refuses_a_busy_gateway_address_before_building_anything() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let started = Instant::now();
    let child = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/demo.sh"))
        .arg("--check")
        .env("TOLLGATE_DEMO_ADDR", &busy_addr)
        .env("TOLLGATE_DEMO_UPSTREAM", free_addr())
        .env("TOLLGATE_DEMO_METRICS", free_addr())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    // A demo that went on would build and start servers; stop all of it, not just bash.
    let group = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let out = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .arg("--")
                .arg(format!("-{group}"))
                .status();
            panic!("the demo was still running after 60 s");
        }
    };
    let took = started.elapsed();
    let err = stderr_of(&out);
    assert!(
        !out.status.success(),
        "exit 0; stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "stderr: {err}");
    assert!(lines[0].contains(&busy_addr), "{err}");
    assert!(
        took < Duration::from_secs(5),
        "took {took:?}: it went on past the check"
    );
    drop(busy);
}
