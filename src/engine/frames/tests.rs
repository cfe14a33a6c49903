//! The frames worker's bookkeeping without a target: the reopen scan visits only the
//! connections waiting for their reopen, and the count of connections up is kept as
//! they change.

use super::*;
use crate::engine::run_loop::Hooks;
use crate::engine::worker_plan::FramePlan;
use crate::schedule::{FrameGrid, SENDERS_ALL};

pub(crate) fn worker_plan(connections: usize) -> WorkerPlan {
    let mut p = WorkerPlan::for_tests(connections);
    p.transport = Transport::Udp;
    p.frames = Some(FramePlan {
        spec: crate::proto::frame_proto::FrameSpec::new(
            crate::proto::frame_proto::FrameProtoKind::Blaster,
            crate::proto::frame_proto::TOPIC_DEFAULT,
            crate::proto::frame_proto::WS_PATH_DEFAULT,
            "localhost",
            64,
        )
        .unwrap(),
        grid: FrameGrid {
            tick_ns: 20_000_000,
            connections: connections as u64,
            room_size: 10,
            join_gap_ns: 0,
            joined_at_start: false,
            senders: SENDERS_ALL,
        },
        frame_size: 64,
        budget_ns: 20_000_000,
        echo: false,
        down_size: None,
        members_per_connection: 1,
        room_layout: crate::schedule::RoomLayout::Mixed,
        slow_readers: None,
        first_room: 0,
        room_count: (connections as u64).div_ceil(10),
    });
    p
}

/// The reopen scan visits only connections waiting for their reopen (issue 22):
/// 300 connections, 2 of them down, cost 2 visits per scan, not 300; the count of
/// connections up is kept as they change, never recounted.
#[test]
fn the_reopen_scan_visits_only_connections_waiting_to_reopen() {
    let p = worker_plan(300);
    let (snap_tx, _snap_rx) = crossbeam_channel::unbounded();
    let (_recycle_tx, recycle_rx) = crossbeam_channel::unbounded();
    let mut w = FrameWorker::new(&p, snap_tx, recycle_rx).expect("io_uring available");
    for c in 0..300 {
        w.open(c); // UDP: up at once
    }
    assert_eq!(w.down_count, 0);
    for c in [7, 200] {
        w.disconnect(c, 0);
        w.conns[c as usize].reopen_at = 1_000;
    }
    // Not while its receive is still in the ring (its region is the kernel's).
    w.scan_reopens(1_000);
    assert_eq!((w.scan_visits, w.down_count), (2, 2));
    for c in [7, 200] {
        w.conns[c as usize].ops = 0; // as if the receive had completed
    }
    assert_eq!(w.down_count, 2);
    w.set_active();
    assert_eq!(w.out.counters.frames.connections_active, 298);
    // Not yet due: visited, kept on the list.
    w.scan_reopens(500);
    assert_eq!(w.scan_visits, 4);
    assert!(w.timers());
    // Due: reopened, off the list; nothing left to visit.
    w.scan_reopens(1_000);
    assert_eq!((w.scan_visits, w.down_count), (6, 0));
    assert!(!w.timers());
    w.scan_reopens(2_000);
    assert_eq!(w.scan_visits, 6);
    w.quiesce();
}

/// Frames due on a connection and not sent yet when it goes down are counted as not
/// sent, once: its reopen starts from the frames due then, and the end's totals do
/// not count them again.
#[test]
fn frames_pending_when_a_connection_goes_down_are_counted_not_sent() {
    let p = worker_plan(20);
    let (snap_tx, _snap_rx) = crossbeam_channel::unbounded();
    let (_recycle_tx, recycle_rx) = crossbeam_channel::unbounded();
    let mut w = FrameWorker::new(&p, snap_tx, recycle_rx).expect("io_uring available");
    for c in 0..20 {
        w.open(c); // UDP: up at once
    }
    let conn = &mut w.conns[3];
    (conn.pend_k, conn.pend) = (5, 3); // three ticks due, waiting behind a send
    w.disconnect(3, 0);
    assert_eq!(w.out.counters.frames.not_sent, 3);
    assert_eq!(w.conns[3].pend, 0);
    w.conns[3].ops = 0; // as if the receive had completed
    w.conns[3].reopen_at = 1_000;
    w.scan_reopens(1_000);
    assert!(w.conns[3].up, "reopened");
    let mut t = crate::engine::recorder::WorkerTotals::default();
    w.totals(&mut t);
    assert_eq!(w.out.counters.frames.not_sent, 3, "counted once");
    w.quiesce();
}

/// The drain's quiet interval is at most its cap, whatever the budget: a 5 s tick
/// (budget past the 2 s cap) ended every run in a panic (`clamp` with min > max).
#[test]
fn the_quiet_interval_is_capped_even_past_a_long_budget() {
    let cap = crate::limits::DRAIN_NS_MAX;
    assert_eq!(quiet_ns(0, 5_000_000_000), cap);
    assert_eq!(quiet_ns(0, 20_000_000), 30_000_000);
    assert_eq!(quiet_ns(100_000_000, 20_000_000), 200_000_000);
    assert_eq!(quiet_ns(u64::MAX, 20_000_000), cap);
}
