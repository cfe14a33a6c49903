//! Echo: the response is the request, byte for byte, so it is a fixed-length response
//! of the request's length. (Contents are not compared: that would cost a memcmp per
//! byte on the hot path for a check the sink does not need.)

use super::FixedLength;

/// The framer for an echo server answering requests of `request_len` bytes.
pub fn echo(request_len: usize) -> FixedLength {
    FixedLength::new(request_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::fixed::tests::frame_ends;

    #[test]
    fn echo_frames_by_request_length_at_every_split() {
        let stream = b"ping-ping-ping-";
        for chunk in 1..=stream.len() {
            let mut f = echo(5);
            assert_eq!(frame_ends(&mut f, stream, chunk), vec![5, 10, 15]);
        }
    }
}
