//! Counters of one direction, written by the data path and readable from any thread.
//!
//! Each counter has exactly one writer (the stage that owns the event), so an increment is a
//! relaxed load and store, not an atomic read-modify-write: on x86 two plain moves, and no
//! cache line bounces between stages on different cores.

use pathem_model::DropReason;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonically increasing count with a single writer.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the counter's single writer may call this.
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
    #[inline(always)]
    pub fn inc(&self) {
        self.add(1)
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Everything one direction counts. Ingress writes the receive, drop and clamp counters;
/// egress writes the transmit counters.
#[derive(Debug, Default)]
pub struct Counters {
    pub rx_packets: Counter,
    pub rx_bytes: Counter,
    pub tx_packets: Counter,
    pub tx_bytes: Counter,
    pub dropped: [Counter; DropReason::ALL.len()],
    pub duplicated: Counter,
    pub corrupted: Counter,
    pub reorder_clamped: Counter,
    pub reorder_clamp_ns: Counter,
    pub ecn_marked: Counter,
    /// Written by egress: frames that left before a frame released earlier (reorder mode).
    pub reordered: Counter,
}

impl Counters {
    #[inline(always)]
    pub fn drop(&self, reason: DropReason) {
        self.dropped[reason as usize].inc();
    }

    /// A consistent-enough copy for reports (each value is exact; they are read one by one).
    pub fn snapshot(&self) -> Stats {
        let d = |r: DropReason| self.dropped[r as usize].get();
        let clamped = self.reorder_clamped.get();
        Stats {
            rx_packets: self.rx_packets.get(),
            rx_bytes: self.rx_bytes.get(),
            tx_packets: self.tx_packets.get(),
            tx_bytes: self.tx_bytes.get(),
            dropped: Dropped {
                loss: d(DropReason::Loss),
                queue: d(DropReason::Queue),
                police: d(DropReason::Police),
                ber: d(DropReason::Ber),
                delay_line: d(DropReason::DelayLine),
                oversize: d(DropReason::Oversize),
            },
            duplicated: self.duplicated.get(),
            corrupted: self.corrupted.get(),
            reorder_clamped: clamped,
            reorder_clamp_mean_ns: if clamped == 0 {
                0.0
            } else {
                self.reorder_clamp_ns.get() as f64 / clamped as f64
            },
            ecn_marked: self.ecn_marked.get(),
            reordered: self.reordered.get(),
        }
    }
}

/// Frames dropped, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Dropped {
    pub loss: u64,
    pub queue: u64,
    pub police: u64,
    pub ber: u64,
    pub delay_line: u64,
    pub oversize: u64,
}

impl Dropped {
    pub fn total(&self) -> u64 {
        self.loss + self.queue + self.police + self.ber + self.delay_line + self.oversize
    }
}

/// A snapshot of one direction's counters, as reported in JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub dropped: Dropped,
    pub duplicated: u64,
    pub corrupted: u64,
    /// Frames whose release time was moved later so that no frame overtakes another.
    pub reorder_clamped: u64,
    /// Mean time those frames were held back by the clamp.
    pub reorder_clamp_mean_ns: f64,
    /// Frames marked Congestion Experienced instead of being dropped.
    pub ecn_marked: u64,
    /// Frames sent after a frame that arrived later (only with `--reorder`).
    pub reordered: u64,
}

impl Stats {
    /// Frames still inside the emulator (in the delay line) when the snapshot was taken.
    pub fn in_flight(&self) -> u64 {
        (self.rx_packets + self.duplicated).saturating_sub(self.tx_packets + self.dropped.total())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_every_drop_reason() {
        let c = Counters::default();
        for (i, r) in DropReason::ALL.into_iter().enumerate() {
            c.dropped[r as usize].add(i as u64 + 1);
        }
        c.rx_packets.add(20);
        let s = c.snapshot();
        assert_eq!(s.dropped, Dropped { loss: 1, queue: 2, police: 3, ber: 4, delay_line: 5, oversize: 6 });
        assert_eq!(s.in_flight(), 0);
        let json = serde_json::to_value(&s).unwrap();
        for r in DropReason::ALL {
            assert!(json["dropped"][r.name()].is_u64(), "{}", r.name());
        }
    }
}
