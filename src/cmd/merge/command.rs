//! `blaster merge SHARD.json...`'s command: claims the outputs, merges the shards
//! ([`super::merge_files`]), judges the merged run against `--slo` again, and writes the
//! text, the JSON and the HTML page.

use crate::cmd::AppError;
use crate::cmd::output::distinct_outputs;
use crate::outcome::Outcome;
use crate::report::{html, input, json, output};
use crate::slo::{Observed, Slo, Verdict};

/// `blaster merge SHARD.json...`: adds the shards' histograms into one run report.
pub fn command(a: &crate::cli::MergeArgs) -> Result<Outcome, AppError> {
    // Outputs are claimed first, so a bad path fails before any work.
    distinct_outputs(&[("json", a.json.as_deref()), ("html", a.html.as_deref())])?;
    let slo = a
        .slo
        .as_deref()
        .map(|s| Slo::parse(s).map_err(|m| AppError::Usage(format!("--slo: {m}"))))
        .transpose()?;
    let json_out = json::claim(a.json.as_deref())?;
    let html_out = a.html.as_deref().map(output::Pending::claim).transpose()?;
    let mut merged = super::merge_files(&a.files)?;
    // A shard's own verdict is not the merged run's: judged again or left out.
    let verdict = slo.map(|s| judge_merged(&s, &merged.json));
    match (&verdict, merged.json.as_object_mut()) {
        (Some(v), Some(o)) => {
            o.insert("slo".into(), serde_json::to_value(v).unwrap_or_default());
        }
        (None, Some(o)) => {
            o.remove("slo");
        }
        _ => {}
    }
    let mut text = merged.text.clone();
    if let Some(v) = &verdict {
        text.push_str(&v.render());
    }
    if json::is_stdout(a.json.as_deref()) || json::is_stdout(a.html.as_deref()) {
        crate::errln!("{}", text.trim_end());
    } else {
        crate::console::out_str(&text);
    }
    if let (Some(out), Some(path)) = (html_out, &a.html) {
        let text = serde_json::to_string(&merged.json).unwrap_or_default();
        let run = input::parse_run("merged", &text)?.input;
        let view = html::RunView {
            label: format!(
                "merged {}",
                merged.json["fleet"]["run_id"].as_str().unwrap_or("")
            ),
            run: &run,
        };
        out.commit(html::render(&[view])?.as_bytes())?;
        if !json::is_stdout(Some(path)) {
            crate::errln!("blaster: wrote {}", path.display());
        }
    }
    if let Some(out) = json_out {
        out.write(&merged.json)?;
    }
    Ok(if !merged.valid {
        Outcome::Invalid
    } else if verdict.is_some_and(|v| !v.met) {
        Outcome::SloBroken
    } else {
        Outcome::Ok
    })
}

/// Judges a merged report (JSON) against `slo`: its added latency (and frame
/// deviation) histograms and its summed counters. A histogram that is missing or does
/// not decode has no samples, so its terms are not met.
fn judge_merged(slo: &Slo, m: &serde_json::Value) -> Verdict {
    let hist = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|s| crate::report::hdr::decode(s).ok())
            .unwrap_or_else(|| crate::metrics::Histograms::new().latency)
    };
    let latency = hist(&m["histograms"]["latency"]);
    let frames = m["frames"].is_object();
    let deviation = hist(&m["frames"]["histograms"]["deviation"]);
    let num = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    slo.judge(&Observed {
        latency: &latency,
        dispatched: m["requests"]["dispatched"].as_u64().unwrap_or(0),
        errors: m["requests"]["errors"].as_u64().unwrap_or(0),
        intended_rps: m["rate"]["intended_rps"].as_f64().unwrap_or(f64::NAN),
        achieved_rps: num(&m["rate"]["achieved_rps"]),
        deviation: frames.then_some(&deviation),
        retention: (frames && num(&m["frames"]["expected"]) > 0.0)
            .then(|| num(&m["frames"]["received"]) / num(&m["frames"]["expected"])),
    })
}
