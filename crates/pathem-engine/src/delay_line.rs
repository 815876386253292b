//! The delay line: a contiguous single-producer/single-consumer byte ring of
//! `[descriptor | frame bytes]` records (TLEM §4.6).
//!
//! Ingress copies each kept frame into the ring once, behind a 16-byte descriptor holding its
//! release time; egress reads records in order and releases them when they are due. Memory is
//! one allocation made up front and sized from the bandwidth-delay product, so it scales with
//! bytes in flight rather than with buffer count × 2 KiB, and nothing allocates afterwards.
//!
//! Layout: every record starts on an 8-byte boundary and never wraps. When the space left
//! before the end of the ring is too short for the next record, the writer marks the rest
//! (`WRAP` descriptor, or nothing if fewer than 16 bytes remain) and starts again at offset 0.
//!
//! [`delay_line`] returns a `(Writer, Reader)` pair: "single producer, single consumer" is
//! enforced by ownership, and the two halves may live on different threads.

use pathem_model::Nanos;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Size of a record's descriptor: release time (u64), captured length (u32), wire length (u32).
pub const DESCRIPTOR: usize = 16;
/// Records start at multiples of this.
pub const ALIGN: usize = 8;
/// Captured-length value that marks "skip to the start of the ring".
const WRAP: u32 = u32::MAX;

/// Bytes a record of `len` frame bytes takes in the ring.
#[inline]
pub const fn record_size(len: usize) -> usize {
    DESCRIPTOR + ((len + ALIGN - 1) & !(ALIGN - 1))
}

/// Keeps the producer's and the consumer's positions on separate cache lines.
#[repr(align(64))]
struct CachePadded(AtomicUsize);

struct Shared {
    /// The ring's bytes, as u64 words so every record start is 8-byte aligned.
    buf: Box<[UnsafeCell<u64>]>,
    /// Capacity in bytes, a power of two.
    cap: usize,
    /// Consumer position: bytes consumed since creation (wrapping).
    head: CachePadded,
    /// Producer position: bytes produced since creation (wrapping).
    tail: CachePadded,
}

// SAFETY: the buffer is shared between exactly one Writer and one Reader. The writer only
// writes bytes in [tail, head + cap) and publishes them with a Release store of `tail`; the
// reader only reads bytes in [head, tail) after an Acquire load of `tail`, and gives them back
// with a Release store of `head` that the writer Acquire-loads before reusing them. No byte is
// ever accessed by both sides at once.
unsafe impl Sync for Shared {}
// SAFETY: see `Sync` above; `Shared` owns its buffer outright.
unsafe impl Send for Shared {}

impl Shared {
    fn base(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.buf.as_ptr()) as *mut u8
    }
}

/// The producing half, owned by the ingress stage.
pub struct Writer {
    shared: Arc<Shared>,
    tail: usize,
    /// Last `head` seen; refreshed only when the ring looks full.
    head_seen: usize,
    mask: usize,
}

/// The consuming half, owned by the egress stage.
pub struct Reader {
    shared: Arc<Shared>,
    head: usize,
    /// Last `tail` seen; refreshed only when the ring looks empty.
    tail_seen: usize,
    /// Size of the record `peek` last returned (0 when none), for `pop`.
    peeked: usize,
    /// Reorder mode: the position up to which records have been handed out by `scan_next`.
    scan: usize,
    mask: usize,
}

/// One record at the head of the ring, borrowed from it.
#[derive(Debug)]
pub struct Record<'a> {
    pub release: Nanos,
    pub wire_len: u32,
    pub data: &'a [u8],
}

/// Creates a delay line of at least `capacity` bytes (rounded up to a power of two, at least
/// large enough for two records of `max_frame` bytes). All its pages are touched now, so
/// the data path never takes a page fault on them.
pub fn delay_line(capacity: usize, max_frame: usize) -> (Writer, Reader) {
    let cap = capacity.max(2 * record_size(max_frame)).max(64).next_power_of_two();
    let words = cap / ALIGN;
    let mut v: Vec<UnsafeCell<u64>> = Vec::with_capacity(words);
    advise_huge_pages(v.as_mut_ptr() as *mut u8, cap);
    // Writing every word (rather than a zeroed allocation) makes the kernel back every page now.
    v.resize_with(words, || UnsafeCell::new(0));
    let shared = Arc::new(Shared {
        buf: v.into_boxed_slice(),
        cap,
        head: CachePadded(AtomicUsize::new(0)),
        tail: CachePadded(AtomicUsize::new(0)),
    });
    let mask = cap - 1;
    (
        Writer { shared: shared.clone(), tail: 0, head_seen: 0, mask },
        Reader { shared, head: 0, tail_seen: 0, peeked: 0, scan: 0, mask },
    )
}

/// Asks for transparent huge pages on the ring: a large delay line is walked end to end, and
/// 2 MiB pages spare a TLB miss every 4 KiB. Only a hint: failure changes nothing else.
fn advise_huge_pages(start: *mut u8, len: usize) {
    const PAGE: usize = 4096;
    let begin = (start as usize).div_ceil(PAGE) * PAGE;
    let end = (start as usize + len) / PAGE * PAGE;
    if end <= begin {
        return;
    }
    if let Some(ptr) = std::ptr::NonNull::new(begin as *mut std::ffi::c_void) {
        // SAFETY: [begin, end) lies inside the allocation just made for the ring, which nothing
        // else references yet; MADV_HUGEPAGE changes how pages are backed, never their contents.
        let _ =
            unsafe { nix::sys::mman::madvise(ptr, end - begin, nix::sys::mman::MmapAdvise::MADV_HUGEPAGE) };
    }
}

impl Writer {
    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.shared.cap
    }

    /// Bytes in use (records, their padding and skipped tails) as the writer last saw it.
    pub fn used(&self) -> usize {
        self.tail.wrapping_sub(self.shared.head.0.load(Ordering::Acquire))
    }

    /// Copies a frame into the ring behind its descriptor, lets `edit` change the copy (to
    /// corrupt or mark it), and publishes it. Returns false, changing nothing, when there is
    /// no room: the caller drops the frame and counts it.
    #[inline]
    pub fn push(&mut self, release: Nanos, wire_len: u32, data: &[u8], edit: impl FnOnce(&mut [u8])) -> bool {
        let cap = self.shared.cap;
        let need = record_size(data.len());
        let off = self.tail & self.mask;
        let to_end = cap - off;
        let skip = if to_end < need { to_end } else { 0 };
        let total = skip + need;
        if self.tail.wrapping_sub(self.head_seen) + total > cap {
            self.head_seen = self.shared.head.0.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head_seen) + total > cap {
                return false;
            }
        }
        let base = self.shared.base();
        let start = if skip > 0 {
            if to_end >= DESCRIPTOR {
                // SAFETY: [off, off + 16) lies inside the ring (to_end ≥ 16), is 8-aligned, and
                // is free: the check above proved [tail, tail + total) is not held by the reader.
                unsafe { write_descriptor(base.add(off), 0, WRAP, 0) };
            }
            0
        } else {
            off
        };
        // SAFETY: [start, start + need) lies inside the ring (need ≤ to_end, or start = 0 and
        // need ≤ cap since skip + need ≤ cap), is 8-aligned, and is free (checked above). `data`
        // is a separate allocation, so the copy does not overlap.
        let copy = unsafe {
            let rec = base.add(start);
            write_descriptor(rec, release.as_nanos(), data.len() as u32, wire_len);
            let dst = rec.add(DESCRIPTOR);
            std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len());
            std::slice::from_raw_parts_mut(dst, data.len())
        };
        edit(copy);
        // The ring is written far ahead of where it was last read: fetch the lines the next
        // records will land on before the stores need them.
        prefetch(base.wrapping_add((start + need + PREFETCH_AHEAD) & self.mask));
        self.tail = self.tail.wrapping_add(total);
        self.shared.tail.0.store(self.tail, Ordering::Release);
        true
    }
}

/// How far ahead of the head record the reader asks for cache lines: a long delay line is read
/// from memory, and the records after the head are the next ones needed.
const PREFETCH_AHEAD: usize = 512;

/// A cache hint for the line holding `at`; never faults, whatever the address.
#[inline(always)]
fn prefetch(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint that never dereferences for the program's semantics: it cannot
    // fault or change memory, even for an address outside any allocation.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// # Safety
/// `at` must be 8-aligned, inside the ring, with 16 writable bytes that no reader accesses.
#[inline(always)]
unsafe fn write_descriptor(at: *mut u8, release: u64, len: u32, wire_len: u32) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        (at as *mut u64).write(release);
        (at.add(8) as *mut u32).write(len);
        (at.add(12) as *mut u32).write(wire_len);
    }
}

impl Reader {
    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.shared.cap
    }

    /// True when no record is waiting.
    pub fn is_empty(&mut self) -> bool {
        self.peek().is_none()
    }

    /// The record at the head, if any, without consuming it.
    #[inline]
    pub fn peek(&mut self) -> Option<Record<'_>> {
        loop {
            if self.head == self.tail_seen {
                self.tail_seen = self.shared.tail.0.load(Ordering::Acquire);
                if self.head == self.tail_seen {
                    return None;
                }
            }
            let off = self.head & self.mask;
            let to_end = self.shared.cap - off;
            if to_end < DESCRIPTOR {
                // The writer skipped this tail without a marker.
                self.head = self.head.wrapping_add(to_end);
                continue;
            }
            let base = self.shared.base();
            // SAFETY: head != tail, so the writer published a descriptor at `off` (8-aligned,
            // inside the ring since to_end ≥ 16) and will not touch it until head passes it.
            let (release, len, wire_len) = unsafe {
                let rec = base.add(off);
                (
                    (rec as *const u64).read(),
                    (rec.add(8) as *const u32).read(),
                    (rec.add(12) as *const u32).read(),
                )
            };
            if len == WRAP {
                self.head = self.head.wrapping_add(to_end);
                continue;
            }
            self.peeked = record_size(len as usize);
            prefetch(base.wrapping_add((off + PREFETCH_AHEAD) & self.mask));
            // SAFETY: the writer published `len` bytes after the descriptor, within the ring,
            // before its Release store of tail that we Acquire-loaded; they stay untouched until
            // `pop` moves head past them, which needs `&mut self` and so ends this borrow.
            let data = unsafe { std::slice::from_raw_parts(base.add(off + DESCRIPTOR), len as usize) };
            return Some(Record { release: Nanos(release), wire_len, data });
        }
    }

    /// Reorder mode: the next record not yet scanned, as `(position, end, release)`. Records
    /// stay in the ring until [`consume_to`](Self::consume_to) moves past them.
    #[inline]
    pub fn scan_next(&mut self) -> Option<(usize, usize, Nanos)> {
        loop {
            if self.scan == self.tail_seen {
                self.tail_seen = self.shared.tail.0.load(Ordering::Acquire);
                if self.scan == self.tail_seen {
                    return None;
                }
            }
            let off = self.scan & self.mask;
            let to_end = self.shared.cap - off;
            if to_end < DESCRIPTOR {
                self.scan = self.scan.wrapping_add(to_end);
                continue;
            }
            // SAFETY: scan is in [head, tail): the writer published this descriptor (8-aligned,
            // inside the ring) and leaves it alone until head passes it.
            let (release, len) = unsafe {
                let rec = self.shared.base().add(off);
                ((rec as *const u64).read(), (rec.add(8) as *const u32).read())
            };
            if len == WRAP {
                self.scan = self.scan.wrapping_add(to_end);
                continue;
            }
            let pos = self.scan;
            self.scan = self.scan.wrapping_add(record_size(len as usize));
            return Some((pos, self.scan, Nanos(release)));
        }
    }

    /// Reorder mode: the record at a position `scan_next` returned and not yet consumed.
    #[inline]
    pub fn record_at(&self, pos: usize) -> Record<'_> {
        debug_assert!(pos.wrapping_sub(self.head) < self.shared.cap && pos != self.scan);
        let off = pos & self.mask;
        // SAFETY: `pos` came from `scan_next`, so a complete record was published there, and it
        // is not consumed yet (the caller only consumes positions it has finished with), so the
        // writer does not touch it while this borrow lives.
        unsafe {
            let rec = self.shared.base().add(off);
            let (release, len, wire_len) = (
                (rec as *const u64).read(),
                (rec.add(8) as *const u32).read(),
                (rec.add(12) as *const u32).read(),
            );
            Record {
                release: Nanos(release),
                wire_len,
                data: std::slice::from_raw_parts(rec.add(DESCRIPTOR), len as usize),
            }
        }
    }

    /// Reorder mode: gives the ring space up to `end` (an `end` from `scan_next`) back to the
    /// writer.
    #[inline]
    pub fn consume_to(&mut self, end: usize) {
        self.head = end;
        self.peeked = 0;
        self.shared.head.0.store(self.head, Ordering::Release);
    }

    /// Release time of the head record, if any.
    #[inline]
    pub fn next_release(&mut self) -> Option<Nanos> {
        self.peek().map(|r| r.release)
    }

    /// Consumes the record the last `peek` returned; does nothing if it returned none.
    #[inline]
    pub fn pop(&mut self) {
        if self.peeked == 0 && self.peek().is_none() {
            return;
        }
        self.head = self.head.wrapping_add(self.peeked);
        self.peeked = 0;
        self.shared.head.0.store(self.head, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(seed: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
    }

    #[test]
    fn record_alignment() {
        assert_eq!(record_size(0), 16);
        assert_eq!(record_size(1), 24);
        assert_eq!(record_size(8), 24);
        assert_eq!(record_size(60), 80);
        assert_eq!(record_size(64), 80);
        assert_eq!(record_size(1514), 16 + 1520);
        for len in 0..100 {
            assert_eq!(record_size(len) % ALIGN, 0);
            assert!(record_size(len) >= DESCRIPTOR + len);
        }
    }

    #[test]
    fn empty_then_one_then_empty() {
        let (mut w, mut r) = delay_line(1024, 100);
        assert!(r.peek().is_none());
        assert!(r.is_empty());
        assert!(w.push(Nanos(5), 70, &frame(1, 60), |_| {}));
        let rec = r.peek().unwrap();
        assert_eq!((rec.release, rec.wire_len, rec.data), (Nanos(5), 70, &frame(1, 60)[..]));
        r.pop();
        assert!(r.peek().is_none());
        r.pop(); // popping an empty ring is harmless
        assert_eq!(w.used(), 0);
    }

    #[test]
    fn full_ring_refuses_without_changing_anything() {
        let (mut w, mut r) = delay_line(1024, 100);
        assert_eq!(w.capacity(), 1024);
        // 80-byte records: 12 fit in 1024 bytes (960), the 13th needs 1040.
        let mut pushed = 0;
        while w.push(Nanos(pushed), 64, &frame(pushed as u8, 64), |_| {}) {
            pushed += 1;
        }
        assert_eq!(pushed, 12);
        assert!(!w.push(Nanos(99), 64, &frame(9, 64), |_| {}));
        // A smaller record still fits in the 64 bytes left.
        assert!(w.push(Nanos(12), 40, &frame(12, 40), |_| {}));
        for i in 0..13u64 {
            let rec = r.peek().unwrap();
            assert_eq!(rec.release, Nanos(i));
            assert_eq!(rec.data, &frame(i as u8, rec.data.len())[..]);
            r.pop();
        }
        assert!(r.peek().is_none());
    }

    #[test]
    fn wrap_around_with_and_without_marker() {
        // Capacity 512 (two records of 120 bytes). Records of 80 bytes: after 6 (480), 32
        // bytes remain → WRAP marker. Mixed sizes also leave 8-byte tails, skipped unmarked.
        for sizes in [vec![64usize; 40], vec![48, 72, 48, 72, 48, 72, 8, 100, 0, 33, 64, 90, 120, 1, 7]] {
            let (mut w, mut r) = delay_line(256, 120);
            assert_eq!(w.capacity(), 512);
            let mut expect = std::collections::VecDeque::new();
            for (i, &len) in sizes.iter().cycle().take(500).enumerate() {
                let f = frame(i as u8, len);
                while !w.push(Nanos(i as u64), len as u32, &f, |_| {}) {
                    let (t, want): (Nanos, Vec<u8>) = expect.pop_front().unwrap();
                    let rec = r.peek().unwrap();
                    assert_eq!((rec.release, rec.data), (t, &want[..]));
                    r.pop();
                }
                expect.push_back((Nanos(i as u64), f));
            }
            while let Some((t, want)) = expect.pop_front() {
                let rec = r.peek().unwrap();
                assert_eq!((rec.release, rec.data), (t, &want[..]));
                r.pop();
            }
            assert!(r.peek().is_none());
        }
    }

    #[test]
    fn edit_changes_only_the_copy() {
        let (mut w, mut r) = delay_line(1024, 100);
        let original = frame(0, 10);
        assert!(w.push(Nanos(1), 10, &original, |b| b[3] ^= 0x10));
        assert_eq!(r.peek().unwrap().data[3], original[3] ^ 0x10);
        assert_eq!(original, frame(0, 10));
    }

    #[test]
    fn two_threads_see_every_record_in_order() {
        let (mut w, mut r) = delay_line(4096, 300);
        let n = 200_000u64;
        let producer = std::thread::spawn(move || {
            for i in 0..n {
                let f = frame(i as u8, (i % 300) as usize);
                while !w.push(Nanos(i), i as u32, &f, |_| {}) {
                    std::hint::spin_loop();
                }
            }
        });
        let mut i = 0;
        while i < n {
            match r.peek() {
                Some(rec) => {
                    assert_eq!(rec.release, Nanos(i));
                    assert_eq!(rec.wire_len, i as u32);
                    assert_eq!(rec.data, &frame(i as u8, (i % 300) as usize)[..]);
                    r.pop();
                    i += 1;
                }
                None => std::hint::spin_loop(),
            }
        }
        producer.join().unwrap();
        assert!(r.peek().is_none());
    }

    proptest::proptest! {
        /// Any interleaving of pushes and pops behaves like a FIFO of the frames accepted, and a
        /// push is refused only when the frame does not fit in the free space.
        #[test]
        fn behaves_like_a_bounded_fifo(ops in proptest::collection::vec((0usize..300, proptest::bool::ANY), 1..400)) {
            let (mut w, mut r) = delay_line(1024, 300);
            let mut model = std::collections::VecDeque::new();
            let mut used = 0usize;
            for (i, (len, is_push)) in ops.into_iter().enumerate() {
                if is_push {
                    let f = frame(i as u8, len);
                    if w.push(Nanos(i as u64), len as u32, &f, |_| {}) {
                        model.push_back(f);
                        used += record_size(len);
                    } else {
                        // Refused: the record plus at most two skipped tails (the one in flight, the
                        // one it would leave), each shorter than a largest record, must overflow.
                        proptest::prop_assert!(used + record_size(len) + 2 * record_size(300) > w.capacity(), "refused at {} used", used);
                    }
                } else {
                    match (r.peek().map(|rec| rec.data.to_vec()), model.pop_front()) {
                        (Some(got), Some(want)) => {
                            proptest::prop_assert_eq!(got, want.clone());
                            used -= record_size(want.len());
                            r.pop();
                        }
                        (None, None) => {}
                        (got, want) => proptest::prop_assert!(false, "ring {:?} model {:?}", got.map(|g| g.len()), want.map(|w| w.len())),
                    }
                }
            }
        }
    }

    #[test]
    fn scan_and_consume_out_of_order() {
        let (mut w, mut r) = delay_line(512, 100);
        let mut pending = std::collections::VecDeque::new();
        let mut got = Vec::new();
        for round in 0..50u64 {
            for i in 0..3 {
                let id = round * 3 + i;
                if !w.push(Nanos(100 - i), id as u32, &frame(id as u8, 40 + i as usize * 20), |_| {}) {
                    panic!("ring should have room in round {round}");
                }
            }
            while let Some((pos, end, release)) = r.scan_next() {
                pending.push_back((pos, end, release));
            }
            // Release the three newest in reverse order of position, then consume all.
            let mut batch: Vec<_> = pending.drain(..).collect();
            batch.sort_by_key(|b| b.2);
            for (pos, _, _) in &batch {
                let rec = r.record_at(*pos);
                got.push(rec.wire_len);
                assert_eq!(rec.data, &frame(rec.wire_len as u8, rec.data.len())[..]);
            }
            let end = batch.iter().map(|b| b.1).max_by_key(|e| e.wrapping_sub(0)).unwrap();
            r.consume_to(end);
        }
        assert_eq!(got.len(), 150);
        assert_eq!(&got[..3], &[2, 1, 0]);
    }
}
