//! A scripted receiving port for the engine's tests.

use pathem_io::offload::OffloadCounts;
use pathem_io::{PollAt, RxFrame, RxPort};
use pathem_model::Nanos;
use std::collections::VecDeque;

/// Frames arriving at set instants (offline-like: it says when the next comes), each tagged
/// in its first four bytes; counts how often it is asked for frames.
pub(crate) struct Frames {
    /// (arrival, tag) of the frames still to come.
    pub at: VecDeque<(Nanos, u32)>,
    /// Hands frames over every `batch` of time (all that arrived since), or as they arrive (0).
    pub batch: Nanos,
    /// Frames of 64 bytes, or of 64 + tag % 1437 (up to 1500).
    pub sized_by_tag: bool,
    /// Frames handed over per slot asked for: above 1, a port cutting super-frames (AF_PACKET
    /// and AF_XDP segment a local sender's 64 KB frame into up to 45).
    pub per_slot: usize,
    pub polls: u64,
    /// What it says of kernel drops and offloads.
    pub drops: u64,
    pub offload: OffloadCounts,
}

impl Frames {
    /// 64-byte frames at `at`, tagged 0, 1, 2… in order.
    pub fn at(at: impl IntoIterator<Item = Nanos>) -> Frames {
        Frames::tagged(at.into_iter().zip(0..))
    }

    /// 64-byte frames with the given arrivals and tags.
    pub fn tagged(frames: impl IntoIterator<Item = (Nanos, u32)>) -> Frames {
        Frames {
            at: frames.into_iter().collect(),
            batch: Nanos::ZERO,
            sized_by_tag: false,
            per_slot: 1,
            polls: 0,
            drops: 0,
            offload: OffloadCounts::default(),
        }
    }

    /// A frame's tag.
    pub fn tag(data: &[u8]) -> u32 {
        u32::from_be_bytes(data[..4].try_into().unwrap_or_default())
    }
}

impl RxPort for Frames {
    fn recv_burst<F: FnMut(RxFrame<'_>)>(
        &mut self,
        now: Nanos,
        max: usize,
        mut f: F,
    ) -> Result<usize, pathem_io::Error> {
        self.polls += 1;
        let mut n = 0;
        while n < max * self.per_slot && self.at.front().is_some_and(|&(t, _)| t <= now) {
            let (arrival, tag) = self.at.pop_front().unwrap_or_default();
            let len = if self.sized_by_tag { 64 + (tag % 1437) as usize } else { 64 };
            let mut data = [0u8; 1500];
            data[..4].copy_from_slice(&tag.to_be_bytes());
            f(RxFrame { arrival, wire_len: len as u32, data: &data[..len] });
            n += 1;
        }
        Ok(n)
    }

    fn poll_at(&self) -> PollAt {
        match self.at.front() {
            None => PollAt::Ended,
            Some(&(t, _)) if self.batch == Nanos::ZERO => PollAt::At(t),
            Some(&(t, _)) => PollAt::At(Nanos(t.as_nanos().next_multiple_of(self.batch.as_nanos()))),
        }
    }

    fn kernel_drops(&mut self) -> u64 {
        self.drops
    }

    fn offload(&self) -> OffloadCounts {
        self.offload
    }
}
