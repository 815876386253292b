//! The bytes of the frames a queue discipline holds, kept by ingress until the discipline
//! decides their fate.
//!
//! A frame the discipline queues is copied here at its arrival; when the discipline sends it,
//! ingress writes its record into the delay line with its release time (and any edits), as it
//! writes a drop-tail frame's, and gives its room here back; a frame the discipline drops
//! only gives its room back. Egress thus only ever sees decided records, in the order they
//! were decided.
//!
//! A ring of bytes with an entry per frame, numbered in the order kept: frames leave in any
//! order (FQ-CoDel and DualPI2 serve several queues), and room comes back as the oldest still
//! held leaves. Only ingress touches it: no atomics, no `unsafe`.

/// Frames a queue discipline holds, by number.
#[derive(Debug)]
pub struct Held {
    buf: Vec<u8>,
    /// Frames `front..next` by number, at `number & mask` (a power of two long, grown when
    /// full): where each frame's bytes start, how many, and whether it is still held. The
    /// front one is always still held.
    entries: Vec<Entry>,
    front: u64,
    next: u64,
    /// While any are held: where the oldest starts, where the newest starts and where it ends
    /// (a byte on for a frame of none), as `entries` say, kept here for [`room`](Self::room).
    tail: usize,
    newest: usize,
    head: usize,
    /// Frames held (entries still held).
    count: usize,
}

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    start: usize,
    /// A frame is at most 64 KiB (`EngineConfig::max_frame`).
    len: u32,
    held: bool,
}

impl Entry {
    /// Where its bytes end.
    #[inline(always)]
    fn end(&self) -> usize {
        self.start + self.len as usize
    }
}

/// Entries made for the first frame kept; more are made when more frames are held at once
/// (frames held number their oldest to their newest, with those given back out of order
/// between).
pub const FIRST_ENTRIES: usize = 4096;

impl Default for Held {
    fn default() -> Held {
        Held::new(0)
    }
}

impl Held {
    /// A store of `bytes`, its pages touched as they are first used (offline runs).
    pub fn new(bytes: usize) -> Held {
        Held {
            buf: vec![0; bytes],
            entries: Vec::new(),
            front: 0,
            next: 0,
            tail: 0,
            newest: 0,
            head: 0,
            count: 0,
        }
    }

    /// A store of `bytes` with every page touched now (live runs: the data path never takes
    /// a page fault on it).
    /// Its entries are made now too: one for each KiB of the store, at least
    /// [`FIRST_ENTRIES`], at most 2^20 (more are made only when more frames than that are
    /// held at once, holes between them counted).
    pub fn touched(bytes: usize) -> Held {
        let mut h = Held::new(bytes);
        touch(&mut h.buf);
        h.entries = vec![Entry::default(); (bytes / 1024).clamp(FIRST_ENTRIES, 1 << 20).next_power_of_two()];
        h
    }

    /// Bytes it can hold.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Frames it holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The number the next frame kept gets.
    #[inline(always)]
    pub fn next_number(&self) -> u64 {
        self.next
    }

    #[inline(always)]
    fn at(&self, number: u64) -> &Entry {
        &self.entries[number as usize & (self.entries.len() - 1)]
    }

    #[inline(always)]
    fn at_mut(&mut self, number: u64) -> &mut Entry {
        let mask = self.entries.len() - 1;
        &mut self.entries[number as usize & mask]
    }

    /// Where a frame of `len` bytes would go now, if there is room for it: for
    /// [`keep_at`](Self::keep_at), before which the store may only give frames back.
    #[inline(always)]
    pub fn room(&self, len: usize) -> Option<usize> {
        // Every frame takes at least a byte, so that the newest starts before the oldest
        // exactly when the ring has wrapped, even with frames of no bytes.
        let (cap, len) = (self.buf.len(), len.max(1));
        if len > u32::MAX as usize {
            return None;
        }
        if self.front == self.next {
            return (len <= cap).then_some(0);
        }
        let (tail, head) = (self.tail, self.head);
        if self.newest >= tail {
            // Not wrapped: after the newest, else from the start up to the oldest.
            if len <= cap - head {
                Some(head)
            } else {
                (len <= tail).then_some(0)
            }
        } else {
            // Wrapped: between the newest and the oldest.
            (len <= tail - head).then_some(head)
        }
    }

    /// Keeps `data` as frame [`next_number`](Self::next_number) at `start`, which
    /// [`room`](Self::room) gave for it (a frame of at most 4 GiB).
    #[inline]
    pub fn keep_at(&mut self, start: usize, data: &[u8]) {
        let len = u32::try_from(data.len()).expect("a frame that room() gave a place");
        self.buf[start..start + data.len()].copy_from_slice(data);
        if (self.next - self.front) as usize == self.entries.len() {
            self.more_entries();
        }
        *self.at_mut(self.next) = Entry { start, len, held: true };
        if self.front == self.next {
            self.tail = start;
        }
        (self.newest, self.head) = (start, start + data.len().max(1));
        self.next += 1;
        self.count += 1;
    }

    /// Keeps `data` as frame [`next_number`](Self::next_number); false (and nothing kept)
    /// when there is no room.
    #[cfg(test)]
    pub fn keep(&mut self, data: &[u8]) -> bool {
        let Some(start) = self.room(data.len()) else { return false };
        self.keep_at(start, data);
        true
    }

    /// Twice the entries (the first ones, at first), each moved to its place by the new mask.
    #[cold]
    #[inline(never)]
    fn more_entries(&mut self) {
        let mut entries = vec![Entry::default(); (self.entries.len() * 2).max(FIRST_ENTRIES)];
        let mask = entries.len() - 1;
        for n in self.front..self.next {
            entries[n as usize & mask] = *self.at(n);
        }
        self.entries = entries;
    }

    /// The bytes of frame `number`, while it is held.
    #[cfg(test)]
    pub fn get(&self, number: u64) -> Option<&[u8]> {
        if !(self.front..self.next).contains(&number) {
            return None;
        }
        let e = self.at(number);
        e.held.then(|| &self.buf[e.start..e.end()])
    }

    /// Gives frame `number`'s room back (once the oldest before it are given back too), and
    /// its bytes, which stay as they are until the next frame is kept; `None` when it was not
    /// held.
    #[inline]
    pub fn take(&mut self, number: u64) -> Option<&[u8]> {
        if !(self.front..self.next).contains(&number) {
            return None;
        }
        let e = self.at_mut(number);
        if !e.held {
            return None;
        }
        e.held = false;
        let (start, end) = (e.start, e.end());
        self.count -= 1;
        if number == self.front {
            self.front += 1;
            while self.front != self.next && !self.at(self.front).held {
                self.front += 1;
            }
            if self.front != self.next {
                self.tail = self.at(self.front).start;
            }
        }
        Some(&self.buf[start..end])
    }

    /// [`take`](Self::take) without the bytes: false when it was not held.
    pub fn give_back(&mut self, number: u64) -> bool {
        self.take(number).is_some()
    }

    /// Moves what it holds into `buf` (at least a byte more than what it holds, a byte for each
    /// frame of none), packed from its start; the frames keep their numbers.
    pub fn move_to(&mut self, mut buf: Vec<u8>) {
        let mut at = 0;
        for n in self.front..self.next {
            let mask = self.entries.len() - 1;
            let e = &mut self.entries[n as usize & mask];
            if e.held {
                let len = e.len as usize;
                buf[at..at + len].copy_from_slice(&self.buf[e.start..e.end()]);
                e.start = at;
                at += len.max(1);
            } else {
                (e.start, e.len) = (at, 0);
            }
        }
        self.buf = buf;
        if self.front != self.next {
            self.tail = self.at(self.front).start;
            let newest = *self.at(self.next - 1);
            (self.newest, self.head) = (newest.start, newest.start + (newest.len as usize).max(1));
        }
    }

    /// Bytes of the frames held.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        (self.front..self.next).map(|n| self.at(n)).filter(|e| e.held).map(|e| e.len as usize).sum()
    }
}

/// A buffer of `bytes` for a store to move to ([`Held::move_to`]), its pages touched, made
/// off the data path (the control side, a schedule's set-up); refused past the memory the
/// process may use.
pub fn buffer(bytes: usize) -> Result<Vec<u8>, crate::delay_line::AllocError> {
    crate::delay_line::fits_memory(bytes)?;
    let mut buf = vec![0; bytes];
    touch(&mut buf);
    Ok(buf)
}

/// Writes a byte in every page, so that the kernel maps them all now. (Not a zero: stores of
/// zero into memory that came zeroed may be left out by the compiler.)
fn touch(buf: &mut [u8]) {
    for b in buf.iter_mut().step_by(4096) {
        *b = 1;
    }
    std::hint::black_box(buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_given_back_in_order_free_their_room_and_wrap() {
        let mut h = Held::new(100);
        for i in 0..3u8 {
            assert_eq!(h.next_number(), u64::from(i));
            assert!(h.keep(&[i; 30]));
        }
        // 90 bytes held: 10 left at the end, none at the start.
        assert!(!h.keep(&[9; 20]));
        assert!(h.give_back(0));
        // The first 30 bytes are free again: a frame of 20 goes there.
        assert!(h.keep(&[3; 20]));
        assert_eq!(h.get(3), Some(&[3u8; 20][..]));
        assert_eq!(h.get(1), Some(&[1u8; 30][..]));
        assert!(!h.keep(&[4; 11]));
        assert!(h.keep(&[4; 10]));
        assert_eq!(h.len(), 4);
        for n in 1..=4 {
            assert!(h.give_back(n));
        }
        assert!(h.is_empty());
        assert!(h.keep(&[6; 100]));
    }

    #[test]
    fn a_frame_given_back_out_of_order_waits_for_the_oldest() {
        let mut h = Held::new(64);
        assert!(h.keep(&[0; 32]) && h.keep(&[1; 32]));
        assert!(h.give_back(1));
        // Frame 0 still pins the ring: no room until it leaves.
        assert!(h.room(1).is_none());
        assert_eq!(h.get(1), None);
        assert!(!h.give_back(1), "given back twice");
        assert!(h.give_back(0));
        assert_eq!(h.room(64), Some(0));
        assert!(!h.give_back(7), "never kept");
    }

    #[test]
    fn moved_to_a_larger_store_the_frames_keep_their_numbers_and_bytes() {
        let mut h = Held::new(64);
        assert!(h.keep(&[0; 20]) && h.keep(&[1; 20]) && h.keep(&[2; 20]));
        assert!(h.give_back(0) && h.give_back(1));
        assert!(h.keep(&[3; 30]));
        h.move_to(vec![0; 256]);
        assert_eq!(h.get(2), Some(&[2u8; 20][..]));
        assert_eq!(h.get(3), Some(&[3u8; 30][..]));
        assert_eq!((h.capacity(), h.bytes(), h.len()), (256, 50, 2));
        assert!(h.keep(&[4; 200]));
    }

    #[test]
    fn more_frames_than_entries_are_held_with_a_gap() {
        // Frame 0 pins the front while thousands pass: the entries grow, numbers stay.
        let mut h = Held::new(1 << 20);
        assert!(h.keep(&[7; 10]));
        for n in 1..3 * FIRST_ENTRIES as u64 {
            assert!(h.keep(&[(n % 200) as u8; 10]));
            if n % 2 == 0 {
                assert!(h.give_back(n));
            }
        }
        assert_eq!(h.get(0), Some(&[7u8; 10][..]));
        assert_eq!(h.get(3), Some(&[3u8; 10][..]));
        assert_eq!(h.get(4), None, "given back");
        assert!(h.give_back(0));
        assert_eq!(h.len(), 3 * FIRST_ENTRIES / 2);
    }

    #[test]
    fn empty_frames_are_kept_and_given_back() {
        // A frame of no bytes takes one.
        let mut h = Held::new(9);
        assert!(h.keep(&[]) && h.keep(&[1; 8]) && !h.keep(&[]));
        assert!(h.give_back(0) && h.keep(&[]));
        assert_eq!(h.get(2), Some(&[][..]));
        assert!(h.give_back(1) && h.give_back(2));
        assert!(h.is_empty());
    }

    proptest::proptest! {
        /// Any sequence of keeps and give-backs: every held frame reads back as kept, and the
        /// bytes held never exceed the capacity.
        #[test]
        fn held_frames_read_back_as_kept(ops in proptest::collection::vec((0usize..40, proptest::bool::ANY, 0usize..8), 1..300)) {
            let mut h = Held::new(128);
            let mut model: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
            for (len, keep, pick) in ops {
                if keep {
                    let n = h.next_number();
                    let data = vec![(n % 251) as u8; len];
                    if h.keep(&data) {
                        model.insert(n, data);
                    }
                } else if let Some(&n) = model.keys().nth(pick % model.len().max(1)) {
                    proptest::prop_assert!(h.give_back(n));
                    model.remove(&n);
                }
                proptest::prop_assert!(h.bytes() <= h.capacity());
                proptest::prop_assert_eq!(h.len(), model.len());
                for (n, data) in &model {
                    proptest::prop_assert_eq!(h.get(*n), Some(&data[..]));
                }
            }
        }
    }
}
