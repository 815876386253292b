//! Transmission in slots (NetEm `slot`): frames leave only when a slot opens.
//!
//! A slot opens at S and carries the frames that were due by S, up to `packets` frames and
//! `bytes` bytes (unlimited when not set); when its budget is spent, the next slot opens a
//! uniform random time in [min, max] after S. A frame that becomes due after the scheduled
//! slot has opened (the medium went idle) starts a new slot a random [min, max] after its due
//! time, as NetEm does. This emulates media that aggregate (Wi-Fi, DOCSIS, LTE grants).
//!
//! The time between slots is uniform in [min, max] (`MIN[,MAX]`), or, as NetEm's
//! `slot distribution`, `delay + jitter · Z` with Z from a [`Dist`] (never below 0).

use crate::dist::Dist;
use crate::rng::Rng;
use crate::spec::{error, KeyValues, Number};
use crate::time::Nanos;
use crate::units::{parse_duration, Duration, Size, UnitError};
use std::str::FromStr;

const SLOT_ACCEPTED: &str = "MIN[,MAX][,packets=N][,bytes=SIZE], e.g. 800us,1ms,packets=32, or \
dist=DIST,delay=TIME,jitter=TIME[,packets=N][,bytes=SIZE] with DIST uniform, normal, pareto, paretonormal, \
exponential or tc:NAME";

/// The time from one slot to the next.
#[derive(Clone, Debug, PartialEq)]
pub enum Spacing {
    /// Uniform in [min, max].
    Uniform { min: Nanos, max: Nanos },
    /// `delay + jitter · Z`, Z from `dist` as for delays (NetEm's `slot distribution`).
    Dist { delay: Nanos, jitter: Nanos, dist: Dist },
}

/// What the user asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct SlotConfig {
    pub spacing: Spacing,
    pub packets: Option<u64>,
    pub bytes: Option<u64>,
}

impl SlotConfig {
    /// Slots every `min` to `max`, without a budget.
    pub fn uniform(min: Nanos, max: Nanos) -> SlotConfig {
        SlotConfig { spacing: Spacing::Uniform { min, max }, packets: None, bytes: None }
    }

    /// The `packets=N` and `bytes=SIZE` keys of a slot spec.
    fn budget(s: &str, kv: &mut KeyValues) -> Result<(Option<u64>, Option<u64>), UnitError> {
        let packets = match kv.get::<Number>("packets")? {
            Some(Number(n)) if n.fract() != 0.0 || n > crate::limits::MAX_SLOT_PACKETS as f64 => {
                return Err(error(
                    s,
                    format!("has packets={n}, not a whole number up to 2^32"),
                    SLOT_ACCEPTED,
                ))
            }
            n => n.map(|n| n.0 as u64),
        };
        let bytes = kv.get::<Size>("bytes")?.map(|b| b.0);
        if packets == Some(0) || bytes == Some(0) {
            return Err(error(s, "allows nothing per slot", SLOT_ACCEPTED));
        }
        Ok((packets, bytes))
    }

    /// The distribution form, `dist=DIST,delay=TIME,jitter=TIME[,packets=N][,bytes=SIZE]`.
    fn parse_dist(s: &str) -> Result<SlotConfig, UnitError> {
        let mut kv = KeyValues::parse(s, s, SLOT_ACCEPTED)?;
        let dist = kv.require::<Dist>("dist")?;
        let delay = kv.require::<Duration>("delay")?.0;
        let jitter = kv.require::<Duration>("jitter")?.0;
        let (packets, bytes) = Self::budget(s, &mut kv)?;
        kv.finish()?;
        if jitter == Nanos::ZERO {
            return Err(error(s, "has jitter=0: the distribution needs a spread", SLOT_ACCEPTED));
        }
        Ok(SlotConfig { spacing: Spacing::Dist { delay, jitter, dist }, packets, bytes })
    }

    /// The spec text that parses back to this config (`--slot`'s syntax); `None` for a
    /// distribution that is a table (written by the caller, who knows its file).
    pub fn spec(&self) -> Option<String> {
        let mut out = match &self.spacing {
            Spacing::Uniform { min, max } if min == max => format!("{min}"),
            Spacing::Uniform { min, max } => format!("{min},{max}"),
            Spacing::Dist { dist: Dist::Table(_) | Dist::Custom(_), .. } => return None,
            Spacing::Dist { delay, jitter, dist } => format!("dist={dist},delay={delay},jitter={jitter}"),
        };
        if let Some(p) = self.packets {
            out.push_str(&format!(",packets={p}"));
        }
        if let Some(b) = self.bytes {
            out.push_str(&format!(",bytes={b}B"));
        }
        Some(out)
    }
}

impl FromStr for SlotConfig {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        if s.trim_start().starts_with("dist=") {
            return Self::parse_dist(s);
        }
        let mut parts = s.splitn(3, ',');
        let min =
            parse_duration(parts.next().unwrap_or("")).map_err(|e| error(s, e.reason, SLOT_ACCEPTED))?;
        let mut rest = String::new();
        let mut max = min;
        if let Some(second) = parts.next() {
            if second.contains('=') {
                rest.push_str(second);
            } else {
                max = parse_duration(second).map_err(|e| error(s, e.reason, SLOT_ACCEPTED))?;
            }
        }
        if let Some(more) = parts.next() {
            rest.push(',');
            rest.push_str(more);
        }
        let mut kv = KeyValues::parse(s, &rest, SLOT_ACCEPTED)?;
        let (packets, bytes) = Self::budget(s, &mut kv)?;
        kv.finish()?;
        if max < min {
            return Err(error(s, "has MAX below MIN", SLOT_ACCEPTED));
        }
        Ok(SlotConfig { spacing: Spacing::Uniform { min, max }, packets, bytes })
    }
}

crate::deserialize_from_str!(SlotConfig);

impl std::fmt::Display for SlotConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.spacing {
            Spacing::Uniform { min, max } => write!(f, "slots every {min}..{max}")?,
            Spacing::Dist { delay, jitter, dist } => write!(f, "slots every {delay} ± {jitter} {dist}")?,
        }
        if let Some(p) = self.packets {
            write!(f, " up to {p} frames")?;
        }
        if let Some(b) = self.bytes {
            write!(f, " up to {b} B")?;
        }
        Ok(())
    }
}

/// Slot state.
#[derive(Clone, Debug)]
pub struct Slot {
    config: SlotConfig,
    next: Option<Nanos>,
    packets_left: u64,
    bytes_left: u64,
}

impl Slot {
    pub fn new(config: SlotConfig) -> Slot {
        Slot { config, next: None, packets_left: 0, bytes_left: 0 }
    }

    /// Takes over the schedule of the slots this one replaces: the next slot still opens
    /// when it was going to, with what is left of its budget (capped at this one's).
    pub fn inherit(&mut self, old: Slot) {
        self.next = old.next;
        self.packets_left = old.packets_left.min(self.config.packets.unwrap_or(u64::MAX));
        self.bytes_left = old.bytes_left.min(self.config.bytes.unwrap_or(u64::MAX));
    }

    fn gap(&self, rng: &mut Rng) -> Nanos {
        match &self.config.spacing {
            Spacing::Uniform { min, max } => {
                let span = max.as_nanos().saturating_sub(min.as_nanos());
                *min + Nanos(if span == 0 { 0 } else { rng.below(span + 1) })
            }
            Spacing::Dist { delay, jitter, dist } => {
                let z = dist.sample(rng);
                let d = match dist {
                    Dist::Table(_) => delay.as_nanos() as f64 + z,
                    _ => delay.as_nanos() as f64 + jitter.as_nanos() as f64 * z,
                };
                Nanos(if d > 0.0 { d as u64 } else { 0 })
            }
        }
    }

    fn open(&mut self, at: Nanos) {
        self.next = Some(at);
        self.packets_left = self.config.packets.unwrap_or(u64::MAX);
        self.bytes_left = self.config.bytes.unwrap_or(u64::MAX);
    }

    /// When a frame of `len` bytes that is due at `due` leaves.
    #[inline]
    pub fn release(&mut self, due: Nanos, len: u32, rng: &mut Rng) -> Nanos {
        let s = match self.next {
            Some(s) if due <= s => s,
            _ => {
                let s = due + self.gap(rng);
                self.open(s);
                s
            }
        };
        self.packets_left -= 1;
        self.bytes_left = self.bytes_left.saturating_sub(u64::from(len));
        if self.packets_left == 0 || self.bytes_left == 0 {
            let next = s + self.gap(rng);
            self.open(next);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec() {
        let s: SlotConfig = "800us,1ms,packets=32".parse().unwrap();
        assert_eq!(
            s,
            SlotConfig { packets: Some(32), ..SlotConfig::uniform(Nanos(800_000), Nanos(1_000_000)) }
        );
        let s: SlotConfig = "1ms,bytes=64KB".parse().unwrap();
        assert_eq!(
            s,
            SlotConfig { bytes: Some(64_000), ..SlotConfig::uniform(Nanos(1_000_000), Nanos(1_000_000)) }
        );
        let s: SlotConfig = "dist=normal,delay=2ms,jitter=500us,packets=4".parse().unwrap();
        assert_eq!(
            s.spacing,
            Spacing::Dist { delay: Nanos(2_000_000), jitter: Nanos(500_000), dist: Dist::Normal }
        );
        for text in [
            "800us,1ms,packets=32",
            "1ms,bytes=64000B",
            "dist=pareto,delay=2ms,jitter=1ms,packets=4,bytes=1500B",
        ] {
            let s: SlotConfig = text.parse().unwrap();
            assert_eq!(s.spec().unwrap().parse::<SlotConfig>(), Ok(s.clone()), "{text}");
        }
        for bad in [
            "",
            "1ms,500us",
            "1ms,packets=0",
            "1ms,frames=3",
            "soon",
            "1ms,packets=1.5",
            "1ms,packets=1e30",
            "dist=normal,delay=1ms",
            "dist=normal,delay=1ms,jitter=0ms",
            "dist=gamma,delay=1ms,jitter=1ms",
            "dist=tc:normal,delay=1ms,jitter=1ms",
        ] {
            assert!(bad.parse::<SlotConfig>().unwrap_err().to_string().contains("accepted"), "{bad}");
        }
    }

    #[test]
    fn slots_carry_at_most_their_budget_and_are_spaced_within_bounds() {
        let cfg: SlotConfig = "1ms,3ms,packets=5,bytes=4000B".parse().unwrap();
        let mut slot = Slot::new(cfg);
        let mut rng = Rng::seeded(2);
        // Frames due every 50 us: more than the slots can carry, so they queue for slots.
        let mut releases: Vec<(Nanos, u32)> = Vec::new();
        for i in 0..20_000u64 {
            let len = 500 + (i % 3) as u32 * 500;
            let r = slot.release(Nanos::from_micros(50 * i), len, &mut rng);
            assert!(r >= Nanos::from_micros(50 * i));
            releases.push((r, len));
        }
        let mut slots: Vec<(Nanos, u64, u64)> = Vec::new();
        for &(t, len) in &releases {
            match slots.last_mut() {
                Some(s) if s.0 == t => {
                    s.1 += 1;
                    s.2 += u64::from(len);
                }
                _ => slots.push((t, 1, u64::from(len))),
            }
        }
        for w in slots.windows(2) {
            let gap = w[1].0 - w[0].0;
            assert!(gap >= Nanos::from_millis(1) && gap <= Nanos::from_millis(3), "gap {gap}");
        }
        for s in &slots {
            assert!(s.1 <= 5, "{} frames in a slot", s.1);
            // The frame that crosses the byte budget still goes (NetEm sends, then checks).
            assert!(s.2 < 4000 + 1500, "{} bytes in a slot", s.2);
        }
        // Mean gap close to 2 ms.
        let mean = (slots.last().unwrap().0 - slots[0].0).as_nanos() as f64 / (slots.len() - 1) as f64;
        assert!((mean / 2e6 - 1.0).abs() < 0.03, "{mean}");
    }

    #[test]
    fn distributed_spacing_follows_its_distribution() {
        // Normal 2 ms ± 0.5 ms between slots of one frame each, frames due back to back.
        let cfg: SlotConfig = "dist=normal,delay=2ms,jitter=500us,packets=1".parse().unwrap();
        let mut slot = Slot::new(cfg);
        let mut rng = Rng::seeded(4);
        let releases: Vec<f64> =
            (0..100_000).map(|_| slot.release(Nanos(0), 100, &mut rng).as_nanos() as f64).collect();
        let gaps: Vec<f64> = releases.windows(2).map(|w| w[1] - w[0]).collect();
        let m = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - m) * (g - m)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((m / 2e6 - 1.0).abs() < 0.01 && (sd / 5e5 - 1.0).abs() < 0.02, "{m} {sd}");
        // A spread far above the mean: draws below zero open the next slot at once.
        let wide: SlotConfig = "dist=uniform,delay=1ms,jitter=3ms,packets=1".parse().unwrap();
        let mut slot = Slot::new(wide);
        let mut last = Nanos(0);
        for _ in 0..1000 {
            let r = slot.release(Nanos(0), 100, &mut rng);
            assert!(r >= last && r - last <= Nanos::from_millis(4));
            last = r;
        }
    }

    #[test]
    fn idle_medium_waits_for_a_new_slot() {
        let mut slot = Slot::new("2ms".parse().unwrap());
        let mut rng = Rng::seeded(1);
        assert_eq!(slot.release(Nanos(0), 100, &mut rng), Nanos::from_millis(2));
        assert_eq!(
            slot.release(Nanos::from_millis(1), 100, &mut rng),
            Nanos::from_millis(2),
            "waits for the open slot"
        );
        assert_eq!(slot.release(Nanos::from_millis(10), 100, &mut rng), Nanos::from_millis(12));
    }
}
