//! Transmission in slots (NetEm `slot`): frames leave only when a slot opens.
//!
//! A slot opens at S and carries the frames that were due by S, up to `packets` frames and
//! `bytes` bytes (unlimited when not set); when its budget is spent, the next slot opens a
//! uniform random time in [min, max] after S. A frame that becomes due after the scheduled
//! slot has opened (the medium went idle) starts a new slot a random [min, max] after its due
//! time, as NetEm does. This emulates media that aggregate (Wi-Fi, DOCSIS, LTE grants).

use crate::rng::Rng;
use crate::spec::{error, KeyValues, Number};
use crate::time::Nanos;
use crate::units::{parse_duration, Size, UnitError};
use std::str::FromStr;

const SLOT_ACCEPTED: &str = "MIN[,MAX][,packets=N][,bytes=SIZE], e.g. 800us,1ms,packets=32";

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlotConfig {
    pub min: Nanos,
    pub max: Nanos,
    pub packets: Option<u64>,
    pub bytes: Option<u64>,
}

impl FromStr for SlotConfig {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
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
        kv.finish()?;
        if max < min {
            return Err(error(s, "has MAX below MIN", SLOT_ACCEPTED));
        }
        if packets == Some(0) || bytes == Some(0) {
            return Err(error(s, "allows nothing per slot", SLOT_ACCEPTED));
        }
        Ok(SlotConfig { min, max, packets, bytes })
    }
}

crate::deserialize_from_str!(SlotConfig);

impl std::fmt::Display for SlotConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "slots every {}..{}", self.min, self.max)?;
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
        let span = self.config.max.as_nanos().saturating_sub(self.config.min.as_nanos());
        self.config.min + Nanos(if span == 0 { 0 } else { rng.below(span + 1) })
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
        assert_eq!((s.min, s.max, s.packets, s.bytes), (Nanos(800_000), Nanos(1_000_000), Some(32), None));
        let s: SlotConfig = "1ms,bytes=64KB".parse().unwrap();
        assert_eq!((s.min, s.max, s.bytes), (Nanos(1_000_000), Nanos(1_000_000), Some(64_000)));
        for bad in
            ["", "1ms,500us", "1ms,packets=0", "1ms,frames=3", "soon", "1ms,packets=1.5", "1ms,packets=1e30"]
        {
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
