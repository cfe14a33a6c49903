//! Unit tests of the plan: grammars, cross-flag checks, the worker split.

use super::parse::*;
use super::*;
use crate::cli::RunArgs;
use crate::limits::DURATION_NS_MAX;

#[test]
fn core_lists_parse() {
    let usable: Vec<usize> = (0..16).collect();
    assert_eq!(parse_cores("cores", "3", &usable).unwrap(), vec![3]);
    assert_eq!(parse_cores("cores", "4-6", &usable).unwrap(), vec![4, 5, 6]);
    assert_eq!(
        parse_cores("cores", "0,2,4-6", &usable).unwrap(),
        vec![0, 2, 4, 5, 6]
    );
    let e = parse_cores("cores", "99", &usable).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--cores: unknown core 99: this process may use cores 0-15"
    );
    assert!(parse_cores("cores", "3-1", &usable).is_err());
    assert!(parse_cores("cores", "a", &usable).is_err());
    assert!(parse_cores("cores", "1,1", &usable).is_err());
}

#[test]
fn escapes_decode() {
    assert_eq!(
        unescape("payload", r"GET\r\n\x41\\").unwrap(),
        b"GET\r\nA\\"
    );
    assert!(unescape("payload", r"\q").is_err());
    assert!(unescape("payload", r"\x4").is_err());
}

#[test]
fn durations_are_checked() {
    assert_eq!(
        duration_ns("duration", "10s", DURATION_NS_MAX).unwrap(),
        10_000_000_000
    );
    assert_eq!(
        duration_ns("max-lag", "250us", DURATION_NS_MAX).unwrap(),
        250_000
    );
    assert!(duration_ns("duration", "10x", DURATION_NS_MAX).is_err());
    assert!(duration_ns("duration", "0s", DURATION_NS_MAX).is_err());
}

/// `blaster run ARGS...` as clap parses it.
fn run_args(extra: &[&str]) -> RunArgs {
    use clap::Parser;
    let argv = ["blaster", "run"].iter().chain(extra);
    match crate::cli::Cli::try_parse_from(argv).unwrap().command {
        crate::cli::Command::Run(a) => a,
        _ => unreachable!(),
    }
}

#[test]
fn rate_and_split() {
    assert!(check_rate("rate", 0.0).is_err());
    assert!(check_rate("rate", f64::NAN).is_err());
    assert!(check_rate("rate", -5.0).is_err());
    let args = run_args(&[
        "--target",
        "127.0.0.1:9",
        "--cores",
        "0-2",
        "--rate",
        "9000",
        "--duration",
        "1s",
        "--max-lag",
        "1ms",
        "--quiet",
    ]);
    let plan = RunPlan::from_args(&args, &[0, 1, 2]).unwrap();
    let ws = plan.worker_plans(plan.target.unwrap(), 9000.0, plan.duration_ns);
    assert_eq!(
        ws.iter().map(|w| w.connections).collect::<Vec<_>>(),
        [22, 21, 21]
    );
    assert!(ws.iter().all(|w| w.rate_rps == 9000.0 && w.workers == 3));
    let mut bad = args.clone();
    bad.connections = 0;
    assert_eq!(
        RunPlan::from_args(&bad, &[0, 1, 2])
            .unwrap_err()
            .to_string(),
        "--connections: must be between 1 and 1048576, got 0"
    );
    bad = args.clone();
    bad.pipeline = 0;
    assert!(RunPlan::from_args(&bad, &[0, 1, 2]).is_err());
    bad = args.clone();
    bad.rate = None;
    assert!(RunPlan::from_args(&bad, &[0, 1, 2]).is_err());
}

#[test]
fn control_core_defaults_to_a_spare_core() {
    let plan = |extra: &[&str], usable: &[usize]| {
        let mut a = vec!["--target", "127.0.0.1:9", "--rate", "10", "--quiet"];
        a.extend_from_slice(extra);
        RunPlan::from_args(&run_args(&a), usable).map(|p| p.control_core)
    };
    assert_eq!(plan(&["--cores", "0-1"], &[0, 1, 2, 3]).unwrap(), 2);
    assert_eq!(plan(&["--cores", "0-1"], &[0, 1]).unwrap(), 0);
    assert_eq!(plan(&["--control-core", "1"], &[0, 1]).unwrap(), 1);
    assert_eq!(
        plan(&["--control-core", "7"], &[0, 1])
            .unwrap_err()
            .to_string(),
        "--control-core: unknown core 7: this process may use cores 0-1"
    );
}
