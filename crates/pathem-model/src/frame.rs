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
    let bits = if v6 { (frame[ip + 1] >> 4) & 0b11 } else { frame[ip + 1] & 0b11 };
    Some((ip, v6, bits))
}

/// The ECN codepoint of the frame's IP header (0, not ECT, for frames without one).
pub fn ecn_codepoint(frame: &[u8]) -> u8 {
    ecn_bits(frame).map_or(0, |(_, _, b)| b)
}

/// A hash of the frame's flow: IP addresses and protocol, and the ports of TCP, UDP, SCTP and
/// DCCP (IPv4 without fragments' later pieces, IPv6 with no extension headers); the frame's
/// Ethernet addresses for frames without IP. The same flow always hashes the same.
pub fn flow_hash(frame: &[u8]) -> u32 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut mix = |bytes: &[u8]| {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0xff51_afd7_ed55_8ccd);
            h ^= h >> 33;
        }
    };
    match ip_header(frame) {
        Some((ip, false)) => {
            let ihl = usize::from(frame[ip] & 0x0f) * 4;
            let proto = frame[ip + 9];
            mix(&frame[ip + 12..ip + 20]);
            mix(&[proto]);
            let first_piece = u16::from_be_bytes([frame[ip + 6], frame[ip + 7]]) & 0x1fff == 0;
            if first_piece && matches!(proto, 6 | 17 | 33 | 132) {
                if let Some(ports) = frame.get(ip + ihl..ip + ihl + 4) {
                    mix(ports);
                }
            }
        }
        Some((ip, true)) => {
            let next = frame[ip + 6];
            mix(&frame[ip + 8..ip + 40]);
            mix(&[next]);
            if matches!(next, 6 | 17 | 33 | 132) {
                if let Some(ports) = frame.get(ip + 40..ip + 44) {
                    mix(ports);
                }
            }
        }
        None => mix(frame.get(..12).unwrap_or(frame)),
    }
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
}
