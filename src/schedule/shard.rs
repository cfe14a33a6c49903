//! Machine shards: `--shard i/N` takes shard i's share of the *global* timetable, so the
//! N shards of a run together send exactly what one machine would have sent — the same
//! due instants, the same global sequence numbers (and so the same request choices and
//! `{rand}` values, which derive from them), no gap and no duplicate.
//!
//! The rule is a pure function of (i, N) and needs no coordination between machines:
//! every shard walks the same seeded global sequence and keeps every N-th request. How
//! the walk is cut depends on what the timetable lets a worker do cheaply:
//!
//! - **Constant and shaped (paced) arrivals** are random access (request g is due at
//!   `Λ⁻¹(g)`), so the global sequence is interleaved twice: shard i owns the requests
//!   g ≡ i (mod N), and its worker w of W owns every W-th of those,
//!   g = (k·W + w)·N + i. That is the workers' own interleaving with `W·N` lanes and
//!   lane `w·N + i` ([`Shard::lanes`]), so each shard is evenly paced on the wire and
//!   shards may even run different worker counts.
//! - **Poisson arrivals** exist only as a walk: the global sequence is the W worker
//!   streams of the unsharded run (see `poisson`), each one seeded stream. Shard i's
//!   worker w walks stream w and keeps its arrivals k ≡ i (mod N)
//!   ([`Shard::lane_position`]), so its j-th request is the stream's (j·N + i)-th, with
//!   that arrival's instant and global sequence number. A worker draws exactly as many
//!   exponentials as the unsharded worker it stands in for; every shard must therefore
//!   run the same number of workers (the report and the run id carry it).

use crate::limits::SHARDS_MAX;

/// Shard `index` of `count` (0-based, like Kubernetes' `JOB_COMPLETION_INDEX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    index: u32,
    count: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Shard::WHOLE
    }
}

impl Shard {
    /// The whole run: one shard.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Shard `index` of `count`; the message says which bound was broken.
    pub fn new(index: u32, count: u32) -> Result<Shard, String> {
        if count == 0 {
            return Err(format!(
                "the shard count must be at least 1, got {index}/{count}"
            ));
        }
        if count as usize > SHARDS_MAX {
            return Err(format!(
                "the shard count must be at most {SHARDS_MAX}, got {index}/{count}"
            ));
        }
        if index >= count {
            return Err(format!(
                "the shard index is 0-based and must be less than the shard count {count}, \
                 got {index}/{count}"
            ));
        }
        Ok(Shard { index, count })
    }

    /// The 0-based index.
    pub fn index(self) -> u32 {
        self.index
    }

    /// The number of shards.
    pub fn count(self) -> u32 {
        self.count
    }

    /// Whether this is the whole run (`0/1`).
    pub fn is_whole(self) -> bool {
        self.count == 1
    }

    /// Constant and paced arrivals: worker `worker` of `workers` in this shard is lane
    /// `worker·N + i` of `workers·N` interleaved lanes, so it owns the global requests
    /// `(k·workers + worker)·N + i`.
    pub fn lanes(self, workers: u64, worker: u64) -> (u64, u64) {
        let n = u64::from(self.count);
        (
            workers.saturating_mul(n),
            worker
                .saturating_mul(n)
                .saturating_add(u64::from(self.index)),
        )
    }

    /// Poisson arrivals: the position in its worker stream of this shard's `j`-th
    /// request, `j·N + i`.
    #[inline]
    pub fn lane_position(self, j: u64) -> u64 {
        j.saturating_mul(u64::from(self.count))
            .saturating_add(u64::from(self.index))
    }

    /// How many of a stream's first `lane_count` arrivals are this shard's.
    pub fn share_of(self, lane_count: u64) -> u64 {
        lane_count
            .saturating_sub(u64::from(self.index))
            .div_ceil(u64::from(self.count))
    }

    /// This shard's part of `total` whole things (connections, pipeline slots): the
    /// first `total % N` shards take one more, so the parts add up to `total`.
    pub fn split_count(self, total: usize) -> usize {
        let n = self.count as usize;
        total / n + usize::from((self.index as usize) < total % n)
    }

    /// Where this shard's [`split_count`](Self::split_count) part of `total` numbered
    /// things starts: the parts of the shards before it, in shard order.
    pub fn split_first(self, total: u64) -> u64 {
        let (i, n) = (u64::from(self.index), u64::from(self.count));
        i * (total / n) + i.min(total % n)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;

    /// `i/N`, e.g. `2/8`.
    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("expected i/N such as 2/8 (0-based index / shard count), got {s:?}");
        let (i, n) = s.trim().split_once('/').ok_or_else(bad)?;
        let i: u32 = i.trim().parse().map_err(|_| bad())?;
        let n: u64 = n.trim().parse().map_err(|_| bad())?;
        // A count beyond u32 is still "too many", not "unparsable".
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        Shard::new(i, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        assert_eq!("2/8".parse::<Shard>(), Shard::new(2, 8));
        assert_eq!(" 0 / 1 ".parse::<Shard>().unwrap(), Shard::WHOLE);
        assert!("8/8".parse::<Shard>().unwrap_err().contains("less than"));
        assert!("0/0".parse::<Shard>().unwrap_err().contains("at least 1"));
        let e = "0/10001".parse::<Shard>().unwrap_err();
        assert!(e.contains("at most 10000"), "{e}");
        assert!(
            "0/99999999999"
                .parse::<Shard>()
                .unwrap_err()
                .contains("at most")
        );
        assert!("10000/10000".parse::<Shard>().is_err());
        assert!("9999/10000".parse::<Shard>().is_ok());
        for bad in ["", "2", "a/b", "-1/3", "1/-3", "1/2/3", "1.0/2"] {
            assert!(
                bad.parse::<Shard>().unwrap_err().contains("expected i/N"),
                "{bad}"
            );
        }
    }

    #[test]
    fn parts_add_up() {
        for n in [1u32, 2, 3, 7, 64] {
            for total in [0usize, 1, 5, 64, 1000, 1001] {
                let sum: usize = (0..n)
                    .map(|i| Shard::new(i, n).unwrap().split_count(total))
                    .sum();
                assert_eq!(sum, total, "{total} over {n}");
            }
            for lane_count in [0u64, 1, 2, 99, 1000] {
                let sum: u64 = (0..n)
                    .map(|i| Shard::new(i, n).unwrap().share_of(lane_count))
                    .sum();
                assert_eq!(sum, lane_count);
            }
        }
    }

    #[test]
    fn positions_partition_the_stream() {
        let n = 5;
        let mut seen = vec![false; 1000];
        for i in 0..n {
            let s = Shard::new(i, n).unwrap();
            for j in 0..s.share_of(1000) {
                let k = s.lane_position(j) as usize;
                assert!(!seen[k], "{k} twice");
                seen[k] = true;
            }
        }
        assert!(seen.iter().all(|&b| b));
    }
}

/// The rule applied to whole timetables: N shards' (global sequence, due instant) pairs
/// are exactly the unsharded run's, for every arrival process and shape.
#[cfg(test)]
mod union_tests {
    use super::Shard;
    use crate::clock::Nanos;
    use crate::schedule::{ArrivalKind, Arrivals, Schedule, shape_of};

    const END_NS: Nanos = 3_000_000_000;

    /// Every (global_seq, due) of worker `w` of `workers` on `shard`, due before the end.
    fn walk(
        kind: ArrivalKind,
        spec: &str,
        workers: usize,
        w: usize,
        shard: Shard,
    ) -> Vec<(u64, Nanos)> {
        let a = Arrivals::sharded(kind, &shape_of(spec, END_NS), workers, w, 11, shard);
        let mut out = Vec::new();
        let mut j = 0;
        while a.due_ns(j) < END_NS {
            out.push((a.global_seq(j), a.due_ns(j)));
            j += 1;
        }
        // The count known in advance agrees with the walk.
        if let Some(n) = a.count_before(END_NS) {
            assert_eq!(n, j, "{spec} {kind} shard {shard} worker {w}/{workers}");
        }
        out
    }

    /// The union of every worker of every shard, sorted by global sequence.
    fn fleet(kind: ArrivalKind, spec: &str, workers: &[usize]) -> Vec<(u64, Nanos)> {
        let n = workers.len() as u32;
        let mut all: Vec<_> = (0..n)
            .flat_map(|i| {
                let shard = Shard::new(i, n).unwrap();
                let w = workers[i as usize];
                (0..w).flat_map(move |k| walk(kind, spec, w, k, shard))
            })
            .collect();
        all.sort_unstable();
        all
    }

    const SPECS: [&str; 6] = [
        "2000",
        "ramp:500..3000/2s",
        "step:1000..3000+1000/1s",
        "burst:base=500,peak=5000,on=100ms,off=400ms",
        "spike:base=1000,peak=4000,at=1s,for=500ms",
        "chaos:base=2000,amp=0.5",
    ];

    #[test]
    fn union_of_shards_is_the_unsharded_timetable() {
        for kind in [ArrivalKind::Constant, ArrivalKind::Poisson] {
            for spec in SPECS {
                for workers in [1usize, 2, 3] {
                    let whole = fleet(kind, spec, &[workers]);
                    assert!(whole.len() > 1000, "{spec}: {}", whole.len());
                    // Global sequence numbers are unique.
                    assert!(whole.windows(2).all(|p| p[0].0 < p[1].0), "{spec}");
                    for n in [2usize, 3, 5] {
                        let sharded = fleet(kind, spec, &vec![workers; n]);
                        assert_eq!(
                            sharded.len(),
                            whole.len(),
                            "{kind} {spec} W={workers} N={n}: gap or duplicate"
                        );
                        assert!(sharded == whole, "{kind} {spec} W={workers} N={n}");
                    }
                }
            }
        }
    }

    #[test]
    fn paced_shards_may_run_different_worker_counts() {
        for spec in SPECS {
            let whole = fleet(ArrivalKind::Constant, spec, &[4]);
            assert!(
                fleet(ArrivalKind::Constant, spec, &[1, 3, 2]) == whole,
                "{spec}"
            );
            // Paced global sequences are 0, 1, 2, ... with nothing missing.
            assert!(whole.iter().enumerate().all(|(i, p)| p.0 == i as u64));
        }
    }

    #[test]
    fn a_paced_shard_is_evenly_spaced() {
        // 3 shards at 3000/s: each shard sends every 1 ms, offset by a third of it.
        let s = Shard::new(1, 3).unwrap();
        let a = Arrivals::sharded(ArrivalKind::Constant, &shape_of("3000", END_NS), 1, 0, 1, s);
        for j in 0..100 {
            assert_eq!(a.global_seq(j), 3 * j + 1);
            assert_eq!(a.due_ns(j), ((3 * j + 1) as f64 * 1e6 / 3.0).round() as u64);
        }
    }
}
