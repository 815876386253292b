//! The two stages of a direction: ingress decides and copies, egress releases.
//!
//! Ingress does all the work of a frame once (TLEM §4.1): it asks the path for the frame's
//! fate, and copies a kept frame into the delay line with its absolute release time (a second
//! record for a duplicate; the bit flip or the CE mark applied to the copy). Egress only
//! compares release times with `now` and hands due frames to the transmit port; a frame that
//! is not yet due never leaves early, and frames that are due together leave together.
//!
//! Without reordering, release times are made non-decreasing at ingress, so the delay line is
//! a FIFO in release order. With reordering, egress keeps a min-heap of `(release, arrival
//! order)` over the records in the ring, releases each at its own time, and gives ring space
//! back as soon as the oldest records have all left: O(log n) per frame for any number of
//! frames in flight.

use crate::delay_line::{Reader, Slot, Writer};
use crate::stats::Counters;
use pathem_io::{RxFrame, TxPort};
use pathem_model::frame::{ecn_capable, mark_ce};
use pathem_model::path::Extra;
use pathem_model::{DropReason, FrameMeta, Nanos, Path, PathConfig, Rng, Verdict};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

/// Decides each frame's fate and writes kept frames into the delay line.
pub struct Ingress {
    path: Path,
    rng: Rng,
    line: Writer,
    counters: Arc<Counters>,
    max_frame: usize,
    ecn: bool,
    reorder: bool,
    /// Release time of the last frame written: later frames are never released before it
    /// unless reordering was asked for.
    last_release: Nanos,
}

impl Ingress {
    pub fn new(path: Path, rng: Rng, line: Writer, counters: Arc<Counters>, max_frame: usize) -> Ingress {
        Ingress {
            path,
            rng,
            line,
            counters,
            max_frame,
            ecn: false,
            reorder: false,
            last_release: Nanos::ZERO,
        }
    }

    /// Turns on ECN inspection (for `--ecn`) and reordering (for `--reorder`).
    pub fn with_options(mut self, ecn: bool, reorder: bool) -> Ingress {
        self.ecn = ecn;
        self.reorder = reorder;
        self
    }

    /// Applies a new configuration at `now`, between two frames; the models keep what state
    /// still means something (`Path::reconfigure`). The release-order clamp carries on.
    pub fn reconfigure(&mut self, config: &PathConfig, now: Nanos) {
        self.path.reconfigure(config, now);
        self.ecn = config.ecn;
    }

    /// Updates the occupancy gauges (every few milliseconds, never per frame).
    pub fn gauges(&mut self, now: Nanos) {
        let (frames, bytes) = self.path.queue_occupancy(now).unwrap_or((0, 0));
        self.counters.queue_frames.set(frames as u64);
        self.counters.queue_bytes.set(bytes);
        self.counters.delay_line_used.set(self.line.used() as u64);
    }

    /// Takes one received frame.
    #[inline(always)]
    pub fn push(&mut self, frame: RxFrame<'_>) {
        let c = &*self.counters;
        c.rx_packets.inc();
        c.rx_bytes.add(u64::from(frame.wire_len));
        if frame.data.len() > self.max_frame {
            c.drop(DropReason::Oversize);
            return;
        }
        let meta = FrameMeta {
            arrival: frame.arrival,
            len: frame.wire_len,
            caplen: frame.data.len() as u32,
            ect: self.ecn && ecn_capable(frame.data),
        };
        let fwd = match self.path.process(meta, &mut self.rng) {
            Verdict::Drop(reason) => {
                c.drop(reason);
                return;
            }
            Verdict::Forward(fwd) => fwd,
        };
        let mut release = fwd.release;
        if release < self.last_release && !self.reorder {
            c.reorder_clamped.inc();
            c.reorder_clamp_ns.add((self.last_release - release).as_nanos());
            release = self.last_release;
        }
        if let Some(extra) = fwd.extra {
            return self.push_extra(frame, release, extra);
        }
        if self.line.push(release, frame.wire_len, frame.data, |_| {}) {
            self.last_release = self.last_release.max(release);
            c.written.inc();
        } else {
            c.drop(DropReason::DelayLine);
        }
    }

    /// A frame that is marked, corrupted or duplicated: rare, so kept off the common path.
    #[cold]
    #[inline(never)]
    fn push_extra(&mut self, frame: RxFrame<'_>, release: Nanos, extra: Extra) {
        let c = &*self.counters;
        let edit = |bytes: &mut [u8]| {
            if extra.mark_ce {
                mark_ce(bytes);
            }
            if let Some(bit) = extra.corrupt_bit {
                bytes[(bit / 8) as usize] ^= 0x80 >> (bit % 8);
            }
        };
        if !self.line.push(release, frame.wire_len, frame.data, edit) {
            c.drop(DropReason::DelayLine);
            return;
        }
        c.written.inc();
        self.last_release = self.last_release.max(release);
        if extra.mark_ce {
            c.ecn_marked.inc();
        }
        if extra.corrupt_bit.is_some() {
            c.corrupted.inc();
        }
        if extra.duplicate {
            // The copy follows the original, uncorrupted (NetEm corrupts only the original).
            let copy_edit = |bytes: &mut [u8]| {
                if extra.mark_ce {
                    mark_ce(bytes);
                }
            };
            if self.line.push(release, frame.wire_len, frame.data, copy_edit) {
                c.duplicated.inc();
                c.written.inc();
            } else {
                c.drop(DropReason::DelayLine);
            }
        }
    }
}

/// Releases due frames from the delay line to a transmit port.
pub struct Egress {
    line: Reader,
    counters: Arc<Counters>,
    reorder: Option<Reorder>,
}

/// Egress state in reorder mode.
struct Reorder {
    /// Records waiting, by (release, arrival order), with their place in the ring.
    due: BinaryHeap<Reverse<(Nanos, u64, Slot)>>,
    /// From the oldest record still in the ring: (its place, sent yet).
    in_ring: VecDeque<(Slot, bool)>,
    /// Arrival-order number of `in_ring`'s front.
    front_seq: u64,
    next_seq: u64,
    /// Highest arrival-order number sent so far, to count reordered frames.
    max_sent: Option<u64>,
}

/// At most this many frames leave in one call, so one direction cannot starve the other.
pub const EGRESS_BURST: usize = 256;

impl Egress {
    pub fn new(line: Reader, counters: Arc<Counters>, reorder: bool) -> Egress {
        let reorder = reorder.then(|| Reorder {
            due: BinaryHeap::with_capacity(1 << 16),
            in_ring: VecDeque::with_capacity(1 << 16),
            front_seq: 0,
            next_seq: 0,
            max_sent: None,
        });
        Egress { line, counters, reorder }
    }

    /// Hands every frame due at `now` (up to [`EGRESS_BURST`]) to `tx`, then flushes it (also
    /// when only frames from an earlier round still wait in the port). Returns how many left.
    #[inline(always)]
    pub fn release<T: TxPort>(&mut self, now: Nanos, tx: &mut T) -> Result<usize, pathem_io::Error> {
        let n = match self.reorder.is_some() {
            false => self.release_in_order(now, tx),
            true => self.release_reordered(now, tx),
        };
        if n > 0 || self.counters.port_tx_queued.get() > 0 {
            tx.flush()?;
            self.counters.port_tx_queued.set(tx.queued() as u64);
        }
        Ok(n)
    }

    #[inline(always)]
    fn release_in_order<T: TxPort>(&mut self, now: Nanos, tx: &mut T) -> usize {
        let mut n = 0;
        while n < EGRESS_BURST {
            let Some(rec) = self.line.peek() else { break };
            if rec.release > now {
                break;
            }
            if !tx.send(rec.release, rec.wire_len, rec.data) {
                break;
            }
            self.counters.tx_packets.inc();
            self.counters.tx_bytes.add(u64::from(rec.wire_len));
            self.counters.late.record(now - rec.release);
            self.line.pop();
            n += 1;
        }
        n
    }

    fn scan(&mut self) {
        let r = self.reorder.as_mut().expect("reorder mode");
        while let Some((slot, release)) = self.line.scan_next() {
            r.due.push(Reverse((release, r.next_seq, slot)));
            r.in_ring.push_back((slot, false));
            r.next_seq += 1;
        }
    }

    #[inline(never)]
    fn release_reordered<T: TxPort>(&mut self, now: Nanos, tx: &mut T) -> usize {
        self.scan();
        let r = self.reorder.as_mut().expect("reorder mode");
        let mut n = 0;
        while n < EGRESS_BURST {
            let Some(&Reverse((release, seq, slot))) = r.due.peek() else { break };
            if release > now {
                break;
            }
            let rec = self.line.record_at(&slot).expect("a scanned record stays until it is consumed");
            if !tx.send(rec.release, rec.wire_len, rec.data) {
                break;
            }
            self.counters.tx_packets.inc();
            self.counters.tx_bytes.add(u64::from(rec.wire_len));
            self.counters.late.record(now - release);
            if r.max_sent.is_some_and(|m| seq < m) {
                self.counters.reordered.inc();
            }
            r.max_sent = Some(r.max_sent.map_or(seq, |m| m.max(seq)));
            r.due.pop();
            r.in_ring[(seq - r.front_seq) as usize].1 = true;
            n += 1;
        }
        let mut end = None;
        while let Some(&(slot, true)) = r.in_ring.front() {
            end = Some(slot);
            r.in_ring.pop_front();
            r.front_seq += 1;
        }
        if let Some(slot) = end {
            self.line.consume_through(&slot);
        }
        n
    }

    /// Release time of the next frame waiting, if any.
    #[inline]
    pub fn next_release(&mut self) -> Option<Nanos> {
        if self.reorder.is_none() {
            return self.line.next_release();
        }
        self.scan();
        self.reorder.as_ref().and_then(|r| r.due.peek().map(|Reverse((t, _, _))| *t))
    }
}
