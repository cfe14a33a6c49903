//! Response framers: sans-I/O parsers that find where one response ends in the byte
//! stream, so latency stops at the right byte. They never allocate and never read a
//! socket; the engine feeds them whatever a receive completion returned.
//!
//! A framer is fed bytes and answers with [`Parsed`]: a response completed after
//! `consumed` bytes, more bytes are needed (having consumed some), or the stream is
//! invalid. A framer may consume fewer bytes than it was given on `Incomplete`; the
//! engine then keeps the rest and feeds it again with the next bytes appended.
mod echo;
mod fixed;
pub mod udp_header;

pub use echo::echo;
pub use fixed::FixedLength;

use std::fmt;
use std::str::FromStr;

/// Outcome of feeding bytes to a framer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// One response ended after `consumed` bytes of the input.
    Complete { consumed: usize },
    /// No response ended; `consumed` bytes were used and need not be fed again.
    Incomplete { consumed: usize },
    /// The bytes cannot be a response.
    Invalid { reason: &'static str },
}

/// One response framer per connection; state carries across receive completions.
pub trait Framer {
    fn feed(&mut self, input: &[u8]) -> Parsed;
    /// Forget any partial response (the connection was reopened).
    fn reset(&mut self);
}

/// The `--framing` choice, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// The response has as many bytes as the request.
    Echo,
    /// The response has exactly N bytes.
    Fixed(usize),
}

impl Framing {
    /// The framer for one connection, given the request payload length.
    pub fn framer(&self, request_len: usize) -> AnyFramer {
        match *self {
            Framing::Echo => AnyFramer::Fixed(echo(request_len)),
            Framing::Fixed(n) => AnyFramer::Fixed(FixedLength::new(n)),
        }
    }
}

impl fmt::Display for Framing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Framing::Echo => write!(f, "echo"),
            Framing::Fixed(n) => write!(f, "fixed:{n}"),
        }
    }
}

impl FromStr for Framing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "echo" {
            return Ok(Framing::Echo);
        }
        if let Some(n) = s.strip_prefix("fixed:") {
            let n: usize = n
                .parse()
                .map_err(|_| format!("expected fixed:N with N a byte count, got {s:?}"))?;
            let max = crate::limits::RESPONSE_BYTES_MAX;
            if n == 0 || n > max {
                return Err(format!(
                    "fixed:N must be between 1 and {max} bytes, got {n}"
                ));
            }
            return Ok(Framing::Fixed(n));
        }
        Err(format!("expected echo or fixed:N, got {s:?}"))
    }
}

/// Static dispatch over the framers, so the hot path makes no virtual calls.
#[derive(Debug, Clone)]
pub enum AnyFramer {
    Fixed(FixedLength),
}

impl Framer for AnyFramer {
    #[inline]
    fn feed(&mut self, input: &[u8]) -> Parsed {
        match self {
            AnyFramer::Fixed(f) => f.feed(input),
        }
    }
    fn reset(&mut self) {
        match self {
            AnyFramer::Fixed(f) => f.reset(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_parses_and_rejects() {
        assert_eq!("echo".parse::<Framing>(), Ok(Framing::Echo));
        assert_eq!("fixed:128".parse::<Framing>(), Ok(Framing::Fixed(128)));
        assert!("fixed:0".parse::<Framing>().is_err());
        assert!("fixed:x".parse::<Framing>().is_err());
        assert!("http".parse::<Framing>().is_err());
        assert_eq!(Framing::Fixed(7).to_string(), "fixed:7");
    }
}
