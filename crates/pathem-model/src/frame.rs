//! The few things pathem reads or changes inside a frame's bytes: the ECN field of an IPv4 or
//! IPv6 header behind an Ethernet header (with up to two VLAN tags).

/// Offset of the IP header and whether it is IPv6, if the frame carries IP.
fn ip_header(frame: &[u8]) -> Option<(usize, bool)> {
    let mut off = 12;
    loop {
        let ethertype = u16::from_be_bytes([*frame.get(off)?, *frame.get(off + 1)?]);
        match ethertype {
            0x8100 | 0x88a8 if off < 20 => off += 4,
            0x0800 => return (frame.len() >= off + 2 + 20).then_some((off + 2, false)),
            0x86dd => return (frame.len() >= off + 2 + 40).then_some((off + 2, true)),
            _ => return None,
        }
    }
}

/// The two ECN bits of the frame's IP header, if it has one.
fn ecn_bits(frame: &[u8]) -> Option<(usize, bool, u8)> {
    let (ip, v6) = ip_header(frame)?;
    Some((ip, v6, ecn_at(frame, ip, v6)))
}

/// The two ECN bits of the IP header at `ip` (IPv6 when `v6`), which `ip_header` found.
#[inline(always)]
fn ecn_at(frame: &[u8], ip: usize, v6: bool) -> u8 {
    if v6 {
        (frame[ip + 1] >> 4) & 0b11
    } else {
        frame[ip + 1] & 0b11
    }
}

/// The ECN codepoint of the frame's IP header (0, not ECT, for frames without one).
pub fn ecn_codepoint(frame: &[u8]) -> u8 {
    ecn_bits(frame).map_or(0, |(_, _, b)| b)
}

/// A hash of the frame's flow: IP addresses and protocol, and the ports of TCP, UDP, SCTP and
/// DCCP (IPv4 without fragments' later pieces, IPv6 with no extension headers); the frame's
/// Ethernet addresses for frames without IP. The same flow always hashes the same.
///
/// The key's 8-byte words are mixed two at a time by one 64 × 64 → 128-bit multiply whose
/// halves are folded together (the folded multiply of wyhash and foldhash): IPv4's key is
/// two words, one multiply; IPv6's five, three multiplies side by side. The hash is on the
/// path of every FQ-CoDel frame (its queue cannot be picked before it), where a chain of one
/// multiply per word measured 98 against 93 ns a frame (`bench --disciplines`, 150% load).
pub fn flow_hash(frame: &[u8]) -> u32 {
    flow_hash_at(frame, ip_header(frame))
}

/// The ECN codepoint and the flow hash of a frame ([`ecn_codepoint`], [`flow_hash`]), its
/// headers parsed once.
#[inline]
pub fn ecn_and_flow(frame: &[u8]) -> (u8, u32) {
    let ip = ip_header(frame);
    let ecn = ip.map_or(0, |(ip, v6)| ecn_at(frame, ip, v6));
    (ecn, flow_hash_at(frame, ip))
}

/// The folded multiply: the 128-bit product of `a` and `b`, its halves xored. Every bit of
/// both words reaches the high half.
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// What the key's words are xored with before they are multiplied (hex digits of π). A word
/// that came out 0 would hide the other word of its multiply, so the two words every key
/// has cannot: the first (the source address's first bytes) is xored with a constant whose
/// low byte 0xf3 would be the source's first byte, in IPv4's reserved class E (240/4) and
/// IPv6's unassigned f000::/5; the protocol-and-ports word (bits 0 to 39) with constants
/// that have bits above 40.
const KEYS: [u64; 6] = [
    0x243f_6a88_85a3_08f3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
    0x4528_21e6_38d0_1377,
    0xbe54_66cf_34e9_0c6c,
];

/// [`flow_hash`] of a frame whose IP header `ip_header` found.
#[inline(always)]
fn flow_hash_at(frame: &[u8], ip: Option<(usize, bool)>) -> u32 {
    // Up to eight bytes as a word (the key's pieces are at most eight).
    #[inline(always)]
    fn word(b: &[u8]) -> u64 {
        let mut w = [0u8; 8];
        let n = b.len().min(8);
        w[..n].copy_from_slice(&b[..n]);
        u64::from_le_bytes(w)
    }
    #[inline(always)]
    fn word_at(frame: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(frame[at..at + 8].try_into().expect("eight bytes"))
    }
    // The protocol in the low byte, the ports above it (bits 8 to 39).
    let ports_of = |proto: u8, at: usize| -> u64 {
        let ports = match matches!(proto, 6 | 17 | 33 | 132) {
            true => frame.get(at..at + 4).map_or(0, |p| word(p) << 8),
            false => 0,
        };
        u64::from(proto) | ports
    };
    let h = match ip {
        Some((ip, false)) => {
            let ihl = usize::from(frame[ip] & 0x0f) * 4;
            let proto = frame[ip + 9];
            // Ports only behind a whole header (an IHL under 5 would put them inside it: the
            // TTL and the checksum, which a CE mark rewrites) and in a datagram's first piece.
            let first_piece = u16::from_be_bytes([frame[ip + 6], frame[ip + 7]]) & 0x1fff == 0;
            let rest = match first_piece && ihl >= 20 {
                true => ports_of(proto, ip + ihl),
                false => u64::from(proto),
            };
            fold_mul(word_at(frame, ip + 12) ^ KEYS[0], rest ^ KEYS[5])
        }
        Some((ip, true)) => {
            let next = frame[ip + 6];
            let src = fold_mul(word_at(frame, ip + 8) ^ KEYS[0], word_at(frame, ip + 16) ^ KEYS[1]);
            let dst = fold_mul(word_at(frame, ip + 24) ^ KEYS[2], word_at(frame, ip + 32) ^ KEYS[3]);
            src ^ dst ^ fold_mul(ports_of(next, ip + 40) ^ KEYS[4], KEYS[5])
        }
        None => {
            let head = frame.get(..12).unwrap_or(frame);
            fold_mul(word(head) ^ KEYS[0], word(head.get(8..).unwrap_or_default()) ^ KEYS[5])
        }
    };
    (h ^ (h >> 32)) as u32
}

/// True for an ECN-capable IP frame (ECT(0), ECT(1) or already CE).
pub fn ecn_capable(frame: &[u8]) -> bool {
    matches!(ecn_bits(frame), Some((_, _, b)) if b != 0)
}

/// Flips bit `bit` of the frame (bit 0 is the first byte's most significant), as `--corrupt`
/// and bit errors do; a bit past the frame's end changes nothing.
#[inline]
pub fn flip_bit(frame: &mut [u8], bit: u32) {
    if let Some(b) = frame.get_mut((bit / 8) as usize) {
        *b ^= 0x80 >> (bit % 8);
    }
}

/// Sets the CE codepoint of an ECN-capable frame, updating the IPv4 header checksum
/// incrementally (RFC 1624). Returns false, changing nothing, for other frames.
pub fn mark_ce(frame: &mut [u8]) -> bool {
    let Some((ip, v6, bits)) = ecn_bits(frame) else { return false };
    if bits == 0 {
        return false;
    }
    if v6 {
        frame[ip + 1] |= 0b11 << 4;
        return true;
    }
    let old = u16::from_be_bytes([frame[ip], frame[ip + 1]]);
    frame[ip + 1] |= 0b11;
    let new = u16::from_be_bytes([frame[ip], frame[ip + 1]]);
    let check = u16::from_be_bytes([frame[ip + 10], frame[ip + 11]]);
    // HC' = ~(~HC + ~m + m')
    let mut sum = u32::from(!check) + u32::from(!old) + u32::from(new);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    frame[ip + 10..ip + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 frame of `proto` from `src` port `sport` to 10.0.0.2 port `dport`; `frag`:
    /// the IP header's flags and fragment offset word.
    fn v4(src: [u8; 4], proto: u8, sport: u16, dport: u16, frag: u16, vlan: bool) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend([0x81, 0x00, 0x00, 0x07]);
        }
        f.extend([0x08, 0x00, 0x45, 0, 0, 40, 0, 0]);
        f.extend(frag.to_be_bytes());
        f.extend([64, proto, 0, 0]);
        f.extend(src);
        f.extend([10, 0, 0, 2]);
        f.extend(sport.to_be_bytes());
        f.extend(dport.to_be_bytes());
        f.extend([0u8; 16]);
        f
    }

    #[test]
    fn a_flow_hashes_by_addresses_protocol_and_ports_alone() {
        let base = flow_hash(&v4([10, 0, 0, 1], 17, 1000, 9, 0, false));
        assert_eq!(flow_hash(&v4([10, 0, 0, 1], 17, 1000, 9, 0, true)), base, "a VLAN tag is not the flow");
        for other in [
            v4([10, 0, 0, 3], 17, 1000, 9, 0, false),
            v4([10, 0, 0, 1], 6, 1000, 9, 0, false),
            v4([10, 0, 0, 1], 17, 1001, 9, 0, false),
            v4([10, 0, 0, 1], 17, 1000, 10, 0, false),
        ] {
            assert_ne!(flow_hash(&other), base);
        }
        // A later piece of a fragmented datagram has no ports: what is there is not hashed.
        let later = |sport| flow_hash(&v4([10, 0, 0, 1], 17, sport, 9, 185, false));
        assert_eq!(later(1000), later(2000));
        // Nor has a header shorter than its 20 bytes: what its IHL points at is the header.
        let short = |check: u8| {
            let mut f = v4([10, 0, 0, 1], 17, 1000, 9, 0, false);
            f[14] = 0x42;
            f[25] = check;
            flow_hash(&f)
        };
        assert_eq!(short(1), short(2));
        // ICMP has no ports either.
        assert_eq!(
            flow_hash(&v4([10, 0, 0, 1], 1, 1, 9, 0, false)),
            flow_hash(&v4([10, 0, 0, 1], 1, 2, 9, 0, false))
        );
    }

    #[test]
    fn flows_spread_evenly_over_the_queues_by_the_high_bits() {
        // FQ-CoDel's queue is (hash × queues) >> 32: the high bits must be as mixed as the low.
        let (queues, flows) = (1024u64, 102_400u32);
        let mut count = vec![0u32; queues as usize];
        for i in 0..flows {
            let f = v4([10, 1, (i >> 16) as u8, (i >> 8) as u8], 17, i as u16, 443, 0, false);
            count[((u64::from(flow_hash(&f)) * queues) >> 32) as usize] += 1;
        }
        // 100 flows a queue on average: a chi-square over 1023 degrees of freedom stays well
        // under 1250 for a uniform spread (p ≈ 1e-5), far above it for a skewed one.
        let chi2: f64 = count.iter().map(|&c| (f64::from(c) - 100.0).powi(2) / 100.0).sum();
        assert!(chi2 < 1250.0, "chi-square {chi2}");
    }

    fn checksum(h: &[u8]) -> u16 {
        let mut sum: u32 = h.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn ipv4(tos: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[15] = tos;
        f[16..18].copy_from_slice(&46u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        let c = checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f
    }

    #[test]
    fn ipv4_ce_mark_keeps_the_checksum_valid() {
        for tos in [0b01u8, 0b10, 0xb8 | 0b10] {
            let mut f = ipv4(tos);
            assert!(ecn_capable(&f));
            assert!(mark_ce(&mut f));
            assert_eq!(f[15] & 0b11, 0b11);
            assert_eq!(f[15] & !0b11, tos & !0b11, "DSCP untouched");
            assert_eq!(checksum(&f[14..34]), 0, "checksum still valid");
        }
        let mut not_ect = ipv4(0xb8);
        assert!(!ecn_capable(&not_ect));
        assert!(!mark_ce(&mut not_ect));
    }

    #[test]
    fn ipv6_and_vlan() {
        let mut f = vec![0u8; 80];
        f[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        f[16..18].copy_from_slice(&0x86ddu16.to_be_bytes());
        f[18] = 0x60;
        f[19] = 0b01 << 4; // traffic class low bits: ECT(1)
        assert!(ecn_capable(&f));
        assert!(mark_ce(&mut f));
        assert_eq!((f[19] >> 4) & 0b11, 0b11);
        assert!(!ecn_capable(&[0u8; 10]));
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert!(!mark_ce(&mut arp));
    }

    /// An IPv6 frame from `src` port `sport` to `dst` port 443 over UDP.
    fn v6(src: [u8; 16], dst: [u8; 16], sport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend([0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
        f.extend(src);
        f.extend(dst);
        f.extend(sport.to_be_bytes());
        f.extend(443u16.to_be_bytes());
        f.extend([0, 8, 0, 0]);
        f
    }

    #[test]
    fn ipv6_flows_hash_by_both_addresses_and_ports_and_spread_evenly() {
        let host = |last: u16| {
            let mut a = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            a[14..].copy_from_slice(&last.to_be_bytes());
            a
        };
        let base = flow_hash(&v6(host(1), host(2), 1000));
        for other in [v6(host(3), host(2), 1000), v6(host(1), host(3), 1000), v6(host(1), host(2), 1001)] {
            assert_ne!(flow_hash(&other), base);
        }
        // A flow between a host and itself, and the two directions of one flow, are flows
        // of their own.
        assert_ne!(flow_hash(&v6(host(1), host(1), 1000)), flow_hash(&v6(host(2), host(2), 1000)));
        assert_ne!(flow_hash(&v6(host(2), host(1), 1000)), base);
        // Hosts that differ in their last bytes alone, each with a few ports: as even over
        // 1024 queues as the IPv4 test asks.
        let (queues, mut count) = (1024u64, vec![0u32; 1024]);
        for i in 0..102_400u32 {
            let f = v6(host((i / 16) as u16), host(1), 40_000 + (i % 16) as u16);
            count[((u64::from(flow_hash(&f)) * queues) >> 32) as usize] += 1;
        }
        let chi2: f64 = count.iter().map(|&c| (f64::from(c) - 100.0).powi(2) / 100.0).sum();
        assert!(chi2 < 1250.0, "chi-square {chi2}");
    }

    proptest::proptest! {
        /// The one-parse form gives what the two functions give, for any bytes: a frame of
        /// any kind, cut anywhere, behind up to two VLAN tags.
        #[test]
        fn ecn_and_flow_is_ecn_codepoint_and_flow_hash(
            tags in proptest::collection::vec(proptest::sample::select(vec![0x8100u16, 0x88a8]), 0..3),
            kind in proptest::sample::select(vec![0x0800u16, 0x86dd, 0x0806]),
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
        ) {
            let mut f = vec![0u8; 12];
            for t in tags {
                f.extend(t.to_be_bytes());
                f.extend([0, 7]);
            }
            f.extend(kind.to_be_bytes());
            f.extend(tail);
            proptest::prop_assert_eq!(ecn_and_flow(&f), (ecn_codepoint(&f), flow_hash(&f)));
        }
    }
}
