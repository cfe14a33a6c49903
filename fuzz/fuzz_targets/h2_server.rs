//! `h2_server`: arbitrary client bytes through the sink's HTTP/2 server connection
//! (src/proto/h2/server.rs) after a valid preface, fed in pieces of a size a parameter
//! byte picks: frames, SETTINGS, flow control both ways, HPACK decoding, CONTINUATION,
//! stream limits and the replies (plain and gRPC). Never panics; checks that the bytes
//! consumed are never more than given, that everything the server writes is whole
//! frames no larger than the client's MAX_FRAME_SIZE, and that no more streams are open
//! than the server allows.
#![no_main]
use blaster::proto::h2::frame::{FrameParsed, parse_frame};
use blaster::proto::h2::server::{Answer, ServerConn, ServerSettings};
use blaster::proto::h2::{FRAME_SIZE_MAX, PREFACE};
use blaster_fuzz::Input;
use libfuzzer_sys::fuzz_target;

fn check_output(c: &mut ServerConn) {
    let out = c.output().to_vec();
    let max = c.peer().max_frame_size as usize;
    let mut at = 0;
    while at < out.len() {
        match parse_frame(&out[at..], FRAME_SIZE_MAX) {
            FrameParsed::Complete { frame, consumed } => {
                assert!(frame.length as usize <= max, "a frame above the client's MAX_FRAME_SIZE");
                at += consumed;
            }
            other => panic!("the server wrote {other:?} at {at}"),
        }
    }
    c.written(out.len());
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let p = input.byte();
    let piece = 1 + input.byte() as usize;
    let local = ServerSettings {
        max_concurrent_streams: 1 + (p & 3) as u32,
        initial_window_size: [65_535, 1 << 20][((p >> 2) & 1) as usize],
        connection_window: [65_535, 1 << 24][((p >> 3) & 1) as usize],
        header_block_bytes_max: [64, 64 << 10][((p >> 4) & 1) as usize],
        body_bytes_max: [16, 1 << 20][((p >> 5) & 1) as usize],
        ..ServerSettings::default()
    };
    let answer = if p & 0x40 != 0 {
        Answer::Echo
    } else {
        Answer::Fixed(1 + (p >> 7) as usize * 70_000)
    };
    let mut c = ServerConn::new(local, answer);
    let mut stream = PREFACE.to_vec();
    stream.extend_from_slice(input.rest());
    let mut pending = Vec::new();
    for chunk in stream.chunks(piece) {
        pending.extend_from_slice(chunk);
        let r = c.receive(&pending);
        check_output(&mut c);
        match r {
            Ok(n) => {
                assert!(n <= pending.len());
                pending.drain(..n);
            }
            Err(_) => return,
        }
        assert!(c.open_streams() <= local.max_concurrent_streams as usize);
    }
});
