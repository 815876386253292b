//! Frames sent without their delay (NetEm's `reorder P [CORRELATION] gap N`).
//!
//! Frames are delayed as usual until N−1 of them were delayed since the last one sent at once;
//! from then on each frame is sent at once with probability P (through NetEm's correlated draw
//! when there is a correlation, [`crate::corr`]), which starts the count again. With P = 100%
//! every Nth frame skips the delay; with N = 1 (NetEm's default) every frame may. A frame sent
//! at once still went through the link (its rate and queue) but leaves at its exit time: no
//! delay and no slot. It overtakes the frames still in delay (NetEm puts it at the head of
//! its queue), whether or not the path lets delayed frames overtake each other (`reorder`).

use crate::corr::Chance;
use crate::rng::Rng;
use crate::spec::{error, KeyValues, Number};
use crate::units::{Probability, UnitError};
use std::str::FromStr;

const SKIP_ACCEPTED: &str = "P[,corr=C][,gap=N] with N from 1 to 4294967295, e.g. 10%,gap=5";

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SkipConfig {
    /// The probability that a frame past the gap is sent at once.
    pub p: Probability,
    /// NetEm's correlation of that draw.
    pub corr: Option<Probability>,
    /// Frames delayed between two sent at once, plus one (at least 1).
    pub gap: u32,
}

impl FromStr for SkipConfig {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let (p, rest) = s.split_once(',').unwrap_or((s, ""));
        let p = p.parse::<Probability>().map_err(|e| error(s, e.reason, SKIP_ACCEPTED))?;
        let mut kv = KeyValues::parse(s, rest, SKIP_ACCEPTED)?;
        let corr = kv.get::<Probability>("corr")?.filter(|c| c.get() > 0.0);
        let gap = match kv.get::<Number>("gap")? {
            None => 1,
            Some(Number(n)) if n.fract() == 0.0 && (1.0..=f64::from(u32::MAX)).contains(&n) => n as u32,
            Some(Number(n)) => return Err(error(s, format!("has gap={n}"), SKIP_ACCEPTED)),
        };
        kv.finish()?;
        Ok(SkipConfig { p, corr, gap })
    }
}

crate::deserialize_from_str!(SkipConfig);

impl SkipConfig {
    /// The spec text that parses back to this config.
    pub fn spec(&self) -> String {
        let mut out = self.p.spec();
        if let Some(c) = self.corr {
            out.push_str(&format!(",corr={}", c.spec()));
        }
        if self.gap != 1 {
            out.push_str(&format!(",gap={}", self.gap));
        }
        out
    }
}

impl std::fmt::Display for SkipConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of frames sent at once", self.p)?;
        if self.gap > 1 {
            write!(f, " after {} delayed", self.gap - 1)?;
        }
        if let Some(c) = self.corr {
            write!(f, " (correlated {c})")?;
        }
        Ok(())
    }
}

/// The state: how many frames were delayed since the last one sent at once.
#[derive(Clone, Debug)]
pub struct Skip {
    chance: Chance,
    gap: u32,
    delayed: u32,
}

impl Skip {
    pub fn new(config: SkipConfig) -> Skip {
        Skip { chance: Chance::new(config.p, config.corr), gap: config.gap.max(1), delayed: 0 }
    }

    /// Keeps the count (and the correlated draw) of the skip this one replaces.
    pub fn inherit(&mut self, old: Skip) {
        self.delayed = old.delayed;
        self.chance.inherit(&old.chance);
    }

    /// True when this frame is sent at once. Draws only once the gap is reached.
    #[inline]
    pub fn at_once(&mut self, rng: &mut Rng) -> bool {
        if self.delayed >= self.gap - 1 && self.chance.hit(rng) {
            self.delayed = 0;
            return true;
        }
        self.delayed = self.delayed.saturating_add(1);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(spec: &str, n: usize, seed: u64) -> Vec<bool> {
        let mut s = Skip::new(spec.parse().unwrap());
        let mut rng = Rng::seeded(seed);
        (0..n).map(|_| s.at_once(&mut rng)).collect()
    }

    #[test]
    fn a_certain_skip_sends_every_gapth_frame_at_once() {
        let p = pattern("100%,gap=3", 12, 1);
        let want: Vec<bool> = (1..=12).map(|i| i % 3 == 0).collect();
        assert_eq!(p, want, "delayed, delayed, at once, …");
        assert!(pattern("100%", 50, 1).iter().all(|&b| b), "gap 1: every frame");
        assert!(pattern("0%,gap=2", 1000, 1).iter().all(|&b| !b));
    }

    #[test]
    fn a_probable_skip_waits_out_the_gap_then_draws() {
        // P = 25%, gap 5: after each frame sent at once, four are delayed for sure; then each
        // frame goes at once with probability 1/4, so the run of delayed frames between two is
        // 4 + a geometric count of mean 3: sent at once = 1/(4 + 4) of frames.
        let n = 400_000;
        let p = pattern("25%,gap=5", n, 7);
        let sent = p.iter().filter(|&&b| b).count() as f64;
        let want = n as f64 / 8.0;
        assert!((sent - want).abs() < 4.0 * (want * 7.0 / 8.0).sqrt() * 2.0, "{sent} vs {want}");
        let mut run = 0usize;
        let mut runs = Vec::new();
        for b in p {
            if b {
                runs.push(run);
                run = 0;
            } else {
                run += 1;
            }
        }
        assert!(runs[1..].iter().all(|&r| r >= 4), "the gap is kept");
        let four = runs[1..].iter().filter(|&&r| r == 4).count() as f64 / (runs.len() - 1) as f64;
        assert!((four - 0.25).abs() < 0.01, "right after the gap: {four}");
    }

    #[test]
    fn specs_parse_print_back_and_refuse() {
        let s: SkipConfig = "10%,corr=25%,gap=3".parse().unwrap();
        assert_eq!((s.p.get(), s.corr.unwrap().get(), s.gap), (0.1, 0.25, 3));
        assert_eq!(s.spec().parse::<SkipConfig>(), Ok(s));
        assert_eq!("10%".parse::<SkipConfig>().unwrap().gap, 1);
        assert_eq!("10%,corr=0%".parse::<SkipConfig>().unwrap().corr, None);
        for bad in ["", "10%,gap=0", "10%,gap=1.5", "10%,gap=5e9", "120%", "10%,gap", "10%,when=2"] {
            assert!(bad.parse::<SkipConfig>().unwrap_err().to_string().contains("accepted"), "{bad}");
        }
    }
}
