//! In-memory ports: a synthetic frame generator and a counting sink.
//!
//! They measure the engine alone (as TLEM did on netmap pipes): the generator hands out one
//! prepared frame again and again, either as fast as the engine takes it or on an exact
//! schedule, and the sink only counts.

use crate::port::{PollAt, RxFrame, RxPort, TxPort};
use crate::Error;
use pathem_model::Nanos;

/// Builds an Ethernet/IPv4/UDP frame of `size` bytes (without FCS) whose payload starts with
/// `seq` (big-endian). Frames shorter than the headers are an Ethernet header and zeros.
pub fn udp_frame(size: usize, seq: u64) -> Vec<u8> {
    let mut f = vec![0u8; size.max(14)];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    if size < 42 {
        f.truncate(size.max(14));
        return f;
    }
    let ip_len = (size - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64; // TTL
    ip[9] = 17; // UDP
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let sum = ipv4_checksum(ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let udp = &mut f[34..42];
    udp[0..2].copy_from_slice(&9u16.to_be_bytes());
    udp[2..4].copy_from_slice(&9u16.to_be_bytes());
    udp[4..6].copy_from_slice(&(ip_len - 20).to_be_bytes());
    let seq_bytes = seq.to_be_bytes();
    let n = (size - 42).min(8);
    f[42..42 + n].copy_from_slice(&seq_bytes[..n]);
    f
}

/// The IPv4 header checksum (RFC 1071) of `header` with its checksum field taken as zero.
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for (i, pair) in header.chunks(2).enumerate() {
        if i == 5 {
            continue;
        }
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// How the generator spaces its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Every frame is available at once; each burst is stamped with the time it was taken.
    AsFastAsPossible,
    /// `pps` frames per second on an exact schedule starting at the first poll (0 is taken
    /// as 1).
    PerSecond(u64),
}

/// A generator of `count` identical frames.
pub struct MemSource {
    frame: Vec<u8>,
    remaining: u64,
    pace: Pace,
    start: Option<Nanos>,
    sent: u64,
    /// With [`Pace::PerSecond`], frames come `burst` at a time (each stamped with its own
    /// arrival), as a NIC's interrupt or poll hands them over.
    burst: u64,
    /// With [`Pace::PerSecond`]: frame `sent` is due `offset` ns after `start`, and `rem` is
    /// what the exact schedule (`sent` × 10^9 / pps) leaves over, so each next frame's time
    /// takes an addition, not a 128-bit division (which cost the engine's benchmarks several
    /// nanoseconds a frame that no port has).
    offset: u64,
    rem: u64,
    /// 10^9 / pps and 10^9 % pps.
    gap: (u64, u64),
}

impl MemSource {
    pub fn new(count: u64, size: usize, pace: Pace) -> MemSource {
        let pace = match pace {
            Pace::PerSecond(0) => Pace::PerSecond(1),
            p => p,
        };
        MemSource {
            frame: udp_frame(size, 0),
            remaining: count,
            pace,
            start: None,
            sent: 0,
            burst: 1,
            offset: 0,
            rem: 0,
            gap: match pace {
                Pace::PerSecond(pps) => (1_000_000_000 / pps, 1_000_000_000 % pps),
                Pace::AsFastAsPossible => (0, 0),
            },
        }
    }

    /// Paced frames handed over `burst` at a time: a poll finds frames once the last of the
    /// next `burst` is due (each keeps its own arrival time).
    pub fn in_bursts(mut self, burst: u64) -> MemSource {
        self.burst = burst.max(1);
        self
    }

    fn scheduled(&self, index: u64, start: Nanos, pps: u64) -> Nanos {
        let offset = u128::from(index) * 1_000_000_000 / u128::from(pps);
        start + Nanos(u64::try_from(offset).unwrap_or(u64::MAX))
    }

    /// Moves the schedule on from frame `sent` to the next: `offset` grows by 10^9 / pps and
    /// by one more nanosecond each time the remainders add up to a whole one.
    #[inline]
    fn step(&mut self, pps: u64) {
        self.rem += self.gap.1;
        let carry = u64::from(self.rem >= pps);
        self.rem -= carry * pps;
        // Past 584 years of schedule the clock saturates, as every `Nanos` sum does.
        self.offset = self.offset.saturating_add(self.gap.0 + carry);
    }
}

impl RxPort for MemSource {
    #[inline]
    fn recv_burst<F: FnMut(RxFrame<'_>)>(
        &mut self,
        now: Nanos,
        max: usize,
        mut f: F,
    ) -> Result<usize, Error> {
        let n = match self.pace {
            Pace::AsFastAsPossible => {
                let n = (max as u64).min(self.remaining);
                let frame = RxFrame { arrival: now, wire_len: self.frame.len() as u32, data: &self.frame };
                for _ in 0..n {
                    f(frame);
                }
                n
            }
            Pace::PerSecond(pps) => {
                let start = *self.start.get_or_insert(now);
                let mut n = 0;
                while n < (max as u64).min(self.remaining) {
                    let at = start + Nanos(self.offset);
                    if at > now {
                        break;
                    }
                    f(RxFrame { arrival: at, wire_len: self.frame.len() as u32, data: &self.frame });
                    self.step(pps);
                    n += 1;
                }
                n
            }
        };
        self.remaining -= n;
        self.sent += n;
        Ok(n as usize)
    }

    fn poll_at(&self) -> PollAt {
        if self.remaining == 0 {
            return PollAt::Ended;
        }
        match (self.pace, self.start) {
            (Pace::PerSecond(pps), Some(start)) => {
                // The last frame of the next burst, `k` after frame `sent`: from the schedule's
                // running sum, with one 64-bit division (a 128-bit one only past 2^64).
                let k = self.burst.min(self.remaining) - 1;
                let at = k
                    .checked_mul(self.gap.1)
                    .and_then(|x| x.checked_add(self.rem))
                    .and_then(|x| k.checked_mul(self.gap.0)?.checked_add(x / pps)?.checked_add(self.offset));
                PollAt::At(match at {
                    Some(at) => start + Nanos(at),
                    None => self.scheduled(self.sent + k, start, pps),
                })
            }
            _ => PollAt::Now,
        }
    }
}

/// A sink that counts what it is given.
#[derive(Debug, Default, Clone)]
pub struct MemSink {
    pub frames: u64,
    pub bytes: u64,
    pub first_release: Option<Nanos>,
    pub last_release: Nanos,
}

impl TxPort for MemSink {
    #[inline]
    fn send(&mut self, release: Nanos, _wire_len: u32, data: &[u8]) -> bool {
        self.frames += 1;
        self.bytes += data.len() as u64;
        self.first_release.get_or_insert(release);
        self.last_release = release;
        true
    }

    fn flush(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

/// One UDP super-frame behind its virtio-net header, for a packet socket with
/// `PACKET_VNET_HDR`: `segments` copies of [`udp_frame`]`(size, 0)`'s payload under one header,
/// which the kernel cuts (UDP GSO) into `segments` frames of `size` bytes, each with its own
/// IPv4 identification and checksums (the transport checksum left partial here, as a stack
/// hands it down). `None` for a frame without payload (`size` below 43) or a super-frame past
/// IPv4's 65 535 bytes.
pub fn udp_gso_super_frame(size: usize, segments: usize) -> Option<Vec<u8>> {
    let one = udp_frame(size, 0);
    let payload = size.checked_sub(42).filter(|&p| p > 0)?;
    let udp_len = u16::try_from(payload.checked_mul(segments)?.checked_add(8)?).ok()?;
    let ip_len = udp_len.checked_add(20)?;
    // struct virtio_net_hdr: NEEDS_CSUM, GSO_UDP_L4, headers' length, payload per segment,
    // where the checksum's sum starts and where its field is within it.
    let mut out = vec![1u8, 5];
    for v in [42u16, payload as u16, 34, 6] {
        out.extend_from_slice(&v.to_ne_bytes());
    }
    let mut frame = one[..42].to_vec();
    frame[16..18].copy_from_slice(&ip_len.to_be_bytes());
    frame[24..26].fill(0);
    let sum = ipv4_checksum(&frame[14..34]);
    frame[24..26].copy_from_slice(&sum.to_be_bytes());
    frame[38..40].copy_from_slice(&udp_len.to_be_bytes());
    for _ in 0..segments {
        frame.extend_from_slice(&one[42..]);
    }
    crate::offload::leave_partial(&mut frame);
    out.extend_from_slice(&frame);
    Some(out)
}

#[cfg(test)]
mod tests {
    /// The super-frame, cut as the kernel's UDP GSO cuts it, gives `segments` frames of
    /// `size` bytes, each with a checksum that verifies, the payload of `udp_frame`'s.
    #[test]
    fn a_udp_super_frame_cuts_into_frames_of_its_size() {
        use crate::offload::{segment, vnet_request, VnetRequest};
        for (size, segments) in [(60, 64), (64, 64), (1500, 43), (1514, 2)] {
            let sup = super::udp_gso_super_frame(size, segments).unwrap();
            let hdr: [u8; 10] = sup[..10].try_into().unwrap();
            let VnetRequest::Segment(gso) = vnet_request(&hdr).unwrap() else { panic!("{hdr:?}") };
            let mut frame = sup[10..].to_vec();
            let mut cut = Vec::new();
            let n = segment(&mut frame, gso, |f| cut.push(f.to_vec())).unwrap();
            assert_eq!(n, segments, "{size}");
            let one = super::udp_frame(size, 0);
            for f in &cut {
                assert_eq!(f.len(), size);
                assert_eq!(crate::offload::checksum_ok(f), Some(true), "{size}: {f:?}");
                assert_eq!(f[42..], one[42..]);
            }
        }
        assert!(super::udp_gso_super_frame(42, 64).is_none(), "no payload");
        assert!(super::udp_gso_super_frame(1514, 45).is_none(), "past 65 535 bytes");
    }

    use super::*;

    #[test]
    fn udp_frame_is_well_formed() {
        let f = udp_frame(64, 7);
        assert_eq!(f.len(), 64);
        assert_eq!(ipv4_checksum(&f[14..34]).to_be_bytes(), [f[24], f[25]]);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 50);
        assert_eq!(u64::from_be_bytes(f[42..50].try_into().unwrap()), 7);
        assert_eq!(udp_frame(20, 1).len(), 20);
        assert_eq!(udp_frame(3, 1).len(), 14);
    }

    #[test]
    fn paced_source_is_exact_and_ends() {
        let mut src = MemSource::new(5, 60, Pace::PerSecond(3));
        let mut got = Vec::new();
        let mut now = Nanos(1_000);
        while src.poll_at() != PollAt::Ended {
            src.recv_burst(now, 2, |f| got.push(f.arrival)).unwrap();
            if let PollAt::At(t) = src.poll_at() {
                now = t;
            }
        }
        let want: Vec<Nanos> = (0..5u64).map(|i| Nanos(1_000 + i * 1_000_000_000 / 3)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn the_stepped_schedule_is_the_exact_one() {
        // Rates whose gap is not a whole nanosecond, the remainders carrying at every phase.
        for pps in [3, 7_777_777, 14_880_952, 999_999_999, 1_000_000_000, 3_000_000_000] {
            let n = 100_000u64;
            let mut src = MemSource::new(n, 60, Pace::PerSecond(pps)).in_bursts(32);
            let mut got = Vec::new();
            let mut now = Nanos(5);
            while src.poll_at() != PollAt::Ended {
                src.recv_burst(now, 32, |f| got.push(f.arrival)).unwrap();
                if let PollAt::At(t) = src.poll_at() {
                    let last = src.sent + src.burst.min(src.remaining) - 1;
                    let due = 5 + (u128::from(last) * 1_000_000_000 / u128::from(pps)) as u64;
                    assert_eq!(t, Nanos(due), "{pps} frames a second: when frame {last} is due");
                    now = now.max(t);
                }
            }
            let want = (0..n).map(|i| Nanos(5 + (u128::from(i) * 1_000_000_000 / u128::from(pps)) as u64));
            assert!(got.iter().copied().eq(want), "{pps} frames a second");
        }
    }

    #[test]
    fn paced_bursts_come_when_their_last_frame_is_due() {
        let mut src = MemSource::new(5, 60, Pace::PerSecond(1_000)).in_bursts(2);
        let mut got = Vec::new();
        let mut now = Nanos(0);
        let mut polls = Vec::new();
        while src.poll_at() != PollAt::Ended {
            src.recv_burst(now, 32, |f| got.push(f.arrival)).unwrap();
            if let PollAt::At(t) = src.poll_at() {
                polls.push(t);
                now = t;
            }
        }
        let ms = |k: u64| Nanos(k * 1_000_000);
        assert_eq!(got, (0..5).map(ms).collect::<Vec<_>>(), "each frame keeps its own arrival");
        assert_eq!(polls, vec![ms(2), ms(4)], "the second and the last frame of each burst");
    }

    #[test]
    fn fast_source_stamps_the_burst_time() {
        let mut src = MemSource::new(3, 60, Pace::AsFastAsPossible);
        let mut got = Vec::new();
        assert_eq!(src.recv_burst(Nanos(9), 32, |f| got.push(f.arrival)).unwrap(), 3);
        assert_eq!(got, vec![Nanos(9); 3]);
        assert_eq!(src.poll_at(), PollAt::Ended);
    }
}
