//! `frame_mqtt`: arbitrary server bytes through the `mqtt` frame adapter: its downlink
//! decoder, or (first parameter byte odd) its join exchange and then the decoder.
#![no_main]
use blaster::proto::frame_proto::{
    FrameProtoKind, FrameSpec, Role, TOPIC_DEFAULT, WS_PATH_DEFAULT,
};
use blaster_fuzz::{Input, drive_frames};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let join = input.byte() & 1 == 1;
    let role = Role::Both;
    let size = [32, 100, 300][input.byte() as usize % 3];
    let seed = input.byte();
    let spec = FrameSpec::new(
        FrameProtoKind::Mqtt,
        TOPIC_DEFAULT,
        WS_PATH_DEFAULT,
        "h:1",
        size,
    )
    .expect("a valid spec");
    drive_frames(&spec, role, join, input.rest(), seed);
});
