//! Queue disciplines of the bottleneck: drop-head, RED, CoDel (RFC 8289), FQ-CoDel (RFC 8290),
//! PIE (RFC 8033) and DualPI2 (RFC 9332), each with ECN marking.
//!
//! Drop-tail, the default, is not here: it stays the link's arrival-time formula
//! ([`crate::link`]). With any other discipline the bottleneck is a [`Bottleneck`]: a real
//! queue of [`Entry`]s (32 bytes of metadata per frame; the frames themselves stay where
//! the engine copied them) in front of the link's server. The caller drives it as an event
//! simulation that reads no clock:
//! - [`Bottleneck::serve`]`(until)` serves the queue up to an instant: each service starts at
//!   `max(server free, oldest arrival)`, asks the discipline at that instant (with the queue
//!   as it is then), and hands out a [`Decision`] per frame: sent (with its start and exit
//!   times, CE-marked or not) or dropped (by the discipline, or over the hard limit);
//! - [`Bottleneck::enqueue`] adds a frame at its arrival, after `serve(arrival)`, so every
//!   decision sees exactly the frames that had arrived by its instant
//!   ([`Bottleneck::arrive`] does both in one visit).
//!
//! Departures at an instant come before arrivals at that same instant, as with drop-tail
//! (a frame whose exit equals an arrival has left). The backlog a discipline sees counts the
//! frames waiting, not the one on the wire (as in the RFCs' pseudo-code and Linux qdiscs), and
//! the hard limit (`--queue`, or the discipline's default) counts the same frames.
//! Configuration is apart from state: [`Bottleneck::inherit`] keeps the queue, the server's
//! state and, for the same discipline, its control state across a change of parameters.

/// The stream of a path's generator ([`crate::Rng::stream`]) its queue discipline draws from:
/// apart from the steps after the link, so that when a frame is decided (at its arrival, or
/// at a later arrival or poll) never changes what either draws.
pub const RNG_STREAM: u64 = 0x0061_716d;

pub mod codel;
pub mod discipline;
pub mod dualpi2;
pub mod fq_codel;
pub mod pie;
pub mod red;

pub use codel::{Codel, CodelConfig};
pub use discipline::{Discipline, WhenFull};
pub use dualpi2::{DualPi2, DualPi2Config};
pub use fq_codel::{FqCodel, FqCodelConfig};
pub use pie::{Pie, PieConfig};
pub use red::{Red, RedConfig};

use crate::link::{Link, LinkConfig};
use crate::rng::Rng;
use crate::spec::error;
use crate::time::Nanos;
use crate::units::{QueueLimit, UnitError};
use std::collections::VecDeque;
use std::str::FromStr;

/// ECN (RFC 3168): the field's codepoints, and the one decision every congestion signal goes
/// through.
pub mod ecn {
    pub const NOT_ECT: u8 = 0b00;
    pub const ECT1: u8 = 0b01;
    pub const ECT0: u8 = 0b10;
    pub const CE: u8 = 0b11;

    /// True when a congestion signal to a frame is a CE mark rather than a drop: ECN is on for
    /// the path (`--ecn`), the frame is ECN-capable, and the signal may be a mark at this point
    /// (`allowed`: RED's queue not full, PIE's probability at most `max_ecn`, DualPI2's
    /// classic queue not overloaded; always for CoDel and the path's random loss).
    #[inline]
    pub fn marks(on: bool, ect: bool, allowed: bool) -> bool {
        on && ect && allowed
    }
}

/// A frame in the bottleneck's queue: what a discipline needs to know of it.
///
/// Laid out as written (`repr(C)`: the 64-bit fields, the three 32-bit ones, the two bytes):
/// every discipline copies entries in and out of its queues per frame, and with the layout
/// the compiler chose FQ-CoDel cost 2 to 8 ns more a frame (`bench --disciplines`, both
/// loads, two sittings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Entry {
    /// The caller's number for the frame (the engine: its record in the delay line).
    pub seq: u64,
    pub arrival: Nanos,
    /// Length on the wire without FCS.
    pub len: u32,
    /// Bytes of it held (a capture may have cut it): what corruption can hit.
    pub caplen: u32,
    /// Its flow's hash (5-tuple), for FQ-CoDel.
    pub flow: u32,
    /// The ECN codepoint of its IP header ([`ecn`]); `NOT_ECT` for non-IP frames.
    pub ecn: u8,
    /// Marked CE at enqueue (RED, PIE); the mark is applied when it is sent.
    pub marked: bool,
}

impl Entry {
    /// ECN-capable transport: ECT(0), ECT(1) or CE.
    pub fn ect(&self) -> bool {
        self.ecn != ecn::NOT_ECT
    }
}

/// Why a discipline dropped a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AqmDrop {
    /// The discipline's control law dropped it (CoDel, RED, PIE, DualPI2).
    Aqm,
    /// The queue was at its hard limit (drop-head drops the oldest frame; the others the
    /// arriving one; FQ-CoDel the head of the longest flow).
    Overlimit,
}

/// What the bottleneck did with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Sent: its transmission starts at `start` (it left the queue then) and its last bit
    /// leaves at `exit`; `mark` sets CE.
    Send {
        entry: Entry,
        start: Nanos,
        exit: Nanos,
        mark: bool,
    },
    Drop {
        entry: Entry,
        reason: AqmDrop,
    },
}

/// Where a bottleneck's decisions go, a call each: a closure taking a [`Decision`] is one.
/// The engine implements it directly: a dropped frame needs its number and the reason, and
/// a decision built as a value and taken apart again costs each frame copies through memory
/// that a call with the parts does not.
pub trait Decide {
    /// Sent: its transmission starts at `start`, its last bit leaves at `exit`; `mark`
    /// sets CE.
    fn send(&mut self, entry: Entry, start: Nanos, exit: Nanos, mark: bool);
    /// Dropped, for `reason`.
    fn drop(&mut self, entry: Entry, reason: AqmDrop);
}

impl Decision {
    /// Hands this decision to `out` as the call it stands for.
    pub fn hand_to(self, out: &mut impl Decide) {
        match self {
            Decision::Send { entry, start, exit, mark } => out.send(entry, start, exit, mark),
            Decision::Drop { entry, reason } => out.drop(entry, reason),
        }
    }
}

impl<F: FnMut(Decision)> Decide for F {
    #[inline(always)]
    fn send(&mut self, entry: Entry, start: Nanos, exit: Nanos, mark: bool) {
        self(Decision::Send { entry, start, exit, mark })
    }
    #[inline(always)]
    fn drop(&mut self, entry: Entry, reason: AqmDrop) {
        self(Decision::Drop { entry, reason })
    }
}

/// What became of a frame decided within its own arrival ([`Bottleneck::arrive`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtOnce {
    /// Sent: its transmission starts at `start` (its arrival) and its last bit leaves at
    /// `exit`; `mark` sets CE.
    Sent {
        start: Nanos,
        exit: Nanos,
        mark: bool,
    },
    Dropped(AqmDrop),
}

/// The queue discipline the user asked for, with its parameters.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum AqmConfig {
    /// The arrival-time formula of [`crate::link`] (no [`Bottleneck`]).
    #[default]
    DropTail,
    DropHead,
    Red(RedConfig),
    Codel(CodelConfig),
    FqCodel(FqCodelConfig),
    Pie(PieConfig),
    DualPi2(DualPi2Config),
}

/// One queue discipline as users name it.
#[derive(Clone, Copy, Debug)]
pub struct Kind {
    /// Its name for `--aqm` and the `aqm` key.
    pub name: &'static str,
    /// Its parameters, as `--aqm` takes them after the name.
    pub params: &'static str,
}

/// Every queue discipline, drop-tail first: what `--aqm` accepts, its help, the accepted list
/// of its errors, `bench --disciplines` and the README's table all come from here.
pub static KINDS: [Kind; 7] = [
    Kind { name: "droptail", params: "" },
    Kind { name: "drophead", params: "" },
    Kind { name: "red", params: "[,min=SIZE,max=SIZE,max-p=P,weight=W,gentle=on|off]" },
    Kind { name: "codel", params: "[,target=DUR,interval=DUR]" },
    Kind {
        name: "fq-codel",
        params: "[,flows=N,quantum=SIZE,target=DUR,interval=DUR,memory=SIZE,drop-batch=N]",
    },
    Kind { name: "pie", params: "[,target=DUR,t-update=DUR,alpha=HZ,beta=HZ,max-burst=DUR]" },
    Kind {
        name: "dualpi2",
        params: "[,target=DUR,t-update=DUR,alpha=HZ,beta=HZ,k=N,min-th=DUR,range=DUR,tshift=DUR]",
    },
];

/// What `--aqm` accepts, from [`KINDS`].
pub fn accepted() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        KINDS.iter().map(|k| format!("{}{}", k.name, k.params)).collect::<Vec<_>>().join(", ")
    })
}

/// `--aqm`'s help, from [`KINDS`].
pub fn help() -> String {
    let names: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
    format!(
        "Queue discipline KIND[,KEY=VALUE...] of the bottleneck; needs a rate: {} (droptail is the default; README lists their parameters), e.g. codel,target=5ms",
        names.join(", ")
    )
}

impl FromStr for AqmConfig {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<AqmConfig, UnitError> {
        let kind = s.trim().split(',').next().unwrap_or("").trim();
        let plain = |c: AqmConfig| {
            if s.trim() != kind {
                return Err(error(
                    s,
                    format!("{kind} takes no parameters (its limit is --queue)"),
                    accepted(),
                ));
            }
            Ok(c)
        };
        match kind {
            "droptail" => plain(AqmConfig::DropTail),
            "drophead" => plain(AqmConfig::DropHead),
            "red" => s.parse().map(AqmConfig::Red),
            "codel" => s.parse().map(AqmConfig::Codel),
            "fq-codel" | "fq_codel" => s.parse().map(AqmConfig::FqCodel),
            "pie" => s.parse().map(AqmConfig::Pie),
            "dualpi2" => s.parse().map(AqmConfig::DualPi2),
            _ => Err(error(s, format!("names no queue discipline (`{kind}`)"), accepted())),
        }
    }
}

crate::deserialize_from_str!(AqmConfig);

impl std::fmt::Display for AqmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AqmConfig::DropTail | AqmConfig::DropHead => f.write_str(self.name()),
            AqmConfig::Red(c) => write!(
                f,
                "red (min {} B, max {} B, max-p {}, weight {}, gentle {})",
                c.min,
                c.max,
                c.max_p,
                c.weight,
                if c.gentle { "on" } else { "off" }
            ),
            AqmConfig::Codel(c) => write!(f, "codel (target {}, interval {})", c.target, c.interval),
            AqmConfig::FqCodel(c) => write!(
                f,
                "fq-codel (flows {}, quantum {} B, target {}, interval {}, memory {} B, drop-batch {})",
                c.flows, c.quantum, c.codel.target, c.codel.interval, c.memory, c.drop_batch
            ),
            AqmConfig::Pie(c) => write!(
                f,
                "pie (target {}, t-update {}, alpha {}, beta {}, max-burst {})",
                c.target, c.t_update, c.alpha, c.beta, c.max_burst
            ),
            AqmConfig::DualPi2(c) => write!(
                f,
                "dualpi2 (target {}, t-update {}, alpha {}, beta {}, k {}, min-th {}, range {}, tshift {})",
                c.target, c.t_update, c.alpha, c.beta, c.k, c.min_th, c.range, c.tshift
            ),
        }
    }
}

impl AqmConfig {
    /// The hard limit on `link`: `--queue`, or else the discipline's default (Linux's: 1000
    /// frames, FQ-CoDel 10240; DualPI2 RFC 9332's 250 ms at the link's rate); `None` for
    /// drop-tail without `--queue` (unbounded).
    pub fn limit(&self, link: &LinkConfig) -> Option<QueueLimit> {
        link.queue.or(match self {
            AqmConfig::DropTail => None,
            AqmConfig::FqCodel(_) => Some(QueueLimit::Packets(10_240)),
            AqmConfig::DualPi2(_) => {
                Some(QueueLimit::Bytes((link.mean_rate().bits_per_sec() / 8 / 4).max(10 * u64::from(MTU))))
            }
            _ => Some(QueueLimit::Packets(1000)),
        })
    }

    /// Its entry in [`KINDS`].
    pub fn kind(&self) -> &'static Kind {
        &KINDS[match self {
            AqmConfig::DropTail => 0,
            AqmConfig::DropHead => 1,
            AqmConfig::Red(_) => 2,
            AqmConfig::Codel(_) => 3,
            AqmConfig::FqCodel(_) => 4,
            AqmConfig::Pie(_) => 5,
            AqmConfig::DualPi2(_) => 6,
        }]
    }

    /// The name used in counters and reports.
    pub fn name(&self) -> &'static str {
        self.kind().name
    }
}

/// The largest Ethernet frame without FCS: RFC 8289's MAXPACKET, FQ-CoDel's quantum and
/// DualPI2's MTU by default.
pub const MTU: u32 = 1514;

/// `on` or `off`, for `key=on|off` parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnOff(pub bool);

impl FromStr for OnOff {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<OnOff, UnitError> {
        match s.trim() {
            "on" | "yes" | "true" => Ok(OnOff(true)),
            "off" | "no" | "false" => Ok(OnOff(false)),
            _ => Err(error(s, "is neither on nor off", "on or off")),
        }
    }
}

/// A plain FIFO of entries that knows its bytes.
#[derive(Clone, Debug, Default)]
pub struct Fifo {
    q: VecDeque<Entry>,
    bytes: u64,
}

impl Fifo {
    #[inline]
    pub fn push(&mut self, e: Entry) {
        self.bytes += u64::from(e.len);
        self.q.push_back(e);
    }
    #[inline]
    pub fn pop(&mut self) -> Option<Entry> {
        let e = self.q.pop_front()?;
        self.bytes -= u64::from(e.len);
        Some(e)
    }
    #[inline]
    pub fn front(&self) -> Option<&Entry> {
        self.q.front()
    }
    pub fn len(&self) -> usize {
        self.q.len()
    }
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    fn drain(&mut self) -> impl Iterator<Item = Entry> + '_ {
        self.bytes = 0;
        self.q.drain(..)
    }
}

/// The discipline a bottleneck runs, one variant per kind: each is a [`Discipline`], called
/// through [`each!`] without a virtual call per frame.
#[derive(Debug)]
enum Disc {
    DropTail(discipline::DropTail),
    DropHead(discipline::DropHead),
    Red(discipline::RedFifo),
    Codel(discipline::CodelFifo),
    Pie(discipline::PieFifo),
    FqCodel(FqCodel),
    DualPi2(DualPi2),
}

/// `each!(disc, d => expr)`: `expr` with `d` bound to whichever discipline `disc` holds.
macro_rules! each {
    ($disc:expr, $d:ident => $e:expr) => {
        match $disc {
            Disc::DropTail($d) => $e,
            Disc::DropHead($d) => $e,
            Disc::Red($d) => $e,
            Disc::Codel($d) => $e,
            Disc::Pie($d) => $e,
            Disc::FqCodel($d) => $e,
            Disc::DualPi2($d) => $e,
        }
    };
}

/// The bottleneck with a queue discipline: its queue(s), the discipline's state, and the
/// link's server (rate or trace, as configured) that sets each frame's transmission.
///
/// Each public call picks the discipline once and runs the shared code (`Core`'s) made for
/// it, so a frame's visit costs one dispatch and the discipline's own steps inline.
#[derive(Debug)]
pub struct Bottleneck {
    disc: Disc,
    core: Core,
}

/// What a bottleneck keeps whatever its discipline.
#[derive(Debug)]
struct Core {
    server: Link,
    /// When the server finishes the frame it is sending (the last exit).
    free: Nanos,
    /// Arrival of the oldest frame queued when the queue last became non-empty.
    earliest: Nanos,
    /// The hard limit ([`AqmConfig::limit`]; `None`: unbounded).
    limit: Option<QueueLimit>,
    ecn: bool,
    /// The next periodic update (PIE, DualPI2), once the first frame has arrived.
    next_update: Option<Nanos>,
}

impl Bottleneck {
    /// A bottleneck for `aqm` on `link` (drop-tail too, as a real FIFO: paths use the link's
    /// formula for it, tests this), marking ECN-capable frames instead of
    /// dropping them when `ecn`.
    pub fn new(aqm: &AqmConfig, link: &LinkConfig, ecn: bool) -> Bottleneck {
        let limit = aqm.limit(link);
        use discipline::{CodelFifo, PieFifo, RedFifo};
        let q = Fifo::default();
        let disc = match aqm {
            AqmConfig::DropTail => Disc::DropTail(discipline::DropTail { q }),
            AqmConfig::DropHead => Disc::DropHead(discipline::DropHead { q }),
            AqmConfig::Red(c) => Disc::Red(RedFifo { q, ramp: c.into(), red: Red::new(link) }),
            AqmConfig::Codel(c) => {
                Disc::Codel(CodelFifo { q, config: CodelConfig { ecn, ..*c }, codel: Codel::new() })
            }
            AqmConfig::Pie(c) => Disc::Pie(PieFifo { q, config: *c, pie: Pie::new(c) }),
            AqmConfig::FqCodel(c) => {
                Disc::FqCodel(FqCodel::new(FqCodelConfig { codel: CodelConfig { ecn, ..c.codel }, ..*c }))
            }
            AqmConfig::DualPi2(c) => Disc::DualPi2(DualPi2::new(*c, ecn)),
        };
        let server = Link::new(LinkConfig { queue: None, ..link.clone() });
        let core = Core { server, free: Nanos::ZERO, earliest: Nanos::ZERO, limit, ecn, next_update: None };
        Bottleneck { disc, core }
    }

    /// The link the server was made from (without its queue limit).
    pub fn server_config(&self) -> &LinkConfig {
        self.core.server.config()
    }

    /// Frames and bytes waiting (not counting the frame on the wire).
    pub fn backlog(&self) -> (usize, u64) {
        each!(&self.disc, d => d.backlog())
    }

    /// True for FQ-CoDel, which needs each frame's flow hash.
    pub fn needs_flow_hash(&self) -> bool {
        matches!(self.disc, Disc::FqCodel(_))
    }

    /// When the next service starts, if a frame waits.
    pub fn next_start(&self) -> Option<Nanos> {
        each!(&self.disc, d => self.core.next_start(d))
    }

    /// The next instant anything happens: a service start, or a periodic update while the
    /// discipline's state still moves (an idle, settled PIE or DualPI2 needs none).
    #[inline(always)]
    pub fn next_event(&self) -> Option<Nanos> {
        each!(&self.disc, d => self.core.next_event(d))
    }

    /// Adds a frame arriving at `e.arrival` (call [`serve`](Self::serve) up to its arrival
    /// first). Frames the discipline drops at once, this one or others, go to `out`.
    pub fn enqueue(&mut self, e: Entry, rng: &mut Rng, out: &mut impl Decide) {
        let core = &mut self.core;
        each!(&mut self.disc, d => core.enqueue(d, e, rng, out))
    }

    /// A frame's arrival in one visit: the queue served up to `e.arrival`, then `e` added
    /// ([`serve`](Self::serve) then [`enqueue`](Self::enqueue)). Served also when only a
    /// settled controller's updates are due: `serve` passes them over while the queue is
    /// empty, as they change nothing; run after the frame joined, they would see it.
    ///
    /// With `at_once`, a frame that finds the queue empty and the server free is served at
    /// its arrival too, in the same visit: its service starts then whenever the queue is
    /// next served, so its decision (sent, or dropped by the control law) is the one a later
    /// [`serve`](Self::serve) would make, only made now. Within every limit, that decision
    /// is returned rather than handed to `out` (a frame at a moderate load takes this way:
    /// Linux's qdiscs likewise let a frame that finds them empty bypass the queue); beyond
    /// one, it goes to `out` as any other.
    #[inline(always)]
    pub fn arrive(
        &mut self,
        e: Entry,
        rng: &mut Rng,
        out: &mut impl Decide,
        at_once: bool,
    ) -> Option<AtOnce> {
        let core = &mut self.core;
        each!(&mut self.disc, d => {
            let due = |t: Nanos| t <= e.arrival;
            let idle = d.backlog().0 == 0;
            if core.next_start(d).is_some_and(due) || core.next_update.is_some_and(due) {
                core.serve(d, e.arrival, rng, out);
            }
            let at_once = at_once && idle && core.free <= e.arrival;
            if at_once && !core.over(1, u64::from(e.len)) && d.holds_alone(e.len) {
                return Some(core.pass(d, e, rng));
            }
            core.enqueue(d, e, rng, out);
            if at_once && d.backlog().0 == 1 {
                core.serve(d, e.arrival, rng, out);
            }
            None
        })
    }

    /// Serves the queue up to `until`: every service that starts by then (and every periodic
    /// update due by then), in time order, each decision handed to `out`.
    pub fn serve(&mut self, until: Nanos, rng: &mut Rng, out: &mut impl Decide) {
        let core = &mut self.core;
        each!(&mut self.disc, d => core.serve(d, until, rng, out))
    }

    /// Every frame still queued, oldest first, taken out of the discipline.
    fn take_queued(&mut self) -> Vec<Entry> {
        let mut all: Vec<Entry> = each!(&mut self.disc, d => d.take_all());
        all.sort_by_key(|e| e.seq);
        all
    }

    /// Takes over from the bottleneck this one replaces: its server's state and the frames it
    /// holds (in their arrival order, without deciding them again); the discipline's control
    /// state too when the discipline is the same.
    pub fn inherit(&mut self, mut old: Bottleneck) {
        self.core.free = old.core.free;
        self.core.earliest = old.core.earliest;
        let periodic = each!(&self.disc, d => d.update_interval().is_some());
        self.core.next_update = old.core.next_update.filter(|_| periodic);
        let queued = old.take_queued();
        match (&mut self.disc, old.disc) {
            (Disc::DropTail(s), Disc::DropTail(o)) => s.inherit(o),
            (Disc::DropHead(s), Disc::DropHead(o)) => s.inherit(o),
            (Disc::Red(s), Disc::Red(o)) => s.inherit(o),
            (Disc::Codel(s), Disc::Codel(o)) => s.inherit(o),
            (Disc::Pie(s), Disc::Pie(o)) => s.inherit(o),
            (Disc::FqCodel(s), Disc::FqCodel(o)) => s.inherit(o),
            (Disc::DualPi2(s), Disc::DualPi2(o)) => s.inherit(o),
            _ => {}
        }
        self.core.server.inherit(old.core.server);
        for e in queued {
            each!(&mut self.disc, d => d.requeue(e));
        }
    }

    /// Takes over from a drop-tail link: new frames queue behind the last frame it admitted.
    pub fn follow_link(&mut self, old: Link) {
        self.core.free = old.last_exit();
        self.core.server.inherit(old);
    }

    /// Ends the discipline: every queued frame is sent in arrival order as drop-tail would
    /// (no further decisions), each to `out`; returns the link that carries on from there.
    pub fn into_link(mut self, config: LinkConfig, out: &mut impl Decide) -> Link {
        for entry in self.take_queued() {
            let start = self.core.free.max(entry.arrival);
            let exit = self.core.transmit(start, entry.len);
            out.send(entry, start, exit, entry.marked);
        }
        let mut link = Link::new(config);
        link.inherit(self.core.server);
        link
    }
}

impl Core {
    /// The server sends a frame of `len` bytes from `start`: when its last bit leaves.
    #[inline(always)]
    fn transmit(&mut self, start: Nanos, len: u32) -> Nanos {
        self.free = self.server.admit_over_limit(start, len);
        self.free
    }

    #[inline(always)]
    fn next_start<D: Discipline>(&self, d: &D) -> Option<Nanos> {
        (d.backlog().0 > 0).then(|| self.free.max(self.earliest))
    }

    #[inline(always)]
    fn next_event<D: Discipline>(&self, d: &D) -> Option<Nanos> {
        let update = self.next_update.filter(|_| !d.steady());
        match (self.next_start(d), update) {
            (Some(s), Some(u)) => Some(s.min(u)),
            (s, u) => s.or(u),
        }
    }

    #[inline(always)]
    fn over(&self, frames: usize, bytes: u64) -> bool {
        match self.limit {
            Some(QueueLimit::Packets(n)) => frames as u64 > n,
            Some(QueueLimit::Bytes(b)) => bytes > b,
            None => false,
        }
    }

    /// True when the queue holds more than its hard limit, or the discipline more than its own.
    #[inline(always)]
    fn over_limit<D: Discipline>(&self, d: &D) -> bool {
        let (frames, bytes) = d.backlog();
        self.over(frames, bytes) || d.over_own_limit()
    }

    #[inline(always)]
    fn enqueue<D: Discipline>(&mut self, d: &mut D, e: Entry, rng: &mut Rng, out: &mut impl Decide) {
        let (frames, bytes) = d.backlog();
        if frames == 0 {
            self.earliest = e.arrival;
        }
        if self.next_update.is_none() {
            self.next_update = d.update_interval().map(|t| e.arrival + t);
        }
        let when_full = d.when_full();
        // True when one more frame of this length would pass the hard limit.
        let full = when_full != WhenFull::Evict && self.over(frames + 1, bytes + u64::from(e.len));
        if full && when_full == WhenFull::DropArrival {
            return out.drop(e, AqmDrop::Overlimit);
        }
        if let Err((entry, reason)) = d.enqueue(e, full, self.ecn, rng) {
            return out.drop(entry, reason);
        }
        // Over the limit after admitting: drop-head takes the oldest frames, FQ-CoDel a batch
        // from the head of the flow with the largest backlog (RFC 8290 §4.1; Linux's
        // fq_codel_drop), for its frame count and its memory alike.
        if when_full == WhenFull::Evict && self.over_limit(d) {
            self.evict(d, out);
        }
    }

    /// Gives up what the discipline evicts past the limit: out of line, as most arrivals
    /// never come here and the arrival's path stays short.
    #[cold]
    #[inline(never)]
    fn evict<D: Discipline>(&mut self, d: &mut D, out: &mut impl Decide) {
        let mut dropped = |v| out.drop(v, AqmDrop::Overlimit);
        while d.evict(&mut dropped) && self.over_limit(d) {}
    }

    /// [`enqueue`](Self::enqueue) then [`serve`](Self::serve) at its arrival, for a frame
    /// that finds the queue empty, the server free and every limit with room for it (the
    /// periodic updates due by its arrival already run): its decision.
    #[inline(always)]
    fn pass<D: Discipline>(&mut self, d: &mut D, e: Entry, rng: &mut Rng) -> AtOnce {
        self.earliest = e.arrival;
        if self.next_update.is_none() {
            self.next_update = d.update_interval().map(|t| e.arrival + t);
        }
        match d.pass(e, self.ecn, rng) {
            Ok(mark) => AtOnce::Sent { start: e.arrival, exit: self.transmit(e.arrival, e.len), mark },
            Err(reason) => AtOnce::Dropped(reason),
        }
    }

    #[inline(always)]
    fn serve<D: Discipline>(&mut self, d: &mut D, until: Nanos, rng: &mut Rng, out: &mut impl Decide) {
        loop {
            let start = self.next_start(d);
            if let (Some(u), Some(t)) = (self.next_update, d.update_interval()) {
                let horizon = start.map_or(until, |s| s.min(until));
                if u <= horizon {
                    if start.is_none() && d.steady() {
                        // Idle and settled: every update up to `until` would change nothing.
                        let skip = (until - u).as_nanos() / t.as_nanos() + 1;
                        self.next_update = Some(u.saturating_add(Nanos(skip.saturating_mul(t.as_nanos()))));
                        return;
                    }
                    d.update(u);
                    // The update at the clock's last instant has none after it: saturating
                    // there would run it again for ever (`serve` up to `Nanos::MAX`).
                    let Some(next) = u.as_nanos().checked_add(t.as_nanos()).map(Nanos) else {
                        self.next_update = None;
                        continue;
                    };
                    // Settled: on to the last update before the next event.
                    self.next_update = Some(match d.settled() && next <= horizon {
                        true => next
                            .saturating_add(Nanos((horizon - next).as_nanos() / t.as_nanos() * t.as_nanos())),
                        false => next,
                    });
                    continue;
                }
            }
            let Some(s) = start.filter(|&s| s <= until) else { return };
            let mut dropped = |e: Entry| out.drop(e, AqmDrop::Aqm);
            if let Some((entry, mark)) = d.dequeue(s, rng, &mut dropped) {
                let exit = self.transmit(s, entry.len);
                out.send(entry, s, exit, mark || entry.marked);
            }
        }
    }
}

#[cfg(test)]
mod kinds_tests {
    use super::*;

    /// Serving to the clock's end stops, also where a controller settles without going idle
    /// (PIE with a 1 ns target never restores its burst allowance, so it is never "steady"):
    /// its updates reach the clock's last instant and none follows; or where idle updates
    /// leave a probability above 0 (DualPI2 or PIE with alpha 0, or an alpha too small to move
    /// it): they are skipped as changing nothing. Fuzz inputs hung here.
    #[test]
    fn serving_to_the_clocks_end_stops_for_every_kind() {
        let link = LinkConfig::rate(crate::units::Rate(1_000_000));
        let odd = ["pie,target=1ns", "dualpi2,alpha=0", "dualpi2,alpha=1e-300", "pie,alpha=0"];
        for spec in KINDS.iter().map(|k| k.name.to_string()).chain(odd.map(String::from)) {
            let aqm: AqmConfig = spec.parse().unwrap();
            let mut b = Bottleneck::new(&aqm, &link, false);
            let mut rng = Rng::seeded(3);
            let mut decided = 0;
            for seq in 0..50u64 {
                let e = Entry {
                    seq,
                    arrival: Nanos::from_millis(seq),
                    len: 500,
                    caplen: 500,
                    ecn: ecn::NOT_ECT,
                    flow: 0,
                    marked: false,
                };
                b.arrive(e, &mut rng, &mut |_| decided += 1, false);
            }
            b.serve(Nanos::MAX, &mut rng, &mut |_| decided += 1);
            assert_eq!(decided, 50, "{spec}");
        }
    }

    /// `arrive` is `serve` up to the arrival then `enqueue`, for every kind, and serving a
    /// frame that arrives to an idle queue at once decides as serving it later: across idle gaps
    /// long enough for the periodic controllers (PIE, DualPI2) to settle, bursts, overload,
    /// ECN-capable and not, several flows, and polls in between.
    #[test]
    fn arrive_is_serve_then_enqueue() {
        let link = LinkConfig::rate(crate::units::Rate(8_000_000));
        for k in &KINDS {
            let aqm: AqmConfig = k.name.parse().unwrap();
            let (mut a, mut b) = (Bottleneck::new(&aqm, &link, true), Bottleneck::new(&aqm, &link, true));
            let mut c = Bottleneck::new(&aqm, &link, true);
            let (mut ra, mut rb, mut rc) = (Rng::seeded(7), Rng::seeded(7), Rng::seeded(7));
            let (mut da, mut db, mut dc) = (Vec::new(), Vec::new(), Vec::new());
            let mut pattern = Rng::seeded(8);
            let mut t = Nanos::from_secs(1);
            let mut at_once = 0;
            for seq in 0..6000u64 {
                // 1500-byte frames take 1.5 ms here: phases of overload, of light load, and
                // a two-second silence every 1000 frames, after a burst of ten.
                let gap = match seq % 1000 {
                    0 => Nanos::from_secs(2),
                    s if s >= 990 => Nanos::ZERO,
                    s if s < 400 => Nanos(pattern.below(1_000_000)),
                    _ => Nanos(1_000_000 + pattern.below(4_000_000)),
                };
                t += gap;
                if seq % 97 == 0 || seq % 1000 == 0 {
                    // A poll between arrivals, as the engine makes (in a silence, half-way:
                    // a periodic controller settles there, and its updates are due again
                    // when the next frame comes).
                    let back = if seq % 1000 == 0 { Nanos::from_secs(1) } else { Nanos(1_000) };
                    let poll = t.saturating_sub(back);
                    a.serve(poll, &mut ra, &mut |d| da.push(d));
                    b.serve(poll, &mut rb, &mut |d| db.push(d));
                    c.serve(poll, &mut rc, &mut |d| dc.push(d));
                }
                let e = Entry {
                    seq,
                    arrival: t,
                    len: 1500,
                    caplen: 1500,
                    ecn: [ecn::NOT_ECT, ecn::ECT0, ecn::ECT1][(seq % 3) as usize],
                    flow: (seq % 5) as u32 * 0x3333_3333,
                    marked: false,
                };
                assert_eq!(a.arrive(e, &mut ra, &mut |d| da.push(d), false), None);
                b.serve(t, &mut rb, &mut |d| db.push(d));
                b.enqueue(e, &mut rb, &mut |d| db.push(d));
                let before = dc.len();
                // Decided at once: the decision `serve` would have handed over (the entry's
                // own `marked` aside: the mark is in `mark`).
                match c.arrive(e, &mut rc, &mut |d| dc.push(d), true) {
                    Some(AtOnce::Sent { start, exit, mark }) => {
                        dc.push(Decision::Send { entry: e, start, exit, mark })
                    }
                    Some(AtOnce::Dropped(reason)) => dc.push(Decision::Drop { entry: e, reason }),
                    None => {}
                }
                // Decided within its own arrival when it found the queue empty.
                at_once += usize::from(
                    dc[before..]
                        .iter()
                        .any(|d| matches!(d, Decision::Send { entry, .. } if entry.seq == seq)),
                );
            }
            a.serve(Nanos::MAX, &mut ra, &mut |d| da.push(d));
            b.serve(Nanos::MAX, &mut rb, &mut |d| db.push(d));
            c.serve(Nanos::MAX, &mut rc, &mut |d| dc.push(d));
            // Served at once or later, a frame alone with the server free is decided alike
            // (what is sent is in `mark`; an entry's own `marked` is only how an enqueue's
            // mark reached it, and a frame decided at once never had its entry queued).
            let plain = |v: &mut Vec<Decision>| {
                for d in v {
                    if let Decision::Send { entry, .. } = d {
                        entry.marked = false;
                    }
                }
            };
            for v in [&mut da, &mut db, &mut dc] {
                plain(v);
            }
            for (name, other) in [("serve then enqueue", &db), ("served at once", &dc)] {
                assert_eq!(da.len(), other.len(), "{} against {name}", k.name);
                if let Some(i) = (0..da.len()).find(|&i| da[i] != other[i]) {
                    panic!(
                        "{} against {name}: decision {i} differs: {:?} against {:?}",
                        k.name, da[i], other[i]
                    );
                }
            }
            // A frame is decided within its arrival when it finds the queue empty at its visit:
            // after a poll, or behind a frame decided so (159 to 773 of the 6000 here).
            assert!(at_once > 100, "{}: {at_once} frames decided within their arrival", k.name);
        }
    }

    #[test]
    fn every_kind_parses_by_its_name_and_is_named_back() {
        for (i, k) in KINDS.iter().enumerate() {
            let c: AqmConfig = k.name.parse().unwrap();
            assert_eq!(c.name(), k.name);
            assert!(std::ptr::eq(c.kind(), &KINDS[i]));
            assert!(accepted().contains(k.name) && help().contains(k.name));
        }
    }

    #[test]
    fn the_readme_documents_every_kind() {
        let readme = include_str!("../../../../README.md");
        for k in &KINDS {
            assert!(readme.contains(&format!("| `{}` |", k.name)), "README's table lacks {}", k.name);
        }
    }
}
