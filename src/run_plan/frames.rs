//! `--workload frames`: the frame flags into a [`FramePlan`].

use super::parse::*;
use super::*;
use crate::cli::RunArgs;
use crate::engine::worker_plan::{FramePlan, SlowReaders};
use crate::limits::*;
use crate::proto::frame_proto::{
    Echo, FrameProtoKind, FrameSpec, GrpcSpec, SpecError, TOPIC_DEFAULT, WS_PATH_DEFAULT, grpc,
};
use crate::schedule::{FrameGrid, RoomLayout, SENDERS_ALL};

/// `--room-size` when not given.
pub const ROOM_SIZE_DEFAULT: usize = 10;

/// `--workload`, `--tick`, `--frame-size`, `--room-size`, `--frame-budget`,
/// `--echo-to-sender`, `--aggregate`: the frame run, or `None` for request/response
/// (where the frame flags are refused).
pub(super) fn frame_plan(a: &RunArgs) -> Result<Option<FramePlan>, PlanError> {
    let frame_flags = a.work.tick.is_some()
        || a.work.frame_size.is_some()
        || a.work.room_size.is_some()
        || a.work.frame_budget.is_some()
        || a.work.echo_to_sender
        || a.work.frame_proto.is_some()
        || a.work.frame_topic.is_some()
        || a.work.ws_path.is_some()
        || a.work.senders_per_room.is_some()
        || a.work.members_per_connection.is_some()
        || a.work.room_layout.is_some()
        || a.work.slow_readers.is_some();
    match a.work.workload.as_str() {
        "requests" => {
            if a.work.aggregate {
                return Err(err("aggregate", "needs --workload frames"));
            }
            if a.work.down_size.is_some() {
                return Err(err("down-size", "needs --workload frames --aggregate"));
            }
            if !a.load.grpc_metadata.is_empty() && a.load.grpc.is_none() {
                return Err(err(
                    "grpc-metadata",
                    "needs --grpc (the calls it goes with)",
                ));
            }
            if frame_flags {
                return Err(err(
                    "workload",
                    "--tick, --frame-size, --room-size, --frame-budget, --echo-to-sender, --frame-proto, \
                     --frame-topic, --ws-path, --senders-per-room, --members-per-connection, \
                     --room-layout and --slow-readers need --workload frames",
                ));
            }
            return Ok(None);
        }
        "frames" => {}
        w => {
            return Err(err(
                "workload",
                format!("expected requests or frames, got {w:?}"),
            ));
        }
    }
    let tick_s = a.work.tick.as_deref().unwrap_or("33ms");
    let tick_ns = parse_duration("tick", tick_s)?.as_nanos();
    if !(u128::from(TICK_NS_MIN)..=u128::from(TICK_NS_MAX)).contains(&tick_ns) {
        return Err(err(
            "tick",
            format!("must be between 1ms and 10s, got {tick_s:?}"),
        ));
    }
    let tick_ns = tick_ns as u64;
    let frame_size = a.work.frame_size.unwrap_or(50);
    let (lo, hi) = (
        crate::proto::frame::HEADER_BYTES,
        crate::proto::frame::FRAME_BYTES_MAX,
    );
    if !(lo..=hi).contains(&frame_size) {
        return Err(err(
            "frame-size",
            format!("must be between {lo} (the frame header) and {hi} bytes, got {frame_size}"),
        ));
    }
    let room_size = a.work.room_size.unwrap_or(ROOM_SIZE_DEFAULT);
    if room_size == 0 || room_size > a.connections || room_size > usize::from(u16::MAX) {
        return Err(err(
            "room-size",
            format!(
                "must be between 1 and --connections ({}), got {room_size}",
                a.connections
            ),
        ));
    }
    let budget_ns = match a.work.frame_budget.as_deref() {
        Some(b) => duration_ns("frame-budget", b, TIMEOUT_NS_MAX)?,
        None => tick_ns,
    };
    let down_size = aggregate_plan(a, room_size)?;
    // --connect-rate: a PCU ramp; connection j opens at j / rate (the whole run's
    // index, so shards keep one timetable).
    let join_gap_ns = match a.connect_rate {
        None => 0,
        Some(r) => {
            if !(r.is_finite() && r > 0.0) {
                return Err(err("connect-rate", format!("must be above 0, got {r}")));
            }
            (1e9 / r).round().max(1.0) as u64
        }
    };
    let mut spec = frame_spec(a, frame_size)?;
    let senders = senders_per_room(a, room_size)?;
    // Listeners never send the first frame the built-in sink learns a member from:
    // every connection joins with a join frame instead.
    spec.join_frames = (senders as usize) < room_size;
    let joined_at_start = spec.joins();
    let members_per_connection = members_per_connection(a, spec.kind, room_size)?;
    let room_layout = room_layout(a, members_per_connection)?;
    let slow_readers = slow_readers(a)?;
    let echo = match spec.kind.echo() {
        Echo::Always => true,
        Echo::Never | Echo::ServerDefined => a.work.echo_to_sender,
    };
    let grid = FrameGrid {
        tick_ns,
        connections: a.connections as u64,
        room_size: room_size as u64,
        join_gap_ns,
        joined_at_start,
        senders,
    };
    Ok(Some(FramePlan {
        spec,
        grid,
        frame_size,
        budget_ns,
        echo,
        down_size,
        members_per_connection,
        room_layout,
        slow_readers,
        // All of them; `--shard` cuts them down with the other totals.
        first_room: 0,
        room_count: grid.rooms(),
    }))
}

/// `--members-per-connection M`: 1 without it. Member slot s of each connection is in
/// a room of slot s, so a connection joins M rooms: TCP, relayed frames, and a
/// protocol that joins several rooms on one connection.
fn members_per_connection(
    a: &RunArgs,
    kind: FrameProtoKind,
    room_size: usize,
) -> Result<usize, PlanError> {
    let Some(m) = a.work.members_per_connection else {
        return Ok(1);
    };
    if !(1..=MEMBERS_PER_CONNECTION_MAX).contains(&m) {
        return Err(err(
            "members-per-connection",
            format!("must be between 1 and {MEMBERS_PER_CONNECTION_MAX}, got {m}"),
        ));
    }
    let rooms = (a.connections as u64).div_ceil(room_size as u64);
    if (m as u64).saturating_mul(rooms) > u64::from(u32::MAX) {
        return Err(err(
            "members-per-connection",
            format!("{m} x {rooms} rooms is more rooms than a frame's 32-bit room id names"),
        ));
    }
    if m > 1 {
        let refused = if a.work.proto != "tcp" {
            Some("carries several members on a TCP connection; --proto udp sends one per socket")
        } else if a.work.aggregate {
            Some("--aggregate addresses one member per connection")
        } else if kind == FrameProtoKind::Ws {
            Some("a WebSocket is one room's path (--ws-path), so it carries one member")
        } else {
            None
        };
        if let Some(why) = refused {
            return Err(err("members-per-connection", why));
        }
    }
    Ok(m)
}

/// `--room-layout`: mixed without it; refused where there is no slot past the first
/// to place (it would change nothing).
fn room_layout(a: &RunArgs, members_per_connection: usize) -> Result<RoomLayout, PlanError> {
    let Some(l) = a.work.room_layout.as_deref() else {
        return Ok(RoomLayout::default());
    };
    let layout = l.parse().map_err(|e| err("room-layout", e))?;
    if members_per_connection < 2 {
        return Err(err(
            "room-layout",
            "places the members of slots past the first: needs --members-per-connection 2 or more",
        ));
    }
    Ok(layout)
}

/// `--slow-readers RATIO:RATE`: `None` without it.
fn slow_readers(a: &RunArgs) -> Result<Option<SlowReaders>, PlanError> {
    let Some(s) = a.work.slow_readers.as_deref() else {
        return Ok(None);
    };
    let flag = "slow-readers";
    let Some((ratio, rate)) = s.split_once(':') else {
        return Err(err(
            flag,
            format!("expected RATIO:RATE such as 0.1:10KB (0: stop reading), got {s:?}"),
        ));
    };
    let ratio: f64 = match ratio.trim().parse() {
        Ok(r) if r > 0.0 && r <= 1.0 => r,
        _ => {
            return Err(err(
                flag,
                format!("RATIO must be above 0 and at most 1, got {ratio:?}"),
            ));
        }
    };
    let rate_bytes_per_s = parse_byte_rate(rate).ok_or_else(|| {
        err(
            flag,
            format!(
                "RATE must be bytes per second such as 0, 512, 10KB, 64KiB or 1MB, got {rate:?}"
            ),
        )
    })?;
    let refused = if a.work.proto != "tcp" {
        Some("slows a TCP connection's reads; --proto udp has no reader to slow")
    } else if a.load.tls.tls {
        Some("paces plaintext reads; not with --tls")
    } else if a.work.aggregate {
        Some("accounts relayed frames per reader; not with --aggregate")
    } else {
        None
    };
    if let Some(why) = refused {
        return Err(err(flag, why));
    }
    Ok(Some(SlowReaders::new(ratio, rate_bytes_per_s)))
}

/// Bytes per second: a number with an optional unit (`B`, `KB`/`kB`/`K` = 1000,
/// `KiB` = 1024, `MB`/`M` = 10^6, `MiB` = 2^20) and an optional `/s`.
fn parse_byte_rate(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "k" | "KB" | "kB" => 1000,
        "KiB" => 1 << 10,
        "M" | "MB" => 1_000_000,
        "MiB" => 1 << 20,
        _ => return None,
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// `--senders-per-room K`: members 0..K of each room send; [`SENDERS_ALL`] without it.
/// Listeners join before the run (a subscription, or blaster's join frame), so they
/// need TCP, relayed frames and no ramp.
fn senders_per_room(a: &RunArgs, room_size: usize) -> Result<u64, PlanError> {
    let Some(k) = a.work.senders_per_room else {
        return Ok(SENDERS_ALL);
    };
    if !(1..=room_size).contains(&k) {
        return Err(err(
            "senders-per-room",
            format!("must be between 1 and --room-size ({room_size}), got {k}"),
        ));
    }
    if k < room_size {
        let refused = if a.work.proto != "tcp" {
            Some("listeners join over TCP; --proto udp has no join")
        } else if a.work.aggregate {
            Some("--aggregate sends every member a downlink frame; it has no listeners")
        } else if a.connect_rate.is_some() {
            Some("listeners join before the run starts; --connect-rate ramps joins during it")
        } else {
            None
        };
        if let Some(why) = refused {
            return Err(err("senders-per-room", why));
        }
    }
    Ok(k as u64)
}

/// `--frame-proto`, `--frame-topic`, `--ws-path`: the adapter every connection speaks,
/// and what it cannot be combined with.
fn frame_spec(a: &RunArgs, frame_size: usize) -> Result<FrameSpec, PlanError> {
    let kind: FrameProtoKind = match a.work.frame_proto.as_deref() {
        None => FrameProtoKind::Blaster,
        Some(p) => p.parse().map_err(spec_err)?,
    };
    let topical = matches!(
        kind,
        FrameProtoKind::Nats | FrameProtoKind::Mqtt | FrameProtoKind::Resp
    );
    if a.work.frame_topic.is_some() && !topical {
        return Err(err("frame-topic", "needs --frame-proto nats, mqtt or resp"));
    }
    if a.work.ws_path.is_some() && kind != FrameProtoKind::Ws {
        return Err(err("ws-path", "needs --frame-proto ws"));
    }
    if kind != FrameProtoKind::Blaster {
        if a.work.proto != "tcp" {
            return Err(err(
                "frame-proto",
                format!(
                    "{kind} runs over TCP; --proto {} carries only blaster frames",
                    a.work.proto
                ),
            ));
        }
        if a.work.aggregate {
            return Err(err(
                "aggregate",
                format!("is the built-in sink's mode; --frame-proto {kind} relays each frame"),
            ));
        }
        if a.connect_rate.is_some() {
            return Err(err(
                "connect-rate",
                format!(
                    "a ramp joins members during the run, which the accounting plans only for \
                     --frame-proto blaster (the sink learns a member from its first frame); \
                     {kind} members join before the run starts"
                ),
            ));
        }
        if a.work.echo_to_sender && kind.echo() != Echo::ServerDefined {
            return Err(err(
                "echo-to-sender",
                format!(
                    "{kind} decides echo by its own rule (docs/frames.md): {}",
                    if kind.echo() == Echo::Always {
                        "it always delivers a sender's frames back, and blaster expects them"
                    } else {
                        "blaster asks the server not to echo"
                    }
                ),
            ));
        }
    }
    let host = a.load.target.first().map_or("localhost", String::as_str);
    let mut spec = FrameSpec::new(
        kind,
        a.work.frame_topic.as_deref().unwrap_or(TOPIC_DEFAULT),
        a.work.ws_path.as_deref().unwrap_or(WS_PATH_DEFAULT),
        host,
        frame_size,
    )
    .map_err(spec_err)?;
    spec.grpc = grpc_spec(a, kind)?;
    Ok(spec)
}

/// `--frame-proto grpc`: the method every member calls (`--grpc`) and the metadata
/// naming its room (`--grpc-metadata`); `--grpc` with another frame protocol is
/// refused.
fn grpc_spec(a: &RunArgs, kind: FrameProtoKind) -> Result<Option<GrpcSpec>, PlanError> {
    if kind != FrameProtoKind::Grpc {
        if a.load.grpc.is_some() || !a.load.grpc_metadata.is_empty() {
            return Err(err(
                "grpc",
                "with --workload frames, needs --frame-proto grpc (each member a bidi call)",
            ));
        }
        if a.load.h2_keepalive.is_some() {
            return Err(err(
                "h2-keepalive",
                "with --workload frames, needs --frame-proto grpc (PINGs are HTTP/2's)",
            ));
        }
        return Ok(None);
    }
    let Some(method) = a.load.grpc.as_deref() else {
        return Err(err(
            "frame-proto",
            "grpc needs --grpc SERVICE/METHOD: the bidirectional streaming method each member calls",
        ));
    };
    let unary = [
        ("grpc-message", a.load.grpc_message.is_some()),
        ("grpc-proto", a.load.grpc_proto.is_some()),
        ("grpc-json", a.load.grpc_json.is_some()),
    ];
    if let Some((flag, _)) = unary.iter().find(|(_, set)| *set) {
        return Err(err(
            flag,
            "a unary call's message: with --workload frames each message is a frame (its \
             stamp and padding, --frame-size)",
        ));
    }
    let path = crate::proto::grpc::path(method).map_err(|m| err("grpc", m))?;
    let metadata = if a.load.grpc_metadata.is_empty() {
        grpc::metadata_default()
    } else {
        a.load
            .grpc_metadata
            .iter()
            .map(|m| grpc::Metadata::parse(m))
            .collect::<Result<_, _>>()
            .map_err(|m| err("grpc-metadata", m))?
    };
    Ok(Some(GrpcSpec {
        path,
        metadata,
        scheme: if a.tls.tls { "https" } else { "http" },
        keepalive_ns: super::build::h2_keepalive_ns(a)?,
    }))
}

/// A [`SpecError`] (which names its flag) as the plan's usage error.
fn spec_err(e: SpecError) -> PlanError {
    let text = e.to_string();
    let (flag, message) = text.split_once(": ").unwrap_or(("--frame-proto", &text));
    let flag = match flag {
        "--frame-topic" => "frame-topic",
        "--ws-path" => "ws-path",
        "--frame-size" => "frame-size",
        _ => "frame-proto",
    };
    err(flag, message)
}

/// `--aggregate --down-size B`: the downlink frame's size, checked as the sink checks
/// it; `None` for relayed frames.
fn aggregate_plan(a: &RunArgs, room_size: usize) -> Result<Option<usize>, PlanError> {
    if !a.work.aggregate {
        if a.work.down_size.is_some() {
            return Err(err("down-size", "needs --aggregate"));
        }
        return Ok(None);
    }
    // A downlink frame is placed on the timetable by the room frames it carries; a
    // room of one without echo carries none (nothing is broadcast).
    if room_size == 1 && !a.work.echo_to_sender {
        return Err(err(
            "aggregate",
            "needs a broadcast: rooms of at least 2 (--room-size) or --echo-to-sender",
        ));
    }
    let Some(down) = a.work.down_size else {
        return Err(err("down-size", "is required by --aggregate"));
    };
    let (min, max) = (
        crate::sink::down_bytes_min(room_size),
        crate::proto::frame::FRAME_BYTES_MAX,
    );
    if !(min..=max).contains(&down) {
        return Err(err(
            "down-size",
            format!(
                "must be between {min} (the header and {room_size} entries, as the sink requires) and {max} bytes, got {down}"
            ),
        ));
    }
    Ok(Some(down))
}
