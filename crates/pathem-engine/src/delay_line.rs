//! The delay line: a contiguous single-producer/single-consumer byte ring of
//! `[descriptor | frame bytes]` records (TLEM §4.6).
//!
//! Ingress copies each kept frame into the ring once, behind a 16-byte descriptor holding its
//! release time; egress reads records in order and releases them when they are due. Memory
//! scales with bytes in flight rather than with buffer count × 2 KiB, and nothing allocates
//! per frame.
//!
//! Two ways to make one:
//! - [`delay_line`] (live runs): one ring sized up front from the bandwidth-delay product,
//!   every page touched at creation, so the data path never takes a page fault;
//! - [`growing_delay_line`] (offline runs): a small ring that grows as frames pile up, up to a
//!   limit, with pages touched only as they are used, so a replay's memory follows the bytes
//!   actually in flight. When the ring is full the writer moves on to a larger one (a
//!   segment) and links it behind the old one; the reader finishes the old segment and
//!   follows the link, which frees it. The limit bounds the bytes of all live segments.
//!
//! Layout: every record starts on an 8-byte boundary and never wraps. When the space left
//! before the end of the ring is too short for the next record, the writer marks the rest
//! (`WRAP` descriptor, or nothing if fewer than 16 bytes remain) and starts again at offset 0.
//! It does the same early, past the first [`WINDOW`] bytes of a larger ring, whenever the
//! reader has taken every record, so a line holding little stays in the cache; the reader
//! gives a skipped end back as soon as it reaches it.
//!
//! Both return a `(Writer, Reader)` pair: "single producer, single consumer" is enforced by
//! ownership, and the two halves may live on different threads. Reorder mode reads records out
//! of order through [`Slot`] tokens; a token is checked against the ring before use, so no
//! argument to a safe function here can read outside the ring or race the writer.

use pathem_model::Nanos;
use std::alloc::Layout;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Size of a record's descriptor: release time (u64), captured length (u32), wire length (u32).
pub const DESCRIPTOR: usize = 16;
/// Records start at multiples of this.
pub const ALIGN: usize = 8;
/// Captured-length value that marks "skip to the start of the ring".
const WRAP: u32 = u32::MAX;
/// Longest frame a record can hold (far above any frame the engine accepts).
pub const MAX_RECORD_DATA: usize = 1 << 24;
/// A growing delay line starts this large (or at two of its largest records).
pub const INITIAL_GROWING: usize = 256 << 10;
/// A writer this far into a larger ring starts again at its start whenever the reader has
/// taken every record, so a line holding little walks this much memory, which stays in the
/// cache, rather than its whole ring, which a live line sizes for its worst case. (Smaller
/// under Miri, so its tests pass the window in a ring Miri walks in seconds.)
pub const WINDOW: usize = if cfg!(miri) { 16 << 10 } else { 256 << 10 };
/// How often, in bytes written past [`WINDOW`], the writer asks whether the reader caught up.
const PAGE: usize = 4096;

/// Bytes a record of `len` frame bytes takes in the ring.
#[inline]
pub const fn record_size(len: usize) -> usize {
    DESCRIPTOR + ((len + ALIGN - 1) & !(ALIGN - 1))
}

/// A delay line that could not be allocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot allocate a delay line of {bytes} bytes: {reason}")]
pub struct AllocError {
    pub bytes: usize,
    pub reason: String,
}

/// Keeps the producer's and the consumer's positions on separate cache lines.
#[repr(align(64))]
struct CachePadded(AtomicUsize);

/// One ring (a segment of a growing line).
struct Shared {
    /// The ring's bytes, as u64 words so every record start is 8-byte aligned.
    buf: Box<[UnsafeCell<u64>]>,
    /// Capacity in bytes, a power of two.
    cap: usize,
    /// Consumer position: bytes consumed since creation (wrapping).
    head: CachePadded,
    /// Producer position: bytes produced since creation (wrapping).
    tail: CachePadded,
    /// The segment the writer moved on to, set once after this one's last record was
    /// published (growing lines only).
    next: OnceLock<Arc<Shared>>,
}

// SAFETY: the buffer is shared between exactly one Writer and one Reader. The writer only
// writes bytes in [tail, head + cap) and publishes them with a Release store of `tail`; the
// reader only reads bytes in [head, tail) after an Acquire load of `tail`, and gives them back
// with a Release store of `head` that the writer Acquire-loads before reusing them. No byte is
// ever accessed by both sides at once. `next` is a OnceLock (itself Sync).
unsafe impl Sync for Shared {}
// SAFETY: see `Sync` above; `Shared` owns its buffer outright.
unsafe impl Send for Shared {}

impl Shared {
    fn new(cap: usize, touch: bool) -> Result<Arc<Shared>, AllocError> {
        Ok(Arc::new(Shared {
            buf: allocate(cap / ALIGN, touch)?,
            cap,
            head: CachePadded(AtomicUsize::new(0)),
            tail: CachePadded(AtomicUsize::new(0)),
            next: OnceLock::new(),
        }))
    }

    fn base(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.buf.as_ptr()) as *mut u8
    }
}

/// `words` zeroed u64 words. With `touch`, every page is written now (and transparent huge
/// pages asked for), so the data path never faults on them; without, the kernel maps pages
/// as they are first written.
fn allocate(words: usize, touch: bool) -> Result<Box<[UnsafeCell<u64>]>, AllocError> {
    let bytes = words * ALIGN;
    let fail = |reason: &str| AllocError { bytes, reason: reason.into() };
    let layout =
        Layout::array::<u64>(words).map_err(|_| fail("too large for this machine's address space"))?;
    if touch {
        fits_memory(bytes)?;
    }
    // SAFETY: the layout has a non-zero size (a ring is at least 64 bytes).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut UnsafeCell<u64>;
    if ptr.is_null() {
        return Err(fail("out of memory"));
    }
    // SAFETY: `ptr` is a fresh allocation from the global allocator with the layout of `words`
    // u64s, all zero; UnsafeCell<u64> has the layout of u64 (repr(transparent)), so the Box
    // frees it with the same layout.
    let buf: Box<[UnsafeCell<u64>]> =
        unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, words)) };
    if touch {
        let base = UnsafeCell::raw_get(buf.as_ptr()) as *mut u8;
        advise_huge_pages(base, bytes);
        const PAGE_WORDS: usize = 4096 / ALIGN;
        for w in (0..words).step_by(PAGE_WORDS) {
            // SAFETY: word w is inside the allocation just made, which nothing else references;
            // a volatile write of the zero it already holds makes the kernel back the page.
            unsafe { UnsafeCell::raw_get(buf.as_ptr().add(w)).write_volatile(0) };
        }
    }
    Ok(buf)
}

/// Whether a ring for `capacity` bytes of frames up to `max_frame` bytes could be made with
/// its pages touched (it fits the address space and the machine's memory), without making it.
pub fn can_touch(capacity: usize, max_frame: usize) -> Result<(), AllocError> {
    fits_memory(ring_size(capacity, record_size(max_frame.min(MAX_RECORD_DATA)))?)
}

/// Whether rings of `bytes` in all (every line a link makes, say), their pages touched, fit
/// the memory the process may use; without making them.
pub fn can_touch_all(bytes: usize) -> Result<(), AllocError> {
    fits_memory(bytes)
        .map_err(|e| AllocError { reason: format!("{}, for every path's line together", e.reason), ..e })
}

/// Refuses `bytes` of touched pages past the memory the process may use (rather than leave
/// them to the OOM killer).
pub(crate) fn fits_memory(bytes: usize) -> Result<(), AllocError> {
    if cfg!(miri) {
        return Ok(());
    }
    let machine = pathem_io::proc_kb("/proc/meminfo", "MemTotal").map(|m| (m, "the machine has"));
    let cgroup = cgroup_limit().map(|m| (m, "this process's cgroup may use"));
    match machine.into_iter().chain(cgroup).min_by_key(|m| m.0) {
        Some((most, whose)) if bytes as u64 > most => {
            Err(AllocError { bytes, reason: format!("{whose} {most} bytes of memory") })
        }
        _ => Ok(()),
    }
}

/// The memory limit of the process's cgroup (a container's), where one is set: cgroup v2's
/// `memory.max`, or v1's `memory.limit_in_bytes` (read at the cgroup's path, or at the
/// controller's root where a cgroup namespace makes that the process's own).
fn cgroup_limit() -> Option<u64> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let read = |file: String| std::fs::read_to_string(file).ok()?.trim().parse::<u64>().ok();
    groups.lines().find_map(|l| {
        let (_, rest) = l.split_once(':')?;
        let (controllers, path) = rest.split_once(':')?;
        let path = path.trim_end_matches('/');
        match controllers {
            "" => read(format!("/sys/fs/cgroup{path}/memory.max")),
            c if c.split(',').any(|c| c == "memory") => {
                read(format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"))
                    .or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes".into()))
            }
            _ => None,
        }
    })
}

/// Where a growing line may go, shared by its two halves.
struct Growth {
    /// Bytes of the segments allocated and not yet left by the reader.
    alive: AtomicUsize,
}

/// A ring made ahead of time for a fixed line, all its pages touched: the control thread
/// makes one for a change that needs a larger line, so the writer's thread only moves on to
/// it ([`Writer::take_ring`]) and never allocates.
pub struct Ring {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring").field("bytes", &self.shared.cap).finish()
    }
}

impl Ring {
    /// A ring of at least `capacity` bytes for frames up to `max_frame` bytes (sized as
    /// [`delay_line`] sizes one), its pages touched now.
    pub fn new(capacity: usize, max_frame: usize) -> Result<Ring, AllocError> {
        let max_record = record_size(max_frame.min(MAX_RECORD_DATA));
        Ok(Ring { shared: Shared::new(ring_size(capacity, max_record)?, true)? })
    }

    /// Its capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.shared.cap
    }
}

/// The capacity in bytes of the ring [`delay_line`] or [`Ring::new`] makes for `capacity`
/// bytes of frames up to `max_frame` bytes (`None` past the address space).
pub fn ring_capacity(capacity: usize, max_frame: usize) -> Option<usize> {
    ring_size(capacity, record_size(max_frame.min(MAX_RECORD_DATA))).ok()
}

/// Each delay line's identity, so a [`Slot`] from one is refused by another.
static NEXT_LINE: AtomicU64 = AtomicU64::new(1);

/// The producing half, owned by the ingress stage.
pub struct Writer {
    shared: Arc<Shared>,
    tail: usize,
    /// Last `head` seen; refreshed only when the ring looks full.
    head_seen: usize,
    mask: usize,
    /// Bytes of the largest record (two must fit a ring).
    max_record: usize,
    growth: Option<Arc<Growth>>,
    /// A record reaching past this offset takes the cold path: the ring's end, or past
    /// [`WINDOW`] a look at whether the reader has taken every record.
    ask_at: usize,
    /// The most the line may hold, in bytes: a growing line's largest total of live segments,
    /// a fixed line's ring.
    limit: usize,
}

/// The consuming half, owned by the egress stage.
pub struct Reader {
    line: u64,
    shared: Arc<Shared>,
    head: usize,
    /// Last `tail` seen; refreshed only when the ring looks empty.
    tail_seen: usize,
    /// Size of the record `peek` last returned (0 when none), for `pop`.
    peeked: usize,
    mask: usize,
    /// Number of the head's segment (0 for the first; growing lines count up).
    head_seg: u64,
    /// Reorder mode: segments after the head's that the scan has entered, oldest first.
    scan_segs: VecDeque<Arc<Shared>>,
    /// Reorder mode: the position up to which records have been handed out by `scan_next`,
    /// in the last segment (the head's when `scan_segs` is empty).
    scan: usize,
    growth: Option<Arc<Growth>>,
}

/// One record at the head of the ring, borrowed from it.
#[derive(Debug)]
pub struct Record<'a> {
    pub release: Nanos,
    pub wire_len: u32,
    pub data: &'a [u8],
}

/// Reorder mode: where a scanned record lies. Opaque: only [`Reader::scan_next`] makes one,
/// and the reader checks it (same line, not yet consumed, a whole record inside the ring)
/// before reading through it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Slot {
    line: u64,
    seg: u64,
    pos: usize,
    end: usize,
}

/// Creates a delay line of at least `capacity` bytes (rounded up to a power of two, at least
/// large enough for two records of `max_frame` bytes), all its pages touched now: for live
/// runs, whose data path must never take a page fault.
pub fn delay_line(capacity: usize, max_frame: usize) -> Result<(Writer, Reader), AllocError> {
    let max_record = record_size(max_frame.min(MAX_RECORD_DATA));
    let cap = ring_size(capacity, max_record)?;
    Ok(halves(Shared::new(cap, true)?, max_record, None))
}

/// Creates a delay line for offline runs: it starts small, grows (doubling) as frames pile
/// up, and holds at most `limit` bytes in all its segments; pages are touched as used.
pub fn growing_delay_line(limit: usize, max_frame: usize) -> Result<(Writer, Reader), AllocError> {
    growing_from(INITIAL_GROWING, limit, max_frame)
}

/// A growing line whose first segment holds `initial` bytes (tests use small ones).
fn growing_from(initial: usize, limit: usize, max_frame: usize) -> Result<(Writer, Reader), AllocError> {
    let max_record = record_size(max_frame.min(MAX_RECORD_DATA));
    let limit = ring_size(limit, max_record)?;
    let cap = ring_size(initial, max_record)?.min(limit);
    let growth = Arc::new(Growth { alive: AtomicUsize::new(cap) });
    let (mut writer, reader) = halves(Shared::new(cap, false)?, max_record, Some(growth));
    writer.limit = limit;
    Ok((writer, reader))
}

fn ring_size(capacity: usize, max_record: usize) -> Result<usize, AllocError> {
    capacity
        .max(2 * max_record)
        .max(64)
        .checked_next_power_of_two()
        .ok_or(AllocError { bytes: capacity, reason: "too large for this machine's address space".into() })
}

fn halves(shared: Arc<Shared>, max_record: usize, growth: Option<Arc<Growth>>) -> (Writer, Reader) {
    let mask = shared.cap - 1;
    let line = NEXT_LINE.fetch_add(1, Ordering::Relaxed);
    (
        Writer {
            shared: shared.clone(),
            tail: 0,
            head_seen: 0,
            mask,
            max_record,
            growth: growth.clone(),
            ask_at: WINDOW.min(mask + 1),
            limit: mask + 1,
        },
        Reader {
            line,
            shared,
            head: 0,
            tail_seen: 0,
            peeked: 0,
            mask,
            head_seg: 0,
            scan_segs: VecDeque::new(),
            scan: 0,
            growth,
        },
    )
}

/// Asks for transparent huge pages on the ring: a large delay line is walked end to end, and
/// 2 MiB pages spare a TLB miss every 4 KiB. Only a hint: failure changes nothing else.
fn advise_huge_pages(start: *mut u8, len: usize) {
    const PAGE: usize = 4096;
    let begin = (start as usize).div_ceil(PAGE) * PAGE;
    let end = (start as usize + len) / PAGE * PAGE;
    if end <= begin || cfg!(miri) {
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
    /// Capacity in bytes of the segment being written (the whole ring for a fixed line).
    pub fn capacity(&self) -> usize {
        self.shared.cap
    }

    /// Bytes the line may hold at most (its limit when it grows).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// True when the line can hold `bytes` (what a path keeps in flight) as it is: its ring
    /// (a live line's, fixed) is that large.
    pub fn holds(&self, bytes: usize) -> bool {
        ring_size(bytes, self.max_record).is_ok_and(|want| want <= self.limit())
    }

    /// Moves a line on to `ring` when it is larger than the ring being written: records go
    /// there from now on, and the reader follows once it has read every record written
    /// before. A ring no larger, or one too small for two records, is dropped and nothing
    /// changes. True when the line moved on.
    pub fn take_ring(&mut self, ring: Ring) -> bool {
        if ring.shared.cap <= self.shared.cap || ring.shared.cap < 2 * self.max_record {
            return false;
        }
        // Only a live line is handed rings; an offline one grows by itself up to its limit.
        debug_assert!(self.growth.is_none(), "a growing line is never handed a ring");
        self.limit = self.limit.max(ring.shared.cap);
        self.move_to(ring.shared);
        true
    }

    /// Hands `next` to the reader behind every record written so far and writes there.
    fn move_to(&mut self, next: Arc<Shared>) {
        // Every record of the old segment reaches the reader before it can see `next`.
        self.publish();
        // Published after every record of the old segment (the tail store above): a reader
        // that sees `next` and an empty old segment has seen them all.
        let _ = self.shared.next.set(next.clone());
        self.mask = next.cap - 1;
        self.shared = next;
        self.tail = 0;
        self.head_seen = 0;
        self.ask_at = WINDOW.min(self.shared.cap);
    }

    /// Bytes in use in the segment being written, as the writer last saw it.
    pub fn used(&self) -> usize {
        self.tail.wrapping_sub(self.shared.head.0.load(Ordering::Acquire))
    }

    /// Copies a frame into the ring behind its descriptor, lets `edit` change the copy (to
    /// corrupt or mark it), and publishes it. Returns false, changing nothing, when there is
    /// no room (or the frame is longer than [`MAX_RECORD_DATA`]): the caller drops the frame
    /// and counts it.
    #[inline(always)]
    pub fn push(&mut self, release: Nanos, wire_len: u32, data: &[u8], edit: impl FnOnce(&mut [u8])) -> bool {
        self.write(release, wire_len, data, edit, true)
    }

    /// As [`push`](Self::push), but the record reaches the reader only with the next
    /// [`publish`](Self::publish) (or `push`): a writer handing over a burst at once spares
    /// the reader's core a cache line per record.
    #[inline]
    pub fn push_unpublished(&mut self, release: Nanos, wire_len: u32, data: &[u8]) -> bool {
        self.write(release, wire_len, data, |_| {}, false)
    }

    /// Hands the records written so far to the reader.
    #[inline]
    pub fn publish(&mut self) {
        self.shared.tail.0.store(self.tail, Ordering::Release);
    }

    #[inline(always)]
    fn write(
        &mut self,
        release: Nanos,
        wire_len: u32,
        data: &[u8],
        edit: impl FnOnce(&mut [u8]),
        publish: bool,
    ) -> bool {
        let need = record_size(data.len());
        if data.len() > MAX_RECORD_DATA || need > self.max_record {
            return false;
        }
        let start = match self.reserve(need) {
            Some(start) => start,
            None if self.growth.is_some() && self.grow() => match self.reserve(need) {
                Some(start) => start,
                None => return false,
            },
            None => return false,
        };
        let base = self.shared.base();
        // SAFETY: `reserve` proved [start, start + need) lies inside the ring, is 8-aligned and
        // is not held by the reader. `data` is a separate allocation, so the copy does not
        // overlap.
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
        prefetch_ahead(base, start, need, self.mask);
        if publish {
            self.publish();
        }
        true
    }

    /// True when a frame of `len` bytes fits, growing a growing line first if it must: a
    /// [`push`](Self::push) of that length right after succeeds (only the writer takes room;
    /// the reader only gives it back). For a caller that must know before it commits to the
    /// frame (a link that would schedule it).
    #[inline(always)]
    pub fn make_room(&mut self, len: usize) -> bool {
        let need = record_size(len);
        if len > MAX_RECORD_DATA || need > self.max_record {
            return false;
        }
        self.fits(need) || (self.growth.is_some() && self.grow() && self.fits(need))
    }

    /// True when a record of `need` bytes fits in the segment being written.
    #[inline]
    fn fits(&mut self, need: usize) -> bool {
        self.room_for(need).is_some()
    }

    /// Bytes a record of `need` bytes takes from the tail on (with the end of the ring it
    /// skips when it would not fit before it), when that much is free.
    #[inline]
    fn room_for(&mut self, need: usize) -> Option<usize> {
        let cap = self.shared.cap;
        let off = self.tail & self.mask;
        let total = if off + need > self.ask_at { self.past_ask_at(off, need) } else { need };
        if self.tail.wrapping_sub(self.head_seen) + total > cap {
            self.head_seen = self.shared.head.0.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head_seen) + total > cap {
                return None;
            }
        }
        Some(total)
    }

    /// The bytes a record of `need` bytes at `off` takes, past [`ask_at`](Self::ask_at): the
    /// rest of the ring too at its end, or where the writer starts again early (the reader
    /// has taken every record, past [`WINDOW`]); else `need`, and the writer asks again a page
    /// on. Once per page: the reader owns the head's cache line, and a writer on another CPU
    /// that read it per record would pull it across for each.
    #[cold]
    #[inline(never)]
    fn past_ask_at(&mut self, off: usize, need: usize) -> usize {
        let to_end = self.shared.cap - off;
        if to_end < need {
            return to_end + need;
        }
        if off >= WINDOW && need <= off {
            self.head_seen = self.shared.head.0.load(Ordering::Acquire);
            if self.tail == self.head_seen {
                return to_end + need;
            }
        }
        self.ask_at = (((off + need) & !(PAGE - 1)) + PAGE).min(self.shared.cap);
        need
    }

    /// Finds room for a record of `need` bytes (8-aligned, at most `max_record`): skips (and
    /// marks) the end of the ring when the record would not fit before it or the writer
    /// starts again early ([`past_ask_at`](Self::past_ask_at)), advances `tail`
    /// past the record, and returns where it starts. `None`, changing nothing, when full.
    #[inline]
    fn reserve(&mut self, need: usize) -> Option<usize> {
        let cap = self.shared.cap;
        let off = self.tail & self.mask;
        let to_end = cap - off;
        let total = self.room_for(need)?;
        let skip = total - need;
        let start = if skip > 0 {
            if to_end >= DESCRIPTOR {
                // SAFETY: [off, off + 16) lies inside the ring (to_end ≥ 16), is 8-aligned, and
                // is free: `room_for` proved [tail, tail + total) is not held by the reader.
                unsafe { write_descriptor(self.shared.base().add(off), 0, WRAP, 0) };
            }
            self.ask_at = WINDOW.min(cap);
            0
        } else {
            off
        };
        self.tail = self.tail.wrapping_add(total);
        Some(start)
    }

    /// A growing line whose segment is full: moves on to a segment twice as large, or as large
    /// as the limit still allows. False when the limit allows no segment for a record.
    #[cold]
    fn grow(&mut self) -> bool {
        let Some(g) = &self.growth else { return false };
        let alive = g.alive.load(Ordering::Acquire);
        let room = self.limit.saturating_sub(alive);
        let cap = (2 * self.shared.cap).min(if room == 0 { 0 } else { 1 << room.ilog2() });
        if cap < 2 * self.max_record {
            return false;
        }
        let Ok(next) = Shared::new(cap, false) else { return false };
        g.alive.fetch_add(cap, Ordering::AcqRel);
        self.move_to(next);
        true
    }
}

/// How far past a record its writer (the next records' room) and its reader (the next
/// records) ask for cache lines, within the ring's first [`WINDOW`]: there a line that stays
/// small is written and read again (a path without delay), its lines already in the core's L2.
const NEAR_AHEAD: usize = 512;

/// How far past a record they ask beyond the first [`WINDOW`], where a line walks memory the
/// caches no longer hold (a long delay): a record of a 64-byte frame comes every 10 to 16 ns at
/// the engine's rates and memory answers in about 100, and one of a 1500-byte frame every 80 to
/// 110 ns, so the lines are asked for 4 KiB on (51 records of 64-byte frames, 2.7 of 1500-byte
/// ones). With 512 bytes, `bench --delay 10ms --loss 1% --rate 100gbit` spent 2.5 ns a frame
/// more waiting on the first store into each record and the first load from it; at 64 bytes
/// 2 KiB measured as 4 KiB, at 1500 bytes 1 KiB and 2 KiB between 512 bytes and 4 KiB
/// (docs/performance.md).
const FAR_AHEAD: usize = 4096;

/// Bytes of a cache line on the machines pathem runs on (x86-64, most of aarch64).
const CACHE_LINE: usize = 64;

/// The most a record's hints cover beyond the window (64 lines): past a few lines of one
/// record the hardware's own prefetcher follows the stream, and a 64 KiB frame's 1 024
/// hints would only cost.
const MOST_HINTED: usize = 4096;

/// Asks for the lines ahead of the record of `len` bytes at ring offset `off`: within the
/// first [`WINDOW`], one line [`NEAR_AHEAD`] past its end; beyond it, every line of a record's
/// length [`FAR_AHEAD`] on (one hint per record left every fifth line of 80-byte records, and
/// all but one of a 1500-byte record's 24, to the hardware's own prefetcher). Not every line
/// within the window: its lines are cached, and a hint per line cost a 1500-byte frame 7 ns
/// there for nothing. At most [`MOST_HINTED`] bytes of a record are hinted.
#[inline(always)]
fn prefetch_ahead(base: *const u8, off: usize, len: usize, mask: usize) {
    if off < WINDOW {
        return prefetch(base.wrapping_add((off + len + NEAR_AHEAD) & mask));
    }
    let from = off + FAR_AHEAD;
    let mut at = from & !(CACHE_LINE - 1);
    while at < from + len.min(MOST_HINTED) {
        prefetch(base.wrapping_add(at & mask));
        at += CACHE_LINE;
    }
}

/// A cache hint for the line holding `at`; never faults, whatever the address.
#[inline(always)]
fn prefetch(at: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: prefetch is a hint that never dereferences for the program's semantics: it cannot
    // fault or change memory, even for an address outside any allocation.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at as *const i8)
    };
    #[cfg(any(not(target_arch = "x86_64"), miri))]
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

/// # Safety
/// `at` must be 8-aligned, inside the ring, with 16 published bytes the writer leaves alone.
#[inline(always)]
unsafe fn read_descriptor(at: *const u8) -> (u64, u32, u32) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        ((at as *const u64).read(), (at.add(8) as *const u32).read(), (at.add(12) as *const u32).read())
    }
}

impl Reader {
    /// Capacity in bytes of the segment being read.
    pub fn capacity(&self) -> usize {
        self.shared.cap
    }

    /// True when no record is waiting.
    pub fn is_empty(&mut self) -> bool {
        self.peek().is_none()
    }

    /// The head segment is exhausted and the writer moved on: follow it, freeing this one.
    /// False when records may still come into the head segment.
    #[cold]
    fn follow_next(&mut self) -> bool {
        let Some(next) = self.shared.next.get().cloned() else { return false };
        // `next` was set after the old segment's last tail store: read the tail once more.
        self.tail_seen = self.shared.tail.0.load(Ordering::Acquire);
        if self.head != self.tail_seen {
            return false;
        }
        self.leave_head_segment(next);
        true
    }

    fn leave_head_segment(&mut self, next: Arc<Shared>) {
        // The scan was in the old segment (it restarts in the new one) or is already ahead.
        match self.scan_segs.front() {
            Some(front) if Arc::ptr_eq(front, &next) => {
                self.scan_segs.pop_front();
            }
            _ => self.scan = 0,
        }
        if let Some(g) = &self.growth {
            g.alive.fetch_sub(self.shared.cap, Ordering::AcqRel);
        }
        self.mask = next.cap - 1;
        self.shared = next;
        self.head = 0;
        self.tail_seen = 0;
        self.peeked = 0;
        self.head_seg += 1;
    }

    /// The record at the head, if any, without consuming it.
    #[inline]
    pub fn peek(&mut self) -> Option<Record<'_>> {
        loop {
            if self.head == self.tail_seen {
                self.tail_seen = self.shared.tail.0.load(Ordering::Acquire);
                if self.head == self.tail_seen {
                    if self.follow_next() {
                        continue;
                    }
                    return None;
                }
            }
            let off = self.head & self.mask;
            let to_end = self.shared.cap - off;
            let base = self.shared.base();
            let (release, len, wire_len) = match to_end < DESCRIPTOR {
                // The writer skipped this tail without a marker.
                true => (0, WRAP, 0),
                // SAFETY: head != tail, so the writer published a descriptor at `off` (8-aligned,
                // inside the ring since to_end ≥ 16) and will not touch it until head passes it.
                false => unsafe { read_descriptor(base.add(off)) },
            };
            if len == WRAP {
                // The rest of the ring is skipped: give it back now, not with the next record's
                // pop, which may be a delay away.
                self.head = self.head.wrapping_add(to_end);
                self.shared.head.0.store(self.head, Ordering::Release);
                continue;
            }
            self.peeked = record_size(len as usize);
            // Only lines the writer has published: fetching one it is still writing would
            // pull it from the writer's cache, to be pulled back for the write. Asked only
            // with more than `FAR_AHEAD` past the record published, in the window too, where a
            // small line seldom has that much and its lines are cached; asked again at each
            // look at a record not yet due (once a record measured slower: the path 14.2 →
            // 15.0 ns a frame, and the unimpaired run 10.6 → 11.3 with hints in the window).
            if self.tail_seen.wrapping_sub(self.head) > FAR_AHEAD + self.peeked {
                prefetch_ahead(base, off, self.peeked, self.mask);
            }
            // SAFETY: the writer published `len` bytes after the descriptor, within the ring,
            // before its Release store of tail that we Acquire-loaded; they stay untouched until
            // `pop` moves head past them, which needs `&mut self` and so ends this borrow.
            let data = unsafe { std::slice::from_raw_parts(base.add(off + DESCRIPTOR), len as usize) };
            return Some(Record { release: Nanos(release), wire_len, data });
        }
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

    /// Release time of the head record, if any.
    #[inline]
    pub fn next_release(&mut self) -> Option<Nanos> {
        self.peek().map(|r| r.release)
    }

    /// Reorder mode: the segment the scan is in.
    fn scan_shared(&self) -> &Arc<Shared> {
        self.scan_segs.back().unwrap_or(&self.shared)
    }

    /// Reorder mode: the next record not yet scanned, as its [`Slot`] and release time.
    /// Records stay in the ring until [`consume_through`](Self::consume_through) passes them.
    #[inline]
    pub fn scan_next(&mut self) -> Option<(Slot, Nanos)> {
        if self.scan_segs.is_empty() && self.scan.wrapping_sub(self.head) > self.shared.cap {
            // `pop` moved the head past the scan: nothing behind the head may be scanned.
            self.scan = self.head;
        }
        loop {
            let seg = self.scan_shared().clone();
            let tail = seg.tail.0.load(Ordering::Acquire);
            if self.scan == tail {
                let next = seg.next.get().cloned()?;
                if self.scan != seg.tail.0.load(Ordering::Acquire) {
                    continue;
                }
                self.scan_segs.push_back(next);
                self.scan = 0;
                continue;
            }
            let off = self.scan & (seg.cap - 1);
            let to_end = seg.cap - off;
            let (release, len, _) = match to_end < DESCRIPTOR {
                true => (0, WRAP, 0),
                // SAFETY: scan is in [head, tail) of this segment: the writer published this
                // descriptor (8-aligned, inside the ring since to_end ≥ 16) and leaves it alone
                // until head passes it.
                false => unsafe { read_descriptor(seg.base().add(off)) },
            };
            if len == WRAP {
                // The rest of the ring is skipped; with nothing before it waiting, the head
                // moves past it too, giving it back to the writer at once.
                let at_head = self.scan == self.head && self.scan_segs.is_empty();
                self.scan = self.scan.wrapping_add(to_end);
                if at_head {
                    self.head = self.scan;
                    self.peeked = 0;
                    self.shared.head.0.store(self.head, Ordering::Release);
                }
                continue;
            }
            let pos = self.scan;
            self.scan = self.scan.wrapping_add(record_size(len as usize));
            let slot = Slot {
                line: self.line,
                seg: self.head_seg + self.scan_segs.len() as u64,
                pos,
                end: self.scan,
            };
            return Some((slot, Nanos(release)));
        }
    }

    /// The segment a slot points into and the published range `[lower, upper)` of it that is
    /// scanned and not consumed; `None` for a slot of another line or one already consumed.
    fn slot_segment(&self, slot: &Slot) -> Option<(&Arc<Shared>, usize, usize)> {
        if slot.line != self.line || slot.seg < self.head_seg {
            return None;
        }
        let k = (slot.seg - self.head_seg) as usize;
        let seg = if k == 0 { &self.shared } else { self.scan_segs.get(k - 1)? };
        let lower = if k == 0 { self.head } else { 0 };
        let upper = if k == self.scan_segs.len() { self.scan } else { seg.tail.0.load(Ordering::Acquire) };
        // A scan left behind the head by `pop` covers nothing.
        (upper.wrapping_sub(lower) <= seg.cap).then_some((seg, lower, upper))
    }

    /// Reorder mode: the record at a slot `scan_next` returned, or `None` for a slot that is
    /// not one of this line's unconsumed records.
    #[inline]
    pub fn record_at(&self, slot: &Slot) -> Option<Record<'_>> {
        let (seg, lower, upper) = self.slot_segment(slot)?;
        let (dist, range) = (slot.pos.wrapping_sub(lower), upper.wrapping_sub(lower));
        let off = slot.pos & (seg.cap - 1);
        if dist >= range || slot.pos % ALIGN != 0 || off + DESCRIPTOR > seg.cap {
            return None;
        }
        let base = seg.base();
        // SAFETY: [pos, pos + 16) is 8-aligned, inside the ring and within [lower, upper):
        // published by the writer and not yet given back, so it does not change under us.
        let (release, len, wire_len) = unsafe { read_descriptor(base.add(off)) };
        let size = record_size(len as usize);
        if len == WRAP || dist + size > range || off + size > seg.cap {
            return None;
        }
        // SAFETY: the whole record [off, off + size) lies inside the ring (checked) and within
        // the published, unconsumed range; consuming it needs `&mut self`, which ends this borrow.
        let data = unsafe { std::slice::from_raw_parts(base.add(off + DESCRIPTOR), len as usize) };
        Some(Record { release: Nanos(release), wire_len, data })
    }

    /// Reorder mode: gives the ring space up to the end of `slot` (and every segment before
    /// it) back to the writer. Returns false, changing nothing, for a slot that is not one of
    /// this line's scanned, unconsumed records.
    #[inline]
    pub fn consume_through(&mut self, slot: &Slot) -> bool {
        let Some((_, lower, upper)) = self.slot_segment(slot) else { return false };
        let (dist, range) = (slot.end.wrapping_sub(lower), upper.wrapping_sub(lower));
        if dist == 0 || dist > range {
            return false;
        }
        for _ in self.head_seg..slot.seg {
            // `leave_head_segment` takes it off `scan_segs`.
            let next = self.scan_segs.front().cloned().expect("slot_segment found the segment");
            self.leave_head_segment(next);
        }
        self.head = slot.end;
        self.tail_seen = self.shared.tail.0.load(Ordering::Acquire);
        self.peeked = 0;
        self.shared.head.0.store(self.head, Ordering::Release);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes 0, 1, …, 255, twice: a frame's pattern is a slice of it.
    const PATTERN: [u8; 512] = {
        let mut p = [0u8; 512];
        let mut i = 0;
        while i < 512 {
            p[i] = i as u8;
            i += 1;
        }
        p
    };

    /// `len` bytes counting up from `seed` (wrapping), copied a slice at a time, so Miri,
    /// which runs a byte loop step by step, builds it in a few block copies.
    fn frame(seed: u8, len: usize) -> Vec<u8> {
        let mut f = Vec::with_capacity(len);
        while f.len() < len {
            let start = (usize::from(seed) + f.len()) % 256;
            f.extend_from_slice(&PATTERN[start..start + (len - f.len()).min(256)]);
        }
        f
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
        let (mut w, mut r) = delay_line(1024, 100).unwrap();
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
    fn unpublished_records_wait_for_publish_also_across_segments() {
        let (mut w, mut r) = delay_line(1024, 100).unwrap();
        assert!(w.push_unpublished(Nanos(1), 60, &frame(1, 60)));
        assert!(w.push_unpublished(Nanos(2), 60, &frame(2, 60)));
        assert!(r.peek().is_none(), "not yet published");
        w.publish();
        for i in 1..=2 {
            assert_eq!(r.next_release(), Some(Nanos(i)));
            r.pop();
        }
        assert!(r.peek().is_none());
        // A growing line that moves to a new segment publishes the old one's records first.
        let (mut w, mut r) = growing_from(4 << 10, 256 << 10, 100).unwrap();
        let count = 100;
        for i in 0..count {
            assert!(w.push_unpublished(Nanos(i), 0, &frame(i as u8, 100)), "frame {i}");
        }
        w.publish();
        for i in 0..count {
            let rec = r.peek().unwrap();
            assert_eq!((rec.release, rec.data), (Nanos(i), &frame(i as u8, 100)[..]));
            r.pop();
        }
        assert!(r.peek().is_none());
    }

    #[test]
    fn full_ring_refuses_without_changing_anything() {
        let (mut w, mut r) = delay_line(1024, 100).unwrap();
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
            let (mut w, mut r) = delay_line(256, 120).unwrap();
            assert_eq!(w.capacity(), 512);
            let mut expect = std::collections::VecDeque::new();
            // Under Miri 200 records: still about 30 laps of the ring.
            for (i, &len) in sizes.iter().cycle().take(if cfg!(miri) { 200 } else { 500 }).enumerate() {
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
        let (mut w, mut r) = delay_line(1024, 100).unwrap();
        let original = frame(0, 10);
        assert!(w.push(Nanos(1), 10, &original, |b| b[3] ^= 0x10));
        assert_eq!(r.peek().unwrap().data[3], original[3] ^ 0x10);
        assert_eq!(original, frame(0, 10));
    }

    #[test]
    fn two_threads_see_every_record_in_order() {
        let (mut w, mut r) = delay_line(4096, 300).unwrap();
        let n = n(200_000);
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
        #[cfg_attr(miri, ignore)]
        fn behaves_like_a_bounded_fifo(ops in proptest::collection::vec((0usize..300, proptest::bool::ANY), 1..400)) {
            let (mut w, mut r) = delay_line(1024, 300).unwrap();
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

    /// Iterations, fewer under Miri (which runs the ring's unsafe code instruction by instruction).
    fn n(full: u64) -> u64 {
        if cfg!(miri) {
            (full / 500).max(50)
        } else {
            full
        }
    }

    #[test]
    fn scan_and_consume_out_of_order() {
        let (mut w, mut r) = delay_line(512, 100).unwrap();
        let mut got = Vec::new();
        for round in 0..50u64 {
            for i in 0..3 {
                let id = round * 3 + i;
                assert!(w.push(Nanos(100 - i), id as u32, &frame(id as u8, 40 + i as usize * 20), |_| {}));
            }
            let mut batch = Vec::new();
            while let Some(s) = r.scan_next() {
                batch.push(s);
            }
            // Release the three newest in order of release time (the reverse of arrival).
            let last = batch.last().unwrap().0;
            batch.sort_by_key(|b| b.1);
            for (slot, _) in &batch {
                let rec = r.record_at(slot).unwrap();
                got.push(rec.wire_len);
                assert_eq!(rec.data, &frame(rec.wire_len as u8, rec.data.len())[..]);
            }
            assert!(r.consume_through(&last));
            // Consumed: the slots are refused from now on.
            assert!(r.record_at(&last).is_none() && !r.consume_through(&last));
        }
        assert_eq!(got.len(), 150);
        assert_eq!(&got[..3], &[2, 1, 0]);
    }

    /// Where a record's bytes lie in its ring, from the first record's (at offset 16).
    fn offset(rec: &Record<'_>, first: usize) -> usize {
        rec.data.as_ptr() as usize - first + DESCRIPTOR
    }

    #[test]
    fn a_line_holding_little_walks_only_its_window() {
        // A line emptied after every frame starts again at its start once past the window:
        // its records stay in the first WINDOW bytes (and one page, where it looks), however
        // large the ring.
        let (mut w, mut r) = delay_line(2 * WINDOW, 1500).unwrap();
        let frames: Vec<Vec<u8>> = [1500, 64, 700].iter().map(|&len| frame(len as u8, len)).collect();
        assert!(w.push(Nanos(0), 0, &frames[0], |_| {}));
        let first = r.peek().unwrap().data.as_ptr() as usize;
        r.pop();
        let mut furthest = 0;
        for i in 1..n(2_000) {
            let data = &frames[i as usize % 3];
            assert!(w.push(Nanos(i), 0, data, |_| {}));
            let rec = r.peek().unwrap();
            assert_eq!((rec.release, rec.data), (Nanos(i), &data[..]));
            furthest = furthest.max(offset(&rec, first) + data.len());
            r.pop();
            assert_eq!(w.used(), 0);
        }
        assert!(furthest <= WINDOW + PAGE + record_size(1500), "records reached {furthest} B");
        assert!(furthest > WINDOW, "the window was passed ({furthest} B)");
    }

    #[test]
    fn a_line_holding_frames_uses_its_whole_ring() {
        // One record always waits: the writer never starts again early, and the whole ring
        // takes frames, as without a window.
        let cap = 2 * WINDOW;
        let (mut w, mut r) = delay_line(cap, 1500).unwrap();
        let data = frame(1, 1000);
        assert!(w.push(Nanos(0), 0, &data[..], |_| {}));
        let first = r.peek().unwrap().data.as_ptr() as usize;
        let mut furthest = 0;
        for i in 1..(cap / record_size(1000)) as u64 + 10 {
            assert!(w.push(Nanos(i), 0, &data[..], |_| {}));
            r.pop();
            let rec = r.peek().unwrap();
            furthest = furthest.max(offset(&rec, first) + 1000);
        }
        assert!(furthest > cap - record_size(1000), "records reached {furthest} of {cap} B");
    }

    #[test]
    fn a_ring_end_skipped_early_is_given_back_when_the_reader_reaches_it() {
        // The writer starts again at the start of an empty line past the window; the reader's
        // look at the first record there passes the skipped end and gives it back, so the
        // whole ring takes frames while that record still waits (a long delay's record).
        let cap = 2 * WINDOW;
        let data = frame(1, 1000);
        for reorder in [false, true] {
            let (mut w, mut r) = delay_line(cap, 1500).unwrap();
            let (mut first, mut last) = (None, 0);
            for i in 0.. {
                assert!(w.push(Nanos(i), 0, &data[..], |_| {}));
                let at = match reorder {
                    false => {
                        let rec = r.peek().unwrap();
                        offset(&rec, *first.get_or_insert(rec.data.as_ptr() as usize))
                    }
                    true => {
                        let (slot, _) = r.scan_next().unwrap();
                        let rec = r.record_at(&slot).unwrap();
                        let at = offset(&rec, *first.get_or_insert(rec.data.as_ptr() as usize));
                        if at >= last {
                            assert!(r.consume_through(&slot));
                        }
                        at
                    }
                };
                if at < last {
                    // Started again at the start: this record waits.
                    assert!(last > WINDOW && last < cap - record_size(1500), "early, at {last} B");
                    break;
                }
                if !reorder {
                    r.pop();
                }
                last = at;
            }
            let mut held = 1;
            while w.push(Nanos(0), 0, &data[..], |_| {}) {
                held += 1;
            }
            assert!(held * record_size(1000) > cap - 2 * record_size(1500), "{held} records held");
        }
    }

    #[test]
    fn scanned_records_are_read_by_slot_until_consumed() {
        // Reorder mode reads records by slot: each its own bytes, a slot of another line or
        // one consumed refused.
        let (mut w, mut r) = growing_from(256, 4096, 100).unwrap();
        let (_, other) = delay_line(512, 100).unwrap();
        for id in 0..40u8 {
            assert!(w.push(Nanos(u64::from(id)), u32::from(id), &frame(id, 60), |_| {}));
        }
        let mut slots = Vec::new();
        while let Some((slot, release)) = r.scan_next() {
            assert_eq!(release, Nanos(slots.len() as u64));
            slots.push(slot);
        }
        assert_eq!(slots.len(), 40);
        for (i, slot) in slots.iter().enumerate().rev() {
            assert!(other.record_at(slot).is_none(), "a foreign slot");
            assert_eq!(r.record_at(slot).unwrap().data, &frame(i as u8, 60)[..]);
        }
        assert!(r.consume_through(&slots[39]));
        assert!(r.record_at(&slots[0]).is_none() && r.record_at(&slots[39]).is_none(), "consumed");
    }

    #[test]
    fn forged_and_foreign_slots_are_refused() {
        let (mut w, mut r) = delay_line(1024, 100).unwrap();
        let (mut w2, mut r2) = delay_line(1024, 100).unwrap();
        for i in 0..4u64 {
            assert!(w.push(Nanos(i), 60, &frame(i as u8, 60), |_| {}));
            assert!(w2.push(Nanos(i), 60, &frame(i as u8, 60), |_| {}));
        }
        let (a, _) = r.scan_next().unwrap();
        let (b, _) = r2.scan_next().unwrap();
        assert!(r.record_at(&a).is_some());
        assert!(r.record_at(&b).is_none(), "a slot of another line");
        assert!(!r.consume_through(&b));
        // Positions in the middle of a record, past the scan, or past the ring.
        for pos in [8usize, 24, 80, 160, 1 << 40, usize::MAX - 7] {
            let forged = Slot { pos, end: pos.wrapping_add(80), ..a };
            if let Some(rec) = r.record_at(&forged) {
                // Only a real record boundary may be read, and only inside the scanned range.
                assert_eq!(pos, 0, "{pos}: {:?}", rec.release);
            }
        }
        assert!(!r.consume_through(&Slot { end: 1 << 30, ..a }));
        // pop moves the head past the scan: the slot it handed out is refused.
        r.pop();
        assert!(r.record_at(&a).is_none());
        assert_eq!(r.scan_next().unwrap().1, Nanos(1));
    }

    #[test]
    fn a_fixed_line_moves_on_to_a_larger_ring_in_order() {
        let (mut w, mut r) = delay_line(4 << 10, 100).unwrap();
        let f = |i: u64| frame(i as u8, 100);
        // Full, and half read: the old ring still holds records when the new one comes.
        let mut n = 0u64;
        while w.push(Nanos(n), n as u32, &f(n), |_| {}) {
            n += 1;
        }
        for i in 0..n / 2 {
            assert_eq!(r.peek().unwrap().release, Nanos(i));
            r.pop();
        }
        // No larger, or not at all: nothing changes.
        assert!(!w.take_ring(Ring::new(4 << 10, 100).unwrap()));
        assert!(w.holds(4 << 10) && !w.holds(16 << 10));
        assert!(w.take_ring(Ring::new(16 << 10, 100).unwrap()));
        assert_eq!((w.capacity(), w.limit()), (16 << 10, 16 << 10));
        assert!(w.holds(16 << 10));
        let total = n + 100;
        for i in n..total {
            assert!(w.push(Nanos(i), i as u32, &f(i), |_| {}), "frame {i}");
        }
        for i in n / 2..total {
            let rec = r.peek().unwrap();
            assert_eq!((rec.release, rec.wire_len, rec.data), (Nanos(i), i as u32, &f(i)[..]));
            r.pop();
        }
        assert!(r.peek().is_none());
        assert_eq!(r.capacity(), 16 << 10, "the reader moved over");
    }

    #[test]
    fn a_growing_line_grows_keeps_order_and_respects_its_limit() {
        // 300 records of 120 B (36 kB) do not fit the first segment (4 KiB): it must grow.
        let (mut w, mut r) = growing_from(4 << 10, 256 << 10, 100).unwrap();
        let first = w.capacity();
        let count = 300;
        for i in 0..count {
            assert!(w.push(Nanos(i), i as u32, &frame(i as u8, 100), |_| {}), "frame {i}");
        }
        assert!(w.capacity() > first, "it grew: {} > {first}", w.capacity());
        for i in 0..count {
            let rec = r.peek().unwrap();
            assert_eq!((rec.release, rec.wire_len), (Nanos(i), i as u32));
            assert_eq!(rec.data, &frame(i as u8, 100)[..]);
            r.pop();
        }
        assert!(r.peek().is_none());
        // The limit bounds what all segments hold together.
        let (mut w, _r) = growing_from(4 << 10, 64 << 10, 100).unwrap();
        let mut pushed = 0usize;
        let f = frame(0, 100);
        while w.push(Nanos(0), 0, &f, |_| {}) {
            pushed += 1;
        }
        assert!(pushed * record_size(100) <= 64 << 10, "{pushed}");
        assert!(pushed * record_size(100) > (64 << 10) / 2, "{pushed}");
    }

    #[test]
    fn a_growing_line_in_reorder_mode_crosses_segments() {
        // Under Miri a smaller first segment crosses as many segments with fewer records.
        let first = if cfg!(miri) { 1 << 10 } else { 4 << 10 };
        let (mut w, mut r) = growing_from(first, 1 << 20, 100).unwrap();
        let count = if cfg!(miri) { 300 } else { 2000 };
        let mut slots = Vec::new();
        for i in 0..count {
            assert!(w.push(Nanos(count - i), i as u32, &frame(i as u8, 100), |_| {}));
            while let Some(s) = r.scan_next() {
                slots.push(s);
            }
        }
        assert_eq!(slots.len() as u64, count);
        assert!(w.capacity() >= 8 * first, "the line grew through several segments: {}", w.capacity());
        // Consuming part of the way (into a later segment) leaves the rest scanned once.
        let half = slots[slots.len() / 2].0;
        assert!(r.consume_through(&half));
        assert!(r.scan_next().is_none(), "nothing is scanned twice");
        assert!(r.record_at(&slots[0].0).is_none());
        for (slot, release) in slots[slots.len() / 2 + 1..].iter().rev() {
            let rec = r.record_at(slot).unwrap();
            assert_eq!(rec.release, *release);
            assert_eq!(rec.data, &frame(rec.wire_len as u8, 100)[..]);
        }
        assert!(r.consume_through(&slots.last().unwrap().0));
        assert!(r.scan_next().is_none());
        assert!(w.push(Nanos(1), 1, &frame(1, 10), |_| {}));
        assert_eq!(r.scan_next().unwrap().1, Nanos(1));
    }

    #[test]
    fn two_threads_through_a_growing_line() {
        let (mut w, mut r) = growing_from(1 << 10, 1 << 20, 300).unwrap();
        let count = n(100_000);
        let producer = std::thread::spawn(move || {
            for i in 0..count {
                let f = frame(i as u8, (i % 300) as usize);
                while !w.push(Nanos(i), i as u32, &f, |_| {}) {
                    std::thread::yield_now();
                }
            }
        });
        let mut i = 0;
        while i < count {
            match r.peek() {
                Some(rec) => {
                    assert_eq!(rec.release, Nanos(i));
                    assert_eq!(rec.data, &frame(i as u8, (i % 300) as usize)[..]);
                    r.pop();
                    i += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        producer.join().unwrap();
    }

    #[test]
    fn make_room_promises_exactly_what_push_then_does() {
        let (mut w, mut r) = delay_line(1024, 100).unwrap();
        let mut pushed = 0;
        for i in 0..100u64 {
            let len = 10 + (i as usize * 7) % 90;
            let room = w.make_room(len);
            assert_eq!(room, w.push(Nanos(i), len as u32, &frame(i as u8, len), |_| {}), "record {i}");
            if !room {
                break;
            }
            pushed += 1;
        }
        assert!(pushed > 5 && pushed < 100, "the line filled: {pushed}");
        r.peek();
        r.pop();
        assert!(w.make_room(10), "room comes back as the reader gives it");
        assert!(!w.make_room(101), "longer than the line's largest frame");
        // A growing line grows for it: the push that follows lands in the new segment.
        let (mut w, _r) = growing_from(1 << 10, 1 << 16, 300).unwrap();
        for i in 0..40u64 {
            assert!(w.make_room(200), "record {i}");
            assert!(w.push(Nanos(i), 200, &frame(i as u8, 200), |_| {}), "record {i}");
        }
        assert!(w.capacity() > 1 << 10);
    }

    #[test]
    fn oversized_records_and_allocations_are_refused() {
        let (mut w, _r) = delay_line(1024, 100).unwrap();
        assert!(!w.push(Nanos(0), 0, &[0u8; 200], |_| {}), "longer than the line's largest frame");
        if !cfg!(miri) {
            let e = delay_line(usize::MAX / 2, 100).err().unwrap();
            assert!(e.to_string().contains("cannot allocate"), "{e}");
        }
    }
}
