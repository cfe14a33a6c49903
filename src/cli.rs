//! Command-line definitions only (clap derive). Validation lives in `plan`.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "blaster",
    version,
    about = "Open-model TCP load generator on io_uring whose latency counts from the intended send time.",
    long_about = "Open-model TCP load generator on io_uring. Requests are sent on an absolute \
timetable; latency counts from the instant each request should have been sent, so a \
stalled target cannot hide behind coordinated omission. The run is marked invalid \
(exit code 3) when the generator itself fell behind.\n\nWith no subcommand, `blaster` \
runs `blaster run`; `blaster run` with no --target measures the generator's own \
ceiling against its built-in sink on loopback (the loopback baseline)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a load test against --target, or without --target the loopback baseline.
    Run(RunArgs),
    /// Serve as a target: the built-in io_uring sink.
    Sink(SinkArgs),
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Target address, HOST:PORT. Without it, blaster measures its own ceiling against
    /// its built-in sink on loopback (the baseline).
    #[arg(long)]
    pub target: Option<String>,

    /// Cores to run workers on, one pinned worker per core: `3`, `4-11`, `0,2,4-6`.
    /// Default: core 0.
    #[arg(long)]
    pub cores: Option<String>,

    /// Persistent connections in total, split across workers. Default: 64.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,

    /// Intended request rate in requests per second, in total across workers. Required
    /// with --target; the baseline steps its own rate.
    #[arg(long)]
    pub rate: Option<f64>,

    /// How long the schedule runs, e.g. `10s`, `500ms`, `2m`. Default: 10s.
    #[arg(long, default_value = "10s")]
    pub duration: String,

    /// Requests in flight per connection. Default: 1.
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,

    /// Request payload of N bytes (the letter x repeated). Default: 64.
    #[arg(long, conflicts_with_all = ["payload", "payload_file"])]
    pub payload_size: Option<usize>,

    /// Request payload as text; `\r`, `\n`, `\t`, `\\` and `\xHH` escapes are decoded.
    #[arg(long, conflicts_with = "payload_file")]
    pub payload: Option<String>,

    /// Request payload read from a file, sent byte for byte.
    #[arg(long)]
    pub payload_file: Option<PathBuf>,

    /// How a response ends: `echo` (as many bytes as the request) or `fixed:N`
    /// (exactly N bytes). Default: echo.
    #[arg(long, default_value = "echo")]
    pub framing: String,

    /// A request with no response after this long is an error, its latency recorded
    /// at the timeout. Default: 5s.
    #[arg(long, default_value = "5s")]
    pub timeout: String,

    /// Validity gate: a dispatch lag p99 above this marks the run invalid (exit 3).
    /// Default: 1ms.
    #[arg(long, default_value = "1ms")]
    pub max_lag: String,

    /// Write the JSON report to FILE (`-` for stdout, which then carries only JSON).
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Print the live line on stderr every second even when stderr is not a terminal.
    #[arg(long, conflicts_with = "quiet")]
    pub progress: bool,

    /// Print no live line (the default when stderr is not a terminal).
    #[arg(long)]
    pub quiet: bool,

    /// Baseline only: duration of each rate step. Default: 2s.
    #[arg(long, default_value = "2s")]
    pub step_duration: String,

    /// Baseline only: the first rate step, requests per second. Default: 20000.
    #[arg(long, default_value_t = 20_000.0)]
    pub start_rate: f64,
}

#[derive(Args, Debug, Clone)]
pub struct SinkArgs {
    /// Address to listen on, HOST:PORT. Default: 127.0.0.1:9000.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: String,

    /// Cores to serve on, one thread per core (SO_REUSEPORT). Default: core 0.
    #[arg(long, default_value = "0")]
    pub cores: String,

    /// `echo` (reply with the bytes received), `discard` (never reply) or `fixed:N`
    /// (N bytes per request). Default: echo.
    #[arg(long, default_value = "echo")]
    pub mode: String,

    /// fixed:N only: request size in bytes, one reply per this many bytes received;
    /// 0 means one reply per read. Default: 0.
    #[arg(long, default_value_t = 0)]
    pub request_size: usize,

    /// Fixed service delay before each reply, e.g. `2ms`. Default: none.
    #[arg(long)]
    pub delay: Option<String>,

    /// Freeze all serving for this long once every --every (first freeze at half of
    /// --every after the first request), e.g. `--stall 1s --every 10s`.
    #[arg(long, requires = "every")]
    pub stall: Option<String>,

    /// Period of --stall.
    #[arg(long, requires = "stall")]
    pub every: Option<String>,

    /// Connections each sink core can hold. Default: 16384.
    #[arg(long, default_value_t = 16_384)]
    pub max_connections: usize,

    /// Stop after this long (default: run until Ctrl-C).
    #[arg(long)]
    pub duration: Option<String>,
}

/// Inserts `run` when the first argument is not a subcommand, so `blaster` and
/// `blaster --cores 4-11` mean `blaster run ...`.
pub fn with_default_subcommand(mut args: Vec<String>) -> Vec<String> {
    let first = args.get(1).map(String::as_str);
    let known = matches!(
        first,
        Some("run" | "sink" | "help" | "-h" | "--help" | "-V" | "--version")
    );
    if !known {
        args.insert(1, "run".to_string());
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn default_subcommand_is_run() {
        let a = |v: &[&str]| with_default_subcommand(v.iter().map(|s| s.to_string()).collect());
        assert_eq!(a(&["blaster"]), ["blaster", "run"]);
        assert_eq!(
            a(&["blaster", "--cores", "1"]),
            ["blaster", "run", "--cores", "1"]
        );
        assert_eq!(a(&["blaster", "sink"]), ["blaster", "sink"]);
        assert_eq!(a(&["blaster", "--help"]), ["blaster", "--help"]);
    }
}
