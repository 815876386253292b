//! Counters of one direction, written by the data path and readable from any thread.
//!
//! Each counter has exactly one writer (the stage that owns the event), so an increment is a
//! relaxed load and store, not an atomic read-modify-write: on x86 two plain moves, and no
//! cache line bounces between stages on different cores.

use pathem_model::{DropReason, Nanos};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A monotonically increasing count with a single writer.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the counter's single writer may call this.
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
    #[inline(always)]
    pub fn inc(&self) {
        self.add(1)
    }
    /// Takes `n` back (frames counted too early). Only the counter's single writer may call this.
    #[inline]
    pub fn sub(&self, n: u64) {
        self.0.store(self.0.load(Ordering::Relaxed).saturating_sub(n), Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    /// Sets a gauge (or a total read from elsewhere). Only the single writer may call this.
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed)
    }
}

/// A sum of nanoseconds with a single writer, exact past 2^64 ns: lateness, sojourn and clamp
/// sums pass it in a long run (100 ms a frame at 1 Mpps in 51 hours), where a wrapped sum
/// would read as a mean far too small, or to Prometheus as a counter reset. 128 bits in two
/// words; the high word, twice its value, is odd while the writer carries into it, so a
/// reader on another thread never takes half a carry.
#[derive(Debug, Default)]
pub struct Sum {
    lo: AtomicU64,
    hi: AtomicU64,
}

impl Sum {
    /// Adds `n`. Only the sum's single writer may call this.
    #[inline(always)]
    pub fn add(&self, n: u64) {
        let (lo, carry) = self.lo.load(Ordering::Relaxed).overflowing_add(n);
        if carry {
            return self.carry(lo);
        }
        self.lo.store(lo, Ordering::Relaxed);
    }

    #[cold]
    #[inline(never)]
    fn carry(&self, lo: u64) {
        let hi = self.hi.load(Ordering::Relaxed);
        // Past 2^127 ns (5e21 years) the sum stays at its last value rather than wrap.
        let Some(done) = hi.checked_add(2) else { return };
        self.hi.store(hi + 1, Ordering::Release);
        self.lo.store(lo, Ordering::Release);
        self.hi.store(done, Ordering::Release);
    }

    /// The sum.
    pub fn get(&self) -> u128 {
        loop {
            let before = self.hi.load(Ordering::Acquire);
            let lo = self.lo.load(Ordering::Acquire);
            let after = self.hi.load(Ordering::Acquire);
            if before == after && before % 2 == 0 {
                return (u128::from(before / 2) << 64) | u128::from(lo);
            }
            std::hint::spin_loop();
        }
    }
}

/// Everything one direction counts. Ingress writes the receive, drop, clamp and delay-line
/// counters (and the port's kernel drops); egress writes the transmit counters.
///
/// Every frame that reaches the port is accounted for, each by a counter of its own:
/// `port_rx_dropped` (the kernel or NIC dropped it before pathem saw it), `port_rx_foreign` (the
/// port read it and skipped it as not the path's), `rx_packets` (pathem took it), then `held`
/// by a queue discipline for a while, then `dropped` by reason, or
/// `written` into the delay line (with duplicates) and later `tx_packets` (handed to the
/// transmit port), of which `port_tx_queued` still wait in the port's ring. Frames in flight
/// are `held + written − tx_packets`: counted on both
/// sides, so `rx + duplicated = tx + dropped + tx errors + in flight` is a check, not a
/// definition. A frame the transmitting port refused (the kernel said no) is taken back out of
/// `tx_packets` and counted in `port_tx_errors` by class. Frames are counted as the path sees
/// them: a GSO super-frame the port cut counts as its wire frames.
#[derive(Debug, Default)]
pub struct Counters {
    pub rx_packets: Counter,
    pub rx_bytes: Counter,
    /// Written by ingress: records written into the delay line (a duplicate is a record).
    pub written: Counter,
    pub tx_packets: Counter,
    pub tx_bytes: Counter,
    pub dropped: [Counter; DropReason::ALL.len()],
    pub duplicated: Counter,
    pub corrupted: Counter,
    pub reorder_clamped: Counter,
    pub reorder_clamp_ns: Sum,
    pub ecn_marked: Counter,
    /// Written by ingress: frames the queue discipline marked CE.
    pub aqm_marked: Counter,
    /// Written by ingress: frames a queue discipline holds now (a gauge), their records not
    /// written yet.
    pub held: Counter,
    /// Written by ingress: how long each frame the queue discipline sent waited in its queue.
    pub sojourn: Lateness,
    /// Written by egress: frames that left before a frame released earlier (reorder mode).
    pub reordered: Counter,
    /// Written by egress: how late after its release time each frame was handed to the port.
    pub late: Lateness,
    /// Written by the receiving side: frames the kernel or NIC dropped before pathem saw them.
    pub port_rx_dropped: Counter,
    /// Written by the receiving side (a total read from the port): frames the kernel moved
    /// off a full receive queue onto another of the port's queues, where they may pass
    /// earlier frames of their flow.
    pub port_rx_rolled_over: Counter,
    /// Written by the receiving side (a total read from the port): frames the port read and
    /// did not hand over, not being the path's (the host's own on an attachment's TAP device).
    pub port_rx_foreign: Counter,
    /// Written by egress (a gauge): frames handed to the transmit port that still wait there.
    pub port_tx_queued: Counter,
    /// Written by egress (totals read from the port): frames the transmitting port's kernel
    /// or NIC refused, by [`TxErrorClass`].
    pub port_tx_errors: [Counter; TxErrorClass::ALL.len()],
    /// Written by the receiving side (totals read from the port): GSO super-frames cut, the
    /// wire frames made of them, partial checksums completed.
    pub gso_frames: Counter,
    pub gso_segments: Counter,
    pub csum_completed: Counter,
    /// Written by ingress once per round (gauges): frames and bytes in the link's queue (where
    /// the link counts them: it has a queue limit), bytes in use in the delay line.
    pub queue_frames: Counter,
    pub queue_bytes: Counter,
    pub delay_line_used: Counter,
    /// Set once: the delay line's capacity (its limit, for one that grows).
    pub delay_line_capacity: Counter,
    /// Written by egress (the port's counters): bytes of the frames the port refused.
    pub port_tx_refused_bytes: Counter,
    /// Written by egress (totals read from the port, `--tx-timing filler`): filler frames and
    /// their bytes sent before real frames, and real frames that started more than one
    /// minimum frame's time after their release.
    pub tx_filler_frames: Counter,
    pub tx_filler_bytes: Counter,
    pub tx_filler_late: Counter,
    /// Frames the device failed to send while fillers were on (fillers and real frames).
    pub tx_filler_errors: Counter,
}

/// A direction's counters: the ports' own (the kernel's drops, what the receiving port cut or
/// refused, what waits in or was refused by the transmitting port) and each path's — the
/// default path's and, with classes (`--class`), each class's, in the order frames are tried.
///
/// A path counts the frames the classifier gave it: received, dropped by reason, written,
/// handed to the transmitting port. The direction's totals are the paths' sums with the port's
/// counts on top; a frame the transmitting port refused is taken out of the total sent (which
/// class it was, the port does not say), so the classes' `tx` add up to the total `tx` plus
/// the port's transmit errors.
#[derive(Clone, Debug)]
pub struct DirectionCounters {
    port: Arc<Counters>,
    paths: Vec<(String, Arc<Counters>)>,
}

impl DirectionCounters {
    /// `paths` in classification order, the default path first.
    pub fn new(port: Arc<Counters>, paths: Vec<(String, Arc<Counters>)>) -> DirectionCounters {
        DirectionCounters { port, paths }
    }

    /// One path and its port (tests, the engine bench).
    pub fn single(counters: Arc<Counters>) -> DirectionCounters {
        DirectionCounters::new(Arc::new(Counters::default()), vec![(DEFAULT_CLASS.into(), counters)])
    }

    /// The ports' own counters.
    pub fn port(&self) -> &Counters {
        &self.port
    }

    /// True when the direction has classes (more than the default path).
    pub fn has_classes(&self) -> bool {
        self.paths.len() > 1
    }

    /// The direction's totals.
    pub fn snapshot(&self) -> Stats {
        self.read().0
    }

    /// The direction's totals and each path's own counters by name (the default path first;
    /// empty without classes), from one reading of each path: the classes of a report add up
    /// to its totals.
    pub fn read(&self) -> (Stats, Vec<(String, Stats)>) {
        let parts: Vec<Stats> = self.paths.iter().map(|(_, c)| c.snapshot()).collect();
        let mut total = self.port.snapshot();
        let refused_bytes = self.port.port_tx_refused_bytes.get();
        for s in &parts {
            total.absorb(s);
        }
        total.tx_packets = total.tx_packets.saturating_sub(total.port_tx_errors.total());
        total.tx_bytes = total.tx_bytes.saturating_sub(refused_bytes);
        let clamped_ns: f64 = parts.iter().map(|s| s.reorder_clamp_mean_ns * s.reorder_clamped as f64).sum();
        total.reorder_clamp_mean_ns =
            if total.reorder_clamped == 0 { 0.0 } else { clamped_ns / total.reorder_clamped as f64 };
        total.late = self.late().snapshot();
        total.sojourn = self.sojourn().snapshot();
        let classes = match self.has_classes() {
            true => self.paths.iter().map(|(n, _)| n.clone()).zip(parts).collect(),
            false => Vec::new(),
        };
        (total, classes)
    }

    /// Frames and bytes handed to the transmitting port, the ones it refused included. Unlike
    /// the snapshot's `tx_packets` (handed less refused), this never goes back: a frame is
    /// handed, then maybe refused at the flush or later, so "sent" read between the two steps
    /// back at the refusal. A monotone count (Prometheus's counters) reports this and the
    /// refusals beside it.
    pub fn handed(&self) -> (u64, u64) {
        self.paths.iter().fold((0, 0), |(f, b), (_, c)| (f + c.tx_packets.get(), b + c.tx_bytes.get()))
    }

    /// Each path's own counters by name, the default path first; empty without classes.
    /// (With the totals of the same moment: [`read`](Self::read).)
    pub fn classes(&self) -> Vec<(String, Stats)> {
        self.read().1
    }

    /// The paths' names and counters, the default path first.
    pub fn paths(&self) -> impl Iterator<Item = (&str, &Counters)> {
        self.paths.iter().map(|(n, c)| (n.as_str(), &**c))
    }

    /// The direction's release lateness, all paths together.
    pub fn late(&self) -> Histo {
        Lateness::summed(self.paths.iter().map(|(_, c)| &c.late))
    }

    /// The direction's sojourn in queue disciplines, all paths together.
    pub fn sojourn(&self) -> Histo {
        Lateness::summed(self.paths.iter().map(|(_, c)| &c.sojourn))
    }
}

/// The name of a direction's default path, for frames no class takes.
pub const DEFAULT_CLASS: &str = "default";

/// Buckets of the lateness histogram: bucket 0 holds lateness below 2^[`LATE_SHIFT`] ns,
/// bucket i (i ≥ 1) lateness in [2^(i−1+LATE_SHIFT), 2^(i+LATE_SHIFT)) ns.
const LATE_BUCKETS: usize = 32;
const LATE_SHIFT: u32 = 8;

/// A log2 histogram of release lateness with a single writer (egress): recording a frame is
/// a count of leading zeros and a relaxed increment, cheap enough for every frame.
#[derive(Debug, Default)]
pub struct Lateness {
    buckets: [Counter; LATE_BUCKETS],
    max: Counter,
    sum: Sum,
}

impl Lateness {
    /// Records one frame handed to the port `late` after its release time.
    #[inline(always)]
    pub fn record(&self, late: Nanos) {
        let ns = late.as_nanos();
        let i = (64 - (ns >> LATE_SHIFT).leading_zeros()) as usize;
        self.buckets[i.min(LATE_BUCKETS - 1)].inc();
        self.sum.add(ns);
        if ns > self.max.get() {
            self.max.0.store(ns, Ordering::Relaxed);
        }
    }

    /// The histogram's counts, for [`Lateness::summed`].
    fn counts(&self) -> Histo {
        Histo {
            counts: std::array::from_fn(|i| self.buckets[i].get()),
            max: self.max.get(),
            sum: self.sum.get(),
        }
    }

    /// Several histograms (a direction's classes) as one.
    pub fn summed<'a>(parts: impl IntoIterator<Item = &'a Lateness>) -> Histo {
        parts.into_iter().fold(Histo::default(), |mut acc, l| {
            let h = l.counts();
            for (a, c) in acc.counts.iter_mut().zip(h.counts) {
                *a += c;
            }
            acc.max = acc.max.max(h.max);
            acc.sum = acc.sum.saturating_add(h.sum);
            acc
        })
    }

    /// The histogram as cumulative `(upper bound in ns, frames at or below it)` per bucket
    /// (the last bound is `u64::MAX`), and the sum of all lateness in ns.
    pub fn cumulative(&self) -> (Vec<(u64, u64)>, u128) {
        self.counts().cumulative()
    }

    pub fn snapshot(&self) -> LateStats {
        self.counts().snapshot()
    }
}

/// A copy of a [`Lateness`] histogram (or the sum of several).
#[derive(Clone, Debug, Default)]
pub struct Histo {
    counts: [u64; LATE_BUCKETS],
    max: u64,
    sum: u128,
}

impl Histo {
    /// Upper bound of the bucket holding quantile `q`, in ns (0 when nothing was recorded).
    fn quantile(&self, total: u64, q: f64) -> u64 {
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank && i + 1 < LATE_BUCKETS {
                return (1u64 << (i as u32 + LATE_SHIFT)).min(self.max);
            }
        }
        self.max
    }

    /// As [`Lateness::cumulative`].
    pub fn cumulative(&self) -> (Vec<(u64, u64)>, u128) {
        let mut seen = 0;
        let buckets = self
            .counts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                seen += c;
                // Bucket i holds lateness below 2^(i + 8) ns, whole nanoseconds: at most one
                // less (a bound is inclusive, as Prometheus's `le`).
                let upper =
                    if i + 1 < LATE_BUCKETS { (1u64 << (i as u32 + LATE_SHIFT)) - 1 } else { u64::MAX };
                (upper, seen)
            })
            .collect();
        (buckets, self.sum)
    }

    pub fn snapshot(&self) -> LateStats {
        let total: u64 = self.counts.iter().sum();
        if total == 0 {
            return LateStats::default();
        }
        LateStats {
            p50_ns: self.quantile(total, 0.5),
            p99_ns: self.quantile(total, 0.99),
            p99_9_ns: self.quantile(total, 0.999),
            max_ns: self.max,
        }
    }
}

/// Release lateness: how long after its release time frames were handed to the transmit port.
/// Percentiles are upper bounds of power-of-two buckets (256 ns, 512 ns, 1 µs, …).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateStats {
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p99_9_ns: u64,
    pub max_ns: u64,
}

pub use pathem_io::port::TxErrorClass;

impl Counters {
    #[inline(always)]
    pub fn drop(&self, reason: DropReason) {
        self.dropped[reason as usize].inc();
    }

    /// A frame of `wire_len` bytes handed to the transmit port, `late` after its release.
    #[inline(always)]
    pub fn sent(&self, wire_len: u32, late: Nanos) {
        self.tx_packets.inc();
        self.tx_bytes.add(u64::from(wire_len));
        self.late.record(late);
    }

    /// Frames handed to the transmit port and refused there (all classes).
    pub fn tx_refused(&self) -> u64 {
        self.port_tx_errors.iter().map(Counter::get).sum()
    }

    /// A consistent-enough copy for reports (each value is exact; they are read one by one).
    pub fn snapshot(&self) -> Stats {
        let clamped = self.reorder_clamped.get();
        // Read once: the frames in flight are the written ones less these.
        let tx_packets = self.tx_packets.get();
        Stats {
            rx_packets: self.rx_packets.get(),
            rx_bytes: self.rx_bytes.get(),
            tx_packets,
            tx_bytes: self.tx_bytes.get(),
            dropped: Dropped(std::array::from_fn(|i| self.dropped[i].get())),
            duplicated: self.duplicated.get(),
            corrupted: self.corrupted.get(),
            reorder_clamped: clamped,
            reorder_clamp_mean_ns: if clamped == 0 {
                0.0
            } else {
                self.reorder_clamp_ns.get() as f64 / clamped as f64
            },
            ecn_marked: self.ecn_marked.get(),
            reordered: self.reordered.get(),
            late: self.late.snapshot(),
            // Read after tx_packets' writer's own order: a record is written before it is sent
            // (and a held frame's written before it is no longer held).
            in_flight: self
                .held
                .get()
                .saturating_add(self.written.get())
                .saturating_sub(self.tx_refused())
                .saturating_sub(tx_packets),
            aqm_mark: self.aqm_marked.get(),
            sojourn: self.sojourn.snapshot(),
            port_rx_dropped: self.port_rx_dropped.get(),
            port_rx_rolled_over: self.port_rx_rolled_over.get(),
            port_rx_foreign: self.port_rx_foreign.get(),
            port_tx_queued: self.port_tx_queued.get(),
            port_tx_errors: PortTxErrors(std::array::from_fn(|i| self.port_tx_errors[i].get())),
            offload: OffloadStats {
                gso_frames: self.gso_frames.get(),
                gso_segments: self.gso_segments.get(),
                csum_completed: self.csum_completed.get(),
            },
            queue_frames: self.queue_frames.get(),
            queue_bytes: self.queue_bytes.get(),
            delay_line_used: self.delay_line_used.get(),
            delay_line_capacity: self.delay_line_capacity.get(),
            tx_filler_frames: self.tx_filler_frames.get(),
            tx_filler_bytes: self.tx_filler_bytes.get(),
            tx_filler_late: self.tx_filler_late.get(),
            tx_filler_errors: self.tx_filler_errors.get(),
        }
    }
}

/// A count per kind of `$key` (an enum with `ALL` and `name()`), serialised as a map from each
/// kind's name (`{"loss": 3, "queue": 0, ...}`; a name an older report lacked counts 0, an
/// unknown one is refused).
macro_rules! counts_by_name {
    ($(#[$doc:meta])* $table:ident, $key:ty, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct $table([u64; <$key>::ALL.len()]);

        impl $table {
            pub fn get(&self, key: $key) -> u64 {
                self.0[key as usize]
            }

            pub fn total(&self) -> u64 {
                self.0.iter().sum()
            }

            /// Every kind with its count, in `ALL`'s order.
            pub fn iter(&self) -> impl Iterator<Item = ($key, u64)> + '_ {
                <$key>::ALL.into_iter().map(|k| (k, self.get(k)))
            }

            /// The counts as `name count` pairs joined by commas (`loss 3, queue 0, ...`).
            pub fn describe(&self) -> String {
                self.iter().map(|(k, n)| format!("{} {n}", k.name())).collect::<Vec<_>>().join(", ")
            }
        }

        impl Serialize for $table {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(Some(<$key>::ALL.len()))?;
                for (k, n) in self.iter() {
                    m.serialize_entry(k.name(), &n)?;
                }
                m.end()
            }
        }

        impl<'de> Deserialize<'de> for $table {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let by_name = std::collections::BTreeMap::<String, u64>::deserialize(d)?;
                let mut out = $table::default();
                for (name, n) in by_name {
                    let k = <$key>::ALL
                        .into_iter()
                        .find(|k| k.name() == name)
                        .ok_or_else(|| serde::de::Error::custom(format!(concat!("unknown ", $what, " `{}`"), name)))?;
                    out.0[k as usize] = n;
                }
                Ok(out)
            }
        }
    };
}

counts_by_name!(
    /// Frames dropped, one count per [`DropReason`] (the one table of reasons: counters, JSON,
    /// Prometheus and the text lines all read it).
    Dropped,
    DropReason,
    "drop reason"
);

counts_by_name!(
    /// Frames the transmitting port's kernel or NIC refused, one count per [`TxErrorClass`]
    /// (`too_large`: EMSGSIZE; `no_buffer`: ENOMEM; `down`: ENETDOWN, ENXIO, ENODEV; `other`:
    /// any other refusal, and a DPDK device's own transmit errors).
    PortTxErrors,
    TxErrorClass,
    "transmit error class"
);

/// What the receiving port did to frames a local sender left to the hardware.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffloadStats {
    /// GSO super-frames cut into wire frames, and the wire frames made of them.
    pub gso_frames: u64,
    pub gso_segments: u64,
    /// Partial checksums completed (outside super-frames).
    pub csum_completed: u64,
}

/// A snapshot of one direction's counters, as reported in JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub dropped: Dropped,
    pub duplicated: u64,
    pub corrupted: u64,
    /// Frames whose release time was moved later so that no frame overtakes another.
    pub reorder_clamped: u64,
    /// Mean time those frames were held back by the clamp.
    pub reorder_clamp_mean_ns: f64,
    /// Frames marked Congestion Experienced instead of being dropped.
    pub ecn_marked: u64,
    /// Frames the queue discipline marked Congestion Experienced (`--aqm` with ECN).
    pub aqm_mark: u64,
    /// How long frames the queue discipline sent waited in its queue (`--aqm`).
    pub sojourn: LateStats,
    /// Frames sent after a frame that arrived later (only with `--reorder`).
    pub reordered: u64,
    /// How late after their release times frames were handed to the transmit port.
    pub late: LateStats,
    /// Frames in flight: held by a queue discipline, or in the delay line (written into it and
    /// not yet handed to the transmit port).
    pub in_flight: u64,
    /// Frames the kernel or NIC dropped before pathem saw them (a full socket buffer or ring).
    pub port_rx_dropped: u64,
    /// Frames the kernel moved off a full receive queue onto another of the port's queues
    /// (DPDK's net_af_packet with several queue pairs): received, but possibly after later
    /// frames of their flow. 0 for every other port.
    #[serde(default)]
    pub port_rx_rolled_over: u64,
    /// Frames the receiving port read and did not hand over, not being the path's: what the
    /// host itself sent on an attachment's TAP device (read from its descriptor, or dropped by
    /// the device before pathem looked), which never crossed the interface. Not in
    /// `rx_packets`. 0 for every other port.
    #[serde(default)]
    pub port_rx_foreign: u64,
    /// Of `tx_packets`, frames still waiting in the transmit port for the kernel or NIC.
    pub port_tx_queued: u64,
    /// Frames the transmit port refused (not in `tx_packets`), by class.
    #[serde(default)]
    pub port_tx_errors: PortTxErrors,
    /// What the receiving port did to frames a local sender left to the hardware.
    #[serde(default)]
    pub offload: OffloadStats,
    /// Frames and bytes in the link's queue (with a queue limit; 0 otherwise).
    pub queue_frames: u64,
    pub queue_bytes: u64,
    /// Bytes in use in the delay line, and its capacity.
    pub delay_line_used: u64,
    pub delay_line_capacity: u64,
    /// Filler frames and bytes the transmitting port sent before real frames
    /// (`--tx-timing filler`), and real frames it started later than one minimum frame's time
    /// after their release (handed to it too late, or behind a frame still on the wire).
    #[serde(default)]
    pub tx_filler_frames: u64,
    #[serde(default)]
    pub tx_filler_bytes: u64,
    #[serde(default)]
    pub tx_filler_late: u64,
    /// Frames the device failed to send while fillers were on, fillers and real frames
    /// together (the device does not say which; not taken out of `tx_packets`).
    #[serde(default)]
    pub tx_filler_errors: u64,
}

impl Stats {
    /// Adds `o`'s counts to these (gauges too: they are the paths' sums); the histograms'
    /// percentiles and the clamp's mean are left for the caller to merge.
    fn absorb(&mut self, o: &Stats) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        for (a, b) in self.dropped.0.iter_mut().zip(o.dropped.0) {
            *a += b;
        }
        self.duplicated += o.duplicated;
        self.corrupted += o.corrupted;
        self.reorder_clamped += o.reorder_clamped;
        self.ecn_marked += o.ecn_marked;
        self.aqm_mark += o.aqm_mark;
        self.reordered += o.reordered;
        self.in_flight += o.in_flight;
        self.queue_frames += o.queue_frames;
        self.queue_bytes += o.queue_bytes;
        self.delay_line_used += o.delay_line_used;
        self.delay_line_capacity += o.delay_line_capacity;
    }

    /// True when every frame pathem took is accounted for: forwarded, dropped by a reason,
    /// refused by the transmitting port, or in the delay line (`rx + duplicated = tx + dropped
    /// + tx errors + in flight`).
    pub fn balances(&self) -> bool {
        self.rx_packets + self.duplicated
            == self.tx_packets + self.dropped.total() + self.port_tx_errors.total() + self.in_flight
    }

    /// The counters on one line, as `run`'s periodic report and `ctl show` print them, named
    /// `name` (`pa->pb`).
    pub fn line(&self, name: &str) -> String {
        let d = &self.dropped;
        let us = |ns: u64| ns as f64 / 1e3;
        let mut text = format!(
            "{name}: port drops {} rx {} tx {} (in port {}) dropped {} ({}) dup {} corrupt {} ecn {} clamped {} in-flight {}; late p50 {:.1} p99.9 {:.1} max {:.1} us",
            self.port_rx_dropped,
            self.rx_packets,
            self.tx_packets,
            self.port_tx_queued,
            d.total(),
            d.describe(),
            self.duplicated,
            self.corrupted,
            self.ecn_marked,
            self.reorder_clamped,
            self.in_flight,
            us(self.late.p50_ns),
            us(self.late.p99_9_ns),
            us(self.late.max_ns)
        );
        if let Some(aqm) = self.aqm_line() {
            text.push_str(&format!("; aqm {aqm}"));
        }
        if self.port_tx_errors.total() > 0 {
            text.push_str(&format!("; tx errors {}", self.port_tx_errors.describe()));
        }
        if self.port_rx_rolled_over > 0 {
            text.push_str(&format!(
                "; {} rolled over to another receive queue (their flows may be out of order)",
                self.port_rx_rolled_over
            ));
        }
        if self.port_rx_foreign > 0 {
            text.push_str(&format!(
                "; {} sent by the host itself on the TAP device, not forwarded",
                self.port_rx_foreign
            ));
        }
        if self.tx_filler_frames > 0 {
            text.push_str(&format!(
                "; fillers {} ({} B), late {}, device tx errors {}",
                self.tx_filler_frames, self.tx_filler_bytes, self.tx_filler_late, self.tx_filler_errors
            ));
        }
        let o = &self.offload;
        if o.gso_frames + o.csum_completed > 0 {
            text.push_str(&format!(
                "; offload: {} super-frames cut into {}, {} checksums completed",
                o.gso_frames, o.gso_segments, o.csum_completed
            ));
        }
        text
    }

    /// What the queue discipline did, in one line, when one ran (`--aqm`): drops by reason,
    /// marks, and the sojourn percentiles (upper bounds of log2 buckets).
    pub fn aqm_line(&self) -> Option<String> {
        let (aqm, overlimit) = (self.dropped.get(DropReason::Aqm), self.dropped.get(DropReason::Overlimit));
        let ms = |ns: u64| ns as f64 / 1e6;
        (aqm + overlimit + self.aqm_mark > 0 || self.sojourn.max_ns > 0).then(|| {
            format!(
                "drop {aqm}, overlimit {overlimit}, mark {}; sojourn p50 ≤ {:.3} ms, p99 ≤ {:.3} ms, max {:.3} ms",
                self.aqm_mark,
                ms(self.sojourn.p50_ns),
                ms(self.sojourn.p99_ns),
                ms(self.sojourn.max_ns)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_every_drop_reason() {
        let c = Counters::default();
        for (i, r) in DropReason::ALL.into_iter().enumerate() {
            c.dropped[r as usize].add(i as u64 + 1);
        }
        c.rx_packets.add(50);
        let s = c.snapshot();
        for (i, (r, n)) in s.dropped.iter().enumerate() {
            assert_eq!((r, n), (DropReason::ALL[i], i as u64 + 1));
        }
        let json = serde_json::to_value(&s.dropped).unwrap();
        assert_eq!(json["loss"], 1);
        assert_eq!(serde_json::from_value::<Dropped>(json).unwrap(), s.dropped, "round trip");
        assert!(serde_json::from_str::<Dropped>("{\"frobnicated\": 1}").is_err());
        assert_eq!(s.in_flight, 0);
        assert!(!s.balances(), "50 received, 45 dropped, 5 missing");
        c.written.add(5);
        c.tx_packets.add(3);
        assert!(c.snapshot().balances() && c.snapshot().in_flight == 2);
        // The port refuses one of the three: counted as refused, no longer as sent.
        c.port_tx_errors[TxErrorClass::TooLarge as usize].set(1);
        c.tx_packets.sub(1);
        let s2 = c.snapshot();
        assert!(s2.balances() && s2.in_flight == 2 && s2.tx_packets == 2, "{s2:?}");
        assert_eq!(s2.port_tx_errors.get(TxErrorClass::TooLarge), 1);
        assert_eq!(s.late, LateStats::default());
        let json = serde_json::to_value(&s).unwrap();
        for r in DropReason::ALL {
            assert!(json["dropped"][r.name()].is_u64(), "{}", r.name());
        }
        for key in [
            "in_flight",
            "port_rx_dropped",
            "port_rx_rolled_over",
            "port_rx_foreign",
            "port_tx_queued",
            "tx_filler_frames",
            "tx_filler_bytes",
            "tx_filler_late",
        ] {
            assert!(json[key].is_u64(), "{key}");
        }
        for key in ["too_large", "no_buffer", "down", "other"] {
            assert!(json["port_tx_errors"][key].is_u64(), "{key}");
        }
        for key in ["gso_frames", "gso_segments", "csum_completed"] {
            assert!(json["offload"][key].is_u64(), "{key}");
        }
    }
}

#[cfg(test)]
mod direction_tests {
    use super::*;

    #[test]
    fn a_directions_totals_are_its_paths_sums_and_its_ports_own() {
        let (port, a, b) =
            (Arc::new(Counters::default()), Arc::new(Counters::default()), Arc::new(Counters::default()));
        for (c, rx, tx, lost) in [(&a, 10, 8, 1), (&b, 5, 5, 0)] {
            c.rx_packets.add(rx);
            c.rx_bytes.add(rx * 100);
            c.written.add(rx - lost);
            c.tx_packets.add(tx);
            c.tx_bytes.add(tx * 100);
            c.dropped[DropReason::Loss as usize].add(lost);
            c.late.record(Nanos(300 * rx));
        }
        // The port refused one frame of 100 B and dropped two before pathem saw them.
        port.port_tx_errors[TxErrorClass::TooLarge as usize].set(1);
        port.port_tx_refused_bytes.set(100);
        port.port_rx_dropped.set(2);
        let d = DirectionCounters::new(port, vec![("default".into(), a), ("c".into(), b)]);
        let s = d.snapshot();
        assert_eq!((s.rx_packets, s.tx_packets, s.tx_bytes, s.in_flight), (15, 12, 1200, 1));
        assert_eq!((s.dropped.get(DropReason::Loss), s.port_rx_dropped), (1, 2));
        assert!(s.balances(), "{s:?}");
        assert_eq!(s.late.max_ns, 3000);
        let classes = d.classes();
        assert_eq!(classes.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["default", "c"]);
        assert_eq!(classes.iter().map(|(_, s)| s.rx_packets).sum::<u64>(), s.rx_packets);
        // One reading gives both, the classes adding up to the totals of the same moment.
        let (total, classes) = d.read();
        assert_eq!(classes.iter().map(|(_, s)| s.rx_packets).sum::<u64>(), total.rx_packets);
        assert_eq!(classes.iter().map(|(_, s)| s.in_flight).sum::<u64>(), total.in_flight);
        assert!(DirectionCounters::single(Arc::new(Counters::default())).classes().is_empty());
        assert!(DirectionCounters::single(Arc::new(Counters::default())).read().1.is_empty());
    }
}

#[cfg(test)]
mod lateness_tests {
    use super::*;

    #[test]
    fn percentiles_are_bucket_upper_bounds_capped_by_the_max() {
        let l = Lateness::default();
        for _ in 0..990 {
            l.record(Nanos(100)); // bucket 0: below 256 ns
        }
        for _ in 0..9 {
            l.record(Nanos(3_000)); // [2048, 4096)
        }
        l.record(Nanos(1_000_000));
        let s = l.snapshot();
        assert_eq!(s.p50_ns, 256);
        assert_eq!(s.p99_ns, 256);
        assert_eq!(s.p99_9_ns, 4096);
        assert_eq!(s.max_ns, 1_000_000);
    }

    #[test]
    fn huge_lateness_lands_in_the_last_bucket() {
        let l = Lateness::default();
        l.record(Nanos(u64::MAX));
        assert_eq!(l.snapshot().p50_ns, u64::MAX);
    }

    #[test]
    fn sums_of_nanoseconds_pass_two_to_the_64_exactly() {
        let s = Sum::default();
        s.add(u64::MAX);
        s.add(u64::MAX);
        s.add(5);
        assert_eq!(s.get(), 2 * u128::from(u64::MAX) + 5);
        // A direction's clamp mean and a histogram's sum from such sums: 3 frames held back
        // 2^63 ns each (292 years: offline, a capture's hours of delay over millions of frames
        // reach the same sum).
        let c = Counters::default();
        for _ in 0..3 {
            c.reorder_clamped.inc();
            c.reorder_clamp_ns.add(1 << 63);
        }
        assert_eq!(c.snapshot().reorder_clamp_mean_ns, (1u64 << 63) as f64);
        let l = Lateness::default();
        for _ in 0..3 {
            l.record(Nanos(1 << 63));
        }
        assert_eq!(l.cumulative().1, 3 * (1u128 << 63));
    }

    #[test]
    fn a_sum_read_while_it_carries_is_never_half_carried() {
        let s = Arc::new(Sum::default());
        let w = s.clone();
        let step = (1u64 << 62) + 12_345;
        let rounds = if cfg!(miri) { 200 } else { 200_000 };
        let writer = std::thread::spawn(move || {
            for _ in 0..rounds {
                w.add(step);
            }
        });
        let mut last = 0;
        while !writer.is_finished() {
            let v = s.get();
            assert!(v >= last && v % u128::from(step) == 0, "{v} after {last}");
            last = v;
        }
        writer.join().unwrap();
        assert_eq!(s.get(), u128::from(step) * rounds as u128);
    }

    #[test]
    fn each_bucket_counts_exactly_what_its_bound_admits() {
        // A bound is inclusive (Prometheus's `le`): 255 ns is at or below the first bound,
        // 256 ns is not, and so on up the buckets.
        let l = Lateness::default();
        for ns in [0, 255, 256, 511, 512, 1 << 20] {
            l.record(Nanos(ns));
        }
        let (buckets, sum) = l.cumulative();
        assert_eq!(sum, 255 + 256 + 511 + 512 + (1 << 20));
        let at_or_below = |bound: u64| buckets.iter().find(|b| b.0 == bound).map(|b| b.1);
        assert_eq!(at_or_below(255), Some(2));
        assert_eq!(at_or_below(511), Some(4));
        assert_eq!(at_or_below(1023), Some(5));
        assert_eq!(at_or_below((1 << 20) - 1), Some(5));
        assert_eq!(at_or_below((1 << 21) - 1), Some(6));
        assert_eq!(buckets.last(), Some(&(u64::MAX, 6)));
        for (bound, n) in &buckets {
            let truly = [0, 255, 256, 511, 512, 1 << 20].iter().filter(|&&v| v <= *bound).count() as u64;
            assert_eq!(*n, truly, "le {bound}");
        }
    }
}
