//! `memcached`: arbitrary bytes as memcached text-protocol replies.
#![no_main]
use blaster::proto::Memcached;
use blaster_fuzz::{Input, drive};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let max = input.max_response();
    let seed = input.byte();
    drive(|| Memcached::new(max), input.rest(), seed);
});
