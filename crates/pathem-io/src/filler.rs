//! Transmit timing by filler frames (`--tx-timing filler`), MoonEm's method: instead of
//! waiting in software for a frame's release time, the port hands the frame to the NIC ahead
//! of time with filler frames before it whose lengths add up to the wait, so the NIC's own
//! serialization puts the frame on the wire at its time.
//!
//! [`Wire`] plans the byte positions: it follows where the wire will be (in bits at the line
//! rate, each frame costing its length + [`WIRE_OVERHEAD`]: preamble, SFD, FCS and
//! inter-frame gap) and, for each real frame, the fillers that bring the wire to its release
//! time. The arithmetic is in whole bits from an anchor (no accumulated rounding: a frame's
//! start is within one byte time of the exact position, whatever came before), and a frame
//! starts within half a minimum frame's wire time of its release:
//!
//! - a gap of at least one minimum filler is filled exactly (to the byte), in fillers of at
//!   most `max=` bytes ([`MAX_FILLER`] unless told), the last ones balanced so none is shorter
//!   than [`MIN_FILLER`];
//! - a shorter gap gets one minimum filler if it is at least half of one (the frame then
//!   starts up to half a minimum frame late), else none (up to half early).
//!
//! A frame that reaches the port when the wire is already planned past its release (handed
//! too late, or behind a frame still on the wire) starts when the wire is free: it is counted
//! `late` when that is more than one minimum frame's time after its release. When the planned
//! wire ends before `now`, the NIC has run dry: the plan starts again from `now`. A gap longer
//! than the transmit queue has room for is filled over several calls, as the queue drains.
//!
//! The fillers are frames the next hop discards: by default to a locally administered address
//! (`02:00:00:00:00:00`, which no interface of a test bed has) with the IEEE 802 local
//! experimental EtherType 0x88B5, which no host's stack takes (or, `ethertype=` below 0x0600, an
//! 802.3 length that does not match: NICs that check lengths discard those in hardware, which
//! is MoonEm's way on NICs that always append a good FCS). A NIC that lets software supply
//! a frame's FCS could send fillers with a bad FCS instead; DPDK has no device-independent way
//! to ask for that, so pathem does not rely on it (docs/design.md).

use pathem_model::units::Rate;
use pathem_model::Nanos;
use std::str::FromStr;

/// Bytes a frame costs on the wire besides its own: preamble (7), SFD (1), FCS (4) and the
/// inter-frame gap (12).
pub const WIRE_OVERHEAD: u64 = 24;
/// Shortest filler: a minimum Ethernet frame without its FCS (64 B with it).
pub const MIN_FILLER: usize = 60;
/// Longest filler unless `max=` says: a full 1500-byte payload and its header, without the
/// FCS (a link with jumbo frames takes longer ones, and fewer frames per second of wire).
pub const MAX_FILLER: usize = 1514;
/// The longest filler a port whose longest frame is `max_frame` sends: its frames less a VLAN
/// tag's room (a filler carries none, so a frame that long would exceed the MTU).
pub fn longest(max_frame: usize) -> usize {
    max_frame.saturating_sub(4)
}

/// Accepted `max=` values: at least two minimum fillers' wire time less the overhead of one
/// (144 B), so that every gap of a minimum filler or more splits into fillers exactly.
pub const MAX_FILLER_RANGE: std::ops::RangeInclusive<usize> = 144..=65_535;
/// How far ahead of its release a frame is handed to the port unless `lead=` says otherwise.
pub const DEFAULT_LEAD: Nanos = Nanos::from_micros(50);
/// Accepted `lead=` values.
pub const LEAD_RANGE: std::ops::RangeInclusive<Nanos> = Nanos::from_micros(1)..=Nanos::from_secs(1);
/// Accepted line rates (`--line-rate`).
pub const LINE_RATE_RANGE: std::ops::RangeInclusive<u64> = 1_000_000..=1_000_000_000_000;
/// Longest gap a device with no clocked wire (a capture) has filled before a frame; beyond
/// it, a lead of fillers stands for the silence (see [`Wire::unclocked`]).
pub const UNCLOCKED_SILENCE: Nanos = Nanos::from_millis(1);
/// The fillers' default destination and EtherType. A value below 0x0600 is an 802.3 length
/// instead: one that does not match the filler's length makes a receiving NIC that checks
/// lengths (Intel E810) discard it in hardware, as MoonEm does (`ethertype=0x0000`).
pub const DEFAULT_DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0];
pub const DEFAULT_ETHERTYPE: u16 = 0x88b5;

/// How a transmitting port times frames.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TxTiming {
    /// The engine hands each frame to the port when it is due (every port).
    #[default]
    Software,
    /// Filler frames before each frame (DPDK ports).
    Filler(FillerSpec),
}

/// What fillers look like and how far ahead frames come.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FillerSpec {
    /// Destination address of the fillers.
    pub dst: [u8; 6],
    /// Their EtherType.
    pub ethertype: u16,
    /// How far ahead of its release the engine hands a frame to the port: frames whose
    /// release comes sooner after they reach the end of the path start late.
    pub lead: Nanos,
    /// The line rate the NIC serializes at (`--line-rate`); `None`: the port's link speed.
    pub line_rate: Option<Rate>,
    /// Longest filler, bytes without FCS (at most the port's longest frame).
    pub max: usize,
}

impl Default for FillerSpec {
    fn default() -> Self {
        FillerSpec {
            dst: DEFAULT_DST,
            ethertype: DEFAULT_ETHERTYPE,
            lead: DEFAULT_LEAD,
            line_rate: None,
            max: MAX_FILLER,
        }
    }
}

impl FillerSpec {
    /// The 14-byte Ethernet header every filler starts with (source: the destination with the
    /// group bit clear, so a filler is never from a multicast address).
    pub fn header(&self) -> [u8; 14] {
        let mut h = [0u8; 14];
        h[..6].copy_from_slice(&self.dst);
        h[6..12].copy_from_slice(&self.dst);
        h[6] &= !1;
        h[12..].copy_from_slice(&self.ethertype.to_be_bytes());
        h
    }
}

const ACCEPTED: &str = "accepted: software, or filler[,mac=XX:XX:XX:XX:XX:XX][,ethertype=0x0000..0xffff][,lead=1us..1s][,max=144..65535]";

impl FromStr for TxTiming {
    type Err = String;

    fn from_str(s: &str) -> Result<TxTiming, String> {
        let mut parts = s.split(',');
        match parts.next().unwrap_or("") {
            "software" if s == "software" => return Ok(TxTiming::Software),
            "filler" => {}
            other => return Err(format!("unknown transmit timing `{other}`; {ACCEPTED}")),
        }
        let mut spec = FillerSpec::default();
        for kv in parts {
            let (k, v) = kv.split_once('=').ok_or_else(|| format!("`{kv}` is not KEY=VALUE; {ACCEPTED}"))?;
            match k {
                "mac" => {
                    spec.dst =
                        parse_mac(v).ok_or_else(|| format!("mac `{v}` is not a MAC address; {ACCEPTED}"))?
                }
                "ethertype" => {
                    spec.ethertype = v
                        .strip_prefix("0x")
                        .and_then(|h| u16::from_str_radix(h, 16).ok())
                        .ok_or_else(|| format!("ethertype `{v}` is not 0x0000 to 0xffff; {ACCEPTED}"))?
                }
                "max" => {
                    spec.max = v
                        .parse()
                        .ok()
                        .filter(|m| MAX_FILLER_RANGE.contains(m))
                        .ok_or_else(|| format!("max `{v}` is not 144 to 65535 bytes; {ACCEPTED}"))?
                }
                "lead" => {
                    let d: pathem_model::units::Duration =
                        v.parse().map_err(|e| format!("lead `{v}`: {e}; {ACCEPTED}"))?;
                    if !LEAD_RANGE.contains(&d.0) {
                        return Err(format!("lead `{v}` is outside 1us to 1s; {ACCEPTED}"));
                    }
                    spec.lead = d.0;
                }
                _ => return Err(format!("unknown key `{k}`; {ACCEPTED}")),
            }
        }
        Ok(TxTiming::Filler(spec))
    }
}

/// `aa:bb:cc:dd:ee:ff` (or with dashes).
fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut n = 0;
    for (i, part) in s.split([':', '-']).enumerate() {
        if i >= 6 || part.len() != 2 {
            return None;
        }
        out[i] = u8::from_str_radix(part, 16).ok()?;
        n += 1;
    }
    (n == 6).then_some(out)
}

/// Filler frames and bytes a port's device took since it was opened, real frames placed late,
/// and the device's transmit errors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FillerCounts {
    pub frames: u64,
    pub bytes: u64,
    /// Real frames that started more than one minimum frame's time after their release.
    pub late: u64,
    /// Frames the device failed to send, fillers and real frames together (the device does
    /// not say which).
    pub errors: u64,
}

/// Where the wire will be: the plan of one transmit queue.
#[derive(Clone, Debug)]
pub struct Wire {
    /// Line rate, bit/s.
    rate: u64,
    /// The instant bit 0 of the plan starts.
    anchor: Nanos,
    /// Bits planned from the anchor on (frames and fillers, with their overhead).
    end: u128,
    /// Longest filler on the wire, bytes with overhead.
    max: u64,
    /// How the plan follows time: `Some((lead, silence))` for a device with no clocked wire
    /// (a capture file), whose plan restarts only across a silence; `None` for a NIC, whose
    /// plan restarts whenever it has run dry by the clock.
    unclocked: Option<(Nanos, Nanos)>,
}

/// What [`Wire::place`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placed {
    /// The frame is planned after the fillers given.
    Frame {
        /// When it starts on the wire.
        start: Nanos,
        /// More than one minimum frame's time after its release.
        late: bool,
    },
    /// Only part of the gap before it was filled (the fillers given): the queue had no room
    /// for more. The frame waits; the next call goes on from there.
    Filling,
}

impl Wire {
    /// A wire at `rate` (within [`LINE_RATE_RANGE`]), idle, with fillers of at most `max`
    /// bytes (within [`MAX_FILLER_RANGE`]).
    pub fn new(rate: Rate, max: usize) -> Wire {
        Wire {
            rate: rate.bits_per_sec().clamp(*LINE_RATE_RANGE.start(), *LINE_RATE_RANGE.end()),
            anchor: Nanos::ZERO,
            end: 0,
            max: max.clamp(*MAX_FILLER_RANGE.start(), *MAX_FILLER_RANGE.end()) as u64 + WIRE_OVERHEAD,
            unclocked: None,
        }
    }

    /// The plan of a device whose transmit is no clocked wire (net_pcap writing a capture:
    /// the file is the wire, written as fast as the machine writes, which may be slower than
    /// the line rate): it does not restart because the clock passed its end, only when a frame
    /// comes a silence after it ([`UNCLOCKED_SILENCE`], or the lead if longer), a lead before
    /// that frame. Every frame then keeps its exact place however slowly the device takes
    /// them; a longer silence is cut to a lead of fillers (so an idle link does not fill the
    /// file).
    pub fn unclocked(mut self, lead: Nanos) -> Wire {
        self.unclocked = Some((lead, lead.max(UNCLOCKED_SILENCE)));
        self
    }

    /// Bits at the line rate from the anchor to `t` (0 before it).
    fn bits_at(&self, t: Nanos) -> u128 {
        u128::from((t - self.anchor).as_nanos()) * u128::from(self.rate) / 1_000_000_000
    }

    /// The instant `bits` from the anchor (rounded up to a nanosecond).
    fn time_of(&self, bits: u128) -> Nanos {
        let ns = (bits * 1_000_000_000).div_ceil(u128::from(self.rate));
        self.anchor.saturating_add(Nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
    }

    /// When the planned wire falls idle.
    pub fn end(&self) -> Nanos {
        self.time_of(self.end)
    }

    /// Wire time of one minimum frame.
    pub fn min_frame_time(&self) -> Nanos {
        Nanos(((MIN_FILLER as u64 + WIRE_OVERHEAD) * 8 * 1_000_000_000).div_ceil(self.rate))
    }

    /// Plans a frame of `len` bytes (without FCS) released at `release`, at `now`: gives the
    /// length of each filler to send before it to `filler`, in order, at most `room` of them,
    /// and says where the frame starts — or, when the gap needs more fillers than `room`, that
    /// only part of it was filled (call again with the same frame once the queue has room).
    pub fn place(
        &mut self,
        now: Nanos,
        release: Nanos,
        len: usize,
        room: usize,
        mut filler: impl FnMut(usize),
    ) -> Placed {
        match self.unclocked {
            None if self.end() < now => {
                // The NIC has sent all it was given: start again from here.
                self.anchor = now;
                self.end = 0;
            }
            Some((lead, silence)) if release > self.end().saturating_add(silence) => {
                // A silence: the wire starts again a lead before this frame.
                self.anchor = release - lead;
                self.end = 0;
            }
            _ => {}
        }
        let target = self.bits_at(release);
        let gap = (target.saturating_sub(self.end) / 8) as u64;
        let (min, max) = (MIN_FILLER as u64 + WIRE_OVERHEAD, self.max);
        // Each filler's wire bytes, [min, max] each, adding up to the gap (or one minimum
        // filler for a gap of at least half of one).
        let count = match gap {
            g if g >= min => g.div_ceil(max),
            g if 2 * g >= min => 1,
            _ => 0,
        };
        let mut left = if gap >= min { gap } else { count * min };
        let mut emit = |take: u64, end: &mut u128| {
            filler((take - WIRE_OVERHEAD) as usize);
            *end += u128::from(take) * 8;
        };
        if count > room as u64 {
            // Part of a long gap: whole fillers, leaving at least a minimum one.
            for _ in 0..room {
                let take = max.min(left - min);
                if take < min {
                    break;
                }
                emit(take, &mut self.end);
                left -= take;
            }
            return Placed::Filling;
        }
        for _ in 0..count {
            let take = if left <= max {
                left
            } else if left - max >= min {
                max
            } else {
                left - min
            };
            emit(take, &mut self.end);
            left -= take;
        }
        let start = self.time_of(self.end);
        self.end += u128::from(len.max(MIN_FILLER) as u64 + WIRE_OVERHEAD) * 8;
        Placed::Frame { start, late: start > release.saturating_add(self.min_frame_time()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire_bytes(fillers: &[usize]) -> u64 {
        fillers.iter().map(|&l| l as u64 + WIRE_OVERHEAD).sum()
    }

    /// Where a frame starts, and whether late, when it was placed.
    fn placed(p: Placed) -> (Nanos, bool) {
        match p {
            Placed::Frame { start, late } => (start, late),
            Placed::Filling => panic!("only part of the gap was filled"),
        }
    }

    #[test]
    fn parses_and_refuses() {
        assert_eq!("software".parse::<TxTiming>(), Ok(TxTiming::Software));
        assert_eq!("filler".parse::<TxTiming>(), Ok(TxTiming::Filler(FillerSpec::default())));
        let TxTiming::Filler(f) =
            "filler,mac=06:00:00:00:00:09,ethertype=0x88b6,lead=2ms,max=9000".parse().unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (f.dst, f.ethertype, f.lead, f.max),
            ([6, 0, 0, 0, 0, 9], 0x88b6, Nanos::from_millis(2), 9000)
        );
        assert_eq!(f.header()[..12], [6, 0, 0, 0, 0, 9, 6, 0, 0, 0, 0, 9]);
        for bad in [
            "",
            "fill",
            "software,lead=1ms",
            "filler,mac=06:00:00:00:00",
            "filler,mac=06:00:00:00:00:00:01",
            "filler,mac=zz:00:00:00:00:00",
            "filler,ethertype=0x10000",
            "filler,ethertype=88b5",
            "filler,lead=0us",
            "filler,lead=2s",
            "filler,lead=5",
            "filler,max=143",
            "filler,max=65536",
            "filler,speed=1",
            "filler,lead",
        ] {
            let e = bad.parse::<TxTiming>().unwrap_err();
            assert!(e.contains("accepted:") && !e.contains('\n'), "{bad}: {e}");
        }
    }

    proptest::proptest! {
        /// Any text is a timing or one line naming what is accepted; never a panic.
        #[test]
        fn any_text_is_a_timing_or_one_refusal(text in "(software|filler)?(,[a-z]{0,9}=?[0-9a-fx:.usm-]{0,20}){0,4}") {
            match text.parse::<TxTiming>() {
                Ok(TxTiming::Filler(f)) => {
                    proptest::prop_assert!(LEAD_RANGE.contains(&f.lead) && MAX_FILLER_RANGE.contains(&f.max));
                }
                Ok(TxTiming::Software) => proptest::prop_assert_eq!(text.as_str(), "software"),
                Err(e) => proptest::prop_assert!(e.contains("accepted:") && !e.contains('\n'), "{}", e),
            }
        }
    }

    #[test]
    fn fillers_bring_each_frame_to_its_release_without_drift() {
        // 10 Gbit/s line, frames released one 100 Mbit/s serialization apart.
        for max in [MAX_FILLER, 9000] {
            let mut w = Wire::new(Rate(10_000_000_000), max);
            let t0 = Nanos::from_millis(5);
            let spacing = |len: u64| Nanos((len + WIRE_OVERHEAD) * 8 * 10); // ns at 100 Mbit/s
            let mut release = t0;
            let mut wire_pos = 0u64; // bytes from the first frame's start
            for i in 0..300u64 {
                let len = 60 + (i * 37) % 1400;
                let mut fillers = Vec::new();
                let (start, late) =
                    placed(
                        w.place(Nanos::from_millis(1), release, len as usize, 10_000, |l| fillers.push(l)),
                    );
                assert!(fillers.iter().all(|&l| (MIN_FILLER..=max).contains(&l)), "{fillers:?}");
                if i > 0 {
                    wire_pos += wire_bytes(&fillers);
                    // The frame's start by the bytes before it, 0.8 ns a byte.
                    let by_bytes = wire_pos * 8 / 10;
                    let want = (release - t0).as_nanos();
                    assert!(by_bytes.abs_diff(want) <= 34, "frame {i} at {by_bytes} ns, released at {want}");
                    assert_eq!(start.as_nanos(), t0.as_nanos() + by_bytes, "the plan says where it is");
                } else {
                    assert_eq!(start, t0);
                }
                assert!(!late);
                wire_pos += len + WIRE_OVERHEAD;
                release += spacing(len);
            }
        }
    }

    #[test]
    fn short_gaps_round_to_the_nearer_side_and_a_busy_wire_makes_a_frame_late() {
        let mut w = Wire::new(Rate(1_000_000_000), MAX_FILLER);
        // 1 Gbit/s: a byte is 8 ns, a minimum frame 672 ns.
        assert_eq!(w.min_frame_time(), Nanos(672));
        let now = Nanos(1_000_000);
        let mut f = Vec::new();
        let a = placed(w.place(now, now, 60, 10, |l| f.push(l)));
        assert_eq!((a.0, f.len()), (now, 0));
        // Free at now + 672; a release 300 ns later (37 bytes) is early by 300: no filler.
        let b = placed(w.place(now, now + Nanos(672 + 300), 60, 10, |l| f.push(l)));
        assert_eq!((b.0, f.len()), (now + Nanos(672), 0));
        // 400 ns (50 bytes) later: one minimum filler, late by 272 ns.
        let c = placed(w.place(now, b.0 + Nanos(672 + 400), 60, 10, |l| f.push(l)));
        assert_eq!((c.0, f.as_slice()), (b.0 + Nanos(672 * 2), &[60][..]));
        assert!(!c.1);
        // Released while the wire is busy for longer than a minimum frame: late.
        let d = placed(w.place(now, c.0, 1514, 10, |l| f.push(l)));
        let e = placed(w.place(now, c.0, 60, 10, |l| f.push(l)));
        assert!(!d.1 && e.1, "{d:?} {e:?}");
        // The NIC ran dry: the plan starts again at now.
        let later = w.end() + Nanos::from_millis(5);
        let g = placed(w.place(later, later + Nanos(6720), 60, 100, |l| f.push(l)));
        assert_eq!(g.0, later + Nanos(6720));
    }

    #[test]
    fn a_gap_longer_than_the_queue_is_filled_over_several_calls() {
        let mut w = Wire::new(Rate(10_000_000_000), MAX_FILLER);
        let now = Nanos::from_millis(1);
        let release = now + Nanos::from_micros(100); // 125 000 bytes: 82 fillers
        let (mut calls, mut all) = (0, Vec::new());
        let start = loop {
            calls += 1;
            let mut f = Vec::new();
            let p = w.place(now, release, 60, 10, |l| f.push(l));
            assert!(f.len() <= 10);
            all.extend(f);
            if let Placed::Frame { start, late } = p {
                assert!(!late);
                break start;
            }
        };
        assert!(calls >= 9, "{calls} calls");
        assert!(all.iter().all(|&l| (MIN_FILLER..=MAX_FILLER).contains(&l)));
        assert!(start.as_nanos().abs_diff(release.as_nanos()) <= 34, "{start:?} for {release:?}");
        assert_eq!(wire_bytes(&all) * 8 / 10, (start - now).as_nanos());
        // No room at all: nothing given, nothing planned.
        let end = w.end();
        assert_eq!(w.place(now, end + Nanos::from_micros(50), 60, 0, |_| unreachable!()), Placed::Filling);
        assert_eq!(w.end(), end);
    }

    #[test]
    fn an_unclocked_wire_keeps_its_plan_until_a_silence() {
        let lead = Nanos::from_micros(50);
        let mut w = Wire::new(Rate(10_000_000_000), MAX_FILLER).unclocked(lead);
        let t0 = Nanos::from_millis(10);
        // Handed long after their releases (a slow device): the plan does not restart.
        let mut f = Vec::new();
        let (a, _) = placed(w.place(t0 + Nanos::from_millis(5), t0, 60, 1000, |l| f.push(l)));
        assert_eq!((a, f.len()), (t0, 41), "a lead of fillers before the first frame");
        let (b, late) = placed(w.place(t0 + Nanos::from_millis(9), t0 + Nanos(6720), 60, 1000, |_| {}));
        assert!(b.as_nanos().abs_diff((t0 + Nanos(6720)).as_nanos()) <= 34 && !late, "{b:?}");
        // A silence longer than the lead: the wire starts again a lead before the frame.
        let r = t0 + Nanos::from_millis(20);
        let mut g = Vec::new();
        let (c, _) = placed(w.place(t0 + Nanos::from_millis(30), r, 60, 1000, |l| g.push(l)));
        assert_eq!(c, r);
        assert_eq!(wire_bytes(&g), 62_500, "one lead of fillers at 10 Gbit/s");
    }

    #[test]
    fn every_gap_is_split_into_fillers_that_add_up() {
        for rate in [1_000_000u64, 1_000_000_000, 10_000_000_000, 100_000_000_000] {
            for max in [*MAX_FILLER_RANGE.start(), MAX_FILLER, 9000] {
                let mut w = Wire::new(Rate(rate), max);
                for gap_ns in (0..200_000u64).step_by(997) {
                    let now = w.end();
                    let mut f = Vec::new();
                    let (start, _) = placed(w.place(now, now + Nanos(gap_ns), 60, 1_000_000, |l| f.push(l)));
                    assert!(f.iter().all(|&l| (MIN_FILLER..=max).contains(&l)));
                    let err = start.as_nanos().abs_diff(now.as_nanos() + gap_ns);
                    let bound = w.min_frame_time().as_nanos() / 2 + 8_000_000_000 / rate + 1;
                    assert!(err <= bound, "{rate} {max} {gap_ns}: {err}");
                }
            }
        }
    }
}
