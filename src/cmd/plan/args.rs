//! `blaster plan`'s flags -> a validated [`PlanInput`]: every bound checked and named
//! by its flag, and the per-message cost read from `--from` (a baseline's or a run's
//! report) or `--from-frames` (a frames run's).

use super::model::{FramesCost, PlanInput};
use crate::cli::PlanArgs;
use crate::limits::{
    PLAN_NIC_GBPS_MIN, PLAN_SYSCALLS_PER_CORE_MIN, PLAN_USERS_MAX, PLAN_WATERMARK_MIN,
};
use crate::run_plan::PlanError;
use crate::units::fmt_input;

/// Messages per second per user: far past any real client, so only nonsense is refused.
const MSG_RATE_MAX: f64 = 1e9;

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
    let (cost, cost_source, cost_from_frames) = cost_from_flags(a)?;
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

/// The per-message cost, where it came from, and the frames run it was read from:
/// exactly one of `--cost-ns-per-msg`, `--from` (a baseline's or a run's report) and
/// `--from-frames` (a frames run's report).
fn cost_from_flags(a: &PlanArgs) -> Result<(f64, String, Option<FramesCost>), PlanError> {
    let read = |flag: &'static str, path: &std::path::Path| {
        crate::bounded::read_to_string(path, crate::limits::REPORT_FILE_BYTES_MAX)
            .map_err(|e| err(flag, format!("cannot read {}: {e}", path.display())))
    };
    match (&a.cost_ns_per_msg, &a.from, &a.from_frames) {
        (Some(_), Some(_), _) => Err(err("from", "give --cost-ns-per-msg or --from, not both")),
        (Some(_), None, Some(_)) => Err(err(
            "from-frames",
            "give --cost-ns-per-msg or --from-frames, not both",
        )),
        (None, Some(_), Some(_)) => {
            Err(err("from-frames", "give --from or --from-frames, not both"))
        }
        (Some(c), None, None) => Ok((*c, "--cost-ns-per-msg".to_string(), None)),
        (None, Some(path), None) => {
            let c = cost_from_report(&read("from", path)?)
                .map_err(|m| err("from", format!("{}: {m}", path.display())))?;
            Ok((
                c,
                format!("busy CPU per request measured in {}", path.display()),
                None,
            ))
        }
        (None, None, Some(path)) => {
            let f = frames_cost_from_report(&read("from-frames", path)?, path)
                .map_err(|m| err("from-frames", format!("{}: {m}", path.display())))?;
            Ok((f.cpu_ns_per_frame, f.source(), Some(f)))
        }
        (None, None, None) => Err(err(
            "cost-ns-per-msg",
            "is required (busy CPU ns per message), or --from a blaster baseline JSON, \
             or --from-frames a frames run JSON",
        )),
    }
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
