//! `--replay` in the plan: the recording's first reading (done by the facts), its
//! flags checked against the run's, the run's duration and rate from it, and the
//! request set that sizes the workers' buffers for its longest request.

use super::{PlanError, err};
use crate::cli::RunArgs;
use crate::engine::Transport;
use crate::proto::Framing;
use crate::request::replay::{Carrier, Format, LineKind, ReplayPlan, Summary, Timing};
use crate::request::{RequestSet, Template};
use std::sync::Arc;

/// Fastest `--replay-speed` (and 1/this the slowest).
const SPEED_MAX: f64 = 1_000_000.0;

/// What the facts found reading the recording once: its format and what it holds
/// (whether its first request is HTTP/1.1 included: a capture's default framing).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayFacts {
    pub format: Format,
    pub summary: Summary,
}

/// Longest request a UDP replay sends: a datagram's payload less blaster's header.
const UDP_REQUEST_BYTES_MAX: usize = 65_000 - crate::proto::udp_header::HEADER_LEN;

/// `--proto`: what carries the recording's requests.
fn carrier(a: &RunArgs) -> Carrier {
    if a.work.proto == "udp" {
        Carrier::Udp
    } else {
        Carrier::Tcp
    }
}

/// `--replay-as`: how a text line's TEMPLATE reads, with the run's headers and Host
/// (default: `http` over TCP, `payload` over UDP).
pub fn line_kind(a: &RunArgs) -> Result<LineKind, String> {
    let default = match carrier(a) {
        Carrier::Tcp => "http",
        Carrier::Udp => "payload",
    };
    match a.replay_as.as_deref().unwrap_or(default) {
        "http" => {
            let host = a.target.first().cloned().unwrap_or_default();
            LineKind::http(&a.headers, None, &host)
        }
        "payload" => Ok(LineKind::Payload),
        other => Err(format!("expected http or payload, got {other:?}")),
    }
}

/// The first reading of `--replay`'s file (by the facts, before any traffic): every
/// request checked and counted. The error is one line naming the file and the line.
pub fn read_facts(a: &RunArgs) -> Option<Result<ReplayFacts, String>> {
    let path = a.replay.as_ref()?;
    let named = |m: String| format!("{}: {m}", path.display());
    Some((|| {
        let mut head = Vec::with_capacity(crate::request::replay::HEAD_BYTES);
        std::io::Read::read_to_end(
            &mut std::io::Read::take(
                std::fs::File::open(path).map_err(|e| named(format!("cannot read it: {e}")))?,
                crate::request::replay::HEAD_BYTES as u64,
            ),
            &mut head,
        )
        .map_err(|e| named(format!("cannot read it: {e}")))?;
        let format = match a.replay_format.as_deref().map(Format::parse) {
            Some(Ok(f)) => f,
            // The plan names the flag.
            Some(Err(_)) => return Err(String::new()),
            None => Format::detect(&head),
        };
        let kind = line_kind(a).unwrap_or(LineKind::Payload);
        let carrier = carrier(a);
        let mut rec = crate::request::replay::open(path, format, &kind, carrier, a.replay_port)
            .map_err(|e| named(e.to_string()))?;
        let longest_max = match carrier {
            Carrier::Tcp => crate::limits::PAYLOAD_BYTES_MAX,
            Carrier::Udp => UDP_REQUEST_BYTES_MAX,
        };
        let summary = crate::request::replay::summarize(&mut *rec, longest_max)
            .map_err(|e| named(e.to_string()))?;
        Ok(ReplayFacts { format, summary })
    })())
}

/// `--replay` checked against the run's other flags (`rate_given`: a search's step
/// rate, which a recording does not take), and its plan.
pub fn plan(
    a: &RunArgs,
    facts: &super::HostFacts,
    transport: Transport,
    has_target: bool,
    rate_given: Option<f64>,
) -> Result<Option<ReplayPlan>, PlanError> {
    let Some(path) = &a.replay else {
        return Ok(None);
    };
    let facts = facts.replay.as_ref();
    if rate_given.is_some() {
        return Err(err(
            "replay",
            "a recording has its own rate: not with blaster search's steps",
        ));
    }
    let given = |flag: bool, name: &'static str| flag.then_some(name);
    let replaced = [
        given(a.rate.is_some(), "--rate"),
        given(a.concurrency.is_some(), "--concurrency"),
        given(a.http.is_some(), "--http"),
        given(a.mix.is_some(), "--mix"),
        given(a.payload.is_some(), "--payload"),
        given(a.payload_file.is_some(), "--payload-file"),
        given(a.payload_size.is_some(), "--payload-size"),
    ];
    if let Some(flag) = replaced.into_iter().flatten().next() {
        return Err(err(
            "replay",
            format!("the recording is the timetable and the requests: not with {flag}"),
        ));
    }
    let refused = [
        (
            !has_target,
            "needs --target (a recording is replayed against a server)",
        ),
        (
            a.http2 || a.grpc.is_some(),
            "replays HTTP/1.1, raw TCP and UDP: not with --http2 or --grpc",
        ),
        (a.hold, "sends the recording's requests: not with --hold"),
        (
            a.work.workload == "frames",
            "is for requests: not with --workload frames",
        ),
    ];
    if let Some((_, why)) = refused.iter().find(|(bad, _)| *bad) {
        return Err(err("replay", *why));
    }
    let udp = transport != Transport::Tcp;
    if let Some(f) = a.replay_format.as_deref() {
        Format::parse(f).map_err(|m| err("replay-format", m))?;
    }
    let kind = line_kind(a).map_err(|m| err("replay-as", m))?;
    if udp && matches!(kind, LineKind::Http { .. }) {
        return Err(err(
            "replay-as",
            "http is for TCP: over UDP each line's payload is one datagram (--replay-as payload)",
        ));
    }
    let found = match facts {
        Some(Ok(f)) => f,
        Some(Err(m)) => return Err(err("replay", m.clone())),
        None => return Err(err("replay", format!("{} was not read", path.display()))),
    };
    if found.format != Format::Text && a.replay_as.is_some() {
        return Err(err(
            "replay-as",
            "is for text recordings: a capture's or a .gor file's requests are the bytes the client sent",
        ));
    }
    if found.format == Format::Gor && udp {
        return Err(err(
            "replay",
            "a GoReplay file holds HTTP requests, replayed over TCP: not with --proto udp",
        ));
    }
    if a.replay_port.is_some() && found.format != Format::Pcap {
        return Err(err("replay-port", "is for captures (pcap, pcapng)"));
    }
    let speed = a.replay_speed.unwrap_or(1.0);
    if !(1.0 / SPEED_MAX..=SPEED_MAX).contains(&speed) {
        return Err(err(
            "replay-speed",
            format!(
                "must be between {} and {SPEED_MAX}, got {speed}",
                1.0 / SPEED_MAX
            ),
        ));
    }
    if a.replay_loop && a.duration.is_none() {
        return Err(err(
            "replay-loop",
            "needs --duration (a loop has no end of its own)",
        ));
    }
    Ok(Some(ReplayPlan {
        path: path.clone(),
        format: found.format,
        kind,
        carrier: carrier(a),
        port: a.replay_port,
        summary: found.summary,
        timing: Timing::of(&found.summary, speed),
        looped: a.replay_loop,
    }))
}

/// The run's length: the recording's (its last request's instant, and one ns so it
/// is inside), unless `--duration` is shorter; with `--replay-loop`, `--duration`.
pub fn duration_ns(r: &ReplayPlan, given_ns: Option<u64>) -> u64 {
    let own = r
        .timing
        .due_ns(0, r.summary.last_offset_ns)
        .saturating_add(1);
    match (r.looped, given_ns) {
        (true, Some(d)) => d,
        (_, Some(d)) => d.min(own),
        (_, None) => own,
    }
}

/// The run's mean rate over `duration_ns`, and the busiest second's rate (what the
/// backlog is sized for).
pub fn rates(r: &ReplayPlan, duration_ns: u64) -> (f64, f64) {
    let speed = r.timing.speed;
    let peak = r.summary.peak_per_s as f64 * speed;
    let per_pass_ns = r.timing.due_ns(1, 0).max(1) as f64;
    let mean = if r.looped {
        r.summary.requests as f64 * 1e9 / per_pass_ns
    } else {
        r.summary.requests as f64 * 1e9 / duration_ns.max(1) as f64
    };
    (mean.max(1e-3), peak.max(mean).max(1.0))
}

/// The request set of a replay (`None` without one): one entry as long as the
/// longest request (what the staging buffers are sized from), framed as `--framing`
/// says, else as HTTP/1.1 for HTTP lines and captures of HTTP, else echo (always over
/// UDP).
pub fn requests(
    a: &RunArgs,
    r: Option<&ReplayPlan>,
    facts: Option<&Result<ReplayFacts, String>>,
) -> Option<Result<Arc<RequestSet>, PlanError>> {
    match (r, facts) {
        (Some(r), Some(_)) => Some(replay_requests(a, r)),
        _ => None,
    }
}

fn replay_requests(a: &RunArgs, r: &ReplayPlan) -> Result<Arc<RequestSet>, PlanError> {
    let default = match (&r.kind, r.format) {
        // UDP matches replies by blaster's header, never by a framer.
        _ if r.carrier == Carrier::Udp => Framing::Echo,
        (LineKind::Http { .. }, Format::Text) => Framing::Http1,
        (_, Format::Pcap | Format::Gor) if r.summary.first_is_http1 => Framing::Http1,
        _ => Framing::Echo,
    };
    let framing = match &a.framing {
        Some(f) => f.parse().map_err(|m| err("framing", m))?,
        None => default,
    };
    let t = Template::literal(&vec![b'x'; r.summary.longest.max(1)]);
    Ok(Arc::new(RequestSet::single(t, framing)))
}
