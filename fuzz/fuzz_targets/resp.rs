//! `resp`: arbitrary bytes as RESP2 replies.
#![no_main]
use blaster::proto::Resp;
use blaster_fuzz::{Input, drive};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let max = input.max_response();
    let seed = input.byte();
    drive(|| Resp::new(max), input.rest(), seed);
});
