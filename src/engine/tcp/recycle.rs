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

impl Worker<'_> {
    /// Connection `c` became ready at `now_ns`: its life starts.
    pub(super) fn life_begins(&mut self, c: u32, now_ns: Nanos) {
        let Some(cl) = self.plan.conn_life else {
            return;
        };
        let conn = self.plan.conn_offset as u64 + u64::from(c);
        let l = &mut self.life[c as usize];
        let age = cl.age_ns(self.plan.seed, conn, l.opens);
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
