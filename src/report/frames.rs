//! The report's `frames` key (`--workload frames`): what each receiver got of what
//! its room was planned to send, and how in time it was. See docs/frames.md for the
//! meaning of every figure and how loss is counted per planned frame.

use super::Percentiles;
use super::hdr;
use crate::engine::pacing::{BusyCpu, busy_cpu_ns};
use crate::engine::recorder::{FrameCounters, FrameTotals, JoinFailures, SlowTotals, WorkerTotals};
use crate::metrics::Histograms;
use crate::run_plan::RunPlan;
use crate::units::fmt_ns;
use serde::Serialize;
use std::fmt::Write;

#[derive(Debug, Clone, Serialize)]
pub struct FramesReport {
    /// `--frame-proto`: the server's protocol (`blaster` for the built-in sink).
    pub proto: String,
    /// The join phase (the control plane), apart from the frames.
    pub join: JoinReport,
    pub tick_ns: u64,
    pub frame_bytes: usize,
    pub room_size: u64,
    /// Members of each room that send (`--senders-per-room`; the room size without it):
    /// the rest only listen.
    pub senders_per_room: u64,
    /// Members each connection carries (`--members-per-connection`, 1 without it);
    /// `rooms` counts the rooms of every member slot.
    pub members_per_connection: u64,
    /// `--room-layout` as it ran: `mixed` when member slots past the first placed
    /// their members by a seeded permutation (room mates differ from slot to slot),
    /// `grouped` when every slot's room held the same connections (always with one
    /// member per connection).
    pub room_layout: &'static str,
    /// Rooms this run (or shard) ran, over every member slot.
    pub rooms: u64,
    /// The first of them in the whole run's numbering (slot 0): 0 unless `--shard`
    /// gave this process the rooms from here (`first_room..first_room + rooms / M`).
    pub first_room: u64,
    pub budget_ns: u64,
    pub echo_to_sender: bool,
    /// Frames planned to be sent: every sending connection, every tick of the run.
    pub planned: u64,
    /// Frames put on the wire, and those due while their connection was down.
    pub sent: u64,
    pub not_sent: u64,
    /// `--frame-proto grpc`: frames that waited for the server's HTTP/2 flow-control
    /// window (sent late, so they show as arrival deviation, never as loss).
    pub flow_stalled: u64,
    /// `--h2-keepalive` (gRPC): PINGs sent after a quiet interval, and those the
    /// server acknowledged.
    pub pings_sent: u64,
    pub pings_acked: u64,
    /// Plain TCP frames' shared pools ([frames.md](../../docs/frames.md#memory-per-held-connection)):
    /// multishot receives that found no provided buffer (armed again at once), and
    /// sends that waited for a send slot (their frames sent late: arrival deviation).
    pub recv_no_buffer: u64,
    pub send_slot_waits: u64,
    /// Frames the receivers were planned to get (each planned frame times its room's
    /// receivers), and got (first arrivals).
    pub expected: u64,
    pub received: u64,
    /// expected - received - in_flight_at_end: planned frames that never arrived (a
    /// gap the receive window moved past, or missing when the drain after the
    /// schedule went quiet).
    pub lost: u64,
    /// Expected frames still arriving when the drain reached its cap (2 s): late, not
    /// lost.
    pub in_flight_at_end: u64,
    pub duplicates: u64,
    pub reordered: u64,
    /// Received with a deviation beyond the budget.
    pub late: u64,
    /// Arrived older than the receive window (not counted as received).
    pub stale: u64,
    pub foreign: u64,
    /// A room mate's frame sent before the receiver joined, relayed to it anyway (the
    /// server knew the receiver first); neither expected nor received.
    pub before_join: u64,
    /// received / expected.
    pub retention: f64,
    /// Per receiving connection, received / expected: the lowest, the 1st percentile
    /// and the median.
    pub retention_min: f64,
    pub retention_p1: f64,
    pub retention_median: f64,
    /// Receive instant - intended send instant, per frame received.
    pub deviation_ns: Percentiles,
    /// |inter-arrival of consecutive frames from one source at one receiver - tick|.
    pub jitter_ns: Percentiles,
    /// Intended send instant -> the last receiver of the room got the frame; one
    /// sample per frame every receiver got.
    pub fanout_ns: Percentiles,
    /// Frames with at least one receiver, those every receiver got, and the rest.
    pub fanout_expected: u64,
    pub fanout_complete: u64,
    pub fanout_incomplete: u64,
    pub residency: Residency,
    /// Frames per second sent (up) and received (down) over the schedule.
    pub up_fps: f64,
    pub down_fps: f64,
    /// The workers' busy CPU time (spinning for due instants excluded), ns: exact when
    /// `cpu_basis` is `busy`, an upper bound when `busy_at_most` (the spinning was
    /// measured in wall time and the workers were off CPU for part of it, so it could
    /// not all be taken off; see `engine::pacing::busy_cpu_ns`).
    pub busy_cpu_ns: u64,
    pub cpu_basis: &'static str,
    /// busy CPU / frames received, sending included, ns.
    pub cpu_ns_per_frame_received: f64,
    /// busy CPU / (frames sent + frames received): the client CPU per frame handled
    /// in either direction, ns. What `blaster plan --from-frames` charges per message.
    pub cpu_ns_per_frame: f64,
    /// deviation, jitter and fan-out, encoded as `encoding` says (ns).
    pub histograms: FrameHistograms,
    /// `--aggregate`: the server's downlink frames are what is expected, received,
    /// lost and measured (docs/frames.md); `null` for relayed frames.
    pub aggregate: Option<AggregateFigures>,
    /// `--slow-readers`: the slow readers and what the server did to them, apart from
    /// every figure above (which are the other readers'); `null` without it.
    pub slow_readers: Option<SlowReadersReport>,
}

/// `frames.slow_readers`: see [`SlowTotals`] for each count.
#[derive(Debug, Clone, Serialize)]
pub struct SlowReadersReport {
    /// `--slow-readers RATIO:RATE`.
    pub ratio: f64,
    pub rate_bytes_per_s: u64,
    #[serde(flatten)]
    pub totals: SlowTotals,
    /// received / expected.
    pub retention: f64,
}

/// The joins of a frames run: each connection's connect and its adapter's exchange
/// (handshake, subscribe, acknowledgement), from the connect submitted to the join
/// complete; reconnects join again.
#[derive(Debug, Clone, Serialize)]
pub struct JoinReport {
    /// Joins completed (samples of `ns`).
    pub joined: u64,
    pub ns: Percentiles,
    /// Joins that failed, by kind.
    pub failed: JoinFailures,
    /// The first failed join's reason, with the server's words where it gave some.
    pub first_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AggregateFigures {
    /// Bytes of each downlink frame (`--down-size`).
    pub down_bytes: usize,
    /// Downlink frames received outside the expected server ticks (before a
    /// receiver's first expected tick, or of ticks after the schedule).
    pub outside: u64,
    /// How far the expected arrival of the server ticks moved earlier after measuring
    /// started (ns; the largest of the workers'): deviations measured before were
    /// understated by at most this.
    pub expected_arrival_shift_ns: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Residency {
    /// Share of its span each connection was up (the span: from its first planned
    /// frame, its join under a ramp, to the schedule's end): lowest and median.
    pub uptime_min: f64,
    pub uptime_median: f64,
    /// Connections up for their whole span.
    pub up_whole_run: u64,
    pub disconnects: u64,
    pub reconnects: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FrameHistograms {
    pub encoding: &'static str,
    pub deviation: String,
    pub jitter: String,
    pub fanout: String,
    /// The joins (`join.ns`).
    pub join: String,
}

/// One interval's frame figures (`intervals[].frames`).
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct FrameInterval {
    pub up_fps: f64,
    pub down_fps: f64,
    pub deviation_p99_ns: u64,
    pub late: u64,
    pub lost: u64,
    /// Connections up at the interval's end (rises over a `--connect-rate` ramp).
    #[serde(default)]
    pub connections_active: u64,
    /// Frames put on the wire and planned frames received (first arrivals) in the
    /// interval: the counts behind `up_fps` and `down_fps`.
    #[serde(default)]
    pub sent: u64,
    #[serde(default)]
    pub received: u64,
    /// received / (received + lost) in the interval, 1 with neither. A gap is counted
    /// lost when 128 newer frames from its source have arrived (or at the end), so the
    /// loss of a stall shows in the interval where it was counted.
    #[serde(default = "one")]
    pub retention: f64,
    /// The interval's arrival deviation beside `deviation_p99_ns`.
    #[serde(default)]
    pub deviation_p50_ns: u64,
    #[serde(default)]
    pub deviation_p999_ns: u64,
    #[serde(default)]
    pub deviation_max_ns: u64,
}

fn one() -> f64 {
    1.0
}

impl FrameInterval {
    /// The interval's rates, counts and deviation percentiles.
    pub fn of(c: &FrameCounters, deviation: &Percentiles, len_s: f64) -> FrameInterval {
        FrameInterval {
            up_fps: c.sent as f64 / len_s,
            down_fps: c.received as f64 / len_s,
            deviation_p99_ns: deviation.p99,
            late: c.late,
            lost: c.lost,
            connections_active: c.connections_active,
            sent: c.sent,
            received: c.received,
            retention: retention_of(c.received, c.lost),
            deviation_p50_ns: deviation.p50,
            deviation_p999_ns: deviation.p999,
            deviation_max_ns: deviation.max,
        }
    }
}

/// received / (received + lost), 1 when nothing was counted either way (nothing was
/// due, or every gap is still inside its receive window).
pub fn retention_of(received: u64, lost: u64) -> f64 {
    let counted = received + lost;
    if counted == 0 {
        1.0
    } else {
        received as f64 / counted as f64
    }
}

/// The value at quantile `q` of sorted `v` (nearest rank), 0 for none.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// The workers' busy CPU together: separated only if every worker's was.
fn busy_cpu(totals: &[WorkerTotals]) -> BusyCpu {
    totals.iter().fold(
        BusyCpu {
            ns: 0,
            separated: true,
        },
        |acc, w| {
            let b = busy_cpu_ns(w.cpu_ns, w.spin_ns, w.sleep_ns, w.wall_ns);
            BusyCpu {
                ns: acc.ns + b.ns,
                separated: acc.separated && b.separated,
            }
        },
    )
}

/// The share of its span (first planned frame to the schedule's end) a connection was
/// up: a connection that joins late in a ramp is measured against its own lifetime,
/// not the run's. Up before its first frame counts, so the share is capped at 1.
fn uptime_share(up_ns: u64, span_ns: u64) -> f64 {
    if span_ns == 0 {
        return 1.0;
    }
    (up_ns as f64 / span_ns as f64).min(1.0)
}

/// `cpu_ns` per frame, 0 with no frames (nothing measured).
fn per_frame(cpu_ns: u64, frames: u64) -> f64 {
    if frames == 0 {
        0.0
    } else {
        cpu_ns as f64 / frames as f64
    }
}

/// The workers' frame totals added up.
fn frame_totals(totals: &[WorkerTotals]) -> FrameTotals {
    let mut t = FrameTotals::default();
    for w in totals {
        if let Some(f) = &w.frames {
            t.planned += f.planned;
            t.expected += f.expected;
            t.received += f.received;
            t.in_flight_at_end += f.in_flight_at_end;
            t.per_receiver.extend_from_slice(&f.per_receiver);
            t.fanout_expected += f.fanout_expected;
            t.fanout_complete += f.fanout_complete;
            t.uptime_ns.extend_from_slice(&f.uptime_ns);
            t.span_ns.extend_from_slice(&f.span_ns);
            t.reconnects += f.reconnects;
            t.outside += f.outside;
            t.shift_ns = t.shift_ns.max(f.shift_ns);
            t.join_failures.add(&f.join_failures);
            t.slow.add(&f.slow);
            if t.first_join_error.is_none() {
                t.first_join_error.clone_from(&f.first_join_error);
            }
        }
    }
    t
}

/// The `frames` key from the run's merged figures and the workers' totals.
pub fn build(
    plan: &RunPlan,
    total: &Histograms,
    c: &FrameCounters,
    totals: &[WorkerTotals],
    schedule_ns: u64,
) -> Option<FramesReport> {
    let fp = plan.frames.as_ref()?;
    let t = frame_totals(totals);
    let busy = busy_cpu(totals);
    let mut retention: Vec<f64> = t
        .per_receiver
        .iter()
        .filter(|(e, _)| *e > 0)
        .map(|&(e, r)| r as f64 / e as f64)
        .collect();
    retention.sort_by(f64::total_cmp);
    let mut up: Vec<f64> = t
        .uptime_ns
        .iter()
        .zip(&t.span_ns)
        .map(|(&u, &span)| uptime_share(u, span))
        .collect();
    up.sort_by(f64::total_cmp);
    let up_whole_run = t
        .uptime_ns
        .iter()
        .zip(&t.span_ns)
        .filter(|&(&u, &span)| u >= span)
        .count() as u64;
    let schedule = schedule_ns.max(1);
    let secs = schedule as f64 / 1e9;
    Some(FramesReport {
        proto: fp.spec.kind.to_string(),
        join: JoinReport {
            joined: total.frame_join.len(),
            ns: Percentiles::of(&total.frame_join),
            failed: t.join_failures,
            first_error: t.first_join_error.clone(),
        },
        tick_ns: fp.grid.tick_ns,
        frame_bytes: fp.frame_size,
        room_size: fp.grid.room_size,
        senders_per_room: fp.grid.senders_per_room(),
        members_per_connection: fp.members_per_connection as u64,
        room_layout: fp.layout_ran().name(),
        rooms: fp.room_count * fp.members_per_connection as u64,
        first_room: fp.first_room,
        budget_ns: fp.budget_ns,
        echo_to_sender: fp.echo,
        planned: t.planned,
        sent: c.sent,
        not_sent: c.not_sent,
        flow_stalled: c.flow_stalled,
        pings_sent: c.pings_sent,
        pings_acked: c.pings_acked,
        recv_no_buffer: c.recv_no_buffer,
        send_slot_waits: c.send_slot_waits,
        expected: t.expected,
        received: t.received,
        lost: t.expected - t.received - t.in_flight_at_end,
        in_flight_at_end: t.in_flight_at_end,
        duplicates: c.duplicates,
        reordered: c.reordered,
        late: c.late,
        stale: c.stale,
        foreign: c.foreign,
        before_join: c.before_join,
        retention: if t.expected == 0 {
            0.0
        } else {
            t.received as f64 / t.expected as f64
        },
        retention_min: quantile(&retention, 0.0),
        retention_p1: quantile(&retention, 0.01),
        retention_median: quantile(&retention, 0.5),
        deviation_ns: Percentiles::of(&total.frame_deviation),
        jitter_ns: Percentiles::of(&total.frame_jitter),
        fanout_ns: Percentiles::of(&total.frame_fanout),
        fanout_expected: t.fanout_expected,
        fanout_complete: t.fanout_complete,
        fanout_incomplete: t.fanout_expected - t.fanout_complete.min(t.fanout_expected),
        residency: Residency {
            uptime_min: quantile(&up, 0.0),
            uptime_median: quantile(&up, 0.5),
            up_whole_run,
            disconnects: c.disconnects,
            reconnects: t.reconnects,
        },
        up_fps: c.sent as f64 / secs,
        down_fps: t.received as f64 / secs,
        busy_cpu_ns: busy.ns,
        cpu_basis: if busy.separated {
            "busy"
        } else {
            "busy_at_most"
        },
        cpu_ns_per_frame_received: per_frame(busy.ns, t.received),
        cpu_ns_per_frame: per_frame(busy.ns, c.sent + t.received),
        histograms: FrameHistograms {
            encoding: hdr::ENCODING,
            deviation: hdr::encode(&total.frame_deviation),
            jitter: hdr::encode(&total.frame_jitter),
            fanout: hdr::encode(&total.frame_fanout),
            join: hdr::encode(&total.frame_join),
        },
        aggregate: fp.down_size.map(|down_bytes| AggregateFigures {
            down_bytes,
            outside: t.outside,
            expected_arrival_shift_ns: t.shift_ns,
        }),
        slow_readers: fp.slow_readers.map(|s| SlowReadersReport {
            ratio: s.ratio(),
            rate_bytes_per_s: s.rate_bytes_per_s,
            totals: t.slow,
            retention: if t.slow.expected == 0 {
                0.0
            } else {
                t.slow.received as f64 / t.slow.expected as f64
            },
        }),
    })
}

/// `--slow-readers`: the slow readers' line, apart from the figures of the others.
fn render_slow(f: &FramesReport, w: &mut String) {
    let Some(s) = &f.slow_readers else {
        return;
    };
    let t = &s.totals;
    let _ = writeln!(
        w,
        "  slow readers: {} connections ({} members) reading {}, apart from every other \
         figure: {} of {} frames received ({:.3}%), {} dropped by the server (gaps), {} \
         unread at the end, {} late, {} duplicates; {} disconnects (the other readers: {})",
        t.connections,
        t.members,
        if s.rate_bytes_per_s == 0 {
            "nothing once joined".to_string()
        } else {
            format!("{} B/s", s.rate_bytes_per_s)
        },
        t.received,
        t.expected,
        s.retention * 100.0,
        t.dropped,
        t.unread,
        t.late,
        t.duplicates,
        t.disconnects,
        f.residency.disconnects.saturating_sub(t.disconnects)
    );
}

/// The frames block's first line: the run's shape.
fn render_head(f: &FramesReport, w: &mut String) {
    let _ = writeln!(
        w,
        "frames: tick {} x {} B, rooms of {}{} ({} rooms{}), budget {}{}",
        fmt_ns(f.tick_ns),
        f.frame_bytes,
        f.room_size,
        if f.senders_per_room < f.room_size {
            format!(
                " ({} senders, {} listeners each)",
                f.senders_per_room,
                f.room_size - f.senders_per_room
            )
        } else {
            String::new()
        },
        f.rooms,
        if f.members_per_connection > 1 {
            format!(
                ", {} members per connection, {} layout",
                f.members_per_connection, f.room_layout
            )
        } else {
            String::new()
        },
        fmt_ns(f.budget_ns),
        if f.echo_to_sender {
            ", echo to sender"
        } else {
            ""
        }
    );
}

/// The frames block of the text report.
pub fn render(f: &FramesReport, w: &mut String) {
    let pct = |x: f64| format!("{:.3}%", x * 100.0);
    render_head(f, w);
    render_join(f, w);
    render_slow(f, w);
    if let Some(a) = &f.aggregate {
        let _ = writeln!(
            w,
            "  aggregated: one {} B downlink frame per member per server tick; retention, loss and \
             deviation are per downlink frame (deviation against the tick's expected arrival); \
             {} received outside the expected ticks; expected arrival moved {} earlier while measuring",
            a.down_bytes,
            a.outside,
            fmt_ns(a.expected_arrival_shift_ns)
        );
    }
    let _ = writeln!(
        w,
        "  sent {} of {} planned ({} not sent: {}); up {:.0}/s, down {:.0}/s",
        f.sent,
        f.planned,
        f.not_sent,
        if f.flow_stalled > 0 {
            "connection down, the wait for a window full, or still waiting when it went down or the run ended"
        } else {
            "connection down"
        },
        f.up_fps,
        f.down_fps
    );
    if f.flow_stalled > 0 {
        let _ = writeln!(
            w,
            "  flow control: {} frames waited for the server's HTTP/2 window (sent late: \
             arrival deviation, not loss)",
            f.flow_stalled
        );
    }
    if f.recv_no_buffer + f.send_slot_waits > 0 {
        let _ = writeln!(
            w,
            "  shared pools: {} receives found no buffer (armed again), {} sends waited \
             for a send slot",
            f.recv_no_buffer, f.send_slot_waits
        );
    }
    if f.pings_sent > 0 {
        let _ = writeln!(
            w,
            "  keepalive: {} PINGs sent (--h2-keepalive), {} acknowledged",
            f.pings_sent, f.pings_acked
        );
    }
    let _ = writeln!(
        w,
        "  retention {} ({} of {} expected); per connection min {} p1 {} median {}",
        pct(f.retention),
        f.received,
        f.expected,
        pct(f.retention_min),
        pct(f.retention_p1),
        pct(f.retention_median)
    );
    let _ = writeln!(
        w,
        "  lost {}  late {}  reordered {}  duplicates {}  stale {}  foreign {}  before join {}",
        f.lost, f.late, f.reordered, f.duplicates, f.stale, f.foreign, f.before_join
    );
    if f.in_flight_at_end > 0 {
        let _ = writeln!(
            w,
            "  in flight at the end {}: still arriving when the drain reached its 2 s cap (late, not lost)",
            f.in_flight_at_end
        );
    }
    let p = |x: &Percentiles| {
        format!(
            "p50 {}  p99 {}  p99.9 {}  max {}",
            fmt_ns(x.p50),
            fmt_ns(x.p99),
            fmt_ns(x.p999),
            fmt_ns(x.max)
        )
    };
    let _ = writeln!(w, "  arrival deviation  {}", p(&f.deviation_ns));
    let _ = writeln!(w, "  jitter             {}", p(&f.jitter_ns));
    let _ = writeln!(
        w,
        "  fan-out to last    {}  ({} of {} frames complete)",
        p(&f.fanout_ns),
        f.fanout_complete,
        f.fanout_expected
    );
    let _ = writeln!(
        w,
        "  residency: uptime min {} median {} of each connection's span (first planned frame to the end); {} up the whole span; {} disconnects, {} reconnects",
        pct(f.residency.uptime_min),
        pct(f.residency.uptime_median),
        f.residency.up_whole_run,
        f.residency.disconnects,
        f.residency.reconnects
    );
    let _ = writeln!(
        w,
        "  generator CPU per frame received: {:.0} ns; per frame sent or received: {:.0} ns{}",
        f.cpu_ns_per_frame_received,
        f.cpu_ns_per_frame,
        if f.cpu_basis == "busy" {
            ""
        } else {
            " (at most: the workers were preempted while spinning, so the spinning could \
             not all be taken off their CPU time)"
        }
    );
}

/// The join line of the text report: the protocol, the joins' times, the failures.
fn render_join(f: &FramesReport, w: &mut String) {
    let j = &f.join;
    let _ = write!(
        w,
        "  join ({}): {} joined, p50 {}  p99 {}  max {}",
        f.proto,
        j.joined,
        fmt_ns(j.ns.p50),
        fmt_ns(j.ns.p99),
        fmt_ns(j.ns.max)
    );
    let x = &j.failed;
    if x.total() > 0 {
        let _ = write!(
            w,
            "; {} failed (refused {}, protocol {}, closed {}, timeout {})",
            x.total(),
            x.refused,
            x.protocol,
            x.closed,
            x.timeout
        );
    }
    let _ = writeln!(w);
    if let Some(e) = &j.first_error {
        let _ = writeln!(w, "  first failed join: {e}");
    }
}

/// Foreign or duplicate frames above this are named (a handful may be a reconnect's
/// replay; more is another run on the same rooms).
const COLLISIONS_NAMED: u64 = 10;

/// The diagnosis of frames that collided with another run's, if more than a handful.
pub fn collisions(f: &FramesReport) -> Option<crate::diagnosis::Diagnosis> {
    (f.foreign + f.duplicates > COLLISIONS_NAMED).then_some(
        crate::diagnosis::Diagnosis::FramesCollide {
            foreign: f.foreign,
            duplicates: f.duplicates,
            received: f.received,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(cpu_ns: u64, spin_ns: u64, sleep_ns: u64, wall_ns: u64) -> WorkerTotals {
        WorkerTotals {
            cpu_ns,
            spin_ns,
            sleep_ns,
            wall_ns,
            ..WorkerTotals::default()
        }
    }

    /// A loaded host: the spinning, measured in wall time, exceeded the CPU time of
    /// one worker. The old `cpu - spin` read 0 for it and understated the total.
    #[test]
    fn busy_cpu_is_not_zero_when_spinning_outlasts_the_cpu_time() {
        let loaded = [
            worker(1_000, 1_500, 0, 3_000),
            worker(1_000, 1_500, 0, 3_000),
        ];
        let b = busy_cpu(&loaded);
        assert_eq!(b.ns, 2_000);
        assert!(!b.separated);
        assert_eq!(per_frame(b.ns, 4), 500.0);
        // A quiet host: exact, spinning taken off.
        let quiet = [
            worker(1_000, 300, 2_000, 3_000),
            worker(2_000, 0, 1_000, 3_000),
        ];
        assert_eq!(
            busy_cpu(&quiet),
            BusyCpu {
                ns: 2_700,
                separated: true
            }
        );
        assert_eq!(per_frame(1, 0), 0.0);
    }

    #[test]
    fn quantiles_of_sorted_values() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 0.01), 2.0);
        assert_eq!(quantile(&v, 0.5), 100.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
