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

/// Facts of a machine with cores `usable` on which every `--target` is a literal
/// address (no DNS), and nothing else is known.
fn local_facts(a: &RunArgs, usable: &[usize]) -> HostFacts {
    a.target.iter().fold(HostFacts::with_cores(usable), |f, t| {
        f.resolving(t, t.parse().expect("a literal address"))
    })
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
    let facts = local_facts(&args, &[0, 1, 2]);
    let plan = RunPlan::build(&args, &facts).unwrap();
    let ws = plan.worker_plans(plan.target.unwrap());
    assert_eq!(
        ws.iter().map(|w| w.connections).collect::<Vec<_>>(),
        [22, 21, 21]
    );
    assert!(ws.iter().all(|w| w.rate_rps == 9000.0 && w.workers == 3));
    let mut bad = args.clone();
    bad.connections = 0;
    assert_eq!(
        RunPlan::build(&bad, &facts).unwrap_err().to_string(),
        "--connections: must be between 1 and 1048576, got 0"
    );
    bad = args.clone();
    bad.pipeline = 0;
    assert!(RunPlan::build(&bad, &facts).is_err());
    bad = args.clone();
    bad.rate = None;
    assert!(RunPlan::build(&bad, &facts).is_err());
}

#[test]
fn control_core_defaults_to_a_spare_core() {
    let plan = |extra: &[&str], usable: &[usize]| {
        let mut a = vec!["--target", "127.0.0.1:9", "--rate", "10", "--quiet"];
        a.extend_from_slice(extra);
        let a = run_args(&a);
        RunPlan::build(&a, &local_facts(&a, usable)).map(|p| p.control_core)
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

/// Issue 11 §3: the build is a pure function of (arguments, facts). Files and
/// resolved targets come from facts made by hand; nothing on this machine is read.
#[test]
fn the_build_takes_files_and_targets_from_the_facts() {
    let a = run_args(&[
        "--target",
        "db.example:7000",
        "--payload-file",
        "/nowhere/p.bin",
        "--rate",
        "file:/nowhere/rate.csv",
        "--duration",
        "3s",
    ]);
    let addr: std::net::SocketAddr = "10.1.2.3:7000".parse().unwrap();
    let facts = HostFacts::with_cores(&[0, 1])
        .resolving("db.example:7000", addr)
        .with_file("/nowhere/p.bin", b"\x00hello")
        .with_file("/nowhere/rate.csv", b"0,100\n1,300\n");
    let plan = RunPlan::build(&a, &facts).unwrap();
    assert_eq!(plan.target, Some(addr));
    assert_eq!(&*plan.payload, b"\x00hello");
    let shape = plan.shape.as_ref().unwrap();
    assert_eq!(shape.rate_at(0.0), 100.0);
    assert_eq!(shape.rate_at(2e9), 300.0);
    // A file that could not be read is the build's error, with the flag.
    let mut unreadable = facts.clone();
    unreadable.files[0].1 = Err("Permission denied (os error 13)".into());
    assert_eq!(
        RunPlan::build(&a, &unreadable).unwrap_err().to_string(),
        "--payload-file: cannot read /nowhere/p.bin: Permission denied (os error 13)"
    );
    // A target that did not resolve: the resolver's error, at the target.
    let mut dns = facts.clone();
    dns.targets[0].1 = Err(PlanError {
        flag: "target",
        message: "\"db.example:7000\" resolves to no address".into(),
    });
    assert_eq!(
        RunPlan::build(&a, &dns).unwrap_err().to_string(),
        "--target: \"db.example:7000\" resolves to no address"
    );
}

/// Issue 11 §3: the ring layout is part of the plan, computed in the build from the
/// descriptor facts (it used to be written into the plan by the preflight).
#[test]
fn the_ring_layout_comes_from_the_descriptor_facts() {
    let a = |conns: &str| {
        run_args(&[
            "--target",
            "127.0.0.1:9",
            "--rate",
            "10",
            "--cores",
            "0-1",
            "--connections",
            conns,
        ])
    };
    let fds = |soft, hard| FdFacts {
        soft,
        hard,
        nr_open: 1 << 20,
    };
    let with = |args: &RunArgs, f: Option<FdFacts>| {
        let mut facts = local_facts(args, &[0, 1, 2]);
        facts.fds = f;
        RunPlan::build(args, &facts).unwrap()
    };
    // 300,000 connections on 2 cores, hard limit 100,000: each ring's table holds
    // 100,000 - 64, so 150,000 per core take 2 rings (the soft limit is raised).
    let big = a("300000");
    let p = with(&big, Some(fds(1024, 100_000)));
    assert_eq!(p.rings_per_core, 2);
    let layout = p.ring_layout.unwrap();
    assert_eq!(
        (layout.per_core, layout.per_ring, layout.rings),
        (150_000, 99_936, 2)
    );
    assert!(layout.fits());
    assert_eq!(p.worker_plans(p.target.unwrap()).len(), 4);
    // A hard limit of 2,000: 78 rings per core, more than blaster runs (the
    // preflight refuses it).
    let p = with(&big, Some(fds(1024, 2_000)));
    assert!(!p.ring_layout.unwrap().fits());
    // What fits one ring, unknown limits, or the baseline: one ring per core.
    assert_eq!(with(&a("1000"), Some(fds(1024, 4096))).rings_per_core, 1);
    assert_eq!(with(&big, None).rings_per_core, 1);
    let baseline = run_args(&["--cores", "0", "--connections", "300000"]);
    assert_eq!(with(&baseline, Some(fds(1024, 2_000))).rings_per_core, 1);
}

/// `--tls` without `--target`: the baseline's two sides from the certificate made at
/// start, the client naming localhost; no system roots needed (none gathered here).
#[test]
fn the_tls_baseline_plan_has_both_sides_from_the_made_certificate() {
    let a = run_args(&["--tls", "--cores", "0"]);
    let mut facts = local_facts(&a, &[0, 1]);
    let plan_err = RunPlan::build(&a, &facts).unwrap_err();
    assert_eq!(
        plan_err.to_string(),
        "--tls: the baseline's certificate was not made"
    );
    facts.baseline_cert = Some(crate::transport::tls::self_signed_localhost());
    let plan = RunPlan::build(&a, &facts).unwrap();
    let client = plan.tls.expect("the client side");
    assert_eq!(client.sni, "localhost");
    assert!(!client.insecure && plan.tls_sink.is_some());
    // With a target the plan has no server side.
    let a = run_args(&[
        "--tls",
        "--tls-insecure",
        "--target",
        "127.0.0.1:9",
        "--rate",
        "10",
    ]);
    let plan = RunPlan::build(&a, &local_facts(&a, &[0, 1])).unwrap();
    assert!(plan.tls.is_some() && plan.tls_sink.is_none());
}
