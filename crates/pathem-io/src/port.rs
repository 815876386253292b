//! The burst interface every port implements.
//!
//! Receiving hands each frame to a closure while it still sits in the port's own buffer (a
//! UMEM frame, a packet-mmap slot, a file buffer), so the engine copies it exactly once, into
//! its delay line. Sending takes a borrowed frame; the port copies it into its transmit
//! buffer. Nothing on this path allocates, and nothing returns a `Result` per frame: a port
//! that fails keeps its first error and reports it from [`TxPort::flush`] or `recv_burst`.

use pathem_model::Nanos;

/// One received frame, borrowed from the port.
#[derive(Clone, Copy, Debug)]
pub struct RxFrame<'a> {
    /// When the frame arrived (capture timestamp offline, receive timestamp live).
    pub arrival: Nanos,
    /// Its length on the wire (the original length if the capture cut it).
    pub wire_len: u32,
    /// The bytes the port holds (all of them, or the captured part).
    pub data: &'a [u8],
}

/// When a port next has something to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollAt {
    /// Frames are waiting now.
    Now,
    /// The next frame is known to arrive at this instant (offline and synthetic sources).
    At(Nanos),
    /// Nothing known: a live port that is polled or waited on.
    Unknown,
    /// The source is exhausted and will never deliver again.
    Ended,
}

impl PollAt {
    /// A live port: `Now` when its last read filled the burst (more is waiting), else `Unknown`.
    pub fn live(burst_was_full: bool) -> PollAt {
        if burst_was_full {
            PollAt::Now
        } else {
            PollAt::Unknown
        }
    }
}

/// The receiving half of a port.
pub trait RxPort {
    /// Delivers up to `max` frames that have arrived by `now` to `f`, returning how many.
    fn recv_burst<F: FnMut(RxFrame<'_>)>(
        &mut self,
        now: Nanos,
        max: usize,
        f: F,
    ) -> Result<usize, crate::Error>;

    /// When this port next has frames for the engine.
    fn poll_at(&self) -> PollAt;

    /// Frames the kernel or the NIC dropped on their way to this port, before pathem could
    /// see them (a full socket buffer or ring), since the port was opened. May cost a system
    /// call: the engine asks every few milliseconds, not per burst.
    fn kernel_drops(&mut self) -> u64 {
        0
    }

    /// What the port did to frames a local sender left to the hardware (partial checksums
    /// completed, super-frames cut), and the frames it could not make wire frames of, since it
    /// was opened. Read with [`kernel_drops`](Self::kernel_drops), not per burst.
    fn offload(&self) -> crate::offload::OffloadCounts {
        crate::offload::OffloadCounts::default()
    }
}

/// The transmitting half of a port.
pub trait TxPort {
    /// Queues one frame for transmission; `release` is the instant the engine released it.
    /// Returns false when the port cannot take it now (its ring is full); the engine then
    /// keeps the frame and tries again later.
    fn send(&mut self, release: Nanos, wire_len: u32, data: &[u8]) -> bool;

    /// Pushes what `send` queued towards the wire and reports a failure since the last call.
    /// Frames the kernel does not take at once (a full device queue) stay in the port for the
    /// next flush; [`queued`](Self::queued) says how many.
    fn flush(&mut self) -> Result<(), crate::Error>;

    /// Frames `send` accepted that the kernel or NIC has not taken yet: they are in the port,
    /// not on their way. The engine flushes again while any are left.
    fn queued(&self) -> usize {
        0
    }
}

/// Software receive timestamps for a burst read at `now` (MoonEm §5.4): the last frame is
/// stamped `now`, each earlier one by the wire time of the frames after it at `line_rate`
/// bit/s (frame + 24 bytes of Ethernet framing). `len(k)` is frame k's length.
pub fn stamp_burst(now: Nanos, line_rate: u64, out: &mut [Nanos], len: impl Fn(usize) -> u64) {
    let mut behind = Nanos::ZERO;
    for k in (0..out.len()).rev() {
        out[k] = now.saturating_sub(behind);
        behind += Nanos((len(k) + 24) * 8 * 1_000_000_000 / line_rate.max(1));
    }
}

/// A burst's software stamps (see [`stamp_burst`]), worked out the first time a frame of the
/// burst has no better stamp: where the kernel or the XDP program stamps frames, the common
/// path never pays for them.
pub struct FallbackStamps<const N: usize> {
    now: Nanos,
    line_rate: u64,
    n: usize,
    stamps: Option<[Nanos; N]>,
}

impl<const N: usize> FallbackStamps<N> {
    /// For a burst of `n` frames (at most `N`) read at `now`.
    pub fn new(now: Nanos, line_rate: u64, n: usize) -> Self {
        FallbackStamps { now, line_rate, n, stamps: None }
    }

    /// Frame `k`'s stamp; `len(i)` is frame i's length.
    pub fn get(&mut self, k: usize, len: impl Fn(usize) -> u64) -> Nanos {
        let (now, line_rate, n) = (self.now, self.line_rate, self.n);
        self.stamps.get_or_insert_with(|| {
            let mut out = [Nanos::ZERO; N];
            stamp_burst(now, line_rate, &mut out[..n], len);
            out
        })[k]
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn burst_stamps_go_back_by_wire_time() {
        let mut out = [super::Nanos::ZERO; 3];
        // 1000 + 24 bytes at 8 Mbit/s = 1024 us per frame.
        super::stamp_burst(super::Nanos::from_millis(10), 8_000_000, &mut out, |_| 1000);
        assert_eq!(
            out,
            [
                super::Nanos(10_000_000 - 2_048_000),
                super::Nanos(10_000_000 - 1_024_000),
                super::Nanos(10_000_000)
            ]
        );
    }

    #[test]
    fn fallback_stamps_are_the_burst_stamps() {
        let mut lazy = super::FallbackStamps::<4>::new(super::Nanos::from_millis(10), 8_000_000, 3);
        assert_eq!(lazy.get(1, |_| 1000), super::Nanos(10_000_000 - 1_024_000));
        assert_eq!(lazy.get(0, |_| 1000), super::Nanos(10_000_000 - 2_048_000));
    }
}
