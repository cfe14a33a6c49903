//! The engine stand-in every fuzz target drives a framer with.
//!
//! A target's input is split into a few parameter bytes (read with [`Input::byte`]:
//! the framer's options, its `--max-response`, the seed of the chunk sizes) and the
//! stream. [`drive`] feeds the stream the way the worker does — in chunks, keeping the
//! bytes a framer did not consume and feeding them again with the next chunk — and
//! asserts the contract on every call:
//!
//! - `consumed` never exceeds the input, and a `Complete` consumes at least one byte;
//! - the bytes kept un-consumed stay under `LINE_BYTES_MAX` (a framer streams);
//! - chunking changes nothing: the response ends and the verdict (invalid or not) are
//!   those of the same stream fed whole.
//!
//! After `Invalid` the stand-in does what the engine does — `reset()` and go on as on a
//! fresh connection — so the rest of the input exercises `reset` too. At the end it
//! reports the close (`eof`) and reads `status` / `close_after`.

use blaster::proto::{Framer, LINE_BYTES_MAX, Parsed};

/// Parameter bytes taken from the front of the fuzz input; missing ones read as 0.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// A `--max-response` bound: small ones make the oversize paths reachable.
    pub fn max_response(&mut self) -> usize {
        [7, 64, 300, 4096, 1 << 20][self.byte() as usize % 5]
    }

    /// What remains: the stream.
    pub fn rest(self) -> &'a [u8] {
        self.data
    }
}

/// What a run saw up to its first `Invalid` (after it, runs restart at different
/// offsets and are not comparable).
#[derive(Debug, PartialEq, Eq)]
struct Trace {
    /// Stream offsets at which responses ended, before the first `Invalid`.
    ends: Vec<usize>,
    /// The first `Invalid`'s reason.
    invalid: Option<&'static str>,
}

/// Feeds `stream` to framers from `make` in chunks drawn from `seed`, checking the
/// contract, then again whole, and compares the two.
pub fn drive<F: Framer>(make: impl Fn() -> F, stream: &[u8], seed: u8) {
    let mut state = seed as u32 | 0x100; // never zero: xorshift would stick
    let chunked = run(&mut make(), stream, || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        match state % 8 {
            0 => usize::MAX,
            1..=4 => 1 + (state >> 8) as usize % 4,
            _ => 1 + (state >> 8) as usize % 300,
        }
    });
    let whole = run(&mut make(), stream, || usize::MAX);
    assert_eq!(chunked, whole, "chunking changed the framing");
}

fn run<F: Framer>(f: &mut F, stream: &[u8], mut next: impl FnMut() -> usize) -> Trace {
    let mut trace = Trace {
        ends: Vec::new(),
        invalid: None,
    };
    let mut pending: Vec<u8> = Vec::new();
    let mut base = 0; // stream offset of pending[0]
    let mut pos = 0;
    while pos < stream.len() {
        let take = next().min(stream.len() - pos);
        pending.extend_from_slice(&stream[pos..pos + take]);
        pos += take;
        while !pending.is_empty() {
            match f.feed(&pending) {
                Parsed::Complete { consumed } => {
                    assert!(consumed >= 1, "Complete consumed nothing");
                    assert!(consumed <= pending.len(), "consumed past the input");
                    let _ = (f.status(), f.close_after());
                    pending.drain(..consumed);
                    base += consumed;
                    if trace.invalid.is_none() {
                        trace.ends.push(base);
                    }
                }
                Parsed::Incomplete { consumed } => {
                    assert!(consumed <= pending.len(), "consumed past the input");
                    pending.drain(..consumed);
                    base += consumed;
                    assert!(
                        pending.len() < LINE_BYTES_MAX,
                        "{} bytes kept un-consumed",
                        pending.len()
                    );
                    break;
                }
                Parsed::Invalid { reason } => {
                    // The engine closes the connection, drops what it holds, reopens.
                    trace.invalid.get_or_insert(reason);
                    base += pending.len();
                    pending.clear();
                    f.reset();
                }
            }
        }
    }
    if f.eof() {
        let _ = (f.status(), f.close_after());
    }
    trace
}

/// One event of a frame adapter's decoder, with the bytes it pointed at.
#[derive(Debug, PartialEq, Eq)]
enum FrameEvent {
    Message(Vec<u8>),
    Control(String),
}

/// What a frame decoder or join saw up to its first `Invalid` or failure.
#[derive(Debug, PartialEq, Eq)]
struct FrameTrace {
    events: Vec<FrameEvent>,
    invalid: Option<&'static str>,
    join: Option<String>,
}

/// One frame fuzz target's whole body for adapter `kind`: the first parameter bytes
/// choose the join (odd) or the decoder alone, the socket's role (only for a protocol
/// with two sockets per connection, `resp`), the frame size and the chunking seed;
/// the rest is the server's bytes, through [`drive_frames`].
pub fn fuzz_frame_proto(kind: blaster::proto::frame_proto::FrameProtoKind, data: &[u8]) {
    use blaster::proto::frame_proto::{FrameSpec, Role, TOPIC_DEFAULT, WS_PATH_DEFAULT};
    let mut input = Input::new(data);
    let join = input.byte() & 1 == 1;
    let role = match kind.sockets_per_connection() {
        1 => Role::Both,
        _ if input.byte() & 2 == 0 => Role::Subscriber,
        _ => Role::Publisher,
    };
    let size = [32, 100, 300][input.byte() as usize % 3];
    let seed = input.byte();
    let mut spec = FrameSpec::new(kind, TOPIC_DEFAULT, WS_PATH_DEFAULT, "h:1", size)
        .expect("a valid spec");
    if kind == blaster::proto::frame_proto::FrameProtoKind::Grpc {
        spec.grpc = Some(blaster::proto::frame_proto::GrpcSpec {
            path: "/blaster.Room/Join".into(),
            metadata: blaster::proto::frame_proto::grpc::metadata_default(),
            scheme: "http",
            keepalive_ns: None,
        });
    }
    drive_frames(&spec, role, join, input.rest(), seed);
}

/// Feeds `stream` to a frame adapter's downlink decoder (or, with `join`, to its join
/// exchange over `rooms`) in chunks drawn from `seed` and whole, checking the contract
/// on every call, and compares the two. The decoder contract: `consumed` within the
/// input, a message consumes at least a byte and its payload lies in what it consumed,
/// controls that consume nothing do not repeat forever, the bytes kept stay under
/// `KEPT_BYTES_MAX`. After `Invalid` the stand-in resets and goes on, as the engine
/// reopens a connection.
pub fn drive_frames(
    spec: &blaster::proto::frame_proto::FrameSpec,
    role: blaster::proto::frame_proto::Role,
    join: bool,
    stream: &[u8],
    seed: u8,
) {
    let mut state = seed as u32 | 0x100;
    let chunked = run_frames(spec, role, join, stream, || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        match state % 8 {
            0 => usize::MAX,
            1..=4 => 1 + (state >> 8) as usize % 4,
            _ => 1 + (state >> 8) as usize % 300,
        }
    });
    let whole = run_frames(spec, role, join, stream, || usize::MAX);
    assert_eq!(chunked, whole, "chunking changed what the adapter saw");
}

fn run_frames(
    spec: &blaster::proto::frame_proto::FrameSpec,
    role: blaster::proto::frame_proto::Role,
    join: bool,
    stream: &[u8],
    mut next: impl FnMut() -> usize,
) -> FrameTrace {
    use blaster::proto::frame_proto::{Down, FrameProto, Join, JoinFailure, KEPT_BYTES_MAX};
    let mut c = FrameProto::new(spec, role, 1, 1);
    let mut trace = FrameTrace {
        events: Vec::new(),
        invalid: None,
        join: None,
    };
    let rooms = [3u32];
    let mut out = Vec::new();
    if join {
        c.join_start(&rooms, &mut out);
    } else if spec.kind == blaster::proto::frame_proto::FrameProtoKind::Grpc {
        // A gRPC decoder reads members' streams: join one through a server's answer.
        c.join_start(&rooms, &mut out);
        let server = blaster::proto::frame_proto::grpc::server_join_bytes(1, 1 << 30);
        let done = c.join_feed(&rooms, &server, &mut out);
        assert!(matches!(done, Join::Joined { .. }), "{done:?}");
    }
    let mut joining = join;
    let mut pending: Vec<u8> = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        let take = next().max(1).min(stream.len() - pos);
        pending.extend_from_slice(&stream[pos..pos + take]);
        pos += take;
        let mut zero = 0u32;
        while !pending.is_empty() {
            if joining {
                let len = pending.len();
                match c.join_feed(&rooms, &pending, &mut out) {
                    Join::Pending { consumed } => {
                        assert!(consumed <= len);
                        pending.drain(..consumed);
                        break;
                    }
                    Join::Joined { consumed } => {
                        assert!(consumed <= len);
                        pending.drain(..consumed);
                        trace.join = Some("joined".into());
                        joining = false;
                        continue;
                    }
                    Join::Failed(e) => {
                        assert!(!e.to_string().contains('\n'), "{e}");
                        // A protocol error quotes the bytes that had arrived, which
                        // depend on the chunking: compare what was wrong, not the quote.
                        let said = match e.kind {
                            JoinFailure::Protocol => e.reason.split(": \"").next().unwrap_or(""),
                            _ => &e.reason,
                        };
                        trace.join.get_or_insert(format!("{:?} {said}", e.kind));
                        return trace;
                    }
                }
            }
            let len = pending.len();
            let used = match c.decode(&mut pending) {
                Down::Message { consumed, payload } => {
                    assert!(
                        consumed >= 1 && consumed <= len,
                        "message consumed {consumed} of {len}"
                    );
                    assert!(payload.start <= payload.end && payload.end <= consumed);
                    if trace.invalid.is_none() {
                        trace
                            .events
                            .push(FrameEvent::Message(pending[payload].to_vec()));
                    }
                    consumed
                }
                Down::Held { consumed } => {
                    assert!(
                        consumed >= 1 && consumed <= len,
                        "held consumed {consumed} of {len}"
                    );
                    if trace.invalid.is_none() {
                        trace.events.push(FrameEvent::Message(c.held().to_vec()));
                    }
                    consumed
                }
                Down::Control { consumed, control } => {
                    assert!(consumed <= len, "control consumed {consumed} of {len}");
                    zero = if consumed == 0 { zero + 1 } else { 0 };
                    assert!(zero < 100_000, "controls consuming nothing loop");
                    let mut pong = [0u8; blaster::proto::frame_proto::CONTROL_BYTES_MAX];
                    if let blaster::proto::frame_proto::Control::Ping { payload } = &control {
                        let n = c.encode_pong(&pending[payload.clone()], &mut pong);
                        assert!(n <= pong.len());
                    }
                    if let blaster::proto::frame_proto::Control::Reply = &control {
                        out.clear();
                        c.take_reply(&mut out);
                    }
                    if trace.invalid.is_none() {
                        trace
                            .events
                            .push(FrameEvent::Control(format!("{control:?}")));
                    }
                    consumed
                }
                Down::Incomplete { consumed } => {
                    assert!(consumed <= len, "incomplete consumed {consumed} of {len}");
                    pending.drain(..consumed);
                    assert!(
                        pending.len() <= KEPT_BYTES_MAX,
                        "{} bytes kept",
                        pending.len()
                    );
                    break;
                }
                Down::Invalid { reason } => {
                    trace.invalid.get_or_insert(reason);
                    pending.clear();
                    c.reset();
                    continue;
                }
            };
            pending.drain(..used);
        }
    }
    trace
}
