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
//!
//! With a queue discipline (`--aqm`, not drop-tail) a frame's fate is decided when it leaves
//! the bottleneck, not when it arrives. Ingress still copies it once, at arrival, as a record
//! whose release is [`UNDECIDED`], and gives the discipline a [`pathem_model::aqm::Entry`] for
//! it; it drives the discipline's server up to each arrival and to each poll's `now`
//! ([`Ingress::advance`]), runs the steps after the link for each frame sent, and passes each
//! decision (a release time and edits, or "dropped") to egress through a wait-free queue,
//! numbered by the record's place among the undecided ones. Egress carries decisions out in
//! order while they come in the records' order (the FIFO disciplines always do): the head
//! record waits for its decision, then leaves at its release or gives its room back. A
//! decision out of order (FQ-CoDel and DualPI2 send in another order than frames arrived)
//! or with edits to the frame moves egress to the heap of reorder mode for good: records wait
//! in the ring until their decision comes, then leave in release order, and ring space comes
//! back as the oldest records are sent or dropped.

use crate::delay_line::{Reader, Ring, Slot, Writer, UNDECIDED};
use crate::stats::Counters;
use pathem_io::{RxFrame, TxPort};
use pathem_model::aqm::{AqmDrop, AtOnce, Decision, Entry};
use pathem_model::frame::{ecn_and_flow, ecn_capable, ecn_codepoint, flip_bit, mark_ce};
use pathem_model::link::Hot;
use pathem_model::path::{After, Extra};
use pathem_model::{DropReason, FrameMeta, Nanos, Path, PathConfig, Rng, Verdict};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What egress is to do with an undecided record, once the discipline has decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Departure {
    /// The record's number among the undecided records written, from 0.
    pub seq: u64,
    /// When it leaves; [`UNDECIDED`] for a frame dropped after it was written.
    pub release: Nanos,
    pub edit: Edit,
}

/// Changes made to a frame's bytes as it is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edit {
    pub mark_ce: bool,
    /// Flip this bit of the original (not of its duplicate).
    pub corrupt_bit: Option<u32>,
    /// A duplicate follows the original.
    pub duplicate: bool,
}

/// The queue of decisions from ingress to egress, and its two ends.
pub fn departures() -> (rtrb::Producer<Departure>, rtrb::Consumer<Departure>) {
    rtrb::RingBuffer::new(DEPARTURES)
}

/// Decisions in flight between ingress and egress at most; more wait at ingress.
const DEPARTURES: usize = 1 << 16;

/// Decides each frame's fate and writes kept frames into the delay line.
pub struct Ingress {
    path: Path,
    /// The queue discipline's own stream ([`pathem_model::aqm::RNG_STREAM`]): its draws never
    /// depend on when the steps after it draw (a frame is decided at a later arrival or poll,
    /// as the server and the ports go).
    aqm_rng: Rng,
    line: Writer,
    max_frame: usize,
    /// Tells egress that reordering is on (set before the first frame written under it).
    reorder_on: Arc<AtomicBool>,
    /// Undecided records written so far (the next one's number).
    undecided: u64,
    /// The arrival of the last frame given to the queue discipline.
    last_queued: Option<Nanos>,
    fate: Fate,
}

/// What carrying out a frame's fate touches, apart from the path's models so that a queue
/// discipline's decisions are carried out as it makes them, while it is borrowed.
struct Fate {
    rng: Rng,
    counters: Arc<Counters>,
    ecn: bool,
    reorder: bool,
    /// The latest release time written: later frames are never released before it unless
    /// reordering is on (kept while it is, so that turning it off clamps from there).
    last_release: Nanos,
    /// Decisions for egress, and those that did not fit its queue yet.
    departures: rtrb::Producer<Departure>,
    held: VecDeque<Departure>,
}

impl Ingress {
    pub fn new(
        path: Path,
        rng: Rng,
        line: Writer,
        counters: Arc<Counters>,
        max_frame: usize,
        departures: rtrb::Producer<Departure>,
    ) -> Ingress {
        Ingress {
            path,
            aqm_rng: rng.stream(pathem_model::aqm::RNG_STREAM),
            line,
            max_frame,
            reorder_on: Arc::new(AtomicBool::new(false)),
            undecided: 0,
            last_queued: None,
            fate: Fate {
                rng,
                counters,
                ecn: false,
                reorder: false,
                last_release: Nanos::ZERO,
                departures,
                held: VecDeque::new(),
            },
        }
    }

    /// Turns on ECN inspection (for `--ecn`) and reordering (for `--reorder`); `reorder_on`
    /// is shared with the direction's egress, which releases by each frame's own time once it
    /// is set.
    pub fn with_options(mut self, ecn: bool, reorder: bool, reorder_on: Arc<AtomicBool>) -> Ingress {
        self.fate.ecn = ecn;
        self.reorder_on = reorder_on;
        self.set_reorder(reorder);
        self
    }

    /// Reordering on or off from the next frame. Turned on, egress is told before a frame is
    /// written unclamped; turned off, releases are clamped again from the latest one written
    /// (egress keeps releasing by time, which in-order frames need no more than that).
    fn set_reorder(&mut self, reorder: bool) {
        if reorder {
            self.reorder_on.store(true, Ordering::Release);
        }
        self.fate.reorder = reorder;
    }

    /// Applies a new configuration at `now`, between two frames; the models keep what state
    /// still means something (`Path::reconfigure`). The release-order clamp carries on.
    pub fn reconfigure(&mut self, config: &PathConfig, now: Nanos) {
        self.advance(now);
        self.path.reconfigure(config, now);
        self.fate.ecn = config.ecn;
        self.set_reorder(config.reorder);
        let pending = self.path.take_pending();
        let after = self.path.after();
        for d in pending {
            self.fate.decided(d, after);
        }
        self.fate.flush_departures();
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

    /// True while frames wait in the queue discipline or decisions wait for egress's queue.
    pub fn holds_frames(&self) -> bool {
        self.path.next_bottleneck_event().is_some() || !self.fate.held.is_empty()
    }

    /// Serves the queue discipline up to `now`: every frame whose service starts by then is
    /// decided, and the decisions go to egress.
    #[inline]
    pub fn advance(&mut self, now: Nanos) {
        if self.fate.held.is_empty() && self.path.next_bottleneck_event().is_none_or(|t| t > now) {
            return;
        }
        self.serve(now);
    }

    #[inline(never)]
    fn serve(&mut self, now: Nanos) {
        let fate = &mut self.fate;
        if let Some((b, after)) = self.path.bottleneck_and_after() {
            b.serve(now, &mut self.aqm_rng, &mut |d| fate.decided(d, after));
        }
        fate.flush_departures();
    }

    /// Hands waiting decisions to egress's queue, as many as fit.
    pub fn flush_departures(&mut self) {
        self.fate.flush_departures();
    }

    /// A frame with a queue discipline: its record is written now, its fate decided later.
    #[inline(never)]
    fn push_queued(&mut self, frame: RxFrame<'_>, meta: FrameMeta) {
        self.last_queued = Some(frame.arrival);
        // The discipline hears of the frame before it is copied, so a frame it refuses on
        // arrival (RED, PIE, a full queue) costs no copy and never reaches egress. `push` made
        // the room first: an admitted frame's record is then written for certain.
        if !self.path.police(&meta) {
            Counters::drop(&self.fate.counters, DropReason::Police);
            return self.advance(frame.arrival);
        }
        let seq = self.undecided;
        let fate = &mut self.fate;
        let (mut refused, mut sent) = (None, None);
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
        // (its service starts then) and its record written with its release, as drop-tail's
        // are: no undecided record, no decision handed to egress. Only once egress has taken
        // every decision made before: releasing by time, egress orders frames of one release
        // time as it learns of them, so a record written decided must come after every
        // earlier decision, however egress's and ingress's turns fall.
        // (The queue is looked at first: the discipline serves at once only a frame that
        // finds it empty, and a full queue then costs no look at egress's queue.)
        let at_once = b.backlog().0 == 0 && fate.all_taken();
        // Served up to the arrival, then the frame joins: one visit to the discipline, each
        // decision carried out as it is made (this frame's own decision is kept: it has no
        // record yet).
        let own = b.arrive(
            entry,
            &mut self.aqm_rng,
            &mut |d| match d {
                Decision::Drop { entry, reason } if entry.seq == seq => refused = Some(reason),
                Decision::Send { entry, start, exit, mark } if entry.seq == seq => {
                    sent = Some((start, exit, mark))
                }
                d => fate.decided(d, after),
            },
            at_once,
        );
        match own {
            Some(AtOnce::Sent { start, exit, mark }) => sent = Some((start, exit, mark)),
            Some(AtOnce::Dropped(reason)) => refused = Some(reason),
            None => {}
        }
        if !fate.held.is_empty() {
            fate.flush_departures();
        }
        if let Some(reason) = refused {
            return Counters::drop(&fate.counters, aqm_reason(reason));
        }
        let Some((start, exit, mark)) = sent else {
            write(&mut self.line, &fate.counters, UNDECIDED, frame);
            self.undecided += 1;
            return;
        };
        // Decided at its arrival. Written plainly with its release; with edits to make (a
        // mark, a corrupted bit, a duplicate), which are egress's, written undecided and its
        // decision handed over at once. (Written inside the closure: returning the result to
        // write it here measured 4 to 5 ns a frame slower with the queue full.)
        let (line, undecided) = (&mut self.line, &mut self.undecided);
        fate.after_link(
            (entry, start, exit, mark),
            after,
            |_| (),
            |fate, release, edit| {
                let plain = edit == Edit::default();
                write(line, &fate.counters, if plain { release } else { UNDECIDED }, frame);
                if !plain {
                    *undecided += 1;
                    fate.depart(Departure { seq, release, edit });
                    fate.flush_departures();
                }
            },
        );
    }

    /// True when the delay line holds `bytes` as it is.
    pub(crate) fn line_holds(&self, bytes: usize) -> bool {
        self.line.holds(bytes)
    }

    /// Moves the delay line on to a larger ring (a change keeps more in flight).
    pub(crate) fn take_ring(&mut self, ring: Ring) {
        if self.line.take_ring(ring) {
            self.fate.counters.delay_line_capacity.set(self.line.limit() as u64);
        }
    }

    /// Lets a growing delay line hold up to `bytes`.
    pub(crate) fn raise_limit(&mut self, bytes: usize) -> Result<(), crate::delay_line::AllocError> {
        self.line.raise_limit(bytes)?;
        self.fate.counters.delay_line_capacity.set(self.line.limit() as u64);
        Ok(())
    }

    /// Updates the occupancy gauges (every few milliseconds, never per frame).
    pub fn gauges(&mut self, now: Nanos) {
        let (frames, bytes) = self.path.queue_occupancy(now).unwrap_or((0, 0));
        self.fate.counters.queue_frames.set(frames as u64);
        self.fate.counters.queue_bytes.set(bytes);
        self.fate.counters.delay_line_used.set(self.line.used() as u64);
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
        // A frame the line cannot hold is dropped before the path's models see it: had the
        // link scheduled it (or a policer charged it), its time on the wire would delay every
        // frame after it, unsent.
        if !self.line.make_room(frame.data.len()) {
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
        let release = self.fate.clamp(fwd.release);
        if let Some(extra) = fwd.extra {
            return self.push_extra(frame, release, extra);
        }
        if self.line.push(release, frame.wire_len, frame.data, |_| {}) {
            self.fate.last_release = self.fate.last_release.max(release);
            c.written.inc();
        } else {
            c.drop(DropReason::DelayLine);
        }
    }

    /// A frame that is marked, corrupted or duplicated: rare, so kept off the common path.
    #[cold]
    #[inline(never)]
    fn push_extra(&mut self, frame: RxFrame<'_>, release: Nanos, extra: Extra) {
        let c = &*self.fate.counters;
        let edit = |bytes: &mut [u8]| {
            if extra.mark_ce {
                mark_ce(bytes);
            }
            if let Some(bit) = extra.corrupt_bit {
                flip_bit(bytes, bit);
            }
        };
        if !self.line.push(release, frame.wire_len, frame.data, edit) {
            c.drop(DropReason::DelayLine);
            return;
        }
        c.written.inc();
        self.fate.last_release = self.fate.last_release.max(release);
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
            // Made, then sent or dropped: counted as made either way, so received + duplicated
            // = sent + dropped + in flight holds.
            c.duplicated.inc();
            if self.line.push(release, frame.wire_len, frame.data, copy_edit) {
                c.written.inc();
            } else {
                c.drop(DropReason::DelayLine);
            }
        }
    }
}

/// The latest release a record can carry: one below [`UNDECIDED`].
const LATEST: Nanos = Nanos(UNDECIDED.0 - 1);

/// Writes the record of a frame the discipline admitted, with `release` (`push` made the
/// room, so the write cannot fail).
#[inline(always)]
fn write(line: &mut Writer, counters: &Counters, release: Nanos, frame: RxFrame<'_>) {
    let written = line.push(release, frame.wire_len, frame.data, |_| {});
    debug_assert!(written, "make_room promised the room");
    counters.written.inc();
}

impl Fate {
    /// True when egress has taken every decision made so far.
    #[inline(always)]
    fn all_taken(&self) -> bool {
        let all = self.departures.buffer().capacity();
        // The cached count is never above the true one: the atomic is read only when it may
        // have changed.
        self.held.is_empty() && (self.departures.cached_slots() == all || self.departures.slots() == all)
    }

    /// Hands waiting decisions to egress's queue, as many as fit.
    fn flush_departures(&mut self) {
        while let Some(&d) = self.held.front() {
            if self.departures.push(d).is_err() {
                return;
            }
            self.held.pop_front();
        }
    }

    #[inline(always)]
    fn depart(&mut self, d: Departure) {
        if !self.held.is_empty() {
            self.held.push_back(d);
        } else if let Err(rtrb::PushError::Full(d)) = self.departures.push(d) {
            self.held.push_back(d);
        }
    }

    /// Carries out one of the discipline's decisions: a dropped frame is counted and its
    /// record given up; a sent one goes through the steps after the link.
    fn decided(&mut self, d: Decision, after: &mut After) {
        match d {
            Decision::Drop { entry, reason } => {
                Counters::drop(&self.counters, aqm_reason(reason));
                self.discard(entry.seq)
            }
            Decision::Send { entry, start, exit, mark } => self.after_link(
                (entry, start, exit, mark),
                after,
                |fate| fate.discard(entry.seq),
                |fate, release, edit| fate.depart(Departure { seq: entry.seq, release, edit }),
            ),
        }
    }

    /// A frame the discipline sent (`entry`, `start`, `exit`, `mark` of its decision) through
    /// the steps after the link, counted: `sent` gets its release and the edits to make as it
    /// leaves, `dropped` is called when a step dropped it. Inlined into both callers, so each
    /// keeps its result in registers.
    #[inline(always)]
    fn after_link<R>(
        &mut self,
        (entry, start, exit, aqm_mark): (Entry, Nanos, Nanos, bool),
        after: &mut After,
        dropped: impl FnOnce(&mut Fate) -> R,
        sent: impl FnOnce(&mut Fate, Nanos, Edit) -> R,
    ) -> R {
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
                return dropped(self);
            }
            Verdict::Forward(fwd) => fwd,
        };
        let release = self.clamp(fwd.release);
        self.last_release = self.last_release.max(release);
        let extra = fwd.extra.unwrap_or_default();
        if extra.mark_ce && !aqm_mark {
            c.ecn_marked.inc();
        }
        if extra.corrupt_bit.is_some() {
            c.corrupted.inc();
        }
        if extra.duplicate {
            c.duplicated.inc();
            c.written.inc();
        }
        let edit =
            Edit { mark_ce: extra.mark_ce, corrupt_bit: extra.corrupt_bit, duplicate: extra.duplicate };
        sent(self, release, edit)
    }

    /// An undecided record whose frame was dropped: egress gives its room back unsent.
    fn discard(&mut self, seq: u64) {
        self.counters.written_dropped.inc();
        self.depart(Departure { seq, release: UNDECIDED, edit: Edit::default() });
    }

    /// A release time as kept: never before the last frame written unless reordering was
    /// asked for (the frames held back are counted, with how long).
    #[inline(always)]
    fn clamp(&self, release: Nanos) -> Nanos {
        // A time that saturated at the clock's end (a frame of many cells at 1 bit/s) stays
        // below UNDECIDED, the records' "no decision yet": such a frame waits for the end of
        // the clock (a replay's output then refuses it as past its format's end), never
        // forever for a decision, nor read as dropped.
        let release = release.min(LATEST);
        if release < self.last_release && !self.reorder {
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
    /// The heap of reorder mode; taken for good on the first decision out of order or with
    /// edits, or once ingress says reordering is on.
    reorder: Option<Reorder>,
    reorder_on: Arc<AtomicBool>,
    departures: rtrb::Consumer<Departure>,
    /// In order: undecided records released or given up so far (the number the decision for
    /// the head record carries, while decisions come in the records' order).
    undecided_done: u64,
    /// In order: the decision taken for the undecided head record, not yet carried out (its
    /// release is still ahead); on the move to reorder mode, the one to hand it first.
    head_decision: Option<Departure>,
}

/// Egress state in reorder mode (and with a queue discipline that sends out of order).
struct Reorder {
    /// Copies waiting to be sent, by (release, order), with their record's arrival-order
    /// number and what to change as each is sent.
    due: BinaryHeap<Reverse<(Nanos, u64, u64, Edit)>>,
    /// Copies that came in release order (the common case without `--reorder`): a FIFO,
    /// cheaper than the heap; a copy released before its back goes to the heap instead.
    in_order: VecDeque<(Nanos, u64, u64, Edit)>,
    /// From the oldest record still in the ring: its place and how many copies of it are
    /// still to be sent or decided (0: done with it).
    in_ring: VecDeque<(Slot, u8)>,
    /// Arrival-order number of `in_ring`'s front.
    front_seq: u64,
    next_seq: u64,
    /// Order given to the next copy pushed on the heap.
    next_order: u64,
    /// Highest order sent so far, to count reordered frames.
    max_sent: Option<u64>,
    /// Arrival-order numbers of the undecided records, by their own number, from
    /// `undecided_front` on.
    undecided: VecDeque<u64>,
    undecided_front: u64,
    /// Undecided records scanned whose decision has not come yet.
    waiting: u64,
}

/// At most this many frames leave in one call, so one direction cannot starve the other.
pub const EGRESS_BURST: usize = 256;

impl Reorder {
    fn new() -> Reorder {
        Reorder {
            due: BinaryHeap::with_capacity(1 << 16),
            in_order: VecDeque::with_capacity(1 << 16),
            in_ring: VecDeque::with_capacity(1 << 16),
            front_seq: 0,
            next_seq: 0,
            next_order: 0,
            max_sent: None,
            undecided: VecDeque::new(),
            undecided_front: 0,
            waiting: 0,
        }
    }

    /// A record the scan found: scheduled at its release, or left to wait for its decision.
    fn add(&mut self, slot: Slot, release: Nanos) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_ring.push_back((slot, 1));
        if release == UNDECIDED {
            self.undecided.push_back(seq);
            self.waiting += 1;
        } else {
            self.schedule(release, seq, Edit::default());
        }
    }

    /// The next copy to send: the earlier of the FIFO's front and the heap's top.
    fn next(&self) -> Option<(Nanos, u64, u64, Edit)> {
        match (self.in_order.front(), self.due.peek()) {
            (Some(&f), Some(&Reverse(h))) => Some(if (f.0, f.1) <= (h.0, h.1) { f } else { h }),
            (Some(&f), None) => Some(f),
            (None, Some(&Reverse(h))) => Some(h),
            (None, None) => None,
        }
    }

    /// Takes the copy [`next`](Self::next) returned.
    fn take_next(&mut self) {
        match (self.in_order.front(), self.due.peek()) {
            (Some(f), Some(Reverse(h))) if (h.0, h.1) < (f.0, f.1) => {
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

    /// A decision for an undecided record: its copies scheduled, or its room given back.
    fn take(&mut self, line: &mut Reader, d: Departure) {
        // A decision is pushed after its record was published: scan on if it is newer than
        // what the scan has seen.
        while d.seq.saturating_sub(self.undecided_front) >= self.undecided.len() as u64 {
            let Some((slot, release)) = line.scan_next() else { break };
            self.add(slot, release);
        }
        let Some(&seq) = d.seq.checked_sub(self.undecided_front).and_then(|i| self.undecided.get(i as usize))
        else {
            // No input can make this: it is an engine bug, and going on would leave the
            // record waiting for ever (egress stuck, `in_flight` never falling) with nothing
            // said. Stop loudly instead.
            panic!(
                "pathem engine bug: a decision for record {} that egress never saw (undecided from {}, {} known)",
                d.seq,
                self.undecided_front,
                self.undecided.len()
            );
        };
        let at = (seq - self.front_seq) as usize;
        self.waiting -= 1;
        if d.release == UNDECIDED {
            self.in_ring[at].1 = 0;
        } else {
            let copy = Edit { corrupt_bit: None, ..d.edit };
            self.in_ring[at].1 = 1 + u8::from(d.edit.duplicate);
            self.schedule(d.release, seq, d.edit);
            if d.edit.duplicate {
                self.schedule(d.release, seq, copy);
            }
        }
    }

    fn schedule(&mut self, release: Nanos, seq: u64, edit: Edit) {
        let item = (release, self.next_order, seq, edit);
        if self.in_order.back().is_none_or(|b| b.0 <= release) {
            self.in_order.push_back(item);
        } else {
            self.due.push(Reverse(item));
        }
        self.next_order += 1;
    }
}

impl Egress {
    pub fn new(
        line: Reader,
        counters: Arc<Counters>,
        reorder_on: Arc<AtomicBool>,
        departures: rtrb::Consumer<Departure>,
    ) -> Egress {
        let reorder = reorder_on.load(Ordering::Acquire).then(Reorder::new);
        Egress { line, counters, reorder, reorder_on, departures, undecided_done: 0, head_decision: None }
    }

    /// In order, for an undecided head record: its decision, taken from the queue when it is
    /// the next in the records' order. `None` while it has not come, or when decisions come
    /// out of order (FQ-CoDel, DualPI2 with several flows): then egress has moved to reorder
    /// mode, which takes any order.
    fn head_decision(&mut self) -> Option<Departure> {
        head_decision(&mut self.head_decision, &mut self.departures, self.undecided_done, &mut self.reorder)
    }

    /// In order: the undecided head record has been sent or given up.
    fn head_done(&mut self) {
        self.line.pop();
        self.undecided_done += 1;
        self.head_decision = None;
    }

    /// Hands the frames released by `upto` (at most `budget`) to `tx`, without flushing it;
    /// `now` is the time, against which lateness is counted. Returns how many it took.
    #[inline(always)]
    pub fn hand<T: TxPort>(&mut self, now: Nanos, upto: Nanos, budget: usize, tx: &mut T) -> usize {
        let mut n = 0;
        if self.reorder.is_none() && self.reorder_on.load(Ordering::Acquire) {
            // Reordering was turned on: release by time from here on, for good.
            self.reorder = Some(enter_reorder(self.undecided_done));
        }
        if self.reorder.is_none() {
            n = self.release_in_order(now, upto, budget, tx);
        }
        if self.reorder.is_some() {
            n += self.release_reordered(now, upto, budget - n, tx);
        }
        n
    }

    #[inline(always)]
    fn release_in_order<T: TxPort>(&mut self, now: Nanos, upto: Nanos, budget: usize, tx: &mut T) -> usize {
        let mut n = 0;
        while n < budget {
            let Some(rec) = self.line.peek() else { break };
            if rec.release > upto {
                if rec.release == UNDECIDED {
                    // A queue discipline decides this one: in order while its decisions are.
                    return n + self.release_decided(now, upto, budget - n, tx);
                }
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

    /// In order, from an undecided head record on: records the discipline decided in their
    /// own order (drop-head, RED, CoDel, PIE send and drop in arrival order) leave as their
    /// decisions say, without the heap; the first decision out of order (or with edits to the
    /// frame) moves egress to reorder mode.
    #[inline(always)]
    fn release_decided<T: TxPort>(&mut self, now: Nanos, upto: Nanos, budget: usize, tx: &mut T) -> usize {
        let mut n = 0;
        while n < budget {
            let Some(rec) = self.line.peek() else { break };
            let undecided = rec.release == UNDECIDED;
            let release = if undecided {
                let decision = head_decision(
                    &mut self.head_decision,
                    &mut self.departures,
                    self.undecided_done,
                    &mut self.reorder,
                );
                let Some(d) = decision else { break };
                if d.release == UNDECIDED {
                    // Dropped after it was written (counted by ingress): give its room back.
                    self.head_done();
                    continue;
                }
                d.release
            } else {
                rec.release
            };
            if release > upto {
                break;
            }
            let wire_len = rec.wire_len;
            if !tx.send(release, wire_len, rec.data) {
                break;
            }
            self.counters.sent(wire_len, now - release);
            if undecided {
                self.head_done();
            } else {
                self.line.pop();
            }
            n += 1;
        }
        n
    }

    /// Takes the records written since the last call, and the decisions made since.
    fn scan(&mut self) {
        let r = self.reorder.as_mut().expect("reorder mode");
        // The decision taken for the head record before the move to this mode comes first,
        // with only the records up to its own scanned before it: once it was taken, ingress
        // may have written records decided at their arrival, which follow it.
        if let Some(d) = self.head_decision.take() {
            r.take(&mut self.line, d);
        }
        while let Some((slot, release)) = self.line.scan_next() {
            r.add(slot, release);
        }
        while let Ok(d) = self.departures.pop() {
            r.take(&mut self.line, d);
        }
        // The undecided map only needs records from the oldest one still in the ring.
        while r.undecided.front().is_some_and(|&s| s < r.front_seq) {
            r.undecided.pop_front();
            r.undecided_front += 1;
        }
    }

    #[inline(never)]
    fn release_reordered<T: TxPort>(&mut self, now: Nanos, upto: Nanos, budget: usize, tx: &mut T) -> usize {
        self.scan();
        let r = self.reorder.as_mut().expect("reorder mode");
        let mut n = 0;
        while n < budget {
            let Some((release, order, seq, edit)) = r.next() else { break };
            if release > upto {
                break;
            }
            let slot = r.in_ring[(seq - r.front_seq) as usize].0;
            if edit != Edit::default() {
                let data = self.line.data_at_mut(&slot).expect("a scanned record stays until it is consumed");
                apply(data, edit);
            }
            let rec = self.line.record_at(&slot).expect("a scanned record stays until it is consumed");
            let wire_len = rec.wire_len;
            let sent = tx.send(release, wire_len, rec.data);
            if let Some(bit) = edit.corrupt_bit {
                // Undo the flip, so a duplicate that follows goes out as it came.
                let data = self.line.data_at_mut(&slot).expect("still there");
                apply(data, Edit { corrupt_bit: Some(bit), ..Edit::default() });
            }
            if !sent {
                break;
            }
            self.counters.sent(wire_len, now - release);
            if r.max_sent.is_some_and(|m| order < m) {
                self.counters.reordered.inc();
            }
            r.max_sent = Some(r.max_sent.map_or(order, |m| m.max(order)));
            r.take_next();
            r.in_ring[(seq - r.front_seq) as usize].1 -= 1;
            n += 1;
        }
        let mut end = None;
        while let Some(&(slot, 0)) = r.in_ring.front() {
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
        while self.reorder.is_none() {
            let release = self.line.next_release()?;
            if release != UNDECIDED {
                return Some(release);
            }
            match self.head_decision() {
                Some(d) if d.release == UNDECIDED => self.head_done(),
                Some(d) => return Some(d.release),
                None if self.reorder.is_none() => return None,
                None => {}
            }
        }
        self.scan();
        self.reorder.as_ref().and_then(|r| r.next().map(|(t, ..)| t))
    }

    /// True while records wait for a decision from the queue discipline.
    pub fn awaits_decisions(&mut self) -> bool {
        if self.reorder.is_none() {
            if self.line.next_release() != Some(UNDECIDED) {
                return false;
            }
            let decided = self.head_decision().is_some();
            if self.reorder.is_none() {
                return !decided;
            }
        }
        self.scan();
        self.reorder.as_ref().is_some_and(|r| r.waiting > 0)
    }
}

/// [`Egress::head_decision`] on the fields it needs, so that a record of the line can stay
/// borrowed meanwhile.
#[inline(always)]
fn head_decision(
    head: &mut Option<Departure>,
    departures: &mut rtrb::Consumer<Departure>,
    undecided_done: u64,
    reorder: &mut Option<Reorder>,
) -> Option<Departure> {
    if head.is_none() {
        let d = departures.pop().ok()?;
        *head = Some(d);
        if d.seq != undecided_done || d.edit != Edit::default() {
            // Out of order, or edits to make to the frame: the heap's way handles both.
            *reorder = Some(enter_reorder(undecided_done));
            return None;
        }
    }
    *head
}

/// Reorder mode, moved to for good, carrying on from what in-order release has done: the
/// undecided records it finished (the decision it holds for the head record stays in
/// `head_decision`, for the scan to take first).
#[cold]
fn enter_reorder(undecided_done: u64) -> Reorder {
    let mut r = Reorder::new();
    r.undecided_front = undecided_done;
    r
}

/// The counter a discipline's drop goes to.
fn aqm_reason(reason: AqmDrop) -> DropReason {
    match reason {
        AqmDrop::Aqm => DropReason::Aqm,
        AqmDrop::Overlimit => DropReason::Overlimit,
    }
}

/// Applies a decision's edits to a frame about to be sent.
fn apply(data: &mut [u8], edit: Edit) {
    if edit.mark_ce {
        mark_ce(data);
    }
    if let Some(bit) = edit.corrupt_bit {
        flip_bit(data, bit);
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
    fn decisions_in_order_need_no_heap_and_one_out_of_order_moves_to_it() {
        let (mut w, r) = delay_line(1 << 16, 100).unwrap();
        let (mut decide, decided) = departures();
        let mut e = Egress::new(r, Arc::new(Counters::default()), Arc::new(AtomicBool::new(false)), decided);
        for i in 0..4u8 {
            assert!(w.push(UNDECIDED, 60, &[i; 60], |_| {}));
        }
        let d = |seq, release| Departure { seq, release, edit: Edit::default() };
        let mut port = Keep::default();
        assert_eq!(e.next_release(), None);
        assert!(e.awaits_decisions(), "the head waits for its decision");
        decide.push(d(0, Nanos(10))).unwrap();
        decide.push(d(1, UNDECIDED)).unwrap();
        assert_eq!(e.next_release(), Some(Nanos(10)));
        assert_eq!(e.hand(Nanos(9), Nanos(9), EGRESS_BURST, &mut port), 0, "not before its release");
        assert_eq!(e.hand(Nanos(10), Nanos(10), EGRESS_BURST, &mut port), 1);
        assert!(e.reorder.is_none(), "in order so far: no heap");
        assert!(e.awaits_decisions(), "record 1 was given up; record 2 waits");
        // Record 3 is decided before record 2: out of order, so to the heap.
        decide.push(d(3, Nanos(20))).unwrap();
        decide.push(d(2, Nanos(30))).unwrap();
        assert_eq!(e.hand(Nanos(100), Nanos(100), EGRESS_BURST, &mut port), 2);
        assert!(e.reorder.is_some(), "moved to the heap");
        assert_eq!(port.0, vec![(Nanos(10), 0), (Nanos(20), 3), (Nanos(30), 2)]);
        assert_eq!(e.next_release(), None);
        assert!(!e.awaits_decisions());
        assert_eq!(w.used(), 0, "every record's room came back");
    }

    #[test]
    #[should_panic(expected = "engine bug: a decision for record 5 that egress never saw")]
    fn a_decision_for_a_record_never_written_stops_the_engine() {
        let (mut w, r) = delay_line(1 << 16, 100).unwrap();
        let (mut decide, decided) = departures();
        let mut e = Egress::new(r, Arc::new(Counters::default()), Arc::new(AtomicBool::new(false)), decided);
        assert!(w.push(UNDECIDED, 60, &[1; 60], |_| {}));
        // Out of order (record 0 still waits), so the heap takes it, and finds no record 5.
        decide.push(Departure { seq: 5, release: Nanos(5), edit: Edit::default() }).unwrap();
        e.hand(Nanos(10), Nanos(10), EGRESS_BURST, &mut Keep::default());
    }

    #[test]
    fn a_decision_with_edits_is_carried_out_by_the_heap() {
        let (mut w, r) = delay_line(1 << 16, 100).unwrap();
        let (mut decide, decided) = departures();
        let mut e = Egress::new(r, Arc::new(Counters::default()), Arc::new(AtomicBool::new(false)), decided);
        assert!(w.push(UNDECIDED, 60, &[7; 60], |_| {}));
        let edit = Edit { duplicate: true, ..Edit::default() };
        decide.push(Departure { seq: 0, release: Nanos(5), edit }).unwrap();
        let mut port = Keep::default();
        assert_eq!(e.hand(Nanos(5), Nanos(5), EGRESS_BURST, &mut port), 2, "the frame and its duplicate");
        assert!(e.reorder.is_some());
        assert_eq!(port.0, vec![(Nanos(5), 7), (Nanos(5), 7)]);
    }
}
