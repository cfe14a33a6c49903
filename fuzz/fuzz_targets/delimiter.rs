//! `delimiter:BYTES`: a delimiter of 1 to 8 bytes from the front of the input, over a
//! stream whose bytes are folded onto a small alphabet half the time, so partial
//! matches (the KMP fall-back) are common.
#![no_main]
use blaster::proto::{Delimited, DelimiterSpec};
use blaster_fuzz::{Input, drive};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let len = 1 + input.byte() as usize % 8;
    let fold = input.byte() % 2 == 1;
    let max = input.max_response();
    let seed = input.byte();
    let fold = |b: u8| if fold { b'a' + b % 3 } else { b };
    let delimiter: Vec<u8> = (0..len).map(|_| fold(input.byte())).collect();
    let stream: Vec<u8> = input.rest().iter().map(|&b| fold(b)).collect();
    let spec = DelimiterSpec::new(&delimiter).expect("1 to 8 bytes");
    drive(|| Delimited::new(&spec, max), &stream, seed);
});
