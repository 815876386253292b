//! CoDel (RFC 8289) as a pure state machine.
//!
//! CoDel looks at each frame as it is dequeued (starts its transmission): how long it stood
//! in the queue (its sojourn time). While the sojourn time has stayed above `target` for an
//! `interval`, it drops (or, for ECN-capable frames with ECN on, marks) at instants spaced by
//! `interval / sqrt(count)`, so the drop rate grows until the queue's standing delay falls
//! back under `target`. The model owns no queue: the caller's queue is reached through
//! [`CodelQueue`], so the engine can keep frames where it copied them (its delay line) and run
//! the decision at each frame's service instant (see docs/design.md, "Queue disciplines").

use crate::spec::{error, KeyValues};
use crate::time::Nanos;
use crate::units::{Duration, UnitError};
use std::str::FromStr;

/// CoDel's parameters (RFC 8289 §4.2–4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodelConfig {
    /// Acceptable standing queue delay (default 5 ms).
    pub target: Nanos,
    /// Window over which the delay must stay above target before dropping starts; on the
    /// order of a worst-case round-trip time (default 100 ms).
    pub interval: Nanos,
    /// Bytes at or below which the queue is never dropped from (one maximum-size frame: RFC
    /// 8289's MAXPACKET).
    pub max_packet: u64,
    /// Mark ECN-capable frames instead of dropping them.
    pub ecn: bool,
}

impl Default for CodelConfig {
    fn default() -> Self {
        CodelConfig {
            target: Nanos::from_millis(5),
            interval: Nanos::from_millis(100),
            max_packet: 1514,
            ecn: false,
        }
    }
}

const CODEL_ACCEPTED: &str =
    "codel[,target=DUR][,interval=DUR] (defaults 5ms and 100ms; target below interval, \
                              interval up to 1h)";

impl FromStr for CodelConfig {
    type Err = UnitError;
    /// `codel`, `codel,target=5ms,interval=100ms`.
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let body = match s.trim().split_once(',') {
            Some(("codel", rest)) => rest,
            None if s.trim() == "codel" => "",
            _ => return Err(error(s, "is not a CoDel spec", CODEL_ACCEPTED)),
        };
        let mut kv = KeyValues::parse(s, body, CODEL_ACCEPTED)?;
        let d = CodelConfig::default();
        let target = kv.get::<Duration>("target")?.map_or(d.target, |t| t.0);
        let interval = kv.get::<Duration>("interval")?.map_or(d.interval, |t| t.0);
        kv.finish()?;
        if target == Nanos::ZERO || target >= interval || interval > crate::limits::MAX_DELAY {
            return Err(error(
                s,
                "has a target of 0, a target not below the interval, or an interval over 1h",
                CODEL_ACCEPTED,
            ));
        }
        Ok(CodelConfig { target, interval, ..d })
    }
}

/// The head of the caller's queue, as CoDel sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head<T> {
    /// When the frame joined the queue.
    pub enqueued: Nanos,
    /// ECN-capable transport (ECT(0) or ECT(1)).
    pub ect: bool,
    /// The caller's handle on the frame.
    pub item: T,
}

/// The queue CoDel dequeues from.
pub trait CodelQueue {
    type Item;
    /// Takes the head of the queue off, if any.
    fn pop(&mut self) -> Option<Head<Self::Item>>;
    /// Bytes still in the queue (after the frames taken so far).
    fn bytes(&self) -> u64;
}

/// What leaves the queue at a dequeue: a frame to send (CE-marked first when `marked`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dequeued<T> {
    pub item: T,
    pub marked: bool,
}

/// CoDel's state (RFC 8289's `first_above_time`, `drop_next`, `count`, `lastcount`,
/// `dropping`). The configuration is apart, so changing target or interval keeps the state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Codel {
    first_above_time: Option<Nanos>,
    drop_next: Nanos,
    count: u64,
    last_count: u64,
    dropping: bool,
}

impl Codel {
    pub fn new() -> Codel {
        Codel::default()
    }

    /// Counts `n` drops made outside the control law (FQ-CoDel's batch at its hard limit), as
    /// Linux's fq_codel does, so the law's drop rate starts higher when it next drops.
    pub fn count_drops(&mut self, n: u64) {
        self.count = self.count.saturating_add(n);
    }

    /// Where a dequeue leaves CoDel when it finds the queue empty, or takes a frame with no
    /// sojourn and nothing behind it (under target, or too little queued to count): not
    /// above target, not dropping. FQ-CoDel's frame that passes an empty queue comes here
    /// without the round trip through its flow's queue.
    #[inline(always)]
    pub fn found_short(&mut self) {
        self.first_above_time = None;
        self.dropping = false;
    }

    /// `t + interval / sqrt(count)` (RFC 8289's control law), in whole nanoseconds.
    pub fn control_law(cfg: &CodelConfig, t: Nanos, count: u64) -> Nanos {
        t + Nanos((cfg.interval.as_nanos() as f64 / (count.max(1) as f64).sqrt()) as u64)
    }

    /// RFC 8289's `dodequeue`: takes the head and says whether CoDel may drop it.
    #[inline]
    fn take<Q: CodelQueue>(
        &mut self,
        cfg: &CodelConfig,
        now: Nanos,
        q: &mut Q,
    ) -> Option<(Head<Q::Item>, bool)> {
        let Some(head) = q.pop() else {
            self.first_above_time = None;
            return None;
        };
        let sojourn = now.saturating_sub(head.enqueued);
        let mut ok_to_drop = false;
        if sojourn < cfg.target || q.bytes() <= cfg.max_packet {
            // Below target, or too little queued to be a standing queue.
            self.first_above_time = None;
        } else {
            match self.first_above_time {
                None => self.first_above_time = Some(now + cfg.interval),
                Some(t) if now >= t => ok_to_drop = true,
                Some(_) => {}
            }
        }
        Some((head, ok_to_drop))
    }

    /// Dequeues at `now` (RFC 8289's `dequeue`): the frame to send, if any; frames CoDel
    /// drops on the way are handed to `dropped`. Inlined into its callers, CoDel's FIFO and
    /// FQ-CoDel's scheduler, which run it for every frame (58 instructions a frame less than
    /// a call).
    #[inline(always)]
    pub fn dequeue<Q: CodelQueue>(
        &mut self,
        cfg: &CodelConfig,
        now: Nanos,
        q: &mut Q,
        mut dropped: impl FnMut(Q::Item),
    ) -> Option<Dequeued<Q::Item>> {
        let Some((mut head, mut ok_to_drop)) = self.take(cfg, now, q) else {
            self.dropping = false;
            return None;
        };
        if self.dropping {
            if !ok_to_drop {
                // Sojourn time below target: leave the dropping state.
                self.dropping = false;
            }
            // Drop (or mark) as long as the next drop is due, raising the rate each time.
            while self.dropping && now >= self.drop_next {
                self.count += 1;
                if super::ecn::marks(cfg.ecn, head.ect, true) {
                    self.drop_next = Codel::control_law(cfg, self.drop_next, self.count);
                    return Some(Dequeued { item: head.item, marked: true });
                }
                dropped(head.item);
                match self.take(cfg, now, q) {
                    None => {
                        self.dropping = false;
                        return None;
                    }
                    Some((h, ok)) => {
                        (head, ok_to_drop) = (h, ok);
                        if ok_to_drop {
                            self.drop_next = Codel::control_law(cfg, self.drop_next, self.count);
                        } else {
                            self.dropping = false;
                        }
                    }
                }
            }
        } else if ok_to_drop {
            // Enter the dropping state: drop this frame, and start the drop rate where it was
            // if the last dropping state ended recently (RFC 8289 §4.4).
            let marked = super::ecn::marks(cfg.ecn, head.ect, true);
            let delta = self.count.saturating_sub(self.last_count);
            self.count = if delta > 1
                && now.saturating_sub(self.drop_next) < Nanos(cfg.interval.as_nanos().saturating_mul(16))
            {
                delta
            } else {
                1
            };
            self.drop_next = Codel::control_law(cfg, now, self.count);
            self.last_count = self.count;
            self.dropping = true;
            if marked {
                return Some(Dequeued { item: head.item, marked: true });
            }
            dropped(head.item);
            let (h, _) = self.take(cfg, now, q)?;
            head = h;
        }
        Some(Dequeued { item: head.item, marked: false })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A FIFO of (enqueue time, bytes, ect, id).
    #[derive(Default)]
    struct Fifo {
        q: VecDeque<(Nanos, u64, bool, u64)>,
        bytes: u64,
    }

    impl CodelQueue for Fifo {
        type Item = u64;
        fn pop(&mut self) -> Option<Head<u64>> {
            let (t, b, ect, id) = self.q.pop_front()?;
            self.bytes -= b;
            Some(Head { enqueued: t, ect, item: id })
        }
        fn bytes(&self) -> u64 {
            self.bytes
        }
    }

    /// RFC 8289's pseudo-code (its appendix), written out line for line on signed nanoseconds
    /// and a plain deque: slow and obvious, the reference the model must match. Time 0 stands
    /// for "unset", as in the RFC.
    struct Reference {
        q: VecDeque<(i64, u64, u64)>,
        bytes: u64,
        target: i64,
        interval: i64,
        maxpacket: u64,
        first_above_time: i64,
        drop_next: i64,
        count: u64,
        lastcount: u64,
        dropping: bool,
        dropped: Vec<u64>,
    }

    impl Reference {
        fn control_law(&self, t: i64) -> i64 {
            t + (self.interval as f64 / (self.count as f64).sqrt()) as i64
        }
        fn dodequeue(&mut self, now: i64) -> (Option<u64>, bool) {
            let Some((ts, b, id)) = self.q.pop_front() else {
                self.first_above_time = 0;
                return (None, false);
            };
            self.bytes -= b;
            let sojourn_time = now - ts;
            let mut ok_to_drop = false;
            if sojourn_time < self.target || self.bytes <= self.maxpacket {
                self.first_above_time = 0;
            } else if self.first_above_time == 0 {
                self.first_above_time = now + self.interval;
            } else if now >= self.first_above_time {
                ok_to_drop = true;
            }
            (Some(id), ok_to_drop)
        }
        fn dequeue(&mut self, now: i64) -> Option<u64> {
            let (mut p, mut ok_to_drop) = self.dodequeue(now);
            if p.is_none() {
                self.dropping = false;
                return None;
            }
            if self.dropping {
                if !ok_to_drop {
                    self.dropping = false;
                }
                while now >= self.drop_next && self.dropping {
                    self.dropped.push(p.unwrap());
                    self.count += 1;
                    (p, ok_to_drop) = self.dodequeue(now);
                    if p.is_none() || !ok_to_drop {
                        self.dropping = false;
                    } else {
                        self.drop_next = self.control_law(self.drop_next);
                    }
                }
            } else if ok_to_drop {
                self.dropped.push(p.unwrap());
                (p, _) = self.dodequeue(now);
                self.dropping = true;
                let delta = self.count as i64 - self.lastcount as i64;
                self.count = 1;
                if delta > 1 && now - self.drop_next < 16 * self.interval {
                    self.count = delta as u64;
                }
                self.drop_next = self.control_law(now);
                self.lastcount = self.count;
            }
            p
        }
    }

    /// A bottleneck of `rate` bit/s fed by `arrivals` (time, bytes): each frame's service
    /// starts when the previous one's transmission ends; CoDel decides at each start.
    /// Returns the ids sent and dropped, model and reference alike.
    fn run(arrivals: &[(u64, u64)], rate: u64) -> (Outcome, Outcome) {
        run_with_sojourns(arrivals, rate).0
    }

    /// The ids of the frames sent and of those dropped.
    type Outcome = (Vec<u64>, Vec<u64>);

    /// [`run`], with the service start and sojourn time of each frame sent.
    fn run_with_sojourns(arrivals: &[(u64, u64)], rate: u64) -> ((Outcome, Outcome), Vec<(u64, u64)>) {
        let mut sojourns = Vec::new();
        let cfg = CodelConfig::default();
        let mut model = (Codel::new(), Fifo::default(), Vec::new(), Vec::new());
        let mut refr = Reference {
            q: VecDeque::new(),
            bytes: 0,
            target: cfg.target.as_nanos() as i64,
            interval: cfg.interval.as_nanos() as i64,
            maxpacket: cfg.max_packet,
            first_above_time: 0,
            drop_next: 0,
            count: 0,
            lastcount: 0,
            dropping: false,
            dropped: Vec::new(),
        };
        let mut ref_sent = Vec::new();
        let (mut next, mut free_at) = (0usize, 0u64);
        let wire = |b: u64| (b + 24) * 8 * 1_000_000_000 / rate;
        loop {
            // The next event: an arrival, or the server taking the head once it is free.
            let serve_at = model.1.q.front().map(|h| free_at.max(h.0.as_nanos()));
            let arrival_first = match (arrivals.get(next), serve_at) {
                (Some(&(t, _)), Some(s)) => t < s,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if arrival_first {
                let (t, b) = arrivals[next];
                model.1.q.push_back((Nanos(t), b, false, next as u64));
                model.1.bytes += b;
                refr.q.push_back((t as i64, b, next as u64));
                refr.bytes += b;
                next += 1;
                continue;
            }
            let s = serve_at.expect("a frame to serve");
            let (codel, fifo, sent, dropped) = &mut model;
            let out = codel.dequeue(&cfg, Nanos(s), fifo, |id| dropped.push(id));
            let r = refr.dequeue(s as i64);
            assert_eq!(out.map(|d| d.item), r, "at {s} ns");
            match out {
                Some(d) => {
                    sent.push(d.item);
                    ref_sent.push(d.item);
                    sojourns.push((s, s - arrivals[d.item as usize].0));
                    free_at = s + wire(arrivals[d.item as usize].1);
                }
                None => free_at = s,
            }
        }
        (((model.2, model.3), (ref_sent, refr.dropped)), sojourns)
    }

    #[test]
    fn codel_decides_as_rfc_8289_frame_for_frame() {
        // A 10 Mbit/s bottleneck, 1500-byte frames at 12 Mbit/s for 3 s (a standing queue
        // grows), then 8 Mbit/s (it drains), with a jitter from a fixed seed.
        let mut rng = crate::Rng::seeded(7);
        let mut arrivals = Vec::new();
        let mut t = 0u64;
        while t < 6_000_000_000 {
            let gap = if t < 3_000_000_000 { 1_000_000 } else { 1_500_000 };
            t += gap / 2 + (rng.next_u64() % gap);
            arrivals.push((t, 1500));
        }
        let (((sent, dropped), (ref_sent, ref_dropped)), sojourns) = run_with_sojourns(&arrivals, 10_000_000);
        assert_eq!(dropped, ref_dropped);
        assert_eq!(sent, ref_sent);
        assert!(dropped.len() > 20, "an overload is dropped from: {}", dropped.len());
        assert_eq!(sent.len() + dropped.len(), arrivals.len(), "every frame sent or dropped");
        // Unresponsive traffic 20% over the rate: CoDel's drop rate climbs (interval/sqrt(n)
        // apart), more drops in each later second, and the queue stays below drop-tail's.
        let per_second = |from: u64| {
            let start = arrivals.iter().position(|a| a.0 >= from).unwrap_or(0) as u64;
            let end =
                arrivals.iter().position(|a| a.0 >= from + 1_000_000_000).unwrap_or(arrivals.len()) as u64;
            dropped.iter().filter(|&&id| (start..end).contains(&id)).count()
        };
        assert!(per_second(2_000_000_000) > per_second(1_000_000_000), "the drop rate rises");
        let median = |v: &mut Vec<u64>| {
            v.sort_unstable();
            v[v.len() / 2]
        };
        let in_last_second = |at: &u64| (2_000_000_000..3_000_000_000).contains(at);
        let mut codel: Vec<u64> = sojourns.iter().filter(|(at, _)| in_last_second(at)).map(|s| s.1).collect();
        let mut tail = Vec::new();
        let mut free = 0u64;
        for &(t, b) in &arrivals {
            let start = free.max(t);
            if in_last_second(&start) {
                tail.push(start - t);
            }
            free = start + (b + 24) * 8 * 1_000_000_000 / 10_000_000;
        }
        let (c, t) = (median(&mut codel), median(&mut tail));
        assert!(c < t * 3 / 4, "median sojourn {c} ns with CoDel, {t} ns drop-tail");
    }

    #[test]
    fn below_target_nothing_is_dropped() {
        let arrivals: Vec<(u64, u64)> = (0..5000).map(|i| (i * 2_000_000, 1500)).collect();
        let ((sent, dropped), _) = run(&arrivals, 10_000_000);
        assert!(dropped.is_empty());
        assert_eq!(sent.len(), 5000);
    }

    #[test]
    fn ecn_capable_frames_are_marked_not_dropped() {
        let cfg = CodelConfig { ecn: true, ..CodelConfig::default() };
        let mut c = Codel::new();
        let mut q = Fifo::default();
        for i in 0..200 {
            q.q.push_back((Nanos::ZERO, 1500, true, i));
            q.bytes += 1500;
        }
        // Every frame has waited 50 ms, above target for longer than an interval by the end.
        let mut marked = 0;
        let mut now = Nanos::from_millis(50);
        while let Some(d) = c.dequeue(&cfg, now, &mut q, |_| panic!("an ECN-capable frame was dropped")) {
            marked += u32::from(d.marked);
            now += Nanos::from_millis(2);
        }
        assert!(marked > 0, "the standing queue was signalled");
    }

    #[test]
    fn specs_parse_with_defaults_and_ranges() {
        assert_eq!("codel".parse::<CodelConfig>().unwrap(), CodelConfig::default());
        let c: CodelConfig = "codel,target=1ms,interval=20ms".parse().unwrap();
        assert_eq!((c.target, c.interval), (Nanos::from_millis(1), Nanos::from_millis(20)));
        for bad in [
            "codel,target=0ms",
            "codel,target=200ms",
            "codel,interval=2h",
            "codel,foo=1",
            "red",
            "codel,target",
        ] {
            assert!(bad.parse::<CodelConfig>().is_err(), "{bad}");
        }
    }

    #[test]
    fn control_law_spaces_drops_by_interval_over_sqrt_count() {
        let cfg = CodelConfig::default();
        assert_eq!(Codel::control_law(&cfg, Nanos::ZERO, 1), Nanos::from_millis(100));
        assert_eq!(Codel::control_law(&cfg, Nanos::ZERO, 4), Nanos::from_millis(50));
        assert_eq!(Codel::control_law(&cfg, Nanos::ZERO, 0), Nanos::from_millis(100));
    }
}
