//! What blaster sends: one request, or a weighted mix of them, each a [`Template`]
//! with the framer that finds its response's end. Built once at start from
//! `--payload*`, `--http`/`-H`/`--body*` or `--mix`; rendered per request into
//! pre-sized buffers.
pub mod http;
pub mod mix;
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
