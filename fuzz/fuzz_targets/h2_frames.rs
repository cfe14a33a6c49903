//! `h2_frames`: arbitrary server bytes through the HTTP/2 client codec: the frame
//! parser and, for every frame it accepts, the connection state (SETTINGS, flow
//! control, HPACK decoding, CONTINUATION, GOAWAY, RST_STREAM), answering each event
//! with the writer the engine would use. Parameter bytes pick the local settings and
//! how many streams are opened before and during the run. Never panics; checks that a
//! frame's ranges lie inside the input, that the send capacity respects the peer's
//! MAX_FRAME_SIZE and that no more streams are open than allowed.
#![no_main]
use blaster::proto::h2::conn::OpenRefused;
use blaster::proto::h2::frame::{self, FrameParsed, parse_frame};
use blaster::proto::h2::{Connection, Event, LocalSettings};
use blaster_fuzz::Input;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let p = input.byte();
    let local = LocalSettings {
        initial_window_size: [65_535, 1 << 20][(p & 1) as usize],
        connection_window: [65_535, 1 << 24][((p >> 1) & 1) as usize],
        max_frame_size: [16_384, 1 << 20][((p >> 2) & 1) as usize],
        header_table_size: [0, 256, 4096][((p >> 3) % 3) as usize],
        header_block_bytes_max: [64, 64 << 10][((p >> 5) & 1) as usize],
    };
    let streams_max = 1 + (input.byte() % 16) as usize;
    let open_first = input.byte() % 8;
    let stream = input.rest();

    let mut c = Connection::new(local, streams_max);
    let mut out = vec![0u8; 1 << 16];
    assert!(c.write_preface(&mut out).is_ok());
    for _ in 0..open_first {
        let _ = c.open_stream();
    }
    let mut at = 0;
    while at < stream.len() {
        let rest = &stream[at..];
        let (f, consumed) = match parse_frame(rest, local.max_frame_size) {
            FrameParsed::Complete { frame, consumed } => (frame, consumed),
            FrameParsed::Incomplete => break,
            FrameParsed::Invalid(_) => return,
        };
        assert!(consumed >= frame::FRAME_HEADER_BYTES && consumed <= rest.len());
        assert!(f.start <= f.end && f.end <= consumed);
        // The parser is stateless: one byte fewer is never a whole frame.
        assert_eq!(parse_frame(&rest[..consumed - 1], local.max_frame_size), FrameParsed::Incomplete);
        let event = match c.receive(&f, rest, |_, _, _| {}) {
            Ok(e) => e,
            Err(_) => return,
        };
        match event {
            Event::Settings => assert!(frame::write_settings_ack(&mut out).is_ok()),
            Event::Ping(opaque) => assert!(frame::write_ping(&mut out, opaque, true).is_ok()),
            Event::Data {
                start,
                end,
                connection_update,
                stream_update,
                stream,
                ..
            } => {
                assert!(start <= end && end <= consumed);
                if connection_update > 0 {
                    assert!(frame::write_window_update(&mut out, 0, connection_update).is_ok());
                }
                if stream_update > 0 {
                    assert!(frame::write_window_update(&mut out, stream, stream_update).is_ok());
                }
            }
            Event::StreamError { stream, code, .. } => {
                assert!(!c.is_open(stream));
                assert!(frame::write_rst_stream(&mut out, stream, code).is_ok());
            }
            Event::WindowUpdate { stream } if stream != 0 => {
                // Send what the windows allow, as the engine would.
                let n = c.send_capacity(stream);
                assert!(n <= c.peer().max_frame_size as usize);
                c.consume_send(stream, n);
            }
            Event::GoAway { .. } => {
                assert_eq!(c.open_stream(), Err(OpenRefused::GoingAway));
                for id in c.retry_after_goaway().collect::<Vec<_>>() {
                    c.close_stream(id);
                }
            }
            _ => {}
        }
        // Keep streams coming, as a running workload does.
        if let Ok(id) = c.open_stream()
            && consumed.is_multiple_of(2)
        {
            c.end_local(id);
        }
        assert!(c.open_streams() <= streams_max);
        at += consumed;
    }
});
