//! CPU time of process trees, read from `/proc/<pid>/stat` (Linux only).
//!
//! A tree is its root processes and every process descending from them. Its CPU time is,
//! over every live member, `utime + stime` (the member's own threads, live and exited)
//! plus `cutime + cstime` (the children it already reaped): so a member that exits
//! between two samples still counts, through its parent's `c*time`, once reaped. The
//! kernel keeps these in clock ticks (`getconf CLK_TCK`, 100 on Linux), so one sample is
//! exact to 10 ms.

// Each example that includes this module uses part of it.
#![allow(dead_code)]

use std::io;

/// User and kernel CPU time of a tree, in clock ticks.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ticks {
    pub user: u64,
    pub system: u64,
}

impl Ticks {
    /// `self - earlier`, in seconds, as `{"user_s", "system_s"}`.
    pub fn since(self, earlier: Ticks, clk_tck: f64) -> serde_json::Value {
        serde_json::json!({
            "user_s": self.user.saturating_sub(earlier.user) as f64 / clk_tck,
            "system_s": self.system.saturating_sub(earlier.system) as f64 / clk_tck,
        })
    }
}

struct Stat {
    pid: u32,
    ppid: u32,
    user: u64,
    system: u64,
}

/// Fields after the command name, which may itself hold spaces and parentheses.
fn parse(pid: u32, text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17.
    let n = |i: usize| f.get(i - 3).and_then(|v| v.parse::<u64>().ok());
    Some(Stat {
        pid,
        ppid: n(4)? as u32,
        user: n(14)? + n(16)?,
        system: n(15)? + n(17)?,
    })
}

fn all_processes() -> io::Result<Vec<Stat>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        // A process may exit between the listing and the read.
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            out.extend(parse(pid, &text));
        }
    }
    Ok(out)
}

/// CPU time of `roots` and all their descendants; fails when a root is not running.
pub fn tree(roots: &[u32]) -> io::Result<Ticks> {
    let procs = all_processes()?;
    let mut members: Vec<u32> = Vec::new();
    for &root in roots {
        if !procs.iter().any(|p| p.pid == root) {
            return Err(io::Error::other(format!(
                "process {root} is not running (no /proc/{root}/stat)"
            )));
        }
        members.push(root);
    }
    // Descendants: repeat until no process joins (trees here are shallow).
    loop {
        let before = members.len();
        for p in &procs {
            if members.contains(&p.ppid) && !members.contains(&p.pid) {
                members.push(p.pid);
            }
        }
        if members.len() == before {
            break;
        }
    }
    let mut ticks = Ticks::default();
    for p in procs.iter().filter(|p| members.contains(&p.pid)) {
        ticks.user += p.user;
        ticks.system += p.system;
    }
    Ok(ticks)
}

/// Parses `NAME=PID[,PID...]`.
pub fn parse_group(arg: &str) -> Result<(String, Vec<u32>), String> {
    let (name, pids) = arg
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=PID[,PID...], got {arg:?}"))?;
    let pids = pids
        .split(',')
        .map(|p| p.trim().parse::<u32>().map_err(|e| format!("{arg:?}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if name.is_empty() || pids.is_empty() {
        return Err(format!("expected NAME=PID[,PID...], got {arg:?}"));
    }
    Ok((name.to_owned(), pids))
}
