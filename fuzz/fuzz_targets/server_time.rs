//! `server_time`: arbitrary bytes as `--server-time` sources, `Server-Timing` values,
//! duration headers and binary reply fields; then as HTTP/1.x responses read with a
//! source. None may panic; a source that parses prints as one that parses back to it.
#![no_main]
use blaster::proto::server_time::{ServerTimeSource, duration_ns, field_ns, server_timing_ns};
use blaster::proto::{Framer, Http1};
use blaster_fuzz::{Input, drive};
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(source) = text.parse::<ServerTimeSource>()
    {
        assert_eq!(source.to_string().parse::<ServerTimeSource>(), Ok(source));
    }
    let _ = server_timing_ns(data, None);
    let _ = server_timing_ns(data, Some(b"app"));
    let _ = duration_ns(data);
    let mut input = Input::new(data);
    let offset = u32::from(input.byte());
    let len = [1, 2, 4, 8][usize::from(input.byte() % 4)];
    let max = input.max_response();
    let seed = input.byte();
    let rest = input.rest();
    let _ = field_ns(rest, offset, len, 1_000);
    let source = Arc::new(ServerTimeSource::ServerTiming { metric: None });
    drive(
        || {
            let mut f = Http1::new(max);
            f.read_server_time(source.clone());
            f
        },
        rest,
        seed,
    );
    let _ = Http1::new(max).server_time_ns();
});
