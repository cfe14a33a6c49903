//! `--replay`: the reader thread that streams the recording to the workers, and each
//! worker's cursor on what it was given.
//!
//! One thread reads the recording once more (it was checked before the run) and
//! deals its requests out by sequence number as any timetable is dealt: machine shard
//! `i` of `N` takes the requests whose number is `i` mod `N`, and of those worker `w`
//! of `W` takes every `W`-th (together: lane `w·N + i` of `W·N`, [`Shard::lanes`]).
//! Each worker's requests travel in [`Chunk`]s of a fixed size over a bounded
//! channel; a worker hands a chunk back once every request in it has been placed on a
//! connection (or has failed), and the reader refills it. A worker holds at most
//! [`CHUNKS_PER_WORKER`] chunks, so the memory a replay takes is fixed at start
//! whatever the recording's length. When the reader cannot keep ahead (the chunks are
//! all held by requests waiting for a connection), the next request is late, and its
//! lateness is the dispatch lag the validity gate judges.

use crate::clock::Nanos;
use crate::request::replay::{Recording, ReplayPlan};
use crate::schedule::Shard;
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

/// Bytes of requests a chunk holds (a longer request gets a chunk of its own size).
pub const CHUNK_BYTES: usize = 256 << 10;
/// Requests a chunk holds at most.
pub const CHUNK_REQUESTS: usize = 4096;
/// Chunks in circulation per worker: in its channel, and held by it.
pub const CHUNKS_PER_WORKER: usize = 8;
/// How soon a worker whose next request has not arrived looks again.
const STARVED_POLL_NS: Nanos = 20_000;

/// Consecutive requests of one worker: their due instants and bytes.
#[derive(Debug)]
pub struct Chunk {
    /// The worker's own number (its `k`) of the first request.
    first_k: u64,
    dues: Vec<Nanos>,
    /// Request j is `bytes[ends[j - 1]..ends[j]]` (from 0 for the first).
    ends: Vec<u32>,
    bytes: Vec<u8>,
}

impl Chunk {
    fn new() -> Chunk {
        Chunk {
            first_k: 0,
            dues: Vec::with_capacity(CHUNK_REQUESTS),
            ends: Vec::with_capacity(CHUNK_REQUESTS),
            bytes: Vec::with_capacity(CHUNK_BYTES),
        }
    }

    fn clear(&mut self) {
        self.dues.clear();
        self.ends.clear();
        self.bytes.clear();
    }

    fn len(&self) -> usize {
        self.dues.len()
    }

    fn full(&self) -> bool {
        self.dues.len() >= CHUNK_REQUESTS || self.bytes.len() >= CHUNK_BYTES
    }

    fn request(&self, j: usize) -> &[u8] {
        let start = if j == 0 { 0 } else { self.ends[j - 1] as usize };
        &self.bytes[start..self.ends[j] as usize]
    }
}

/// A worker's end of the reader's stream.
#[derive(Clone)]
pub struct Feed {
    rx: Receiver<Chunk>,
    back: Sender<Chunk>,
    /// This worker's lane: it owns the requests `k·lanes + lane`.
    lanes: u64,
    lane: u64,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Feed(lane {} of {})", self.lane, self.lanes)
    }
}

/// The reader's end of one worker's stream.
struct Outlet {
    tx: Sender<Chunk>,
    back: Receiver<Chunk>,
    chunk: Option<Chunk>,
    made: usize,
}

impl Outlet {
    /// The chunk to add to: the one being filled, a returned one, a new one while
    /// fewer than [`CHUNKS_PER_WORKER`] exist, or (blocking) the next returned;
    /// `None` once the worker is gone.
    fn chunk(&mut self) -> Option<&mut Chunk> {
        if self.chunk.is_none() {
            let c = match self.back.try_recv() {
                Ok(c) => c,
                Err(_) if self.made < CHUNKS_PER_WORKER => {
                    self.made += 1;
                    Chunk::new()
                }
                Err(_) => self.back.recv().ok()?,
            };
            self.chunk = Some(c);
        }
        self.chunk.as_mut()
    }

    /// Whether [`Self::chunk`] would wait for the worker to hand a chunk back.
    fn would_wait(&self) -> bool {
        self.chunk.is_none() && self.back.is_empty() && self.made >= CHUNKS_PER_WORKER
    }

    /// Sends the chunk being filled, if it holds anything; `false` once the worker
    /// is gone.
    fn flush(&mut self) -> bool {
        match self.chunk.take() {
            Some(c) if c.len() > 0 => self.tx.send(c).is_ok(),
            other => {
                self.chunk = other;
                true
            }
        }
    }
}

/// Why a replay's reader stopped before the recording's end, once it has: what the
/// run's report and exit code say (`ReplayReport::stopped`).
pub type Stopped = Arc<OnceLock<String>>;

/// Starts the reader of `plan` for `workers` workers of machine shard `shard`,
/// sending the requests due before `duration_ns`; each worker's [`Feed`] in order.
/// The reader ends at the recording's end (or the run's), when a worker is gone, or
/// at an error reading the file (the file changed since it was checked): what was
/// read before is still sent, and the error is set in the returned [`Stopped`].
pub fn start(
    plan: &ReplayPlan,
    duration_ns: Nanos,
    shard: Shard,
    workers: usize,
) -> std::io::Result<(Vec<Feed>, Stopped)> {
    let workers = workers.max(1);
    let mut feeds = Vec::with_capacity(workers);
    let mut outlets = Vec::with_capacity(workers);
    for w in 0..workers {
        let (tx, rx) = crossbeam_channel::bounded(CHUNKS_PER_WORKER);
        let (back_tx, back) = crossbeam_channel::bounded(CHUNKS_PER_WORKER);
        let (lanes, lane) = shard.lanes(workers as u64, w as u64);
        feeds.push(Feed {
            rx,
            back: back_tx,
            lanes,
            lane,
        });
        outlets.push(Outlet {
            tx,
            back,
            chunk: None,
            made: 0,
        });
    }
    let plan = plan.clone();
    let stopped = Stopped::default();
    let said = stopped.clone();
    std::thread::Builder::new()
        .name("blaster-replay".into())
        .spawn(move || {
            if let Err(e) = read(&plan, duration_ns, shard, &mut outlets) {
                // Said first: the flush below may wait for a worker to take a chunk.
                let _ = said.set(format!("--replay {}: {e}", plan.path.display()));
            }
            // What was read before an error is still sent.
            for o in outlets.iter_mut() {
                o.flush();
            }
        })?;
    Ok((feeds, stopped))
}

/// The reader's loop: each pass over the recording (one, or until the run's end with
/// `--replay-loop`), each request to its worker.
fn read(
    plan: &ReplayPlan,
    duration_ns: Nanos,
    shard: Shard,
    outlets: &mut [Outlet],
) -> Result<(), crate::request::replay::ReplayError> {
    let n = u64::from(shard.count());
    let w = outlets.len() as u64;
    let lanes = w * n;
    let mut scratch = Vec::with_capacity(plan.summary.longest);
    let mut seq = 0u64;
    'passes: for pass in 0.. {
        let mut rec: Box<dyn Recording> = plan.open()?;
        while let Some(offset) = rec.next(&mut scratch)? {
            let s = seq;
            seq += 1;
            if scratch.len() > plan.summary.longest {
                // The workers' buffers hold the longest request seen when the plan
                // read the file: a longer one means the file changed since.
                let (what, line) = rec.position();
                return Err(crate::request::replay::ReplayError {
                    line,
                    what,
                    message: format!(
                        "{} bytes, more than the longest ({}) when the file was checked: \
                         it changed during the run; the replay stops here",
                        scratch.len(),
                        plan.summary.longest
                    ),
                });
            }
            let due = plan.timing.due_ns(pass, offset);
            if due >= duration_ns {
                break 'passes;
            }
            if s % n != u64::from(shard.index()) {
                scratch.clear();
                continue;
            }
            let to = ((s / n) % w) as usize;
            if outlets[to].would_wait() {
                // Before waiting on one worker, the others get what is read for them
                // (a worker given only long requests must not starve the rest).
                for o in outlets.iter_mut() {
                    if !o.flush() {
                        return Ok(());
                    }
                }
            }
            let outlet = &mut outlets[to];
            let Some(chunk) = outlet.chunk() else {
                return Ok(());
            };
            if chunk.len() == 0 {
                chunk.first_k = s / lanes;
            }
            chunk.bytes.extend_from_slice(&scratch);
            chunk.ends.push(chunk.bytes.len() as u32);
            chunk.dues.push(due);
            scratch.clear();
            if chunk.full() && !outlet.flush() {
                return Ok(());
            }
        }
        if !plan.looped {
            break;
        }
    }
    Ok(())
}

/// A worker's cursor on its requests: the chunks it holds, oldest first, and where
/// the next request to dispatch is among them.
#[derive(Debug)]
pub struct Cursor {
    feed: Feed,
    live: VecDeque<Chunk>,
    /// The next request: chunk `at.0` of `live`, request `at.1` in it.
    at: (usize, usize),
    /// The next request's due instant, once it has arrived.
    next: Option<Nanos>,
    /// The reader has sent everything.
    ended: bool,
    /// While the next request has not arrived: when to look again.
    poll_at: Nanos,
    /// The reader was not ahead: times the next request had not arrived when asked.
    pub starved: u64,
    starving: bool,
}

impl Cursor {
    pub fn new(feed: Feed) -> Cursor {
        let mut c = Cursor {
            feed,
            live: VecDeque::with_capacity(CHUNKS_PER_WORKER + 1),
            at: (0, 0),
            next: None,
            ended: false,
            poll_at: 0,
            starved: 0,
            starving: false,
        };
        c.arrive();
        c
    }

    /// Finds the next request among the chunks held or arrived.
    fn arrive(&mut self) {
        while self.next.is_none() && !self.ended {
            let (ci, ri) = self.at;
            if let Some(chunk) = self.live.get(ci) {
                if ri < chunk.len() {
                    self.next = Some(chunk.dues[ri]);
                    self.starving = false;
                    return;
                }
                self.at = (ci + 1, 0);
                continue;
            }
            match self.feed.rx.try_recv() {
                Ok(chunk) => self.live.push_back(chunk),
                Err(TryRecvError::Disconnected) => self.ended = true,
                Err(TryRecvError::Empty) => {
                    if !self.starving {
                        self.starving = true;
                        self.starved += 1;
                    }
                    return;
                }
            }
        }
    }

    /// The next request due by `now_ns`, as (intended instant, global sequence
    /// number); `None` when none is due yet, none has arrived, or the replay is over.
    #[inline]
    pub fn pop_due(&mut self, now_ns: Nanos) -> Option<(Nanos, u64)> {
        self.arrive();
        if self.next.is_none() {
            self.poll_at = now_ns.saturating_add(STARVED_POLL_NS);
        }
        let due = self.next.filter(|&d| d <= now_ns)?;
        let (ci, ri) = self.at;
        let k = self.live[ci].first_k + ri as u64;
        self.at = (ci, ri + 1);
        self.next = None;
        self.arrive();
        Some((due, k * self.feed.lanes + self.feed.lane))
    }

    /// When the next request is due: a moment after the last look while it has not
    /// arrived (the loop sleeps that long rather than spin against the reader),
    /// `None` once the replay is over.
    #[inline]
    pub fn next_due(&self) -> Option<Nanos> {
        match self.next {
            Some(d) => Some(d),
            None if self.ended => None,
            None => Some(self.poll_at),
        }
    }

    #[inline]
    pub fn all_dispatched(&self) -> bool {
        self.ended && self.next.is_none()
    }

    /// The bytes of request `seq` (dispatched, and not yet released).
    #[inline]
    pub fn bytes(&self, seq: u64) -> &[u8] {
        let k = seq / self.feed.lanes;
        for chunk in &self.live {
            if k < chunk.first_k + chunk.len() as u64 {
                return chunk.request((k - chunk.first_k) as usize);
            }
        }
        &[]
    }

    /// Hands back every chunk whose requests all come before request `seq` (the
    /// oldest not yet placed on a connection; `None`: every dispatched one is placed).
    #[inline]
    pub fn release_before(&mut self, seq: Option<u64>) {
        let k = seq.map_or(u64::MAX, |s| s / self.feed.lanes);
        while self.at.0 > 0
            && let Some(front) = self.live.front()
            && front.first_k + front.len() as u64 <= k
        {
            let mut c = self.live.pop_front().expect("front exists");
            c.clear();
            // The reader holds the other end until the run ends; a full channel
            // cannot be (it has room for every chunk there is).
            let _ = self.feed.back.try_send(c);
            self.at.0 -= 1;
        }
    }
}

/// A TCP worker's copy of each placed request's bytes, one region per request slot
/// (connection × pipeline), written when the request is placed on its connection and
/// read when its send is prepared: the chunk it came from may be refilled between.
#[derive(Debug, Default)]
pub struct Slots {
    bytes: Vec<u8>,
    lens: Vec<u32>,
    stride: usize,
}

impl Slots {
    /// `slots` regions of `stride` bytes (the longest request).
    pub fn new(slots: usize, stride: usize) -> Slots {
        Slots {
            bytes: vec![0; slots * stride],
            lens: vec![0; slots],
            stride,
        }
    }

    #[inline]
    pub fn put(&mut self, i: usize, request: &[u8]) {
        let n = request.len().min(self.stride);
        self.bytes[i * self.stride..i * self.stride + n].copy_from_slice(&request[..n]);
        self.lens[i] = n as u32;
    }

    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        &self.bytes[i * self.stride..i * self.stride + self.lens[i] as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::replay::{Carrier, Format, LineKind, Summary, Timing, summarize};
    use std::time::{Duration, Instant};

    /// A text recording of payload lines in a temporary file, and its plan.
    fn plan_of(text: &str, speed: f64, looped: bool) -> (tempfile::TempDir, ReplayPlan) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.txt");
        std::fs::write(&path, text).unwrap();
        let mut rec = crate::request::replay::open(
            &path,
            Format::Text,
            &LineKind::Payload,
            Carrier::Tcp,
            None,
        )
        .unwrap();
        let summary: Summary = summarize(&mut *rec, 1 << 20).unwrap();
        let plan = ReplayPlan {
            path,
            format: Format::Text,
            kind: LineKind::Payload,
            carrier: Carrier::Tcp,
            port: None,
            summary,
            timing: Timing::of(&summary, speed),
            looped,
        };
        (dir, plan)
    }

    /// Everything a worker's cursor is dealt, as (due, seq, bytes), handing each
    /// chunk back as a worker would once its requests are placed.
    fn drain(feed: Feed) -> Vec<(Nanos, u64, Vec<u8>)> {
        let mut c = Cursor::new(feed);
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !c.all_dispatched() {
            assert!(Instant::now() < deadline, "the reader stalled");
            match c.pop_due(Nanos::MAX) {
                Some((due, seq)) => got.push((due, seq, c.bytes(seq).to_vec())),
                None => std::thread::yield_now(),
            }
            c.release_before(None);
        }
        got
    }

    /// Line i: offset i ms, payload `r{i}`.
    fn lines(n: u64) -> String {
        (0..n).map(|i| format!("{i}ms r{i}\n")).collect()
    }

    /// A recording that grew a request longer than the plan's longest after it was
    /// checked stops the reader there (the workers' buffers are sized for the
    /// longest): the requests before it are dealt, that one never.
    #[test]
    fn a_request_longer_than_the_checked_longest_stops_the_reader() {
        let (_d, plan) = plan_of("0ms r0\n1ms r1\n2ms r2\n", 1.0, false);
        std::fs::write(&plan.path, "0ms r0\n1ms r1-now-longer\n2ms r2\n").unwrap();
        let (mut feeds, stopped) = start(&plan, Nanos::MAX, Shard::default(), 1).unwrap();
        let got = drain(feeds.remove(0));
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].2, b"r0");
        // The reader has ended (the feed drained to its end): its reason is set.
        let why = stopped.get().expect("the reader said why it stopped");
        assert!(
            why.contains("line 2") && why.contains("changed during the run"),
            "{why}"
        );
    }

    /// Issue 37: `--shard` of a replay covers every line exactly once across shards
    /// and workers, each with its own bytes at its own offset; 10,000 lines take
    /// several chunks per worker, so chunks are handed back and refilled.
    #[test]
    fn shards_and_workers_are_dealt_every_line_exactly_once() {
        let n = 10_000u64;
        let (_d, plan) = plan_of(&lines(n), 1.0, false);
        let mut seen = vec![0u32; n as usize];
        for i in 0..3 {
            let shard: Shard = format!("{i}/3").parse().unwrap();
            let feeds = start(&plan, Nanos::MAX, shard, 2).unwrap().0;
            for (w, feed) in feeds.into_iter().enumerate() {
                let (lanes, lane) = shard.lanes(2, w as u64);
                for (due, seq, bytes) in drain(feed) {
                    assert_eq!(seq % lanes, lane, "shard {i} worker {w} got {seq}");
                    assert_eq!(due, seq * 1_000_000, "request {seq}'s instant");
                    assert_eq!(bytes, format!("r{seq}").into_bytes());
                    seen[seq as usize] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&s| s == 1), "every line exactly once");
    }

    /// `--replay-loop` starts over after the recording's period until the run's end;
    /// `--replay-speed` divides the instants; requests due at or after the end are
    /// not sent.
    #[test]
    fn a_loop_repeats_the_recording_until_the_end_and_speed_scales_it() {
        // 5 lines at 0..4 ms: period 5 ms; at speed 2, 2.5 ms per pass.
        let (_d, plan) = plan_of(&lines(5), 2.0, true);
        let feeds = start(&plan, 6_000_000, Shard::WHOLE, 1).unwrap().0;
        let got = drain(feeds.into_iter().next().unwrap());
        let dues: Vec<Nanos> = got.iter().map(|g| g.0).collect();
        let want: Vec<Nanos> = (0..3u64)
            .flat_map(|pass| (0..5u64).map(move |i| (pass * 5 + i) * 500_000))
            .filter(|&d| d < 6_000_000)
            .collect();
        assert_eq!(dues, want);
        assert_eq!(got.len(), 12);
        assert_eq!(got[11].1, 11, "sequence numbers run on across passes");
        assert_eq!(got[11].2, b"r1".to_vec(), "the third pass's second line");
    }
}
