//! RED (Floyd and Jacobson, 1993), with gentle mode (Floyd, 2000): at each arrival, an
//! exponentially weighted average of the queue's bytes sets a drop (or mark) probability that
//! rises linearly from `min` to `max`; spacing drops by the count since the last one makes
//! them nearly uniform. Beyond `max` every frame is dropped; gentle mode instead ramps the
//! probability from `max-p` to 1 between `max` and twice `max`.

use crate::link::LinkConfig;
use crate::rng::Rng;
use crate::spec::{error, KeyValues, Number};
use crate::time::Nanos;
use crate::units::{Probability, Size, UnitError};
use std::str::FromStr;

/// RED's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RedConfig {
    /// Average backlog (bytes) below which nothing is dropped.
    pub min: u64,
    /// Average backlog (bytes) at which the probability reaches `max_p`.
    pub max: u64,
    pub max_p: f64,
    /// The average's weight `w_q`.
    pub weight: f64,
    pub gentle: bool,
}

impl Default for RedConfig {
    /// Floyd's recommendations: min 5 full-size frames, max three times min, max-p 10%,
    /// weight 0.002, gentle on.
    fn default() -> Self {
        RedConfig { min: 5 * 1514, max: 15 * 1514, max_p: 0.1, weight: 0.002, gentle: true }
    }
}

const RED_ACCEPTED: &str = "red[,min=SIZE][,max=SIZE][,max-p=P][,weight=W][,gentle=on|off] \
     (defaults 7570B, 22710B, 10%, 0.002, on; 0 < min < max ≤ 1TiB, 0 < max-p ≤ 1, 0 < weight ≤ 1)";

impl FromStr for RedConfig {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let body = s.trim().strip_prefix("red").filter(|b| b.is_empty() || b.starts_with(','));
        let body = body.ok_or_else(|| error(s, "is not a RED spec", RED_ACCEPTED))?;
        let mut kv = KeyValues::parse(s, body, RED_ACCEPTED)?;
        let d = RedConfig::default();
        let min = kv.get::<Size>("min")?.map_or(d.min, |v| v.0);
        // Without a max, three times min (saturating: a min past the range is refused below).
        let max =
            kv.get::<Size>("max")?.map_or(if min == d.min { d.max } else { min.saturating_mul(3) }, |v| v.0);
        let max_p = kv.get::<Probability>("max-p")?.map_or(d.max_p, Probability::get);
        let weight = kv.get::<Number>("weight")?.map_or(d.weight, |n| n.0);
        let gentle = kv.get::<super::OnOff>("gentle")?.map_or(d.gentle, |g| g.0);
        kv.finish()?;
        if min == 0 || min >= max || max > crate::limits::MAX_QUEUE_BYTES {
            return Err(error(s, "needs 0 < min < max ≤ 1TiB", RED_ACCEPTED));
        }
        if max_p == 0.0 || weight <= 0.0 || weight > 1.0 {
            return Err(error(s, "needs max-p above 0 and a weight in (0, 1]", RED_ACCEPTED));
        }
        Ok(RedConfig { min, max, max_p, weight, gentle })
    }
}

/// A [`RedConfig`] as each arrival uses it: its thresholds as floats and its ramps' slopes
/// worked out once, so an arrival multiplies where the formula divides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ramp {
    min: f64,
    max: f64,
    max_p: f64,
    weight: f64,
    /// 1 − weight: the old average's share.
    keep: f64,
    gentle: bool,
    /// max-p / (max − min): the probability's rise per byte between `min` and `max`.
    slope: f64,
    /// (1 − max-p) / max: its rise per byte between `max` and twice `max` (gentle mode).
    gentle_slope: f64,
}

impl From<&RedConfig> for Ramp {
    fn from(c: &RedConfig) -> Ramp {
        let (min, max) = (c.min as f64, c.max as f64);
        Ramp {
            min,
            max,
            max_p: c.max_p,
            weight: c.weight,
            keep: 1.0 - c.weight,
            gentle: c.gentle,
            slope: c.max_p / (max - min),
            gentle_slope: (1.0 - c.max_p) / max,
        }
    }
}

/// What RED says of an arriving frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Admit,
    /// A probabilistic drop: an ECN-capable frame is marked instead when ECN is on.
    Early,
    /// The average is past the point where every frame is dropped.
    Forced,
}

/// RED's state: the average, the count since the last drop, and when the queue went idle.
#[derive(Clone, Debug, PartialEq)]
pub struct Red {
    avg: f64,
    /// Frames since the last early drop (−1 when the average is below `min`).
    count: i64,
    idle_since: Option<Nanos>,
    /// Transmission time of a full-size frame, RED's `s` for aging the average while idle.
    typical: f64,
}

impl Red {
    pub fn new(link: &LinkConfig) -> Red {
        let bits = link.wire_len(super::MTU) as f64 * 8.0;
        let typical = bits * 1e9 / link.mean_rate().bits_per_sec() as f64;
        Red { avg: 0.0, count: -1, idle_since: Some(Nanos::ZERO), typical: typical.max(1.0) }
    }

    /// The queue emptied at `now` (its last frame went to the wire).
    pub fn idle_from(&mut self, now: Nanos) {
        self.idle_since = Some(now);
    }

    /// A frame arrives at `now` and finds `queued` bytes waiting. Inlined into the
    /// discipline's enqueue (the idle aging's `powf` kept out of line): called per frame, it
    /// was a call taking and returning the frame's entry through memory.
    #[inline(always)]
    pub fn arrive(&mut self, ramp: &Ramp, queued: u64, now: Nanos, rng: &mut Rng) -> Verdict {
        match self.idle_since {
            // Floyd's aging over the idle time, from when the queue last went empty (nothing to
            // age, and no `powf` to pay, while the average is 0: a link below its rate).
            Some(since) if queued == 0 => {
                if self.avg > 0.0 {
                    self.age(ramp, now.saturating_sub(since));
                }
            }
            _ => self.avg = ramp.keep * self.avg + ramp.weight * queued as f64,
        }
        let pb = if self.avg < ramp.min {
            self.count = -1;
            return Verdict::Admit;
        } else if self.avg < ramp.max {
            (self.avg - ramp.min) * ramp.slope
        } else if ramp.gentle && self.avg < 2.0 * ramp.max {
            ramp.max_p + (self.avg - ramp.max) * ramp.gentle_slope
        } else {
            self.count = 0;
            return Verdict::Forced;
        };
        self.count += 1;
        // p_a = p_b / (1 − count · p_b), capped at 1; a draw u < 1 falls under it when
        // u · (1 − count · p_b) < p_b, without the division (always, once the denominator is
        // 0 or below). The draw is taken either way, so the stream of draws is the same.
        let denom = 1.0 - self.count as f64 * pb;
        let u = rng.unit();
        if denom <= 0.0 || u * denom < pb {
            self.count = 0;
            return Verdict::Early;
        }
        Verdict::Admit
    }

    /// Ages the average over `idle`, as if `idle / typical` frames had found the queue empty.
    #[cold]
    #[inline(never)]
    fn age(&mut self, ramp: &Ramp, idle: Nanos) {
        let m = idle.as_nanos() as f64 / self.typical;
        self.avg *= ramp.keep.powf(m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_defaults_and_ranges() {
        assert_eq!("red".parse::<RedConfig>().unwrap(), RedConfig::default());
        let c: RedConfig = "red,min=30kB,max-p=5%,gentle=off".parse().unwrap();
        assert_eq!((c.min, c.max, c.max_p, c.gentle), (30_000, 90_000, 0.05, false));
        for bad in ["red,min=0", "red,min=10kB,max=5kB", "red,weight=2", "red,max-p=0", "redx", "red,foo=1"] {
            assert!(bad.parse::<RedConfig>().is_err(), "{bad}");
        }
        // A min so large that three times it overflows is refused, not wrapped (found by the
        // specs fuzzer).
        let e = "red,min=7777777777777777777".parse::<RedConfig>().unwrap_err().to_string();
        assert!(e.contains("needs 0 < min < max ≤ 1TiB"), "{e}");
    }
}
