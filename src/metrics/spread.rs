//! The median and range of a figure over repeated runs of one step (`--repeats`, issue
//! 33): what the baseline and `search` print for a decisive step, so one lucky or
//! unlucky run does not decide. Pure.

use serde::Serialize;

/// A figure over several runs: the median (the mean of the middle two for an even
/// count) and the range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// `None` without values.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// How the runs of one decisive step went: how many, and how many held (were good).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Held {
    pub runs: u32,
    pub held: u32,
}

impl Held {
    pub fn of(good: impl IntoIterator<Item = bool>) -> Held {
        let (mut runs, mut held) = (0, 0);
        for g in good {
            runs += 1;
            held += u32::from(g);
        }
        Held { runs, held }
    }

    /// Every run held, or none did: the runs agree.
    pub fn agree(&self) -> bool {
        self.held == 0 || self.held == self.runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_range() {
        assert_eq!(Spread::of([]), None);
        let s = Spread::of([3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Spread::of([4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
    }

    #[test]
    fn runs_agree_when_all_or_none_held() {
        assert!(Held::of([true, true, true]).agree());
        assert!(Held::of([false, false]).agree());
        let h = Held::of([true, false, true]);
        assert_eq!((h.runs, h.held), (3, 2));
        assert!(!h.agree());
    }
}
