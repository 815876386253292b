//! The two stages of a direction: ingress decides and copies, egress releases.
//!
//! Ingress does all the work of a frame once (TLEM §4.1): it asks the path for the frame's
//! fate, and copies a kept frame into the delay line with its absolute release time. Egress
//! only compares release times with `now` and hands due frames to the transmit port; a frame
//! that is not yet due never leaves early, and frames that are due together leave together.

use crate::delay_line::{Reader, Writer};
use crate::stats::Counters;
use pathem_io::{RxFrame, TxPort};
use pathem_model::{DropReason, FrameMeta, Nanos, Path, Rng, Verdict};
use std::sync::Arc;

/// Decides each frame's fate and writes kept frames into the delay line.
pub struct Ingress {
    path: Path,
    rng: Rng,
    line: Writer,
    counters: Arc<Counters>,
    max_frame: usize,
    /// Release time of the last frame written: later frames are never released before it.
    last_release: Nanos,
}

impl Ingress {
    pub fn new(path: Path, rng: Rng, line: Writer, counters: Arc<Counters>, max_frame: usize) -> Ingress {
        Ingress { path, rng, line, counters, max_frame, last_release: Nanos::ZERO }
    }

    /// The path, for reports and reconfiguration.
    pub fn path_mut(&mut self) -> &mut Path {
        &mut self.path
    }

    /// Bytes of the delay line in use.
    pub fn delay_line_used(&self) -> usize {
        self.line.used()
    }

    /// Takes one received frame.
    #[inline]
    pub fn push(&mut self, frame: RxFrame<'_>) {
        let c = &*self.counters;
        c.rx_packets.inc();
        c.rx_bytes.add(u64::from(frame.wire_len));
        if frame.data.len() > self.max_frame {
            c.drop(DropReason::Oversize);
            return;
        }
        let meta = FrameMeta { arrival: frame.arrival, len: frame.wire_len };
        let fwd = match self.path.process(meta, &mut self.rng) {
            Verdict::Drop(reason) => {
                c.drop(reason);
                return;
            }
            Verdict::Forward(fwd) => fwd,
        };
        let mut release = fwd.release;
        if release < self.last_release {
            c.reorder_clamped.inc();
            c.reorder_clamp_ns.add((self.last_release - release).as_nanos());
            release = self.last_release;
        }
        if self.line.push(release, frame.wire_len, frame.data, |_| {}) {
            self.last_release = release;
        } else {
            c.drop(DropReason::DelayLine);
        }
    }
}

/// Releases due frames from the delay line to a transmit port.
pub struct Egress {
    line: Reader,
    counters: Arc<Counters>,
}

/// At most this many frames leave in one call, so one direction cannot starve the other.
pub const EGRESS_BURST: usize = 256;

impl Egress {
    pub fn new(line: Reader, counters: Arc<Counters>) -> Egress {
        Egress { line, counters }
    }

    /// Hands every frame due at `now` (up to [`EGRESS_BURST`]) to `tx`, then flushes it.
    /// Returns how many left.
    #[inline]
    pub fn release<T: TxPort>(&mut self, now: Nanos, tx: &mut T) -> Result<usize, pathem_io::Error> {
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
            self.line.pop();
            n += 1;
        }
        if n > 0 {
            tx.flush()?;
        }
        Ok(n)
    }

    /// Release time of the next frame waiting, if any.
    #[inline]
    pub fn next_release(&mut self) -> Option<Nanos> {
        self.line.next_release()
    }
}
