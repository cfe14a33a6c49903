//! Echo: the response is the request, byte for byte, so it is a fixed-length response
//! of the request's length. (Contents are not compared: that would cost a memcmp per
//! byte on the hot path for a check the sink does not need.)

use super::FixedLength;

/// The framer for an echo server answering requests of `request_len` bytes.
pub fn echo(request_len: usize, max_response: usize) -> FixedLength {
    FixedLength::new(request_len, max_response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit;

    #[test]
    fn echo_frames_by_request_length_at_every_split() {
        testkit::check_splits(|| echo(5, 1 << 20), b"ping-ping-ping-", &[5, 10, 15]);
    }
}
