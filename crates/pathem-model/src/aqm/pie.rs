//! PIE (RFC 8033): a proportional-integral controller that, every `t_update`, moves a drop
//! probability by how far the queue delay is from `target` and how it moved since the last
//! update; arriving frames are dropped (or marked) with that probability.
//!
//! As RFC 8033's pseudo-code: the auto-tuning of the increment by the probability's
//! magnitude (§4.2), at most 2% per update above 10%, the decay by 2% per update while the
//! queue stays empty, the burst allowance (§4.4), the work-conserving safeguards of
//! `drop_early` and its de-randomisation (§5.1, accumulated probability), and ECN marking up
//! to a probability of 10%. The queue delay is measured with timestamps (§5.3): the sojourn
//! time of the last frame dequeued, 0 when the queue is empty at the update. PIE is always
//! active (the optional activation threshold of §5.1 is not modelled).

use crate::rng::Rng;
use crate::spec::{error, KeyValues, Number};
use crate::time::Nanos;
use crate::units::{Duration, UnitError};
use std::str::FromStr;

/// PIE's parameters (RFC 8033 §5: the defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PieConfig {
    /// QDELAY_REF, the target queue delay (15 ms).
    pub target: Nanos,
    /// T_UPDATE, the update interval (15 ms).
    pub t_update: Nanos,
    /// Integral and proportional gains in Hz (0.125 and 1.25).
    pub alpha: f64,
    pub beta: f64,
    /// MAX_BURST (150 ms).
    pub max_burst: Nanos,
    /// Probability above which ECN-capable frames are dropped, not marked (10%).
    pub max_ecn: f64,
    /// MEAN_PKTSIZE for the safeguard against dropping from an almost empty queue.
    pub mean_packet: u64,
}

impl Default for PieConfig {
    fn default() -> Self {
        PieConfig {
            target: Nanos::from_millis(15),
            t_update: Nanos::from_millis(15),
            alpha: 0.125,
            beta: 1.25,
            max_burst: Nanos::from_millis(150),
            max_ecn: 0.1,
            mean_packet: 1514,
        }
    }
}

const PIE_ACCEPTED: &str = "pie[,target=DUR][,t-update=DUR][,alpha=HZ][,beta=HZ][,max-burst=DUR] \
     (defaults 15ms, 15ms, 0.125, 1.25, 150ms; durations above 0 and up to 1h, gains up to 100)";

impl FromStr for PieConfig {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let body = s.trim().strip_prefix("pie").filter(|b| b.is_empty() || b.starts_with(','));
        let body = body.ok_or_else(|| error(s, "is not a PIE spec", PIE_ACCEPTED))?;
        let mut kv = KeyValues::parse(s, body, PIE_ACCEPTED)?;
        let d = PieConfig::default();
        let target = kv.get::<Duration>("target")?.map_or(d.target, |v| v.0);
        let t_update = kv.get::<Duration>("t-update")?.map_or(d.t_update, |v| v.0);
        let alpha = kv.get::<Number>("alpha")?.map_or(d.alpha, |v| v.0);
        let beta = kv.get::<Number>("beta")?.map_or(d.beta, |v| v.0);
        let max_burst = kv.get::<Duration>("max-burst")?.map_or(d.max_burst, |v| v.0);
        kv.finish()?;
        let bad_time = |t: Nanos| t > crate::limits::MAX_DELAY;
        if target == Nanos::ZERO
            || t_update == Nanos::ZERO
            || bad_time(target)
            || bad_time(t_update)
            || bad_time(max_burst)
        {
            return Err(error(s, "has a duration of 0 or over 1h", PIE_ACCEPTED));
        }
        if alpha > 100.0 || beta > 100.0 {
            return Err(error(s, "has a gain over 100", PIE_ACCEPTED));
        }
        Ok(PieConfig { target, t_update, alpha, beta, max_burst, ..d })
    }
}

/// PIE's state (RFC 8033's `drop_prob_`, `qdelay_old_`, `burst_allowance_`, `accu_prob_`).
#[derive(Clone, Debug, PartialEq)]
pub struct Pie {
    drop_prob: f64,
    qdelay: Nanos,
    qdelay_old: Nanos,
    burst_allowance: Nanos,
    accu_prob: f64,
    /// The last update changed nothing: until the queue changes, neither will the next.
    settled: bool,
}

impl Pie {
    pub fn new(cfg: &PieConfig) -> Pie {
        Pie {
            drop_prob: 0.0,
            qdelay: Nanos::ZERO,
            qdelay_old: Nanos::ZERO,
            burst_allowance: cfg.max_burst,
            settled: false,
            accu_prob: 0.0,
        }
    }

    pub fn probability(&self) -> f64 {
        self.drop_prob
    }

    /// A frame left the queue after waiting `sojourn`.
    #[inline]
    pub fn dequeued(&mut self, sojourn: Nanos) {
        self.qdelay = sojourn;
    }

    /// RFC 8033's enqueue test: true when the arriving frame is to be dropped (or marked),
    /// with `queued` bytes waiting.
    pub fn drop_early(&mut self, cfg: &PieConfig, queued: u64, rng: &mut Rng) -> bool {
        let half = Nanos(cfg.target.as_nanos() / 2);
        if (self.qdelay_old < half && self.drop_prob < 0.2) || queued <= 2 * cfg.mean_packet {
            return false;
        }
        if self.drop_prob == 0.0 {
            self.accu_prob = 0.0;
        }
        self.accu_prob += self.drop_prob;
        if self.accu_prob < 0.85 {
            return false;
        }
        if self.accu_prob >= 8.5 {
            return true;
        }
        if rng.unit() < self.drop_prob {
            self.accu_prob = 0.0;
            return true;
        }
        false
    }

    /// True once the burst allowance is used up (drops may start).
    pub fn burst_spent(&self) -> bool {
        self.burst_allowance == Nanos::ZERO
    }

    /// A frame was dropped at enqueue: the de-randomisation starts again.
    pub fn dropped(&mut self) {
        self.accu_prob = 0.0;
    }

    /// RFC 8033's `calculate_drop_prob`, every `t_update`; `empty`: the queue is empty now.
    pub fn update(&mut self, cfg: &PieConfig, empty: bool) {
        let before = (self.drop_prob, self.burst_allowance, self.qdelay_old);
        self.calculate(cfg, empty);
        self.settled = before == (self.drop_prob, self.burst_allowance, self.qdelay_old);
    }

    /// True when the last update changed nothing. An update reads only the state, the queue
    /// delay last measured and whether the queue is empty, none of which changes until a frame
    /// arrives or leaves: every update until then changes nothing either.
    pub fn settled(&self) -> bool {
        self.settled
    }

    fn calculate(&mut self, cfg: &PieConfig, empty: bool) {
        let qdelay = if empty { Nanos::ZERO } else { self.qdelay };
        let secs = |t: Nanos| t.as_nanos() as f64 / 1e9;
        let mut p =
            cfg.alpha * (secs(qdelay) - secs(cfg.target)) + cfg.beta * (secs(qdelay) - secs(self.qdelay_old));
        p /= match self.drop_prob {
            d if d < 0.000001 => 2048.0,
            d if d < 0.00001 => 512.0,
            d if d < 0.0001 => 128.0,
            d if d < 0.001 => 32.0,
            d if d < 0.01 => 8.0,
            d if d < 0.1 => 2.0,
            _ => 1.0,
        };
        if self.drop_prob >= 0.1 && p > 0.02 {
            p = 0.02;
        }
        self.drop_prob += p;
        if qdelay == Nanos::ZERO && self.qdelay_old == Nanos::ZERO {
            self.drop_prob *= 0.98;
        }
        self.drop_prob = self.drop_prob.clamp(0.0, 1.0);
        self.burst_allowance = self.burst_allowance.saturating_sub(cfg.t_update);
        let half = Nanos(cfg.target.as_nanos() / 2);
        if self.drop_prob == 0.0 && qdelay < half && self.qdelay_old < half {
            self.burst_allowance = cfg.max_burst;
        }
        self.qdelay_old = qdelay;
    }

    /// True when an update with an empty queue would change nothing.
    pub fn steady(&self, cfg: &PieConfig) -> bool {
        self.drop_prob == 0.0 && self.qdelay_old == Nanos::ZERO && self.burst_allowance == cfg.max_burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_defaults_and_ranges() {
        assert_eq!("pie".parse::<PieConfig>().unwrap(), PieConfig::default());
        let c: PieConfig = "pie,target=20ms,alpha=0.25".parse().unwrap();
        assert_eq!((c.target, c.alpha), (Nanos::from_millis(20), 0.25));
        for bad in
            ["pie,target=0ms", "pie,t-update=2h", "pie,alpha=1000", "pies", "pie,x=1", "pie,beta=1e-400"]
        {
            assert!(bad.parse::<PieConfig>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_standing_delay_above_target_raises_the_probability_and_an_empty_queue_decays_it() {
        let cfg = PieConfig::default();
        let mut pie = Pie::new(&cfg);
        for _ in 0..200 {
            pie.dequeued(Nanos::from_millis(40));
            pie.update(&cfg, false);
        }
        let high = pie.probability();
        assert!(high > 0.05, "{high}");
        for _ in 0..200 {
            pie.update(&cfg, true);
        }
        assert!(pie.probability() < high / 10.0, "{}", pie.probability());
    }
}
