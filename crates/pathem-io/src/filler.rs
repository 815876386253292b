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
//!   most [`MAX_FILLER`] bytes, the last ones balanced so none is shorter than [`MIN_FILLER`];
//! - a shorter gap gets one minimum filler if it is at least half of one (the frame then
//!   starts up to half a minimum frame late), else none (up to half early).
//!
//! A frame that reaches the port when the wire is already planned past its release (handed
//! too late, or behind a frame still on the wire) starts when the wire is free: it is counted
//! `late` when that is more than one minimum frame's time after its release. When the planned
//! wire ends before `now`, the NIC has run dry: the plan starts again from `now`.
//!
//! The fillers are frames the next hop discards: by default to a locally administered address
//! (`02:00:00:00:00:00`, which no interface of a test bed has) with the IEEE 802 local
//! experimental EtherType 0x88B5, which no host's stack takes. A NIC that lets software supply
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
/// Longest filler: a full 1500-byte payload and its header, without the FCS.
pub const MAX_FILLER: usize = 1514;
/// How far ahead of its release a frame is handed to the port unless `lead=` says otherwise.
pub const DEFAULT_LEAD: Nanos = Nanos::from_micros(50);
/// Accepted `lead=` values.
pub const LEAD_RANGE: std::ops::RangeInclusive<Nanos> = Nanos::from_micros(1)..=Nanos::from_secs(1);
/// Accepted line rates (`--line-rate`).
pub const LINE_RATE_RANGE: std::ops::RangeInclusive<u64> = 1_000_000..=1_000_000_000_000;
/// The fillers' default destination and EtherType.
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
}

impl Default for FillerSpec {
    fn default() -> Self {
        FillerSpec { dst: DEFAULT_DST, ethertype: DEFAULT_ETHERTYPE, lead: DEFAULT_LEAD, line_rate: None }
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

const ACCEPTED: &str =
    "accepted: software, or filler[,mac=XX:XX:XX:XX:XX:XX][,ethertype=0x0600..0xffff][,lead=1us..1s]";

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
                        .filter(|&t| t >= 0x0600)
                        .ok_or_else(|| format!("ethertype `{v}` is not 0x0600 to 0xffff; {ACCEPTED}"))?
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

/// Filler frames, bytes and late frames a port sent since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FillerCounts {
    pub frames: u64,
    pub bytes: u64,
    /// Real frames that started more than one minimum frame's time after their release.
    pub late: u64,
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
}

/// Where [`Wire::place`] put a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// When it starts on the wire.
    pub start: Nanos,
    /// More than one minimum frame's time after its release.
    pub late: bool,
}

impl Wire {
    /// A wire at `rate` (within [`LINE_RATE_RANGE`]), idle.
    pub fn new(rate: Rate) -> Wire {
        Wire {
            rate: rate.bits_per_sec().clamp(*LINE_RATE_RANGE.start(), *LINE_RATE_RANGE.end()),
            anchor: Nanos::ZERO,
            end: 0,
        }
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
    /// length of each filler to send before it to `filler`, in order, and says where the frame
    /// starts. At most `max_fillers` fillers; a gap that would need more is left (the frame
    /// starts early by what is not filled) — the caller keeps it below by handing frames at
    /// most a lead ahead. Returns `None`, and changes nothing, when the gap needs more.
    pub fn place(
        &mut self,
        now: Nanos,
        release: Nanos,
        len: usize,
        max_fillers: usize,
        mut filler: impl FnMut(usize),
    ) -> Option<Placed> {
        let mut plan = self.clone();
        if plan.end() < now {
            // The NIC has sent all it was given: start again from here.
            plan.anchor = now;
            plan.end = 0;
        }
        let target = plan.bits_at(release);
        let gap = (target.saturating_sub(plan.end) / 8) as u64;
        let min = MIN_FILLER as u64 + WIRE_OVERHEAD;
        let max = MAX_FILLER as u64 + WIRE_OVERHEAD;
        // Each filler's wire bytes, [min, max] each, adding up to the gap (or one minimum
        // filler for a gap of at least half of one).
        let count = match gap {
            g if g >= min => g.div_ceil(max),
            g if 2 * g >= min => 1,
            _ => 0,
        };
        if count > max_fillers as u64 {
            return None;
        }
        let mut left = if gap >= min { gap } else { count * min };
        for _ in 0..count {
            let take = if left <= max {
                left
            } else if left - max >= min {
                max
            } else {
                left - min
            };
            filler((take - WIRE_OVERHEAD) as usize);
            left -= take;
            plan.end += u128::from(take) * 8;
        }
        let start = plan.time_of(plan.end);
        plan.end += u128::from(len.max(MIN_FILLER) as u64 + WIRE_OVERHEAD) * 8;
        *self = plan;
        Some(Placed { start, late: start > release.saturating_add(self.min_frame_time()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire_bytes(fillers: &[usize]) -> u64 {
        fillers.iter().map(|&l| l as u64 + WIRE_OVERHEAD).sum()
    }

    #[test]
    fn parses_and_refuses() {
        assert_eq!("software".parse::<TxTiming>(), Ok(TxTiming::Software));
        assert_eq!("filler".parse::<TxTiming>(), Ok(TxTiming::Filler(FillerSpec::default())));
        let TxTiming::Filler(f) = "filler,mac=06:00:00:00:00:09,ethertype=0x88b6,lead=2ms".parse().unwrap()
        else {
            panic!()
        };
        assert_eq!((f.dst, f.ethertype, f.lead), ([6, 0, 0, 0, 0, 9], 0x88b6, Nanos::from_millis(2)));
        assert_eq!(f.header()[..12], [6, 0, 0, 0, 0, 9, 6, 0, 0, 0, 0, 9]);
        for bad in [
            "",
            "fill",
            "software,lead=1ms",
            "filler,mac=06:00:00:00:00",
            "filler,mac=06:00:00:00:00:00:01",
            "filler,mac=zz:00:00:00:00:00",
            "filler,ethertype=0x05ff",
            "filler,ethertype=88b5",
            "filler,lead=0us",
            "filler,lead=2s",
            "filler,lead=5",
            "filler,speed=1",
            "filler,lead",
        ] {
            let e = bad.parse::<TxTiming>().unwrap_err();
            assert!(e.contains("accepted:"), "{bad}: {e}");
        }
    }

    #[test]
    fn fillers_bring_each_frame_to_its_release_without_drift() {
        // 10 Gbit/s line, frames released one 100 Mbit/s serialization apart.
        let mut w = Wire::new(Rate(10_000_000_000));
        let t0 = Nanos::from_millis(5);
        let spacing = |len: u64| Nanos((len + WIRE_OVERHEAD) * 8 * 10); // ns at 100 Mbit/s
        let mut release = t0;
        let mut wire_pos = 0u64; // bytes from the first frame's start
        let mut first: Option<u64> = None;
        for i in 0..300u64 {
            let len = 60 + (i * 37) % 1400;
            let mut fillers = Vec::new();
            let p =
                w.place(Nanos::from_millis(1), release, len as usize, 10_000, |l| fillers.push(l)).unwrap();
            assert!(fillers.iter().all(|&l| (MIN_FILLER..=MAX_FILLER).contains(&l)), "{fillers:?}");
            if let Some(f) = first {
                wire_pos += wire_bytes(&fillers);
                // The frame's start by the bytes before it, 0.8 ns a byte.
                let start = f + wire_pos * 8 / 10;
                let want = (release - t0).as_nanos();
                assert!(start.abs_diff(want) <= 34, "frame {i} at {start} ns, released at {want}");
                assert_eq!(
                    p.start.as_nanos().abs_diff(t0.as_nanos() + start),
                    0,
                    "the plan says where it is"
                );
            } else {
                first = Some(p.start.as_nanos() - t0.as_nanos());
                assert_eq!(first, Some(0));
            }
            assert!(!p.late);
            wire_pos += len + WIRE_OVERHEAD;
            release += spacing(len);
        }
    }

    #[test]
    fn short_gaps_round_to_the_nearer_side_and_a_busy_wire_makes_a_frame_late() {
        let mut w = Wire::new(Rate(1_000_000_000));
        // 1 Gbit/s: a byte is 8 ns, a minimum frame 672 ns.
        assert_eq!(w.min_frame_time(), Nanos(672));
        let now = Nanos(1_000_000);
        let mut f = Vec::new();
        let a = w.place(now, now, 60, 10, |l| f.push(l)).unwrap();
        assert_eq!((a.start, f.len()), (now, 0));
        // Free at now + 672; a release 300 ns later (37 bytes) is early by 300: no filler.
        let b = w.place(now, now + Nanos(672 + 300), 60, 10, |l| f.push(l)).unwrap();
        assert_eq!((b.start, f.len()), (now + Nanos(672), 0));
        // 400 ns (50 bytes) later: one minimum filler, late by 272 ns.
        let c = w.place(now, b.start + Nanos(672 + 400), 60, 10, |l| f.push(l)).unwrap();
        assert_eq!((c.start, f.as_slice()), (b.start + Nanos(672 * 2), &[60][..]));
        assert!(!c.late);
        // Released while the wire is busy for longer than a minimum frame: late.
        let d = w.place(now, c.start, 1514, 10, |l| f.push(l)).unwrap();
        let e = w.place(now, c.start, 60, 10, |l| f.push(l)).unwrap();
        assert!(!d.late && e.late, "{d:?} {e:?}");
        // A gap needing more fillers than allowed changes nothing.
        let end = w.end();
        assert_eq!(w.place(now, end + Nanos::from_millis(1), 60, 3, |_| unreachable!()), None);
        assert_eq!(w.end(), end);
        // The NIC ran dry: the plan starts again at now.
        let later = end + Nanos::from_millis(5);
        let g = w.place(later, later + Nanos(6720), 60, 100, |l| f.push(l)).unwrap();
        assert_eq!(g.start, later + Nanos(6720));
    }

    #[test]
    fn every_gap_is_split_into_fillers_that_add_up() {
        for rate in [1_000_000u64, 1_000_000_000, 10_000_000_000, 100_000_000_000] {
            let mut w = Wire::new(Rate(rate));
            for gap_ns in (0..200_000u64).step_by(997) {
                let now = w.end();
                let mut f = Vec::new();
                let p = w.place(now, now + Nanos(gap_ns), 60, 1_000_000, |l| f.push(l)).unwrap();
                assert!(f.iter().all(|&l| (MIN_FILLER..=MAX_FILLER).contains(&l)));
                let err = p.start.as_nanos().abs_diff(now.as_nanos() + gap_ns);
                assert!(
                    err <= w.min_frame_time().as_nanos() / 2 + 8_000_000_000 / rate + 1,
                    "{rate} {gap_ns}: {err}"
                );
            }
        }
    }
}
