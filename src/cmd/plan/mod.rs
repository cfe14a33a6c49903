//! `blaster plan`: how many generator machines a target load needs.
//!
//! Four dimensions are sized separately, each against one generator machine's usable
//! share, and the largest wins; one more machine coordinates (starts the shards,
//! collects and merges their histograms):
//!
//! | dimension | demand | one machine gives |
//! |---|---|---|
//! | connections | users / streams per connection | `--conns-per-machine` |
//! | CPU | users x (up + down msg/s) x cost per message, plus connections x (up + down msg/s) syscalls / syscalls per core | cores x CPU watermark (0.65) |
//! | uplink | users x up msg/s x (up bytes + frame overhead) x 8 | NIC Gbps x NIC watermark (0.7) |
//! | downlink | users x down msg/s x (down bytes + frame overhead) x 8 | NIC Gbps x NIC watermark |
//!
//! The syscall term counts one send and one receive per connection per tick: the
//! streams sharing a connection are batched into one write and one read. Watermarks
//! keep headroom so the generator never becomes the bottleneck it is there to find.
//!
//! Everything here is a pure function of [`PlanInput`] except [`input_from_args`],
//! which reads `--from` or `--from-frames`. The per-message cost is given
//! (`--cost-ns-per-msg`) or measured: a baseline's busy CPU per request (`--from`), or
//! a frames run's client CPU per frame sent or received (`--from-frames`).

mod command;
pub mod fleet_plan;

pub use command::command;

use crate::cli::PlanArgs;
use crate::limits::{
    PLAN_GENERATORS_MAX, PLAN_NIC_GBPS_MIN, PLAN_SYSCALLS_PER_CORE_MIN, PLAN_USERS_MAX,
    PLAN_WATERMARK_MIN,
};
use crate::run_plan::PlanError;
use serde::Serialize;

/// Bytes of memory per connection behind [`crate::limits::CONNS_PER_MACHINE_DEFAULT`].
pub const CONN_MEMORY_BYTES: u64 = 16 << 10;
/// Messages per second per user: far past any real client, so only nonsense is refused.
const MSG_RATE_MAX: f64 = 1e9;
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
        return Err(err(
            "users",
            format!(
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
        ));
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

/// The text report.
pub fn render(r: &PlanReport) -> String {
    let i = &r.input;
    let p = &r.plan;
    let mut s = String::new();
    let down = if i.down_msg_rate == i.up_msg_rate {
        format!("{} down", fmt_amount(i.down_msg_rate))
    } else {
        format!("{} msg/s down", fmt_amount(i.down_msg_rate))
    };
    s.push_str(&format!(
        "load: {} users, {} msg/s up and {} each, {} B up and {} B down (+{} B framing), \
         {} streams per connection\n",
        fmt_count(i.users),
        fmt_amount(i.up_msg_rate),
        down,
        fmt_amount(i.up_bytes),
        fmt_amount(i.down_bytes),
        fmt_amount(i.frame_overhead_bytes),
        fmt_count(i.streams_per_conn),
    ));
    s.push_str(&format!(
        "generator machine: {} cores x {} = {:.1} effective, {} Gbps NIC x {} = {:.1} Gbps, \
         {} connections; {} ns per message ({}), {} syscalls/s per core\n\n",
        i.cores,
        i.cpu_watermark,
        i.cores as f64 * i.cpu_watermark,
        fmt_amount(i.nic_gbps),
        i.nic_watermark,
        i.nic_gbps * i.nic_watermark,
        fmt_count(i.conns_per_machine),
        fmt_amount(i.cost_ns_per_msg),
        i.cost_source,
        fmt_count(i.syscalls_per_core.round() as u64),
    ));
    s.push_str(&format!(
        "{:<12} {:<34} {:<22} {}\n",
        "dimension", "demand", "one machine", "machines"
    ));
    for d in &p.dimensions {
        let demand = match d.name {
            "connections" => format!("{} connections", fmt_count(p.connections)),
            "cpu" => format!(
                "{} + {} = {} cores",
                fmt_amount(p.cpu.message_cores),
                fmt_amount(p.cpu.syscall_cores),
                fmt_amount(p.cpu.total_cores)
            ),
            _ => format!("{} {}", fmt_amount(d.demand), d.unit),
        };
        let one = match d.name {
            "connections" => format!("{} connections", fmt_count(d.per_machine as u64)),
            "cpu" => format!("{:.1} effective cores", d.per_machine),
            _ => format!("{:.1} {}", d.per_machine, d.unit),
        };
        s.push_str(&format!(
            "{:<12} {:<34} {:<22} {} -> {}{}\n",
            d.name,
            demand,
            one,
            fmt_machines(d.machines),
            d.machines_needed,
            if d.name == p.binding {
                "  (binding)"
            } else {
                ""
            }
        ));
    }
    s.push_str(&format!(
        "\ncpu: {} users x {} msg/s x {} ns = {} cores for messages; {} connections x {} \
         syscalls/s = {} syscalls/s / {} per core = {} cores\n",
        fmt_count(i.users),
        fmt_amount(i.up_msg_rate + i.down_msg_rate),
        fmt_amount(i.cost_ns_per_msg),
        fmt_amount(p.cpu.message_cores),
        fmt_count(p.connections),
        fmt_amount(i.up_msg_rate + i.down_msg_rate),
        fmt_big(p.cpu.syscalls_per_s),
        fmt_count(i.syscalls_per_core.round() as u64),
        fmt_amount(p.cpu.syscall_cores),
    ));
    s.push_str(&format!(
        "answer: {} binds: {} generator machines + {} coordinator = {} machines\n",
        p.binding, p.generators, p.coordinators, p.machines
    ));
    let w = &r.with_100gbps_nic;
    s.push_str(&format!(
        "with a {} Gbps NIC: {} binds: {} generator machines + {} coordinator = {} machines\n",
        fmt_amount(w.nic_gbps),
        w.binding,
        w.generators,
        w.coordinators,
        w.machines
    ));
    if let Some(w) = &r.members_per_connection_warning {
        s.push_str(&format!("warning: {w}\n"));
    }
    s.push_str(&fleet_plan::render(&r.fleet));
    for n in &r.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

/// `4,000,000`.
pub fn fmt_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An amount at the precision that matters: `157`, `3.5`, `0.25`.
pub fn fmt_amount(v: f64) -> String {
    let a = v.abs();
    if a >= 10.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
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

/// A large rate: `2.4M`, `310k`, `950`; `3.1e15` past a billion.
fn fmt_big(v: f64) -> String {
    if v >= 1e9 {
        format!("{v:.2e}")
    } else if v >= 1e6 {
        format!("{}M", fmt_amount(v / 1e6))
    } else if v >= 1e4 {
        format!("{}k", fmt_amount(v / 1e3))
    } else {
        fmt_amount(v)
    }
}

fn err(flag: &'static str, message: impl Into<String>) -> PlanError {
    PlanError {
        flag,
        message: message.into(),
    }
}

fn required<T: Copy>(flag: &'static str, v: Option<T>, what: &str) -> Result<T, PlanError> {
    v.ok_or_else(|| err(flag, format!("is required ({what})")))
}

/// A finite number in `[min, max]`, or in `(min, max]` when `min_exclusive`.
fn bounded(
    flag: &'static str,
    v: f64,
    min: f64,
    min_exclusive: bool,
    max: f64,
) -> Result<f64, PlanError> {
    let low_ok = if min_exclusive { v > min } else { v >= min };
    if !v.is_finite() || !low_ok || v > max {
        let low = if min_exclusive {
            format!("greater than {min}")
        } else {
            format!("at least {min}")
        };
        return Err(err(
            flag,
            format!("must be {low} and at most {max}, got {}", fmt_input(v)),
        ));
    }
    Ok(v)
}

/// A number as the user may have typed it: `0.65`, `200000`, and `1e-300` rather than
/// three hundred digits.
fn fmt_input(v: f64) -> String {
    let a = v.abs();
    if v != 0.0 && a.is_finite() && !(1e-4..1e15).contains(&a) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// Validates `blaster plan` arguments (reading `--from` when given).
pub fn input_from_args(a: &PlanArgs) -> Result<PlanInput, PlanError> {
    let users = required("users", a.users, "concurrent users of the target load")?;
    if !(1..=PLAN_USERS_MAX).contains(&users) {
        return Err(err(
            "users",
            format!("must be between 1 and {PLAN_USERS_MAX}, got {users}"),
        ));
    }
    let up_msg_rate = required("msg-rate", a.msg_rate, "messages per second per user")?;
    let up_msg_rate = crate::units::check_rate(up_msg_rate, MSG_RATE_MAX, "messages/s")
        .map_err(|m| err("msg-rate", m))?;
    let down_msg_rate = bounded(
        "down-msg-rate",
        a.down_msg_rate.unwrap_or(up_msg_rate),
        0.0,
        false,
        MSG_RATE_MAX,
    )?;
    let up_bytes = required("up-bytes", a.up_bytes, "payload bytes per message sent")?;
    let up_bytes = bounded("up-bytes", up_bytes, 0.0, false, 1e9)?;
    let down_bytes = required(
        "down-bytes",
        a.down_bytes,
        "payload bytes per message received",
    )?;
    let down_bytes = bounded("down-bytes", down_bytes, 0.0, false, 1e9)?;
    let frame_overhead_bytes = bounded("frame-overhead", a.frame_overhead, 0.0, false, 1e6)?;
    if a.streams_per_conn == 0 {
        return Err(err("streams-per-conn", "must be at least 1, got 0"));
    }
    let cores = required("cores", a.cores, "cores of one generator machine")?;
    if cores == 0 || cores > 100_000 {
        return Err(err(
            "cores",
            format!("must be between 1 and 100000, got {cores}"),
        ));
    }
    let nic_gbps = required("nic-gbps", a.nic_gbps, "NIC speed of one generator machine")?;
    let nic_gbps = bounded("nic-gbps", nic_gbps, PLAN_NIC_GBPS_MIN, false, 1e6)?;
    let syscalls = required(
        "syscalls-per-core",
        a.syscalls_per_core,
        "syscalls one core makes per second",
    )?;
    let syscalls_per_core = bounded(
        "syscalls-per-core",
        syscalls,
        PLAN_SYSCALLS_PER_CORE_MIN,
        false,
        1e12,
    )?;
    let cpu_watermark = bounded(
        "cpu-watermark",
        a.cpu_watermark,
        PLAN_WATERMARK_MIN,
        false,
        1.0,
    )?;
    let nic_watermark = bounded(
        "nic-watermark",
        a.nic_watermark,
        PLAN_WATERMARK_MIN,
        false,
        1.0,
    )?;
    if a.conns_per_machine == 0 {
        return Err(err("conns-per-machine", "must be at least 1, got 0"));
    }
    let read = |flag: &'static str, path: &std::path::Path| {
        crate::bounded::read_to_string(path, crate::limits::REPORT_FILE_BYTES_MAX)
            .map_err(|e| err(flag, format!("cannot read {}: {e}", path.display())))
    };
    let mut cost_from_frames = None;
    let (cost, cost_source) = match (&a.cost_ns_per_msg, &a.from, &a.from_frames) {
        (Some(_), Some(_), _) => {
            return Err(err("from", "give --cost-ns-per-msg or --from, not both"));
        }
        (Some(_), None, Some(_)) => {
            return Err(err(
                "from-frames",
                "give --cost-ns-per-msg or --from-frames, not both",
            ));
        }
        (None, Some(_), Some(_)) => {
            return Err(err("from-frames", "give --from or --from-frames, not both"));
        }
        (Some(c), None, None) => (*c, "--cost-ns-per-msg".to_string()),
        (None, Some(path), None) => {
            let c = cost_from_report(&read("from", path)?)
                .map_err(|m| err("from", format!("{}: {m}", path.display())))?;
            (
                c,
                format!("busy CPU per request measured in {}", path.display()),
            )
        }
        (None, None, Some(path)) => {
            let f = frames_cost_from_report(&read("from-frames", path)?, path)
                .map_err(|m| err("from-frames", format!("{}: {m}", path.display())))?;
            let source = f.source();
            let c = f.cpu_ns_per_frame;
            cost_from_frames = Some(f);
            (c, source)
        }
        (None, None, None) => {
            return Err(err(
                "cost-ns-per-msg",
                "is required (busy CPU ns per message), or --from a blaster baseline JSON, \
                 or --from-frames a frames run JSON",
            ));
        }
    };
    let cost_ns_per_msg = bounded("cost-ns-per-msg", cost, 0.0, false, 1e9)?;
    crate::units::parse_duration(&a.duration).map_err(|m| err("duration", m))?;
    let duration = a.duration.clone();
    if let Some(t) = &a.target
        && (t.is_empty() || t.chars().any(char::is_whitespace))
    {
        return Err(err("target", format!("must be HOST:PORT, got {t:?}")));
    }
    Ok(PlanInput {
        users,
        up_msg_rate,
        down_msg_rate,
        up_bytes,
        down_bytes,
        frame_overhead_bytes,
        streams_per_conn: a.streams_per_conn,
        cores,
        nic_gbps,
        cost_ns_per_msg,
        cost_source,
        cost_from_frames,
        syscalls_per_core,
        cpu_watermark,
        nic_watermark,
        conns_per_machine: a.conns_per_machine,
        target: a.target.clone().unwrap_or_else(|| "$TARGET".into()),
        duration,
    })
}

/// The per-message cost from a blaster JSON report: a baseline's
/// `busy_cpu_ns_per_request_at_ceiling`, or a run report's mean of
/// `workers[].busy_cpu_ns_per_request`. A request is one send and one receive, and its
/// busy CPU includes the syscalls, so taking it as the cost of one message errs on the
/// safe side.
pub fn cost_from_report(text: &str) -> Result<f64, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    if is_frames_run(&v) {
        return Err(
            "a frames run report (its cost is per frame, not per request): give it with \
             --from-frames"
                .into(),
        );
    }
    if let Some(c) = v.get("busy_cpu_ns_per_request_at_ceiling") {
        let c = c.as_f64().unwrap_or(0.0);
        if c > 0.0 && c.is_finite() {
            return Ok(c);
        }
        return Err("the baseline found no valid step (busy CPU per request at the ceiling is 0): run it again".into());
    }
    if let Some(workers) = v.get("workers").and_then(|w| w.as_array()) {
        let costs: Vec<f64> = workers
            .iter()
            .filter_map(|w| w.get("busy_cpu_ns_per_request")?.as_f64())
            .filter(|c| *c > 0.0 && c.is_finite())
            .collect();
        if costs.is_empty() {
            return Err("the run report completed no requests (no busy CPU per request)".into());
        }
        return Ok(costs.iter().sum::<f64>() / costs.len() as f64);
    }
    Err(
        "not a blaster baseline report (no busy_cpu_ns_per_request_at_ceiling): \
         write one with `blaster --json FILE` (no --target)"
            .into(),
    )
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
    fn source(&self) -> String {
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

/// Whether a report is a frames run's (`mode` "frames", or a `frames` object).
fn is_frames_run(v: &serde_json::Value) -> bool {
    v.get("mode").and_then(|m| m.as_str()) == Some("frames")
        || v.get("frames").is_some_and(|f| f.is_object())
}

/// The client CPU per frame from a frames run's JSON report (`blaster run --workload
/// frames ... --json FILE`): `frames.cpu_ns_per_frame`, with the figures behind it. A
/// run that sent or received no frames measured nothing and is refused.
pub fn frames_cost_from_report(text: &str, path: &std::path::Path) -> Result<FramesCost, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let f = match v.get("frames") {
        Some(f) if f.is_object() => f,
        _ => {
            return Err(
                "not a frames run report (no `frames` figures): write one with \
                 `blaster run --workload frames ... --json FILE`"
                    .into(),
            );
        }
    };
    let count = |k: &str| f.get(k).and_then(|x| x.as_u64());
    let (Some(sent), Some(received)) = (count("sent"), count("received")) else {
        return Err("the frames figures lack `sent` or `received`".into());
    };
    if sent == 0 || received == 0 {
        return Err(format!(
            "the frames run sent {sent} and received {received} frames: no CPU per frame \
             was measured; run it again against a target that relays frames"
        ));
    }
    let (Some(cpu_ns_per_frame), Some(busy_cpu_ns)) = (
        f.get("cpu_ns_per_frame").and_then(|x| x.as_f64()),
        count("busy_cpu_ns"),
    ) else {
        return Err(
            "the frames figures lack `cpu_ns_per_frame` (written by an older blaster): \
             run it again"
                .into(),
        );
    };
    if !(cpu_ns_per_frame > 0.0 && cpu_ns_per_frame.is_finite()) {
        return Err(format!(
            "the frames run measured no CPU per frame (cpu_ns_per_frame {cpu_ns_per_frame})"
        ));
    }
    Ok(FramesCost {
        file: path.display().to_string(),
        cpu_ns_per_frame,
        busy_cpu_ns,
        sent,
        received,
        cpu_basis: f
            .get("cpu_basis")
            .and_then(|b| b.as_str())
            .unwrap_or("busy")
            .to_string(),
        valid: v.get("valid").and_then(|b| b.as_bool()).unwrap_or(true),
        members_per_connection: count("members_per_connection").unwrap_or(1).max(1),
        room_size: count("room_size").unwrap_or(0),
        senders_per_room: count("senders_per_room")
            .or(count("room_size"))
            .unwrap_or(0),
        proto: f
            .get("proto")
            .and_then(|p| p.as_str())
            .unwrap_or("blaster")
            .to_string(),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of issue 5.
    fn example() -> PlanInput {
        PlanInput {
            users: 4_000_000,
            up_msg_rate: 30.0,
            down_msg_rate: 30.0,
            up_bytes: 50.0,
            down_bytes: 150.0,
            frame_overhead_bytes: 14.0,
            streams_per_conn: 100,
            cores: 32,
            nic_gbps: 25.0,
            cost_ns_per_msg: 300.0,
            cost_source: "--cost-ns-per-msg".into(),
            cost_from_frames: None,
            syscalls_per_core: 200_000.0,
            cpu_watermark: 0.65,
            nic_watermark: 0.7,
            conns_per_machine: crate::limits::CONNS_PER_MACHINE_DEFAULT,
            target: "10.0.0.5:9000".into(),
            duration: "60s".into(),
        }
    }

    fn near(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn issue_5_worked_example() {
        let p = plan_cluster(&example());
        assert_eq!(p.connections, 40_000);
        let [conns, cpu, up, down] = &p.dimensions[..] else {
            panic!("four dimensions")
        };
        assert_eq!(conns.machines_needed, 1);
        assert!(near(p.cpu.message_cores, 72.0), "{}", p.cpu.message_cores);
        assert!(near(p.cpu.syscalls_per_s, 2_400_000.0));
        assert!(near(p.cpu.syscall_cores, 12.0));
        assert!(near(cpu.demand, 84.0));
        assert!(near(cpu.per_machine, 20.8));
        // 84 / 20.8 = 4.04: "4.0 machines" in the issue, shown as 4.04 so the round-up
        // to 5 is visible.
        assert!(near(cpu.machines, 84.0 / 20.8));
        assert_eq!(fmt_machines(cpu.machines), "4.04");
        assert_eq!(cpu.machines_needed, 5);
        assert!(near(up.demand, 61.44));
        assert!(near(up.per_machine, 17.5));
        assert_eq!(fmt_machines(up.machines), "3.5");
        assert!(near(down.demand, 157.44));
        assert_eq!(fmt_machines(down.machines), "9.0");
        assert_eq!(down.machines_needed, 9);
        assert_eq!(p.binding, "downlink");
        assert_eq!(p.generators, 9);
        assert_eq!(p.machines, 10);
    }

    #[test]
    fn a_100g_nic_moves_the_limit_to_cpu() {
        let r = plan_report(&example()).unwrap();
        let w = &r.with_100gbps_nic;
        assert_eq!(w.binding, "cpu");
        // 84 / 20.8 = 4.04 cores' worth: 5 machines, plus the coordinator.
        assert_eq!(w.generators, 5);
        assert_eq!(w.machines, 6);
        assert_eq!(r.plan.machines, 10);
    }

    #[test]
    fn text_report_shows_the_example_numbers() {
        let t = render(&plan_report(&example()).unwrap());
        for needle in [
            "40,000 connections",
            "72 + 12 = 84 cores",
            "20.8 effective cores",
            "4.04 -> 5",
            "61 Gbps",
            "3.5 -> 4",
            "157 Gbps",
            "9.0 -> 9  (binding)",
            "answer: downlink binds: 9 generator machines + 1 coordinator = 10 machines",
            "with a 100 Gbps NIC: cpu binds: 5 generator machines + 1 coordinator = 6 machines",
            "2.4M syscalls/s",
        ] {
            assert!(t.contains(needle), "{needle:?} missing from\n{t}");
        }
    }

    #[test]
    fn whole_machines_ignores_float_noise() {
        assert_eq!(whole_machines(9.000_000_000_1), 9);
        assert_eq!(whole_machines(8.997), 9);
        assert_eq!(whole_machines(4.04), 5);
        assert_eq!(whole_machines(0.0), 0);
        assert_eq!(whole_machines(f64::NAN), 0);
        assert_eq!(whole_machines(f64::INFINITY), u64::MAX);
        assert_eq!(whole_machines(1e300), u64::MAX);
    }

    #[test]
    fn tiny_loads_still_need_one_generator() {
        let p = plan_cluster(&PlanInput {
            users: 1,
            ..example()
        });
        assert_eq!(p.generators, 1);
        assert_eq!(p.machines, 2);
    }

    #[test]
    fn a_huge_fleet_is_counted_not_built() {
        // 10^11 users on a connection each: the CPU binds, (1.8M cores for messages +
        // 30M for 6e12 syscalls/s) / 20.8 per machine = 1,528,847 generators.
        let i = PlanInput {
            users: 100_000_000_000,
            streams_per_conn: 1,
            ..example()
        };
        let r = plan_report(&i).unwrap();
        assert_eq!(r.plan.binding, "cpu");
        assert_eq!(r.plan.generators, 1_528_847);
        assert_eq!(r.fleet.shards, r.plan.generators);
        assert!(r.fleet.shard_commands.is_none());
        assert!(r.fleet.shard_command.contains("--shard $SHARD/1528847"));
        let text = render(&r);
        assert!(text.len() < 8 << 10, "{} bytes", text.len());
        assert!(text.contains("SHARD = 0 .. 1528846"), "{text}");
        assert!(
            r.notes.iter().any(|n| n.contains("more shards than")),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn a_fleet_past_the_bound_is_a_usage_error_naming_the_inputs() {
        let i = PlanInput {
            users: crate::limits::PLAN_USERS_MAX,
            streams_per_conn: 1,
            conns_per_machine: 1,
            ..example()
        };
        let e = plan_report(&i).unwrap_err().to_string();
        assert!(
            e.starts_with("--users: the load needs 1.00e12 generator machines (connections binds"),
            "{e}"
        );
        assert!(
            e.contains("more than the 1,000,000,000 a plan sizes"),
            "{e}"
        );
        assert!(e.contains("--conns-per-machine"), "{e}");
        // Every dimension past u64 saturates instead of overflowing.
        let p = plan_cluster(&PlanInput {
            cost_ns_per_msg: 1e300,
            ..i
        });
        assert_eq!(p.generators, u64::MAX);
        assert_eq!(p.machines, u64::MAX);
    }

    #[test]
    fn separate_down_rate_counts_in_cpu_and_downlink() {
        let i = PlanInput {
            down_msg_rate: 60.0,
            ..example()
        };
        let p = plan_cluster(&i);
        // 4M x 90 x 300 ns = 108 cores; 40,000 x 90 = 3.6M syscalls/s = 18 cores.
        assert!(near(p.cpu.total_cores, 126.0));
        assert!(near(p.dimensions[3].demand, 2.0 * 157.44));
    }

    #[test]
    fn port_range_note_when_connections_per_generator_are_many() {
        let r = plan_report(&PlanInput {
            streams_per_conn: 1,
            conns_per_machine: 10_000_000,
            ..example()
        })
        .unwrap();
        assert!(
            r.notes.iter().any(|n| n.contains("ip_local_port_range")),
            "{:?}",
            r.notes
        );
        assert!(plan_report(&example()).unwrap().notes.is_empty());
    }

    #[test]
    fn cost_from_baseline_and_run_reports() {
        let baseline = r#"{"mode":"baseline","busy_cpu_ns_per_request_at_ceiling":812.5}"#;
        assert_eq!(cost_from_report(baseline), Ok(812.5));
        let run = r#"{"workers":[{"busy_cpu_ns_per_request":1000.0},{"busy_cpu_ns_per_request":2000.0}]}"#;
        assert_eq!(cost_from_report(run), Ok(1500.0));
        let failed = r#"{"mode":"baseline","busy_cpu_ns_per_request_at_ceiling":0.0}"#;
        assert!(
            cost_from_report(failed)
                .unwrap_err()
                .contains("no valid step")
        );
        assert!(
            cost_from_report("{}")
                .unwrap_err()
                .contains("not a blaster baseline")
        );
        assert!(
            cost_from_report("nope")
                .unwrap_err()
                .starts_with("not JSON")
        );
    }

    #[test]
    fn cost_from_a_frames_run_report() {
        let path = std::path::Path::new("f.json");
        let run = r#"{"mode":"frames","valid":true,"frames":{"sent":1000,"received":9000,
            "busy_cpu_ns":5000000,"cpu_basis":"busy","cpu_ns_per_frame":500.0}}"#;
        let f = frames_cost_from_report(run, path).unwrap();
        assert_eq!(f.cpu_ns_per_frame, 500.0);
        assert_eq!(f.down_per_up(), 9.0);
        assert!(f.source().contains("measured in f.json"), "{}", f.source());
        // Absent: one member per connection, said in the source; read when present.
        assert_eq!(f.members_per_connection, 1);
        assert!(
            f.source().contains("with 1 member per connection"),
            "{}",
            f.source()
        );
        let multi = run.replace(
            "\"sent\"",
            "\"members_per_connection\":10,\"room_size\":20,\"sent\"",
        );
        let m = frames_cost_from_report(&multi, path).unwrap();
        assert_eq!((m.members_per_connection, m.room_size), (10, 20));
        assert!(
            m.source().contains("with 10 members per connection"),
            "{}",
            m.source()
        );
        // Charged for every message up and down: 1,000 users x 60 msg/s x 500 ns.
        let i = PlanInput {
            users: 1_000,
            cost_ns_per_msg: f.cpu_ns_per_frame,
            cost_from_frames: Some(f.clone()),
            ..example()
        };
        assert!(near(cpu_demand(&i).message_cores, 0.03));
        // The run received 9 per frame sent, the load 1: said so.
        let r = plan_report(&i).unwrap();
        let notes = &r.notes;
        assert!(
            notes.iter().any(|n| n.contains("9 frames per frame sent")),
            "{notes:?}"
        );
        // Measured with 1 member per connection, planned with the example's 100.
        let w = r.members_per_connection_warning.as_deref().unwrap_or("");
        assert!(w.contains("1 member per connection, this plan 100"), "{w}");
        assert!(render(&r).contains(&format!("warning: {w}\n")));
        let same = plan_report(&PlanInput {
            streams_per_conn: 1,
            ..i.clone()
        })
        .unwrap();
        assert_eq!(same.members_per_connection_warning, None);
        // A frames run is refused by --from, another report by --from-frames.
        assert!(cost_from_report(run).unwrap_err().contains("--from-frames"));
        let baseline = r#"{"mode":"baseline","busy_cpu_ns_per_request_at_ceiling":812.5}"#;
        assert!(
            frames_cost_from_report(baseline, path)
                .unwrap_err()
                .starts_with("not a frames run report")
        );
        let none = r#"{"mode":"frames","frames":{"sent":1000,"received":0,
            "busy_cpu_ns":5000000,"cpu_ns_per_frame":5000.0}}"#;
        assert!(
            frames_cost_from_report(none, path)
                .unwrap_err()
                .contains("received 0 frames")
        );
        let old = r#"{"mode":"frames","frames":{"sent":10,"received":90,
            "cpu_ns_per_frame_received":0.0}}"#;
        assert!(
            frames_cost_from_report(old, path)
                .unwrap_err()
                .contains("older blaster")
        );
    }

    #[test]
    fn a_cost_measured_with_other_members_per_connection_is_warned() {
        assert_eq!(members_warning(100, 100), None);
        let w = members_warning(1, 100).unwrap();
        assert!(
            w.contains("1 member per connection, this plan 100 streams")
                && w.contains("overstates")
                && w.contains("--members-per-connection 100"),
            "{w}"
        );
        assert!(members_warning(100, 10).unwrap().contains("understates"));
    }

    #[test]
    fn formats() {
        assert_eq!(fmt_count(4_000_000), "4,000,000");
        assert_eq!(fmt_count(999), "999");
        assert_eq!(fmt_count(1000), "1,000");
        assert_eq!(fmt_amount(157.44), "157");
        assert_eq!(fmt_amount(3.51), "3.5");
        assert_eq!(fmt_amount(0.254), "0.25");
        assert_eq!(fmt_amount(12.0), "12");
        assert_eq!(fmt_machines(0.038), "0.04");
        assert_eq!(fmt_machines(8.997), "9.0");
        assert_eq!(fmt_machines(3.51), "3.5");
        assert_eq!(fmt_machines(4.04), "4.04");
        assert_eq!(fmt_machines(2.0), "2.0");
        assert_eq!(fmt_big(2_400_000.0), "2.4M");
    }
}
