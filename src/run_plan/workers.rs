//! The plan split over the workers: connections, rate, buffers.

use super::*;
use crate::engine::WorkerPlan;
use crate::engine::pacing::{Precision, Spin};
use crate::limits::*;
use crate::schedule::RateShape;
use std::net::SocketAddr;

impl RunPlan {
    /// Worker `i` of `w`'s connections: (global index of the first, how many). Evenly
    /// split; with frames, by whole rooms (a room's members share a worker, so the
    /// worker sees the room's every frame).
    fn split_connections(&self, w: usize, i: usize) -> (usize, usize) {
        let Some(f) = &self.frames else {
            let share = |j: usize| self.connections / w + usize::from(j < self.connections % w);
            return ((0..i).map(share).sum(), share(i));
        };
        let rooms = f.room_count as usize;
        let share = |j: usize| rooms / w + usize::from(j < rooms % w);
        let first_room = f.first_room as usize + (0..i).map(share).sum::<usize>();
        let first = first_room * f.grid.room_size as usize;
        let end =
            ((first_room + share(i)) * f.grid.room_size as usize).min(f.grid.connections as usize);
        (first, end - first)
    }

    /// Splits connections and the plan's rate over the workers, for the plan's
    /// duration; the rate is split by interleaving one global sequence (see
    /// `schedule`). A plan without a rate (the baseline's, before a step sets one)
    /// sends nothing.
    pub fn worker_plans(&self, target: SocketAddr) -> Vec<WorkerPlan> {
        let rate_rps = self.rate_rps.unwrap_or(0.0);
        let duration_ns = self.duration_ns;
        let w = self.cores.len() * self.rings_per_core;
        let connect_gap_ns = self
            .connect_rate
            .map_or(0, |r| (w as f64 * 1e9 / r).round().max(1.0) as u64);
        // HTTP/2 reads frames, whatever the responses' length: a whole frame of the
        // largest size this side accepts (16 KiB + 9) kept, and room after it.
        let recv_buffer_bytes = if self.http2.is_some() {
            HTTP2_RECV_BUFFER_BYTES
        } else {
            (self.response_len() * self.pipeline).clamp(4096, RECV_BUFFER_BYTES_MAX)
        };
        let timeout_s = self.timeout_ns as f64 / 1e9;
        (0..w)
            .map(|i| {
                // Consecutive workers (and so consecutive requests) rotate over cores.
                let core = self.cores[i % self.cores.len()];
                let (conn_offset, connections) = self.split_connections(w, i);
                // Sized for the peak of a shaped rate, not its mean.
                let peak = match (&self.shape, &self.replay) {
                    (Some(s), _) => s.peak_rps().max(rate_rps),
                    // A replay's busiest second.
                    (None, Some(r)) => super::replay::rates(r, duration_ns).1,
                    (None, None) => rate_rps,
                };
                let lanes = w as f64 * f64::from(self.fleet.shard.count());
                // `--rate max` (infinite) has no timetable to fall behind: only what the
                // connections hold. (inf as usize saturates, and the sum overflowed.)
                let due = if peak.is_finite() {
                    (peak / lanes * timeout_s * 1.1) as usize
                } else {
                    0
                };
                let backlog = due + connections * self.pipeline;
                WorkerPlan {
                    index: i,
                    shard: self.fleet.shard,
                    transport: self.transport,
                    conn_offset,
                    max_response: self.max_response,
                    workers: w,
                    core: Some(core),
                    target,
                    targets: if self.targets.is_empty() {
                        vec![target].into()
                    } else {
                        self.targets.clone().into()
                    },
                    sources: self.sources.clone().into(),
                    sockopts: self.sockopts,
                    connect_gap_ns,
                    connects_in_flight: (CONNECTS_IN_FLIGHT_MAX / self.rings_per_core).max(64),
                    source_ports: (!self.sources.is_empty())
                        .then_some(self.port_range)
                        .flatten()
                        .map(|r| (r.lo(), r.size())),
                    backoff: self.backoff,
                    per_request: self.per_request,
                    // The baseline and the search step constant rates of their own
                    // (`rate_rps`): a flat shape follows the step's rate, so Poisson
                    // arrivals still apply.
                    shape: match &self.shape {
                        // A replay's instants are the recording's: no shape to fit.
                        _ if self.replay.is_some() => None,
                        Some(s) if s.constant_rps().is_none() => Some(s.clone()),
                        _ if rate_rps > 0.0 && rate_rps.is_finite() => {
                            RateShape::constant(rate_rps).ok()
                        }
                        _ => None,
                    },
                    arrivals: self.arrivals,
                    closed_loop: self.closed_loop,
                    connections,
                    pipeline: self.pipeline,
                    rate_rps,
                    duration_ns,
                    warmup_ns: self.warmup_ns,
                    timeout_ns: self.timeout_ns,
                    payload: self.payload.clone(),
                    requests: self.requests.clone(),
                    seed: self.seed,
                    framing: self.framing,
                    error_status: self.error_status,
                    expect: self.expect.clone(),
                    recv_buffer_bytes,
                    backlog_capacity: backlog.clamp(1024, BACKLOG_REQUESTS_MAX),
                    interval_ns: INTERVAL_NS,
                    // Workers sharing a core must not spin against each other.
                    precision: if self.rings_per_core > 1 {
                        Precision {
                            spin: Spin::Fixed(0),
                            ..self.precision
                        }
                    } else {
                        self.precision
                    },
                    frames: self.frames.clone(),
                    tls: self.tls.clone(),
                    http2: self.http2,
                    conn_life: self.conn_life,
                    server_time: self.server_time.clone(),
                    replay: None,
                }
            })
            .collect()
    }
}
