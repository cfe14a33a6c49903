//! Histograms as text: the HdrHistogram V2 *compressed* encoding (the deflated V2
//! payload, cookie `0x1c849304`), base64 — what every HdrHistogram library decodes
//! (Java `Histogram.decodeFromCompressedByteBuffer`, Go, C, Python, JS). The JSON report
//! embeds histograms this way and the interval log (`--hdr-log`) carries the same strings,
//! so a result can be merged, compared or re-plotted at any percentile later.
//!
//! Values are nanoseconds throughout blaster.

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
}

/// Decodes a string [`encode`] (or any HdrHistogram library) produced; the compressed
/// and the plain V2 forms are both accepted.
pub fn decode(s: &str) -> Result<Histogram<u64>, DecodeError> {
    let bytes = STANDARD.decode(s.trim())?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| DecodeError::Payload(format!("{e:?}")))
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

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(
            decode("not base64 !"),
            Err(DecodeError::Base64(_))
        ));
        assert!(matches!(decode("aGVsbG8="), Err(DecodeError::Payload(_))));
    }
}
