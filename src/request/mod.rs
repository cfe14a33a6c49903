//! What blaster sends: one request, or a weighted mix of them, each a [`Template`]
//! with the framer that finds its response's end. Built once at start from
//! `--payload*`, `--http`/`-H`/`--body*` or `--mix`; rendered per request into
//! pre-sized buffers.
pub mod http;
pub mod keys;
pub mod mix;
pub mod protobuf;
pub mod replay;
pub mod template;

pub use template::{Ctx, Template};

use crate::proto::Framing;

/// One kind of request.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub name: String,
    pub weight: u32,
    pub template: Template,
    pub framing: Framing,
}

/// The requests of a run and how to choose among them.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSet {
    pub entries: Vec<Entry>,
    /// Running sums of the weights, for the weighted choice.
    cumulative: Vec<u32>,
    /// Whether the run uses `--mix` (the report then shows every entry).
    pub is_mix: bool,
}

impl RequestSet {
    pub fn single(template: Template, framing: Framing) -> RequestSet {
        Self::new(
            vec![Entry {
                name: "request".into(),
                weight: 1,
                template,
                framing,
            }],
            false,
        )
    }

    pub fn new(entries: Vec<Entry>, is_mix: bool) -> RequestSet {
        let mut sum = 0u32;
        let cumulative = entries
            .iter()
            .map(|e| {
                sum = sum.saturating_add(e.weight);
                sum
            })
            .collect();
        RequestSet {
            entries,
            cumulative,
            is_mix,
        }
    }

    /// Picks an entry index by weight.
    #[inline]
    pub fn choose(&self, rng: &mut fastrand::Rng) -> u16 {
        if self.entries.len() == 1 {
            return 0;
        }
        let total = *self.cumulative.last().expect("at least one entry");
        let x = rng.u32(..total);
        self.cumulative.partition_point(|&c| c <= x) as u16
    }

    /// One request whose bytes never change: the engine sends it without rendering.
    pub fn static_bytes(&self) -> Option<&[u8]> {
        (self.entries.len() == 1 && self.entries[0].template.is_static())
            .then(|| self.entries[0].template.static_bytes())
    }

    /// The longest rendered request.
    pub fn max_len(&self) -> usize {
        self.entries
            .iter()
            .map(|e| e.template.max_len())
            .max()
            .unwrap_or(0)
    }

    /// The framing when every entry uses the same one.
    pub fn framing(&self) -> Framing {
        self.entries[0].framing
    }

    pub fn mixed_framing(&self) -> bool {
        self.entries
            .iter()
            .any(|e| e.framing != self.entries[0].framing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_choice_follows_weights() {
        let e = |name: &str, weight| Entry {
            name: name.into(),
            weight,
            template: Template::literal(b"x"),
            framing: Framing::Echo,
        };
        let set = RequestSet::new(vec![e("a", 80), e("b", 20)], true);
        let mut rng = fastrand::Rng::with_seed(1);
        let mut counts = [0u32; 2];
        for _ in 0..100_000 {
            counts[set.choose(&mut rng) as usize] += 1;
        }
        assert!((79_000..81_000).contains(&counts[0]), "{counts:?}");
        assert!(set.static_bytes().is_none());
    }
}

/// Stream of the `{rand}` draws, apart from the entry choice's, so adding a `{rand}`
/// to a template does not change which entries are chosen.
pub const RENDER_STREAM: u64 = 0x7e4d_e45e_ed00_0001;

/// The generator of request `seq`'s random choices (its mix entry, its `{rand}`
/// characters): a function of the run's seed and the request's global sequence
/// number alone, so the choices are the same whichever worker or machine shard sends
/// the request, and N shards send exactly what one machine would have. Seeding is one
/// mix of two words: nothing allocates.
#[inline]
pub fn request_rng(seed: u64, seq: u64) -> fastrand::Rng {
    fastrand::Rng::with_seed(crate::schedule::mix64(seed ^ crate::schedule::mix64(seq)))
}

#[cfg(test)]
mod request_rng_tests {
    use super::*;

    #[test]
    fn choices_follow_the_sequence_number_not_the_sender() {
        let set = RequestSet::new(
            (0..4)
                .map(|i| Entry {
                    name: format!("e{i}"),
                    weight: 1,
                    template: Template::literal(b"x"),
                    framing: Framing::Echo,
                })
                .collect(),
            true,
        );
        // The same request, chosen anywhere, is the same entry with the same {rand}.
        let pick = |seq| set.choose(&mut request_rng(9, seq));
        let render = |seq| {
            let t = Template::parse(b"{rand:8}").unwrap();
            let mut out = [0u8; 8];
            t.render(
                &Ctx::default(),
                &mut request_rng(9 ^ RENDER_STREAM, seq),
                &mut out,
            );
            out
        };
        for seq in 0..100 {
            assert_eq!(pick(seq), pick(seq));
            assert_eq!(render(seq), render(seq));
        }
        // And the choices still spread over the entries.
        let mut counts = [0; 4];
        for seq in 0..4000 {
            counts[pick(seq) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
        assert_ne!(render(1), render(2));
    }
}
