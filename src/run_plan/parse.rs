//! The flag value grammars of the plan: durations, sizes, core lists, escapes,
//! addresses, rates. Each error names its flag.

use super::*;
use crate::limits::*;
use crate::units::list_cores;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// Parses `--keepalive idle,interval,count`, e.g. `30s,10s,3`.
pub(super) fn parse_keepalive(s: &str) -> Result<(Duration, Duration, u32), PlanError> {
    let bad = || {
        err(
            "keepalive",
            format!("expected idle,interval,count such as 30s,10s,3, got {s:?}"),
        )
    };
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let [idle, interval, count] = parts[..] else {
        return Err(bad());
    };
    let idle = parse_duration("keepalive", idle)?;
    let interval = parse_duration("keepalive", interval)?;
    let count: u32 = count.parse().map_err(|_| bad())?;
    if idle.as_secs() == 0 || interval.as_secs() == 0 || count == 0 {
        return Err(err(
            "keepalive",
            format!("idle and interval must be whole seconds >= 1s and count >= 1, got {s:?}"),
        ));
    }
    Ok((idle, interval, count))
}

/// Parses a duration in the one grammar ([`crate::units::parse_duration`]).
pub fn parse_duration(flag: &'static str, s: &str) -> Result<Duration, PlanError> {
    crate::units::parse_duration(s).map_err(|m| err(flag, m))
}

pub(super) fn duration_ns(flag: &'static str, s: &str, max_ns: u64) -> Result<u64, PlanError> {
    let d = parse_duration(flag, s)?;
    let ns = d.as_nanos();
    if ns == 0 {
        return Err(err(flag, format!("must be greater than 0, got {s:?}")));
    }
    if ns > max_ns as u128 {
        return Err(err(
            flag,
            format!(
                "must be at most {}, got {s:?}",
                crate::units::fmt_ns(max_ns)
            ),
        ));
    }
    Ok(ns as u64)
}

/// Parses `3`, `4-11`, `0,2,4-6` and checks every core is one this process may use.
pub fn parse_cores(flag: &'static str, s: &str, usable: &[usize]) -> Result<Vec<usize>, PlanError> {
    let mut cores = Vec::new();
    for range in crate::units::parse_core_list(s).map_err(|m| err(flag, m))? {
        for c in range {
            if !usable.contains(&c) {
                return Err(err(
                    flag,
                    format!(
                        "unknown core {c}: this process may use cores {}",
                        list_cores(usable)
                    ),
                ));
            }
            if cores.contains(&c) {
                return Err(err(flag, format!("core {c} is listed twice")));
            }
            cores.push(c);
        }
    }
    Ok(cores)
}

/// `--control-core`: the given core when this process may use it; by default the first
/// usable core that runs no worker, else the first worker core.
pub(super) fn control_core(
    given: Option<usize>,
    cores: &[usize],
    usable: &[usize],
) -> Result<usize, PlanError> {
    match given {
        Some(c) if usable.contains(&c) => Ok(c),
        Some(c) => Err(err(
            "control-core",
            format!(
                "unknown core {c}: this process may use cores {}",
                list_cores(usable)
            ),
        )),
        None => Ok(usable
            .iter()
            .copied()
            .find(|c| !cores.contains(c))
            .or_else(|| cores.first().copied())
            .unwrap_or(0)),
    }
}

/// The cores this process may run on: its affinity mask as first seen (read once, so
/// pinning a thread later does not shrink it).
pub fn usable_cores() -> Vec<usize> {
    static USABLE: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    USABLE
        .get_or_init(|| match core_affinity::get_core_ids() {
            Some(ids) if !ids.is_empty() => ids.into_iter().map(|c| c.id).collect(),
            _ => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
        })
        .clone()
}

/// Decodes the escapes of a payload given as text (see [`crate::proto::unescape`]).
pub fn unescape(flag: &'static str, s: &str) -> Result<Vec<u8>, PlanError> {
    crate::proto::unescape(s).map_err(|m| err(flag, m))
}

pub(super) fn resolve(flag: &'static str, s: &str) -> Result<SocketAddr, PlanError> {
    let mut addrs = s
        .to_socket_addrs()
        .map_err(|e| err(flag, format!("expected HOST:PORT, got {s:?} ({e})")))?;
    let addr = addrs
        .next()
        .ok_or_else(|| err(flag, format!("{s:?} resolves to no address")))?;
    if addr.port() == 0 && flag == "target" {
        return Err(err(flag, format!("port 0 is not a target port, got {s:?}")));
    }
    Ok(addr)
}

/// Parses a byte size: `4096`, `64k`, `64KiB`, `1M`, `1MiB` (k and M are 1024-based).
pub fn parse_size(flag: &'static str, s: &str) -> Result<usize, PlanError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: usize = match unit.trim() {
        "" | "B" => 1,
        "k" | "K" | "KiB" | "kB" => 1 << 10,
        "M" | "MiB" | "MB" => 1 << 20,
        _ => {
            return Err(err(
                flag,
                format!("expected a size such as 4096, 64KiB or 1MiB, got {s:?}"),
            ));
        }
    };
    let n: usize = num.parse().map_err(|_| {
        err(
            flag,
            format!("expected a size such as 4096, 64KiB or 1MiB, got {s:?}"),
        )
    })?;
    let v = n.saturating_mul(mult);
    if v == 0 || v > 1 << 30 {
        return Err(err(
            flag,
            format!("must be between 1 byte and 1GiB, got {s:?}"),
        ));
    }
    Ok(v)
}

/// `--repeats`: from 1 to [`crate::limits::REPEATS_MAX`] (the baseline's and `search`'s).
pub fn check_repeats(n: u32) -> Result<u32, PlanError> {
    let max = crate::limits::REPEATS_MAX;
    if (1..=max).contains(&n) {
        Ok(n)
    } else {
        Err(err(
            "repeats",
            format!("must be between 1 and {max}, got {n}"),
        ))
    }
}

/// A rate in requests/s, at most [`RATE_RPS_MAX`] (the one rate check, shared with
/// `blaster search`).
pub fn check_rate(flag: &'static str, r: f64) -> Result<f64, PlanError> {
    crate::units::check_rate(r, RATE_RPS_MAX, "requests/s").map_err(|m| err(flag, m))
}
