//! HPACK (RFC 7541) for a client that sends the same request many times.
//!
//! Encoding: [`encode_request_headers`] builds a request's header block once per
//! template. It uses only representations that leave the peer's dynamic table alone
//! — an indexed field for an exact static-table match (§6.1), otherwise a literal
//! without indexing (§6.2.2), with the name indexed from the static table when it is
//! there — and no Huffman coding. The block therefore depends on no encoder state:
//! the same bytes are valid on every stream of every connection, whatever the peer's
//! HEADER_TABLE_SIZE, and sending them is a copy.
//!
//! Decoding: the peer's responses may use its dynamic table, so decoding needs state
//! that lasts as long as the connection; [`Connection`] keeps a [`Decoder`] (this
//! crate's: bounded table, no allocation per block) and [`decode`] runs one header
//! block through it, handing each field to a callback without collecting them.
//!
//! [`Connection`]: super::Connection
use super::decoder::Decoder;
use super::{ErrorCode, H2Error};

/// The static table (RFC 7541 Appendix A): index i + 1 is `STATIC[i]`.
pub(super) const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// Headers HTTP/2 forbids in a request (RFC 9113 §8.2.2): they describe an HTTP/1.1
/// connection, and a peer must treat a request carrying them as malformed.
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// An integer with an N-bit prefix (§5.1); `first` holds the representation's
/// pattern bits above the prefix.
fn put_int(out: &mut Vec<u8>, first: u8, prefix_bits: u32, mut value: usize) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A string literal without Huffman coding (§5.2).
fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// One field: indexed when the static table has it exactly, else a literal without
/// indexing (pattern 0000, 4-bit name index, 0 for a literal name).
pub(super) fn put_field(out: &mut Vec<u8>, name: &str, value: &str) {
    if let Some(i) = STATIC
        .iter()
        .position(|&(n, v)| n == name && v == value && !v.is_empty())
    {
        put_int(out, 0x80, 7, i + 1);
        return;
    }
    match STATIC.iter().position(|&(n, _)| n == name) {
        Some(i) => put_int(out, 0x00, 4, i + 1),
        None => {
            out.push(0x00);
            put_str(out, name.as_bytes());
        }
    }
    put_str(out, value.as_bytes());
}

/// The header block of a request, built once per template: the four pseudo-headers
/// first (RFC 9113 §8.3.1), then `extra` with names lowercased. Refuses what HTTP/2
/// forbids: an empty method, scheme or path, a header name that is empty, a
/// pseudo-header, connection-specific (`connection`, `transfer-encoding`, ...), or
/// `te` with a value other than `trailers`; and a name or value holding CR, LF or NUL.
pub fn encode_request_headers(
    method: &str,
    scheme: &str,
    authority: &str,
    path: &str,
    extra: &[(&str, &str)],
) -> Result<Vec<u8>, String> {
    for (what, v) in [("method", method), ("scheme", scheme), ("path", path)] {
        if v.is_empty() {
            return Err(format!("HTTP/2 request: empty {what}"));
        }
    }
    let bad = |s: &str| s.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0));
    for (what, v) in [
        ("method", method),
        ("scheme", scheme),
        ("authority", authority),
        ("path", path),
    ] {
        if bad(v) {
            return Err(format!("HTTP/2 request: CR, LF or NUL in the {what}"));
        }
    }
    let mut out = Vec::with_capacity(
        64 + authority.len()
            + path.len()
            + extra
                .iter()
                .map(|(n, v)| n.len() + v.len() + 4)
                .sum::<usize>(),
    );
    put_field(&mut out, ":method", method);
    put_field(&mut out, ":scheme", scheme);
    put_field(&mut out, ":authority", authority);
    put_field(&mut out, ":path", path);
    for &(name, value) in extra {
        let lower = name.to_ascii_lowercase();
        if lower.is_empty() || lower.starts_with(':') {
            return Err(format!(
                "HTTP/2 request: header name {name:?} is not allowed"
            ));
        }
        if CONNECTION_SPECIFIC.contains(&lower.as_str()) || (lower == "te" && value != "trailers") {
            return Err(format!(
                "HTTP/2 request: {name:?} is an HTTP/1.1 connection header, not allowed in HTTP/2"
            ));
        }
        if bad(&lower) || bad(value) {
            return Err(format!("HTTP/2 request: CR, LF or NUL in header {name:?}"));
        }
        put_field(&mut out, &lower, value);
    }
    Ok(out)
}

/// Appends `fields` to a header block with the same stateless representations as
/// [`encode_request_headers`] (static-table index or literal without indexing, no
/// Huffman): what the sink's HTTP/2 server answers with. Names must already be
/// lowercase and free of CR, LF and NUL, as the server's own fixed names are.
pub fn encode_fields(out: &mut Vec<u8>, fields: &[(&str, &str)]) {
    for &(name, value) in fields {
        debug_assert!(!name.bytes().any(|b| b.is_ascii_uppercase()), "{name}");
        put_field(out, name, value);
    }
}

/// What a response header block said that the engine counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// `:status`, when present and three digits.
    pub status: Option<u16>,
    /// `grpc-status` (in trailers, or a trailers-only response), when a number.
    pub grpc_status: Option<u32>,
}

/// Decodes one whole header block (HEADERS plus its CONTINUATIONs) through the
/// connection's decoder, handing every field to `each`; a malformed block is a
/// COMPRESSION_ERROR (RFC 9113 §4.3), which ends the connection since the decoder's
/// table can no longer be trusted.
pub fn decode(
    decoder: &mut Decoder,
    block: &[u8],
    mut each: impl FnMut(&[u8], &[u8]),
) -> Result<Summary, H2Error> {
    let mut summary = Summary::default();
    decoder
        .decode(block, |name, value| {
            match name {
                b":status" => summary.status = three_digits(value),
                b"grpc-status" => {
                    summary.grpc_status =
                        std::str::from_utf8(value).ok().and_then(|s| s.parse().ok())
                }
                _ => {}
            }
            each(name, value);
        })
        .map_err(|_| H2Error::new(ErrorCode::COMPRESSION_ERROR, "malformed HPACK header block"))?;
    Ok(summary)
}

fn three_digits(v: &[u8]) -> Option<u16> {
    match v {
        [a @ b'1'..=b'9', b @ b'0'..=b'9', c @ b'0'..=b'9'] => {
            Some((a - b'0') as u16 * 100 + (b - b'0') as u16 * 10 + (c - b'0') as u16)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    type Fields = Vec<(String, String)>;

    fn run(d: &mut Decoder, block: &[u8]) -> (Summary, Fields) {
        let mut fields = Vec::new();
        let s = decode(d, block, |n, v| {
            fields.push((
                String::from_utf8(n.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            ))
        })
        .unwrap();
        (s, fields)
    }

    fn f(pairs: &[(&str, &str)]) -> Fields {
        pairs.iter().map(|&(n, v)| (n.into(), v.into())).collect()
    }

    /// RFC 7541 C.3 (requests without Huffman) and C.4 (the same with Huffman): three
    /// requests on one connection, the later ones indexing the dynamic table.
    #[test]
    fn rfc7541_c3_c4_requests() {
        let want = [
            f(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ]),
            f(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache"),
            ]),
            f(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ]),
        ];
        let c3 = [
            "828684410f7777772e6578616d706c652e636f6d",
            "828684be58086e6f2d6361636865",
            "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
        ];
        let c4 = [
            "828684418cf1e3c2e5f23a6ba0ab90f4ff",
            "828684be5886a8eb10649cbf",
            "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
        ];
        for blocks in [c3, c4] {
            let mut d = Decoder::new(4096);
            for (block, want) in blocks.iter().zip(&want) {
                let (s, got) = run(&mut d, &hex(block));
                assert_eq!(&got, want);
                assert_eq!(s, Summary::default());
            }
        }
    }

    /// RFC 7541 C.5 (responses without Huffman) and C.6 (with), a 256-byte table: the
    /// third response evicts entries, so a decoder that sizes its table wrong fails.
    #[test]
    fn rfc7541_c5_c6_responses() {
        let date1 = ("date", "Mon, 21 Oct 2013 20:13:21 GMT");
        let loc = ("location", "https://www.example.com");
        let want = [
            f(&[(":status", "302"), ("cache-control", "private"), date1, loc]),
            f(&[(":status", "307"), ("cache-control", "private"), date1, loc]),
            f(&[
                (":status", "200"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
                loc,
                ("content-encoding", "gzip"),
                (
                    "set-cookie",
                    "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
                ),
            ]),
        ];
        let c5 = [
            "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a323120474d54\
             6e1768747470733a2f2f7777772e6578616d706c652e636f6d",
            "4803333037c1c0bf",
            "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69707738666f6f\
             3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d6167653d333630303b2076\
             657273696f6e3d31",
        ];
        let c6 = [
            "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f\
             0b97c8e9ae82ae43d3",
            "4883640effc1c0bf",
            "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335df\
             dfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
        ];
        for blocks in [c5, c6] {
            let mut d = Decoder::new(4096);
            d.set_max_table_size(256);
            for ((block, want), status) in blocks.iter().zip(&want).zip([302, 307, 200]) {
                let (s, got) = run(&mut d, &hex(block));
                assert_eq!(&got, want);
                assert_eq!(s.status, Some(status));
            }
        }
    }

    #[test]
    fn request_block_matches_the_rfc_and_decodes_back() {
        // C.2.2: ":path: /sample/path" as a literal without indexing, indexed name.
        let mut out = Vec::new();
        put_field(&mut out, ":path", "/sample/path");
        assert_eq!(out, hex("040c2f73616d706c652f70617468"));
        // C.2.4: ":method: GET" is static entry 2.
        out.clear();
        put_field(&mut out, ":method", "GET");
        assert_eq!(out, [0x82]);

        let block = encode_request_headers(
            "POST",
            "https",
            "example.com:8443",
            "/helloworld.Greeter/SayHello",
            &[
                ("Content-Type", "application/grpc"),
                ("te", "trailers"),
                ("x-room", "42"),
            ],
        )
        .unwrap();
        // Literal without indexing leaves the decoder's dynamic table empty, so a
        // second decode of the same bytes on the same decoder gives the same fields.
        let mut d = Decoder::new(4096);
        let first = run(&mut d, &block).1;
        assert_eq!(run(&mut d, &block).1, first);
        assert_eq!(
            first,
            f(&[
                (":method", "POST"),
                (":scheme", "https"),
                (":authority", "example.com:8443"),
                (":path", "/helloworld.Greeter/SayHello"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("x-room", "42"),
            ])
        );
        // No byte of the block uses incremental indexing (01xxxxxx).
        let mut d2 = Decoder::new(4096);
        d2.set_max_table_size(0);
        assert_eq!(run(&mut d2, &block).1, first);
    }

    #[test]
    fn the_static_table_is_the_rfcs() {
        // The decoder's own copy of Appendix A is the reference: index i is STATIC[i-1].
        let mut d = Decoder::new(4096);
        for (i, &(name, value)) in STATIC.iter().enumerate() {
            let got = run(&mut d, &[0x80 | (i as u8 + 1)]).1;
            assert_eq!(got, f(&[(name, value)]), "index {}", i + 1);
        }
    }

    #[test]
    fn long_values_use_multi_byte_lengths() {
        let long = "v".repeat(300);
        let block = encode_request_headers("GET", "http", "h", "/", &[("x-long", &long)]).unwrap();
        let fields = run(&mut Decoder::new(4096), &block).1;
        assert_eq!(fields[4], ("x-long".into(), long));
    }

    #[test]
    fn forbidden_request_headers_are_refused() {
        let e = |extra: &[(&str, &str)]| {
            encode_request_headers("GET", "http", "h", "/", extra).unwrap_err()
        };
        assert!(e(&[("Connection", "keep-alive")]).contains("connection header"));
        assert!(e(&[("transfer-encoding", "chunked")]).contains("connection header"));
        assert!(e(&[("te", "gzip")]).contains("connection header"));
        assert!(e(&[(":path", "/x")]).contains("not allowed"));
        assert!(e(&[("x", "a\r\nb")]).contains("CR, LF"));
        assert!(encode_request_headers("", "http", "h", "/", &[]).is_err());
        // Checked without extra headers too.
        let e = encode_request_headers("GET", "http", "h", "/a\r\nx: y", &[]).unwrap_err();
        assert!(e.contains("in the path"), "{e}");
    }

    #[test]
    fn summary_reads_status_and_grpc_status() {
        let mut block = Vec::new();
        put_field(&mut block, ":status", "503");
        put_field(&mut block, "grpc-status", "14");
        let (s, _) = run(&mut Decoder::new(4096), &block);
        assert_eq!(
            s,
            Summary {
                status: Some(503),
                grpc_status: Some(14)
            }
        );
        assert_eq!(three_digits(b"099"), None);
        assert_eq!(three_digits(b"2000"), None);
    }

    #[test]
    fn a_malformed_block_is_a_compression_error() {
        let mut d = Decoder::new(4096);
        // Index 70 is past the static table with an empty dynamic table.
        let e = decode(&mut d, &[0x80 | 70], |_, _| {}).unwrap_err();
        assert_eq!(e.code, ErrorCode::COMPRESSION_ERROR);
        // A string announced longer than the block.
        assert!(decode(&mut d, &[0x00, 0x05, b'a'], |_, _| {}).is_err());
    }
}
