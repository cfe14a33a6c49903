//! `--conn-max-age D[±J]` and `--conn-max-requests N`: connections retired as servers
//! retire them (MaxConnectionAge with jitter, a request budget per connection). A
//! connection that reaches its age or its budget when a request is assigned to it
//! takes no further request (`retiring`); once the requests it carries are answered
//! it closes and a fresh connection opens in its place as soon as the close completes,
//! so no request is cut off and none is sent on a connection past its budget. The
//! age is checked when a request is assigned: an idle connection past its age retires
//! with the next request it takes.

use super::Worker;
use crate::clock::Nanos;
use crate::engine::worker_plan::ConnLife;

/// One connection's place in its life (only with the flags).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Life {
    /// Requests assigned since it opened.
    served: u32,
    /// When it retires (open instant + its drawn age).
    retire_ns: Nanos,
    /// It takes no new request; it closes once drained.
    pub retiring: bool,
    /// Opens so far, for the age's draw.
    opens: u32,
}

/// The age connection `conn` draws at its `open`-th open: uniform within
/// `max_age_ns ± jitter_ns`, from `seed` (the same on every rerun and shard).
pub(super) fn drawn_age(life: &ConnLife, seed: u64, conn: u64, open: u32) -> Nanos {
    if life.max_age_ns == u64::MAX {
        return Nanos::MAX;
    }
    if life.jitter_ns == 0 {
        return life.max_age_ns;
    }
    let key = crate::schedule::mix64(conn) ^ u64::from(open).rotate_left(40);
    let mut rng = crate::request::request_rng(seed ^ 0x6c69_6665, key);
    life.max_age_ns - life.jitter_ns + rng.u64(0..=2 * life.jitter_ns)
}

impl Worker<'_> {
    /// Connection `c` became ready at `now_ns`: its life starts.
    pub(super) fn life_begins(&mut self, c: u32, now_ns: Nanos) {
        let Some(cl) = self.plan.conn_life else {
            return;
        };
        let conn = self.plan.conn_offset as u64 + u64::from(c);
        let l = &mut self.life[c as usize];
        let age = drawn_age(&cl, self.plan.seed, conn, l.opens);
        *l = Life {
            served: 0,
            retire_ns: now_ns.saturating_add(age),
            retiring: false,
            opens: l.opens.wrapping_add(1),
        };
    }

    /// A request was assigned to `c` at `now_t`: with it `c` may reach its budget or
    /// be found past its age, and then takes no more. Without the flags, nothing (not
    /// even the clock's conversion).
    #[inline]
    pub(super) fn life_served(&mut self, c: u32, now_t: crate::clock::Ticks) {
        let Some(cl) = self.plan.conn_life else {
            return;
        };
        let now_ns = self.clock.ns(now_t);
        let l = &mut self.life[c as usize];
        l.served += 1;
        if l.served >= cl.max_requests || now_ns >= l.retire_ns {
            l.retiring = true;
        }
    }

    /// Whether `c` takes no new request.
    #[inline]
    pub(super) fn retiring(&self, c: u32) -> bool {
        self.life.get(c as usize).is_some_and(|l| l.retiring)
    }

    /// After a response on `c`: a retiring connection with nothing left in flight
    /// closes, to be replaced at once (HTTP/2 through its GOAWAY path). True when it
    /// closed.
    pub(super) fn retire_drained(&mut self, c: u32) -> bool {
        if !self.retiring(c) || self.table.conns[c as usize].inflight > 0 {
            return false;
        }
        self.out.counters.connections_recycled += 1;
        self.close_and_reopen(c, None);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_stay_within_the_jitter_and_differ_by_connection_and_open() {
        let cl = ConnLife {
            max_age_ns: 1_000,
            jitter_ns: 100,
            max_requests: u32::MAX,
        };
        let ages: Vec<Nanos> = (0..200).map(|c| drawn_age(&cl, 7, c, 0)).collect();
        assert!(ages.iter().all(|a| (900..=1_100).contains(a)), "{ages:?}");
        assert!(ages.iter().any(|&a| a < 950) && ages.iter().any(|&a| a > 1_050));
        assert_ne!(drawn_age(&cl, 7, 3, 0), drawn_age(&cl, 7, 3, 1));
        assert_eq!(
            drawn_age(&cl, 7, 3, 1),
            drawn_age(&cl, 7, 3, 1),
            "reproducible"
        );
        let fixed = ConnLife { jitter_ns: 0, ..cl };
        assert_eq!(drawn_age(&fixed, 7, 3, 5), 1_000);
        let none = ConnLife {
            max_age_ns: u64::MAX,
            ..cl
        };
        assert_eq!(drawn_age(&none, 7, 3, 5), Nanos::MAX);
    }
}
