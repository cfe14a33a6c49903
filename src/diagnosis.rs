//! Everything a run tells the user about itself beyond its figures -- the validity
//! gate's reasons, the observations with their remedy, the warnings about the host --
//! as one typed enum. Each variant has a stable code (for scripts and tests: match on
//! it, never on the sentence), a message stating what was seen with its numbers, and a
//! remedy. They are rendered to text in one place ([`Diagnosis`]'s `Display`) and to
//! JSON as `{code, message, remedy}`.
//!
//! A leaf: the gate (metrics), the port arithmetic (ports) and the report assembly all
//! produce these, so the type sits below all of them.

use crate::units::fmt_ns;
use serde::ser::{Serialize, SerializeStruct, Serializer};
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Diagnosis {
    /// Invalid: a worker had no idle time, so its own queueing is in the figures.
    WorkerWithoutHeadroom {
        core: Option<usize>,
        busy_ratio: f64,
        gate: f64,
    },
    /// Invalid: the generator fell behind its own timetable.
    DispatchLagHigh { p99_ns: u64, max_lag_ns: u64 },
    /// Connection per request keeps more ports in TIME_WAIT than the range holds.
    TimeWaitExhaustsPorts {
        rate_per_s: f64,
        held: f64,
        time_wait_s: f64,
        pairs: usize,
        range_size: u32,
        range: String,
        capacity: f64,
        factor: f64,
    },
    /// A generator core was above the busy watermark.
    GeneratorNearSaturation {
        core_load: f64,
        worker_busy: f64,
        watermark: f64,
    },
    /// Other processes (or IRQs) took a share of a generator core.
    GeneratorCoreShared { other_load: f64, warn_at: f64 },
    /// The hypervisor ran something else on a generator core (steal).
    HypervisorSteal { steal: f64, warn_at: f64 },
    /// The interface carried nearly its link speed.
    NicSaturated {
        iface: Option<String>,
        bps: f64,
        utilization: f64,
        link_bps: u64,
    },
    /// A closed loop's latency is service time.
    ClosedLoopHidesQueueing { connections: usize },
    /// Due requests waited for connections the target had closed.
    ConnectionWaitTargetCloses {
        wait_p99_ns: u64,
        latency_p99_ns: u64,
        closed_by_target: u64,
        reconnects: u64,
    },
    /// Due requests waited for a free connection: the pool or the target is the limit.
    ConnectionWaitPoolLimit {
        wait_p99_ns: u64,
        latency_p99_ns: u64,
        rate_rps: f64,
        service_mean_ns: u64,
        inflight_needed: f64,
        inflight_allowed: usize,
    },
    /// Most replies parsed but reported failure: the target is failing, not slow.
    MostRepliesFailed {
        failed: u64,
        answered: u64,
        /// The most frequent failing code or reply (`HTTP 503`, `-WRONGTYPE`).
        top: String,
        top_count: u64,
    },
    /// The kernel says this host's clock is unsynchronised (adjtimex): the start
    /// instant and cross-machine figures depend on it.
    ClockUnsynchronised { max_error_us: u64 },
    /// `--tls-resume` asked for resumed handshakes and the server resumed none: it
    /// issued no session to resume (`issued` 0), or refused the `offered` ones.
    TlsResumeNotHonoured {
        ratio: f64,
        handshakes: u64,
        issued: u64,
        offered: u64,
    },
    /// Frames from members this run does not have (foreign), or a member's frame twice
    /// (duplicates), above a handful: another run on the same rooms, most likely.
    FramesCollide {
        foreign: u64,
        duplicates: u64,
        received: u64,
    },
    /// Conntrack dropped new connections or failed to insert them: its table was full.
    ConntrackTableFull {
        drop: u64,
        insert_failed: u64,
        early_drop: u64,
        /// The highest `nf_conntrack_count` seen at an interval's end.
        count: Option<u64>,
        max: Option<u64>,
    },
    /// A CPU's input backlog overflowed (softnet `dropped`).
    SoftnetBacklogDrops { dropped: u64 },
    /// NAPI polling ran out of budget with packets left (softnet `time_squeeze`).
    SoftnetTimeSqueeze { squeezed: u64 },
    /// A listening socket's accept queue overflowed on this host.
    ListenOverflows { overflows: u64, drops: u64 },
    /// TCP retransmitted segments on this host.
    TcpRetransmits {
        segments: u64,
        lost_again: Option<u64>,
    },
    /// The NIC missed or dropped received frames.
    NicRxDrops {
        iface: Option<String>,
        missed: u64,
        dropped: u64,
        fifo: u64,
    },
}

impl Diagnosis {
    /// The stable code: changes only with the schema version.
    pub fn code(&self) -> &'static str {
        match self {
            Diagnosis::WorkerWithoutHeadroom { .. } => "worker_without_headroom",
            Diagnosis::DispatchLagHigh { .. } => "dispatch_lag_high",
            Diagnosis::TimeWaitExhaustsPorts { .. } => "time_wait_exhausts_ports",
            Diagnosis::GeneratorNearSaturation { .. } => "generator_near_saturation",
            Diagnosis::GeneratorCoreShared { .. } => "generator_core_shared",
            Diagnosis::HypervisorSteal { .. } => "hypervisor_steal",
            Diagnosis::NicSaturated { .. } => "nic_saturated",
            Diagnosis::ClosedLoopHidesQueueing { .. } => "closed_loop_hides_queueing",
            Diagnosis::ConnectionWaitTargetCloses { .. } => "connection_wait_target_closes",
            Diagnosis::ConnectionWaitPoolLimit { .. } => "connection_wait_pool_limit",
            Diagnosis::ClockUnsynchronised { .. } => "clock_unsynchronised",
            Diagnosis::MostRepliesFailed { .. } => "most_replies_failed",
            Diagnosis::TlsResumeNotHonoured { .. } => "tls_resume_not_honoured",
            Diagnosis::FramesCollide { .. } => "frames_collide",
            Diagnosis::ConntrackTableFull { .. } => "conntrack_table_full",
            Diagnosis::SoftnetBacklogDrops { .. } => "softnet_backlog_drops",
            Diagnosis::SoftnetTimeSqueeze { .. } => "softnet_time_squeeze",
            Diagnosis::ListenOverflows { .. } => "listen_overflows",
            Diagnosis::TcpRetransmits { .. } => "tcp_retransmits",
            Diagnosis::NicRxDrops { .. } => "nic_rx_drops",
        }
    }

    /// What was seen, with its numbers.
    pub fn message(&self) -> String {
        match self {
            Diagnosis::WorkerWithoutHeadroom { .. }
            | Diagnosis::DispatchLagHigh { .. }
            | Diagnosis::TimeWaitExhaustsPorts { .. }
            | Diagnosis::GeneratorNearSaturation { .. }
            | Diagnosis::GeneratorCoreShared { .. }
            | Diagnosis::HypervisorSteal { .. }
            | Diagnosis::NicSaturated { .. } => self.generator_message(),
            Diagnosis::ClosedLoopHidesQueueing { .. }
            | Diagnosis::ConnectionWaitTargetCloses { .. }
            | Diagnosis::ConnectionWaitPoolLimit { .. }
            | Diagnosis::MostRepliesFailed { .. }
            | Diagnosis::TlsResumeNotHonoured { .. }
            | Diagnosis::FramesCollide { .. } => self.target_message(),
            Diagnosis::ClockUnsynchronised { .. }
            | Diagnosis::ConntrackTableFull { .. }
            | Diagnosis::SoftnetBacklogDrops { .. }
            | Diagnosis::SoftnetTimeSqueeze { .. }
            | Diagnosis::ListenOverflows { .. }
            | Diagnosis::TcpRetransmits { .. }
            | Diagnosis::NicRxDrops { .. } => self.host_message(),
        }
    }

    /// [`Self::message`] of what the generator saw of itself: its cores, lag, ports
    /// and NIC.
    fn generator_message(&self) -> String {
        match self {
            Diagnosis::WorkerWithoutHeadroom {
                core,
                busy_ratio,
                gate,
            } => format!(
                "the worker on core {} was busy {:.0}% of the run (gate: {:.0}%): the generator \
                 had no headroom, so connection wait and latency include its own queueing",
                core.map_or("-".to_string(), |c| c.to_string()),
                busy_ratio * 100.0,
                gate * 100.0
            ),
            Diagnosis::DispatchLagHigh { p99_ns, max_lag_ns } => format!(
                "dispatch lag p99 {} exceeds --max-lag {}: the generator was the bottleneck",
                fmt_ns(*p99_ns),
                fmt_ns(*max_lag_ns)
            ),
            Diagnosis::TimeWaitExhaustsPorts {
                rate_per_s,
                held,
                time_wait_s,
                pairs,
                range_size,
                range,
                capacity,
                ..
            } => format!(
                "ports: connection-per-request at {rate_per_s:.0}/s keeps about {held:.0} ports \
                 in TIME_WAIT ({time_wait_s:.0} s each) but {pairs} {} x {range_size} ports \
                 (ip_local_port_range {range}) hold {capacity:.0}, so connects start failing \
                 with EADDRNOTAVAIL after about {:.1} s",
                if *pairs == 1 {
                    "(source, destination) pair"
                } else {
                    "(source, destination) pairs"
                },
                capacity / rate_per_s,
            ),
            Diagnosis::GeneratorNearSaturation {
                core_load,
                worker_busy,
                watermark,
            } => format!(
                "generator near saturation: a generator core was {:.0}% busy (its workers' own \
                 measure {:.0}%; watermark {:.0}%)",
                core_load * 100.0,
                worker_busy * 100.0,
                watermark * 100.0
            ),
            Diagnosis::GeneratorCoreShared {
                other_load,
                warn_at,
            } => format!(
                "generator core shared: other processes took {:.0}% of a generator core \
                 (warning above {:.0}%): the generator did not have its core to itself",
                other_load * 100.0,
                warn_at * 100.0
            ),
            Diagnosis::HypervisorSteal { steal, warn_at } => format!(
                "hypervisor steal: the hypervisor took {:.1}% of a generator core in one \
                 second (warning above {:.0}%): the generator neither sent nor read then, and \
                 the dispatch lag and latency include those pauses",
                steal * 100.0,
                warn_at * 100.0
            ),
            Diagnosis::NicSaturated {
                iface,
                bps,
                utilization,
                link_bps,
            } => format!(
                "NIC-saturated: {} carried {:.1} Mbit/s, {:.0}% of its {:.1} Mbit/s link",
                iface.as_deref().unwrap_or("the interface"),
                bps / 1e6,
                utilization * 100.0,
                *link_bps as f64 / 1e6
            ),
            _ => unreachable!("message() sends the generator's own variants only"),
        }
    }

    /// [`Self::message`] of what the run saw of the target: a closed loop, connection
    /// wait, failing replies, TLS resumption.
    fn target_message(&self) -> String {
        match self {
            Diagnosis::ClosedLoopHidesQueueing { connections } => format!(
                "closed model (--concurrency {connections}): each request slot waited for its \
                 response before sending again, so a slow target slowed the load instead of \
                 queueing it; this latency is service time and hides queueing"
            ),
            Diagnosis::ConnectionWaitTargetCloses {
                wait_p99_ns,
                latency_p99_ns,
                closed_by_target,
                reconnects,
            } => format!(
                "connection wait dominates latency (p99 {} of {}): the target closed or reset \
                 {closed_by_target} connections and due requests waited while they came back \
                 after the reconnect backoff ({reconnects} reconnects)",
                fmt_ns(*wait_p99_ns),
                fmt_ns(*latency_p99_ns),
            ),
            Diagnosis::ConnectionWaitPoolLimit {
                wait_p99_ns,
                latency_p99_ns,
                rate_rps,
                service_mean_ns,
                inflight_needed,
                inflight_allowed,
            } => format!(
                "connection wait dominates latency (p99 {} of {}): due requests waited for a \
                 free connection. Little's law: {rate_rps:.0} requests/s x {} mean service time \
                 = {inflight_needed:.0} requests in flight needed; this run allowed \
                 {inflight_allowed} (connections x pipeline)",
                fmt_ns(*wait_p99_ns),
                fmt_ns(*latency_p99_ns),
                fmt_ns(*service_mean_ns),
            ),
            Diagnosis::MostRepliesFailed {
                failed,
                answered,
                top,
                top_count,
            } => format!(
                "{:.1}% of the replies were errors ({failed} of {answered}); the most frequent: \
                 {top} ({top_count}, {:.1}% of the replies)",
                100.0 * *failed as f64 / (*answered).max(1) as f64,
                100.0 * *top_count as f64 / (*answered).max(1) as f64,
            ),
            Diagnosis::TlsResumeNotHonoured {
                ratio,
                handshakes,
                issued,
                offered,
            } if *issued == 0 => format!(
                "--tls-resume {ratio}: 0 resumed of {handshakes} handshakes: the server did \
                 not resume sessions (it issued no session ticket or session id), so every \
                 handshake was full"
            ),
            Diagnosis::TlsResumeNotHonoured {
                ratio,
                handshakes,
                offered,
                ..
            } => format!(
                "--tls-resume {ratio}: 0 resumed of {handshakes} handshakes, {offered} of them \
                 offering a session the server had issued: the server refused every one"
            ),
            Diagnosis::FramesCollide {
                foreign,
                duplicates,
                received,
            } => format!(
                "frames: {foreign} foreign and {duplicates} duplicate frames beside {received} \
                 received: members this run does not have sent into its rooms, or a room's \
                 frames came twice; another run on the same rooms (a second machine numbering \
                 its rooms from 0, or the same command started twice) does that"
            ),
            _ => unreachable!("message() sends the target's variants only"),
        }
    }

    /// [`Self::message`] of the host's kernel: its clock and its network counters.
    fn host_message(&self) -> String {
        match self {
            Diagnosis::ClockUnsynchronised { max_error_us } => format!(
                "this host's clock is unsynchronised (adjtimex: max error {} ms): the start \
                 instant and any comparison with other machines are only as good as it",
                max_error_us / 1000
            ),
            Diagnosis::ConntrackTableFull {
                drop,
                insert_failed,
                early_drop,
                count,
                max,
            } => format!(
                "conntrack table full: the generator host's conntrack dropped {drop} packets \
                 of new connections, failed {insert_failed} inserts and evicted {early_drop} \
                 unconfirmed entries during the run; nf_conntrack_count {} of \
                 nf_conntrack_max {}: those connects time out (ETIMEDOUT after SYN retries)",
                count.map_or("unknown".to_string(), |c| c.to_string()),
                max.map_or("unknown".to_string(), |m| m.to_string()),
            ),
            Diagnosis::SoftnetBacklogDrops { dropped } => format!(
                "softnet backlog full: the kernel dropped {dropped} received packets because a \
                 CPU's input queue was full (/proc/net/softnet_stat dropped)"
            ),
            Diagnosis::SoftnetTimeSqueeze { squeezed } => format!(
                "softnet time squeeze: {squeezed} times packet processing ran out of its \
                 budget with packets left (/proc/net/softnet_stat time_squeeze): the \
                 receiving CPUs were the limit"
            ),
            Diagnosis::ListenOverflows { overflows, drops } => format!(
                "listen queue overflow: a listening socket on this host dropped {overflows} \
                 connections because its accept queue was full ({drops} listen drops in all; \
                 TcpExt ListenOverflows, ListenDrops)"
            ),
            Diagnosis::TcpRetransmits {
                segments,
                lost_again,
            } => format!(
                "TCP retransmitted {segments} segments on this host during the run{} (Tcp \
                 RetransSegs, every socket of the namespace): packets were lost on the path \
                 and their latency includes the retransmission timeout",
                lost_again.map_or(String::new(), |n| format!(", {n} of them lost again")),
            ),
            Diagnosis::NicRxDrops {
                iface,
                missed,
                dropped,
                fifo,
            } => format!(
                "NIC receive drops: {} missed {missed} frames for lack of a ring slot \
                 (rx_missed_errors), dropped {dropped} (rx_dropped) and overran its FIFO \
                 {fifo} times (rx_fifo_errors)",
                iface.as_deref().unwrap_or("the interfaces")
            ),
            _ => unreachable!("message() sends the host kernel's variants only"),
        }
    }

    /// What to do about it.
    pub fn remedy(&self) -> String {
        match self {
            Diagnosis::WorkerWithoutHeadroom { .. } | Diagnosis::DispatchLagHigh { .. } => {
                "use more cores or a lower rate".into()
            }
            Diagnosis::TimeWaitExhaustsPorts { factor, .. } => format!(
                "use --linger0 (close with RST, no TIME_WAIT), sysctl -w \
                 net.ipv4.tcp_tw_reuse=1 (reuse TIME_WAIT ports for new connects; needs TCP \
                 timestamps), or {factor:.0}x as many source IPs (--source-ip)"
            ),
            Diagnosis::GeneratorNearSaturation { .. } => {
                "use more cores or a lower rate, and keep other load off --cores".into()
            }
            Diagnosis::GeneratorCoreShared { .. } => {
                "keep other load off --cores (isolcpus, taskset)".into()
            }
            Diagnosis::HypervisorSteal { .. } => {
                "run the generator on dedicated vCPUs (no CPU overcommit) or bare metal".into()
            }
            Diagnosis::NicSaturated { .. } => {
                "the link, not the target, may be the limit: use a faster link or more \
                 generator hosts"
                    .into()
            }
            Diagnosis::ClosedLoopHidesQueueing { .. } => {
                "run open-loop (--rate) for the latency users see".into()
            }
            Diagnosis::ConnectionWaitTargetCloses { .. } => {
                "the target's closes, not the pool size, are the limit: look at why the \
                 target closes connections"
                    .into()
            }
            Diagnosis::ConnectionWaitPoolLimit { .. } => {
                "the target, or too few connections / too little pipelining, is the limit, \
                 not the generator: raise --connections or --pipeline if the target can take \
                 more in flight"
                    .into()
            }
            Diagnosis::MostRepliesFailed { .. } => {
                "the target is failing, not slow: its latency while failing is in \
                 error_latency_ns, apart from the headline; find out why it answers so \
                 (--error-status chooses which HTTP codes count)"
                    .into()
            }
            Diagnosis::FramesCollide { .. } => {
                "give each machine of a fleet its own rooms of one run (--shard i/N with one \
                 --start-at), or its own server; if no other run was there, the server \
                 relays across rooms (check the room in its topic, subject or path)"
                    .into()
            }
            Diagnosis::ClockUnsynchronised { .. } => {
                "run chrony or ptp4l so the kernel reports the clock synchronised".into()
            }
            Diagnosis::TlsResumeNotHonoured { issued: 0, .. } => {
                "the handshake figures are those of full handshakes; to measure resumption, \
                 enable session tickets or a session cache on the server (nginx: \
                 ssl_session_tickets, ssl_session_cache; openssl s_server: without \
                 -no_ticket), or drop --tls-resume"
                    .into()
            }
            Diagnosis::TlsResumeNotHonoured { .. } => {
                "the handshake figures are those of full handshakes; a server that issues \
                 sessions and refuses them rotates its ticket keys, or keeps its session \
                 cache per worker or per process (nginx: ssl_session_cache shared:NAME)"
                    .into()
            }
            Diagnosis::ConntrackTableFull { max, .. } => format!(
                "raise net.netfilter.nf_conntrack_max (sysctl -w \
                 net.netfilter.nf_conntrack_max={}) or use NOTRACK for the test ports (an \
                 nftables rule `notrack` in a raw-priority prerouting and output chain)",
                max.map_or(524_288, |m| m.saturating_mul(2).max(65_536))
            ),
            Diagnosis::SoftnetBacklogDrops { .. } => {
                "raise net.core.netdev_max_backlog (sysctl -w net.core.netdev_max_backlog=16384), \
                 and spread receive processing over more CPUs (RSS queues, RPS)"
                    .into()
            }
            Diagnosis::SoftnetTimeSqueeze { .. } => {
                "raise net.core.netdev_budget and net.core.netdev_budget_usecs, and spread \
                 the NIC's IRQs over more cores (RSS queues, IRQ affinity) away from --cores"
                    .into()
            }
            Diagnosis::ListenOverflows { .. } => {
                "the target's listen backlog is the wall: raise net.core.somaxconn and \
                 net.ipv4.tcp_max_syn_backlog and the backlog the target passes to listen(), \
                 or have it accept faster"
                    .into()
            }
            Diagnosis::TcpRetransmits { .. } => {
                "find the loss on the path (a full queue or link, a policer, a NIC dropping: \
                 see the other drop counters here and on the target); the latency of those \
                 requests is the path's, not the target's"
                    .into()
            }
            Diagnosis::NicRxDrops { iface, .. } => {
                let i = iface.as_deref().unwrap_or("IF");
                format!(
                    "enlarge the receive ring (ethtool -g {i} shows the maximum, ethtool -G \
                     {i} rx N sets it) and spread receives over more RSS queues (ethtool -L \
                     {i} combined N)"
                )
            }
        }
    }
}

/// The one text form: the message, then the remedy.
impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; {}", self.message(), self.remedy())
    }
}

/// The JSON form: `{"code": ..., "message": ..., "remedy": ...}`.
impl Serialize for Diagnosis {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut o = s.serialize_struct("Diagnosis", 3)?;
        o.serialize_field("code", self.code())?;
        o.serialize_field("message", &self.message())?;
        o.serialize_field("remedy", &self.remedy())?;
        o.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_code_message_remedy() {
        let d = Diagnosis::DispatchLagHigh {
            p99_ns: 3_000_000,
            max_lag_ns: 1_000_000,
        };
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["code"], "dispatch_lag_high");
        assert!(v["message"].as_str().unwrap().contains("exceeds --max-lag"));
        assert_eq!(v["remedy"], "use more cores or a lower rate");
        assert_eq!(v.as_object().unwrap().len(), 3);
        // The text form carries both parts.
        let t = d.to_string();
        assert!(
            t.starts_with(&d.message()) && t.ends_with(&d.remedy()),
            "{t}"
        );
    }

    #[test]
    fn codes_are_distinct_snake_case() {
        let all = [
            Diagnosis::WorkerWithoutHeadroom {
                core: None,
                busy_ratio: 1.0,
                gate: 0.95,
            },
            Diagnosis::DispatchLagHigh {
                p99_ns: 0,
                max_lag_ns: 0,
            },
            Diagnosis::GeneratorNearSaturation {
                core_load: 1.0,
                worker_busy: 1.0,
                watermark: 0.9,
            },
            Diagnosis::GeneratorCoreShared {
                other_load: 0.5,
                warn_at: 0.2,
            },
            Diagnosis::HypervisorSteal {
                steal: 0.1,
                warn_at: 0.02,
            },
            Diagnosis::NicSaturated {
                iface: None,
                bps: 1.0,
                utilization: 1.0,
                link_bps: 1,
            },
            Diagnosis::ClosedLoopHidesQueueing { connections: 1 },
            Diagnosis::ConntrackTableFull {
                drop: 1,
                insert_failed: 0,
                early_drop: 0,
                count: None,
                max: None,
            },
            Diagnosis::SoftnetBacklogDrops { dropped: 1 },
            Diagnosis::SoftnetTimeSqueeze { squeezed: 1 },
            Diagnosis::ListenOverflows {
                overflows: 1,
                drops: 1,
            },
            Diagnosis::TcpRetransmits {
                segments: 1,
                lost_again: None,
            },
            Diagnosis::NicRxDrops {
                iface: None,
                missed: 1,
                dropped: 0,
                fifo: 0,
            },
        ];
        let mut codes: Vec<&str> = all.iter().map(Diagnosis::code).collect();
        assert!(
            codes
                .iter()
                .all(|c| c.chars().all(|ch| ch.is_ascii_lowercase() || ch == '_'))
        );
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), all.len());
    }
}
