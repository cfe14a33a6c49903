//! The test matrix every framer runs, and a small engine stand-in that feeds a framer
//! the way the worker does: bytes arrive in chunks; on `Complete` the rest is fed again
//! at once, on `Incomplete` the un-consumed bytes are kept and fed again with the next
//! chunk appended, on `Invalid` the run stops. It asserts the contract on every call:
//! `consumed` never exceeds the input and a `Complete` consumes at least one byte.

use super::{Framer, Parsed};
use proptest::prelude::*;

/// What a run of a stream through a framer gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Stream offsets at which responses ended.
    pub ends: Vec<usize>,
    /// Bytes left un-consumed at the end of the stream (0 after `Invalid`).
    pub pending: usize,
    /// Why the stream was rejected, if it was.
    pub invalid: Option<&'static str>,
}

impl Outcome {
    pub fn pending(ends: Vec<usize>, pending: usize) -> Self {
        Outcome {
            ends,
            pending,
            invalid: None,
        }
    }

    pub fn invalid(ends: Vec<usize>, reason: &'static str) -> Self {
        Outcome {
            ends,
            pending: 0,
            invalid: Some(reason),
        }
    }
}

/// Feeds `stream` in chunks of the sizes in `cuts`, cycling (whole when empty).
pub(crate) fn run(f: &mut dyn Framer, stream: &[u8], cuts: &[usize]) -> Outcome {
    let mut i = 0;
    feed_pieces(f, stream, || {
        if cuts.is_empty() {
            usize::MAX
        } else {
            i += 1;
            cuts[(i - 1) % cuts.len()].max(1)
        }
    })
}

/// Feeds `stream` as two reads, split at `at`.
pub(crate) fn split(f: &mut dyn Framer, stream: &[u8], at: usize) -> Outcome {
    let mut first = true;
    feed_pieces(f, stream, || {
        if std::mem::take(&mut first) {
            at
        } else {
            usize::MAX
        }
    })
}

fn feed_pieces(f: &mut dyn Framer, stream: &[u8], mut next: impl FnMut() -> usize) -> Outcome {
    let mut ends = Vec::new();
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
                    assert!(
                        consumed >= 1 && consumed <= pending.len(),
                        "Complete consumed {consumed} of {}",
                        pending.len()
                    );
                    ends.push(base + consumed);
                    pending.drain(..consumed);
                    base += consumed;
                }
                Parsed::Incomplete { consumed } => {
                    assert!(
                        consumed <= pending.len(),
                        "Incomplete consumed {consumed} of {}",
                        pending.len()
                    );
                    pending.drain(..consumed);
                    base += consumed;
                    break;
                }
                Parsed::Invalid { reason } => return Outcome::invalid(ends, reason),
            }
        }
    }
    Outcome::pending(ends, pending.len())
}

/// Reason [`run_buffered`] gives when a framer needs more than the buffer contiguous.
pub(crate) const BUFFER_FULL: &str = "un-consumed bytes filled the receive buffer";

/// Feeds `stream` through a receive buffer of `capacity` bytes, as the engine does:
/// each read fills what the kept bytes leave free, and a buffer full of kept bytes is
/// an error. Shows that a framer streams a response larger than its buffer.
pub(crate) fn run_buffered(f: &mut dyn Framer, stream: &[u8], capacity: usize) -> Outcome {
    let mut ends = Vec::new();
    let mut buf = vec![0u8; capacity];
    let mut kept = 0; // un-consumed bytes at the start of buf
    let mut base = 0; // stream offset of buf[0]
    let mut pos = 0;
    while pos < stream.len() {
        let take = (capacity - kept).min(stream.len() - pos);
        buf[kept..kept + take].copy_from_slice(&stream[pos..pos + take]);
        pos += take;
        let end = kept + take;
        let mut at = 0;
        while at < end {
            match f.feed(&buf[at..end]) {
                Parsed::Complete { consumed } => {
                    assert!(consumed >= 1 && consumed <= end - at);
                    at += consumed;
                    ends.push(base + at);
                }
                Parsed::Incomplete { consumed } => {
                    assert!(consumed <= end - at);
                    at += consumed;
                    break;
                }
                Parsed::Invalid { reason } => return Outcome::invalid(ends, reason),
            }
        }
        base += at;
        kept = end - at;
        if kept == capacity {
            return Outcome::invalid(ends, BUFFER_FULL);
        }
        buf.copy_within(at..end, 0);
    }
    Outcome::pending(ends, kept)
}

/// The split matrix: `stream` must give exactly `ends` (nothing pending) read whole,
/// split in two at every byte, and in uniform chunks of every size up to 64.
pub(crate) fn check_splits<F: Framer>(make: impl Fn() -> F, stream: &[u8], ends: &[usize]) {
    let want = Outcome::pending(ends.to_vec(), 0);
    assert_eq!(run(&mut make(), stream, &[]), want, "read whole");
    for at in 0..=stream.len() {
        assert_eq!(split(&mut make(), stream, at), want, "split at {at}");
    }
    for chunk in 1..=stream.len().min(64) {
        assert_eq!(
            run(&mut make(), stream, &[chunk]),
            want,
            "chunks of {chunk}"
        );
    }
}

/// The same framer must be usable again after `reset()` mid-response: `partial` (a
/// strict prefix of a response) is fed, then `reset`, then `stream` gives `ends`.
pub(crate) fn check_reset<F: Framer>(
    make: impl Fn() -> F,
    partial: &[u8],
    stream: &[u8],
    ends: &[usize],
) {
    let mut f = make();
    assert!(
        matches!(f.feed(partial), Parsed::Incomplete { .. }),
        "the partial response must be incomplete"
    );
    f.reset();
    assert_eq!(run(&mut f, stream, &[]), Outcome::pending(ends.to_vec(), 0));
}

/// Chunk sizes for property tests: mostly small, so splits land inside every field.
pub(crate) fn cuts() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(prop_oneof![4 => 1usize..8, 1 => 8usize..300], 1..24)
}

/// Concatenates responses and lists where each ends.
pub(crate) fn concat(responses: &[Vec<u8>]) -> (Vec<u8>, Vec<usize>) {
    let mut stream = Vec::new();
    let mut ends = Vec::new();
    for r in responses {
        stream.extend_from_slice(r);
        ends.push(stream.len());
    }
    (stream, ends)
}
