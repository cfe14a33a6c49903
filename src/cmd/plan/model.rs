//! The plan's model: the load and the machine ([`PlanInput`]), the four dimensions
//! each sized against one generator machine, the cluster that answers them
//! ([`ClusterPlan`]) and the report with its notes ([`PlanReport`]); pure functions of
//! the input.

use super::fleet_plan;
use crate::limits::PLAN_GENERATORS_MAX;
use crate::run_plan::PlanError;
use crate::units::{fmt_amount, fmt_big, fmt_count};
use serde::Serialize;

/// Bytes of memory per connection behind [`crate::limits::CONNS_PER_MACHINE_DEFAULT`].
pub const CONN_MEMORY_BYTES: u64 = 16 << 10;
/// The NIC speed of the "what if" line.
pub const WHAT_IF_NIC_GBPS: f64 = 100.0;
/// Ephemeral ports per (source IP, destination) with Linux's default
/// `ip_local_port_range` (32768-60999): more connections per generator need
/// `--source-ip` or a wider range.
pub const DEFAULT_PORT_RANGE: u64 = 28_232;

/// The load and the generator machine, validated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanInput {
    pub users: u64,
    /// Messages per second per user, client to target.
    pub up_msg_rate: f64,
    /// Messages per second per user, target to client.
    pub down_msg_rate: f64,
    pub up_bytes: f64,
    pub down_bytes: f64,
    /// Framing bytes added to every message on the wire (`--frame-overhead`).
    pub frame_overhead_bytes: f64,
    pub streams_per_conn: u64,
    /// Cores of one generator machine.
    pub cores: u64,
    pub nic_gbps: f64,
    /// Busy CPU per message (encode or decode), ns.
    pub cost_ns_per_msg: f64,
    /// Where the cost came from: `--cost-ns-per-msg`, or the `--from` or
    /// `--from-frames` file.
    pub cost_source: String,
    /// `--from-frames`: the frames run the cost was measured in (`null` otherwise).
    pub cost_from_frames: Option<FramesCost>,
    pub syscalls_per_core: f64,
    pub cpu_watermark: f64,
    pub nic_watermark: f64,
    pub conns_per_machine: u64,
    /// `--target` of the fleet's commands (`$TARGET` when not given).
    pub target: String,
    /// `--duration` of the fleet's commands, as given.
    pub duration: String,
}

/// One dimension: what the load needs, what one machine gives, how many machines.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dimension {
    pub name: &'static str,
    pub unit: &'static str,
    pub demand: f64,
    pub per_machine: f64,
    /// `demand / per_machine`, unrounded.
    pub machines: f64,
    /// Whole machines: `machines` rounded up.
    pub machines_needed: u64,
}

/// The CPU demand's two parts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuDemand {
    /// users x (up + down msg/s) x cost per message, in cores.
    pub message_cores: f64,
    /// connections x (up + down msg/s).
    pub syscalls_per_s: f64,
    /// syscalls/s / syscalls per core.
    pub syscall_cores: f64,
    pub total_cores: f64,
}

/// The answer for one machine type.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterPlan {
    pub nic_gbps: f64,
    pub connections: u64,
    pub cpu: CpuDemand,
    /// connections, cpu, uplink, downlink.
    pub dimensions: Vec<Dimension>,
    /// Name of the dimension needing the most machines.
    pub binding: &'static str,
    pub generators: u64,
    pub coordinators: u64,
    /// generators + coordinators.
    pub machines: u64,
    pub connections_per_generator: u64,
}

/// `blaster plan`'s output (text and `--json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanReport {
    pub schema_version: u32,
    pub mode: &'static str,
    pub input: PlanInput,
    pub plan: ClusterPlan,
    /// The same load with a 100 Gbps NIC on each generator.
    pub with_100gbps_nic: ClusterPlan,
    /// The sized cluster as commands: shards, per-shard command lines, Kubernetes and
    /// Ansible values.
    pub fleet: fleet_plan::FleetPlan,
    /// `--from-frames` measured with another number of members per connection than
    /// `--streams-per-conn` (see [`members_warning`]); `null` when they agree or the
    /// cost is not from a frames run.
    pub members_per_connection_warning: Option<String>,
    pub notes: Vec<String>,
}

/// Whole machines for a fractional need: rounded up, ignoring float noise below 1e-9
/// (so 9.000000001 is 9, not 10). A need past u64 (or infinite) saturates: it is never
/// taken for zero machines.
pub fn whole_machines(machines: f64) -> u64 {
    if machines.is_nan() || machines <= 0.0 {
        return 0;
    }
    // `as` saturates at u64::MAX, infinity included.
    (machines - 1e-9).ceil().max(0.0) as u64
}

fn dimension(name: &'static str, unit: &'static str, demand: f64, per_machine: f64) -> Dimension {
    let machines = if per_machine > 0.0 {
        demand / per_machine
    } else {
        f64::INFINITY
    };
    Dimension {
        name,
        unit,
        demand,
        per_machine,
        machines,
        machines_needed: whole_machines(machines),
    }
}

/// Connections the load holds: users / streams per connection, rounded up.
pub fn connections_needed(i: &PlanInput) -> u64 {
    i.users.div_ceil(i.streams_per_conn.max(1))
}

/// The connections dimension.
pub fn connections_dimension(i: &PlanInput) -> Dimension {
    dimension(
        "connections",
        "connections",
        connections_needed(i) as f64,
        i.conns_per_machine as f64,
    )
}

/// CPU demand: message cost plus syscalls (one send, one receive per connection tick).
pub fn cpu_demand(i: &PlanInput) -> CpuDemand {
    let msgs_per_user = i.up_msg_rate + i.down_msg_rate;
    let message_cores = i.users as f64 * msgs_per_user * i.cost_ns_per_msg / 1e9;
    let syscalls_per_s = connections_needed(i) as f64 * msgs_per_user;
    let syscall_cores = syscalls_per_s / i.syscalls_per_core;
    CpuDemand {
        message_cores,
        syscalls_per_s,
        syscall_cores,
        total_cores: message_cores + syscall_cores,
    }
}

/// The CPU dimension, against cores x CPU watermark.
pub fn cpu_dimension(i: &PlanInput) -> Dimension {
    dimension(
        "cpu",
        "cores",
        cpu_demand(i).total_cores,
        i.cores as f64 * i.cpu_watermark,
    )
}

/// Gbit/s on the wire for `users` x `rate` messages of `bytes` + overhead.
fn gbps(i: &PlanInput, rate: f64, bytes: f64) -> f64 {
    i.users as f64 * rate * (bytes + i.frame_overhead_bytes) * 8.0 / 1e9
}

/// The uplink dimension (client to target), against NIC x NIC watermark.
pub fn uplink_dimension(i: &PlanInput) -> Dimension {
    dimension(
        "uplink",
        "Gbps",
        gbps(i, i.up_msg_rate, i.up_bytes),
        i.nic_gbps * i.nic_watermark,
    )
}

/// The downlink dimension (target to client), against NIC x NIC watermark.
pub fn downlink_dimension(i: &PlanInput) -> Dimension {
    dimension(
        "downlink",
        "Gbps",
        gbps(i, i.down_msg_rate, i.down_bytes),
        i.nic_gbps * i.nic_watermark,
    )
}

/// Sizes the cluster: the dimension needing the most machines binds; at least one
/// generator; plus one coordinator.
pub fn plan_cluster(i: &PlanInput) -> ClusterPlan {
    let dimensions = vec![
        connections_dimension(i),
        cpu_dimension(i),
        uplink_dimension(i),
        downlink_dimension(i),
    ];
    let binding = dimensions
        .iter()
        .fold(&dimensions[0], |best, d| {
            if d.machines > best.machines { d } else { best }
        })
        .name;
    let generators = dimensions
        .iter()
        .map(|d| d.machines_needed)
        .max()
        .unwrap_or(1)
        .max(1);
    let connections = connections_needed(i);
    ClusterPlan {
        nic_gbps: i.nic_gbps,
        connections,
        cpu: cpu_demand(i),
        dimensions,
        binding,
        generators,
        coordinators: 1,
        machines: generators.saturating_add(1),
        connections_per_generator: connections.div_ceil(generators),
    }
}

/// The inputs each dimension's demand and per-machine share come from, for an answer
/// too large to be a plan.
fn dimension_flags(name: &str) -> &'static str {
    match name {
        "connections" => "--users, --streams-per-conn and --conns-per-machine",
        "cpu" => {
            "--users, --msg-rate, --cost-ns-per-msg, --syscalls-per-core, --cores and \
             --cpu-watermark"
        }
        "uplink" => "--users, --msg-rate, --up-bytes, --nic-gbps and --nic-watermark",
        _ => "--users, --down-msg-rate, --down-bytes, --nic-gbps and --nic-watermark",
    }
}

/// The full report: the plan, the same load with a 100 Gbps NIC, and notes. A plan
/// needing more than [`PLAN_GENERATORS_MAX`] generators is refused as a usage error
/// naming the binding dimension's inputs: such an answer comes from a unit mistake.
pub fn plan_report(i: &PlanInput) -> Result<PlanReport, PlanError> {
    let plan = plan_cluster(i);
    if plan.generators > PLAN_GENERATORS_MAX {
        let d = plan
            .dimensions
            .iter()
            .find(|d| d.name == plan.binding)
            .expect("the binding dimension is one of them");
        return Err(PlanError {
            flag: "users",
            message: format!(
                "the load needs {} generator machines ({} binds: {} {} at {} per machine), \
                 more than the {} a plan sizes: check {}",
                fmt_machines_big(d.machines),
                d.name,
                fmt_big(d.demand),
                d.unit,
                fmt_big(d.per_machine),
                fmt_count(PLAN_GENERATORS_MAX),
                dimension_flags(d.name)
            ),
        });
    }
    let with_100gbps_nic = plan_cluster(&PlanInput {
        nic_gbps: WHAT_IF_NIC_GBPS,
        ..i.clone()
    });
    let mut notes = Vec::new();
    if plan.connections_per_generator > DEFAULT_PORT_RANGE {
        notes.push(format!(
            "{} connections per generator exceed the {} ephemeral ports of Linux's default \
             ip_local_port_range per (source IP, destination): widen the range or use \
             several source IPs",
            fmt_count(plan.connections_per_generator),
            fmt_count(DEFAULT_PORT_RANGE)
        ));
    }
    if let Some(f) = &i.cost_from_frames {
        notes.extend(frames_notes(i, f));
    }
    if plan.generators > crate::limits::SHARDS_MAX as u64 {
        notes.push(format!(
            "{} generator machines are more shards than `blaster run --shard` takes ({}): \
             the fleet's commands run only with larger machines (more --cores, a faster \
             --nic-gbps or more --conns-per-machine) or a smaller load per run",
            fmt_count(plan.generators),
            fmt_count(crate::limits::SHARDS_MAX as u64)
        ));
    }
    let members_per_connection_warning = i
        .cost_from_frames
        .as_ref()
        .and_then(|f| members_warning(f.members_per_connection, i.streams_per_conn));
    Ok(PlanReport {
        schema_version: crate::report::SCHEMA_VERSION,
        mode: "plan",
        input: i.clone(),
        members_per_connection_warning,
        fleet: fleet_plan::fleet_plan(i, &plan),
        plan,
        with_100gbps_nic,
        notes,
    })
}

/// What the plan should say about a cost measured in a frames run: its per-frame
/// figure averages sending and receiving, so it is exact at the run's mix of the two.
fn frames_notes(i: &PlanInput, f: &FramesCost) -> Vec<String> {
    let mut notes = Vec::new();
    let run = f.down_per_up();
    let load = i.down_msg_rate / i.up_msg_rate;
    if run > 2.0 * load || load > 2.0 * run {
        notes.push(format!(
            "the frames run received {} frames per frame sent, this load {}: its CPU per \
             frame averages sending and receiving, so it holds at the run's mix; measure a \
             run whose room size (and --echo-to-sender) gives this load's mix",
            fmt_amount(run),
            fmt_amount(load)
        ));
    }
    if !f.valid {
        notes.push(format!(
            "the frames run in {} was invalid (the generator was saturated): its CPU per \
             frame may not hold at a sustainable load",
            f.file
        ));
    }
    notes
}

/// A fractional machine count: `9.0`, `3.5`, `0.04`; two decimals when one would hide
/// the round-up (`4.04`, which needs 5 machines, not `4.0`).
pub fn fmt_machines(v: f64) -> String {
    let one = format!("{v:.1}");
    let hides_round_up = one
        .parse::<f64>()
        .is_ok_and(|shown| whole_machines(shown) != whole_machines(v));
    if v < 0.1 || hides_round_up {
        format!("{v:.2}")
    } else {
        one
    }
}

/// A machine count however large: [`fmt_machines`] up to a million, `2.1e12` past it.
fn fmt_machines_big(v: f64) -> String {
    if v < 1e6 {
        fmt_machines(v)
    } else {
        format!("{v:.2e}")
    }
}

/// The client CPU per frame of a frames run (`--from-frames`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FramesCost {
    pub file: String,
    /// `frames.cpu_ns_per_frame`: busy CPU / (frames sent + frames received), ns.
    pub cpu_ns_per_frame: f64,
    /// `frames.busy_cpu_ns`, `frames.sent`, `frames.received`.
    pub busy_cpu_ns: u64,
    pub sent: u64,
    pub received: u64,
    /// `frames.cpu_basis`: `busy` (exact) or `busy_at_most` (an upper bound).
    pub cpu_basis: String,
    /// The run's top-level `valid`.
    pub valid: bool,
    /// `frames.members_per_connection`: the members (streams) each connection of the
    /// measured run carried (absent from the report: 1).
    pub members_per_connection: u64,
    /// `frames.room_size`, `frames.senders_per_room` and `frames.proto` of the measured
    /// run: the fleet's frames commands run the same rooms.
    pub room_size: u64,
    pub senders_per_room: u64,
    pub proto: String,
}

impl FramesCost {
    /// Frames received per frame sent in the measured run.
    pub fn down_per_up(&self) -> f64 {
        self.received as f64 / self.sent.max(1) as f64
    }

    /// The `cost_source` line: where the figure came from and what it is.
    pub(super) fn source(&self) -> String {
        format!(
            "client CPU per frame sent or received, measured in {} with {} member{} per \
             connection: {:.3} s busy CPU / ({} sent + {} received){}",
            self.file,
            fmt_count(self.members_per_connection),
            if self.members_per_connection == 1 {
                ""
            } else {
                "s"
            },
            self.busy_cpu_ns as f64 / 1e9,
            fmt_count(self.sent),
            fmt_count(self.received),
            if self.cpu_basis == "busy" {
                ""
            } else {
                ", at most (the run's workers were preempted while spinning)"
            }
        )
    }
}

/// The warning when the frames run carried another number of members per connection
/// than the plan's streams: the kernel's cost per frame (a send or a receive call, a
/// wake-up) is shared by the streams of a connection, so a cost measured with fewer
/// members per connection overstates the fleet, and with more understates it.
pub fn members_warning(measured: u64, streams_per_conn: u64) -> Option<String> {
    if measured == streams_per_conn {
        return None;
    }
    let (way, fleet) = if measured < streams_per_conn {
        ("overstates", "larger")
    } else {
        ("understates", "smaller")
    };
    Some(format!(
        "the frames run carried {} member{} per connection, this plan {} streams: the kernel's \
         cost per frame is shared by a connection's streams, so its CPU per frame {way} the \
         cost here and the fleet is likely {fleet} than needed; measure with \
         --members-per-connection {}",
        fmt_count(measured),
        if measured == 1 { "" } else { "s" },
        fmt_count(streams_per_conn),
        streams_per_conn
    ))
}
