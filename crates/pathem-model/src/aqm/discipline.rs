//! The one shape of a queue discipline ([`Discipline`]) and the disciplines that keep one FIFO
//! (drop-tail, drop-head, RED, CoDel, PIE); FQ-CoDel and DualPI2 implement it in their
//! modules. A [`super::Bottleneck`] owns what every discipline shares: the link's server, the
//! hard limit, the periodic clock and whether ECN is on; it asks its discipline the rest.

use super::{codel, ecn, red, AqmDrop, Codel, CodelConfig, Entry, Fifo, Pie, PieConfig, Red};
use crate::rng::Rng;
use crate::time::Nanos;

/// What the hard limit does when an arriving frame would pass it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenFull {
    /// Drop the arriving frame without asking the discipline (drop-tail, CoDel, PIE, DualPI2).
    DropArrival,
    /// Ask the discipline first, telling it the queue is full (RED ages its average on every
    /// arrival, as in Floyd's algorithm, then drops).
    Ask,
    /// Admit it, then let the discipline give up frames of its choice ([`Discipline::evict`]:
    /// drop-head its oldest, one at a time until under the limit; FQ-CoDel a batch from its
    /// fattest flow's head, once an arrival).
    Evict,
}

/// A queue discipline: its queue(s) and its control law.
pub trait Discipline {
    /// Frames and bytes waiting (not counting the frame on the wire).
    fn backlog(&self) -> (usize, u64);

    /// What the hard limit does to an arrival that would pass it.
    fn when_full(&self) -> WhenFull {
        WhenFull::DropArrival
    }

    /// Admits frame `e` at its arrival (`full`: it would pass the hard limit, with
    /// [`WhenFull::Ask`]; `ecn`: ECN is on for the path) or hands it back with why it is
    /// dropped. An early congestion signal goes through [`ecn::marks`].
    fn enqueue(&mut self, e: Entry, full: bool, ecn: bool, rng: &mut Rng) -> Result<(), (Entry, AqmDrop)>;

    /// The frame whose transmission starts at `now`, and whether it is to be marked CE;
    /// frames the discipline drops on the way go to `dropped`.
    fn dequeue(&mut self, now: Nanos, rng: &mut Rng, dropped: &mut dyn FnMut(Entry))
        -> Option<(Entry, bool)>;

    /// Frame `e`, arriving to an empty queue with the server free and within every limit,
    /// served at its arrival: what [`enqueue`](Self::enqueue) then [`dequeue`](Self::dequeue)
    /// at `e.arrival` do, in one call: sent (`Ok`, marked CE when `true`) or dropped, and why.
    /// A discipline may take a shorter way to the same result (FQ-CoDel does).
    #[inline(always)]
    fn pass(&mut self, e: Entry, ecn: bool, rng: &mut Rng) -> Result<bool, AqmDrop> {
        self.enqueue(e, false, ecn, rng).map_err(|(_, why)| why)?;
        match self.dequeue(e.arrival, rng, &mut |_| ()) {
            Some((entry, mark)) => Ok(mark || entry.marked),
            None => Err(AqmDrop::Aqm),
        }
    }

    /// True when a frame of `len` bytes alone stays within the discipline's own bound
    /// ([`over_own_limit`](Self::over_own_limit)).
    fn holds_alone(&self, _len: u32) -> bool {
        true
    }

    /// With [`WhenFull::Evict`], over the limit: gives frames up to `dropped`. True when it may
    /// be asked again while still over the limit (drop-head: a frame a call); false when it
    /// gave up what it gives up for this arrival (FQ-CoDel's batch) or had nothing to give.
    fn evict(&mut self, _dropped: &mut dyn FnMut(Entry)) -> bool {
        false
    }

    /// True when the discipline holds more than a bound of its own (FQ-CoDel's `memory`).
    fn over_own_limit(&self) -> bool {
        false
    }

    /// The period of the control law's update (PIE, DualPI2), if it has one.
    fn update_interval(&self) -> Option<Nanos> {
        None
    }

    /// Runs the periodic update due at `at`.
    fn update(&mut self, _at: Nanos) {}

    /// True when updates would change nothing while the queue stays empty.
    fn steady(&self) -> bool {
        true
    }

    /// True when, until a frame arrives or leaves, the updates after the last one leave the
    /// control law where the last of them alone would: the serve loop then runs only the last
    /// update before its next event (a frame held for days at 1 bit/s is not worth 10^7
    /// updates, and one held until the clock's end would never get through them).
    fn settled(&self) -> bool {
        false
    }

    /// Every frame held, taken out (in any order).
    fn take_all(&mut self) -> Vec<Entry>;

    /// Puts back a frame taken from the discipline this one replaces, without deciding on it.
    fn requeue(&mut self, e: Entry);

    /// Keeps the control state of `old`, the same discipline with other parameters.
    fn inherit(&mut self, old: Self)
    where
        Self: Sized;
}

/// Drop-tail as a real FIFO (paths use the link's formula for it; tests compare the two).
#[derive(Debug, Default)]
pub struct DropTail {
    pub q: Fifo,
}

/// Drop-head: over the limit, the oldest frames go.
#[derive(Debug, Default)]
pub struct DropHead {
    pub q: Fifo,
}

/// RED (Floyd and Jacobson) on a FIFO.
#[derive(Debug)]
pub struct RedFifo {
    pub q: Fifo,
    /// The configuration as each arrival uses it.
    pub ramp: red::Ramp,
    pub red: Red,
}

/// CoDel (RFC 8289) on a FIFO.
#[derive(Debug)]
pub struct CodelFifo {
    pub q: Fifo,
    pub config: CodelConfig,
    pub codel: Codel,
}

/// PIE (RFC 8033) on a FIFO.
#[derive(Debug)]
pub struct PieFifo {
    pub q: Fifo,
    pub config: PieConfig,
    pub pie: Pie,
}

/// What every FIFO discipline does the same way.
macro_rules! fifo_common {
    ($q:ident) => {
        fn backlog(&self) -> (usize, u64) {
            (self.$q.len(), self.$q.bytes())
        }
        fn take_all(&mut self) -> Vec<Entry> {
            self.$q.drain().collect()
        }
        fn requeue(&mut self, e: Entry) {
            self.$q.push(e)
        }
    };
}

impl Discipline for DropTail {
    fifo_common!(q);
    #[inline]
    fn enqueue(&mut self, e: Entry, _: bool, _: bool, _: &mut Rng) -> Result<(), (Entry, AqmDrop)> {
        self.q.push(e);
        Ok(())
    }
    #[inline]
    fn dequeue(&mut self, _: Nanos, _: &mut Rng, _: &mut dyn FnMut(Entry)) -> Option<(Entry, bool)> {
        self.q.pop().map(|e| (e, false))
    }
    #[inline(always)]
    fn pass(&mut self, e: Entry, _: bool, _: &mut Rng) -> Result<bool, AqmDrop> {
        Ok(e.marked)
    }
    fn inherit(&mut self, _: DropTail) {}
}

impl Discipline for DropHead {
    fifo_common!(q);
    fn when_full(&self) -> WhenFull {
        WhenFull::Evict
    }
    #[inline]
    fn enqueue(&mut self, e: Entry, _: bool, _: bool, _: &mut Rng) -> Result<(), (Entry, AqmDrop)> {
        self.q.push(e);
        Ok(())
    }
    #[inline]
    fn dequeue(&mut self, _: Nanos, _: &mut Rng, _: &mut dyn FnMut(Entry)) -> Option<(Entry, bool)> {
        self.q.pop().map(|e| (e, false))
    }
    #[inline(always)]
    fn pass(&mut self, e: Entry, _: bool, _: &mut Rng) -> Result<bool, AqmDrop> {
        Ok(e.marked)
    }
    fn evict(&mut self, dropped: &mut dyn FnMut(Entry)) -> bool {
        self.q.pop().map(dropped).is_some()
    }
    fn inherit(&mut self, _: DropHead) {}
}

impl Discipline for RedFifo {
    fifo_common!(q);
    fn when_full(&self) -> WhenFull {
        WhenFull::Ask
    }
    #[inline(always)]
    fn enqueue(&mut self, mut e: Entry, full: bool, on: bool, rng: &mut Rng) -> Result<(), (Entry, AqmDrop)> {
        match self.red.arrive(&self.ramp, self.q.bytes(), e.arrival, rng) {
            red::Verdict::Admit if full => Err((e, AqmDrop::Overlimit)),
            red::Verdict::Admit => {
                self.q.push(e);
                Ok(())
            }
            // An early drop may be a mark, unless the queue is full.
            red::Verdict::Early if ecn::marks(on, e.ect(), !full) => {
                e.marked = true;
                self.q.push(e);
                Ok(())
            }
            _ => Err((e, AqmDrop::Aqm)),
        }
    }
    #[inline]
    fn dequeue(&mut self, now: Nanos, _: &mut Rng, _: &mut dyn FnMut(Entry)) -> Option<(Entry, bool)> {
        let e = self.q.pop()?;
        if self.q.is_empty() {
            self.red.idle_from(now);
        }
        Some((e, false))
    }
    fn inherit(&mut self, old: RedFifo) {
        self.red = old.red;
    }
}

impl Discipline for CodelFifo {
    fifo_common!(q);
    #[inline]
    fn enqueue(&mut self, e: Entry, _: bool, _: bool, _: &mut Rng) -> Result<(), (Entry, AqmDrop)> {
        self.q.push(e);
        Ok(())
    }
    #[inline(always)]
    fn dequeue(&mut self, now: Nanos, _: &mut Rng, dropped: &mut dyn FnMut(Entry)) -> Option<(Entry, bool)> {
        self.codel.dequeue(&self.config, now, &mut self.q, dropped).map(|d| (d.item, d.marked))
    }
    /// Taken with no sojourn and nothing behind it, the frame is sent: CoDel is left below
    /// target and not dropping, as its dequeue would leave it.
    #[inline(always)]
    fn pass(&mut self, e: Entry, _: bool, _: &mut Rng) -> Result<bool, AqmDrop> {
        self.codel.found_short();
        Ok(e.marked)
    }
    fn inherit(&mut self, old: CodelFifo) {
        self.codel = old.codel;
    }
}

impl Discipline for PieFifo {
    fifo_common!(q);
    #[inline]
    fn enqueue(&mut self, mut e: Entry, _: bool, on: bool, rng: &mut Rng) -> Result<(), (Entry, AqmDrop)> {
        // RFC 8033's enqueue: drop_early is asked first, the burst allowance after.
        if !(self.pie.drop_early(&self.config, self.q.bytes(), rng) && self.pie.burst_spent()) {
            self.q.push(e);
            Ok(())
        } else if ecn::marks(on, e.ect(), self.pie.probability() <= self.config.max_ecn) {
            // §5.1: mark while the probability is at most 10%, drop beyond.
            e.marked = true;
            self.q.push(e);
            Ok(())
        } else {
            self.pie.dropped();
            Err((e, AqmDrop::Aqm))
        }
    }
    #[inline]
    fn dequeue(&mut self, now: Nanos, _: &mut Rng, _: &mut dyn FnMut(Entry)) -> Option<(Entry, bool)> {
        let e = self.q.pop()?;
        self.pie.dequeued(now.saturating_sub(e.arrival));
        Some((e, false))
    }
    fn update_interval(&self) -> Option<Nanos> {
        Some(self.config.t_update)
    }
    fn update(&mut self, _: Nanos) {
        self.pie.update(&self.config, self.q.is_empty());
    }
    fn steady(&self) -> bool {
        self.pie.steady(&self.config)
    }
    fn settled(&self) -> bool {
        self.pie.settled()
    }
    fn inherit(&mut self, old: PieFifo) {
        self.pie = old.pie;
    }
}

impl codel::CodelQueue for Fifo {
    type Item = Entry;
    fn pop(&mut self) -> Option<codel::Head<Entry>> {
        let e = Fifo::pop(self)?;
        Some(codel::Head { enqueued: e.arrival, ect: e.ect(), item: e })
    }
    fn bytes(&self) -> u64 {
        self.bytes
    }
}
