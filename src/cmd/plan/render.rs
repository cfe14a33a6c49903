//! The text of `blaster plan`: the load, the machine, the dimensions' table, the CPU
//! arithmetic, the answer, the fleet's commands and the notes.

use super::fleet_plan;
use super::model::{PlanReport, fmt_machines};
use crate::units::{fmt_amount, fmt_big, fmt_count};

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
