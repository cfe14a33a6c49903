//! `frame_grpc`: arbitrary server bytes through the `grpc` frame adapter: its downlink
//! decoder after a one-member join, or (first parameter byte odd) its join exchange and
//! then the decoder.
#![no_main]
use blaster::proto::frame_proto::FrameProtoKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| blaster_fuzz::fuzz_frame_proto(FrameProtoKind::Grpc, data));
