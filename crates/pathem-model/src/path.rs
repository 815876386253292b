//! A path: the models of one direction composed in a fixed order.
//!
//! For each frame, in this order (the order is part of pathem's contract):
//! 1. police  — a token bucket may drop the frame at its arrival;
//! 2. link    — the frame joins the bottleneck queue (drop-tail) and gets its exit time;
//! 3. loss    — the path may lose the frame after the link (it still used the link's capacity);
//! 4. delay   — the frame is released `delay` after its exit time;
//! 5. duplicate / corrupt — applied to the frame that is forwarded.
//!
//! [`Path::process`] computes everything from the frame's metadata, its arrival time and a
//! seeded random source; it reads no clock and touches no bytes, so every decision can be
//! replayed and checked in virtual time.

use crate::delay::{Delay, DelayConfig};
use crate::link::{Link, LinkConfig};
use crate::loss::{Loss, LossConfig};
use crate::rng::Rng;
use crate::time::Nanos;

/// Why a frame did not make it through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The loss model lost it.
    Loss,
    /// The link's queue was full.
    Queue,
    /// The policer found it over the allowed rate.
    Police,
    /// The engine's delay line had no room for it.
    DelayLine,
    /// Longer than the largest frame the engine was configured to carry.
    Oversize,
}

impl DropReason {
    pub const ALL: [DropReason; 5] = [
        DropReason::Loss,
        DropReason::Queue,
        DropReason::Police,
        DropReason::DelayLine,
        DropReason::Oversize,
    ];

    /// The name used in statistics and JSON output.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::Loss => "loss",
            DropReason::Queue => "queue",
            DropReason::Police => "police",
            DropReason::DelayLine => "delay_line",
            DropReason::Oversize => "oversize",
        }
    }
}

/// What the path needs to know about a frame.
#[derive(Clone, Copy, Debug)]
pub struct FrameMeta {
    /// When the frame arrived at the emulator.
    pub arrival: Nanos,
    /// Its length on the wire without FCS (the original length, even if the capture cut it).
    pub len: u32,
}

/// What happens to a forwarded frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forward {
    /// When the frame is to leave the emulator.
    pub release: Nanos,
}

/// The fate of one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Drop(DropReason),
    Forward(Forward),
}

/// Everything one direction of a path is configured with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathConfig {
    pub link: Option<LinkConfig>,
    pub loss: Option<LossConfig>,
    pub delay: DelayConfig,
}

impl std::fmt::Display for PathConfig {
    /// One line a person reads: `delay 10ms, loss random 1%, rate 100mbit (+24 B/frame), queue 64000 B`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(l) = &self.link {
            parts.push(format!("rate {} (+{} B/frame)", l.rate, l.overhead));
            match l.queue {
                Some(crate::units::QueueLimit::Bytes(b)) => parts.push(format!("queue {b} B")),
                Some(crate::units::QueueLimit::Packets(n)) => parts.push(format!("queue {n} frames")),
                None => parts.push("queue unbounded".into()),
            }
        }
        if let Some(loss) = &self.loss {
            parts.push(format!("loss {loss}"));
        }
        if self.delay.max_delay() > Nanos::ZERO {
            parts.push(format!("delay {}", self.delay.base));
        }
        if parts.is_empty() {
            return f.write_str("transparent (no impairment)");
        }
        f.write_str(&parts.join(", "))
    }
}

impl PathConfig {
    /// True when the path changes nothing: frames leave as they arrived.
    pub fn is_transparent(&self) -> bool {
        self.link.is_none() && self.loss.is_none() && self.delay.max_delay() == Nanos::ZERO
    }
}

/// One direction's models and their state.
#[derive(Debug)]
pub struct Path {
    link: Option<Link>,
    loss: Option<Loss>,
    delay: Delay,
}

impl Path {
    pub fn new(config: &PathConfig) -> Path {
        Path {
            link: config.link.clone().map(Link::new),
            loss: config.loss.as_ref().map(Loss::new),
            delay: Delay::new(&config.delay),
        }
    }

    /// Decides the fate of one frame.
    #[inline]
    pub fn process(&mut self, meta: FrameMeta, rng: &mut Rng) -> Verdict {
        let exit = match &mut self.link {
            Some(link) => match link.admit(meta.arrival, meta.len) {
                Some(exit) => exit,
                None => return Verdict::Drop(DropReason::Queue),
            },
            None => meta.arrival,
        };
        if let Some(loss) = &mut self.loss {
            if loss.lose(rng) {
                return Verdict::Drop(DropReason::Loss);
            }
        }
        let release = exit + self.delay.sample(exit, rng);
        Verdict::Forward(Forward { release })
    }

    /// Bytes and frames in the link queue at `now` (zero without a link).
    pub fn queue_occupancy(&mut self, now: Nanos) -> (usize, u64) {
        self.link.as_mut().map_or((0, 0), |l| l.occupancy(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Probability;

    #[test]
    fn order_link_then_loss_then_delay() {
        let config = PathConfig {
            link: Some(LinkConfig { rate: "8mbit".parse().unwrap(), overhead: 0, queue: None }),
            loss: Some(LossConfig::Random(Probability::ONE)),
            delay: DelayConfig { base: Nanos::from_millis(5) },
        };
        let mut path = Path::new(&config);
        let mut rng = Rng::seeded(1);
        // Lost after the link: it still occupied the link, so the next frame queues behind it.
        let meta = FrameMeta { arrival: Nanos(0), len: 1000 };
        assert_eq!(path.process(meta, &mut rng), Verdict::Drop(DropReason::Loss));
        let mut config2 = config.clone();
        config2.loss = None;
        let mut path2 = Path::new(&config2);
        path2.process(meta, &mut rng);
        let v = path2.process(meta, &mut rng);
        assert_eq!(v, Verdict::Forward(Forward { release: Nanos::from_millis(2 + 5) }));
    }

    #[test]
    fn transparent_path_releases_at_arrival() {
        let mut path = Path::new(&PathConfig::default());
        let mut rng = Rng::seeded(1);
        let v = path.process(FrameMeta { arrival: Nanos(123), len: 60 }, &mut rng);
        assert_eq!(v, Verdict::Forward(Forward { release: Nanos(123) }));
        assert!(PathConfig::default().is_transparent());
    }
}
