//! The bottleneck link: a rate, a per-frame overhead, and a drop-tail queue in front of it.
//!
//! The queue is not a real queue (TLEM §4.2): a frame's exit time follows from the previous
//! frame's, `t_exit(i) = max(t_exit(i-1), t_arrival(i)) + (len(i) + overhead) * 8 / rate`,
//! and what sits in the queue at any instant is the set of frames whose exit time is still
//! ahead. Transmission times are kept exact: the sub-nanosecond remainder of each frame carries
//! into the next one while the link stays busy, so a long busy period never drifts.

use crate::time::Nanos;
use crate::units::{QueueLimit, Rate};
use std::collections::VecDeque;

/// Ethernet framing not present in captured frames: preamble + SFD (8), FCS (4), gap (12).
pub const ETHERNET_OVERHEAD: u32 = 24;

/// What the user asked of the link.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    pub rate: Rate,
    /// Bytes added to every frame's length when computing its transmission time.
    pub overhead: u32,
    /// Drop-tail limit on the frames waiting for or in transmission; `None` = unbounded.
    pub queue: Option<QueueLimit>,
}

/// A frame still in the link: its exit time and its length in bytes (without overhead).
#[derive(Clone, Copy, Debug)]
struct InLink {
    exit: Nanos,
    len: u32,
}

/// The link's state: when the last admitted frame leaves, and which frames are still inside.
#[derive(Debug)]
pub struct Link {
    config: LinkConfig,
    last_exit: Nanos,
    /// Remainder of `bits * 1e9 / rate` not yet turned into whole nanoseconds.
    carry: u64,
    /// Only kept when the queue has a limit: frames admitted whose exit is still ahead.
    inside: VecDeque<InLink>,
    inside_bytes: u64,
    /// Transmission time of recently seen lengths as `(len, whole ns, remainder)`, so the
    /// common case costs no division; direct-mapped by length.
    tx_cache: [(u32, u64, u64); TX_CACHE],
}

const TX_CACHE: usize = 16;
const NO_LEN: u32 = u32::MAX;

impl Link {
    pub fn new(config: LinkConfig) -> Link {
        let reserve = match config.queue {
            Some(QueueLimit::Packets(n)) => n.min(1 << 16) as usize,
            Some(QueueLimit::Bytes(b)) => (b / 64).min(1 << 16) as usize + 1,
            None => 0,
        };
        Link {
            config,
            last_exit: Nanos::ZERO,
            carry: 0,
            inside: VecDeque::with_capacity(reserve),
            inside_bytes: 0,
            tx_cache: [(NO_LEN, 0, 0); TX_CACHE],
        }
    }

    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Swaps in a new configuration; frames already in the link keep their exit times.
    pub fn reconfigure(&mut self, config: LinkConfig) {
        self.carry = 0;
        self.tx_cache = [(NO_LEN, 0, 0); TX_CACHE];
        self.config = config;
    }

    /// `(len + overhead) × 8 s / rate` as whole nanoseconds and a remainder in 1/rate ns.
    #[inline]
    fn tx_time(&mut self, len: u32) -> (u64, u64) {
        let slot = &mut self.tx_cache[len as usize % TX_CACHE];
        if slot.0 != len {
            let rate = self.config.rate.bits_per_sec();
            let bit_ns = u64::from(len + self.config.overhead) * 8 * 1_000_000_000;
            *slot = (len, bit_ns / rate, bit_ns % rate);
        }
        (slot.1, slot.2)
    }

    /// Frames and bytes in the queue at `now` (frames whose exit time is still ahead).
    pub fn occupancy(&mut self, now: Nanos) -> (usize, u64) {
        self.expire(now);
        (self.inside.len(), self.inside_bytes)
    }

    fn expire(&mut self, now: Nanos) {
        while let Some(front) = self.inside.front() {
            if front.exit > now {
                break;
            }
            self.inside_bytes -= u64::from(front.len);
            self.inside.pop_front();
        }
    }

    /// Admits a frame of `len` bytes arriving at `arrival` and returns the time its last bit
    /// leaves the link, or `None` when the queue is full (drop-tail: the frame, counted with
    /// what is already inside, would exceed the limit).
    #[inline]
    pub fn admit(&mut self, arrival: Nanos, len: u32) -> Option<Nanos> {
        if let Some(limit) = self.config.queue {
            self.expire(arrival);
            let over = match limit {
                QueueLimit::Bytes(b) => self.inside_bytes + u64::from(len) > b,
                QueueLimit::Packets(n) => self.inside.len() as u64 + 1 > n,
            };
            if over {
                return None;
            }
        }
        let start = if arrival >= self.last_exit {
            self.carry = 0;
            arrival
        } else {
            self.last_exit
        };
        // (q + (r + carry) / rate) with r, carry < rate: at most one extra nanosecond.
        let (mut ns, r) = self.tx_time(len);
        self.carry += r;
        let rate = self.config.rate.bits_per_sec();
        if self.carry >= rate {
            self.carry -= rate;
            ns += 1;
        }
        let exit = start + Nanos(ns);
        self.last_exit = exit;
        if self.config.queue.is_some() {
            self.inside.push_back(InLink { exit, len });
            self.inside_bytes += u64::from(len);
        }
        Some(exit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(rate: &str, overhead: u32, queue: Option<&str>) -> Link {
        Link::new(LinkConfig {
            rate: rate.parse().unwrap(),
            overhead,
            queue: queue.map(|q| q.parse().unwrap()),
        })
    }

    #[test]
    fn exit_time_formula() {
        // 1000 B + 24 B at 8 Mbit/s = 1024 us.
        let mut l = link("8mbit", 24, None);
        assert_eq!(l.admit(Nanos(0), 1000), Some(Nanos::from_micros(1024)));
        // Arrives while the first is in transmission: queued behind it.
        assert_eq!(l.admit(Nanos(10), 1000), Some(Nanos::from_micros(2048)));
        // Arrives after the link went idle: starts at its arrival.
        assert_eq!(
            l.admit(Nanos::from_millis(10), 1000),
            Some(Nanos::from_millis(10) + Nanos::from_micros(1024))
        );
    }

    #[test]
    fn no_drift_over_a_long_busy_period() {
        // 64 + 24 B at 3 Gbit/s = 234.666… ns per frame: rounding per frame would drift.
        let mut l = link("3gbit", 24, None);
        let n: u64 = 10_000_000;
        let mut exit = Nanos(0);
        for _ in 0..n {
            exit = l.admit(Nanos(0), 64).unwrap();
        }
        let exact = n * 88 * 8 * 1_000_000_000 / 3_000_000_000;
        assert_eq!(exit, Nanos(exact));
    }

    #[test]
    fn mixed_lengths_match_the_exact_division() {
        // Lengths that collide in the cache and a rate that leaves remainders.
        let mut l = link("7mbit", 24, None);
        let rate = 7_000_000u128;
        let mut bits: u128 = 0;
        for i in 0..10_000u32 {
            let len = [60, 76, 1514, 92, 60 + 16 * (i % 7)][i as usize % 5];
            bits += u128::from(len + 24) * 8;
            let exit = l.admit(Nanos(0), len).unwrap();
            assert_eq!(u128::from(exit.as_nanos()), bits * 1_000_000_000 / rate, "frame {i}");
        }
    }

    #[test]
    fn queue_limit_in_packets_counts_the_arriving_frame() {
        // 1000 B at 8 Mbit/s, no overhead: 1 ms each. Limit of 3 frames inside.
        let mut l = link("8mbit", 0, Some("3pkt"));
        let admitted: Vec<bool> = (0..5).map(|_| l.admit(Nanos(0), 1000).is_some()).collect();
        assert_eq!(admitted, [true, true, true, false, false]);
        // At 1 ms the first has left: one place is free again.
        assert!(l.admit(Nanos::from_millis(1), 1000).is_some());
        assert!(l.admit(Nanos::from_millis(1), 1000).is_none());
        assert_eq!(l.occupancy(Nanos::from_millis(1)), (3, 3000));
        assert_eq!(l.occupancy(Nanos::from_millis(10)), (0, 0));
    }

    #[test]
    fn queue_limit_in_bytes() {
        let mut l = link("8mbit", 24, Some("2500B"));
        assert!(l.admit(Nanos(0), 1000).is_some());
        assert!(l.admit(Nanos(0), 1000).is_some());
        assert!(l.admit(Nanos(0), 1000).is_none(), "3000 B would exceed 2500 B");
        assert!(l.admit(Nanos(0), 500).is_some(), "2500 B exactly fits");
        assert!(l.admit(Nanos(0), 1).is_none());
    }
}
