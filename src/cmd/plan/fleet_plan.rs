//! The fleet a plan sizes, as commands (issue 13, item 7): the shard count, the
//! `blaster run` arguments of the whole run (totals: each shard takes its share), the
//! exact command line of every shard, and the values for the Kubernetes Indexed Job
//! (`scripts/k8s-run.sh`) and the Ansible inventory (`deploy/ansible/`).
//!
//! The run is the plan's load as a request/response timetable: one request per message
//! sent (`users x --msg-rate` per second) over the planned connections, `--up-bytes` per
//! request. The start instant and run id are left as `$START` and `$RUN_ID`: they are
//! chosen when the fleet starts (the wrappers choose them), not when it is planned.
//!
//! With `--from-frames` the run is the plan's load as frames instead
//! ([`frames_run_args`]): `--workload frames`, `--members-per-connection` the plan's
//! streams per connection, the plan's connections, the measured run's rooms, a
//! `--tick` of one message interval and `--frame-size` the message's bytes. Each
//! machine runs its whole rooms of that one run with `--shard i/N` (rooms numbered
//! as in the whole run, so no two machines share a room), started together with
//! `--start-at`.
//!
//! The shards' command lines are one command with `$SHARD` for the index
//! ([`FleetPlan::shard_command`]); they are also listed one by one for a fleet of at most
//! [`PLAN_SHARD_COMMANDS_LISTED_MAX`] shards. Nothing here grows with the fleet: a plan
//! for a million machines is as small as one for three.

use super::{ClusterPlan, FramesCost, PlanInput};
use crate::limits::PLAN_SHARD_COMMANDS_LISTED_MAX;
use crate::proto::frame::{FRAME_BYTES_MAX, HEADER_BYTES};
use crate::units::fmt_number;
use serde::Serialize;

/// The fleet: what to run where.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetPlan {
    /// Shards: one per generator machine.
    pub shards: u64,
    /// `--cores` on each generator: every core but core 0, which the control thread
    /// and the kernel's interrupts keep.
    pub cores: String,
    /// `request` (a request/response timetable cut by `--shard`) or `frames` (each
    /// machine runs its share of the rooms, `--from-frames`).
    pub workload: &'static str,
    /// `blaster run` arguments, the same on every shard: the whole run's (each shard
    /// takes its share), or for frames one machine's share.
    pub run_args: Vec<String>,
    /// The command line of every shard, with `$SHARD` for its index (0 .. shards - 1):
    /// `SHARD=3 sh -c "$shard_command"` runs shard 3.
    pub shard_command: String,
    /// The command line of shard i, i = 0..shards, when there are at most
    /// [`PLAN_SHARD_COMMANDS_LISTED_MAX`] shards; `null` for a larger fleet (use
    /// `shard_command`).
    pub shard_commands: Option<Vec<String>>,
    pub kubernetes: KubernetesValues,
    pub ansible: AnsibleValues,
}

/// Values of the Kubernetes Indexed Job (`deploy/k8s/job.yaml`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KubernetesValues {
    pub completions: u64,
    pub parallelism: u64,
    /// Whole CPUs per pod (Guaranteed QoS): the machine's cores.
    pub cpus: u64,
    /// The wrapper that renders, applies, waits and merges.
    pub command: String,
}

/// Values of the Ansible run (`deploy/ansible/blaster.yml`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnsibleValues {
    /// Hosts in the inventory's `generators` group (the shard index is a host's place).
    pub generators: u64,
    pub blaster_cores: String,
    pub blaster_args: Vec<String>,
}

/// `1-31` for 32 cores; `0` for a single-core machine.
fn worker_cores(cores: u64) -> String {
    match cores {
        0 | 1 => "0".into(),
        2 => "1".into(),
        n => format!("1-{}", n - 1),
    }
}

/// Quotes an argument for a POSIX shell when it needs it; `$SHARD` is left for the
/// shell to expand.
fn sh_quote(a: &str) -> String {
    let rest = a.replace(SHARD_VAR, "");
    let plain = !a.is_empty()
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@%+".contains(&b));
    if plain || a.starts_with('$') {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

fn line(args: &[String]) -> String {
    args.iter()
        .map(|a| sh_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `--tick` for `rate` messages per second per member: one interval, in whole
/// microseconds (at least 1).
pub fn tick_of(rate: f64) -> String {
    format!("{}us", (1e6 / rate).round().max(1.0) as u64)
}

/// `--frame-size` for messages of `bytes`: at least the frame header (the stamp every
/// frame carries), at most the largest frame.
pub fn frame_size_of(bytes: f64) -> usize {
    (bytes.round().max(0.0) as usize).clamp(HEADER_BYTES, FRAME_BYTES_MAX)
}

/// The `blaster run` arguments of a frames fleet (each machine adds its `--shard`):
/// `connections` (the whole run's), the plan's streams as members per connection, the
/// measured run's rooms.
pub fn frames_run_args(i: &PlanInput, f: &FramesCost, connections: u64) -> Vec<String> {
    let mut a: Vec<String> = [
        "--target",
        &i.target,
        "--workload",
        "frames",
        "--members-per-connection",
        &i.streams_per_conn.to_string(),
        "--connections",
        &connections.to_string(),
        "--room-size",
        &f.room_size.to_string(),
        "--tick",
        &tick_of(i.up_msg_rate),
        "--frame-size",
        &frame_size_of(i.up_bytes).to_string(),
        "--duration",
        &i.duration,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if f.senders_per_room < f.room_size {
        a.extend(["--senders-per-room".into(), f.senders_per_room.to_string()]);
    }
    if f.proto != "blaster" {
        a.extend(["--frame-proto".into(), f.proto.clone()]);
    }
    a
}

/// The fleet for `plan`, the sizing of input `i`.
pub fn fleet_plan(i: &PlanInput, plan: &ClusterPlan) -> FleetPlan {
    let shards = plan.generators.max(1);
    let cores = worker_cores(i.cores);
    if let Some(f) = &i.cost_from_frames {
        // The frames fleet: one run of all the connections, each machine its rooms.
        let run_args = frames_run_args(i, f, plan.connections.max(1));
        return assemble(i, shards, cores, run_args, "frames");
    }
    let run_args: Vec<String> = [
        "--target",
        &i.target,
        "--rate",
        &fmt_number(i.users as f64 * i.up_msg_rate),
        "--connections",
        &plan.connections.to_string(),
        "--payload-size",
        &fmt_number(i.up_bytes.round()),
        "--duration",
        &i.duration,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assemble(i, shards, cores, run_args, "request")
}

/// A fleet of `shards` machines running `run_args` on `cores`, all started at
/// `$START`, one JSON each, each with `--shard i/N`: its share of one timetable (a
/// request run) or its whole rooms of one frames run. The per-shard commands are
/// listed only for a small fleet.
fn assemble(
    i: &PlanInput,
    shards: u64,
    cores: String,
    run_args: Vec<String>,
    workload: &'static str,
) -> FleetPlan {
    let command = |s: &str| {
        let mut a: Vec<String> = vec!["blaster".into(), "run".into()];
        a.extend(run_args.iter().cloned());
        a.extend(["--cores".into(), cores.clone()]);
        a.extend(["--shard".into(), format!("{s}/{shards}")]);
        a.extend([
            "--start-at".into(),
            "$START".into(),
            "--run-id".into(),
            "$RUN_ID".into(),
            "--json".into(),
            format!("shard-{s}.json"),
        ]);
        line(&a)
    };
    let shard_command = command(SHARD_VAR);
    let shard_commands = (shards <= PLAN_SHARD_COMMANDS_LISTED_MAX)
        .then(|| (0..shards).map(|s| command(&s.to_string())).collect());
    let k8s = format!(
        "scripts/k8s-run.sh --shards {shards} --cpus {} --image IMAGE -- {}",
        i.cores,
        line(&run_args)
    );
    FleetPlan {
        shards,
        cores: cores.clone(),
        workload,
        run_args: run_args.clone(),
        shard_command,
        shard_commands,
        kubernetes: KubernetesValues {
            completions: shards,
            parallelism: shards,
            cpus: i.cores,
            command: k8s,
        },
        ansible: AnsibleValues {
            generators: shards,
            blaster_cores: cores,
            blaster_args: run_args,
        },
    }
}

/// The shell variable standing for the shard index in [`FleetPlan::shard_command`].
const SHARD_VAR: &str = "$SHARD";

/// The fleet's part of the text report.
pub fn render(f: &FleetPlan) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nfleet: {} shard{}, one per generator machine, started together at $START \
         (--start-at, RFC 3339 or Unix ms) with one $RUN_ID:",
        f.shards,
        if f.shards == 1 { "" } else { "s" }
    );
    if f.workload == "frames" {
        let _ = writeln!(
            s,
            "  frames: one run of every room; each machine runs its whole rooms (--shard), \
             numbered as in the whole run, and `blaster merge` adds them up"
        );
    }
    match &f.shard_commands {
        Some(list) => {
            for c in list {
                let _ = writeln!(s, "  {c}");
            }
        }
        None => {
            let _ = writeln!(
                s,
                "  {}\n  (one command for every shard, with SHARD = 0 .. {})",
                f.shard_command,
                f.shards - 1
            );
        }
    }
    let _ = writeln!(
        s,
        "kubernetes: completions = parallelism = {}, {} CPUs per pod:\n  {}",
        f.kubernetes.completions, f.kubernetes.cpus, f.kubernetes.command
    );
    let _ = writeln!(
        s,
        "ansible: {} hosts in [generators], blaster_cores: \"{}\", blaster_args: [{}]",
        f.ansible.generators,
        f.ansible.blaster_cores,
        f.ansible
            .blaster_args
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_cores_leave_core_0_to_the_control_thread() {
        assert_eq!(worker_cores(1), "0");
        assert_eq!(worker_cores(2), "1");
        assert_eq!(worker_cores(32), "1-31");
    }

    #[test]
    fn arguments_are_quoted_only_when_a_shell_needs_it() {
        assert_eq!(sh_quote("10.0.0.5:9000"), "10.0.0.5:9000");
        assert_eq!(sh_quote("$START"), "$START");
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_quote(""), "''");
        assert_eq!(sh_quote("shard-$SHARD.json"), "shard-$SHARD.json");
        assert_eq!(sh_quote("a$HOME"), "'a$HOME'");
    }

    fn frames_input(streams: u64) -> (PlanInput, FramesCost) {
        let f = FramesCost {
            file: "f.json".into(),
            cpu_ns_per_frame: 500.0,
            busy_cpu_ns: 1,
            sent: 1,
            received: 9,
            cpu_basis: "busy".into(),
            valid: true,
            members_per_connection: 1,
            room_size: 10,
            senders_per_room: 10,
            proto: "blaster".into(),
        };
        let i = PlanInput {
            users: 4_000_000,
            up_msg_rate: 30.0,
            down_msg_rate: 300.0,
            up_bytes: 50.0,
            down_bytes: 50.0,
            frame_overhead_bytes: 0.0,
            streams_per_conn: streams,
            cores: 32,
            nic_gbps: 25.0,
            cost_ns_per_msg: 500.0,
            cost_source: String::new(),
            cost_from_frames: Some(f.clone()),
            syscalls_per_core: 1e6,
            cpu_watermark: 0.65,
            nic_watermark: 0.7,
            conns_per_machine: 1_000_000,
            target: "10.0.0.5:9000".into(),
            duration: "60s".into(),
        };
        (i, f)
    }

    #[test]
    fn a_frames_fleet_runs_frames_with_the_streams_as_members() {
        assert_eq!(tick_of(30.0), "33333us");
        assert_eq!(tick_of(1e9), "1us");
        assert_eq!(frame_size_of(50.0), 50);
        assert_eq!(frame_size_of(3.0), HEADER_BYTES);
        assert_eq!(frame_size_of(1e9), FRAME_BYTES_MAX);
        let (i, mut f) = frames_input(100);
        let a = frames_run_args(&i, &f, 4_000).join(" ");
        assert_eq!(
            a,
            "--target 10.0.0.5:9000 --workload frames --members-per-connection 100 \
             --connections 4000 --room-size 10 --tick 33333us --frame-size 50 --duration 60s"
        );
        f.senders_per_room = 2;
        f.proto = "nats".into();
        let a = frames_run_args(&i, &f, 4_000).join(" ");
        assert!(
            a.ends_with("--senders-per-room 2 --frame-proto nats"),
            "{a}"
        );
        // The fleet: one run of the 40,000 connections, each machine its rooms.
        let plan = super::super::model::plan_cluster(&i);
        let fleet = fleet_plan(&i, &plan);
        assert_eq!(fleet.workload, "frames");
        assert!(
            fleet.shard_command.starts_with(
                "blaster run --target 10.0.0.5:9000 --workload frames --members-per-connection 100 --connections 40000 "
            ),
            "{}",
            fleet.shard_command
        );
        assert!(
            fleet
                .shard_command
                .contains(&format!("--shard '$SHARD/{}'", plan.generators))
                || fleet
                    .shard_command
                    .contains(&format!("--shard $SHARD/{}", plan.generators)),
            "{}",
            fleet.shard_command
        );
        assert!(
            !fleet.shard_command.contains("--rate"),
            "{}",
            fleet.shard_command
        );
        // Without --from-frames: the request/response fleet, as before.
        let i = PlanInput {
            cost_from_frames: None,
            ..i
        };
        let fleet = fleet_plan(&i, &plan);
        assert_eq!(fleet.workload, "request");
        assert!(
            fleet.shard_command.contains("--rate"),
            "{}",
            fleet.shard_command
        );
    }
}
