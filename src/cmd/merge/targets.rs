//! The `targets` key of merged shards (one entry per destination): entries are matched
//! by address, not by position, so the same server's figures add wherever a shard
//! listed it. Counts, error kinds and rates add; the latency histograms add and the
//! percentiles come from the sum, never from averaging the shards'. A shard without
//! the key (a report from before it) leaves the merged report without it: a sum that
//! misses a shard would look whole.

use crate::report::{Percentiles, hdr};
use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// Why the targets did not merge: the part's index (in the order given) and the reason.
#[derive(Debug, PartialEq)]
pub struct TargetsMergeError {
    pub index: usize,
    pub reason: String,
}

/// One address's running sum.
struct Sum {
    address: String,
    counts: Value,
    errors_by_kind: Vec<Value>,
    latency: Histogram<u64>,
}

/// The merged `targets` of the shards' `parts` (each a shard's `targets` value), in
/// the order the addresses first appear; `None` when a part has none.
pub fn merge(parts: &[&Value]) -> Result<Option<Value>, TargetsMergeError> {
    let mut sums: Vec<Sum> = Vec::new();
    for (index, part) in parts.iter().enumerate() {
        let Some(entries) = part.as_array() else {
            return Ok(None);
        };
        for e in entries {
            let fail = |reason: String| TargetsMergeError { index, reason };
            let address = e["address"]
                .as_str()
                .ok_or_else(|| fail("targets[].address: missing".into()))?;
            let one = e["latency_histogram"]
                .as_str()
                .and_then(|s| hdr::decode(s).ok())
                .ok_or_else(|| fail(format!("targets[{address}].latency_histogram: unreadable")))?;
            let counts = json!({
                "sent": e["sent"], "completed": e["completed"], "errors": e["errors"],
                "achieved_rps": e["achieved_rps"],
            });
            match sums.iter_mut().find(|s| s.address == address) {
                Some(s) => {
                    s.latency.add(&one).map_err(|x| {
                        fail(format!("targets[{address}].latency_histogram: {x:?}"))
                    })?;
                    s.counts = super::sum_numbers(&[&s.counts, &counts]);
                    s.errors_by_kind.push(e["errors_by_kind"].clone());
                }
                None => {
                    let mut latency = one;
                    latency.auto(true);
                    sums.push(Sum {
                        address: address.to_string(),
                        counts,
                        errors_by_kind: vec![e["errors_by_kind"].clone()],
                        latency,
                    });
                }
            }
        }
    }
    Ok(Some(Value::Array(sums.into_iter().map(entry).collect())))
}

/// The merged text's per-destination lines (two targets or more; else empty).
pub fn table(targets: &Value) -> String {
    use std::fmt::Write;
    let list = targets.as_array().map_or(&[][..], Vec::as_slice);
    let mut s = String::new();
    if list.len() < 2 {
        return s;
    }
    let ns = |t: &Value, k: &str| crate::units::fmt_ns(t["latency_ns"][k].as_u64().unwrap_or(0));
    for t in list {
        let _ = writeln!(
            s,
            "  target {}: {} completed, {} errors, {:.1}/s; latency p50 {}, p90 {}, p99 {}, \
             p99.9 {}, max {}",
            t["address"].as_str().unwrap_or("?"),
            t["completed"],
            t["errors"],
            t["achieved_rps"].as_f64().unwrap_or(0.0),
            ns(t, "p50"),
            ns(t, "p90"),
            ns(t, "p99"),
            ns(t, "p999"),
            ns(t, "max"),
        );
    }
    s
}

/// A merged entry in the run report's shape.
fn entry(s: Sum) -> Value {
    let c = &s.counts;
    json!({
        "address": s.address,
        "sent": c["sent"],
        "completed": c["completed"],
        "errors": c["errors"],
        "errors_by_kind": super::sum_count_maps(s.errors_by_kind.iter()),
        "achieved_rps": c["achieved_rps"],
        "latency_ns": serde_json::to_value(Percentiles::of(&s.latency)).unwrap_or(Value::Null),
        "latency_histogram": hdr::encode(&s.latency),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `targets` entry of `address` whose `n` requests all took `ns`.
    fn target(address: &str, n: u64, ns: u64, errors: u64) -> Value {
        let mut h = crate::metrics::Histograms::new().latency;
        h.record_n(ns, n).unwrap();
        json!({
            "address": address, "sent": n + errors, "completed": n, "errors": errors,
            "errors_by_kind": if errors > 0 { json!({"timeout": errors}) } else { json!({}) },
            "achieved_rps": n as f64 / 2.0,
            "latency_ns": Percentiles::of(&h),
            "latency_histogram": hdr::encode(&h),
        })
    }

    /// Two shards list the same two servers in other orders: each address's figures
    /// add (by address, not position), its percentiles come from the added histograms
    /// (the slow server's p50 stays slow however many fast requests the other had).
    #[test]
    fn shards_merge_by_address_and_add_histograms() {
        let a = json!([
            target("10.0.0.1:80", 90, 1_000_000, 0),
            target("10.0.0.2:80", 10, 20_000_000, 1)
        ]);
        let b = json!([
            target("10.0.0.2:80", 30, 40_000_000, 2),
            target("10.0.0.1:80", 10, 3_000_000, 0)
        ]);
        let m = merge(&[&a, &b]).unwrap().unwrap();
        let m = m.as_array().unwrap();
        assert_eq!(m.len(), 2);
        let (fast, slow) = (&m[0], &m[1]);
        assert_eq!(fast["address"], "10.0.0.1:80");
        assert_eq!(
            (&fast["completed"], &fast["sent"], &fast["errors"]),
            (&json!(100), &json!(100), &json!(0))
        );
        assert_eq!(fast["achieved_rps"], 50.0);
        assert_eq!(fast["latency_ns"]["count"], 100);
        let p50 = |v: &Value| v["latency_ns"]["p50"].as_u64().unwrap();
        assert!((999_000..=1_001_000).contains(&p50(fast)), "{}", p50(fast));
        assert!(fast["latency_ns"]["max"].as_u64().unwrap() >= 2_990_000);
        assert_eq!(slow["address"], "10.0.0.2:80");
        assert_eq!(
            (&slow["completed"], &slow["errors"]),
            (&json!(40), &json!(3))
        );
        assert_eq!(slow["errors_by_kind"], json!({"timeout": 3}));
        // 30 of the 40 took 40 ms: the merged p50 is 40 ms, not an average of 20 and 40.
        assert!(p50(slow) >= 39_000_000, "{}", p50(slow));
        let h = hdr::decode(slow["latency_histogram"].as_str().unwrap()).unwrap();
        assert_eq!(h.len(), 40);
    }

    /// A shard without `targets` (a report from before it): no merged key, not a sum
    /// that misses a shard. An unreadable histogram names the shard.
    #[test]
    fn a_shard_without_targets_drops_the_key_and_a_bad_histogram_names_its_shard() {
        let a = json!([target("10.0.0.1:80", 5, 1_000, 0)]);
        assert_eq!(merge(&[&a, &Value::Null]), Ok(None));
        let mut bad = a.clone();
        bad[0]["latency_histogram"] = json!("not base64");
        assert_eq!(merge(&[&a, &bad]).unwrap_err().index, 1);
    }
}
