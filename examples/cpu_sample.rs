//! Prints the CPU time a process tree has used so far, for the benchmark's PostgreSQL
//! windows: `{"user_s": U, "system_s": S}` (see `support/proc_cpu.rs` for what counts).
//!
//! `cargo run --release --example cpu_sample -- --clk-tck 100 PID [PID...]`

use clap::Parser;

#[path = "support/proc_cpu.rs"]
mod proc_cpu;

#[derive(Parser)]
struct Args {
    /// Clock ticks per second (`getconf CLK_TCK`).
    #[arg(long, default_value_t = 100.0)]
    clk_tck: f64,
    /// Roots of the tree; their descendants count too.
    #[arg(required = true)]
    pids: Vec<u32>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let now = proc_cpu::tree(&args.pids)?;
    println!("{}", now.since(proc_cpu::Ticks::default(), args.clk_tck));
    Ok(())
}
