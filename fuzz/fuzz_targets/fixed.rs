//! `fixed:N` (and `echo`, the same framer): N from the first byte.
#![no_main]
use blaster::proto::FixedLength;
use blaster_fuzz::{Input, drive};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let len = 1 + input.byte() as usize % 64;
    let max = input.max_response();
    let seed = input.byte();
    drive(|| FixedLength::new(len, max), input.rest(), seed);
});
