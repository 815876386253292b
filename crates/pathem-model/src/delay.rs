//! Delay models: how long the path holds a frame after it leaves the link.

use crate::rng::Rng;
use crate::time::Nanos;

/// What the user asked for.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct DelayConfig {
    /// Constant one-way delay added to every frame.
    pub base: Nanos,
}

impl DelayConfig {
    /// The largest delay this model can give a frame; sizes the delay line.
    pub fn max_delay(&self) -> Nanos {
        self.base
    }
}

/// A delay model with its state.
#[derive(Clone, Debug)]
pub struct Delay {
    base: Nanos,
}

impl Delay {
    pub fn new(config: &DelayConfig) -> Delay {
        Delay { base: config.base }
    }

    /// The delay for a frame that leaves the link at `now`.
    #[inline]
    pub fn sample(&mut self, _now: Nanos, _rng: &mut Rng) -> Nanos {
        self.base
    }
}
