//! The bottleneck link: a server (a fixed rate, or a delivery-opportunity trace), the wire
//! size of a frame (overhead, cells), and a drop-tail queue in front of it.
//!
//! The queue is not a real queue (TLEM §4.2): a frame's exit time follows from the previous
//! frame's, `t_exit(i) = max(t_exit(i-1), t_arrival(i)) + wire(i) * 8 / rate`, and what sits in
//! the queue at any instant is the set of frames whose exit time is still ahead. Transmission
//! times are exact: the sub-nanosecond remainder of each frame carries into the next one while
//! the link stays busy, so a long busy period never drifts.
//!
//! With a trace (Mahimahi's format), the link delivers in opportunities: each line of the trace
//! is a millisecond at which [`OPPORTUNITY_BYTES`] may leave; a frame leaves at the opportunity
//! that carries its last byte, several small frames may share one, and a large one may span
//! several. Unused bytes of an opportunity are lost. The trace repeats with the period of its
//! last timestamp, from the first frame's arrival.

use crate::spec::{error, Number};
use crate::time::Nanos;
use crate::units::{QueueLimit, Rate, UnitError};
use std::collections::VecDeque;
use std::str::FromStr;
use std::sync::Arc;

/// Ethernet framing not present in captured frames: preamble + SFD (8), FCS (4), gap (12).
pub const ETHERNET_OVERHEAD: i32 = 24;
/// Bytes one trace opportunity carries (Mahimahi: a 1500-byte packet and its 4-byte header).
pub const OPPORTUNITY_BYTES: u32 = 1504;

/// A Mahimahi delivery-opportunity trace.
#[derive(Clone, Debug, PartialEq)]
pub struct RateTrace {
    /// Opportunity times within one period, non-decreasing, in ns.
    times: Vec<u64>,
    period: u64,
}

impl RateTrace {
    /// One integer millisecond timestamp per line, non-decreasing; a timestamp repeated n times
    /// is n opportunities at that millisecond. The period is the last timestamp.
    pub fn parse(text: &str) -> Result<RateTrace, crate::trace::TraceError> {
        use crate::trace::TraceError;
        let mut times = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let ms: u64 = line.parse().map_err(|_| {
                TraceError::line(
                    n,
                    format!("`{}` is not a whole number of milliseconds", crate::units::shown(line)),
                )
            })?;
            let max_ms = crate::limits::MAX_TRACE_SPAN.as_nanos() / 1_000_000;
            if ms > max_ms {
                return Err(TraceError::line(
                    n,
                    format!("{ms} ms is past the longest trace, 1 day ({max_ms} ms)"),
                ));
            }
            if let Some(&last) = times.last() {
                if ms * 1_000_000 < last {
                    return Err(TraceError::line(n, format!("{ms} ms goes back in time")));
                }
            }
            times.push(ms * 1_000_000);
        }
        let period = *times.last().ok_or_else(|| TraceError::Whole("holds no timestamp".into()))?;
        if period == 0 {
            return Err(TraceError::Whole("its last timestamp is 0 ms: the period must be above 0".into()));
        }
        Ok(RateTrace { times, period })
    }

    /// The average rate the trace offers, at least 1 bit/s: what sizes a queue by the rate
    /// (a discipline's default limit, RED's typical transmission time) takes a slower trace
    /// as 1 bit/s. [`mean_bits_per_sec`](Self::mean_bits_per_sec) is the exact figure.
    pub fn mean_rate(&self) -> Rate {
        let bits = self.times.len() as u128 * u128::from(OPPORTUNITY_BYTES) * 8 * 1_000_000_000;
        Rate((bits / u128::from(self.period)).max(1) as u64)
    }

    /// The average rate the trace offers, in bits per second, below 1 too.
    pub fn mean_bits_per_sec(&self) -> f64 {
        self.times.len() as f64 * f64::from(OPPORTUNITY_BYTES) * 8.0 * 1e9 / self.period as f64
    }

    pub fn period(&self) -> Nanos {
        Nanos(self.period)
    }

    /// Opportunity `k` (counting across loops) relative to the trace's start; past the
    /// clock's end (a backlog of frames a day apart each, 213 000 frames deep) it saturates,
    /// as every `Nanos` sum does, never wraps to an early time.
    fn time(&self, k: u64) -> u64 {
        let n = self.times.len() as u64;
        (k / n).saturating_mul(self.period).saturating_add(self.times[(k % n) as usize])
    }

    /// The first opportunity at or after `t` (relative to the trace's start). The last
    /// timestamp is the period, so at a lap's boundary the lap before still has its last
    /// opportunities (those at the period), at `t` itself.
    fn first_at_or_after(&self, t: u64) -> u64 {
        let n = self.times.len() as u64;
        let (lap, phase) = (t / self.period, t % self.period);
        if phase == 0 && lap > 0 {
            let i = self.times.partition_point(|&x| x < self.period) as u64;
            return (lap - 1).saturating_mul(n).saturating_add(i);
        }
        let i = self.times.partition_point(|&x| x < phase) as u64;
        lap.saturating_mul(n).saturating_add(i)
    }
}

/// What serves the queue.
#[derive(Clone, Debug, PartialEq)]
pub enum Server {
    Rate(Rate),
    Trace(Arc<RateTrace>),
}

/// Cell framing (NetEm `rate` cellsize/celloverhead, e.g. ATM 48,5).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    pub size: u32,
    pub overhead: u32,
}

const CELL_ACCEPTED: &str =
    "SIZE,OVERHEAD in bytes, SIZE 1 to 65535 and OVERHEAD 0 to 65535, e.g. 48,5 for ATM";

impl FromStr for Cell {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Cell, UnitError> {
        let (a, b) = s.split_once(',').ok_or_else(|| error(s, "needs SIZE,OVERHEAD", CELL_ACCEPTED))?;
        let num = |v: &str| -> Result<u32, UnitError> {
            let n = v.parse::<Number>().map_err(|e| error(s, e.reason, CELL_ACCEPTED))?.0;
            if n.fract() != 0.0 {
                return Err(error(s, format!("has `{v}`, not a whole number of bytes"), CELL_ACCEPTED));
            }
            if n > f64::from(u16::MAX) {
                return Err(error(s, format!("has `{v}`, above 65535 bytes"), CELL_ACCEPTED));
            }
            Ok(n as u32)
        };
        let cell = Cell { size: num(a.trim())?, overhead: num(b.trim())? };
        if cell.size == 0 {
            return Err(error(s, "has cell size 0", CELL_ACCEPTED));
        }
        Ok(cell)
    }
}

crate::deserialize_from_str!(Cell);

/// What the user asked of the link.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    pub server: Server,
    /// Bytes added to every frame's length for its transmission time (rate server only);
    /// negative to take bytes off (a capture that holds headers the link does not carry).
    pub overhead: i32,
    pub cell: Option<Cell>,
    /// Drop-tail limit on the frames waiting for or in transmission; `None` = unbounded.
    pub queue: Option<QueueLimit>,
}

impl LinkConfig {
    /// A plain rate with Ethernet overhead and no queue limit.
    pub fn rate(rate: Rate) -> LinkConfig {
        LinkConfig { server: Server::Rate(rate), overhead: ETHERNET_OVERHEAD, cell: None, queue: None }
    }

    /// The long-run rate (for sizing the delay line).
    pub fn mean_rate(&self) -> Rate {
        match &self.server {
            Server::Rate(r) => *r,
            Server::Trace(t) => t.mean_rate(),
        }
    }

    /// Bytes a frame of `len` takes on this link: with overhead (never below zero), rounded
    /// up to whole cells.
    pub fn wire_len(&self, len: u32) -> u64 {
        let l = (i64::from(len) + i64::from(self.overhead)).max(0) as u64;
        match self.cell {
            Some(c) => l.div_ceil(u64::from(c.size)) * u64::from(c.size + c.overhead),
            None => l,
        }
    }
}

impl std::fmt::Display for LinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.server {
            Server::Rate(r) => write!(f, "rate {r} ({:+} B/frame", self.overhead)?,
            Server::Trace(t) => {
                // A trace slower than 1 bit/s says its mean as it is, not as the 1 bit/s
                // that sizes its queue.
                match t.mean_bits_per_sec() {
                    m if m < 1.0 => write!(f, "rate trace (mean {m:.3}bit, period {}", t.period())?,
                    _ => write!(f, "rate trace (mean {}, period {}", t.mean_rate(), t.period())?,
                }
            }
        }
        if let Some(c) = self.cell {
            write!(f, ", cells {}+{}", c.size, c.overhead)?;
        }
        f.write_str(")")?;
        match self.queue {
            Some(QueueLimit::Bytes(b)) => write!(f, ", queue {b} B"),
            Some(QueueLimit::Packets(n)) => write!(f, ", queue {n} frames"),
            None => write!(f, ", queue unbounded"),
        }
    }
}

/// A rate link's state that every frame moves ([`Link::take_hot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hot {
    last_exit: Nanos,
    carry: u64,
}

/// A frame still in the link: its exit time and its length in bytes (without overhead).
#[derive(Clone, Copy, Debug)]
struct InLink {
    exit: Nanos,
    len: u32,
}

/// The serving side's state.
// The rate variant carries its cache inline on purpose: boxing it would add a pointer chase
// to every frame's exit-time computation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Serve {
    Rate {
        rate: u64,
        last_exit: Nanos,
        /// Remainder of `bits * 1e9 / rate` not yet turned into whole nanoseconds.
        carry: u64,
        /// Transmission time of recently seen lengths as `(len, whole ns, remainder)`, so the
        /// common case costs no division; direct-mapped by length.
        tx_cache: [(u32, u64, u64); TX_CACHE],
    },
    Trace {
        trace: Arc<RateTrace>,
        origin: Option<Nanos>,
        /// The opportunity last used and the bytes it has left; `None` before the first frame.
        current: Option<(u64, u32)>,
        /// No frame leaves before this: when the last frame of the link this one replaced
        /// leaves (its opportunities are taken).
        floor: Nanos,
    },
}

const TX_CACHE: usize = 16;
const NO_LEN: u32 = u32::MAX;

/// The link's state: when the last admitted frame leaves, and which frames are still inside.
#[derive(Debug)]
pub struct Link {
    config: LinkConfig,
    serve: Serve,
    /// Only kept when the queue has a limit: frames admitted whose exit is still ahead.
    inside: VecDeque<InLink>,
    inside_bytes: u64,
}

impl Link {
    pub fn new(config: LinkConfig) -> Link {
        let reserve = match config.queue {
            Some(QueueLimit::Packets(n)) => n.min(1 << 16) as usize,
            Some(QueueLimit::Bytes(b)) => (b / 64).min(1 << 16) as usize + 1,
            None => 0,
        };
        let serve = Self::serve_for(&config);
        Link { config, serve, inside: VecDeque::with_capacity(reserve), inside_bytes: 0 }
    }

    fn serve_for(config: &LinkConfig) -> Serve {
        match &config.server {
            Server::Rate(r) => Serve::Rate {
                rate: r.bits_per_sec(),
                last_exit: Nanos::ZERO,
                carry: 0,
                tx_cache: [(NO_LEN, 0, 0); TX_CACHE],
            },
            Server::Trace(t) => {
                Serve::Trace { trace: t.clone(), origin: None, current: None, floor: Nanos::ZERO }
            }
        }
    }

    /// Takes over the state of the link this one replaces: the frames still in its queue (they
    /// keep their exit times, and count against this link's limit) and when the last of them
    /// leaves, so new frames queue behind them at the new rate. A trace link keeps its place
    /// in the trace when the trace is the same (the same copy: configurations read from files
    /// share one per contents); another trace starts at the change, its frames leaving at its
    /// opportunities from the old link's last exit on. A queue limit set on a link that had
    /// none counts the frames admitted from the change on (the earlier ones were not tracked).
    pub fn inherit(&mut self, old: Link) {
        let last_exit = old.last_exit();
        match (&mut self.serve, old.serve) {
            (Serve::Rate { last_exit: le, .. }, _) => *le = last_exit,
            (
                Serve::Trace { trace, origin, current, floor },
                Serve::Trace { trace: ot, origin: oo, current: oc, floor: of },
            ) if Arc::ptr_eq(trace, &ot) => {
                *origin = oo;
                *current = oc;
                *floor = of;
            }
            (Serve::Trace { floor, .. }, _) => *floor = last_exit,
        }
        if self.config.queue.is_some() {
            self.inside = old.inside;
            self.inside_bytes = old.inside_bytes;
        }
    }

    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// When the last frame admitted leaves (for a trace link, the opportunity it leaves at).
    pub fn last_exit(&self) -> Nanos {
        match &self.serve {
            Serve::Rate { last_exit, .. } => *last_exit,
            Serve::Trace { trace, origin: Some(o), current: Some((k, _)), floor } => {
                (*o + Nanos(trace.time(*k))).max(*floor)
            }
            Serve::Trace { floor, .. } => *floor,
        }
    }

    /// True when the link counts what is in its queue (it has a limit).
    pub fn tracks_queue(&self) -> bool {
        self.config.queue.is_some()
    }

    /// Frames and bytes in the queue at `now` (frames whose exit time is still ahead).
    pub fn occupancy(&mut self, now: Nanos) -> (usize, u64) {
        self.expire(now);
        (self.inside.len(), self.inside_bytes)
    }

    fn expire(&mut self, now: Nanos) {
        while let Some(front) = self.inside.front() {
            if front.exit > now {
                break;
            }
            self.inside_bytes -= u64::from(front.len);
            self.inside.pop_front();
        }
    }

    /// True when a frame of `len` bytes arriving at `arrival` finds the queue too full.
    #[inline]
    pub fn is_full(&mut self, arrival: Nanos, len: u32) -> bool {
        match self.config.queue {
            None => false,
            Some(limit) => {
                self.expire(arrival);
                match limit {
                    QueueLimit::Bytes(b) => self.inside_bytes + u64::from(len) > b,
                    QueueLimit::Packets(n) => self.inside.len() as u64 + 1 > n,
                }
            }
        }
    }

    /// Admits a frame of `len` bytes arriving at `arrival` and returns the time its last bit
    /// leaves the link, or `None` when the queue is full (drop-tail: the frame, counted with
    /// what is already inside, would exceed the limit).
    #[inline(always)]
    pub fn admit(&mut self, arrival: Nanos, len: u32) -> Option<Nanos> {
        self.admit_with(arrival, len, None)
    }

    /// Admits a frame whatever the queue holds (an ECN-marked frame the limit would drop).
    #[inline(always)]
    pub fn admit_over_limit(&mut self, arrival: Nanos, len: u32) -> Nanos {
        self.admit_over_limit_with(arrival, len, None)
    }

    /// [`admit`](Self::admit) with the rate link's moving state held by the caller ([`Hot`],
    /// taken by [`take_hot`](Self::take_hot)) instead of in the link.
    #[inline(always)]
    pub fn admit_with(&mut self, arrival: Nanos, len: u32, hot: Option<&mut Hot>) -> Option<Nanos> {
        if self.is_full(arrival, len) {
            return None;
        }
        Some(self.admit_over_limit_with(arrival, len, hot))
    }

    /// [`admit_over_limit`](Self::admit_over_limit) with the moving state held by the caller.
    #[inline(always)]
    pub fn admit_over_limit_with(&mut self, arrival: Nanos, len: u32, hot: Option<&mut Hot>) -> Nanos {
        let exit = match &mut self.serve {
            Serve::Rate { rate, last_exit, carry, tx_cache } => {
                let slot = &mut tx_cache[len as usize % TX_CACHE];
                if slot.0 != len {
                    // In 128 bits: a long frame in small cells with a large overhead each (up to
                    // 2^49 bytes on the wire) passes 2^64 bit·ns. A time past the clock's end
                    // saturates, as every `Nanos` sum does.
                    let bit_ns = u128::from(self.config.wire_len(len)) * 8 * 1_000_000_000;
                    let rate = u128::from(*rate);
                    let whole = u64::try_from(bit_ns / rate).unwrap_or(u64::MAX).min(u64::MAX - 1);
                    *slot = (len, whole, (bit_ns % rate) as u64);
                }
                let (last_exit, carry) = match hot {
                    Some(h) => (&mut h.last_exit, &mut h.carry),
                    None => (last_exit, carry),
                };
                // Without branches on the data: whether the link was idle and whether the
                // carry passes a nanosecond follow no pattern a predictor learns (at 100
                // Gbit/s a 64-byte frame's remainder carries over every 2.5 frames).
                // A frame arriving at the last exit's whole nanosecond finds the link busy:
                // the last frame's true exit is `carry / rate` of a nanosecond later.
                let idle = arrival > *last_exit;
                let start = if idle { arrival } else { *last_exit };
                // q + (r + carry) / rate with r, carry < rate: at most one extra nanosecond.
                let sum = if idle { 0 } else { *carry } + slot.2;
                let over = u64::from(sum >= *rate);
                *carry = sum - over * *rate;
                let exit = start + Nanos(slot.1 + over);
                *last_exit = exit;
                exit
            }
            Serve::Trace { trace, origin, current, floor } => {
                Self::trace_exit(trace, origin, current, arrival, *floor, len)
            }
        };
        if self.config.queue.is_some() {
            self.inside.push_back(InLink { exit, len });
            self.inside_bytes += u64::from(len);
        }
        exit
    }

    /// A rate link's moving state (when the last frame leaves, the carried remainder), taken
    /// out for a burst of frames: held in the caller's local, not in the link's fields behind
    /// the path's pointers, each frame's exit no longer waits on the last one's trip through
    /// them (docs/design.md, "A rate link's moving state is held by the burst loop"). `None`
    /// for a trace link. Until [`put_hot`](Self::put_hot) gives it back, the link's own copy
    /// is stale: only [`admit_with`](Self::admit_with) with it may admit frames.
    pub fn take_hot(&self) -> Option<Hot> {
        match &self.serve {
            Serve::Rate { last_exit, carry, .. } => Some(Hot { last_exit: *last_exit, carry: *carry }),
            Serve::Trace { .. } => None,
        }
    }

    /// Gives back what [`take_hot`](Self::take_hot) took.
    pub fn put_hot(&mut self, hot: Hot) {
        if let Serve::Rate { last_exit, carry, .. } = &mut self.serve {
            (*last_exit, *carry) = (hot.last_exit, hot.carry);
        }
    }

    /// Exit time on a trace link: the opportunity that carries the frame's last byte, at
    /// `floor` or later. The trace starts with the first frame.
    #[inline(never)]
    fn trace_exit(
        trace: &RateTrace,
        origin: &mut Option<Nanos>,
        current: &mut Option<(u64, u32)>,
        arrival: Nanos,
        floor: Nanos,
        len: u32,
    ) -> Nanos {
        let o = *origin.get_or_insert(arrival);
        let t = (arrival.max(floor) - o).as_nanos();
        // Mahimahi counts IP packets plus a 4-byte header: a frame minus its Ethernet
        // header, plus 4, so a full-size 1514-byte frame takes one opportunity.
        let mut need = len.saturating_sub(14) + 4;
        let (mut k, mut left) = match *current {
            // Still waiting for an opportunity that has bytes left: share it.
            Some((k, left)) if left > 0 && trace.time(k) >= t => (k, left),
            Some((k, _)) => (trace.first_at_or_after(t).max(k.saturating_add(1)), OPPORTUNITY_BYTES),
            None => (trace.first_at_or_after(t), OPPORTUNITY_BYTES),
        };
        while need > left {
            need -= left;
            k = k.saturating_add(1);
            left = OPPORTUNITY_BYTES;
        }
        *current = Some((k, left - need));
        o + Nanos(trace.time(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(rate: &str, overhead: i32, queue: Option<&str>) -> Link {
        Link::new(LinkConfig {
            server: Server::Rate(rate.parse().unwrap()),
            overhead,
            cell: None,
            queue: queue.map(|q| q.parse().unwrap()),
        })
    }

    #[test]
    fn exit_time_formula() {
        // 1000 B + 24 B at 8 Mbit/s = 1024 us.
        let mut l = link("8mbit", 24, None);
        assert_eq!(l.admit(Nanos(0), 1000), Some(Nanos::from_micros(1024)));
        // Arrives while the first is in transmission: queued behind it.
        assert_eq!(l.admit(Nanos(10), 1000), Some(Nanos::from_micros(2048)));
        // Arrives after the link went idle: starts at its arrival.
        assert_eq!(
            l.admit(Nanos::from_millis(10), 1000),
            Some(Nanos::from_millis(10) + Nanos::from_micros(1024))
        );
    }

    /// Frames that arrive at the whole nanosecond the one before left keep its remainder: a
    /// burst at 10 Tbit/s (0.0992 ns a 100-byte frame with 24 B overhead) leaves over 1984
    /// ns, not all at once, and a frame arriving exactly at a rounded exit of a 3 Mbit/s link
    /// leaves no earlier than the exact sum of the transmission times.
    #[test]
    fn a_frame_arriving_at_the_last_exit_keeps_the_remainder() {
        let mut l = link("10tbit", 24, None);
        let mut last = Nanos::ZERO;
        for _ in 0..20_000 {
            last = l.admit(Nanos(1_000), 100).unwrap();
        }
        // 20 000 × 124 B × 8 bit / 10^13 bit/s = 1984 ns.
        assert_eq!(last, Nanos(1_000 + 1_984));
        let mut l = link("3mbit", 24, None);
        let (mut t, mut total_bits) = (Nanos::ZERO, 0u128);
        for _ in 0..20_000 {
            t = l.admit(t, 100).unwrap();
            total_bits += 124 * 8;
        }
        // Each arrives at the last exit: the link never idles, so the last exit is the exact
        // sum of the transmission times (3 Mbit/s: 330 666.67 ns a frame), rounded down.
        assert_eq!(u128::from(t.0), total_bits * 1_000_000_000 / 3_000_000);
    }

    /// A link whose moving state is held outside it for bursts of frames (taken, used, given
    /// back) admits every frame as one that keeps it inside: the same exits and drops, idle
    /// gaps and remainders included, with a queue limit and without.
    #[test]
    fn a_burst_with_the_state_held_outside_admits_as_the_link_would() {
        for queue in [None, Some("20pkt")] {
            let (mut inside, mut outside) = (link("3gbit", 24, queue), link("3gbit", 24, queue));
            let mut r = crate::rng::Rng::seeded(5);
            let mut t = 0u64;
            for _ in 0..2_000 {
                let mut hot = outside.take_hot().expect("a rate link");
                for _ in 0..r.below(40) {
                    t += r.below(400);
                    let len = 60 + r.below(1455) as u32;
                    let want = inside.admit(Nanos(t), len);
                    assert_eq!(outside.admit_with(Nanos(t), len, Some(&mut hot)), want, "at {t}");
                }
                outside.put_hot(hot);
                assert_eq!(outside.last_exit(), inside.last_exit());
            }
        }
    }

    #[test]
    fn no_drift_over_a_long_busy_period() {
        // 64 + 24 B at 3 Gbit/s = 234.666… ns per frame: rounding per frame would drift.
        let mut l = link("3gbit", 24, None);
        let n: u64 = 10_000_000;
        let mut exit = Nanos(0);
        for _ in 0..n {
            exit = l.admit(Nanos(0), 64).unwrap();
        }
        let exact = n * 88 * 8 * 1_000_000_000 / 3_000_000_000;
        assert_eq!(exit, Nanos(exact));
    }

    #[test]
    fn mixed_lengths_match_the_exact_division() {
        // Lengths that collide in the cache and a rate that leaves remainders.
        let mut l = link("7mbit", 24, None);
        let rate = 7_000_000u128;
        let mut bits: u128 = 0;
        for i in 0..10_000u32 {
            let len = [60, 76, 1514, 92, 60 + 16 * (i % 7)][i as usize % 5];
            bits += u128::from(len + 24) * 8;
            let exit = l.admit(Nanos(0), len).unwrap();
            assert_eq!(u128::from(exit.as_nanos()), bits * 1_000_000_000 / rate, "frame {i}");
        }
    }

    #[test]
    fn cells_round_up_like_netem() {
        // ATM: 48-byte cells with 5 bytes of header. 100 B + 0 overhead → 3 cells → 159 B.
        let cfg = LinkConfig {
            server: Server::Rate("8mbit".parse().unwrap()),
            overhead: 0,
            cell: Some("48,5".parse().unwrap()),
            queue: None,
        };
        assert_eq!(cfg.wire_len(100), 159);
        assert_eq!(cfg.wire_len(96), 106);
        let mut l = Link::new(cfg);
        assert_eq!(l.admit(Nanos(0), 100), Some(Nanos::from_micros(159)));
        assert!(
            "48".parse::<Cell>().is_err()
                && "0,5".parse::<Cell>().is_err()
                && "4.5,1".parse::<Cell>().is_err()
        );
        // Each refusal says its own reason and the range.
        for (bad, says) in [
            ("4.5,1", "not a whole number"),
            ("1,4294967295", "above 65535 bytes"),
            ("65536,0", "above 65535"),
        ] {
            let e = bad.parse::<Cell>().unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("SIZE 1 to 65535"), "{bad}: {e}");
        }
        assert_eq!("65535,65535".parse::<Cell>(), Ok(Cell { size: 65_535, overhead: 65_535 }));
    }

    #[test]
    fn a_frame_of_many_cells_takes_its_whole_time() {
        // 40 000 B in 1-byte cells of 65 535 B overhead each: 2.6e9 B, 2.1e19 bit·ns, past
        // 2^64; at 1 Gbit/s it takes 20.97152 s.
        let cfg = LinkConfig {
            server: Server::Rate("1gbit".parse().unwrap()),
            overhead: 0,
            cell: Some("1,65535".parse().unwrap()),
            queue: None,
        };
        let mut l = Link::new(cfg.clone());
        assert_eq!(l.admit(Nanos(0), 40_000), Some(Nanos(20_971_520_000)));
        // At 1 bit/s the same frame would leave after the clock's end: it saturates there.
        let slow = LinkConfig { server: Server::Rate(crate::units::Rate(1)), ..cfg };
        assert_eq!(Link::new(slow).admit(Nanos(5), 40_000), Some(Nanos::MAX));
    }

    #[test]
    fn queue_limit_in_packets_counts_the_arriving_frame() {
        // 1000 B at 8 Mbit/s, no overhead: 1 ms each. Limit of 3 frames inside.
        let mut l = link("8mbit", 0, Some("3pkt"));
        let admitted: Vec<bool> = (0..5).map(|_| l.admit(Nanos(0), 1000).is_some()).collect();
        assert_eq!(admitted, [true, true, true, false, false]);
        // At 1 ms the first has left: one place is free again.
        assert!(l.admit(Nanos::from_millis(1), 1000).is_some());
        assert!(l.admit(Nanos::from_millis(1), 1000).is_none());
        assert_eq!(l.occupancy(Nanos::from_millis(1)), (3, 3000));
        assert_eq!(l.occupancy(Nanos::from_millis(10)), (0, 0));
    }

    #[test]
    fn queue_limit_in_bytes() {
        let mut l = link("8mbit", 24, Some("2500B"));
        assert!(l.admit(Nanos(0), 1000).is_some());
        assert!(l.admit(Nanos(0), 1000).is_some());
        assert!(l.admit(Nanos(0), 1000).is_none(), "3000 B would exceed 2500 B");
        assert!(l.admit(Nanos(0), 500).is_some(), "2500 B exactly fits");
        assert!(l.admit(Nanos(0), 1).is_none());
        l.admit_over_limit(Nanos(0), 1000);
        assert_eq!(l.occupancy(Nanos(0)), (4, 3500));
    }

    fn trace_link(text: &str) -> Link {
        let t = Arc::new(RateTrace::parse(text).unwrap());
        Link::new(LinkConfig { server: Server::Trace(t), overhead: 0, cell: None, queue: None })
    }

    #[test]
    fn trace_departures_only_at_opportunities() {
        let mut l = trace_link("1\n1\n3\n10\n");
        let o = Nanos::from_secs(5);
        let ms = |m: u64| o + Nanos::from_millis(m);
        // Two 1514-byte frames at t=0 use the two opportunities at 1 ms.
        assert_eq!(l.admit(o, 1514), Some(ms(1)));
        assert_eq!(l.admit(o, 1514), Some(ms(1)));
        // Small frames share the opportunity at 3 ms: 1504 / (100 - 14 + 4) = 16 of them.
        for _ in 0..16 {
            assert_eq!(l.admit(o, 100), Some(ms(3)));
        }
        assert_eq!(l.admit(o, 100), Some(ms(10)));
        // Arriving after the leftover's opportunity: the next opportunity (second loop at 11 ms).
        assert_eq!(l.admit(ms(10) + Nanos(1), 100), Some(ms(11)));
        // A 4000-byte frame spans three opportunities: 11 (rest), 11, 13.
        assert_eq!(l.admit(ms(10) + Nanos(2), 4000), Some(ms(13)));
    }

    /// A frame arriving exactly at a lap's end takes the opportunity there: traces that offer
    /// the same opportunities in laps of 1 ms, 4 ms or 100 ms forward alike.
    #[test]
    fn an_opportunity_at_a_laps_end_is_taken_at_that_instant() {
        let exits = |text: &str| -> Vec<Nanos> {
            let mut l = trace_link(text);
            (0..20).map(|i| l.admit(Nanos::from_millis(i), 50).unwrap()).collect()
        };
        let every_ms = exits("1\n");
        assert_eq!(every_ms, (0..20).map(|i| Nanos::from_millis(i.max(1))).collect::<Vec<_>>());
        assert_eq!(exits("1\n2\n3\n4\n"), every_ms);
        assert_eq!(exits(&(1..=100).map(|i| format!("{i}\n")).collect::<String>()), every_ms);
        // Two opportunities at the period: a frame at a lap's end takes the first of them.
        let mut l = trace_link("2\n4\n4\n");
        assert_eq!(l.admit(Nanos(0), 50), Some(Nanos::from_millis(2)), "the trace starts at the first frame");
        assert_eq!(l.admit(Nanos::from_millis(4), 1514), Some(Nanos::from_millis(4)));
        assert_eq!(l.admit(Nanos::from_millis(4), 1514), Some(Nanos::from_millis(4)));
        assert_eq!(l.admit(Nanos::from_millis(4), 1514), Some(Nanos::from_millis(6)));
    }

    /// One opportunity a day: a backlog of 250 000 frames reaches past the clock's end (584
    /// years). Exit times saturate there and never wrap back to an early time.
    #[test]
    fn a_trace_backlog_past_the_clocks_end_saturates() {
        let mut l = trace_link("86400000\n");
        let mut last = Nanos(0);
        for i in 0..250_000u64 {
            let exit = l.admit(Nanos(i), 1514).unwrap();
            assert!(exit >= last, "frame {i}: {exit:?} after {last:?}");
            last = exit;
        }
        assert_eq!(last, Nanos::MAX);
        assert_eq!(l.last_exit(), Nanos::MAX);
    }

    #[test]
    fn trace_long_run_throughput_matches_the_trace() {
        // 12 Mbit/s: one opportunity per ms.
        let text: String = (1..=1000).map(|i| format!("{i}\n")).collect();
        let t = RateTrace::parse(&text).unwrap();
        assert_eq!(t.mean_rate(), Rate(12_032_000));
        // One opportunity a day: 0.139 bit/s, said so; 1 bit/s only where a rate sizes a queue.
        let slow = RateTrace::parse("86400000\n").unwrap();
        assert_eq!(slow.mean_rate(), Rate(1));
        let said = LinkConfig { server: Server::Trace(Arc::new(slow)), overhead: 0, cell: None, queue: None }
            .to_string();
        assert!(said.contains("mean 0.139bit, period 86400s"), "{said}");
        let mut l = trace_link(&text);
        let mut last = Nanos(0);
        let n = 100_000u64;
        for i in 0..n {
            // Offered: 1514-byte frames every 0.5 ms, twice what the trace carries.
            last = l.admit(Nanos(i * 500_000), 1514).unwrap();
            assert_eq!(last.as_nanos() % 1_000_000, 0, "on an opportunity");
        }
        assert_eq!(last, Nanos::from_millis(n), "one frame per opportunity");
        for bad in ["", "1\nx\n", "5\n3\n", "0\n", "1\n18446744073709551615\n", "86400001\n"] {
            assert!(RateTrace::parse(bad).is_err(), "{bad:?}");
        }
    }
}
