//! The report reader (src/report/input.rs) that `merge`, `compare` and `report` share:
//! any bytes as a run report's JSON, embedded histograms included. A rejection is one
//! line naming the file. What it accepts holds together: the latency histogram holds at
//! most one value per completed or failed request (and at least one per completed one
//! outside frames), every percentile summary counts its histogram. Compared with itself
//! it crosses no limit; merged alone it is refused in one line or gives a report the
//! reader accepts again (merge writes only what the reader takes). Decoding stays
//! within the histogram bounds whatever the headers declare: a crafted length or a
//! deflate bomb is a rejection, not an allocation (libFuzzer's -rss_limit_mb catches
//! the other outcome).
#![no_main]
use blaster::cmd::compare::{Metric, RunFigures, compare, parse_limits};
use blaster::report::input::{MAIN_HISTOGRAMS, parse_run};
use blaster::cmd::merge::merge_texts;
use libfuzzer_sys::fuzz_target;

fn one_line(e: &str, name: &str) {
    assert!(
        e.starts_with(&format!("{name}: ")),
        "{e:?} does not name the file"
    );
    assert!(!e.contains('\n'), "error is not one line: {e:?}");
}

fuzz_target!(|data: &[u8]| {
    let run = match parse_run("fuzz.json", data) {
        Ok(r) => r,
        Err(e) => return one_line(&e.to_string(), "fuzz.json"),
    };
    let r = &run.input.requests;
    let latency = run.latency();
    assert!(u128::from(latency.len()) <= u128::from(r.completed) + u128::from(r.errors));
    if run.input.mode != "frames" {
        assert!(latency.len() >= r.completed);
        assert!(run.histograms[1].len() <= r.completed);
    }
    for ((_, summary), h) in MAIN_HISTOGRAMS.iter().zip(&run.histograms) {
        if let Some(c) = run.json[*summary].get("count").and_then(|c| c.as_u64()) {
            assert_eq!(c, h.len(), "{summary}.count");
        }
    }

    let f = RunFigures::of(&run);
    let limits = parse_limits("p99=0%,max=0%,errors=0%,rate=0%").unwrap();
    let c = compare("a", &f, "a", &f, &[Metric::Latency(50.0)], &limits, 0.95);
    assert!(!c.regressed, "a run regressed against itself");

    // The reader accepted it: it is UTF-8.
    let text = std::str::from_utf8(data).unwrap().to_string();
    match merge_texts(&[("fuzz.json".to_string(), text)]) {
        Err(e) => one_line(&e.to_string(), "fuzz.json"),
        Ok(m) => {
            let back = serde_json::to_string(&m.json).unwrap();
            if let Err(e) = parse_run("merged", back) {
                panic!("the reader refuses what merge wrote: {e}");
            }
        }
    }
});
