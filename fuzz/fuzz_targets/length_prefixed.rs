//! `length-prefixed:...`: field width and order, offset (0 to 7) and adjust (-8 to 7)
//! from the front of the input.
#![no_main]
use blaster::proto::{LengthField, LengthPrefixSpec, LengthPrefixed};
use blaster_fuzz::{Input, drive};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let field =
        [LengthField::U16Be, LengthField::U32Be, LengthField::U32Le][input.byte() as usize % 3];
    let offset = input.byte() as usize % 8;
    let adjust = (input.byte() % 16) as i64 - 8;
    let max = input.max_response();
    let seed = input.byte();
    let spec = LengthPrefixSpec {
        field,
        offset,
        adjust,
    };
    drive(|| LengthPrefixed::new(spec, max), input.rest(), seed);
});
