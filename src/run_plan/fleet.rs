//! A run's place in a fleet: `--shard i/N`, `--start-at` and `--run-id`, validated into
//! one [`Fleet`] that the plan carries. The sharding rule itself is in
//! [`crate::schedule::shard`]; waiting for the start and reading the clock's state is in
//! [`crate::wallclock`].
//!
//! The run id ties the shards' JSON files together for `blaster merge`. By default it
//! is derived from the start instant and a fingerprint of the plan (what the global
//! timetable and the target depend on), so N machines given the same command line and
//! start instant agree on it without talking to each other; the fingerprint is also
//! stored on its own, so a merge can tell "same run id, different plan" apart.

use crate::schedule::Shard;
use crate::wallclock;

/// Longest `--run-id` (it ends up in file names and Kubernetes labels, which allow 63).
pub const RUN_ID_LEN_MAX: usize = 63;

/// Where this run stands in a fleet of shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    pub shard: Shard,
    /// `--start-at`, Unix ns.
    pub start_at_ns: Option<u64>,
    /// `--run-id`, or derived (see the module doc); empty until [`Fleet::seal`].
    pub run_id: String,
    /// 16 hex digits over what the global timetable and the target depend on.
    pub fingerprint: String,
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet {
            shard: Shard::WHOLE,
            start_at_ns: None,
            run_id: String::new(),
            fingerprint: String::new(),
        }
    }
}

/// A bad fleet flag: the flag's name and the one-line reason.
pub type FlagError = (&'static str, String);

impl Fleet {
    /// Validates the three flags; `now_ns` is the wall clock (Unix ns). The run id is
    /// completed by [`Fleet::seal`] once the rest of the plan is known.
    pub fn parse(
        shard: Option<&str>,
        start_at: Option<&str>,
        run_id: Option<&str>,
        now_ns: u64,
    ) -> Result<Fleet, FlagError> {
        let shard = match shard {
            Some(s) => s.parse::<Shard>().map_err(|m| ("shard", m))?,
            None => Shard::WHOLE,
        };
        let start_at_ns = start_at
            .map(|s| wallclock::parse_start_at(s, now_ns).map_err(|m| ("start-at", m)))
            .transpose()?;
        if !shard.is_whole() && start_at_ns.is_none() {
            return Err((
                "shard",
                format!(
                    "the shards of a run must start together: add --start-at with the same \
                     instant on every shard (got --shard {shard} alone)"
                ),
            ));
        }
        let run_id = match run_id {
            Some(id) => {
                let ok = !id.is_empty()
                    && id.len() <= RUN_ID_LEN_MAX
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
                if !ok {
                    return Err((
                        "run-id",
                        format!(
                            "expected 1 to {RUN_ID_LEN_MAX} letters, digits, '.', '_' or '-', \
                             got {id:?}"
                        ),
                    ));
                }
                id.to_string()
            }
            None => String::new(),
        };
        Ok(Fleet {
            shard,
            start_at_ns,
            run_id,
            fingerprint: String::new(),
        })
    }

    /// Completes the plan fingerprint from `plan_text` (a canonical rendering of what
    /// every shard must share) and, unless `--run-id` named it, the run id:
    /// `<start-at Unix ms>-<fingerprint>`, or the fingerprint alone without a start.
    pub fn seal(&mut self, plan_text: &str) {
        self.fingerprint = format!("{:016x}", fnv1a(plan_text.as_bytes()));
        if self.run_id.is_empty() {
            self.run_id = match self.start_at_ns {
                Some(at) => format!("{}-{}", at / 1_000_000, &self.fingerprint[..8]),
                None => self.fingerprint[..8].to_string(),
            };
        }
    }

    /// `shard 2/8 of run <id>`, or `run <id>` for a whole run.
    pub fn describe(&self) -> String {
        if self.shard.is_whole() {
            format!("run {}", self.run_id)
        } else {
            format!("shard {} of run {}", self.shard, self.run_id)
        }
    }
}

/// 64-bit FNV-1a: stable across builds and platforms (std's hasher is not), which is
/// what a fingerprint compared between machines needs.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_748_779_200_000_000_000;

    fn parse(shard: Option<&str>, at: Option<&str>, id: Option<&str>) -> Result<Fleet, FlagError> {
        Fleet::parse(shard, at, id, NOW)
    }

    #[test]
    fn defaults_to_the_whole_run() {
        let mut f = parse(None, None, None).unwrap();
        assert_eq!(f.shard, Shard::WHOLE);
        f.seal("plan");
        assert_eq!(f.run_id.len(), 8);
        assert_eq!(f.describe(), format!("run {}", f.run_id));
    }

    #[test]
    fn shards_need_one_start() {
        let (flag, m) = parse(Some("1/3"), None, None).unwrap_err();
        assert_eq!(flag, "shard");
        assert!(m.contains("add --start-at"), "{m}");
        let mut f = parse(Some("1/3"), Some("1748779260000"), None).unwrap();
        f.seal("plan");
        assert!(f.run_id.starts_with("1748779260000-"), "{}", f.run_id);
        assert_eq!(f.describe(), format!("shard 1/3 of run {}", f.run_id));
    }

    #[test]
    fn the_derived_id_follows_start_and_plan() {
        let id = |at: &str, plan: &str| {
            let mut f = parse(Some("0/2"), Some(at), None).unwrap();
            f.seal(plan);
            f.run_id
        };
        assert_eq!(id("1748779260000", "a"), id("1748779260000", "a"));
        assert_ne!(id("1748779260000", "a"), id("1748779260000", "b"));
        assert_ne!(id("1748779260000", "a"), id("1748779261000", "a"));
    }

    #[test]
    fn bad_flags_name_themselves() {
        assert_eq!(parse(Some("3/3"), None, None).unwrap_err().0, "shard");
        assert_eq!(parse(None, Some("soon"), None).unwrap_err().0, "start-at");
        for bad in ["", "a b", "x/y", &"a".repeat(64)] {
            assert_eq!(
                parse(None, None, Some(bad)).unwrap_err().0,
                "run-id",
                "{bad}"
            );
        }
        let mut f = parse(None, None, Some("nightly-42")).unwrap();
        f.seal("plan");
        assert_eq!(f.run_id, "nightly-42");
    }
}
