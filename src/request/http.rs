//! HTTP/1.1 requests from `--http 'GET /path'`, `-H 'Name: value'` and `--body`:
//! rendered once at start into a template (placeholders allowed in the path and the
//! headers; the body must keep one length so Content-Length is right).

use super::template::Template;

/// Splits a `-H` header into its name and value, refusing what would not be one header
/// line: no `:`, a bad name, Content-Length (filled in from the body), or a CR, LF or
/// NUL anywhere (a line break would end the header early and smuggle in another).
pub fn check_header(h: &str) -> Result<(&str, &str), String> {
    if h.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
        return Err(format!(
            "a header may not hold a CR, LF or NUL (it would split the request), got {h:?}"
        ));
    }
    let (name, value) = h
        .split_once(':')
        .ok_or_else(|| format!("header must be 'Name: value', got {h:?}"))?;
    let name = name.trim();
    if name.is_empty() || name.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!("bad header name in {h:?}"));
    }
    if name.eq_ignore_ascii_case("content-length") {
        return Err("Content-Length is filled in from the body; do not set it".into());
    }
    Ok((name, value))
}

/// `METHOD /path` checked: upper-case letters, then a path starting with `/` (or `*`,
/// or an absolute `http...` form), nothing after.
pub fn request_line(spec: &str) -> Result<(&str, &str), String> {
    let mut parts = spec.split_whitespace();
    let (method, path) = match (parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(p), None) => (m, p),
        _ => return Err(format!("expected 'METHOD /path', got {spec:?}")),
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!("method must be upper-case letters, got {method:?}"));
    }
    if !path.starts_with('/') && path != "*" && !path.starts_with("http") {
        return Err(format!("path must start with /, got {path:?}"));
    }
    Ok((method, path))
}

/// Builds the request template. `host` fills the Host header unless `headers` has one.
pub fn request(
    spec: &str,
    headers: &[String],
    body: Option<&[u8]>,
    host: &str,
) -> Result<Template, String> {
    let (method, path) = request_line(spec)?;
    let mut text = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    let mut has_host = false;
    for h in headers {
        let (name, value) = check_header(h)?;
        has_host |= name.eq_ignore_ascii_case("host");
        text.extend_from_slice(format!("{name}: {}\r\n", value.trim()).as_bytes());
    }
    if !has_host {
        text.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
    }
    if let Some(body) = body {
        let t = Template::parse(body).map_err(|e| format!("body: {e}"))?;
        if !t.is_fixed_len() {
            return Err(
                "body placeholders {seq}, {conn}, {worker} and {time_ns} change its length; \
                 use {rand:N} in the body, or put them in the path or a header"
                    .into(),
            );
        }
        text.extend_from_slice(format!("Content-Length: {}\r\n\r\n", t.max_len()).as_bytes());
        text.extend_from_slice(body);
    } else {
        text.extend_from_slice(b"\r\n");
    }
    // Headers were checked as text; placeholders in path and headers are honoured too.
    Template::parse(&text)
}

/// A gRPC unary call to `method` (`SERVICE/METHOD`) carrying `message` (the
/// serialized request, sent as it is), as the HTTP/1.1 form `--http2` converts: a POST
/// with gRPC's headers, `grpc-timeout` from `timeout_ns`, the `-H` headers as
/// metadata (placeholders allowed there), and the length-prefixed message as body.
pub fn grpc_request(
    method: &str,
    headers: &[String],
    message: &[u8],
    host: &str,
    timeout_ns: u64,
) -> Result<Template, String> {
    grpc_request_drawn(method, headers, message, &[], host, timeout_ns)
}

/// [`grpc_request`] whose message has `rand` ranges drawn afresh per request
/// (`{rand:N}` placeholders of `--grpc-json`, sorted, apart).
pub fn grpc_request_drawn(
    method: &str,
    headers: &[String],
    message: &[u8],
    rand: &[std::ops::Range<usize>],
    host: &str,
    timeout_ns: u64,
) -> Result<Template, String> {
    use crate::proto::grpc;
    let path = grpc::path(method)?;
    let body = grpc::length_prefixed(message)?;
    let mut text = format!(
        "POST {path} HTTP/1.1\r\ncontent-type: application/grpc\r\nte: trailers\r\n\
         grpc-timeout: {}\r\n",
        grpc::timeout_value(timeout_ns)
    );
    let mut has_host = false;
    for h in headers {
        let (name, value) = check_header(h)?;
        has_host |= name.eq_ignore_ascii_case("host");
        text.push_str(&format!("{name}: {}\r\n", value.trim()));
    }
    if !has_host {
        text.push_str(&format!("Host: {host}\r\n"));
    }
    text.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    // The message follows the 5-byte prefix: its drawn ranges shift by 5.
    let mut t = Template::parse(text.as_bytes())?;
    let mut at = 0;
    for r in rand.iter().map(|r| r.start + 5..r.end + 5) {
        t = t.then_literal(&body[at..r.start]).then_rand(r.len());
        at = r.end;
    }
    Ok(t.then_literal(&body[at..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_call_keeps_its_binary_message_as_is() {
        // Braces in a binary message are bytes, not placeholders.
        let t = grpc_request(
            "a.B/C",
            &["x-room: {seq}".into()],
            b"{x}",
            "h:1",
            2_000_000_000,
        )
        .unwrap();
        let mut out = vec![0u8; t.max_len()];
        let ctx = super::super::Ctx {
            seq: 7,
            ..Default::default()
        };
        let n = t.render(&ctx, &mut fastrand::Rng::with_seed(1), &mut out);
        let text = String::from_utf8_lossy(&out[..n]).into_owned();
        assert!(text.starts_with("POST /a.B/C HTTP/1.1\r\n"), "{text}");
        assert!(text.contains("grpc-timeout: 2000000u\r\n"), "{text}");
        assert!(text.contains("x-room: 7\r\n"), "{text}");
        assert!(text.contains("Content-Length: 8\r\n"), "{text}");
        assert!(
            out[..n].ends_with(&[0, 0, 0, 0, 3, b'{', b'x', b'}']),
            "{text}"
        );
        assert!(grpc_request("nope", &[], b"", "h", 1).is_err());
    }

    #[test]
    fn get_with_host_and_headers() {
        let t = request(
            "GET /index.html",
            &["Accept: */*".into()],
            None,
            "127.0.0.1:8080",
        )
        .unwrap();
        assert_eq!(
            t.static_bytes(),
            b"GET /index.html HTTP/1.1\r\nAccept: */*\r\nHost: 127.0.0.1:8080\r\n\r\n"
        );
    }

    #[test]
    fn post_fills_content_length_and_keeps_a_given_host() {
        let t = request(
            "POST /api",
            &["host: example".into()],
            Some(b"{{\"a\":1}}"),
            "h",
        )
        .unwrap();
        let s = String::from_utf8(t.static_bytes().to_vec()).unwrap();
        assert!(
            s.contains("host: example\r\n") && !s.contains("Host: h"),
            "{s}"
        );
        assert!(s.ends_with("Content-Length: 7\r\n\r\n{\"a\":1}"), "{s}");
    }

    #[test]
    fn bad_specs_are_rejected() {
        assert!(request("GET", &[], None, "h").is_err());
        assert!(request("get /", &[], None, "h").is_err());
        assert!(request("GET nopath", &[], None, "h").is_err());
        assert!(request("GET /", &["NoColon".into()], None, "h").is_err());
        assert!(request("GET /", &["Content-Length: 3".into()], None, "h").is_err());
        // A line break in a header would smuggle in another header (issue 25).
        for h in ["X: a\r\nEvil: b", "X: a\nb", "X\r: a", "X: a\0"] {
            let e = request("GET /", &[h.into()], None, "h").unwrap_err();
            assert!(e.contains("CR, LF or NUL"), "{h:?}: {e}");
        }
        assert!(request("POST /", &[], Some(b"{seq}"), "h").is_err());
    }

    #[test]
    fn path_placeholders_render() {
        let t = request("GET /item/{seq}", &[], None, "h").unwrap();
        assert!(!t.is_static());
        let ctx = crate::request::Ctx {
            seq: 42,
            ..Default::default()
        };
        let mut out = vec![0u8; t.max_len()];
        let n = t.render(&ctx, &mut fastrand::Rng::with_seed(1), &mut out);
        assert_eq!(&out[..n], b"GET /item/42 HTTP/1.1\r\nHost: h\r\n\r\n");
    }
}
