//! Length-prefixed responses (`length-prefixed:u16be|u32be|u32le[,offset=N][,adjust=N]`):
//! a binary length field sits `offset` bytes into the response, and the response is
//! `offset + field size + value + adjust` bytes long. `adjust` (signed) covers layouts
//! where the field does not count exactly the bytes after it: a DNS-over-TCP reply is
//! `u16be` (the value counts what follows); a memcached binary reply has a 24-byte
//! header with the body length at byte 8, so it is `u32be,offset=8,adjust=12`; a field
//! that counts itself too takes `adjust=-4`.
//!
//! The framer counts bytes. Until `offset + size` bytes of the response have gone by it
//! copies the field's bytes into a 4-byte array as they pass (so the header may arrive
//! one byte per receive), then computes the total once and counts down the rest. It
//! consumes everything it is fed and keeps nothing back. The total is checked as soon
//! as it is known: shorter than the header it was read from is `Invalid`, longer than
//! `--max-response` is `Invalid` before any body byte arrives.
//!
//! Bytes after a response are the next response's header, so trailing garbage stays
//! incomplete, or is `Invalid` once its "length field" gives an impossible length.

use super::{Framer, OVERSIZE, Parsed};
use crate::limits::RESPONSE_BYTES_MAX;
use std::fmt;
use std::str::FromStr;

/// The width and byte order of the length field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthField {
    U16Be,
    U32Be,
    U32Le,
}

impl LengthField {
    pub fn size(self) -> usize {
        match self {
            LengthField::U16Be => 2,
            LengthField::U32Be | LengthField::U32Le => 4,
        }
    }

    fn name(self) -> &'static str {
        match self {
            LengthField::U16Be => "u16be",
            LengthField::U32Be => "u32be",
            LengthField::U32Le => "u32le",
        }
    }

    fn decode(self, b: &[u8; 4]) -> u64 {
        match self {
            LengthField::U16Be => u16::from_be_bytes([b[0], b[1]]) as u64,
            LengthField::U32Be => u32::from_be_bytes(*b) as u64,
            LengthField::U32Le => u32::from_le_bytes(*b) as u64,
        }
    }
}

/// A validated `length-prefixed:` spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LengthPrefixSpec {
    pub field: LengthField,
    /// Bytes of the response before the length field (0 to `RESPONSE_BYTES_MAX`).
    pub offset: usize,
    /// Added to the field's value (magnitude at most `RESPONSE_BYTES_MAX`).
    pub adjust: i64,
}

const FORM: &str = "length-prefixed:u16be|u32be|u32le[,offset=N][,adjust=N]";

impl fmt::Display for LengthPrefixSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.field.name())?;
        if self.offset != 0 {
            write!(f, ",offset={}", self.offset)?;
        }
        if self.adjust != 0 {
            write!(f, ",adjust={}", self.adjust)?;
        }
        Ok(())
    }
}

/// Parses the text after `length-prefixed:`.
impl FromStr for LengthPrefixSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("expected {FORM}, got \"length-prefixed:{s}\"");
        let mut parts = s.split(',');
        let field = match parts.next() {
            Some("u16be") => LengthField::U16Be,
            Some("u32be") => LengthField::U32Be,
            Some("u32le") => LengthField::U32Le,
            _ => return Err(bad()),
        };
        let max = RESPONSE_BYTES_MAX;
        let (mut offset, mut adjust) = (None, None);
        for part in parts {
            let (key, value) = part.split_once('=').ok_or_else(bad)?;
            match key {
                "offset" if offset.is_none() => {
                    let n: usize = value.parse().map_err(|_| bad())?;
                    if n > max {
                        return Err(format!(
                            "length-prefixed: offset must be between 0 and {max} bytes, got {n}"
                        ));
                    }
                    offset = Some(n);
                }
                "adjust" if adjust.is_none() => {
                    let n: i64 = value.parse().map_err(|_| bad())?;
                    if n.unsigned_abs() > max as u64 {
                        return Err(format!(
                            "length-prefixed: adjust must be between -{max} and {max} bytes, got {n}"
                        ));
                    }
                    adjust = Some(n);
                }
                _ => return Err(bad()),
            }
        }
        Ok(LengthPrefixSpec {
            field,
            offset: offset.unwrap_or(0),
            adjust: adjust.unwrap_or(0),
        })
    }
}

#[derive(Debug, Clone)]
pub struct LengthPrefixed {
    spec: LengthPrefixSpec,
    max_response: usize,
    /// Bytes of the current response consumed so far.
    seen: usize,
    /// Total length of the current response; 0 until its length field has been read
    /// (a real total is at least the field's size).
    total: usize,
    /// The length field's bytes, collected as they pass.
    field: [u8; 4],
}

impl LengthPrefixed {
    pub fn new(spec: LengthPrefixSpec, max_response: usize) -> Self {
        LengthPrefixed {
            spec,
            max_response,
            seen: 0,
            total: 0,
            field: [0; 4],
        }
    }
}

impl Framer for LengthPrefixed {
    #[inline]
    fn feed(&mut self, input: &[u8]) -> Parsed {
        let mut used = 0;
        if self.total == 0 {
            let start = self.spec.offset;
            let header = start + self.spec.field.size();
            if header > self.max_response {
                return if input.is_empty() {
                    Parsed::Incomplete { consumed: 0 }
                } else {
                    Parsed::Invalid { reason: OVERSIZE }
                };
            }
            used = (header - self.seen).min(input.len());
            // input[0..used] sits at response offsets seen..seen + used.
            for at in self.seen.max(start)..(self.seen + used).min(header) {
                self.field[at - start] = input[at - self.seen];
            }
            self.seen += used;
            if self.seen < header {
                return Parsed::Incomplete { consumed: used };
            }
            let total =
                header as i64 + self.spec.field.decode(&self.field) as i64 + self.spec.adjust;
            if total < header as i64 {
                return Parsed::Invalid {
                    reason: "length field gives a response shorter than its header",
                };
            }
            if total as u64 > self.max_response as u64 {
                return Parsed::Invalid { reason: OVERSIZE };
            }
            self.total = total as usize;
        }
        let remaining = self.total - self.seen;
        let available = input.len() - used;
        if available >= remaining {
            self.reset();
            Parsed::Complete {
                consumed: used + remaining,
            }
        } else {
            self.seen += available;
            Parsed::Incomplete {
                consumed: input.len(),
            }
        }
    }

    fn reset(&mut self) {
        self.seen = 0;
        self.total = 0;
        self.field = [0; 4];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Framing;
    use crate::proto::testkit::{self, Outcome, concat};
    use proptest::prelude::*;

    const MAX: usize = 1 << 20;

    fn framer(spec: &str, max: usize) -> LengthPrefixed {
        LengthPrefixed::new(spec.parse().unwrap(), max)
    }

    /// A response for `spec`: `offset` header bytes, the field, then the body, with
    /// the field holding `body.len() - adjust`.
    fn response(spec: &LengthPrefixSpec, body: &[u8]) -> Vec<u8> {
        let value = (body.len() as i64 - spec.adjust) as u32;
        let mut r = vec![0xa5; spec.offset];
        match spec.field {
            LengthField::U16Be => r.extend_from_slice(&(value as u16).to_be_bytes()),
            LengthField::U32Be => r.extend_from_slice(&value.to_be_bytes()),
            LengthField::U32Le => r.extend_from_slice(&value.to_le_bytes()),
        }
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn complete_in_one_read() {
        let mut f = framer("u16be", MAX);
        assert_eq!(f.feed(b"\x00\x03abc"), Parsed::Complete { consumed: 5 });
        // A zero-length value: the response is the field alone.
        assert_eq!(f.feed(b"\x00\x00"), Parsed::Complete { consumed: 2 });
    }

    #[test]
    fn memcached_binary_replies_at_every_split() {
        // 24-byte header, total body length (u32be) at byte 8: body = 24 - 12 later.
        let mut get_hit = vec![0x81, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00];
        get_hit.extend_from_slice(&9u32.to_be_bytes()); // extras 4 + value 5
        get_hit.extend_from_slice(&[0; 12]); // opaque, cas
        get_hit.extend_from_slice(b"\xde\xad\xbe\xefhello");
        let mut noop = vec![0x81, 0x0a, 0, 0, 0, 0, 0, 0];
        noop.extend_from_slice(&[0; 16]);
        let (stream, ends) = concat(&[get_hit, noop.clone(), noop]);
        assert_eq!(ends, [33, 57, 81]);
        testkit::check_splits(|| framer("u32be,offset=8,adjust=12", MAX), &stream, &ends);
    }

    #[test]
    fn every_field_width_and_order_at_every_split() {
        for spec in [
            "u16be",
            "u32be",
            "u32le",
            "u32le,offset=3,adjust=-4",
            "u16be,adjust=5",
        ] {
            let parsed: LengthPrefixSpec = spec.parse().unwrap();
            let (stream, ends) = concat(&[
                response(&parsed, b"hello world"),
                response(&parsed, b"12345"),
                response(&parsed, b"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
            ]);
            testkit::check_splits(|| framer(spec, MAX), &stream, &ends);
        }
    }

    #[test]
    fn trailing_garbage_is_the_next_header() {
        let mut f = framer("u16be", 1000);
        // One response, then one byte of a would-be header: incomplete.
        assert_eq!(
            testkit::run(&mut f, b"\x00\x01a\xff", &[]),
            Outcome::pending(vec![3], 0)
        );
        // Its second byte makes a length past the bound: invalid.
        assert_eq!(f.feed(b"\xff"), Parsed::Invalid { reason: OVERSIZE });
    }

    #[test]
    fn impossible_lengths_are_invalid() {
        // The field counts itself (adjust=-4) but says 2: shorter than the header.
        let mut f = framer("u32be,adjust=-4", MAX);
        assert!(matches!(
            f.feed(b"\x00\x00\x00\x02"),
            Parsed::Invalid { .. }
        ));
        let mut f = framer("u32le", MAX);
        assert_eq!(
            f.feed(b"\xff\xff\xff\xff"),
            Parsed::Invalid { reason: OVERSIZE }
        );
    }

    #[test]
    fn oversize_is_invalid_before_the_body_arrives() {
        // max 10: a body of 8 fits (2 + 8), of 9 does not, and says so at the header.
        assert_eq!(
            framer("u16be", 10).feed(b"\x00\x08"),
            Parsed::Incomplete { consumed: 2 }
        );
        assert_eq!(
            framer("u16be", 10).feed(b"\x00\x09"),
            Parsed::Invalid { reason: OVERSIZE }
        );
        assert_eq!(
            framer("u16be,offset=9", 10).feed(b"x"),
            Parsed::Invalid { reason: OVERSIZE }
        );
    }

    #[test]
    fn a_large_response_streams_through_a_small_buffer() {
        let spec: LengthPrefixSpec = "u32be".parse().unwrap();
        let (stream, ends) = concat(&[response(&spec, &vec![7; MAX - 4]), response(&spec, b"x")]);
        assert_eq!(
            testkit::run_buffered(&mut framer("u32be", MAX), &stream, 4096),
            Outcome::pending(ends, 0)
        );
    }

    #[test]
    fn reset_forgets_a_partial_header() {
        testkit::check_reset(
            || framer("u32be", MAX),
            b"\x00\x00",
            b"\x00\x00\x00\x01z",
            &[5],
        );
        testkit::check_reset(|| framer("u16be", MAX), b"\x00\x05ab", b"\x00\x01z", &[3]);
    }

    #[test]
    fn spec_parses_and_rejects() {
        let spec = |s: &str| s.parse::<LengthPrefixSpec>();
        assert_eq!(
            spec("u32le,adjust=-2,offset=4"),
            Ok(LengthPrefixSpec {
                field: LengthField::U32Le,
                offset: 4,
                adjust: -2
            })
        );
        assert_eq!(spec("u16be,offset=0").unwrap().to_string(), "u16be");
        for bad in [
            "",
            "u64be",
            "u16be,",
            "u16be,offset",
            "u16be,offset=-1",
            "u16be,offset=1,offset=2",
            "u16be,adjust=x",
            "u16be,size=3",
            "u16be,offset=2000000",
            "u16be,adjust=-2000000",
        ] {
            let e = format!("length-prefixed:{bad}")
                .parse::<Framing>()
                .unwrap_err();
            assert!(e.contains("length-prefixed"), "{bad:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    fn spec_strategy() -> impl Strategy<Value = LengthPrefixSpec> {
        (
            prop_oneof![
                Just(LengthField::U16Be),
                Just(LengthField::U32Be),
                Just(LengthField::U32Le)
            ],
            0usize..6,
            0i64..4,
        )
            .prop_map(|(field, offset, adjust)| LengthPrefixSpec {
                field,
                offset,
                adjust,
            })
    }

    proptest! {
        #[test]
        fn chunking_never_moves_frame_ends(
            spec in spec_strategy(),
            bodies in proptest::collection::vec(
                proptest::collection::vec(any::<u8>(), 3..40),
                0..8,
            ),
            cuts in testkit::cuts(),
        ) {
            let responses: Vec<Vec<u8>> = bodies.iter().map(|b| response(&spec, b)).collect();
            let (stream, ends) = concat(&responses);
            let whole = testkit::run(&mut LengthPrefixed::new(spec, MAX), &stream, &[]);
            prop_assert_eq!(&whole, &Outcome::pending(ends, 0));
            let cut = testkit::run(&mut LengthPrefixed::new(spec, MAX), &stream, &cuts);
            prop_assert_eq!(cut, whole);
        }
    }
}
