//! The `--replay` readers (src/request/replay/): any bytes as a text recording (payload
//! lines and `METHOD /path` lines), a GoReplay `.gor` file, and a pcap or pcapng capture
//! of a TCP and of a UDP conversation. A rejection is one line; a recording read to its
//! end gives requests with offsets that never go back, and reading it again gives the
//! same requests (the engine reads a recording twice: once to check it, once to send).
//! `summarize` agrees with what was read.
#![no_main]
use blaster::request::replay::gor::GorRecording;
use blaster::request::replay::pcap::PcapRecording;
use blaster::request::replay::text::TextRecording;
use blaster::request::replay::{Carrier, LineKind, Recording, ReplayError, summarize};
use libfuzzer_sys::fuzz_target;

/// Requests read before the fuzz input is judged long enough.
const REQUESTS_MAX: usize = 2_000;

fn one_line(e: &ReplayError) {
    let s = e.to_string();
    assert!(!s.is_empty() && !s.contains('\n'), "error is not one line: {s:?}");
}

/// The recording read to its end (or to an error, or REQUESTS_MAX requests).
fn read_all(rec: &mut dyn Recording) -> (Vec<(u64, Vec<u8>)>, Option<String>) {
    let mut out = Vec::new();
    loop {
        if out.len() == REQUESTS_MAX {
            return (out, None);
        }
        let mut buf = Vec::new();
        match rec.next(&mut buf) {
            Ok(Some(t)) => out.push((t, buf)),
            Ok(None) => return (out, None),
            Err(e) => {
                one_line(&e);
                return (out, Some(e.to_string()));
            }
        }
    }
}

fn check(make: &dyn Fn() -> Result<Box<dyn Recording>, ReplayError>) {
    let mut rec = match make() {
        Ok(r) => r,
        Err(e) => return one_line(&e),
    };
    let (first, err) = read_all(rec.as_mut());
    for w in first.windows(2) {
        assert!(w[0].0 <= w[1].0, "offsets go back: {} then {}", w[0].0, w[1].0);
    }
    let mut again = make().expect("opened once, opens again");
    let (second, err2) = read_all(again.as_mut());
    assert_eq!(first, second, "a second read differs");
    assert_eq!(err, err2, "a second read fails differently");
    if first.len() < REQUESTS_MAX {
        let mut rec = make().expect("opens");
        match summarize(rec.as_mut(), usize::MAX) {
            Ok(s) => {
                assert!(err.is_none(), "summarize passed what failed: {err:?}");
                assert_eq!(s.requests as usize, first.len());
                assert_eq!(s.last_offset_ns, first.last().unwrap().0);
                assert_eq!(s.longest, first.iter().map(|r| r.1.len()).max().unwrap());
            }
            Err(e) => {
                one_line(&e);
                assert!(err.is_some() || first.is_empty(), "summarize refused {e}");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, file)) = data.split_first() else {
        return;
    };
    let bytes = file.to_vec();
    match which % 5 {
        0 => check(&|| {
            Ok(Box::new(TextRecording::new(
                std::io::Cursor::new(bytes.clone()),
                LineKind::Payload,
            )))
        }),
        1 => check(&|| {
            let kind = LineKind::http(&[], None, "h").expect("plain headers");
            Ok(Box::new(TextRecording::new(
                std::io::Cursor::new(bytes.clone()),
                kind,
            )))
        }),
        2 => check(&|| Ok(Box::new(GorRecording::new(std::io::Cursor::new(bytes.clone()))))),
        3 => check(&|| {
            Ok(Box::new(PcapRecording::new(
                std::io::Cursor::new(bytes.clone()),
                Carrier::Tcp,
                None,
            )?))
        }),
        _ => check(&|| {
            Ok(Box::new(PcapRecording::new(
                std::io::Cursor::new(bytes.clone()),
                Carrier::Udp,
                None,
            )?))
        }),
    }
});
