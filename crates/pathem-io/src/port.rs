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

    /// Every frame that arrived by the returned instant (at most `now`) has been handed over,
    /// when [`poll_at`](Self::poll_at) says none is waiting: a port that holds frames back
    /// (a fan-in merging queues read on other CPUs) says how far it is complete.
    fn delivered_until(&self, now: Nanos) -> Nanos {
        now
    }

    /// Frames the kernel or the NIC dropped on their way to this port, before pathem could
    /// see them (a full socket buffer or ring), since the port was opened. May cost a system
    /// call: the engine asks every few milliseconds, not per burst.
    fn kernel_drops(&mut self) -> u64 {
        0
    }

    /// Frames the kernel moved from the receive queue their flow hashes to onto another of
    /// this port's queues, because that one's ring was full (a packet fanout's rollover, as
    /// DPDK's net_af_packet sets it up with several queue pairs), since the port was opened.
    /// Read on another queue, such a frame can pass frames of its flow that arrived before
    /// it. Read with [`kernel_drops`](Self::kernel_drops), not per burst.
    fn rolled_over(&mut self) -> u64 {
        0
    }

    /// Frames the port read and did not hand over because they were not the path's (what the
    /// host itself sent on an attachment's TAP device, which goes to its descriptor, not its
    /// ring), since the port was opened. Read with [`kernel_drops`](Self::kernel_drops), not
    /// per burst.
    fn foreign(&self) -> u64 {
        0
    }

    /// What the port did to frames a local sender left to the hardware (partial checksums
    /// completed, super-frames cut), and the frames it could not make wire frames of, since it
    /// was opened. Read with [`kernel_drops`](Self::kernel_drops), not per burst.
    fn offload(&self) -> crate::offload::OffloadCounts {
        crate::offload::OffloadCounts::default()
    }
}

/// Why the kernel or NIC refused a frame handed to a transmitting port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxErrorClass {
    /// Longer than the interface takes (EMSGSIZE).
    TooLarge,
    /// No memory for it (ENOMEM), or taken and dropped by the kernel (ENOBUFS: a full device
    /// queue, a qdisc's drop).
    NoBuffer,
    /// The interface was down or gone (ENETDOWN, ENXIO, ENODEV).
    Down,
    /// Anything else.
    Other,
}

impl TxErrorClass {
    pub const ALL: [TxErrorClass; 4] =
        [TxErrorClass::TooLarge, TxErrorClass::NoBuffer, TxErrorClass::Down, TxErrorClass::Other];

    /// The name in statistics and JSON output.
    pub const fn name(self) -> &'static str {
        match self {
            TxErrorClass::TooLarge => "too_large",
            TxErrorClass::NoBuffer => "no_buffer",
            TxErrorClass::Down => "down",
            TxErrorClass::Other => "other",
        }
    }

    /// The class of a refusal by its errno.
    pub fn of_errno(errno: i32) -> TxErrorClass {
        match errno {
            libc::EMSGSIZE => TxErrorClass::TooLarge,
            libc::ENOMEM | libc::ENOBUFS => TxErrorClass::NoBuffer,
            libc::ENETDOWN | libc::ENXIO | libc::ENODEV => TxErrorClass::Down,
            _ => TxErrorClass::Other,
        }
    }
}

/// Frames a transmitting port accepted from `send` and the kernel or NIC then refused, since
/// the port was opened: never sent, whatever `send` said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxRefused {
    /// Frames by [`TxErrorClass`], in its order.
    pub frames: [u64; 4],
    /// Their bytes.
    pub bytes: u64,
    /// The errno of each class's last refusal (0 when the NIC gave none).
    pub errno: [i32; 4],
}

impl TxRefused {
    /// Counts one refused frame of `len` bytes.
    pub fn add(&mut self, class: TxErrorClass, errno: i32, len: usize) {
        self.frames[class as usize] += 1;
        self.bytes += len as u64;
        self.errno[class as usize] = errno;
    }

    /// Refuses a frame of `len` bytes handed to a port that cannot hold it, as a kernel
    /// refuses EMSGSIZE: the port takes it (`send` says true) and counts it here, never cuts
    /// it to fit or copies it past its buffer. The runtime caps frames below every port's
    /// size, so only another caller of [`TxPort::send`] meets this.
    pub fn too_large(&mut self, len: usize) {
        self.add(TxErrorClass::TooLarge, libc::EMSGSIZE, len);
    }

    pub fn total(&self) -> u64 {
        self.frames.iter().sum()
    }

    /// One line per class with refusals, naming the port `name` (with its MTU, where known)
    /// and the kernel's words: `3 frames too large for s1 (MTU 1500): Message too long (os
    /// error 90)`.
    pub fn describe(&self, name: &str, mtu: Option<u32>) -> Vec<String> {
        let mtu = mtu.map(|m| format!(" (MTU {m})")).unwrap_or_default();
        TxErrorClass::ALL
            .into_iter()
            .filter(|&c| self.frames[c as usize] > 0)
            .map(|c| {
                let n = self.frames[c as usize];
                let why = match self.errno[c as usize] {
                    0 => "the device's transmit errors".to_string(),
                    e => std::io::Error::from_raw_os_error(e).to_string(),
                };
                match c {
                    TxErrorClass::TooLarge => format!("{n} frames too large for {name}{mtu}: {why}"),
                    TxErrorClass::NoBuffer => {
                        format!("{n} frames not sent, dropped by the kernel on {name} (no memory, a full queue): {why}")
                    }
                    TxErrorClass::Down => format!("{n} frames not sent, {name} was down: {why}"),
                    TxErrorClass::Other => format!("{n} frames refused by {name}: {why}"),
                }
            })
            .collect()
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

    /// Frames [`send`](Self::send) accepted that the kernel or NIC refused, since the port was
    /// opened. The engine asks after every flush and takes them back out of what it counted
    /// as sent. A port whose count costs a system call may answer from a copy up to 10 ms old
    /// unless `fresh` (asked once, at the end).
    fn refused(&mut self, fresh: bool) -> TxRefused {
        let _ = fresh;
        TxRefused::default()
    }

    /// How far ahead of its release time the port wants each frame: a port that times frames
    /// on the wire itself (filler frames, [`crate::filler`]) takes them early; zero for the
    /// others, which are handed each frame when it is due.
    fn lead(&self) -> Nanos {
        Nanos::ZERO
    }

    /// Filler frames sent since the port was opened (with `--tx-timing filler`).
    fn fillers(&self) -> crate::filler::FillerCounts {
        crate::filler::FillerCounts::default()
    }
}

/// Frames a transmitting port holds until its next flush: `N` slots of one size, in the order
/// they were given. The port that hands frames to the kernel in system calls (AF_PACKET)
/// keeps one.
pub(crate) struct TxBatch<const N: usize> {
    slot: usize,
    bufs: Box<[u8]>,
    lens: [usize; N],
    queued: usize,
}

impl<const N: usize> TxBatch<N> {
    /// Room for `N` frames of up to `max_frame` bytes.
    pub(crate) fn new(max_frame: usize) -> Self {
        let slot = max_frame.next_multiple_of(64).max(64);
        TxBatch { slot, bufs: vec![0u8; slot * N].into_boxed_slice(), lens: [0; N], queued: 0 }
    }

    /// Copies `data` in behind the others; false when the batch is full. A frame longer than
    /// a slot is taken and counted in `refused` ([`TxRefused::too_large`]).
    pub(crate) fn push(&mut self, data: &[u8], refused: &mut TxRefused) -> bool {
        if data.len() > self.slot {
            refused.too_large(data.len());
            return true;
        }
        if self.queued == N {
            return false;
        }
        let (len, i) = (data.len(), self.queued);
        self.bufs[i * self.slot..i * self.slot + len].copy_from_slice(&data[..len]);
        self.lens[i] = len;
        self.queued += 1;
        true
    }

    /// Frames held.
    pub(crate) fn len(&self) -> usize {
        self.queued
    }

    /// Frame `i`'s bytes.
    pub(crate) fn frame(&self, i: usize) -> &[u8] {
        &self.bufs[i * self.slot..i * self.slot + self.lens[i]]
    }

    /// Frame `i`'s bytes, writable (for an iovec the kernel reads).
    pub(crate) fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.bufs[i * self.slot..i * self.slot + self.lens[i]]
    }

    /// Forgets the first `n` frames (sent or refused): the rest move to the front, in order.
    pub(crate) fn consume(&mut self, n: usize) {
        let n = n.min(self.queued);
        for (k, i) in (n..self.queued).enumerate() {
            let len = self.lens[i];
            self.bufs.copy_within(i * self.slot..i * self.slot + len, k * self.slot);
            self.lens[k] = len;
        }
        self.queued -= n;
    }
}

/// Software receive timestamps for a burst read at `now` (MoonEm §5.4): the last frame is
/// stamped `now`, each earlier one by the wire time of the frames after it at `line_rate`
/// bit/s (frame + 24 bytes of Ethernet framing). `len(k)` is frame k's length.
pub fn stamp_burst(now: Nanos, line_rate: u64, out: &mut [Nanos], len: impl Fn(usize) -> u64) {
    let mut behind = Nanos::ZERO;
    for k in (0..out.len()).rev() {
        out[k] = now.saturating_sub(behind);
        behind = behind.saturating_add(wire_time(len(k), line_rate));
    }
}

/// How long a frame of `len` bytes takes on a link of `line_rate` bit/s, with the 24 bytes of
/// Ethernet framing (preamble, FCS, gap): a frame read behind it in the same queue came at
/// least that much later.
pub fn wire_time(len: u64, line_rate: u64) -> Nanos {
    Nanos(len.saturating_add(24).saturating_mul(8_000_000_000) / line_rate.max(1))
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
    fn a_batch_keeps_frames_in_order_and_moves_the_rest_forward() {
        let mut b = super::TxBatch::<3>::new(100);
        let mut refused = super::TxRefused::default();
        let r = &mut refused;
        assert!(b.push(b"one", r) && b.push(b"two", r) && b.push(b"three", r));
        assert!(!b.push(b"four", r), "full");
        b.consume(1);
        assert_eq!((b.len(), b.frame(0), b.frame(1)), (2, &b"two"[..], &b"three"[..]));
        assert!(b.push(&[7u8; 200], r), "taken, refused: longer than a slot (128)");
        assert_eq!(b.len(), 2, "never cut to a slot and sent short");
        assert!(b.push(&[7u8; 128], r), "room again");
        assert_eq!(b.frame(2).len(), 128);
        b.consume(5);
        assert_eq!(b.len(), 0);
        assert_eq!(refused.frames[super::TxErrorClass::TooLarge as usize], 1);
        assert_eq!(refused.bytes, 200);
    }

    #[test]
    fn fallback_stamps_are_the_burst_stamps() {
        let mut lazy = super::FallbackStamps::<4>::new(super::Nanos::from_millis(10), 8_000_000, 3);
        assert_eq!(lazy.get(1, |_| 1000), super::Nanos(10_000_000 - 1_024_000));
        assert_eq!(lazy.get(0, |_| 1000), super::Nanos(10_000_000 - 2_048_000));
    }
}
