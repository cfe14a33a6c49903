//! Histograms as text: the HdrHistogram V2 *compressed* encoding (the deflated V2
//! payload, cookie `0x1c849304`), base64 — what every HdrHistogram library decodes
//! (Java `Histogram.decodeFromCompressedByteBuffer`, Go, C, Python, JS). The JSON report
//! embeds histograms this way and the interval log (`--hdr-log`) carries the same strings,
//! so a result can be merged, compared or re-plotted at any percentile later.
//!
//! Values are nanoseconds throughout blaster.

use crate::limits::{HISTOGRAM_COUNTS_MAX, HISTOGRAM_DECODED_BYTES_MAX};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use serde::{Deserialize, Serialize};

/// The `encoding` key beside embedded histograms in the JSON.
pub const ENCODING: &str = "hdrhistogram-v2-compressed-base64";

/// Encodes `h` as base64 of its V2 compressed form.
pub fn encode(h: &Histogram<u64>) -> String {
    encode_with(&mut V2DeflateSerializer::new(), h)
}

/// [`encode`] reusing a serializer (it keeps its buffers between calls).
pub fn encode_with(s: &mut V2DeflateSerializer, h: &Histogram<u64>) -> String {
    let mut buf = Vec::with_capacity(256);
    // Serializing into a Vec cannot fail for I/O reasons, and blaster's histograms have
    // bounds the V2 format can express: an error here is a broken invariant.
    s.serialize(h, &mut buf)
        .expect("a bounded histogram serializes into memory");
    STANDARD.encode(buf)
}

/// Why an embedded histogram could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("not an HdrHistogram V2 payload: {0}")]
    Payload(String),
    /// A length in a header that the bytes do not match: trusting it would make the
    /// decoder allocate what the header says, not what is there.
    #[error("its header declares a {declared}-byte {what} but {present} bytes follow")]
    Length {
        what: &'static str,
        declared: u64,
        present: u64,
    },
    #[error("it decompresses to more than {HISTOGRAM_DECODED_BYTES_MAX} bytes")]
    TooLarge,
    #[error(
        "its bounds ({low}..{high}, {sigfig} significant digits) need {counts} counts, \
         more than {HISTOGRAM_COUNTS_MAX}"
    )]
    TooWide {
        low: u64,
        high: u64,
        sigfig: u32,
        counts: u64,
    },
}

/// The V2 cookie (uncompressed) and the compressed V2 cookie, each with the 0x10 bit
/// every HdrHistogram library sets (and the hdrhistogram crate requires).
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
/// Bytes of the uncompressed V2 header: cookie, payload length, normalizing offset,
/// significant digits, lowest, highest, integer-to-double ratio.
const V2_HEADER_BYTES: usize = 40;

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// Counts the hdrhistogram crate allocates for these bounds (`None`: bounds it refuses
/// anyway). The arithmetic of `Histogram::new_with_bounds`, without the allocation.
fn counts_len(low: u64, high: u64, sigfig: u32) -> Option<u64> {
    if !(1..=u64::MAX / 2).contains(&low) || high < 2 * low || sigfig > 5 {
        return None;
    }
    let largest = 2 * 10u64.pow(sigfig);
    let sub_bucket_magnitude = u64::BITS - (largest - 1).leading_zeros(); // ceil(log2)
    let unit_magnitude = u64::BITS - 1 - low.leading_zeros(); // floor(log2)
    if unit_magnitude + sub_bucket_magnitude > 63 {
        return None;
    }
    let mut smallest_untrackable = 1u64 << (sub_bucket_magnitude + unit_magnitude);
    let mut buckets = 1u64;
    while smallest_untrackable <= high {
        if smallest_untrackable > u64::MAX / 2 {
            buckets += 1;
            break;
        }
        smallest_untrackable <<= 1;
        buckets += 1;
    }
    Some((buckets + 1) * (1u64 << (sub_bucket_magnitude - 1)))
}

/// Decodes a string [`encode`] (or any HdrHistogram library) produced; the compressed
/// and the plain V2 forms are both accepted.
///
/// Nothing in the input is trusted before it is checked: the hdrhistogram crate's
/// deserializer allocates the payload length its header declares (4 GB for a 10 KB
/// string) and inflates without a bound, so the lengths are checked against the bytes
/// present, the inflating stops past [`HISTOGRAM_DECODED_BYTES_MAX`], and the counts
/// the bounds imply are checked against [`HISTOGRAM_COUNTS_MAX`] before the crate sees
/// the (now bounded) bytes.
pub fn decode(s: &str) -> Result<Histogram<u64>, DecodeError> {
    use std::io::Read;
    let bytes = STANDARD.decode(s.trim())?;
    if bytes.len() < 8 {
        return Err(DecodeError::Payload(format!("{} bytes", bytes.len())));
    }
    let plain: Vec<u8> = match be_u32(&bytes, 0) {
        V2_COMPRESSED_COOKIE => {
            let declared = u64::from(be_u32(&bytes, 4));
            let present = (bytes.len() - 8) as u64;
            if declared != present {
                return Err(DecodeError::Length {
                    what: "compressed payload",
                    declared,
                    present,
                });
            }
            let cap = HISTOGRAM_DECODED_BYTES_MAX as u64;
            let mut out = Vec::new();
            flate2::read::ZlibDecoder::new(&bytes[8..])
                .take(cap + 1)
                .read_to_end(&mut out)
                .map_err(|e| DecodeError::Payload(format!("inflate: {e}")))?;
            if out.len() as u64 > cap {
                return Err(DecodeError::TooLarge);
            }
            out
        }
        V2_COOKIE => bytes,
        c => return Err(DecodeError::Payload(format!("cookie {c:#010x}"))),
    };
    if plain.len() < V2_HEADER_BYTES || be_u32(&plain, 0) != V2_COOKIE {
        return Err(DecodeError::Payload("no V2 header".into()));
    }
    let declared = u64::from(be_u32(&plain, 4));
    let present = (plain.len() - V2_HEADER_BYTES) as u64;
    if declared != present {
        return Err(DecodeError::Length {
            what: "payload",
            declared,
            present,
        });
    }
    let (sigfig, low, high) = (be_u32(&plain, 12), be_u64(&plain, 16), be_u64(&plain, 24));
    match counts_len(low, high, sigfig) {
        Some(counts) if counts > HISTOGRAM_COUNTS_MAX => {
            return Err(DecodeError::TooWide {
                low,
                high,
                sigfig,
                counts,
            });
        }
        _ => {}
    }
    Deserializer::new()
        .deserialize(&mut plain.as_slice())
        .map_err(|e| DecodeError::Payload(format!("{e}")))
}

/// The four per-request histograms of one interval (or step), encoded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Encoded4 {
    pub latency: String,
    pub service_time: String,
    pub dispatch_lag: String,
    pub connection_wait: String,
}

impl Encoded4 {
    pub fn of(h: &crate::metrics::Histograms) -> Encoded4 {
        let mut s = V2DeflateSerializer::new();
        Encoded4 {
            latency: encode_with(&mut s, &h.latency),
            service_time: encode_with(&mut s, &h.service),
            dispatch_lag: encode_with(&mut s, &h.dispatch_lag),
            connection_wait: encode_with(&mut s, &h.connection_wait),
        }
    }
}

/// The run's merged histograms as the JSON embeds them (`histograms` key).
#[derive(Debug, Clone, Serialize)]
pub struct Embedded {
    /// Always [`ENCODING`].
    pub encoding: &'static str,
    /// Unit of the recorded values.
    pub unit: &'static str,
    #[serde(flatten)]
    pub main: Encoded4,
    pub connect_time: String,
    pub reconnect_delay: String,
    /// The error replies' latency (`error_latency_ns`).
    pub error_latency: String,
    /// `--tls`: TCP connected -> handshake complete (absent without handshakes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_handshake: Option<String>,
    /// `--server-time`: the server's own time (`server_time.server_time_ns`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_time: Option<String>,
    /// `--server-time`: latency - server time (`server_time.network_queueing_ns`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_queueing: Option<String>,
}

impl Embedded {
    pub fn of(h: &crate::metrics::Histograms) -> Embedded {
        Embedded {
            encoding: ENCODING,
            unit: "ns",
            main: Encoded4::of(h),
            connect_time: encode(&h.connect),
            reconnect_delay: encode(&h.reconnect_delay),
            error_latency: encode(&h.error_latency),
            tls_handshake: (!h.tls_handshake.is_empty()).then(|| encode(&h.tls_handshake)),
            server_time: (!h.server_time.is_empty()).then(|| encode(&h.server_time)),
            network_queueing: (!h.network_queueing.is_empty()).then(|| encode(&h.network_queueing)),
        }
    }
}

/// Serializes the run's [`crate::metrics::Histograms`] as [`Embedded`].
pub fn serialize_embedded<S: serde::Serializer>(
    h: &crate::metrics::Histograms,
    s: S,
) -> Result<S::Ok, S::Error> {
    Embedded::of(h).serialize(s)
}

/// Serializes one histogram as its encoded string.
pub fn serialize_one<S: serde::Serializer>(h: &Histogram<u64>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&encode(h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::HISTOGRAM_NS_MAX;
    use crate::metrics::Histograms;

    #[test]
    fn round_trips_counts_and_percentiles() {
        let mut h = Histograms::new().latency;
        for v in 1..=10_000u64 {
            h.record(v * 1_000).unwrap();
        }
        let s = encode(&h);
        // The compressed V2 cookie, base64: 0x1c849304 -> "HIST".
        assert!(s.starts_with("HISTFAAA"), "{}", &s[..12]);
        let back = decode(&s).unwrap();
        assert_eq!(back.len(), h.len());
        assert_eq!(back.value_at_quantile(0.99), h.value_at_quantile(0.99));
        assert_eq!(back.max(), h.max());
    }

    #[test]
    fn empty_histogram_round_trips() {
        let h = Histograms::new().latency;
        assert_eq!(decode(&encode(&h)).unwrap().len(), 0);
    }

    /// A V2 header (uncompressed) with these fields, then `payload`.
    pub(crate) fn v2(declared: u32, sigfig: u32, low: u64, high: u64, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(V2_COOKIE.to_be_bytes());
        b.extend(declared.to_be_bytes());
        b.extend(0u32.to_be_bytes());
        b.extend(sigfig.to_be_bytes());
        b.extend(low.to_be_bytes());
        b.extend(high.to_be_bytes());
        b.extend(1.0f64.to_be_bytes());
        b.extend(payload);
        b
    }

    /// `plain` deflated and wrapped as the compressed V2 form, base64.
    pub(crate) fn compressed(plain: &[u8]) -> String {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(plain).unwrap();
        let z = z.finish().unwrap();
        let mut b = Vec::new();
        b.extend(V2_COMPRESSED_COOKIE.to_be_bytes());
        b.extend((z.len() as u32).to_be_bytes());
        b.extend(z);
        STANDARD.encode(b)
    }

    #[test]
    fn counts_len_is_the_crates() {
        for (low, high, sigfig) in [
            (1, HISTOGRAM_NS_MAX, 3),
            (1, 2, 0),
            (1000, u64::MAX, 2),
            (7, 1 << 40, 5),
        ] {
            let h = Histogram::<u64>::new_with_bounds(low, high, sigfig as u8).unwrap();
            assert_eq!(
                counts_len(low, high, sigfig),
                Some(h.distinct_values() as u64),
                "{low} {high} {sigfig}"
            );
        }
        assert_eq!(counts_len(1, HISTOGRAM_NS_MAX, 3), Some(33_792));
        assert_eq!(counts_len(0, 10, 3), None);
        assert_eq!(counts_len(1, 10, 6), None);
    }

    #[test]
    fn a_declared_length_the_bytes_do_not_hold_is_refused_before_any_allocation() {
        // 4 GB declared, 10 bytes present, inside a well-formed compressed wrapper.
        let s = compressed(&v2(u32::MAX - 1, 3, 1, HISTOGRAM_NS_MAX, &[0; 10]));
        let e = decode(&s).unwrap_err();
        assert!(
            matches!(e, DecodeError::Length { what: "payload", declared, present: 10 } if declared == u64::from(u32::MAX - 1)),
            "{e}"
        );
        // The outer (compressed) length too.
        let mut b = STANDARD.decode(encode(&Histograms::new().latency)).unwrap();
        b[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        let e = decode(&STANDARD.encode(&b)).unwrap_err();
        assert!(
            matches!(
                e,
                DecodeError::Length {
                    what: "compressed payload",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_deflate_bomb_stops_at_the_bound() {
        // 64 MiB of zeros behind a header that declares exactly them: a consistent
        // histogram except for its size.
        let n = 64 << 20;
        let s = compressed(&v2(n as u32, 3, 1, HISTOGRAM_NS_MAX, &vec![0; n]));
        assert!(s.len() < 1 << 20, "the bomb is small: {}", s.len());
        assert!(matches!(decode(&s), Err(DecodeError::TooLarge)));
    }

    #[test]
    fn bounds_needing_too_many_counts_are_refused() {
        let s = compressed(&v2(0, 5, 1, u64::MAX, &[]));
        assert!(
            matches!(decode(&s), Err(DecodeError::TooWide { counts, .. }) if counts > HISTOGRAM_COUNTS_MAX)
        );
        // The widest accepted: 4 digits over the u64 range decodes.
        assert!(decode(&compressed(&v2(0, 4, 1, u64::MAX, &[]))).is_ok());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(
            decode("not base64 !"),
            Err(DecodeError::Base64(_))
        ));
        assert!(matches!(decode("aGVsbG8="), Err(DecodeError::Payload(_))));
    }
}
