//! A path: the models of one direction composed in a fixed order.
//!
//! For each frame, in this order (the order is part of pathem's contract):
//! 1. police  — a token bucket may drop the frame at its arrival;
//! 2. link    — the frame joins the bottleneck queue (drop-tail) and gets its exit time;
//! 3. loss    — the loss model, then bit errors, may lose the frame after the link (it still
//!    used the link's capacity);
//! 4. delay   — the frame is due `delay` after its exit time; with slots, it then waits for
//!    the next transmission slot; a frame the skip model picks (NetEm's `reorder`) is due at
//!    its exit time instead, without delay or slot;
//! 5. duplicate / corrupt — applied to the frame that is forwarded (each with an optional
//!    NetEm correlation of its draw).
//!
//! With ECN on, an ECN-capable frame that the queue or the loss model would drop is marked
//! Congestion Experienced and forwarded instead (policer and bit-error drops stay drops).
//!
//! [`Path::process`] computes everything from the frame's metadata, its arrival time and a
//! seeded random source; it reads no clock and touches no bytes, so every decision can be
//! replayed and checked in virtual time. Disabled models are `None` and cost one predictable
//! branch each.

use crate::aqm::{AqmConfig, Bottleneck, Decision};
use crate::corr::Chance;
use crate::delay::{Delay, DelayConfig};
use crate::limits::{self, RangeError};
use crate::link::{Hot, Link, LinkConfig, Server};
use crate::loss::{BitErrors, Loss, LossConfig};
use crate::police::{Policer, PolicerConfig};
use crate::rng::Rng;
use crate::skip::{Skip, SkipConfig};
use crate::slot::{Slot, SlotConfig, Spacing};
use crate::time::Nanos;
use crate::units::{Probability, QueueLimit};

/// Why a frame did not make it through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The loss model lost it.
    Loss,
    /// The link's queue was full.
    Queue,
    /// The policer found it over the allowed rate.
    Police,
    /// A bit error hit it.
    Ber,
    /// The queue discipline's control law dropped it (CoDel, RED, PIE, DualPI2).
    Aqm,
    /// The queue discipline's hard limit dropped it (with `--aqm`; drop-tail counts `queue`).
    Overlimit,
    /// The engine's delay line had no room for it.
    DelayLine,
    /// Longer than the largest frame the engine was configured to carry, or than the
    /// transmitting port's MTU allows.
    Oversize,
    /// A frame the receiving port could not make wire frames of: a GSO super-frame of a kind
    /// it cannot cut, or whose headers lie about its length (never forwarded half-built).
    Offload,
}

impl DropReason {
    pub const ALL: [DropReason; 9] = [
        DropReason::Loss,
        DropReason::Queue,
        DropReason::Police,
        DropReason::Ber,
        DropReason::Aqm,
        DropReason::Overlimit,
        DropReason::DelayLine,
        DropReason::Oversize,
        DropReason::Offload,
    ];

    /// The name used in statistics and JSON output.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::Loss => "loss",
            DropReason::Queue => "queue",
            DropReason::Police => "police",
            DropReason::Ber => "ber",
            DropReason::Aqm => "aqm_drop",
            DropReason::Overlimit => "overlimit",
            DropReason::DelayLine => "delay_line",
            DropReason::Oversize => "oversize",
            DropReason::Offload => "offload",
        }
    }
}

/// What the path needs to know about a frame.
#[derive(Clone, Copy, Debug)]
pub struct FrameMeta {
    /// When the frame arrived at the emulator.
    pub arrival: Nanos,
    /// Its length on the wire without FCS (the original length, even if the capture cut it).
    pub len: u32,
    /// Bytes of it the emulator holds (what corruption can hit).
    pub caplen: u32,
    /// True for an ECN-capable IP frame (only looked at when ECN marking is on).
    pub ect: bool,
}

impl FrameMeta {
    /// A whole frame of `len` bytes, not ECN-capable.
    pub fn new(arrival: Nanos, len: u32) -> FrameMeta {
        FrameMeta { arrival, len, caplen: len, ect: false }
    }
}

/// What happens to a forwarded frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forward {
    /// When the frame is to leave the emulator.
    pub release: Nanos,
    /// Anything beyond leaving on time; `None` for almost every frame, so the engine checks
    /// one field on its common path.
    pub extra: Option<Extra>,
}

/// The rarer things that can happen to a forwarded frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Extra {
    /// A copy follows it.
    pub duplicate: bool,
    /// Flip this bit (counted from the first byte's most significant bit).
    pub corrupt_bit: Option<u32>,
    /// Set the ECN field to Congestion Experienced.
    pub mark_ce: bool,
    /// Sent at once (`--skip-delay`): it overtakes the frames still in their delay, whether
    /// or not `reorder` lets delayed frames overtake each other.
    pub at_once: bool,
}

impl Forward {
    pub fn at(release: Nanos) -> Forward {
        Forward { release, extra: None }
    }
}

/// The fate of one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Drop(DropReason),
    Forward(Forward),
}

/// Everything one direction of a path is configured with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathConfig {
    pub police: Option<PolicerConfig>,
    pub link: Option<LinkConfig>,
    /// The bottleneck's queue discipline (drop-tail unless asked; needs `link`).
    pub aqm: AqmConfig,
    pub loss: Option<LossConfig>,
    pub ber: Option<Probability>,
    pub delay: DelayConfig,
    pub slot: Option<SlotConfig>,
    pub duplicate: Option<Probability>,
    /// NetEm's correlation of the duplicate draw (needs `duplicate`).
    pub duplicate_correlation: Option<Probability>,
    pub corrupt: Option<Probability>,
    /// NetEm's correlation of the corrupt draw (needs `corrupt`).
    pub corrupt_correlation: Option<Probability>,
    /// Send some frames without their delay (NetEm's `reorder`; needs a delay).
    pub skip_delay: Option<SkipConfig>,
    /// Mark ECN-capable frames instead of dropping them on queue and loss drops.
    pub ecn: bool,
    /// Release frames at their own times even when that reorders them (frames sent at once
    /// by `skip_delay` overtake without it).
    pub reorder: bool,
    /// NetEm's `limit`: at most this many frames held at once, waiting for the rate or in
    /// their delay; an arrival beyond is dropped (a queue drop). Not with a discipline.
    pub limit: Option<u32>,
}

impl std::fmt::Display for PathConfig {
    /// One line a person reads, e.g. `rate 100mbit (+24 B/frame), queue 64000 B, loss random 1%, delay 10ms`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(p) = &self.police {
            parts.push(p.to_string());
        }
        if let Some(l) = &self.link {
            match l.queue {
                // The discipline's own limit, as the link's would read.
                None if self.aqm != AqmConfig::DropTail => {
                    let limited = LinkConfig { queue: self.aqm.limit(l), ..l.clone() };
                    parts.push(format!("{limited} (the discipline's)"));
                }
                _ => parts.push(l.to_string()),
            }
        }
        if self.aqm != AqmConfig::DropTail {
            parts.push(format!("aqm {}", self.aqm));
        }
        if let Some(loss) = &self.loss {
            parts.push(format!("loss {loss}"));
        }
        if let Some(b) = self.ber {
            parts.push(format!("ber {}", b.get()));
        }
        if self.delay.max_delay() > Nanos::ZERO || self.delay.trace.is_some() {
            parts.push(self.delay.to_string());
        }
        if let Some(s) = &self.slot {
            parts.push(s.to_string());
        }
        if let Some(s) = &self.skip_delay {
            parts.push(s.to_string());
        }
        let correlated = |c: Option<Probability>| c.map(|c| format!(" correlated {c}")).unwrap_or_default();
        if let Some(d) = self.duplicate {
            parts.push(format!("duplicate {d}{}", correlated(self.duplicate_correlation)));
        }
        if let Some(c) = self.corrupt {
            parts.push(format!("corrupt {c}{}", correlated(self.corrupt_correlation)));
        }
        if self.ecn {
            parts.push("ecn".into());
        }
        if self.reorder {
            parts.push("reorder".into());
        }
        if let Some(n) = self.limit {
            parts.push(format!("at most {n} frames held"));
        }
        if parts.is_empty() {
            return f.write_str("transparent (no impairment)");
        }
        f.write_str(&parts.join(", "))
    }
}

impl PathConfig {
    /// Checks every value against its documented range ([`crate::limits`]) and the fields
    /// against each other. Every way of building a path (flags, config files, benchmarks,
    /// tests) goes through this before a pipeline is made.
    pub fn validate(&self) -> Result<(), RangeError> {
        use crate::limits::*;
        if let Some(n) = self.limit {
            within("limit", n, 1..=u32::MAX, "1 to 4294967295 frames")?;
            if self.aqm != crate::aqm::AqmConfig::DropTail {
                return Err(RangeError {
                    key: "limit",
                    value: n.to_string(),
                    accepted: "no --limit with --aqm (the discipline's limit bounds its queue)".into(),
                });
            }
        }
        if let Some(p) = &self.police {
            // The value shown is the policer's words less its name, which the flag already says.
            let shown = format!("{},burst={}B", p.rate, p.burst.0);
            at_most("police", p.rate.bits_per_sec(), MAX_RATE, &shown, "a rate up to 10tbit")?;
            at_most("police", p.burst.0, MAX_POLICE_BURST, &shown, "a burst from 1 B to 2GB")?;
        }
        if let Some(l) = &self.link {
            if let Server::Rate(r) = &l.server {
                at_most("rate", r.bits_per_sec(), MAX_RATE, r, "1bit to 10tbit")?;
            }
            at_most(
                "overhead",
                l.overhead.unsigned_abs(),
                MAX_OVERHEAD as u32,
                l.overhead,
                "-65536 to 65536 bytes",
            )?;
            match l.queue {
                Some(QueueLimit::Bytes(b)) => at_most(
                    "queue",
                    b,
                    MAX_QUEUE_BYTES,
                    format!("{b}B"),
                    "1B to 1TiB, or 1pkt to 4294967296pkt",
                )?,
                Some(QueueLimit::Packets(n)) => at_most(
                    "queue",
                    n,
                    MAX_QUEUE_PACKETS,
                    format!("{n}pkt"),
                    "1B to 1TiB, or 1pkt to 4294967296pkt",
                )?,
                None => {}
            }
        }
        if self.aqm != AqmConfig::DropTail && self.link.is_none() {
            return Err(RangeError {
                key: "aqm",
                value: self.aqm.name().into(),
                accepted: "only with --rate or --rate-trace: a queue discipline needs a bottleneck".into(),
            });
        }
        let d = &self.delay;
        limits::delay("delay", d.base)?;
        limits::delay("jitter", d.jitter)?;
        if let (Some(c), Some(_)) = (d.correlation, d.half_life) {
            return Err(RangeError {
                key: "delay-correlation",
                value: c.to_string(),
                accepted: "no --delay-half-life with it: one correlation or the other".into(),
            });
        }
        if let Some(c) = d.correlation.filter(|_| !d.is_random()) {
            return Err(RangeError {
                key: "delay-correlation",
                value: c.to_string(),
                accepted: "only with --jitter: it correlates the delay's variation".into(),
            });
        }
        for (key, corr, base) in [
            ("duplicate-correlation", self.duplicate_correlation, self.duplicate),
            ("corrupt-correlation", self.corrupt_correlation, self.corrupt),
        ] {
            if let (Some(c), None) = (corr, base) {
                return Err(RangeError {
                    key,
                    value: c.to_string(),
                    accepted: format!("only with --{}", key.trim_end_matches("-correlation")),
                });
            }
        }
        if let Some(s) = &self.skip_delay {
            if d.max_delay() == Nanos::ZERO && d.trace.is_none() {
                return Err(RangeError {
                    key: "skip-delay",
                    value: s.spec(),
                    accepted: "only with --delay or --delay-trace: it sends frames without their delay"
                        .into(),
                });
            }
            within("skip-delay", s.gap, 1..=u32::MAX, "gap=1 to gap=4294967295")?;
        }
        if let Some(h) = d.half_life {
            limits::delay("delay-half-life", h)?;
            if h == Nanos::ZERO {
                return Err(RangeError {
                    key: "delay-half-life",
                    value: h.to_string(),
                    accepted: "above 0ns, up to 1h".into(),
                });
            }
            if !d.is_random() {
                return Err(RangeError {
                    key: "delay-half-life",
                    value: h.to_string(),
                    accepted: "only with --jitter or a delay table: it correlates the delay's variation"
                        .into(),
                });
            }
        }
        if d.trace.is_some() && d.base != Nanos::ZERO {
            return Err(RangeError {
                key: "delay",
                value: d.base.to_string(),
                accepted: "no --delay with --delay-trace: the trace gives the base delay".into(),
            });
        }
        if let Some(s) = &self.slot {
            let accepted =
                "MIN ≤ MAX ≤ 1h (or delay and jitter up to 1h), packets=1..4294967296, bytes=1B..1TiB";
            let in_range =
                |d| limits::delay("slot", d).map_err(|e| RangeError { accepted: accepted.into(), ..e });
            match &s.spacing {
                Spacing::Uniform { min, max } => {
                    in_range(*max)?;
                    at_most("slot", min, max, s, accepted)?;
                }
                Spacing::Dist { delay, jitter, .. } => {
                    in_range(*delay)?;
                    in_range(*jitter)?;
                }
            }
            at_most("slot", s.packets.unwrap_or(1), MAX_SLOT_PACKETS, s, accepted)?;
            at_most("slot", s.bytes.unwrap_or(1), MAX_SLOT_BYTES, s, accepted)?;
        }
        Ok(())
    }

    /// True when the path changes nothing: frames leave as they arrived.
    pub fn is_transparent(&self) -> bool {
        *self == PathConfig { reorder: self.reorder, ..PathConfig::default() }
    }
}

/// One direction's models and their state.
/// A path's bottleneck. A path exists once per direction, so the discipline stays inline
/// (no pointer to follow per frame) whatever the size difference.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
enum Neck {
    /// No rate: frames pass at once.
    None,
    /// Drop-tail: the link's arrival-time formula.
    DropTail(Link),
    /// A queue discipline in front of the link's server.
    Discipline(Bottleneck),
}

#[derive(Debug)]
pub struct Path {
    police: Option<Policer>,
    neck: Neck,
    /// Decisions made while reconfiguring (a discipline switched off sends what it held).
    pending: Vec<Decision>,
    after: After,
}

/// The steps after the bottleneck, apart from it so that a queue discipline's decisions can
/// go through them while it is borrowed ([`Path::bottleneck_and_after`]).
#[derive(Debug)]
pub struct After {
    loss: Option<Loss>,
    ber: Option<BitErrors>,
    delay: Delay,
    slot: Option<Slot>,
    skip: Option<Skip>,
    duplicate: Option<Chance>,
    corrupt: Option<Chance>,
    ecn: bool,
    /// Any of police, bit errors, slots, skipped delays, duplicate, corrupt or ECN is on: only
    /// then does `process` take the path that looks at them.
    full: bool,
}

impl Path {
    pub fn new(config: &PathConfig) -> Path {
        Path {
            police: config.police.map(Policer::new),
            neck: match &config.link {
                None => Neck::None,
                Some(l) if config.aqm == AqmConfig::DropTail => Neck::DropTail(Link::new(l.clone())),
                Some(l) => Neck::Discipline(Bottleneck::new(&config.aqm, l, config.ecn)),
            },
            pending: Vec::new(),
            after: After {
                loss: config.loss.as_ref().map(Loss::new),
                ber: config.ber.map(BitErrors::new),
                delay: Delay::new(&config.delay),
                slot: config.slot.clone().map(Slot::new),
                skip: config.skip_delay.map(Skip::new),
                duplicate: config.duplicate.map(|p| Chance::new(p, config.duplicate_correlation)),
                corrupt: config.corrupt.map(|p| Chance::new(p, config.corrupt_correlation)),
                ecn: config.ecn,
                full: config.police.is_some()
                    || config.ber.is_some()
                    || config.slot.is_some()
                    || config.skip_delay.is_some()
                    || config.duplicate.is_some()
                    || config.corrupt.is_some()
                    || config.ecn,
            },
        }
    }

    /// Takes a new configuration at `now`, between two frames, keeping the state that still
    /// means something (see each model's `inherit`): the policer's tokens, the link's queue
    /// and busy time, the loss chain's state, the correlated delay's process, the slot
    /// schedule, a trace's position. Models switched off lose their state; models switched
    /// on start afresh. `config` must have passed [`PathConfig::validate`].
    pub fn reconfigure(&mut self, config: &PathConfig, now: Nanos) {
        let mut next = Path::new(config);
        if let (Some(n), Some(o)) = (next.police.as_mut(), self.police.take()) {
            n.inherit(o, now);
        }
        next.pending = std::mem::take(&mut self.pending);
        match (&mut next.neck, std::mem::replace(&mut self.neck, Neck::None)) {
            (Neck::Discipline(n), Neck::Discipline(o)) => n.inherit(o),
            (Neck::Discipline(n), Neck::DropTail(o)) => n.follow_link(o),
            (Neck::DropTail(n), Neck::DropTail(o)) => n.inherit(o),
            (n, Neck::Discipline(o)) => {
                // The discipline ends: what it holds leaves as drop-tail would send it, and a
                // drop-tail link carries on behind it.
                let pending = &mut next.pending;
                let link_config = config.link.clone().unwrap_or_else(|| o.server_config().clone());
                let link = o.into_link(link_config, &mut |d| pending.push(d));
                if config.link.is_some() {
                    *n = Neck::DropTail(link);
                }
            }
            _ => {}
        }
        if let (Some(n), Some(o)) = (next.after.loss.as_mut(), self.after.loss.take()) {
            n.inherit(o);
        }
        if let (Some(n), Some(o)) = (next.after.slot.as_mut(), self.after.slot.take()) {
            n.inherit(o);
        }
        if let (Some(n), Some(o)) = (next.after.skip.as_mut(), self.after.skip.take()) {
            n.inherit(o);
        }
        for (n, o) in [
            (&mut next.after.duplicate, &self.after.duplicate),
            (&mut next.after.corrupt, &self.after.corrupt),
        ] {
            if let (Some(n), Some(o)) = (n.as_mut(), o.as_ref()) {
                n.inherit(o);
            }
        }
        let old_delay = std::mem::replace(&mut self.after.delay, Delay::new(&DelayConfig::default()));
        next.after.delay.inherit(old_delay);
        *self = next;
    }

    /// Frames and bytes in the link's queue at `now`, where the link keeps count (it has a
    /// queue limit).
    pub fn queue_occupancy(&mut self, now: Nanos) -> Option<(usize, u64)> {
        match &mut self.neck {
            Neck::Discipline(b) => Some(b.backlog()),
            Neck::DropTail(l) if l.tracks_queue() => Some(l.occupancy(now)),
            _ => None,
        }
    }

    /// The queue discipline's next event, when one waits (see [`Bottleneck::next_event`]).
    #[inline]
    pub fn next_bottleneck_event(&self) -> Option<Nanos> {
        match &self.neck {
            Neck::Discipline(b) => b.next_event(),
            _ => None,
        }
    }

    /// True when the discipline classifies frames by flow (FQ-CoDel).
    pub fn needs_flow_hash(&self) -> bool {
        matches!(&self.neck, Neck::Discipline(b) if b.needs_flow_hash())
    }

    /// True when the path has a queue discipline.
    pub fn has_aqm(&self) -> bool {
        matches!(self.neck, Neck::Discipline(_))
    }

    /// Decisions made by [`Path::reconfigure`]: the frames a discipline that was switched off
    /// still held, each sent at its drop-tail time.
    pub fn take_pending(&mut self) -> Vec<Decision> {
        std::mem::take(&mut self.pending)
    }

    /// The policer's verdict on a frame at its arrival (true: it may go on).
    #[inline(always)]
    pub fn police(&mut self, meta: &FrameMeta) -> bool {
        self.police.as_mut().is_none_or(|p| p.admit(meta.arrival, meta.len))
    }

    /// The queue discipline, when the path has one (not drop-tail), with the steps after it:
    /// the caller drives the one ([`Bottleneck::arrive`], [`Bottleneck::serve`]) and finishes
    /// each frame it sends with the other ([`After::after_link`]).
    #[inline]
    pub fn bottleneck_and_after(&mut self) -> Option<(&mut Bottleneck, &mut After)> {
        match &mut self.neck {
            Neck::Discipline(b) => Some((b, &mut self.after)),
            _ => None,
        }
    }

    /// The steps after the bottleneck.
    pub fn after(&mut self) -> &mut After {
        &mut self.after
    }

    /// Decides the fate of one frame.
    #[inline]
    pub fn process(&mut self, meta: FrameMeta, rng: &mut Rng) -> Verdict {
        self.process_with(meta, rng, None)
    }

    /// [`process`](Self::process) with the drop-tail link's moving state held by the caller
    /// ([`take_hot`](Self::take_hot)).
    #[inline]
    pub fn process_with(&mut self, meta: FrameMeta, rng: &mut Rng, hot: Option<&mut Hot>) -> Verdict {
        // Two copies of one body: the common one has the rarely used models compiled out, so
        // a path of rate, loss and delay pays nothing for the models it does not use.
        if self.after.full {
            self.run::<true>(meta, rng, hot)
        } else {
            self.run::<false>(meta, rng, hot)
        }
    }

    /// The drop-tail link's moving state, taken out for a burst of frames (see
    /// [`Link::take_hot`]): `None` without a rate link or with a queue discipline.
    pub fn take_hot(&self) -> Option<Hot> {
        match &self.neck {
            Neck::DropTail(link) => link.take_hot(),
            _ => None,
        }
    }

    /// Gives back what [`take_hot`](Self::take_hot) took.
    pub fn put_hot(&mut self, hot: Hot) {
        if let Neck::DropTail(link) = &mut self.neck {
            link.put_hot(hot);
        }
    }

    #[inline(always)]
    fn run<const FULL: bool>(
        &mut self,
        meta: FrameMeta,
        rng: &mut Rng,
        mut hot: Option<&mut Hot>,
    ) -> Verdict {
        if FULL && !self.police(&meta) {
            return Verdict::Drop(DropReason::Police);
        }
        let markable = crate::aqm::ecn::marks(self.after.ecn, meta.ect, FULL);
        let mut mark_ce = false;
        let exit = match &mut self.neck {
            Neck::DropTail(link) => match link.admit_with(meta.arrival, meta.len, hot.as_deref_mut()) {
                Some(exit) => exit,
                None if markable => {
                    mark_ce = true;
                    link.admit_over_limit_with(meta.arrival, meta.len, hot)
                }
                None => return Verdict::Drop(DropReason::Queue),
            },
            // With a discipline, frames come through `after_link` (the caller drives it).
            Neck::None | Neck::Discipline(_) => meta.arrival,
        };
        self.after.finish::<FULL>(meta, exit, mark_ce, rng)
    }
}

impl After {
    /// What follows the bottleneck for a frame whose last bit leaves it at `exit`: loss, bit
    /// errors, delay, slots, duplication and corruption; `mark_ce` when the discipline marked
    /// it.
    #[inline]
    pub fn after_link(&mut self, meta: FrameMeta, exit: Nanos, mark_ce: bool, rng: &mut Rng) -> Verdict {
        if self.full || mark_ce {
            self.finish::<true>(meta, exit, mark_ce, rng)
        } else {
            self.finish::<false>(meta, exit, false, rng)
        }
    }

    /// The steps after the link, for a frame that leaves it at `exit`.
    #[inline(always)]
    fn finish<const FULL: bool>(
        &mut self,
        meta: FrameMeta,
        exit: Nanos,
        mut mark_ce: bool,
        rng: &mut Rng,
    ) -> Verdict {
        let markable = crate::aqm::ecn::marks(self.ecn, meta.ect, FULL);
        if let Some(loss) = &mut self.loss {
            if loss.lose(rng) {
                if !markable {
                    return Verdict::Drop(DropReason::Loss);
                }
                mark_ce = true;
            }
        }
        if FULL {
            if let Some(ber) = &mut self.ber {
                if ber.hit(meta.len, rng) {
                    return Verdict::Drop(DropReason::Ber);
                }
            }
        }
        if !FULL {
            return Verdict::Forward(Forward::at(exit + self.delay.sample(exit, rng)));
        }
        // A frame sent at once skips the delay and the slots (NetEm puts it at the head).
        let at_once = self.skip.as_mut().is_some_and(|s| s.at_once(rng));
        let release = if at_once {
            exit
        } else {
            let due = exit + self.delay.sample(exit, rng);
            match &mut self.slot {
                Some(slot) => slot.release(due, meta.len, rng),
                None => due,
            }
        };
        let duplicate = self.duplicate.as_mut().is_some_and(|c| c.hit(rng));
        let corrupt = meta.caplen > 0 && self.corrupt.as_mut().is_some_and(|c| c.hit(rng));
        let corrupt_bit = corrupt.then(|| rng.below(u64::from(meta.caplen) * 8) as u32);
        let extra = (duplicate || corrupt_bit.is_some() || mark_ce || at_once).then_some(Extra {
            duplicate,
            corrupt_bit,
            mark_ce,
            at_once,
        });
        Verdict::Forward(Forward { release, extra })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(x: f64) -> Probability {
        Probability::new(x).unwrap()
    }

    #[test]
    fn order_link_then_loss_then_delay() {
        let config = PathConfig {
            link: Some(LinkConfig { overhead: 0, ..LinkConfig::rate("8mbit".parse().unwrap()) }),
            loss: Some(LossConfig::Random(Probability::ONE)),
            delay: DelayConfig::constant(Nanos::from_millis(5)),
            ..Default::default()
        };
        let mut path = Path::new(&config);
        let mut rng = Rng::seeded(1);
        // Lost after the link: it still occupied the link, so the next frame queues behind it.
        let meta = FrameMeta::new(Nanos(0), 1000);
        assert_eq!(path.process(meta, &mut rng), Verdict::Drop(DropReason::Loss));
        let mut config2 = config.clone();
        config2.loss = None;
        let mut path2 = Path::new(&config2);
        path2.process(meta, &mut rng);
        let v = path2.process(meta, &mut rng);
        assert_eq!(v, Verdict::Forward(Forward::at(Nanos::from_millis(2 + 5))));
    }

    #[test]
    fn validate_refuses_values_out_of_range() {
        let ok = PathConfig { delay: DelayConfig::constant(Nanos::from_secs(3600)), ..Default::default() };
        assert_eq!(ok.validate(), Ok(()));
        let cases: Vec<(PathConfig, &str)> = vec![
            (
                PathConfig {
                    delay: DelayConfig::constant(Nanos(18_446_744_073_000_000_000)),
                    ..Default::default()
                },
                "--delay",
            ),
            (
                PathConfig {
                    delay: DelayConfig { jitter: Nanos::from_secs(3601), ..Default::default() },
                    ..Default::default()
                },
                "--jitter",
            ),
            (
                PathConfig {
                    link: Some(LinkConfig {
                        overhead: -70_000,
                        ..LinkConfig::rate("1mbit".parse().unwrap())
                    }),
                    ..Default::default()
                },
                "--overhead",
            ),
            (
                PathConfig {
                    link: Some(LinkConfig {
                        queue: Some(QueueLimit::Packets(1 << 40)),
                        ..LinkConfig::rate("1mbit".parse().unwrap())
                    }),
                    ..Default::default()
                },
                "--queue",
            ),
            (
                PathConfig { police: Some("1mbit,burst=3GB".parse().unwrap()), ..Default::default() },
                "--police",
            ),
            (PathConfig { slot: Some("2h".parse().unwrap()), ..Default::default() }, "--slot"),
            (
                PathConfig {
                    slot: Some("dist=normal,delay=1ms,jitter=2h".parse().unwrap()),
                    ..Default::default()
                },
                "--slot",
            ),
            (PathConfig { skip_delay: Some("10%".parse().unwrap()), ..Default::default() }, "--skip-delay"),
            (PathConfig { limit: Some(0), ..Default::default() }, "--limit"),
            (PathConfig { limit: Some(5), aqm: "codel".parse().unwrap(), ..Default::default() }, "--limit"),
            (
                PathConfig {
                    duplicate_correlation: Some(p(0.2)),
                    corrupt: Some(p(0.1)),
                    ..Default::default()
                },
                "--duplicate-correlation",
            ),
            (
                PathConfig {
                    delay: DelayConfig { correlation: Some(p(0.2)), ..DelayConfig::constant(Nanos(1)) },
                    ..Default::default()
                },
                "--delay-correlation",
            ),
            (
                PathConfig {
                    delay: DelayConfig {
                        correlation: Some(p(0.2)),
                        half_life: Some(Nanos(1000)),
                        jitter: Nanos(1000),
                        ..DelayConfig::constant(Nanos(1))
                    },
                    ..Default::default()
                },
                "--delay-correlation",
            ),
            (
                PathConfig {
                    delay: DelayConfig { half_life: Some(Nanos(5)), ..DelayConfig::constant(Nanos(1)) },
                    ..Default::default()
                },
                "--delay-half-life",
            ),
        ];
        for (cfg, flag) in cases {
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.starts_with(flag) && e.contains("accepted"), "{e}");
        }
    }

    #[test]
    fn a_reconfigured_path_keeps_its_queue_and_its_loss_chain() {
        let rate = |r: &str| PathConfig {
            link: Some(LinkConfig { overhead: 0, ..LinkConfig::rate(r.parse().unwrap()) }),
            loss: Some("ge:p=0.5%,r=0.1%".parse().unwrap()),
            ..Default::default()
        };
        let mut path = Path::new(&rate("8mbit"));
        let mut rng = Rng::seeded(1);
        // Ten 1000-byte frames at 0: the link is busy until 10 ms.
        for _ in 0..10 {
            path.process(FrameMeta::new(Nanos(0), 1000), &mut rng);
        }
        // Twice the rate from 1 ms on: the next frame queues behind the ten, at the new rate.
        path.reconfigure(&rate("16mbit"), Nanos::from_millis(1));
        let mut bad = false;
        for _ in 0..2000 {
            // Once the chain went Bad (r = 0.1%), it stays Bad across a change.
            if let Some(Loss::GilbertElliott { bad: b, .. }) = &path.after.loss {
                bad = *b;
            }
            if bad {
                break;
            }
            path.process(FrameMeta::new(Nanos::from_millis(1), 0), &mut rng);
        }
        assert!(bad, "the chain reached Bad");
        path.reconfigure(&rate("16mbit"), Nanos::from_millis(1));
        assert!(matches!(&path.after.loss, Some(Loss::GilbertElliott { bad: true, .. })), "kept Bad");
        let mut fresh = Path::new(&PathConfig { loss: None, ..rate("16mbit") });
        fresh.reconfigure(&PathConfig { loss: None, ..rate("16mbit") }, Nanos(0));
        let v = fresh.process(FrameMeta::new(Nanos(0), 1000), &mut rng);
        assert_eq!(v, Verdict::Forward(Forward::at(Nanos::from_micros(500))));
        // The queue of ten (plus the zero-length frames) is still there: 10 ms, then 0.5 ms.
        let mut q = Path::new(&PathConfig { loss: None, ..rate("8mbit") });
        for _ in 0..10 {
            q.process(FrameMeta::new(Nanos(0), 1000), &mut rng);
        }
        q.reconfigure(&PathConfig { loss: None, ..rate("16mbit") }, Nanos::from_millis(1));
        let v = q.process(FrameMeta::new(Nanos::from_millis(1), 1000), &mut rng);
        assert_eq!(v, Verdict::Forward(Forward::at(Nanos::from_micros(10_500))));
    }

    #[test]
    fn transparent_path_releases_at_arrival() {
        let mut path = Path::new(&PathConfig::default());
        let mut rng = Rng::seeded(1);
        let v = path.process(FrameMeta::new(Nanos(123), 60), &mut rng);
        assert_eq!(v, Verdict::Forward(Forward::at(Nanos(123))));
        assert!(PathConfig::default().is_transparent());
    }

    #[test]
    fn policer_comes_first_and_ecn_marks_instead_of_dropping() {
        let config = PathConfig {
            police: Some("8mbit,burst=1000B".parse().unwrap()),
            loss: Some(LossConfig::Random(Probability::ONE)),
            ecn: true,
            ..Default::default()
        };
        let mut path = Path::new(&config);
        let mut rng = Rng::seeded(1);
        let ect = FrameMeta { ect: true, ..FrameMeta::new(Nanos(0), 600) };
        match path.process(ect, &mut rng) {
            Verdict::Forward(f) => assert!(f.extra.unwrap().mark_ce),
            v => panic!("{v:?}"),
        }
        assert_eq!(
            path.process(ect, &mut rng),
            Verdict::Drop(DropReason::Police),
            "only 400 B of tokens left"
        );
        let plain = FrameMeta::new(Nanos::from_secs(1), 600);
        assert_eq!(path.process(plain, &mut rng), Verdict::Drop(DropReason::Loss));
    }

    #[test]
    fn skipped_frames_leave_at_their_exit_time() {
        // 10 ms delay, slots of 1 ms, every third frame sent at once: it pays the link (1 ms
        // at 8 Mbit/s for 1000 B) but neither the delay nor the slot.
        let config = PathConfig {
            link: Some(LinkConfig { overhead: 0, ..LinkConfig::rate("8mbit".parse().unwrap()) }),
            delay: DelayConfig::constant(Nanos::from_millis(10)),
            slot: Some("1ms".parse().unwrap()),
            skip_delay: Some("100%,gap=3".parse().unwrap()),
            reorder: true,
            ..Default::default()
        };
        let mut path = Path::new(&config);
        let mut rng = Rng::seeded(1);
        for i in 0..9u64 {
            let arrival = Nanos::from_millis(10 * i);
            let Verdict::Forward(f) = path.process(FrameMeta::new(arrival, 1000), &mut rng) else { panic!() };
            let exit = arrival + Nanos::from_millis(1);
            if i % 3 == 2 {
                assert_eq!(f.release, exit, "frame {i} at once");
            } else {
                assert!(f.release >= exit + Nanos::from_millis(10), "frame {i} delayed: {}", f.release);
            }
        }
        // Lost frames are not counted in the gap (they never reach the delay).
        let lossy = PathConfig { loss: Some(LossConfig::Random(Probability::ONE)), ..config.clone() };
        let mut path = Path::new(&lossy);
        for _ in 0..5 {
            path.process(FrameMeta::new(Nanos(0), 100), &mut rng);
        }
        path.reconfigure(&config, Nanos(0));
        let sent: Vec<bool> = (0..3)
            .map(|_| match path.process(FrameMeta::new(Nanos::from_secs(1), 100), &mut rng) {
                Verdict::Forward(f) => f.release < Nanos::from_secs(1) + Nanos::from_millis(10),
                v => panic!("{v:?}"),
            })
            .collect();
        assert_eq!(sent, [false, false, true]);
    }

    #[test]
    fn correlated_duplicates_come_in_runs() {
        let config =
            PathConfig { duplicate: Some(p(0.4)), duplicate_correlation: Some(p(0.5)), ..Default::default() };
        let mut path = Path::new(&config);
        let mut rng = Rng::seeded(8);
        let dups: Vec<bool> = (0..500_000)
            .map(|i| match path.process(FrameMeta::new(Nanos(i), 100), &mut rng) {
                Verdict::Forward(f) => f.extra.is_some_and(|e| e.duplicate),
                v => panic!("{v:?}"),
            })
            .collect();
        let rate = dups.iter().filter(|&&d| d).count() as f64 / dups.len() as f64;
        // NetEm's draw: 30% duplicated, not 40%, and half of them right after another.
        let want = crate::corr::Correlated::hit_rate(0.4, 0.5);
        assert!((want - 0.301).abs() < 0.002 && (rate / want - 1.0).abs() < 0.01, "{rate} vs {want}");
        let again = dups.windows(2).filter(|w| w[0] && w[1]).count() as f64
            / dups.iter().filter(|&&d| d).count() as f64;
        assert!((again - 0.497).abs() < 0.01, "a duplicate follows a duplicate: {again}");
    }

    #[test]
    fn duplicate_and_corrupt_rates() {
        let config = PathConfig { duplicate: Some(p(0.1)), corrupt: Some(p(0.05)), ..Default::default() };
        let mut path = Path::new(&config);
        let mut rng = Rng::seeded(5);
        let n = 1_000_000;
        let (mut dups, mut bad) = (0, 0);
        for i in 0..n {
            let Verdict::Forward(f) = path.process(FrameMeta::new(Nanos(i), 100), &mut rng) else { panic!() };
            let extra = f.extra.unwrap_or_default();
            dups += extra.duplicate as u64;
            if let Some(bit) = extra.corrupt_bit {
                assert!(bit < 800);
                bad += 1;
            }
        }
        for (count, q) in [(dups, 0.1), (bad, 0.05)] {
            let sigma = (n as f64 * q * (1.0 - q)).sqrt();
            assert!((count as f64 - n as f64 * q).abs() < 4.0 * sigma, "{count} vs {q}");
        }
    }
}
