//! The `--mix` file parser (src/request/mix.rs), with the escapes and HTTP rendering the
//! plan gives it: any text as a mix file. An accepted mix has 1 to ENTRIES_MAX entries
//! with distinct one-word names and positive weights whose total fits the weighted
//! choice (so every entry keeps its share); every entry renders within its template's
//! `max_len` (the engine's buffers are sized by it), and the weighted choice only picks
//! entries that exist; each framer's display (the report's) parses back to it. A
//! rejection is one line. Also: the escapes round-trip (`unescape(escape(b)) == b`).
#![no_main]
use blaster::proto::{Framing, escape_prefix, unescape};
use blaster::request::mix::{ENTRIES_MAX, parse};
use blaster::request::{Ctx, RequestSet, http};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    assert_eq!(
        unescape(&escape_prefix(data, usize::MAX)).as_deref(),
        Ok(data),
        "escape then unescape"
    );
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let entries = match parse(text, unescape, |s| http::request(s, &[], None, "fuzz")) {
        Ok(entries) => entries,
        Err(e) => {
            assert!(
                !e.is_empty() && !e.contains('\n'),
                "error is not one line: {e:?}"
            );
            return;
        }
    };
    assert!((1..=ENTRIES_MAX).contains(&entries.len()));
    let total: u64 = entries.iter().map(|e| e.weight as u64).sum();
    assert!(
        total <= u32::MAX as u64,
        "weights total {total}: the choice saturates"
    );
    for (i, e) in entries.iter().enumerate() {
        assert!(!e.name.is_empty() && !e.name.contains(char::is_whitespace));
        assert!(!e.name.starts_with('#'));
        assert!(e.weight > 0);
        let shown = e.framing.to_string();
        assert_eq!(
            shown.parse::<Framing>().as_ref(),
            Ok(&e.framing),
            "{shown} reads back"
        );
        assert!(
            entries[..i].iter().all(|o| o.name != e.name),
            "{} twice",
            e.name
        );
        let max = e.template.max_len();
        let mut out = vec![0u8; max];
        let mut rng = fastrand::Rng::with_seed(i as u64);
        let ctx = Ctx {
            seq: u64::MAX,
            conn: u64::MAX,
            worker: u64::MAX,
            time_ns: u64::MAX,
        };
        let n = e.template.render(&ctx, &mut rng, &mut out);
        assert!(n <= max);
        if e.template.is_static() {
            assert_eq!(&out[..n], e.template.static_bytes());
        }
    }
    let set = RequestSet::new(entries, true);
    let mut rng = fastrand::Rng::with_seed(total);
    for _ in 0..16 {
        assert!((set.choose(&mut rng) as usize) < set.entries.len());
    }
});
