//! The key distribution a run's `{zipf:N:S}` and `{uniform:N}` placeholders achieved.
//! A request's keys are a pure function of the run's seed and its sequence number, so
//! the report draws them again for the sequence numbers the run sent rather than
//! counting keys on the hot path: the same keys, at no cost to the run.

use super::{RENDER_STREAM, RequestSet, request_rng};
use serde::Serialize;
use std::collections::HashMap;
use std::ops::Range;

/// Most sequence numbers drawn again for the report (about 100 ms).
pub const KEY_SHARES_SEQS_MAX: u64 = 1_000_000;
/// Keys listed per placeholder, the most drawn first.
pub const KEY_SHARES_TOP: usize = 5;

/// One placeholder's keys over the requests looked at.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeyShares {
    /// As written, e.g. `{zipf:1000:1.1}`.
    pub placeholder: String,
    /// The `--mix` entry it is in (`""` without a mix).
    pub entry: String,
    /// Requests of that entry among those looked at.
    pub requests: u64,
    /// Distinct keys they drew, of `keys`.
    pub distinct: u64,
    pub keys: u64,
    /// The most drawn keys with their share and the law's.
    pub top: Vec<KeyShare>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeyShare {
    pub key: u64,
    pub share: f64,
    pub expected: f64,
}

/// The keys of every key placeholder in `set`, drawn for the requests `seqs` of a run
/// seeded `seed`, as the engine renders them.
pub fn key_shares(set: &RequestSet, seed: u64, seqs: Range<u64>) -> Vec<KeyShares> {
    let mut out = Vec::new();
    for (i, e) in set.entries.iter().enumerate() {
        for (nth, dist) in e.template.key_dists().enumerate() {
            let mut counts: HashMap<u64, u64> = HashMap::new();
            let mut requests = 0u64;
            for seq in seqs.clone() {
                if set.choose(&mut request_rng(seed, seq)) as usize != i {
                    continue;
                }
                requests += 1;
                let base = request_rng(seed ^ RENDER_STREAM, seq).get_seed();
                *counts.entry(dist.draw(base, nth as u32)).or_default() += 1;
            }
            let mut by_count: Vec<(u64, u64)> = counts.iter().map(|(&k, &n)| (k, n)).collect();
            by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let norm = dist.norm();
            out.push(KeyShares {
                placeholder: dist.name(),
                entry: if set.is_mix {
                    e.name.clone()
                } else {
                    String::new()
                },
                requests,
                distinct: counts.len() as u64,
                keys: dist.keys(),
                top: (by_count.iter().take(KEY_SHARES_TOP))
                    .map(|&(key, n)| KeyShare {
                        key,
                        share: n as f64 / requests.max(1) as f64,
                        expected: dist.expected_share(key, norm),
                    })
                    .collect(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Framing;
    use crate::request::{Ctx, Entry, Template};

    #[test]
    fn the_report_draws_the_keys_the_requests_carried() {
        let t = Template::parse(b"GET /k/{zipf:100:1.2} HTTP/1.1\r\n\r\n").unwrap();
        let set = RequestSet::new(
            vec![Entry {
                name: "get".into(),
                weight: 1,
                template: t.clone(),
                framing: Framing::Http1,
            }],
            false,
        );
        let seed = 11;
        let shares = key_shares(&set, seed, 0..20_000);
        // The same keys as rendered requests, counted by hand.
        let mut counts: HashMap<u64, u64> = HashMap::new();
        let mut out = vec![0u8; t.max_len()];
        for seq in 0..20_000 {
            let mut rng = request_rng(seed ^ RENDER_STREAM, seq);
            let n = t.render(
                &Ctx {
                    seq,
                    ..Ctx::default()
                },
                &mut rng,
                &mut out,
            );
            let s = std::str::from_utf8(&out[7..n]).unwrap();
            let key: u64 = s.split(' ').next().unwrap().parse().unwrap();
            *counts.entry(key).or_default() += 1;
        }
        let s = &shares[0];
        assert_eq!(
            (s.placeholder.as_str(), s.requests, s.keys),
            ("{zipf:100:1.2}", 20_000, 100)
        );
        assert_eq!(s.distinct, counts.len() as u64);
        assert_eq!(s.top[0].key, 1);
        assert_eq!(s.top[0].share, counts[&1] as f64 / 20_000.0);
        assert!((s.top[0].share - s.top[0].expected).abs() < 0.02, "{s:?}");
        assert_eq!(s.top.len(), KEY_SHARES_TOP);
    }
}
