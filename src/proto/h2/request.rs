//! An HTTP/1.1 request as `--http` templates render it, sent as HTTP/2: the request
//! line and headers become one HPACK header block (`:method`, `:scheme`, `:authority`
//! from `Host`, `:path`, then the other headers with their names lowercased), the body
//! DATA frames (the engine sends them as the send windows allow). The same templates, placeholders and `--mix` entries serve both
//! protocols; a request whose bytes never change is converted once at start, a
//! templated one per request into buffers sized at start (no allocation: the block's
//! `Vec` keeps its capacity).

use super::frame::{FRAME_HEADER_BYTES, headers_len, write_data, write_headers};
use super::hpack::put_field;
use std::ops::Range;

/// Longest header name converted (a name is lowercased on the stack).
const NAME_MAX: usize = 256;

/// Headers of an HTTP/1.1 connection that HTTP/2 forbids in a request (RFC 9113
/// §8.2.2). `te` is allowed only as `te: trailers`.
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Converts the HTTP/1.1 request in `req` (request line, headers, blank line, body of
/// `Content-Length` bytes) into a header block in `block` (cleared first). Returns
/// where the body lies in `req`. `scheme` is `http` (h2c) or `https` (h2 over TLS).
pub fn block_from_http1(
    req: &[u8],
    scheme: &str,
    block: &mut Vec<u8>,
) -> Result<Range<usize>, &'static str> {
    block.clear();
    let head_end = find(req, b"\r\n\r\n").ok_or("no blank line ends the request's headers")?;
    let head = &req[..head_end];
    let body = head_end + 4..req.len();
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let line = lines.next().ok_or("empty request")?;
    let mut words = line.split(|&b| b == b' ');
    let (Some(method), Some(path), Some(_version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err("the request line is not 'METHOD PATH VERSION'");
    };
    let mut authority: &[u8] = b"";
    for l in lines.clone() {
        if let Some((name, value)) = split_header(l)
            && name.eq_ignore_ascii_case(b"host")
        {
            authority = value;
        }
    }
    put_field(block, ":method", text(method)?);
    put_field(block, ":scheme", scheme);
    put_field(block, ":authority", text(authority)?);
    put_field(block, ":path", text(path)?);
    let mut lower = [0u8; NAME_MAX];
    for l in lines {
        let (name, value) = split_header(l).ok_or("a header line without ':'")?;
        if name.eq_ignore_ascii_case(b"host") {
            continue;
        }
        if name.is_empty() || name.len() > NAME_MAX {
            return Err("a header name is empty or longer than 256 bytes");
        }
        let lower = &mut lower[..name.len()];
        for (d, s) in lower.iter_mut().zip(name) {
            *d = s.to_ascii_lowercase();
        }
        let lower = text(lower)?;
        let value = text(value)?;
        if CONNECTION_SPECIFIC.contains(&lower) || (lower == "te" && value != "trailers") {
            return Err(
                "a connection header (Connection, Keep-Alive, Transfer-Encoding, Upgrade, TE) is not allowed in HTTP/2",
            );
        }
        put_field(block, lower, value);
    }
    Ok(body)
}

fn text(b: &[u8]) -> Result<&str, &'static str> {
    std::str::from_utf8(b).map_err(|_| "a request field is not UTF-8")
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn split_header(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = line.iter().position(|&b| b == b':')?;
    Some((&line[..colon], line[colon + 1..].trim_ascii()))
}

/// Bytes [`write_request`] writes for a block and a body of these lengths.
pub fn request_len(block_len: usize, body_len: usize, max_frame_size: u32) -> usize {
    headers_len(block_len, max_frame_size)
        + if body_len > 0 {
            FRAME_HEADER_BYTES + body_len
        } else {
            0
        }
}

/// One request on `stream`: HEADERS (+ CONTINUATIONs) with END_STREAM when there is
/// no body, else HEADERS then one DATA frame of `first` (the body's first part, or all
/// of it), with END_STREAM when `whole` (the rest goes in later DATA frames). The
/// caller checked that `out` has [`request_len`] bytes, `first` fits the peer's
/// MAX_FRAME_SIZE and the send windows. Returns the bytes written.
pub fn write_request(
    out: &mut [u8],
    stream: u32,
    block: &[u8],
    first: &[u8],
    whole: bool,
    max_frame_size: u32,
) -> usize {
    let h = write_headers(out, stream, block, first.is_empty(), max_frame_size)
        .expect("the caller sized the region");
    if first.is_empty() {
        return h;
    }
    h + write_data(&mut out[h..], stream, first, whole).expect("the caller sized the region")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::h2::decoder::Decoder;
    use crate::proto::h2::{Frame, FrameParsed, Kind, parse_frame};

    fn fields(block: &[u8]) -> Vec<(String, String)> {
        let mut d = Decoder::new(4096);
        let mut out = Vec::new();
        d.decode(block, |n, v| {
            out.push((
                String::from_utf8(n.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            ))
        })
        .unwrap();
        out
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn a_get_becomes_pseudo_headers_and_lowercased_fields() {
        let req = b"GET /a?b=1 HTTP/1.1\r\nX-Trace: 7\r\nHost: example:8080\r\n\r\n";
        let mut block = Vec::new();
        let body = block_from_http1(req, "http", &mut block).unwrap();
        assert!(body.is_empty());
        assert_eq!(
            fields(&block),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":authority", "example:8080"),
                (":path", "/a?b=1"),
                ("x-trace", "7"),
            ])
        );
    }

    #[test]
    fn a_post_keeps_its_body_and_content_length() {
        let req = b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello";
        let mut block = Vec::with_capacity(64);
        let body = block_from_http1(req, "https", &mut block).unwrap();
        assert_eq!(&req[body.clone()], b"hello");
        assert!(fields(&block).contains(&("content-length".into(), "5".into())));
        assert!(fields(&block).contains(&(":scheme".into(), "https".into())));
        let mut out = [0u8; 256];
        let n = write_request(&mut out, 3, &block, &req[body.clone()], true, 16_384);
        assert_eq!(n, request_len(block.len(), 5, 16_384));
        let FrameParsed::Complete { frame: h, consumed } = parse_frame(&out[..n], 16_384) else {
            panic!("HEADERS")
        };
        assert_eq!((h.kind, h.stream, h.has(0x1)), (Kind::Headers, 3, false));
        let rest = &out[consumed..n];
        let FrameParsed::Complete { frame: d, .. } = parse_frame(rest, 16_384) else {
            panic!("DATA")
        };
        let d: Frame = d;
        assert_eq!((d.kind, d.stream, d.has(0x1)), (Kind::Data, 3, true));
        assert_eq!(d.payload(rest), b"hello");
    }

    #[test]
    fn a_get_ends_the_stream_on_its_headers() {
        let req = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n";
        let mut block = Vec::new();
        block_from_http1(req, "http", &mut block).unwrap();
        let mut out = [0u8; 128];
        let n = write_request(&mut out, 1, &block, &[], true, 16_384);
        let FrameParsed::Complete { frame, consumed } = parse_frame(&out[..n], 16_384) else {
            panic!()
        };
        assert!(frame.has(0x1) && consumed == n);
    }

    #[test]
    fn connection_headers_and_malformed_requests_are_refused() {
        let mut block = Vec::new();
        for bad in [
            &b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nTE: gzip\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: h\r\n",
            b"GET /\r\n\r\n",
            b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
        ] {
            assert!(
                block_from_http1(bad, "http", &mut block).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let ok = b"GET / HTTP/1.1\r\nTE: trailers\r\n\r\n";
        assert!(block_from_http1(ok, "http", &mut block).is_ok());
    }

    #[test]
    fn a_block_keeps_its_capacity() {
        let req = b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n";
        let mut block = Vec::with_capacity(256);
        let p = block.as_ptr();
        for _ in 0..3 {
            block_from_http1(req, "http", &mut block).unwrap();
        }
        assert_eq!(block.as_ptr(), p);
    }
}
