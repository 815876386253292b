//! The two stages of a direction: ingress decides and copies, egress releases.
//!
//! Ingress does all the work of a frame once (TLEM §4.1): it asks the path for the frame's
//! fate, and copies a kept frame into the delay line with its absolute release time (a second
//! record for a duplicate; the bit flip or the CE mark applied to the copy). Egress only
//! compares release times with `now` and hands due frames to the transmit port; a frame that
//! is not yet due never leaves early, and frames that are due together leave together.
//!
//! Without reordering, release times are made non-decreasing at ingress, so the delay line is
//! a FIFO in release order; a frame `skip_delay` sends at once is the exception (it overtakes),
//! so egress then releases by time as with reordering. With reordering, egress keeps a min-heap of `(release, arrival
//! order)` over the records in the ring, releases each at its own time, and gives ring space
//! back as soon as the oldest records have all left: O(log n) per frame for any number of
//! frames in flight.
//!
//! With a queue discipline (`--aqm`, not drop-tail) a frame's fate is decided when it leaves
//! the bottleneck, not when it arrives. Ingress gives the discipline a
//! [`pathem_model::aqm::Entry`] for the frame and keeps its bytes apart ([`crate::held`]); it
//! drives the discipline's server up to each arrival and to each poll's `now`
//! ([`Ingress::advance`]), and carries out each decision as it is made: a frame sent goes
//! through the steps after the link and its record is written into the delay line then, with
//! its release and edits, as a drop-tail frame's is at its arrival; a frame dropped only gives
//! its room back. A frame that finds the queue empty and the server free is decided at its
//! arrival and written straight from the port. Egress therefore only ever sees decided
//! records, in the order they were decided, whatever order the discipline sends in
//! (FQ-CoDel and DualPI2 send in another order than frames arrived).

use crate::delay_line::{Reader, Ring, Slot, Writer};
use crate::held::Held;
use crate::stats::Counters;
use pathem_io::{RxFrame, TxPort};
use pathem_model::aqm::{AqmDrop, AtOnce, Decide, Entry};
use pathem_model::frame::{ecn_and_flow, ecn_capable, ecn_codepoint, flip_bit, mark_ce};
use pathem_model::link::Hot;
use pathem_model::path::{After, Extra};
use pathem_model::{DropReason, FrameMeta, Nanos, Path, PathConfig, Rng, Verdict};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Decides each frame's fate and writes kept frames into the delay line.
pub struct Ingress {
    path: Path,
    /// The queue discipline's own stream ([`pathem_model::aqm::RNG_STREAM`]): its draws never
    /// depend on when the steps after it draw (a frame is decided at a later arrival or poll,
    /// as the server and the ports go).
    aqm_rng: Rng,
    max_frame: usize,
    /// Tells egress that reordering is on (set before the first frame written under it).
    reorder_on: Arc<AtomicBool>,
    /// The arrival of the last frame given to the queue discipline.
    last_queued: Option<Nanos>,
    fate: Fate,
}

/// What carrying out a frame's fate touches, apart from the path's models so that a queue
/// discipline's decisions are carried out as it makes them, while it is borrowed.
struct Fate {
    rng: Rng,
    counters: Arc<Counters>,
    line: Writer,
    /// The bytes of the frames the queue discipline holds, by the number in their entry.
    held: Held,
    ecn: bool,
    reorder: bool,
    /// The latest release time written: later frames are never released before it unless
    /// reordering is on or they are sent at once (kept while reordering is on, so that turning
    /// it off clamps from there; a frame sent at once does not move it).
    last_release: Nanos,
    /// The frames held, by their release times, when the path bounds them (`limit`).
    holding: Option<Holding>,
}

/// NetEm's `limit`: the release times of the frames written and not yet due, to bound how
/// many are held (waiting for the rate or in their delay) when the next arrives.
struct Holding {
    most: u32,
    releases: BinaryHeap<Reverse<Nanos>>,
}

impl Holding {
    /// Whether `most` frames are still held at `now` (a frame due at `now` has left).
    fn full(&mut self, now: Nanos) -> bool {
        while self.releases.peek().is_some_and(|r| r.0 <= now) {
            self.releases.pop();
        }
        self.is_full()
    }

    /// Whether `most` frames are held, as of the last [`full`](Self::full).
    fn is_full(&self) -> bool {
        self.releases.len() >= self.most as usize
    }
}

/// A frame written to leave at `release` is held until then, when the path has a limit.
#[inline(always)]
fn hold(holding: &mut Option<Holding>, release: Nanos) {
    if let Some(h) = holding {
        h.releases.push(Reverse(release));
    }
}

impl Fate {
    /// The path's `limit` from the next frame: the frames already held count against a new
    /// bound; turned on, it counts the frames written from then on. Room for the release
    /// times of up to 2^20 frames (8 MiB) is taken here, so that the data path does not grow
    /// the heap below that (a larger limit grows it as frames are held).
    fn set_limit(&mut self, limit: Option<u32>) {
        const RESERVED: usize = 1 << 20;
        match (limit, &mut self.holding) {
            (None, _) => self.holding = None,
            (Some(most), Some(h)) => {
                h.most = most;
                let want = (most as usize).min(RESERVED);
                h.releases.reserve(want.saturating_sub(h.releases.len()));
            }
            (Some(most), None) => {
                let releases = BinaryHeap::with_capacity((most as usize).min(RESERVED));
                self.holding = Some(Holding { most, releases })
            }
        }
    }
}

impl Ingress {
    /// `held` keeps the frames a queue discipline holds (empty for a path without one; it
    /// grows as a change raises the discipline's limit).
    pub fn new(
        path: Path,
        rng: Rng,
        line: Writer,
        held: Held,
        counters: Arc<Counters>,
        max_frame: usize,
    ) -> Ingress {
        Ingress {
            path,
            aqm_rng: rng.stream(pathem_model::aqm::RNG_STREAM),
            max_frame,
            reorder_on: Arc::new(AtomicBool::new(false)),
            last_queued: None,
            fate: Fate {
                rng,
                counters,
                line,
                held,
                ecn: false,
                reorder: false,
                last_release: Nanos::ZERO,
                holding: None,
            },
        }
    }

    /// Turns on ECN inspection (for `--ecn`) and reordering (for `--reorder`); `reorder_on`
    /// is shared with the direction's egress, which releases by each frame's own time once it
    /// is set.
    pub fn with_options(mut self, config: &PathConfig, reorder_on: Arc<AtomicBool>) -> Ingress {
        self.fate.ecn = config.ecn;
        self.reorder_on = reorder_on;
        self.set_reorder(config);
        self.fate.set_limit(config.limit);
        self
    }

    /// Reordering on or off from the next frame, and frames sent at once (`skip_delay`),
    /// which overtake either way. Either turned on, egress is told before a frame is written
    /// unclamped; reordering turned off, releases are clamped again from the latest one
    /// written (egress keeps releasing by time, which in-order frames need no more than that).
    fn set_reorder(&mut self, config: &PathConfig) {
        if config.reorder || config.skip_delay.is_some() {
            self.reorder_on.store(true, Ordering::Release);
        }
        self.fate.reorder = config.reorder;
    }

    /// Applies a new configuration at `now`, between two frames; the models keep what state
    /// still means something (`Path::reconfigure`). The release-order clamp carries on.
    pub fn reconfigure(&mut self, config: &PathConfig, now: Nanos) {
        self.advance(now);
        self.path.reconfigure(config, now);
        self.fate.ecn = config.ecn;
        self.set_reorder(config);
        self.fate.set_limit(config.limit);
        let pending = self.path.take_pending();
        let mut decided = Decided { fate: &mut self.fate, after: self.path.after() };
        for d in pending {
            d.hand_to(&mut decided);
        }
    }

    /// True when the path has a queue discipline (not drop-tail).
    #[inline]
    pub fn has_aqm(&self) -> bool {
        self.path.has_aqm()
    }

    /// The queue discipline's next event (a service start or an update that matters), when
    /// the path has one and frames wait in it.
    pub fn next_event(&self) -> Option<Nanos> {
        self.path.next_bottleneck_event()
    }

    /// The arrival of the last frame given to the queue discipline, if any.
    pub fn last_queued(&self) -> Option<Nanos> {
        self.last_queued
    }

    /// True while frames wait in the queue discipline.
    pub fn holds_frames(&self) -> bool {
        self.path.next_bottleneck_event().is_some() || !self.fate.held.is_empty()
    }

    /// Serves the queue discipline up to `now`: every frame whose service starts by then is
    /// decided, and written into the delay line or dropped.
    #[inline]
    pub fn advance(&mut self, now: Nanos) {
        if self.path.next_bottleneck_event().is_none_or(|t| t > now) {
            return;
        }
        self.serve(now);
    }

    #[inline(never)]
    fn serve(&mut self, now: Nanos) {
        let fate = &mut self.fate;
        if let Some((b, after)) = self.path.bottleneck_and_after() {
            b.serve(now, &mut self.aqm_rng, &mut Decided { fate, after });
        }
    }

    /// A frame with a queue discipline: decided now if it passes at once, else kept until the
    /// discipline decides.
    #[inline(never)]
    fn push_queued(&mut self, frame: RxFrame<'_>, meta: FrameMeta) {
        self.last_queued = Some(frame.arrival);
        // The discipline hears of the frame before it is copied, so a frame it refuses on
        // arrival (RED, PIE, a full queue) costs no copy. There is room to keep a frame it
        // queues: looked at first (the store is sized for the discipline's limit, so it lacks
        // room only when frames sent out of order leave holes that the oldest pins).
        if !self.path.police(&meta) {
            Counters::drop(&self.fate.counters, DropReason::Police);
            return self.advance(frame.arrival);
        }
        let fate = &mut self.fate;
        let Some(room) = fate.held.room(frame.data.len()) else {
            Counters::drop(&fate.counters, DropReason::DelayLine);
            return self.advance(frame.arrival);
        };
        let seq = fate.held.next_number();
        let Some((b, after)) = self.path.bottleneck_and_after() else {
            unreachable!("push_queued runs only on a path with a discipline")
        };
        let (ecn, flow) = match b.needs_flow_hash() {
            true => ecn_and_flow(frame.data),
            false => (ecn_codepoint(frame.data), 0),
        };
        let entry = Entry {
            seq,
            arrival: frame.arrival,
            len: frame.wire_len,
            caplen: meta.caplen,
            ecn,
            flow,
            marked: false,
        };
        // A frame that finds the queue empty and the server free is decided at its arrival
        // (its service starts then) and written from the port, never kept.
        let at_once = b.backlog().0 == 0;
        // Served up to the arrival, then the frame joins: one visit to the discipline, each
        // decision carried out as it is made (this frame's own decision is kept: it is not
        // held yet).
        let mut arriving = Arriving { seq, refused: None, sent: None, others: Decided { fate, after } };
        let own = b.arrive(entry, &mut self.aqm_rng, &mut arriving, at_once);
        let Arriving { mut refused, mut sent, others: Decided { fate, after }, .. } = arriving;
        match own {
            Some(AtOnce::Sent { start, exit, mark }) => sent = Some((start, exit, mark)),
            Some(AtOnce::Dropped(reason)) => refused = Some(reason),
            None => {}
        }
        if let Some(reason) = refused {
            return Counters::drop(&fate.counters, aqm_reason(reason));
        }
        let Some((start, exit, mark)) = sent else {
            // The decisions made since `room` only gave room back: it is still free.
            fate.held.keep_at(room, frame.data);
            fate.counters.held.add(1);
            return;
        };
        // Decided at its arrival: written from the port.
        if let Some((release, extra)) = fate.after_link((entry, start, exit, mark), after) {
            let Fate { line, counters, last_release, holding, .. } = fate;
            let rec = Rec { release, wire_len: frame.wire_len, data: frame.data };
            write(line, counters, (last_release, holding), rec, extra, mark);
        }
    }

    /// True when the delay line holds `bytes` as it is.
    pub(crate) fn line_holds(&self, bytes: usize) -> bool {
        self.fate.line.holds(bytes)
    }

    /// Moves the delay line on to a larger ring (a change keeps more in flight).
    pub(crate) fn take_ring(&mut self, ring: Ring) {
        if self.fate.line.take_ring(ring) {
            self.fate.counters.delay_line_capacity.set(self.fate.line.limit() as u64);
        }
    }

    /// Bytes the store of frames a queue discipline holds has room for.
    pub(crate) fn held_capacity(&self) -> usize {
        self.fate.held.capacity()
    }

    /// Moves the frames a queue discipline holds into `buf` where it is larger (a change to a
    /// larger queue, prepared on the control side with its pages touched).
    pub(crate) fn take_held(&mut self, buf: Vec<u8>) {
        if buf.len() > self.fate.held.capacity() {
            self.fate.held.move_to(buf);
        }
    }

    /// Makes the store of frames a queue discipline holds `bytes` large, where it is smaller
    /// (offline, where memory is touched as used).
    pub(crate) fn grow_held(&mut self, bytes: usize) {
        if bytes > self.fate.held.capacity() {
            self.fate.held.move_to(vec![0; bytes]);
        }
    }

    /// Updates the occupancy gauges (every few milliseconds, never per frame).
    pub fn gauges(&mut self, now: Nanos) {
        let (frames, bytes) = self.path.queue_occupancy(now).unwrap_or((0, 0));
        self.fate.counters.queue_frames.set(frames as u64);
        self.fate.counters.queue_bytes.set(bytes);
        self.fate.counters.delay_line_used.set(self.fate.line.used() as u64);
    }

    /// Takes one received frame.
    #[inline(always)]
    pub fn push(&mut self, frame: RxFrame<'_>) {
        self.push_with(frame, None)
    }

    /// The drop-tail link's moving state, for a burst of frames given to
    /// [`push_with`](Self::push_with) (see `Link::take_hot`); `None` when there is none.
    pub fn take_hot(&self) -> Option<Hot> {
        self.path.take_hot()
    }

    /// Gives back what [`take_hot`](Self::take_hot) took.
    pub fn put_hot(&mut self, hot: Hot) {
        self.path.put_hot(hot)
    }

    /// [`push`](Self::push), the link's moving state held by the caller.
    #[inline(always)]
    pub fn push_with(&mut self, frame: RxFrame<'_>, hot: Option<&mut Hot>) {
        let c = &*self.fate.counters;
        c.rx_packets.inc();
        c.rx_bytes.add(u64::from(frame.wire_len));
        // Its length on the wire: a capture cut short (`tcpdump -s 96`) holds fewer bytes.
        if (frame.wire_len as usize).max(frame.data.len()) > self.max_frame {
            c.drop(DropReason::Oversize);
            return;
        }
        let meta = FrameMeta {
            arrival: frame.arrival,
            len: frame.wire_len,
            caplen: frame.data.len() as u32,
            ect: self.fate.ecn && ecn_capable(frame.data),
        };
        // NetEm's limit: as many frames held as it allows, the arrival is a queue drop (before
        // the models, as the line's drop below: README, "Order of application").
        if self.fate.holding.as_mut().is_some_and(|h| h.full(frame.arrival)) {
            c.drop(DropReason::Queue);
            return self.advance(frame.arrival);
        }
        // A frame the line cannot hold is dropped before the path's models see it: had the
        // link scheduled it (or a policer charged it), its time on the wire would delay every
        // frame after it, unsent.
        if !self.fate.line.make_room(frame.data.len()) {
            c.drop(DropReason::DelayLine);
            return self.advance(frame.arrival);
        }
        if self.path.has_aqm() {
            return self.push_queued(frame, meta);
        }
        let fwd = match self.path.process_with(meta, &mut self.fate.rng, hot) {
            Verdict::Drop(reason) => {
                c.drop(reason);
                return;
            }
            Verdict::Forward(fwd) => fwd,
        };
        // The plain record written here rather than through `write` (whose plain path is
        // the same): through it the engine's frame took 10 instructions more (callgrind).
        let release = self.fate.clamp(fwd.release, fwd.extra.is_some_and(|e| e.at_once));
        if let Some(extra) = fwd.extra {
            return self.push_extra(Rec { release, wire_len: frame.wire_len, data: frame.data }, extra);
        }
        if self.fate.line.push(release, frame.wire_len, frame.data, |_| {}) {
            self.fate.last_release = self.fate.last_release.max(release);
            c.written.inc();
            hold(&mut self.fate.holding, release);
        } else {
            c.drop(DropReason::DelayLine);
        }
    }

    /// A frame that is marked, corrupted or duplicated: rare, so kept off the common path.
    #[cold]
    #[inline(never)]
    fn push_extra(&mut self, rec: Rec<'_>, extra: Extra) {
        let Fate { line, counters, last_release, holding, .. } = &mut self.fate;
        write_edited(line, counters, (last_release, holding), rec, extra, false)
    }
}

/// A frame's record as it is to be written.
#[derive(Clone, Copy)]
struct Rec<'a> {
    release: Nanos,
    wire_len: u32,
    data: &'a [u8],
}

/// Writes a frame's record, and with `extra` a duplicate's after it and the edits made to
/// the copies; the release clamp moves on once the frame's own record is written. Counts what
/// it wrote, marked (unless `aqm_mark`: the queue discipline's mark, counted as such) and
/// corrupted, or the frame dropped for want of room (a growing line grows first, in
/// [`Writer::push`]).
#[inline(always)]
fn write(
    line: &mut Writer,
    c: &Counters,
    (last_release, holding): (&mut Nanos, &mut Option<Holding>),
    rec: Rec<'_>,
    extra: Option<Extra>,
    aqm_mark: bool,
) {
    let Some(extra) = extra else {
        if line.push(rec.release, rec.wire_len, rec.data, |_| {}) {
            c.written.inc();
            *last_release = (*last_release).max(rec.release);
            hold(holding, rec.release);
        } else {
            c.drop(DropReason::DelayLine);
        }
        return;
    };
    write_edited(line, c, (last_release, holding), rec, extra, aqm_mark)
}

/// [`write`] for a frame with edits or a duplicate: rare, so kept off the common path.
#[cold]
#[inline(never)]
fn write_edited(
    line: &mut Writer,
    c: &Counters,
    (last_release, holding): (&mut Nanos, &mut Option<Holding>),
    rec: Rec<'_>,
    extra: Extra,
    aqm_mark: bool,
) {
    let edit = |bytes: &mut [u8]| {
        if extra.mark_ce {
            mark_ce(bytes);
        }
        if let Some(bit) = extra.corrupt_bit {
            flip_bit(bytes, bit);
        }
    };
    if !line.push(rec.release, rec.wire_len, rec.data, edit) {
        return c.drop(DropReason::DelayLine);
    }
    c.written.inc();
    // A frame sent at once is not one the delayed frames after it keep order with.
    if !extra.at_once {
        *last_release = (*last_release).max(rec.release);
    }
    hold(holding, rec.release);
    if extra.mark_ce && !aqm_mark {
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
        // Made, then sent or dropped: counted as made either way, so received + duplicated
        // = sent + dropped + in flight holds.
        c.duplicated.inc();
        // NetEm enqueues the copy as another frame: a limit the original filled drops it.
        if holding.as_ref().is_some_and(Holding::is_full) {
            c.drop(DropReason::Queue);
        } else if line.push(rec.release, rec.wire_len, rec.data, copy_edit) {
            c.written.inc();
            hold(holding, rec.release);
        } else {
            c.drop(DropReason::DelayLine);
        }
    }
}

/// The discipline's decisions on frames it holds: a dropped frame is counted and its room
/// given back; a sent one goes through the steps after the link and is written into the
/// delay line.
struct Decided<'a> {
    fate: &'a mut Fate,
    after: &'a mut After,
}

impl Decide for Decided<'_> {
    fn send(&mut self, entry: Entry, start: Nanos, exit: Nanos, mark: bool) {
        let out = self.fate.after_link((entry, start, exit, mark), self.after);
        let Fate { line, counters, held, last_release, holding, .. } = &mut *self.fate;
        let data = held.take(entry.seq).expect("a frame the discipline holds is kept");
        if let Some((release, extra)) = out {
            let rec = Rec { release, wire_len: entry.len, data };
            write(line, counters, (last_release, holding), rec, extra, mark);
        }
        counters.held.sub(1);
    }

    fn drop(&mut self, entry: Entry, reason: AqmDrop) {
        let fate = &mut *self.fate;
        Counters::drop(&fate.counters, aqm_reason(reason));
        let given = fate.held.give_back(entry.seq);
        debug_assert!(given, "frame {} was held", entry.seq);
        fate.counters.held.sub(1);
    }
}

/// The decisions made while frame `seq` arrives: its own is kept (it is not held yet), the
/// others carried out.
struct Arriving<'a> {
    seq: u64,
    refused: Option<AqmDrop>,
    sent: Option<(Nanos, Nanos, bool)>,
    /// Where the decisions on the frames already held go.
    others: Decided<'a>,
}

impl Decide for Arriving<'_> {
    #[inline(always)]
    fn send(&mut self, entry: Entry, start: Nanos, exit: Nanos, mark: bool) {
        match entry.seq == self.seq {
            true => self.sent = Some((start, exit, mark)),
            false => self.others.send(entry, start, exit, mark),
        }
    }

    #[inline(always)]
    fn drop(&mut self, entry: Entry, reason: AqmDrop) {
        match entry.seq == self.seq {
            true => self.refused = Some(reason),
            false => self.others.drop(entry, reason),
        }
    }
}

impl Fate {
    /// A frame the discipline sent (`entry`, `start`, `exit`, `mark` of its decision) through
    /// the steps after the link: its release (clamped, not yet taken as the latest: that
    /// waits for its record to be written) and the edits to make as it is written, or `None`
    /// (counted) when a step dropped it. Inlined into both callers, so each keeps its
    /// result in registers.
    #[inline(always)]
    fn after_link(
        &mut self,
        (entry, start, exit, aqm_mark): (Entry, Nanos, Nanos, bool),
        after: &mut After,
    ) -> Option<(Nanos, Option<Extra>)> {
        let c = &*self.counters;
        c.sojourn.record(start.saturating_sub(entry.arrival));
        if aqm_mark {
            c.aqm_marked.inc();
        }
        let meta = FrameMeta {
            arrival: entry.arrival,
            len: entry.len,
            caplen: entry.caplen,
            ect: self.ecn && entry.ect(),
        };
        let fwd = match after.after_link(meta, exit, aqm_mark, &mut self.rng) {
            Verdict::Drop(reason) => {
                c.drop(reason);
                return None;
            }
            Verdict::Forward(fwd) => fwd,
        };
        Some((self.clamp(fwd.release, fwd.extra.is_some_and(|e| e.at_once)), fwd.extra))
    }

    /// A release time as kept: never before the last frame written unless reordering was
    /// asked for or the frame is sent at once (the frames held back are counted, with how
    /// long).
    #[inline(always)]
    fn clamp(&self, release: Nanos, at_once: bool) -> Nanos {
        if release < self.last_release && !self.reorder && !at_once {
            self.counters.reorder_clamped.inc();
            self.counters.reorder_clamp_ns.add((self.last_release - release).as_nanos());
            return self.last_release;
        }
        release
    }
}

/// Releases due frames from the delay line to a transmit port.
pub struct Egress {
    line: Reader,
    counters: Arc<Counters>,
    /// The heap of reorder mode; taken for good once ingress says reordering is on.
    reorder: Option<Reorder>,
    reorder_on: Arc<AtomicBool>,
}

/// Egress state in reorder mode.
struct Reorder {
    /// Records waiting to be sent, by (release, arrival-order number).
    due: BinaryHeap<Reverse<(Nanos, u64)>>,
    /// Records that came in release order (the common case): a FIFO, cheaper than the heap; a
    /// record released before its back goes to the heap instead.
    in_order: VecDeque<(Nanos, u64)>,
    /// From the oldest record still in the ring: its place and whether it is still to be sent.
    in_ring: VecDeque<(Slot, bool)>,
    /// Arrival-order number of `in_ring`'s front.
    front_seq: u64,
    next_seq: u64,
    /// Highest arrival-order number sent so far, to count reordered frames.
    max_sent: Option<u64>,
}

/// Frames one release hands the port at least, and at most unless the round's receive took
/// more: a receive burst's worth ([`crate::pipeline::RX_BURST`]), so that no release is larger
/// than a receive (docs/design.md, "Egress bursts", says why and what it measured).
pub const EGRESS_BURST: usize = crate::pipeline::RX_BURST;

impl Reorder {
    /// Reorder mode, moved to for good.
    #[cold]
    fn new() -> Reorder {
        Reorder {
            due: BinaryHeap::with_capacity(1 << 16),
            in_order: VecDeque::with_capacity(1 << 16),
            in_ring: VecDeque::with_capacity(1 << 16),
            front_seq: 0,
            next_seq: 0,
            max_sent: None,
        }
    }

    /// A record the scan found, scheduled at its release.
    fn add(&mut self, slot: Slot, release: Nanos) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_ring.push_back((slot, true));
        let item = (release, seq);
        if self.in_order.back().is_none_or(|b| b.0 <= release) {
            self.in_order.push_back(item);
        } else {
            self.due.push(Reverse(item));
        }
    }

    /// The next record to send: the earlier of the FIFO's front and the heap's top.
    fn next(&self) -> Option<(Nanos, u64)> {
        match (self.in_order.front(), self.due.peek()) {
            (Some(&f), Some(&Reverse(h))) => Some(f.min(h)),
            (Some(&f), None) => Some(f),
            (None, Some(&Reverse(h))) => Some(h),
            (None, None) => None,
        }
    }

    /// Takes the record [`next`](Self::next) returned.
    fn take_next(&mut self) {
        match (self.in_order.front(), self.due.peek()) {
            (Some(f), Some(Reverse(h))) if h < f => {
                self.due.pop();
            }
            (Some(_), _) => {
                self.in_order.pop_front();
            }
            (None, _) => {
                self.due.pop();
            }
        }
    }
}

impl Egress {
    pub fn new(line: Reader, counters: Arc<Counters>, reorder_on: Arc<AtomicBool>) -> Egress {
        let reorder = reorder_on.load(Ordering::Acquire).then(Reorder::new);
        Egress { line, counters, reorder, reorder_on }
    }

    /// Hands the frames released by `upto` (at most `budget`) to `tx`, without flushing it;
    /// `now` is the time, against which lateness is counted. Returns how many it took.
    #[inline(always)]
    pub fn hand<T: TxPort>(&mut self, now: Nanos, upto: Nanos, budget: usize, tx: &mut T) -> usize {
        self.follow_reorder_on();
        if self.reorder.is_some() {
            return self.release_reordered(now, upto, budget, tx);
        }
        self.release_in_order(now, upto, budget, tx)
    }

    #[inline(always)]
    fn release_in_order<T: TxPort>(&mut self, now: Nanos, upto: Nanos, budget: usize, tx: &mut T) -> usize {
        let mut n = 0;
        while n < budget {
            let Some(rec) = self.line.peek() else { break };
            if rec.release > upto {
                break;
            }
            if !tx.send(rec.release, rec.wire_len, rec.data) {
                break;
            }
            self.counters.sent(rec.wire_len, now - rec.release);
            self.line.pop();
            n += 1;
        }
        n
    }

    /// Takes the records written since the last call.
    fn scan(&mut self) {
        let r = self.reorder.as_mut().expect("reorder mode");
        while let Some((slot, release)) = self.line.scan_next() {
            r.add(slot, release);
        }
    }

    #[inline(never)]
    fn release_reordered<T: TxPort>(&mut self, now: Nanos, upto: Nanos, budget: usize, tx: &mut T) -> usize {
        self.scan();
        let r = self.reorder.as_mut().expect("reorder mode");
        let mut n = 0;
        while n < budget {
            let Some((release, seq)) = r.next() else { break };
            if release > upto {
                break;
            }
            let slot = r.in_ring[(seq - r.front_seq) as usize].0;
            let rec = self.line.record_at(&slot).expect("a scanned record stays until it is consumed");
            let wire_len = rec.wire_len;
            if !tx.send(release, wire_len, rec.data) {
                break;
            }
            self.counters.sent(wire_len, now - release);
            if r.max_sent.is_some_and(|m| seq < m) {
                self.counters.reordered.inc();
            }
            r.max_sent = Some(r.max_sent.map_or(seq, |m| m.max(seq)));
            r.take_next();
            r.in_ring[(seq - r.front_seq) as usize].1 = false;
            n += 1;
        }
        let mut end = None;
        while let Some(&(slot, false)) = r.in_ring.front() {
            end = Some(slot);
            r.in_ring.pop_front();
            r.front_seq += 1;
        }
        if let Some(slot) = end {
            self.line.consume_through(&slot);
        }
        n
    }

    /// Reordering or frames sent at once were turned on: release by time from here on, for
    /// good. Asked wherever egress looks at its next frame, so that a frame sent at once is
    /// seen at once, not when the delayed frame at the line's head falls due.
    #[inline(always)]
    fn follow_reorder_on(&mut self) {
        if self.reorder.is_none() && self.reorder_on.load(Ordering::Acquire) {
            self.reorder = Some(Reorder::new());
        }
    }

    /// Release time of the next frame waiting, if any.
    #[inline]
    pub fn next_release(&mut self) -> Option<Nanos> {
        self.follow_reorder_on();
        if self.reorder.is_none() {
            return self.line.next_release();
        }
        self.scan();
        self.reorder.as_ref().and_then(|r| r.next().map(|(t, ..)| t))
    }
}

/// The counter a discipline's drop goes to.
fn aqm_reason(reason: AqmDrop) -> DropReason {
    match reason {
        AqmDrop::Aqm => DropReason::Aqm,
        AqmDrop::Overlimit => DropReason::Overlimit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delay_line::delay_line;

    /// A port that keeps the release and first byte of what it is given.
    #[derive(Default)]
    struct Keep(Vec<(Nanos, u8)>);

    impl TxPort for Keep {
        fn send(&mut self, release: Nanos, _wire_len: u32, data: &[u8]) -> bool {
            self.0.push((release, data[0]));
            true
        }
        fn flush(&mut self) -> Result<(), pathem_io::Error> {
            Ok(())
        }
    }

    #[test]
    fn in_order_records_leave_at_their_release_and_reordered_ones_by_time() {
        let (mut w, r) = delay_line(1 << 16, 100).unwrap();
        let on = Arc::new(AtomicBool::new(false));
        let mut e = Egress::new(r, Arc::new(Counters::default()), on.clone());
        let mut port = Keep::default();
        assert!(w.push(Nanos(10), 60, &[0; 60], |_| {}));
        assert_eq!(e.next_release(), Some(Nanos(10)));
        assert_eq!(e.hand(Nanos(9), Nanos(9), EGRESS_BURST, &mut port), 0, "not before its release");
        assert_eq!(e.hand(Nanos(10), Nanos(10), EGRESS_BURST, &mut port), 1);
        on.store(true, Ordering::Release);
        assert!(w.push(Nanos(30), 60, &[1; 60], |_| {}));
        assert!(w.push(Nanos(20), 60, &[2; 60], |_| {}));
        // Egress moves to release by time at its next hand.
        assert_eq!(e.hand(Nanos(15), Nanos(15), EGRESS_BURST, &mut port), 0);
        assert_eq!(e.next_release(), Some(Nanos(20)));
        assert_eq!(e.hand(Nanos(100), Nanos(100), EGRESS_BURST, &mut port), 2);
        assert_eq!(port.0, vec![(Nanos(10), 0), (Nanos(20), 2), (Nanos(30), 1)]);
        assert_eq!(e.next_release(), None);
        assert_eq!(w.used(), 0, "every record's room came back");
    }
}
