//! What a sink counted ([`SinkStats`], the UDP series of [`SecondStats`]), summed
//! over its threads, and the JSON reports built from it.

use super::{MemoryFigures, TcpLayout};

/// One second of the UDP sink's series: what arrived in `[second, second + 1)`
/// seconds after the first datagram (summed over threads).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SecondStats {
    /// Seconds since the first datagram reached the sink.
    pub second: u64,
    /// Datagrams with blaster's header (not dropped on purpose).
    pub received: u64,
    /// `received` per second of this interval (= `received`: intervals are 1 s).
    pub received_pps: f64,
    /// Bits per second of those datagrams (UDP payload incl. the header, no IP/UDP
    /// headers).
    pub received_bps: f64,
    /// Bytes of those datagrams.
    pub bytes: u64,
    /// Change in the lost count during this second: holes opened minus holes filled
    /// by late (reordered) arrivals, so it can be negative; the entries sum to the
    /// total `lost`.
    pub lost: i64,
    /// Reordered arrivals.
    pub reordered: u64,
    /// Duplicate arrivals.
    pub duplicates: u64,
    /// Datagrams dropped on purpose (`drop_ratio`).
    pub dropped: u64,
    /// Datagrams without blaster's header.
    pub foreign: u64,
    /// The last interval: traffic (or the snapshot) ended inside it, so its rates are
    /// those of a whole second and understate the rate if it is only partly filled.
    pub partial: bool,
}

impl SecondStats {
    fn add(&mut self, other: &SecondStats) {
        self.received += other.received;
        self.bytes += other.bytes;
        // Saturating: a crafted sequence number makes a flow's loss as large as it gets.
        self.lost = self.lost.saturating_add(other.lost);
        self.reordered += other.reordered;
        self.duplicates += other.duplicates;
        self.dropped += other.dropped;
        self.foreign += other.foreign;
    }
}

/// Broadcast mode's counters (zero in the other modes).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BroadcastStats {
    /// Frames received from members (decoded, from a peer in a room).
    pub frames_received: u64,
    /// Frames that failed to decode (bad length prefix, short, wrong magic): TCP
    /// closes the connection, UDP ignores the datagram.
    pub frames_invalid: u64,
    /// Peers that joined a room (at their first frame).
    pub joins: u64,
    /// Peers refused a room: it held `room_size` members, or the room table was full
    /// (TCP: the connection is closed; UDP: the datagram is ignored).
    pub joins_refused: u64,
    /// UDP: peers that joined as a member their room already had under another
    /// source address (the client's new socket, or a NAT rebinding); the old address
    /// left the room.
    pub members_moved: u64,
    /// Copies of frames queued (TCP) or sent (UDP) to members.
    pub relayed: u64,
    /// Copies not delivered: the member's send queue was full (TCP), or the kernel
    /// refused the datagram (UDP).
    pub relay_dropped: u64,
    /// Aggregate: downlink frames queued (TCP) or sent (UDP).
    pub downlink_frames: u64,
    /// Aggregate: frames received when their room already held two ticks' worth
    /// (what a downlink frame holds, and as much carried): in no downlink frame.
    pub aggregate_overflow: u64,
    /// Aggregate: frames that went out a tick later than received, because their
    /// tick's downlink frame was full (counted once per tick carried).
    pub aggregate_carried: u64,
    /// Aggregate: server ticks sent.
    pub ticks: u64,
    /// Aggregate: server ticks that passed without a send (the loop was late: a
    /// stall, or a busy core).
    pub ticks_skipped: u64,
}

impl BroadcastStats {
    pub(crate) const FIELDS: usize = 12;

    pub(crate) fn to_array(self) -> [u64; Self::FIELDS] {
        [
            self.frames_received,
            self.frames_invalid,
            self.joins,
            self.joins_refused,
            self.relayed,
            self.relay_dropped,
            self.downlink_frames,
            self.aggregate_overflow,
            self.ticks,
            self.ticks_skipped,
            self.aggregate_carried,
            self.members_moved,
        ]
    }

    pub(crate) fn from_array(a: [u64; Self::FIELDS]) -> BroadcastStats {
        BroadcastStats {
            frames_received: a[0],
            frames_invalid: a[1],
            joins: a[2],
            joins_refused: a[3],
            relayed: a[4],
            relay_dropped: a[5],
            downlink_frames: a[6],
            aggregate_overflow: a[7],
            ticks: a[8],
            ticks_skipped: a[9],
            aggregate_carried: a[10],
            members_moved: a[11],
        }
    }

    fn add(&mut self, other: &BroadcastStats) {
        let (mut a, b) = (self.to_array(), other.to_array());
        for (x, y) in a.iter_mut().zip(b) {
            *x += y;
        }
        *self = BroadcastStats::from_array(a);
    }
}

/// Counters summed over all sink threads. The UDP fields are zero for a TCP sink.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct SinkStats {
    /// Connections given a slot in a connection table.
    pub connections_accepted: u64,
    /// Connections closed at once: the sink held its maximum, or a ring's table was
    /// full.
    pub connections_rejected: u64,
    /// Connections held at the time of the snapshot (for [`super::SinkHandle::stop`]: just
    /// before stopping).
    pub connections_open: u64,
    /// The most connections held at once.
    pub connections_peak: u64,
    /// Connections the sink closed because of `close_every`.
    pub connections_closed: u64,
    /// Connections the sink reset (RST) because of `reset_ratio`.
    pub connections_reset: u64,
    /// Connections that ended from the peer's side: end of stream, reset, or a
    /// failed send.
    pub connections_closed_by_peer: u64,
    /// Echo: times a connection's receive was stopped because the replies its peer
    /// had not read held its share of the ring's receive buffers (resumed as they
    /// drain).
    pub connections_throttled: u64,
    /// Request bytes read. UDP: bytes of the `received` datagrams (UDP payload, i.e.
    /// blaster header + payload; no IP/UDP headers).
    pub bytes_received: u64,
    /// Reply bytes written.
    pub bytes_sent: u64,
    /// Replies fully sent (echo: one per read echoed; UDP: datagrams sent).
    pub replies: u64,
    /// UDP: datagrams with blaster's header (excluding those dropped on purpose).
    pub received: u64,
    /// UDP: datagrams without blaster's header (or shorter than it).
    pub foreign: u64,
    /// UDP: arrivals of a sequence number already seen in its flow.
    pub duplicates: u64,
    /// UDP: arrivals below the highest sequence number seen in their flow, not seen
    /// before (includes `late`).
    pub reordered: u64,
    /// UDP: arrivals more than 1023 below the highest of their flow, where
    /// duplicates cannot be told apart: taken as reordered originals.
    pub late: u64,
    /// UDP: per flow, highest sequence + 1 minus the distinct numbers received,
    /// summed (includes the datagrams dropped on purpose).
    pub lost: u64,
    /// UDP: datagrams dropped on purpose (`drop_ratio`): neither received nor
    /// answered.
    pub dropped: u64,
    /// UDP: received datagrams of flows that found the flow table full (65536 flows
    /// per thread); not in the loss, reordering or duplicate counts.
    pub untracked: u64,
    /// UDP: flows tracked.
    pub flows: u64,
    /// UDP: replies the kernel refused or that waited out the 10 ms send timeout.
    pub send_failed: u64,
    /// UDP: datagrams the kernel dropped before the sink read them (receive buffer
    /// full), from SO_RXQ_OVFL; 0 if none or unsupported.
    pub kernel_drops: u64,
    /// UDP: the receive buffer the kernel granted per socket (SO_RCVBUF as read back).
    pub rcvbuf_bytes: u64,
    /// UDP: when the first datagram arrived, ns since the sink started.
    pub first_datagram_ns: Option<u64>,
    /// UDP: when the last datagram arrived, ns since the sink started.
    pub last_datagram_ns: Option<u64>,
    /// UDP: seconds from the first datagram to the last.
    pub elapsed_s: f64,
    /// UDP: one entry per second from the first datagram to the last (or to the
    /// snapshot), gaps filled with zeros.
    pub series: Vec<SecondStats>,
    /// Broadcast mode's counters.
    pub broadcast: BroadcastStats,
}

impl SinkStats {
    pub(super) fn add(&mut self, other: &SinkStats) {
        self.connections_accepted += other.connections_accepted;
        self.connections_rejected += other.connections_rejected;
        self.connections_open += other.connections_open;
        self.connections_peak = self.connections_peak.max(other.connections_peak);
        self.connections_closed += other.connections_closed;
        self.connections_reset += other.connections_reset;
        self.connections_closed_by_peer += other.connections_closed_by_peer;
        self.connections_throttled += other.connections_throttled;
        self.bytes_received += other.bytes_received;
        self.bytes_sent += other.bytes_sent;
        self.replies += other.replies;
        self.received += other.received;
        self.foreign += other.foreign;
        self.duplicates += other.duplicates;
        self.reordered += other.reordered;
        self.late += other.late;
        // Saturating: a crafted sequence number makes a flow's loss as large as it gets.
        self.lost = self.lost.saturating_add(other.lost);
        self.dropped += other.dropped;
        self.untracked += other.untracked;
        self.flows += other.flows;
        self.send_failed += other.send_failed;
        self.kernel_drops += other.kernel_drops;
        self.rcvbuf_bytes = self.rcvbuf_bytes.max(other.rcvbuf_bytes);
        self.first_datagram_ns = match (self.first_datagram_ns, other.first_datagram_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_datagram_ns = self.last_datagram_ns.max(other.last_datagram_ns);
        self.broadcast.add(&other.broadcast);
        if !other.series.is_empty() {
            self.series.extend_from_slice(&other.series);
            self.series.sort_by_key(|s| s.second);
            let mut merged: Vec<SecondStats> = Vec::with_capacity(self.series.len());
            for s in self.series.drain(..) {
                match merged.last_mut() {
                    Some(last) if last.second == s.second => last.add(&s),
                    _ => merged.push(s),
                }
            }
            self.series = merged;
        }
    }

    /// After the threads' parts are added up: the elapsed time, a gap-free series
    /// with its rates, the last interval marked partial.
    pub(super) fn finish_udp(&mut self) {
        self.elapsed_s = match (self.first_datagram_ns, self.last_datagram_ns) {
            (Some(first), Some(last)) => last.saturating_sub(first) as f64 / 1e9,
            _ => 0.0,
        };
        if let (Some(first), Some(last)) = (self.series.first(), self.series.last()) {
            let (first, last) = (first.second, last.second);
            if (last - first + 1) as usize != self.series.len() {
                let mut dense: Vec<SecondStats> = (first..=last)
                    .map(|second| SecondStats {
                        second,
                        ..SecondStats::default()
                    })
                    .collect();
                for s in self.series.drain(..) {
                    let at = (s.second - first) as usize;
                    dense[at] = s;
                }
                self.series = dense;
            }
        }
        for s in &mut self.series {
            s.received_pps = s.received as f64;
            s.received_bps = s.bytes as f64 * 8.0;
            s.partial = false;
        }
        if let Some(last) = self.series.last_mut() {
            last.partial = true;
        }
    }
}

/// The UDP report as JSON: totals, rates and the per-second series. Keys:
/// `received`, `lost`, `reordered` (includes `late`), `late`, `duplicates`,
/// `foreign`, `dropped`, `untracked`, `flows`, `kernel_drops`, `bytes_received`,
/// `replies`, `bytes_sent`, `send_failed`, `rcvbuf_bytes`, `elapsed_s` (first to last
/// datagram), `loss_ratio` (lost / (received - duplicates - untracked + lost): the
/// fraction of the datagrams sent — as the sequence numbers tell — that never
/// arrived; 0 with no traffic), `received_pps` (received / elapsed_s; 0 when
/// elapsed_s is 0), `received_bps` (bits per second of the received datagrams: UDP
/// payload incl. blaster's header, excluding IP and UDP headers; 0 when elapsed_s is
/// 0), `intervals` (the series: objects with the fields of [`SecondStats`]) and
/// `broadcast` (the fields of [`BroadcastStats`]).
pub fn udp_report_json(stats: &SinkStats) -> serde_json::Value {
    let distinct = stats
        .received
        .saturating_sub(stats.duplicates)
        .saturating_sub(stats.untracked);
    let sent = distinct.saturating_add(stats.lost);
    let loss_ratio = if sent == 0 {
        0.0
    } else {
        stats.lost as f64 / sent as f64
    };
    let per_s = |n: u64| {
        if stats.elapsed_s > 0.0 {
            n as f64 / stats.elapsed_s
        } else {
            0.0
        }
    };
    serde_json::json!({
        "received": stats.received,
        "lost": stats.lost,
        "reordered": stats.reordered,
        "late": stats.late,
        "duplicates": stats.duplicates,
        "foreign": stats.foreign,
        "dropped": stats.dropped,
        "untracked": stats.untracked,
        "flows": stats.flows,
        "kernel_drops": stats.kernel_drops,
        "bytes_received": stats.bytes_received,
        "replies": stats.replies,
        "bytes_sent": stats.bytes_sent,
        "send_failed": stats.send_failed,
        "rcvbuf_bytes": stats.rcvbuf_bytes,
        "elapsed_s": stats.elapsed_s,
        "loss_ratio": loss_ratio,
        "received_pps": per_s(stats.received),
        "received_bps": per_s(stats.bytes_received) * 8.0,
        "intervals": stats.series,
        "broadcast": stats.broadcast,
    })
}

/// The TCP report as JSON. Keys: `proto` ("tcp"), `connections` {`open` (held
/// now; at the end, just before stopping), `peak`, `accepted`, `rejected`,
/// `closed` (by `--close-every`), `reset` (by `--reset-ratio`), `closed_by_peer`,
/// `throttled` (echo receives stopped because unread replies held the connection's
/// share of the receive buffers)},
/// `bytes_received`, `bytes_sent`, `replies`, `rings`, `rings_per_core`,
/// `direct_descriptors`, `ring_table_slots`, `fallback` (null or why direct
/// descriptors are not used), `memory` (the fields of [`MemoryFigures`]),
/// `elapsed_s` (since the sink started) and `broadcast` (the fields of
/// [`BroadcastStats`]).
pub fn tcp_report_json(
    stats: &SinkStats,
    layout: &TcpLayout,
    memory: &MemoryFigures,
    elapsed_s: f64,
) -> serde_json::Value {
    serde_json::json!({
        "proto": "tcp",
        "connections": {
            "open": stats.connections_open,
            "peak": stats.connections_peak,
            "accepted": stats.connections_accepted,
            "rejected": stats.connections_rejected,
            "closed": stats.connections_closed,
            "reset": stats.connections_reset,
            "closed_by_peer": stats.connections_closed_by_peer,
            "throttled": stats.connections_throttled,
        },
        "bytes_received": stats.bytes_received,
        "bytes_sent": stats.bytes_sent,
        "replies": stats.replies,
        "rings": layout.rings,
        "rings_per_core": layout.rings_per_core,
        "direct_descriptors": layout.direct_descriptors,
        "ring_table_slots": layout.ring_table_slots,
        "fallback": layout.fallback,
        "memory": memory,
        "elapsed_s": elapsed_s,
        "broadcast": stats.broadcast,
    })
}
