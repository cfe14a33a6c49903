//! The `/metrics` request reader (src/report/export/metrics_request.rs): any bytes, as a
//! hostile client may send them. The first byte picks the head bound (small ones reach
//! `TooLarge`) and a split point; the rest is the stream. Checked on every input:
//!
//! - a `Complete` consumes at least one byte, at most the input and at most the bound;
//!   a `400` always closes; at end of stream anything but blank lines is `Complete`;
//! - splitting changes nothing: every prefix shorter than the first head is
//!   `Incomplete`, and every prefix that holds it parses to the same `Complete`;
//! - reading pipelined requests one after another always ends, within the input.
#![no_main]
use blaster::limits::METRICS_REQUEST_BYTES_MAX;
use blaster::report::export::metrics_request::{Answer, Parsed, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&param, stream)) = data.split_first() else {
        return;
    };
    let max = if param & 1 == 1 {
        16 + param as usize
    } else {
        METRICS_REQUEST_BYTES_MAX
    };
    let window = &stream[..stream.len().min(max)];
    let whole = parse(window, max, false);
    if let Parsed::Complete { answer, len, close } = whole {
        assert!(len > 0 && len <= window.len() && len <= max, "len {len}");
        assert!(
            answer != Answer::BadRequest || close,
            "a 400 keeps the connection"
        );
        let split = (param as usize * 7) % (window.len() + 1);
        let expect = if split < len {
            Parsed::Incomplete
        } else {
            whole
        };
        assert_eq!(
            parse(&window[..split], max, false),
            expect,
            "split at {split}"
        );
    }
    let blank = window.iter().all(|&b| b == b'\r' || b == b'\n');
    match parse(window, max, true) {
        Parsed::Complete { len, .. } => assert!(!blank && len <= window.len()),
        Parsed::Incomplete => assert!(blank, "a non-blank head at end of stream"),
        Parsed::TooLarge => assert!(window.len() >= max || whole == Parsed::TooLarge),
    }
    // The server's loop: answer the front request, drop it, look again.
    let mut rest = window;
    while let Parsed::Complete { len, close, .. } = parse(rest, max, false) {
        rest = &rest[len..];
        if close {
            break;
        }
    }
});
