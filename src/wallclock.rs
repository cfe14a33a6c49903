//! The wall clock, for the one thing the TSC cannot do: start N machines at the same
//! instant. `--start-at` names that instant in UTC; each shard waits for it on its own
//! wall clock, then runs the timetable on the TSC ([`crate::clock`]) from there. The
//! shards agree only as well as their clocks do, so each shard also reads what the
//! kernel says of its clock's synchronisation ([`ClockSync`], from `adjtimex`) and
//! reports it beside its start skew.

use crate::clock::Clock;
use crate::limits::START_AHEAD_NS_MAX;
use crate::units::fmt_s;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch, now (CLOCK_REALTIME; 0 before 1970).
pub fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The run's start instant on the wall clock (Unix ns), whether it is still ahead or
/// already past: a worker that reads this late (descheduled at the start, several
/// shards spinning to one start on one core) still gets the instant its timetable
/// counts from, not the moment it happened to look.
pub fn unix_at_start_ns(clock: &Clock) -> u64 {
    // One of the two is 0: the start is either ahead or past.
    (now_unix_ns() + clock.until_start_ns()).saturating_sub(clock.now_ns())
}

/// Formats Unix ns as RFC 3339 UTC with milliseconds, e.g. `2025-06-01T12:00:00.000Z`.
pub fn rfc3339(unix_ns: u64) -> String {
    let t = UNIX_EPOCH + Duration::from_nanos(unix_ns);
    humantime::format_rfc3339_millis(t).to_string()
}

/// Parses `--start-at`: RFC 3339 (`2025-06-01T12:00:00Z`, fractions and `±HH:MM`
/// offsets allowed) or Unix milliseconds (`1748779200000`), into Unix ns. `now_ns` is
/// the wall clock at parse time: the instant must be ahead of it, by at most
/// [`START_AHEAD_NS_MAX`]. The message is one line, without the flag name.
pub fn parse_start_at(s: &str, now_ns: u64) -> Result<u64, String> {
    let t = s.trim();
    let at_ns = if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        t.parse::<u64>()
            .ok()
            .and_then(|ms| ms.checked_mul(1_000_000))
            .ok_or_else(|| unparsable(s))?
    } else {
        parse_rfc3339(t).ok_or_else(|| unparsable(s))?
    };
    if at_ns <= now_ns {
        return Err(format!(
            "{} is {} in the past (this machine's clock says {}); pick an instant far \
             enough ahead for every shard to be waiting",
            rfc3339(at_ns),
            fmt_s(now_ns - at_ns),
            rfc3339(now_ns)
        ));
    }
    if at_ns - now_ns > START_AHEAD_NS_MAX {
        return Err(format!(
            "{} is {} ahead; at most 24 h ahead (this machine's clock says {})",
            rfc3339(at_ns),
            fmt_s(at_ns - now_ns),
            rfc3339(now_ns)
        ));
    }
    Ok(at_ns)
}

fn unparsable(s: &str) -> String {
    format!(
        "expected an RFC 3339 time such as 2025-06-01T12:00:00Z or Unix milliseconds \
         such as 1748779200000, got {s:?}"
    )
}

/// RFC 3339 to Unix ns. humantime reads the UTC form; a numeric offset is split off
/// here and applied, so `12:00:00+02:00` is `10:00:00Z`.
fn parse_rfc3339(t: &str) -> Option<u64> {
    let (base, offset_s) = match t.len().checked_sub(6).map(|i| t.split_at(i)) {
        Some((base, off))
            if (off.starts_with('+') || off.starts_with('-')) && off.as_bytes()[3] == b':' =>
        {
            let h: i64 = off[1..3].parse().ok()?;
            let m: i64 = off[4..6].parse().ok()?;
            if h > 23
                || m > 59
                || !off[1..3]
                    .bytes()
                    .chain(off[4..6].bytes())
                    .all(|b| b.is_ascii_digit())
            {
                return None;
            }
            let sign = if off.starts_with('-') { -1 } else { 1 };
            (base, sign * (h * 3600 + m * 60))
        }
        _ => (t.strip_suffix('Z').or_else(|| t.strip_suffix('z'))?, 0),
    };
    // The date and time must be written out in full (humantime's weak form would also
    // take a space for the `T`; keep to the standard).
    if base.len() < 19 || !matches!(base.as_bytes()[10], b'T' | b't') {
        return None;
    }
    let local = humantime::parse_rfc3339(&format!("{base}Z")).ok()?;
    let ns = local.duration_since(UNIX_EPOCH).ok()?.as_nanos() as i128;
    u64::try_from(ns - i128::from(offset_s) * 1_000_000_000).ok()
}

/// What the kernel says about this host's clock discipline (`adjtimex(2)` read-only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClockSync {
    /// The kernel considers the clock unsynchronised (`TIME_ERROR` / `STA_UNSYNC`):
    /// no NTP or PTP daemon is disciplining it, or it lost its source.
    pub unsynchronised: bool,
    /// Maximum error bound, µs (`maxerror`): the clock is within this of true time.
    pub max_error_us: u64,
    /// Estimated error, µs (`esterror`).
    pub est_error_us: u64,
}

impl ClockSync {
    /// Reads the clock's state; `None` where adjtimex fails (a seccomp filter).
    pub fn read() -> Option<ClockSync> {
        // SAFETY: timex is plain data for which all-zero is a valid value; modes = 0
        // makes adjtimex read-only, and it writes only into the struct we own, which
        // outlives the call. No pointer is kept after it returns.
        let (state, tx) = unsafe {
            let mut tx: libc::timex = std::mem::zeroed();
            tx.modes = 0;
            (libc::adjtimex(&mut tx), tx)
        };
        if state < 0 {
            return None;
        }
        Some(ClockSync {
            unsynchronised: state == libc::TIME_ERROR || tx.status & libc::STA_UNSYNC != 0,
            max_error_us: tx.maxerror.max(0) as u64,
            est_error_us: tx.esterror.max(0) as u64,
        })
    }
}

/// Sleeps until the wall clock reads `at_ns`, the last 2 ms spinning on it (a sleep
/// wakes tens of µs to ms late; the shards' start skew is what this saves). Returns
/// the wall clock when it returned, always `>= at_ns`.
pub fn wait_until(at_ns: u64) -> u64 {
    const SPIN_NS: u64 = 2_000_000;
    loop {
        let now = now_unix_ns();
        if now >= at_ns {
            return now;
        }
        let left = at_ns - now;
        if left > SPIN_NS {
            // Short naps, so a clock step (NTP) during a long wait is noticed.
            std::thread::sleep(Duration::from_nanos((left - SPIN_NS).min(100_000_000)));
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_on_the_wall_clock_is_the_start_even_when_read_late() {
        let (clock, mock) = Clock::mock();
        // Read 5 s after the start (a worker descheduled at its start instant): the
        // start is 5 s before the wall clock's now, not now.
        mock.increment(std::time::Duration::from_secs(5));
        let before = now_unix_ns();
        let at = unix_at_start_ns(&clock);
        let after = now_unix_ns();
        assert!(
            at >= before - 5_000_000_000 && at <= after - 5_000_000_000,
            "{at}"
        );
        // And 7 s ahead of a start still to come.
        let ahead = clock.with_start_in(7_000_000_000);
        let at = unix_at_start_ns(&ahead);
        let now = now_unix_ns();
        assert!(
            at.abs_diff(now + 7_000_000_000) < 1_000_000,
            "{}",
            at as i64 - now as i64
        );
    }

    const NOW: u64 = 1_748_779_200_000_000_000; // 2025-06-01T12:00:00Z

    #[test]
    fn parses_rfc3339_and_unix_ms() {
        let at = NOW + 60_000_000_000;
        assert_eq!(parse_start_at("2025-06-01T12:01:00Z", NOW), Ok(at));
        assert_eq!(parse_start_at("1748779260000", NOW), Ok(at));
        assert_eq!(parse_start_at("2025-06-01T14:01:00+02:00", NOW), Ok(at));
        assert_eq!(parse_start_at("2025-06-01T11:31:00-00:30", NOW), Ok(at));
        assert_eq!(
            parse_start_at("2025-06-01T12:01:00.250Z", NOW),
            Ok(at + 250_000_000)
        );
        assert_eq!(rfc3339(at), "2025-06-01T12:01:00.000Z");
    }

    #[test]
    fn refuses_bad_past_and_far() {
        for bad in [
            "",
            "soon",
            "2025-06-01 12:01:00Z",
            "2025-06-01T12:01:00",
            "2025-06-01T12:01:00+2:00",
            "2025-06-01T12:01:00+25:00",
            "2025-13-01T12:01:00Z",
            "99999999999999999999999",
            "-5",
        ] {
            let e = parse_start_at(bad, NOW).unwrap_err();
            assert!(e.starts_with("expected an RFC 3339 time"), "{bad}: {e}");
        }
        let e = parse_start_at("2025-06-01T11:59:58Z", NOW).unwrap_err();
        assert!(e.contains("2.0 s in the past"), "{e}");
        assert!(
            parse_start_at("2025-06-01T12:00:00Z", NOW)
                .unwrap_err()
                .contains("past")
        );
        let e = parse_start_at("2025-06-02T12:00:01Z", NOW).unwrap_err();
        assert!(e.contains("24.0 h ahead; at most 24 h"), "{e}");
        assert!(parse_start_at("2025-06-02T12:00:00Z", NOW).is_ok());
    }

    #[test]
    fn reads_the_clock_state() {
        // Whatever the host's state, the call works unprivileged, and the kernel caps
        // maxerror at NTP_PHASE_LIMIT (16 s), past which it calls the clock unsynced.
        let s = ClockSync::read().expect("adjtimex");
        assert!(s.max_error_us <= 16_000_000, "{s:?}");
        assert!(s.max_error_us < 16_000_000 || s.unsynchronised, "{s:?}");
        eprintln!("{s:?}");
    }

    #[test]
    fn waits_until_the_instant() {
        let at = now_unix_ns() + 5_000_000;
        let woke = wait_until(at);
        assert!(woke >= at && now_unix_ns() >= at);
        // Loose: a shared machine may preempt the spin; what matters is never early.
        assert!(woke - at < 50_000_000, "woke {} ns late", woke - at);
    }
}
