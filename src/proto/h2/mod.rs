//! HTTP/2 client codec (RFC 9113, RFC 7541), sans-I/O like the framers: it reads frames
//! from a `&[u8]` the engine received and writes frames into a `&mut [u8]` the engine
//! will send, never touching a socket and never allocating per request.
//!
//! Three layers, each usable alone:
//! - [`frame`]: the 9-byte frame header and every frame type's payload checks
//!   ([`parse_frame`] answers `Complete` / `Incomplete` / `Invalid` like [`Parsed`]),
//!   and the writers (preface + SETTINGS, ACKs, PING, WINDOW_UPDATE, RST_STREAM,
//!   GOAWAY, HEADERS + CONTINUATION, DATA), each returning the bytes written or
//!   [`TooSmall`].
//! - [`hpack`]: the request header block, encoded once per template with
//!   representations that need no encoder state (static-table indexed fields and
//!   literals without indexing, no Huffman), so the same bytes go out on every stream
//!   of every connection; decoding ([`decoder`] and its Huffman code) keeps a bounded dynamic
//!   table per [`Connection`] and allocates nothing per header block.
//! - [`conn`]: one connection's state: the peer's SETTINGS applied (with the RFC's
//!   adjustment of every open stream's send window when INITIAL_WINDOW_SIZE changes),
//!   send and receive flow-control windows for the connection and each stream (a
//!   WINDOW_UPDATE is due when half a receive window is consumed), stream ids, the
//!   CONTINUATION rule, GOAWAY (which open streams to retry) and RST_STREAM.
//! - [`server`]: the other side, for `blaster sink --http2`: one server connection
//!   that reads the client preface and frames with the same parser and HPACK decoder,
//!   and answers requests and gRPC unary calls within the client's windows (it keeps
//!   request bodies for echo, so unlike the client it allocates per stream).
//!
//! Errors follow RFC 9113 §5.4: a connection error is an `Err(`[`H2Error`]`)` (the
//! caller sends GOAWAY with its code and counts every in-flight stream as failed of
//! that kind); a stream error is an [`Event::StreamError`] (the caller sends
//! RST_STREAM and fails that stream only).
//!
//! A frame must be seen whole: the engine's receive buffer holds at least
//! [`FRAME_HEADER_BYTES`] + the local MAX_FRAME_SIZE (16 KiB + 9 by default); a frame
//! announcing more than that is `Invalid` (FRAME_SIZE_ERROR) as soon as its header is
//! read.
//!
//! [`Parsed`]: crate::proto::Parsed
pub mod conn;
pub mod decoder;
pub mod frame;
pub mod hpack;
mod huffman;
pub mod request;
pub mod server;

pub use conn::{Connection, Event, LocalSettings, PeerSettings};
pub use frame::{FRAME_HEADER_BYTES, Frame, FrameParsed, Kind, PREFACE, TooSmall, parse_frame};
pub use hpack::encode_request_headers;

use std::fmt;

/// Largest flow-control window (RFC 9113 §6.9.1): 2^31 - 1.
pub const WINDOW_MAX: u32 = (1 << 31) - 1;
/// Every window's size before SETTINGS say otherwise (§6.9.2).
pub const WINDOW_DEFAULT: u32 = 65_535;
/// MAX_FRAME_SIZE bounds (§6.5.2); the smallest is also the default.
pub const FRAME_SIZE_MIN: u32 = 16_384;
pub const FRAME_SIZE_MAX: u32 = 16_777_215;
/// HEADER_TABLE_SIZE before SETTINGS say otherwise (§6.5.2).
pub const HEADER_TABLE_DEFAULT: u32 = 4_096;

/// An HTTP/2 error code (RFC 9113 §7), as carried by RST_STREAM and GOAWAY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    pub const NO_ERROR: Self = Self(0x0);
    pub const PROTOCOL_ERROR: Self = Self(0x1);
    pub const INTERNAL_ERROR: Self = Self(0x2);
    pub const FLOW_CONTROL_ERROR: Self = Self(0x3);
    pub const SETTINGS_TIMEOUT: Self = Self(0x4);
    pub const STREAM_CLOSED: Self = Self(0x5);
    pub const FRAME_SIZE_ERROR: Self = Self(0x6);
    pub const REFUSED_STREAM: Self = Self(0x7);
    pub const CANCEL: Self = Self(0x8);
    pub const COMPRESSION_ERROR: Self = Self(0x9);
    pub const CONNECT_ERROR: Self = Self(0xa);
    pub const ENHANCE_YOUR_CALM: Self = Self(0xb);
    pub const INADEQUATE_SECURITY: Self = Self(0xc);
    pub const HTTP_1_1_REQUIRED: Self = Self(0xd);

    /// The RFC's name; `UNKNOWN` for codes it does not define (which §7 says to treat
    /// as INTERNAL_ERROR, but the report should still show that they were unknown).
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 14] = [
            "NO_ERROR",
            "PROTOCOL_ERROR",
            "INTERNAL_ERROR",
            "FLOW_CONTROL_ERROR",
            "SETTINGS_TIMEOUT",
            "STREAM_CLOSED",
            "FRAME_SIZE_ERROR",
            "REFUSED_STREAM",
            "CANCEL",
            "COMPRESSION_ERROR",
            "CONNECT_ERROR",
            "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY",
            "HTTP_1_1_REQUIRED",
        ];
        NAMES.get(self.0 as usize).copied().unwrap_or("UNKNOWN")
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A connection error: the code to send in GOAWAY and why, for the one-line message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2Error {
    pub code: ErrorCode,
    pub reason: &'static str,
}

impl H2Error {
    pub(crate) const fn new(code: ErrorCode, reason: &'static str) -> Self {
        H2Error { code, reason }
    }
}

impl fmt::Display for H2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HTTP/2 {}: {}", self.code, self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_are_named() {
        assert_eq!(ErrorCode(0).name(), "NO_ERROR");
        assert_eq!(ErrorCode::ENHANCE_YOUR_CALM.name(), "ENHANCE_YOUR_CALM");
        assert_eq!(ErrorCode(0xd).to_string(), "HTTP_1_1_REQUIRED");
        assert_eq!(ErrorCode(0xe).name(), "UNKNOWN");
        assert_eq!(ErrorCode(u32::MAX).name(), "UNKNOWN");
    }
}
