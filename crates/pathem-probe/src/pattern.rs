//! When the probe sends: constant bit rate, bursts, or a Poisson process.

use pathem_model::units::{parse_duration, UnitError};
use pathem_model::{Nanos, Rng};
use std::str::FromStr;

const PATTERN_ACCEPTED: &str = "cbr, poisson, or burst:N,every=DUR (e.g. burst:10,every=1ms)";

/// The sending pattern.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pattern {
    /// One datagram every 1/rate.
    Cbr,
    /// Exponentially distributed gaps of mean 1/rate.
    Poisson,
    /// `n` datagrams back to back every `every`.
    Burst { n: u32, every: Nanos },
}

impl FromStr for Pattern {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Pattern, UnitError> {
        let bad =
            |reason: &str| UnitError { value: s.into(), reason: reason.into(), accepted: PATTERN_ACCEPTED };
        match s.trim() {
            "cbr" => Ok(Pattern::Cbr),
            "poisson" => Ok(Pattern::Poisson),
            t => {
                let Some(body) = t.strip_prefix("burst:") else { return Err(bad("is not a known pattern")) };
                let (n, every) = body.split_once(',').ok_or_else(|| bad("needs N,every=DUR"))?;
                let n: u32 =
                    n.trim().parse().map_err(|_| bad("needs a whole number of datagrams per burst"))?;
                let every = every.trim().strip_prefix("every=").ok_or_else(|| bad("needs every=DUR"))?;
                let every = parse_duration(every).map_err(|e| bad(&e.reason))?;
                if n == 0 || every == Nanos::ZERO {
                    return Err(bad("needs N above 0 and every above 0"));
                }
                Ok(Pattern::Burst { n, every })
            }
        }
    }
}

/// Send times, as offsets from the start.
pub struct Schedule {
    pattern: Pattern,
    /// Mean gap for cbr and poisson (ns, fractional).
    gap: f64,
    next: f64,
    index: u64,
    rng: Rng,
}

impl Schedule {
    /// `pps` datagrams per second on average (ignored by bursts, which set their own pace).
    pub fn new(pattern: Pattern, pps: f64, seed: u64) -> Schedule {
        Schedule { pattern, gap: 1e9 / pps, next: 0.0, index: 0, rng: Rng::seeded(seed) }
    }

    /// The send time of the next datagram.
    pub fn next_send(&mut self) -> Nanos {
        let at = match self.pattern {
            Pattern::Cbr => self.index as f64 * self.gap,
            Pattern::Poisson => {
                let t = self.next;
                self.next += -self.rng.unit_open0().ln() * self.gap;
                t
            }
            Pattern::Burst { n, every } => (self.index / u64::from(n)) as f64 * every.as_nanos() as f64,
        };
        self.index += 1;
        Nanos(at as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        let mut c = Schedule::new(Pattern::Cbr, 1000.0, 1);
        assert_eq!(
            (c.next_send(), c.next_send(), c.next_send()),
            (Nanos(0), Nanos(1_000_000), Nanos(2_000_000))
        );
        let mut b = Schedule::new("burst:3,every=1ms".parse().unwrap(), 0.0, 1);
        let t: Vec<Nanos> = (0..7).map(|_| b.next_send()).collect();
        assert_eq!(t, [0, 0, 0, 1, 1, 1, 2].map(Nanos::from_millis));
        let mut p = Schedule::new(Pattern::Poisson, 10_000.0, 1);
        let n = 100_000;
        let last = (0..n).map(|_| p.next_send()).last().unwrap();
        let mean_gap = last.as_nanos() as f64 / (n - 1) as f64;
        assert!((mean_gap / 100_000.0 - 1.0).abs() < 0.02, "{mean_gap}");
        for bad in ["zigzag", "burst:0,every=1ms", "burst:3", "burst:3,every=", "burst:x,every=1ms"] {
            assert!(bad.parse::<Pattern>().unwrap_err().to_string().contains("accepted"), "{bad}");
        }
    }
}
