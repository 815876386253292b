//! FQ-CoDel (RFC 8290): frames are hashed by their 5-tuple into `flows` queues, each with its
//! own CoDel state; a deficit round robin with a `quantum` of bytes serves them, new flows
//! (those that were not waiting) before old ones, so a sparse flow's frames skip the queue a
//! bulk flow built. As Linux's `fq_codel`, which RFC 8290 describes: CoDel's "queue holds at
//! most one frame" test looks at the whole backlog, an emptied new flow goes to the end of the
//! old list while old flows wait (against starvation), and past the hard limit (frames or
//! memory) the flow with the largest backlog loses a batch from its head: frames until half
//! its bytes are gone, at most `drop-batch` (64), once an arrival, its CoDel count raised by
//! as many (Linux's `fq_codel_drop`, which spares a search of every flow for most arrivals
//! at the limit).

use super::codel::{Codel, CodelConfig, CodelQueue, Head};
use super::{AqmDrop, Discipline, Entry, Fifo, WhenFull};
use crate::rng::Rng;
use crate::spec::{error, KeyValues, Number};
use crate::time::Nanos;
use crate::units::{Duration, Size, UnitError};
use std::str::FromStr;

/// FQ-CoDel's parameters (RFC 8290 §5 and Linux's defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FqCodelConfig {
    /// Number of flow queues (1024).
    pub flows: u32,
    /// Bytes a flow may send per round (1514, one full-size frame).
    pub quantum: u32,
    /// CoDel's target and interval for every flow (5 ms, 100 ms).
    pub codel: CodelConfig,
    /// Bytes of frames queued at most (32 MB).
    pub memory: u64,
    /// Frames the fattest flow loses at most per arrival past the limit (64).
    pub drop_batch: u32,
}

impl Default for FqCodelConfig {
    fn default() -> Self {
        FqCodelConfig {
            flows: 1024,
            quantum: super::MTU,
            codel: CodelConfig::default(),
            memory: 32 << 20,
            drop_batch: 64,
        }
    }
}

const FQ_ACCEPTED: &str = "fq-codel[,flows=N][,quantum=SIZE][,target=DUR][,interval=DUR][,memory=SIZE]\
     [,drop-batch=N] (defaults 1024, 1514B, 5ms, 100ms, 32MiB, 64; flows 1 to 65536, quantum \
     64B to 64KiB, target below interval, interval up to 1h, memory 1B to 1TiB, drop-batch 1 \
     to 65536)";

impl FromStr for FqCodelConfig {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let t = s.trim();
        let body = t.strip_prefix("fq-codel").or_else(|| t.strip_prefix("fq_codel"));
        let body = body.filter(|b| b.is_empty() || b.starts_with(','));
        let body = body.ok_or_else(|| error(s, "is not an FQ-CoDel spec", FQ_ACCEPTED))?;
        let mut kv = KeyValues::parse(s, body, FQ_ACCEPTED)?;
        let d = FqCodelConfig::default();
        let flows = kv.get::<Number>("flows")?.map_or(f64::from(d.flows), |n| n.0);
        let quantum = kv.get::<Size>("quantum")?.map_or(u64::from(d.quantum), |v| v.0);
        let target = kv.get::<Duration>("target")?.map_or(d.codel.target, |v| v.0);
        let interval = kv.get::<Duration>("interval")?.map_or(d.codel.interval, |v| v.0);
        let memory = kv.get::<Size>("memory")?.map_or(d.memory, |v| v.0);
        let batch = kv.get::<Number>("drop-batch")?.map_or(f64::from(d.drop_batch), |n| n.0);
        kv.finish()?;
        let whole = |n: f64| n.fract() == 0.0 && (1.0..=65_536.0).contains(&n);
        if !whole(flows) {
            return Err(error(s, "has a flow count that is not a whole number from 1 to 65536", FQ_ACCEPTED));
        }
        if !whole(batch) {
            return Err(error(s, "has a drop-batch that is not a whole number from 1 to 65536", FQ_ACCEPTED));
        }
        if !(64..=65_536).contains(&quantum) {
            return Err(error(s, "has a quantum outside 64B to 64KiB", FQ_ACCEPTED));
        }
        if target == Nanos::ZERO || target >= interval || interval > crate::limits::MAX_DELAY {
            return Err(error(
                s,
                "has a target of 0, not below the interval, or an interval over 1h",
                FQ_ACCEPTED,
            ));
        }
        if memory == 0 || memory > crate::limits::MAX_QUEUE_BYTES {
            return Err(error(s, "has a memory limit outside 1B to 1TiB", FQ_ACCEPTED));
        }
        Ok(FqCodelConfig {
            flows: flows as u32,
            quantum: quantum as u32,
            codel: CodelConfig { target, interval, ..d.codel },
            memory,
            drop_batch: batch as u32,
        })
    }
}

/// Which list a flow is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Listed {
    No,
    New,
    Old,
}

/// No flow: the end of a list.
const NIL: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct Flow {
    q: Fifo,
    deficit: i64,
    codel: Codel,
    listed: Listed,
    /// The next flow on its list ([`NIL`] at the end): the lists are threaded through the
    /// flows, as Linux's are, so moving a flow between them is two stores and no allocation.
    next: u32,
}

/// A list of flows threaded through their `next` (RFC 8290's new and old lists).
#[derive(Clone, Copy, Debug)]
struct List {
    head: u32,
    tail: u32,
}

impl List {
    const EMPTY: List = List { head: NIL, tail: NIL };

    fn is_empty(&self) -> bool {
        self.head == NIL
    }

    #[inline(always)]
    fn push_back(&mut self, flows: &mut [Flow], i: u32) {
        flows[i as usize].next = NIL;
        match self.tail {
            NIL => self.head = i,
            t => flows[t as usize].next = i,
        }
        self.tail = i;
    }

    /// Unlinks the head (the list is not empty).
    #[inline(always)]
    fn pop_front(&mut self, flows: &[Flow]) {
        self.head = flows[self.head as usize].next;
        if self.head == NIL {
            self.tail = NIL;
        }
    }
}

/// FQ-CoDel's queues and state.
#[derive(Debug)]
pub struct FqCodel {
    cfg: FqCodelConfig,
    flows: Vec<Flow>,
    new_flows: List,
    old_flows: List,
    frames: usize,
    bytes: u64,
}

/// One flow's queue as its CoDel sees it: popping counts against the whole backlog, which is
/// what CoDel's one-frame test reads.
struct FlowView<'a> {
    q: &'a mut Fifo,
    frames: &'a mut usize,
    bytes: &'a mut u64,
}

impl CodelQueue for FlowView<'_> {
    type Item = Entry;
    #[inline]
    fn pop(&mut self) -> Option<Head<Entry>> {
        let e = self.q.pop()?;
        *self.frames -= 1;
        *self.bytes -= u64::from(e.len);
        Some(Head { enqueued: e.arrival, ect: e.ect(), item: e })
    }
    fn bytes(&self) -> u64 {
        *self.bytes
    }
}

impl FqCodel {
    pub fn new(cfg: FqCodelConfig) -> FqCodel {
        let flow =
            Flow { q: Fifo::default(), deficit: 0, codel: Codel::new(), listed: Listed::No, next: NIL };
        FqCodel {
            cfg,
            flows: vec![flow; cfg.flows as usize],
            new_flows: List::EMPTY,
            old_flows: List::EMPTY,
            frames: 0,
            bytes: 0,
        }
    }

    pub fn config(&self) -> &FqCodelConfig {
        &self.cfg
    }

    /// Bytes queued, against the memory limit.
    pub fn memory(&self) -> u64 {
        self.bytes
    }

    /// The queue a flow hash goes to: the hash scaled onto the queues by a multiply and a
    /// shift (Linux's `reciprocal_scale`, as its fq_codel does), not a division per frame.
    #[inline]
    fn queue_of(&self, flow: u32) -> usize {
        ((u64::from(flow) * u64::from(self.cfg.flows)) >> 32) as usize
    }

    #[inline]
    fn push(&mut self, e: Entry) {
        let i = self.queue_of(e.flow);
        let quantum = i64::from(self.cfg.quantum);
        let flow = &mut self.flows[i];
        flow.q.push(e);
        self.frames += 1;
        self.bytes += u64::from(e.len);
        if flow.listed == Listed::No {
            flow.listed = Listed::New;
            flow.deficit = quantum;
            self.new_flows.push_back(&mut self.flows, i as u32);
        }
    }

    /// Drops a batch from the head of the flow with the largest backlog in bytes (the first
    /// such flow), as Linux's `fq_codel_drop`: at least one frame, then more until half the
    /// flow's bytes are gone or `drop_batch` frames are; the flow's CoDel count rises by as
    /// many. False when no flow holds a frame.
    fn drop_from_fattest(&mut self, dropped: &mut dyn FnMut(Entry)) -> bool {
        // Only a listed flow holds frames (a flow is listed when its first frame comes and
        // leaves the lists only once empty), so the fattest is among the new and old flows:
        // the lists are searched, not every bucket.
        // The most bytes, the lowest index among equals (`at` starts past every index). The
        // lists are walked by hand: a queue at its limit walks them once a batch, where a
        // chained iterator measured 2 ns a frame more when it was once a frame.
        let (mut most, mut at) = (0u64, NIL);
        for head in [self.new_flows.head, self.old_flows.head] {
            let mut i = head;
            while i != NIL {
                let flow = &self.flows[i as usize];
                let bytes = flow.q.bytes();
                if bytes > most || (bytes == most && i < at) {
                    (most, at) = (bytes, i);
                }
                i = flow.next;
            }
        }
        let Some(flow) = self.flows.get_mut(at as usize) else { return false };
        let threshold = most / 2;
        let (mut n, mut len) = (0u32, 0u64);
        while let Some(e) = flow.q.pop() {
            (n, len) = (n + 1, len + u64::from(e.len));
            self.frames -= 1;
            self.bytes -= u64::from(e.len);
            dropped(e);
            if n >= self.cfg.drop_batch || len >= threshold {
                break;
            }
        }
        flow.codel.count_drops(u64::from(n));
        false
    }

    /// RFC 8290's dequeue at `now`: the frame to send and whether CoDel marks it; frames CoDel
    /// drops go to `dropped`.
    #[inline(always)]
    fn serve(&mut self, now: Nanos, dropped: &mut dyn FnMut(Entry)) -> Option<(Entry, bool)> {
        loop {
            let from_new = !self.new_flows.is_empty();
            let i = match from_new {
                true => self.new_flows.head,
                false if self.old_flows.is_empty() => return None,
                false => self.old_flows.head,
            };
            let flow = &mut self.flows[i as usize];
            if flow.deficit <= 0 {
                flow.deficit += i64::from(self.cfg.quantum);
                flow.listed = Listed::Old;
                self.unlink_head(from_new);
                self.old_flows.push_back(&mut self.flows, i);
                continue;
            }
            let mut view = FlowView { q: &mut flow.q, frames: &mut self.frames, bytes: &mut self.bytes };
            match flow.codel.dequeue(&self.cfg.codel, now, &mut view, &mut *dropped) {
                Some(d) => {
                    flow.deficit -= i64::from(d.item.len);
                    return Some((d.item, d.marked));
                }
                None => {
                    let to_old = from_new && !self.old_flows.is_empty();
                    flow.listed = if to_old { Listed::Old } else { Listed::No };
                    self.unlink_head(from_new);
                    if to_old {
                        self.old_flows.push_back(&mut self.flows, i);
                    }
                }
            }
        }
    }

    /// [`push`](Self::push) then [`serve`](Self::serve) at its arrival for a frame that finds
    /// every flow empty, without the frame's round trip through its flow's queue: the lists
    /// and deficits move as they would, and each flow the round robin visits sees what a
    /// dequeue there would (CoDel finds the emptied flows empty, and the frame's own flow a
    /// frame with no sojourn and nothing behind it). The frame is sent, never dropped.
    #[inline(always)]
    fn pass_empty(&mut self, e: Entry) -> bool {
        debug_assert_eq!(self.frames, 0);
        let i = self.queue_of(e.flow) as u32;
        let quantum = i64::from(self.cfg.quantum);
        let own = &mut self.flows[i as usize];
        if own.listed == Listed::No {
            own.listed = Listed::New;
            own.deficit = quantum;
            self.new_flows.push_back(&mut self.flows, i);
        }
        loop {
            // Never both lists empty: the frame's flow is on one.
            let from_new = !self.new_flows.is_empty();
            let j = if from_new { self.new_flows.head } else { self.old_flows.head };
            let flow = &mut self.flows[j as usize];
            if flow.deficit <= 0 {
                flow.deficit += quantum;
                flow.listed = Listed::Old;
                self.unlink_head(from_new);
                self.old_flows.push_back(&mut self.flows, j);
                continue;
            }
            flow.codel.found_short();
            if j == i {
                flow.deficit -= i64::from(e.len);
                return e.marked;
            }
            let to_old = from_new && !self.old_flows.is_empty();
            flow.listed = if to_old { Listed::Old } else { Listed::No };
            self.unlink_head(from_new);
            if to_old {
                self.old_flows.push_back(&mut self.flows, j);
            }
        }
    }

    /// Unlinks the head of the new list (`new`) or of the old one.
    #[inline(always)]
    fn unlink_head(&mut self, new: bool) {
        match new {
            true => self.new_flows.pop_front(&self.flows),
            false => self.old_flows.pop_front(&self.flows),
        }
    }

    /// Every queued frame, taken out (in no particular order).
    fn take_every(&mut self) -> Vec<Entry> {
        let mut all = Vec::with_capacity(self.frames);
        for f in &mut self.flows {
            while let Some(e) = f.q.pop() {
                all.push(e);
            }
            f.listed = Listed::No;
        }
        (self.new_flows, self.old_flows) = (List::EMPTY, List::EMPTY);
        (self.frames, self.bytes) = (0, 0);
        all
    }
}

impl Discipline for FqCodel {
    fn backlog(&self) -> (usize, u64) {
        (self.frames, self.bytes)
    }
    fn when_full(&self) -> WhenFull {
        WhenFull::Evict
    }
    #[inline]
    fn enqueue(&mut self, e: Entry, _: bool, _: bool, _: &mut Rng) -> Result<(), (Entry, AqmDrop)> {
        self.push(e);
        Ok(())
    }
    /// RFC 8290's dequeue at `now`.
    #[inline(always)]
    fn dequeue(&mut self, now: Nanos, _: &mut Rng, dropped: &mut dyn FnMut(Entry)) -> Option<(Entry, bool)> {
        self.serve(now, dropped)
    }
    #[inline(always)]
    fn pass(&mut self, e: Entry, _: bool, _: &mut Rng) -> Result<bool, AqmDrop> {
        Ok(self.pass_empty(e))
    }
    fn evict(&mut self, dropped: &mut dyn FnMut(Entry)) -> bool {
        self.drop_from_fattest(dropped)
    }
    fn over_own_limit(&self) -> bool {
        self.memory() > self.cfg.memory
    }
    fn holds_alone(&self, len: u32) -> bool {
        u64::from(len) <= self.cfg.memory
    }
    fn take_all(&mut self) -> Vec<Entry> {
        self.take_every()
    }
    fn requeue(&mut self, e: Entry) {
        self.push(e)
    }
    /// Keeps each flow's CoDel state when the number of flows is unchanged.
    fn inherit(&mut self, old: FqCodel) {
        if old.flows.len() == self.flows.len() {
            for (n, o) in self.flows.iter_mut().zip(old.flows) {
                n.codel = o.codel;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame that finds every flow empty, passed at once, leaves FQ-CoDel as pushing and
    /// serving it would: the same frame out, the same lists, deficits and CoDel states after.
    /// Driven through standing queues (CoDel dropping in some flows, then emptied), collisions
    /// of flows on few buckets, and quiet spells, so the round robin meets emptied flows on
    /// both lists, deficits spent and CoDel states to clear.
    #[test]
    fn a_frame_passed_at_once_leaves_the_state_serving_it_would() {
        let cfg: FqCodelConfig = "fq-codel,flows=8,quantum=300,target=1ms,interval=10ms".parse().unwrap();
        let (mut a, mut b) = (FqCodel::new(cfg), FqCodel::new(cfg));
        let mut r = Rng::seeded(11);
        let (mut t, mut passed, mut dropped) = (Nanos::from_secs(1), 0, 0);
        for seq in 0..200_000u64 {
            t += Nanos(match r.below(100) {
                0 => 50_000_000,
                k if k < 60 => r.below(200_000),
                _ => r.below(3_000_000),
            });
            let e = Entry {
                seq,
                arrival: t,
                len: 60 + r.below(1_455) as u32,
                caplen: 60,
                flow: (r.below(12) as u32).wrapping_mul(0x1555_5555),
                ecn: super::super::ecn::NOT_ECT,
                marked: false,
            };
            if a.frames == 0 && r.below(2) == 0 {
                let sent = a.pass_empty(e);
                b.push(e);
                let got = b.serve(t, &mut |_| panic!("a frame alone is never dropped"));
                assert_eq!(got.map(|(x, m)| (x.seq, m)), Some((seq, sent)), "frame {seq}");
                assert_eq!(format!("{a:?}"), format!("{b:?}"), "after frame {seq}");
                passed += 1;
                continue;
            }
            a.push(e);
            b.push(e);
            // Serve now and then, far behind the arrivals or close to them.
            for _ in 0..r.below(3) {
                let (x, y) = (a.serve(t, &mut |_| dropped += 1), b.serve(t, &mut |_| {}));
                assert_eq!(x.map(|(x, m)| (x.seq, m)), y.map(|(y, m)| (y.seq, m)));
            }
        }
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert!(passed > 10_000 && dropped > 1_000, "{passed} passed at once, {dropped} dropped by CoDel");
    }

    #[test]
    fn specs_parse_with_defaults_and_ranges() {
        assert_eq!("fq-codel".parse::<FqCodelConfig>().unwrap(), FqCodelConfig::default());
        let c: FqCodelConfig =
            "fq-codel,flows=16,quantum=300,target=2ms,memory=1MB,drop-batch=8".parse().unwrap();
        assert_eq!(
            (c.flows, c.quantum, c.codel.target, c.memory, c.drop_batch),
            (16, 300, Nanos::from_millis(2), 1_000_000, 8)
        );
        for bad in [
            "fq-codel,flows=0",
            "fq-codel,flows=1.5",
            "fq-codel,quantum=10",
            "fq-codel,drop-batch=0",
            "fq-codel,drop-batch=65537",
            "fq-codel,drop-batch=2.5",
            "fq-codel,target=1s",
            "fq-codelx",
        ] {
            assert!(bad.parse::<FqCodelConfig>().is_err(), "{bad}");
        }
    }
}
