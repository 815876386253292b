//! The policer: a token bucket that drops what exceeds a rate (MoonEm §5.5).
//!
//! Tokens are bytes. The bucket holds at most `burst` bytes and fills at `rate`, computed from
//! the frames' arrival timestamps (never from a clock), exactly: tokens are kept in bit·ns so
//! no rounding accumulates. A frame passes when the bucket holds at least its length, and then
//! takes that many tokens; otherwise it is dropped and takes none. The bucket starts full.

use crate::spec::{error, KeyValues};
use crate::time::Nanos;
use crate::units::{Rate, Size, UnitError};
use std::str::FromStr;

const POLICE_ACCEPTED: &str = "RATE,burst=SIZE, e.g. 10mbit,burst=15KB";

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolicerConfig {
    pub rate: Rate,
    /// Bucket depth in bytes.
    pub burst: Size,
}

impl FromStr for PolicerConfig {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let (rate, rest) = s.split_once(',').unwrap_or((s, ""));
        let rate: Rate = rate.trim().parse().map_err(|e: UnitError| error(s, e.reason, POLICE_ACCEPTED))?;
        let mut kv = KeyValues::parse(s, rest, POLICE_ACCEPTED)?;
        let burst: Size = kv.require("burst")?;
        kv.finish()?;
        if burst.0 == 0 {
            return Err(error(s, "has burst 0: no frame could ever pass", POLICE_ACCEPTED));
        }
        Ok(PolicerConfig { rate, burst })
    }
}

crate::deserialize_from_str!(PolicerConfig);

impl std::fmt::Display for PolicerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "police {} burst {} B", self.rate, self.burst.0)
    }
}

/// A token bucket's state, in bit·ns (bytes × 8 × 10⁹) so refills are exact integers.
#[derive(Clone, Debug)]
pub struct Policer {
    rate: u64,
    cap: u64,
    tokens: u64,
    /// Time after which an idle bucket is full again, whatever it held.
    fill_time: u64,
    last: Option<Nanos>,
}

const NS: u64 = 1_000_000_000;

impl Policer {
    pub fn new(config: PolicerConfig) -> Policer {
        // Depths up to 2 GB fit: 2e9 × 8 × 1e9 < 2^64.
        let cap = config.burst.0.min(2_000_000_000) * 8 * NS;
        let rate = config.rate.bits_per_sec();
        Policer { rate, cap, tokens: cap, fill_time: cap / rate, last: None }
    }

    /// Takes over the state of the policer this one replaces at `now`: the tokens it held
    /// (refilled at its own rate up to `now`, then capped at this bucket's depth).
    pub fn inherit(&mut self, old: Policer, now: Nanos) {
        let mut old = old;
        old.refill(now);
        self.tokens = old.tokens.min(self.cap);
        self.last = old.last;
    }

    fn refill(&mut self, now: Nanos) {
        if let Some(last) = self.last {
            let dt = now.saturating_sub(last).as_nanos();
            // Below fill_time, rate × dt < cap: no overflow. Their sum may pass 2^64 with a
            // deep bucket (over 1.15 GB) while it is not full: it is then past the depth.
            self.tokens = match dt >= self.fill_time {
                true => self.cap,
                false => self.tokens.saturating_add(self.rate * dt).min(self.cap),
            };
        }
        self.last = Some(now.max(self.last.unwrap_or(now)));
    }

    /// True when a frame of `len` bytes arriving at `now` conforms (and takes its tokens).
    #[inline]
    pub fn admit(&mut self, now: Nanos, len: u32) -> bool {
        self.refill(now);
        let need = u64::from(len).saturating_mul(8 * NS);
        if self.tokens >= need {
            self.tokens -= need;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn spec() {
        let p: PolicerConfig = "10mbit,burst=15KB".parse().unwrap();
        assert_eq!((p.rate, p.burst), (Rate(10_000_000), Size(15_000)));
        for bad in ["10mbit", "10mbit,burst=0", "fast,burst=1KB", "10mbit,burst=1KB,x=1"] {
            assert!(bad.parse::<PolicerConfig>().unwrap_err().to_string().contains("accepted"), "{bad}");
        }
    }

    #[test]
    fn every_window_respects_rate_times_window_plus_burst() {
        // 8 Mbit/s = 1 B/us, 3000 B burst; offered: random sizes at ~2× the rate, in bursts.
        let cfg: PolicerConfig = "8mbit,burst=3000B".parse().unwrap();
        let mut pol = Policer::new(cfg);
        let mut rng = Rng::seeded(3);
        let mut t = 0u64;
        let mut passed: Vec<(u64, u64)> = Vec::new();
        for _ in 0..200_000 {
            t += rng.below(1_000); // mean gap 500 us
            let len = 64 + rng.below(1437) as u32; // mean ~750 B → ~1.5 B/us offered
            if pol.admit(Nanos::from_micros(t), len) {
                passed.push((t, u64::from(len)));
            }
        }
        // Sliding windows of several lengths over the passed frames.
        for window in [1_000u64, 10_000, 1_000_000] {
            let (mut lo, mut bytes) = (0, 0u64);
            for hi in 0..passed.len() {
                bytes += passed[hi].1;
                while passed[hi].0 - passed[lo].0 > window {
                    bytes -= passed[lo].1;
                    lo += 1;
                }
                assert!(bytes <= window + 3000, "window {window} us at {}: {bytes} B", passed[hi].0);
            }
        }
        // Long-run rate equals the configured rate (offered load is above it).
        let total: u64 = passed.iter().map(|p| p.1).sum();
        let rate = total as f64 / t as f64; // bytes per us = 8 Mbit/s
        assert!((rate - 1.0).abs() < 0.01, "long-run {rate} B/us");
    }

    #[test]
    fn the_deepest_bucket_refills_to_its_depth() {
        // 2 GB of burst is 1.6e19 bit·ns of tokens: a bucket nearly full and refilled after
        // 3 s at 1 Gbit/s holds tokens and refill whose sum passes 2^64.
        let mut pol = Policer::new("1gbit,burst=2GB".parse().unwrap());
        assert!(pol.admit(Nanos(0), 1514));
        let t = Nanos::from_secs(3);
        let mut passed = 0u64;
        while pol.admit(t, 1514) {
            passed += 1;
        }
        assert_eq!(passed, 2_000_000_000 / 1514, "a full bucket's worth of frames at once");
    }

    #[test]
    fn idle_bucket_refills_only_to_burst() {
        let mut pol = Policer::new("8mbit,burst=1500B".parse().unwrap());
        assert!(pol.admit(Nanos(0), 1500));
        assert!(!pol.admit(Nanos(0), 1));
        assert!(pol.admit(Nanos::from_micros(100), 100), "100 us refills 100 B");
        assert!(!pol.admit(Nanos::from_micros(100), 1));
        assert!(pol.admit(Nanos::from_secs(10), 1500));
        assert!(!pol.admit(Nanos::from_secs(10), 1), "a long idle time fills only to the burst");
    }
}
