//! The worker's logic driven by a mock clock, without a network: the timetable's
//! cursor, request expiry, connection-per-request assignment and the closed loop.
//! Connections are put into the state a test needs by hand (no socket: descriptor -1,
//! so closing one queues nothing in the ring).

use super::Worker;
use super::recv::Reply;
use super::workload::{Timetable, Workload};
use crate::clock::{Clock, Nanos};
use crate::engine::conn_table::{ConnState, Req};
use crate::engine::recorder::ErrorKind;
use crate::engine::run_loop::Hooks;
use crate::engine::worker_plan::WorkerPlan;
use std::sync::Arc;
use std::time::Duration;

const MS: Nanos = 1_000_000;

fn plan(connections: usize) -> WorkerPlan {
    WorkerPlan::for_tests(connections)
}

/// A worker on `plan` whose clock is the returned mock (time zero = the run's start).
fn worker(plan: &WorkerPlan) -> (Worker<'_>, Arc<quanta::Mock>) {
    let (snap_tx, _snap_rx) = crossbeam_channel::unbounded();
    let (_recycle_tx, recycle_rx) = crossbeam_channel::unbounded();
    let mut w = Worker::new(plan, snap_tx, recycle_rx).expect("io_uring available");
    let (clock, mock) = Clock::mock();
    w.clock = clock;
    w.running = true;
    (w, mock)
}

/// Connection `c` open and usable (no socket behind it).
fn make_ready(w: &mut Worker<'_>, c: u32) {
    w.table.conns[c as usize].state = ConnState::Ready;
    w.closed -= 1;
}

fn req(intended_ns: Nanos) -> Req {
    Req {
        intended_ns,
        ..Req::default()
    }
}

#[test]
fn the_timetable_hands_out_each_request_at_its_instant_and_ends_at_the_duration() {
    // 1000/s for 10 ms: requests due at 0, 1, ..., 9 ms, each once, none early.
    let mut t = Timetable::new(&plan(1));
    let (clock, mock) = Clock::mock();
    let mut got = Vec::new();
    while clock.now_ns() <= 12 * MS {
        let now = clock.now_ns();
        while let Some((intended, seq)) = t.pop_due(now) {
            assert!(intended <= now, "request {seq} handed out early");
            assert!(now - intended < 250_000, "request {seq} handed out late");
            got.push((intended, seq));
        }
        mock.increment(Duration::from_micros(250));
    }
    let want: Vec<(Nanos, u64)> = (0..10).map(|k| (k * MS, k)).collect();
    assert_eq!(got, want);
    assert!(t.all_dispatched());
    assert_eq!(t.next_due(), None);
}

#[test]
fn expired_requests_are_timeouts_recorded_at_the_timeout_then_the_connection_reopens() {
    let p = plan(1);
    let (mut w, mock) = worker(&p);
    make_ready(&mut w, 0);
    for intended in [0, 5 * MS] {
        w.assign(0, req(intended));
    }
    assert_eq!(w.inflight, 2);
    // Just before the first deadline: nothing expires.
    mock.increment(Duration::from_micros(9_999));
    w.scan(w.clock.now_ns());
    assert_eq!(w.out.counters.errors_of(ErrorKind::Timeout), 0);
    // At it: the first request times out, recorded at exactly the timeout; the
    // connection stops taking requests (responses can no longer be matched).
    mock.increment(Duration::from_micros(1));
    w.scan(w.clock.now_ns());
    assert_eq!(w.out.counters.errors_of(ErrorKind::Timeout), 1);
    assert_eq!(w.out.hist.latency.len(), 1);
    assert!(
        w.out
            .hist
            .latency
            .equivalent(w.out.hist.latency.max(), p.timeout_ns)
    );
    assert_eq!(w.table.conns[0].state, ConnState::Expiring);
    assert!(!w.table.has_free_slot(0));
    // The second at its own deadline; with nothing left in flight the connection is
    // closed and reopens at once (the generator's decision, not the target's).
    mock.increment(Duration::from_millis(5));
    w.scan(w.clock.now_ns());
    assert_eq!(w.out.counters.errors_of(ErrorKind::Timeout), 2);
    assert_eq!(w.inflight, 0);
    assert_eq!(
        w.table.conns[0].state,
        ConnState::Closed { reopen_at_ns: 0 }
    );
}

#[test]
fn a_request_waiting_in_the_backlog_times_out_too() {
    let p = plan(1);
    let (mut w, mock) = worker(&p);
    // No connection is open: due requests wait in the backlog.
    mock.increment(Duration::from_micros(2_500));
    let now_t = w.clock.ticks();
    assert_eq!(w.dispatch_due(now_t, w.clock.ns(now_t)), 3);
    assert_eq!(w.backlog.len(), 3);
    assert_eq!(w.out.hist.dispatch_lag.len(), 3);
    // 10 ms after the first one's intended instant, it (only) has timed out.
    mock.increment(Duration::from_micros(7_500));
    w.scan(w.clock.now_ns());
    assert_eq!(w.backlog.len(), 2);
    assert_eq!(w.out.counters.errors_of(ErrorKind::Timeout), 1);
}

#[test]
fn connection_per_request_gives_each_request_its_own_closed_connection() {
    let mut p = plan(2);
    p.per_request = true;
    p.pipeline = 1;
    // Connects are paced far apart, so the test opens no socket: every open waits.
    p.connect_gap_ns = 1_000 * MS;
    let (mut w, mock) = worker(&p);
    assert!(matches!(w.workload, Workload::PerRequest(_)));
    w.next_connect_ns = 1_000 * MS;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let ready = w.connect_all(&stop);
    assert_eq!(ready.established, 0, "nothing opens before the schedule");
    // Two requests due: one per connection, each waiting for its connect.
    mock.increment(Duration::from_micros(1_500));
    let now_t = w.clock.ticks();
    assert_eq!(w.dispatch_due(now_t, w.clock.ns(now_t)), 2);
    assert!(w.backlog.is_empty());
    for c in 0..2 {
        assert_eq!(w.table.conns[c].inflight, 1, "connection {c}");
        assert!(
            w.table.conns[c].deferred,
            "connection {c} waits for its connect"
        );
    }
    // A third finds no idle connection and waits in the backlog.
    mock.increment(Duration::from_millis(1));
    let now_t = w.clock.ticks();
    assert_eq!(w.dispatch_due(now_t, w.clock.ns(now_t)), 1);
    assert_eq!(w.backlog.len(), 1);
    // The first request times out while its connection waits: recorded at the
    // timeout, and the connection is free for the next request, never reopened by
    // itself.
    mock.increment(Duration::from_micros(7_500));
    w.scan(w.clock.now_ns());
    assert_eq!(w.out.counters.errors_of(ErrorKind::Timeout), 1);
    assert_eq!(w.table.conns[0].inflight, 0);
    assert_eq!(w.reopen_at(0, super::Reopen::Now), Nanos::MAX);
    w.serve_backlog();
    assert!(w.backlog.is_empty());
    assert_eq!(w.table.conns[0].inflight, 1);
}

#[test]
fn the_closed_loop_issues_the_next_request_when_a_response_completes() {
    let mut p = plan(1);
    p.closed_loop = true;
    p.rate_rps = 0.0;
    p.workers = 2;
    p.index = 1;
    let (mut w, mock) = worker(&p);
    assert_eq!(w.workload.next_due(), None, "no timetable");
    make_ready(&mut w, 0);
    let t0 = w.clock.ticks();
    w.issue(0, t0);
    let first = w.table.front(0).unwrap();
    assert_eq!(first.seq, 1, "worker 1 of 2 takes odd sequence numbers");
    // The request goes out (no ring here: marked sent by hand), its response comes
    // 300 us later: latency = service time (intended = issued, no queueing).
    w.table.conns[0].unsent = 0;
    mock.increment(Duration::from_micros(300));
    assert!(w.complete_one(0, w.clock.ticks(), Reply::Answer));
    assert_eq!(w.out.counters.completed, 1);
    let l = w.out.hist.latency.max();
    assert!(w.out.hist.latency.equivalent(l, 300_000), "{l}");
    // The next request follows on the same connection.
    w.reissue();
    let next = w.table.front(0).unwrap();
    assert_eq!(next.seq, 3);
    assert_eq!(w.out.counters.dispatched, 2);
    // Once the run stops, a completion issues nothing more.
    w.table.conns[0].unsent = 0;
    w.core.stopping = true;
    assert!(w.complete_one(0, w.clock.ticks(), Reply::Answer));
    w.reissue();
    assert_eq!(w.table.conns[0].inflight, 0);
    assert_eq!(w.out.counters.dispatched, 2);
}

#[test]
fn a_completion_batch_converts_its_instant_once_and_each_new_instant_again() {
    let p = plan(1);
    let (mut w, mock) = worker(&p);
    make_ready(&mut w, 0);
    mock.increment(Duration::from_millis(1));
    for i in 0..3 {
        w.table.push_req(0, req(i * 100_000));
    }
    w.table.conns[0].unsent = 0;
    w.inflight = 3;
    // Three responses reaped in one batch, at one instant (1 ms): latencies 1 ms,
    // 0.9 ms, 0.8 ms, all measured to the same converted instant.
    mock.increment(Duration::from_millis(1));
    let batch = w.clock.ticks();
    for _ in 0..3 {
        assert!(w.complete_one(0, batch, Reply::Answer));
    }
    assert_eq!(w.last_done_ns, 2 * MS);
    assert!(
        w.out
            .hist
            .latency
            .equivalent(w.out.hist.latency.min(), 1_800_000)
    );
    assert!(
        w.out
            .hist
            .latency
            .equivalent(w.out.hist.latency.max(), 2_000_000)
    );
    // The next batch, 5 ms later, is converted afresh (no stale instant).
    mock.increment(Duration::from_millis(5));
    w.table.push_req(0, req(6 * MS));
    w.table.conns[0].unsent = 0;
    w.inflight = 1;
    assert!(w.complete_one(0, w.clock.ticks(), Reply::Answer));
    assert_eq!(w.last_done_ns, 7 * MS);
    assert!(w.out.hist.latency.equivalent(w.out.hist.latency.min(), MS));
}

#[test]
fn latency_counts_from_the_intended_instant_and_service_time_from_the_send() {
    // The coordinated-omission rule in one request: due at 1 ms, sent late at 4 ms (the
    // generator or a full pipeline held it), answered at 5 ms. Latency 4 ms (what a
    // user waited), service time 1 ms (what the target took).
    let p = plan(1);
    let (mut w, mock) = worker(&p);
    make_ready(&mut w, 0);
    mock.increment(Duration::from_millis(4));
    let sent = w.clock.ticks();
    w.table.push_req(
        0,
        Req {
            intended_ns: MS,
            sent,
            ..Req::default()
        },
    );
    w.table.conns[0].unsent = 0;
    w.inflight = 1;
    mock.increment(Duration::from_millis(1));
    assert!(w.complete_one(0, w.clock.ticks(), Reply::Answer));
    let h = &w.out.hist;
    assert!(
        h.latency.equivalent(h.latency.max(), 4 * MS),
        "{}",
        h.latency.max()
    );
    assert!(
        h.service.equivalent(h.service.max(), MS),
        "{}",
        h.service.max()
    );
}

/// Issue 11 §6: the timeout scan visits only the watched connections, also once some
/// are closed for good (`--no-reconnect`), where it used to walk all of them every
/// millisecond; and what it must still see (requests in flight, a scheduled reopen)
/// stays on the list.
#[test]
fn the_scan_visits_only_watched_connections_when_some_are_closed_for_good() {
    let mut p = plan(256);
    p.pipeline = 1;
    let (mut w, mock) = worker(&p);
    for c in 0..256 {
        make_ready(&mut w, c);
    }
    // Connection 3 is closed by the target under --no-reconnect: closed forever.
    w.close_conn(3, None, super::Reopen::Backoff);
    assert_eq!(
        w.table.conns[3].state,
        ConnState::Closed {
            reopen_at_ns: Nanos::MAX
        }
    );
    // Connection 4 is closed by the generator: reopens at once (watched).
    w.close_conn(4, None, super::Reopen::Now);
    assert!(w.closed > 0);
    w.assign(7, req(0));
    mock.increment(Duration::from_micros(500));
    w.scan_visits = 0;
    w.scan(w.clock.now_ns());
    // Connection 7 (in flight) and 4 (its reopen: a connect on no socket fails at
    // once, closed again with a reopen, still watched); not the 254 others.
    assert!(w.scan_visits <= 2, "visited {}", w.scan_visits);
    assert!(w.table.conns[7].in_active, "in flight: still watched");
    assert!(!w.table.conns[3].in_active, "closed for good: not watched");
    // Still watched, the request times out at its deadline.
    mock.increment(Duration::from_millis(10));
    w.scan(w.clock.now_ns());
    assert_eq!(w.out.counters.errors_of(ErrorKind::Timeout), 1);
    // Every connection the scan has something to do for is on the list.
    for c in 0..256u32 {
        if w.needs_scan(c) {
            assert!(w.table.conns[c as usize].in_active, "connection {c}");
        }
    }
}

/// Reaps completions (waiting up to 10 ms each time) until `done` holds, for at most
/// 2 s.
fn reap_until(w: &mut Worker<'_>, done: impl Fn(&Worker<'_>) -> bool) -> bool {
    let end = std::time::Instant::now() + Duration::from_secs(2);
    while !done(w) && std::time::Instant::now() < end {
        w.core.submit_and_wait(10 * MS);
        w.reap();
    }
    done(w)
}

/// Issue 22: on a kernel without provided-buffer rings (before 5.19) a receive is
/// single-shot, into the connection's own region, and the socket is a descriptor.
/// Closing the descriptor does not end a receive in the ring (the ring holds the
/// socket), so the connection used to reopen at once and arm a second receive into
/// the region the first could still fill. Now the close cancels it, and the
/// connection stays `Closing` (not reopened by the scan) until every operation that
/// points into its region has completed.
#[test]
fn a_closed_connection_reopens_only_after_its_single_shot_receive_left_the_ring() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut p = plan(1);
    p.target = listener.local_addr().unwrap();
    p.targets = vec![p.target].into();
    let (mut w, mock) = worker(&p);
    // The pre-5.19 path: descriptors, single-shot receives.
    w.fixed_files = false;
    w.multishot = false;
    w.open(0);
    assert!(reap_until(&mut w, |w| w.table.conns[0].state == ConnState::Ready));
    let (_peer, _) = listener.accept().unwrap();
    let conn = &w.table.conns[0];
    assert!(conn.fd >= 0 && conn.recv_armed);
    assert_eq!(conn.ops, 1, "its receive, in the ring");
    w.close_conn(0, None, super::Reopen::Now);
    assert_eq!(
        w.table.conns[0].state,
        ConnState::Closing { reopen_at_ns: 0 },
        "its receive is still in the ring"
    );
    mock.increment(Duration::from_millis(1));
    w.scan(w.clock.now_ns());
    assert_eq!(
        w.table.conns[0].state,
        ConnState::Closing { reopen_at_ns: 0 },
        "not reopened while the old receive may write into its region"
    );
    assert!(reap_until(&mut w, |w| w.table.conns[0].ops == 0));
    assert_eq!(
        w.table.conns[0].state,
        ConnState::Closed { reopen_at_ns: 0 }
    );
    assert_eq!(
        w.core.ops_in_ring(),
        0,
        "the receive and its cancel both completed"
    );
    // Now it reopens.
    w.scan(w.clock.now_ns());
    assert_eq!(w.table.conns[0].state, ConnState::Connecting);
    assert!(reap_until(&mut w, |w| w.table.conns[0].state == ConnState::Ready));
    w.quiesce();
}

/// Issue 24 §3: once a TLS connection's handshake is done, requests cost the worker
/// no allocation: records are sealed into `tls_out` and opened in place in `tls_in`
/// (rustls's own record layer allocates a vector per record). The handshake and the
/// first requests (session tickets, the closed loop's first round) may allocate;
/// then 2,000 requests through the ring to a rustls echo server on loopback count
/// the worker thread's allocations, with TLS 1.3 and with TLS 1.2.
#[test]
fn tls_requests_allocate_nothing_on_the_worker_after_the_handshake() {
    use crate::engine::driver::tests::allocations_here;
    use crate::transport::tls::{TlsClient, TlsVersion, Trust};
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = crate::transport::tls::self_signed_localhost_in(dir.path());
    for version in [TlsVersion::V13, TlsVersion::V12] {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut p = plan(1);
        p.target = listener.local_addr().unwrap();
        p.targets = vec![p.target].into();
        p.closed_loop = true;
        p.rate_rps = 0.0;
        p.pipeline = 1;
        let client = TlsClient::new("localhost", Trust::Insecure, &[], Some(version), 0.0);
        p.tls = Some(Arc::new(client.unwrap()));
        let server = crate::transport::tls::echo_server(listener, &cert, &key);
        let (mut w, _mock) = worker(&p);
        w.open(0);
        assert!(reap_until(&mut w, |w| w.table.conns[0].state == ConnState::Ready));
        let requests = |w: &mut Worker<'_>, n: u64| {
            let until = w.out.counters.completed + n;
            let end = std::time::Instant::now() + Duration::from_secs(10);
            while w.out.counters.completed < until && std::time::Instant::now() < end {
                w.reissue();
                w.flush_sends();
                w.core.submit_and_wait(10 * MS);
                w.reap();
            }
            assert!(w.out.counters.completed >= until, "{version:?}: responses");
        };
        requests(&mut w, 50);
        let before = allocations_here();
        requests(&mut w, 2_000);
        let allocated = allocations_here() - before;
        assert_eq!(w.out.counters.tls.full, 1);
        assert_eq!(w.out.counters.errors.iter().sum::<u64>(), 0, "{version:?}");
        assert_eq!(allocated, 0, "{version:?}: allocations in 2,000 requests");
        w.core.stopping = true;
        w.close_conn(0, None, super::Reopen::Now);
        w.quiesce();
        drop(w);
        server.join().unwrap();
    }
}

/// A closed loop's sleep waits for the completions that arrive in 100 us at the rate
/// they last arrived: 10 at 100,000/s, capped by its share of what is in flight; at
/// most one at 5,000/s (no batching).
#[test]
fn a_closed_loops_batch_follows_its_completion_rate() {
    use super::closed_batch_for;
    let ms10 = 10_000_000;
    assert_eq!(closed_batch_for(1_000, ms10, 16), 10);
    assert_eq!(closed_batch_for(1_000, ms10, 8), 8);
    assert_eq!(closed_batch_for(350, ms10, 8), 3);
    assert_eq!(closed_batch_for(50, ms10, 8), 1);
    assert_eq!(closed_batch_for(0, ms10, 8), 1);
    assert_eq!(closed_batch_for(5, 0, 8), 8);
}
