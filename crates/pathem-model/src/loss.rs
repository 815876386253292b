//! Loss models: decide, frame by frame, whether the path loses a frame.

use crate::rng::Rng;
use crate::units::Probability;

/// What the user asked for.
#[derive(Clone, Debug, PartialEq)]
pub enum LossConfig {
    /// Each frame is lost independently with this probability (Bernoulli).
    Random(Probability),
}

impl std::fmt::Display for LossConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LossConfig::Random(p) => write!(f, "random {p}"),
        }
    }
}

/// A loss model as typed on the command line: `P` or `random:P` (e.g. `1%`, `random:0.01`).
impl std::str::FromStr for LossConfig {
    type Err = crate::units::UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let body = t.strip_prefix("random:").unwrap_or(t);
        body.parse::<Probability>().map(LossConfig::Random)
    }
}

crate::deserialize_from_str!(LossConfig);

/// A loss model with its state.
#[derive(Clone, Debug)]
pub enum Loss {
    Random { threshold: u64 },
}

impl Loss {
    pub fn new(config: &LossConfig) -> Loss {
        match *config {
            LossConfig::Random(p) => Loss::Random { threshold: p.threshold() },
        }
    }

    /// True when this frame is lost.
    #[inline]
    pub fn lose(&mut self, rng: &mut Rng) -> bool {
        match *self {
            Loss::Random { threshold } => rng.chance(threshold),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_loss_rate_within_four_sigma() {
        for (p, seed) in [(0.01, 1), (0.2, 2), (0.5, 3)] {
            let mut loss = Loss::new(&LossConfig::Random(Probability::new(p).unwrap()));
            let mut rng = Rng::seeded(seed);
            let n = 1_000_000u64;
            let lost = (0..n).filter(|_| loss.lose(&mut rng)).count() as f64;
            let sigma = (n as f64 * p * (1.0 - p)).sqrt();
            assert!((lost - n as f64 * p).abs() < 4.0 * sigma, "p={p}: lost {lost} of {n}");
        }
    }

    #[test]
    fn extremes() {
        let mut rng = Rng::seeded(9);
        let mut never = Loss::new(&LossConfig::Random(Probability::ZERO));
        let mut always = Loss::new(&LossConfig::Random(Probability::ONE));
        assert!((0..10_000).all(|_| !never.lose(&mut rng)));
        assert!((0..10_000).all(|_| always.lose(&mut rng)));
    }
}
