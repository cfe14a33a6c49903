//! `frame_ws`: arbitrary server bytes through the `ws` frame adapter: its downlink
//! decoder, or (first parameter byte odd) its join exchange and then the decoder.
#![no_main]
use blaster::proto::frame_proto::FrameProtoKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| blaster_fuzz::fuzz_frame_proto(FrameProtoKind::Ws, data));
