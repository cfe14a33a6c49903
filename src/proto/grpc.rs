//! gRPC over HTTP/2 (the wire spec, PROTOCOL-HTTP2.md): a unary call is a POST to
//! `/SERVICE/METHOD` with `content-type: application/grpc` and `te: trailers`, its
//! body one length-prefixed message (a compressed flag byte, a 4-byte big-endian
//! length, the message), and its outcome the `grpc-status` of the trailers; a
//! response without one is judged by its HTTP status.

/// The status codes (index = code), as the report names them.
pub const CODE_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// UNKNOWN: what a code outside the table, or a response without `grpc-status`
/// whose HTTP status maps to nothing else, counts as.
pub const UNKNOWN: u32 = 2;

/// The code of a response that ended without `grpc-status`, from its HTTP status (the
/// spec's http-grpc-status-mapping): 200 without trailers is UNKNOWN too.
pub fn code_of_http(status: u16) -> u32 {
    match status {
        400 => 13,             // INTERNAL
        401 => 16,             // UNAUTHENTICATED
        403 => 7,              // PERMISSION_DENIED
        404 => 12,             // UNIMPLEMENTED
        429 | 502..=504 => 14, // UNAVAILABLE
        _ => UNKNOWN,
    }
}

/// The name of `code` (`UNKNOWN` for a code outside the table).
pub fn code_name(code: u32) -> &'static str {
    CODE_NAMES.get(code as usize).copied().unwrap_or("UNKNOWN")
}

/// The `grpc-timeout` value for a deadline of `ns` (at most 8 digits and a unit,
/// rounded up so the server's deadline is never shorter than the client's).
pub fn timeout_value(ns: u64) -> String {
    const UNITS: [(u64, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    for (scale, unit) in UNITS {
        let n = ns.div_ceil(scale);
        if n < 100_000_000 {
            return format!("{n}{unit}");
        }
    }
    "99999999H".into()
}

/// `message` with its 5-byte prefix: not compressed, its length big-endian.
pub fn length_prefixed(message: &[u8]) -> Result<Vec<u8>, String> {
    let len = u32::try_from(message.len()).map_err(|_| "a gRPC message is at most 4 GiB")?;
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(message);
    Ok(out)
}

/// Checks `SERVICE/METHOD` (a leading `/` allowed) and returns the request path.
pub fn path(method: &str) -> Result<String, String> {
    let m = method.strip_prefix('/').unwrap_or(method);
    let ok = m.split_once('/').is_some_and(|(service, name)| {
        !service.is_empty()
            && !name.is_empty()
            && !name.contains('/')
            && m.bytes()
                .all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#')
    });
    if !ok {
        return Err(format!(
            "expected SERVICE/METHOD such as helloworld.Greeter/SayHello, got {method:?}"
        ));
    }
    Ok(format!("/{m}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_fit_eight_digits_and_never_shrink() {
        assert_eq!(timeout_value(5_000_000_000), "5000000u");
        assert_eq!(timeout_value(1), "1n");
        assert_eq!(timeout_value(99_999_999), "99999999n");
        assert_eq!(timeout_value(100_000_000), "100000u");
        assert_eq!(timeout_value(100_000_001), "100001u");
        assert_eq!(timeout_value(3_600_000_000_000), "3600000m");
        assert_eq!(timeout_value(u64::MAX), "5124096H");
    }

    #[test]
    fn a_message_gets_its_five_byte_prefix() {
        assert_eq!(length_prefixed(b"hi").unwrap(), [0, 0, 0, 0, 2, b'h', b'i']);
        assert_eq!(length_prefixed(b"").unwrap(), [0, 0, 0, 0, 0]);
    }

    #[test]
    fn methods_are_service_slash_name() {
        assert_eq!(
            path("helloworld.Greeter/SayHello").unwrap(),
            "/helloworld.Greeter/SayHello"
        );
        assert_eq!(path("/a.B/C").unwrap(), "/a.B/C");
        for bad in ["", "Greeter", "/x/", "a/b/c", "a b/c", "a/b?x"] {
            assert!(path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn codes_are_named_and_http_statuses_mapped() {
        assert_eq!(code_name(0), "OK");
        assert_eq!(code_name(14), "UNAVAILABLE");
        assert_eq!(code_name(99), "UNKNOWN");
        assert_eq!(code_name(code_of_http(503)), "UNAVAILABLE");
        assert_eq!(code_name(code_of_http(404)), "UNIMPLEMENTED");
        assert_eq!(code_name(code_of_http(200)), "UNKNOWN");
    }
}
