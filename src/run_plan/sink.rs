//! `blaster sink`'s arguments -> a [`SinkConfig`].

use super::parse::*;
use super::*;
use crate::cli::SinkArgs;
use crate::limits::*;
use crate::sink::{
    AggregateConfig, BroadcastConfig, CLOSE_EVERY_MAX, CLOSE_EVERY_MIN, DEFAULT_TICK,
    ROOM_SIZE_MAX, SinkConfig, SinkMode, TCP_DOWN_BYTES_MAX, TICK_MAX, TICK_MIN,
    UDP_DOWN_BYTES_MAX, UDP_FIXED_REPLY_BYTES_MAX, UDP_FIXED_REPLY_BYTES_MIN, down_bytes_min,
};
use std::time::Duration;

/// `blaster sink --mode broadcast`'s flags: the rooms, or none in the other modes
/// (where each broadcast flag is refused).
fn sink_broadcast(
    a: &SinkArgs,
    mode: SinkMode,
    cores: &[usize],
) -> Result<Option<BroadcastConfig>, PlanError> {
    if mode != SinkMode::Broadcast {
        let given = [
            ("room-size", a.room_size.is_some()),
            ("members-per-connection", a.members_per_connection.is_some()),
            ("echo-to-sender", a.echo_to_sender),
            ("aggregate", a.aggregate),
            ("down-size", a.down_size.is_some()),
            ("tick", a.tick.is_some()),
        ];
        return match given.into_iter().find(|(_, set)| *set) {
            Some((flag, _)) => Err(err(
                flag,
                format!("needs --mode broadcast, got --mode {mode}"),
            )),
            None => Ok(None),
        };
    }
    let Some(room_size) = a.room_size else {
        return Err(err("room-size", "is required by --mode broadcast"));
    };
    if !(1..=ROOM_SIZE_MAX).contains(&room_size) {
        return Err(err(
            "room-size",
            format!("must be between 1 and {ROOM_SIZE_MAX}, got {room_size}"),
        ));
    }
    if cores.len() != 1 {
        return Err(err(
            "cores",
            format!(
                "--mode broadcast runs on one core (a room is never split across threads), got {}",
                crate::units::list_cores(cores)
            ),
        ));
    }
    if !a.aggregate {
        for (flag, set) in [
            ("down-size", a.down_size.is_some()),
            ("tick", a.tick.is_some()),
        ] {
            if set {
                return Err(err(flag, "needs --aggregate"));
            }
        }
    }
    let aggregate = if a.aggregate {
        let Some(down_size) = a.down_size else {
            return Err(err("down-size", "is required by --aggregate"));
        };
        let min = down_bytes_min(room_size);
        let max = if a.udp {
            UDP_DOWN_BYTES_MAX
        } else {
            TCP_DOWN_BYTES_MAX
        };
        if down_size < min {
            return Err(err(
                "down-size",
                format!(
                    "must hold the {}-byte header and {room_size} entries of {} bytes \
                     ({min} bytes), got {down_size}",
                    crate::proto::frame::HEADER_BYTES,
                    crate::proto::frame::ENTRY_BYTES
                ),
            ));
        }
        if down_size > max {
            return Err(err(
                "down-size",
                format!("must be at most {max} bytes, got {down_size}"),
            ));
        }
        let tick = match a.tick.as_deref() {
            Some(t) => parse_duration("tick", t)?,
            None => DEFAULT_TICK,
        };
        if !(TICK_MIN..=TICK_MAX).contains(&tick) {
            return Err(err(
                "tick",
                format!(
                    "must be between {} and {}, got {:?}",
                    humantime::format_duration(TICK_MIN),
                    humantime::format_duration(TICK_MAX),
                    a.tick.as_deref().unwrap_or_default()
                ),
            ));
        }
        Some(AggregateConfig { down_size, tick })
    } else {
        None
    };
    let rooms_per_connection = a.members_per_connection.unwrap_or(1);
    if !(1..=MEMBERS_PER_CONNECTION_MAX).contains(&rooms_per_connection) {
        return Err(err(
            "members-per-connection",
            format!(
                "must be between 1 and {MEMBERS_PER_CONNECTION_MAX}, got {rooms_per_connection}"
            ),
        ));
    }
    if rooms_per_connection > 1 && (a.udp || aggregate.is_some()) {
        return Err(err(
            "members-per-connection",
            "needs TCP and relayed frames (not --udp, not --aggregate)",
        ));
    }
    if a.http2 && (a.udp || aggregate.is_some()) {
        return Err(err(
            "http2",
            "gRPC rooms (--mode broadcast --http2) relay each frame over HTTP/2 on TCP: \
             not with --udp or --aggregate",
        ));
    }
    Ok(Some(BroadcastConfig {
        room_size,
        rooms_per_connection,
        echo_to_sender: a.echo_to_sender,
        aggregate,
        grpc: a.http2,
    }))
}

/// The checks that depend on TCP or UDP (`--udp`), each naming the flag as typed:
/// the sink's own validation would catch the same and more, but names its fields and
/// is a runtime error.
fn sink_transport(a: &SinkArgs, mode: SinkMode) -> Result<(), PlanError> {
    if !a.udp {
        if mode == SinkMode::Count {
            return Err(err(
                "mode",
                "count needs --udp: only the UDP sink counts datagrams",
            ));
        }
        return Ok(());
    }
    if let SinkMode::Fixed(n) = mode
        && !(UDP_FIXED_REPLY_BYTES_MIN..=UDP_FIXED_REPLY_BYTES_MAX).contains(&n)
    {
        return Err(err(
            "mode",
            format!(
                "fixed:N with --udp: N must be between {UDP_FIXED_REPLY_BYTES_MIN} (the \
                 request's blaster header is copied into the reply) and \
                 {UDP_FIXED_REPLY_BYTES_MAX} (the largest UDP payload), got {n}"
            ),
        ));
    }
    if a.delay.is_some() {
        return Err(err("delay", "needs TCP: the UDP sink answers at once"));
    }
    if a.delay_dist.is_some() {
        return Err(err("delay-dist", "needs TCP: the UDP sink answers at once"));
    }
    if a.stall.is_some() && mode != SinkMode::Broadcast {
        return Err(err(
            "stall",
            "with --udp needs --mode broadcast: the UDP sink stalls only in broadcast mode",
        ));
    }
    Ok(())
}

/// Validates `blaster sink` arguments into a sink configuration.
pub fn sink_config(
    a: &SinkArgs,
    usable: &[usize],
) -> Result<(SinkConfig, Option<Duration>), PlanError> {
    let listen = resolve("listen", &a.listen)?;
    let cores = parse_cores("cores", &a.cores, usable)?;
    let mode: SinkMode = a.mode.parse().map_err(|m: String| err("mode", m))?;
    sink_transport(a, mode)?;
    if a.request_size > 0 && (a.udp || !matches!(mode, SinkMode::Fixed(_))) {
        return Err(err(
            "request-size",
            format!(
                "needs --mode fixed:N over TCP, got --mode {mode}{}",
                if a.udp { " --udp" } else { "" }
            ),
        ));
    }
    let delay = a
        .delay
        .as_deref()
        .map(|d| parse_duration("delay", d))
        .transpose()?;
    let delay_exp_mean = delay_exp_mean(a, mode)?;
    let stall = stall(a)?;
    if a.max_connections == 0 || a.max_connections > CONNECTIONS_MAX {
        return Err(err(
            "max-connections",
            format!(
                "must be between 1 and {CONNECTIONS_MAX}, got {}",
                a.max_connections
            ),
        ));
    }
    let duration = a
        .duration
        .as_deref()
        .map(|d| parse_duration("duration", d))
        .transpose()?;
    if !(0.0..1.0).contains(&a.drop) {
        return Err(err(
            "drop",
            format!("must be at least 0 and below 1, got {}", a.drop),
        ));
    }
    if a.drop > 0.0 && !a.udp {
        return Err(err("drop", "needs --udp"));
    }
    let close_every = close_every(a)?;
    if !(0.0..=1.0).contains(&a.reset_ratio) {
        return Err(err(
            "reset-ratio",
            format!("must be between 0 and 1, got {}", a.reset_ratio),
        ));
    }
    if a.reset_ratio > 0.0 && a.udp {
        return Err(err(
            "reset-ratio",
            "needs TCP: the UDP sink holds no connections",
        ));
    }
    if a.no_direct_descriptors && a.udp {
        return Err(err(
            "no-direct-descriptors",
            "needs TCP: the UDP sink accepts no connections",
        ));
    }
    let broadcast = sink_broadcast(a, mode, &cores)?;
    Ok((
        SinkConfig {
            listen,
            cores,
            mode,
            request_size: a.request_size,
            delay,
            delay_exp_mean,
            stall,
            max_connections_per_core: a.max_connections,
            udp: a.udp,
            drop_ratio: a.drop,
            seed: a.seed,
            close_every,
            reset_ratio: a.reset_ratio,
            direct_descriptors: !a.no_direct_descriptors,
            broadcast,
            reuse_port: a.reuse_port,
        },
        duration,
    ))
}

/// `--delay-dist exp:MEAN`: the mean of the exponential service delay, above 0 and
/// not in broadcast mode.
fn delay_exp_mean(a: &SinkArgs, mode: SinkMode) -> Result<Option<Duration>, PlanError> {
    a.delay_dist
        .as_deref()
        .map(|d| {
            let mean = d.strip_prefix("exp:").ok_or_else(|| {
                err(
                    "delay-dist",
                    format!(
                        "expected exp:MEAN (an exponential of mean MEAN, e.g. exp:200us), got {d:?}"
                    ),
                )
            })?;
            let mean = parse_duration("delay-dist", mean)?;
            if mean.is_zero() {
                return Err(err("delay-dist", "the mean must be above 0"));
            }
            if mode == SinkMode::Broadcast {
                return Err(err(
                    "delay-dist",
                    "not in broadcast mode (its relay holds every send by --delay)",
                ));
            }
            Ok(mean)
        })
        .transpose()
}

/// `--stall S --every E`: a stall of S every E, S shorter than E; none unless both
/// are given.
fn stall(a: &SinkArgs) -> Result<Option<(Duration, Duration)>, PlanError> {
    Ok(match (&a.stall, &a.every) {
        (Some(s), Some(e)) => {
            let s = parse_duration("stall", s)?;
            let e = parse_duration("every", e)?;
            if e.is_zero() || s >= e {
                return Err(err(
                    "stall",
                    "must be shorter than --every, and --every above 0",
                ));
            }
            Some((s, e))
        }
        _ => None,
    })
}

/// `--close-every`: over TCP only, within its bounds.
fn close_every(a: &SinkArgs) -> Result<Option<Duration>, PlanError> {
    let close_every = a
        .close_every
        .as_deref()
        .map(|d| parse_duration("close-every", d))
        .transpose()?;
    if let Some(every) = close_every {
        if a.udp {
            return Err(err(
                "close-every",
                "needs TCP: the UDP sink holds no connections",
            ));
        }
        if !(CLOSE_EVERY_MIN..=CLOSE_EVERY_MAX).contains(&every) {
            return Err(err(
                "close-every",
                format!(
                    "must be between {} and {}, got {:?}",
                    humantime::format_duration(CLOSE_EVERY_MIN),
                    humantime::format_duration(CLOSE_EVERY_MAX),
                    a.close_every.as_deref().unwrap_or_default()
                ),
            ));
        }
    }
    Ok(close_every)
}
