//! `http1`: arbitrary bytes as HTTP/1.x responses. Seed the corpus with real responses
//! (src/proto/fixtures/*.http) to get past the status line quickly.
#![no_main]
use blaster::proto::Http1;
use blaster_fuzz::{Input, drive};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let max = input.max_response();
    let seed = input.byte();
    drive(|| Http1::new(max), input.rest(), seed);
});
