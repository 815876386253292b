//! Frames as a NIC would have put them on the wire.
//!
//! A sender on the same host (a veth peer, a container, a tap) leaves two jobs to "the
//! hardware", which on a virtual link never comes:
//! - the TCP, UDP or SCTP checksum (CHECKSUM_PARTIAL): the field holds only the pseudo-header
//!   sum (zero for SCTP's CRC32c), and the receiving stack drops the frame as corrupt;
//! - segmentation (GSO/TSO/USO): the stack hands down super-frames of up to 64 KB that only a
//!   NIC (or the kernel's software fallback in front of one) cuts into wire frames.
//!
//! pathem's path must see wire frames (a queue of 20 frames is not 20 super-frames, a lost
//! frame is not a lost burst), so ports do both jobs before the path, byte for byte as the
//! kernel's software GSO and `skb_checksum_help` would:
//! - [`complete_at`] completes a checksum the kernel says is partial (AF_PACKET's virtio-net
//!   header gives where it starts and where the field is);
//! - [`complete_if_partial`] is for ports that are not told (AF_XDP, DPDK): a TCP or UDP
//!   checksum whose field holds exactly the pseudo-header sum and which does not verify is
//!   completed, as is an SCTP CRC32c of zero that does not verify. A checksum that is wrong in
//!   any other way is left wrong: a frame corrupted on the wire is not repaired (a random
//!   corruption meets the rule once in 65 536);
//! - [`segment`] cuts a super-frame (TCPv4, TCPv6, UDP) into its wire frames in place, in the
//!   port's own receive buffer: each segment's headers are written just in front of its
//!   payload, over bytes of earlier segments the engine has already copied, so segmentation
//!   adds no copy. Every check is made before the first segment is handed over: a frame that
//!   cannot be cut is refused whole ([`Fault`]), never forwarded half-built.

/// Longest header (Ethernet with two VLAN tags, IP with options or extension headers, TCP
/// with options) a super-frame may have.
pub const MAX_HEADER: usize = 256;

/// What a port did to the frames a local sender left to the hardware, since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffloadCounts {
    /// Super-frames cut into wire frames, and the wire frames made of them.
    pub gso_frames: u64,
    pub gso_segments: u64,
    /// Partial checksums completed (outside super-frames, whose segments always get theirs).
    pub csum_completed: u64,
    /// Frames that could not be made wire frames ([`Fault`]): dropped whole, as `offload`.
    pub refused: u64,
}

/// What the kernel asked to be done with a super-frame (virtio-net's `gso_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GsoKind {
    TcpV4,
    TcpV6,
    /// UDP segmentation offload (`UDP_SEGMENT`), IPv4 or IPv6.
    Udp,
}

/// A super-frame's segmentation request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gso {
    pub kind: GsoKind,
    /// Payload bytes per segment (the MSS), headers not counted.
    pub size: u16,
}

/// virtio-net header values (include/uapi/linux/virtio_net.h).
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
const VIRTIO_NET_HDR_GSO_TCPV4: u8 = 1;
const VIRTIO_NET_HDR_GSO_UDP: u8 = 3;
const VIRTIO_NET_HDR_GSO_TCPV6: u8 = 4;
const VIRTIO_NET_HDR_GSO_UDP_L4: u8 = 5;
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
/// Length of `struct virtio_net_hdr`.
pub const VNET_HDR_LEN: usize = 10;

/// What a virtio-net header asks for: nothing, a checksum to complete, or a segmentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VnetRequest {
    None,
    /// Complete the checksum summed from `start`, whose field is at `start + offset`.
    Checksum {
        start: u16,
        offset: u16,
    },
    /// Cut the frame into wire frames (each with a complete checksum).
    Segment(Gso),
}

/// Reads a virtio-net header (in the machine's byte order, as packet sockets write it).
pub fn vnet_request(hdr: &[u8; VNET_HDR_LEN]) -> Result<VnetRequest, Fault> {
    let u16_at = |i: usize| u16::from_ne_bytes([hdr[i], hdr[i + 1]]);
    let gso_type = hdr[1];
    let kind = match gso_type & !VIRTIO_NET_HDR_GSO_ECN {
        VIRTIO_NET_HDR_GSO_NONE if gso_type == 0 => {
            return Ok(if hdr[0] & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 {
                VnetRequest::Checksum { start: u16_at(6), offset: u16_at(8) }
            } else {
                VnetRequest::None
            });
        }
        VIRTIO_NET_HDR_GSO_TCPV4 => GsoKind::TcpV4,
        VIRTIO_NET_HDR_GSO_TCPV6 => GsoKind::TcpV6,
        VIRTIO_NET_HDR_GSO_UDP_L4 if gso_type & VIRTIO_NET_HDR_GSO_ECN == 0 => GsoKind::Udp,
        VIRTIO_NET_HDR_GSO_UDP => return Err(Fault::UdpFragmentation),
        _ => return Err(Fault::UnknownGso(gso_type)),
    };
    Ok(VnetRequest::Segment(Gso { kind, size: u16_at(4) }))
}

/// Why a frame could not be turned into wire frames. The data path only counts these (drop
/// reason `offload`); the message is for tests and diagnostics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    #[error("unknown segmentation type {0:#x}")]
    UnknownGso(u8),
    #[error("UDP fragmentation offload (UFO) is not segmented")]
    UdpFragmentation,
    #[error("segment size 0")]
    ZeroSegmentSize,
    #[error("not a TCP/UDP frame over IPv4/IPv6 that segmentation can cut")]
    NotSegmentable,
    #[error("the segmentation type does not match the frame's headers")]
    KindMismatch,
    #[error("the IP header's length does not match the frame's")]
    LengthMismatch,
    #[error("headers longer than {MAX_HEADER} bytes")]
    HeaderTooLong,
    #[error("the checksum lies outside the frame")]
    ChecksumOutside,
}

/// Where a frame's transport header lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    /// Offset of the IP header.
    l3: usize,
    v6: bool,
    /// Offset and protocol of the transport header.
    l4: usize,
    proto: u8,
    /// End of the IP packet (the frame may be padded beyond it).
    end: usize,
    /// An IPv4 fragment (its transport header, if any, is not the whole datagram's).
    fragment: bool,
}

const TCP: u8 = 6;
const UDP: u8 = 17;
const SCTP: u8 = 132;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Parses Ethernet (up to two VLAN tags), IPv4 or IPv6 (hop-by-hop and destination options
/// skipped) up to the transport header. `None` for anything else.
fn layout(frame: &[u8]) -> Option<Layout> {
    let mut off = 12;
    let mut tags = 0;
    let ethertype = loop {
        let t = u16::from_be_bytes([*frame.get(off)?, *frame.get(off + 1)?]);
        if matches!(t, 0x8100 | 0x88a8) && tags < 2 {
            tags += 1;
            off += 4;
        } else {
            break t;
        }
    };
    let l3 = off + 2;
    match ethertype {
        0x0800 => {
            let ip = frame.get(l3..l3 + 20)?;
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let total = usize::from(be16(ip, 2));
            if ip[0] >> 4 != 4 || ihl < 20 || total < ihl || l3 + total > frame.len() {
                return None;
            }
            let fragment = be16(ip, 6) & 0x3fff != 0;
            Some(Layout { l3, v6: false, l4: l3 + ihl, proto: ip[9], end: l3 + total, fragment })
        }
        0x86dd => {
            let ip = frame.get(l3..l3 + 40)?;
            let end = l3 + 40 + usize::from(be16(ip, 4));
            if ip[0] >> 4 != 6 || end > frame.len() {
                return None;
            }
            let (mut next, mut l4) = (ip[6], l3 + 40);
            // Hop-by-hop and destination options change neither the pseudo-header nor the
            // segmentation; a routing header would (the pseudo-header names the final hop).
            while matches!(next, 0 | 60) {
                let ext = frame.get(l4..l4 + 2)?;
                next = ext[0];
                l4 += (usize::from(ext[1]) + 1) * 8;
            }
            (l4 <= end).then_some(Layout { l3, v6: true, l4, proto: next, end, fragment: false })
        }
        _ => None,
    }
}

/// One's-complement sum (RFC 1071) of `data` read as big-endian 16-bit words, added to `acc`,
/// not yet folded. A trailing odd byte counts as its word's high byte.
///
/// The sum is order-independent (RFC 1071 §2): it adds 64-bit little-endian words with
/// end-around carry (2^64 ≡ 2^32 ≡ 1 modulo 2^16 − 1), folds, and swaps the two bytes to the
/// big-endian result: one addition per 8 bytes.
#[inline]
fn sum(data: &[u8], acc: u64) -> u64 {
    let mut s: u64 = 0;
    let mut carries: u64 = 0;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let (r, o) = s.overflowing_add(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        s = r;
        carries += u64::from(o);
    }
    let rest = words.remainder();
    let mut tail = [0u8; 8];
    tail[..rest.len()].copy_from_slice(rest);
    let (r, o) = s.overflowing_add(u64::from_le_bytes(tail));
    carries += u64::from(o);
    let mut x = (r & 0xffff_ffff) + (r >> 32) + carries;
    while x > 0xffff {
        x = (x & 0xffff) + (x >> 16);
    }
    acc + u64::from((x as u16).swap_bytes())
}

/// Folds a sum to 16 bits (1..=0xffff for a non-zero sum, as the kernel's `csum_fold`).
fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The pseudo-header sum of a transport segment of `len` bytes.
fn pseudo(frame: &[u8], at: &Layout, len: usize) -> u64 {
    let addrs = if at.v6 { &frame[at.l3 + 8..at.l3 + 40] } else { &frame[at.l3 + 12..at.l3 + 20] };
    sum(addrs, 0) + u64::from(at.proto) + len as u64
}

/// Offset of the checksum field in the transport header.
fn field(proto: u8) -> Option<usize> {
    match proto {
        TCP => Some(16),
        UDP => Some(6),
        SCTP => Some(8),
        _ => None,
    }
}

/// Writes the checksum of the transport segment `frame[at.l4..end]` (its field zeroed first),
/// with the pseudo-header of `at`. UDP sends a zero sum as all ones.
fn write_checksum(frame: &mut [u8], at: &Layout, end: usize, off: usize) {
    if at.proto == SCTP {
        frame[at.l4 + 8..at.l4 + 12].fill(0);
        let crc = crc32c(&frame[at.l4..end]);
        frame[at.l4 + 8..at.l4 + 12].copy_from_slice(&crc.to_le_bytes());
        return;
    }
    put16(frame, at.l4 + off, 0);
    let mut c = !fold(sum(&frame[at.l4..end], pseudo(frame, at, end - at.l4)));
    if c == 0 && at.proto == UDP {
        c = 0xffff;
    }
    put16(frame, at.l4 + off, c);
}

/// Completes the checksum the kernel left partial: the field at `start + offset` holds the
/// pseudo-header sum (TCP, UDP) or zero (SCTP, whose field is at offset 8 and is a CRC32c),
/// and the sum runs from `start` to the end of the IP packet (to the end of the frame when its
/// headers cannot be read).
pub fn complete_at(frame: &mut [u8], start: usize, offset: usize) -> Result<(), Fault> {
    let at = start.checked_add(offset).ok_or(Fault::ChecksumOutside)?;
    if at.checked_add(2).is_none_or(|e| e > frame.len()) {
        return Err(Fault::ChecksumOutside);
    }
    let known = layout(frame).filter(|l| l.l4 == start && !l.fragment);
    if let Some(l) = known.filter(|l| l.proto == SCTP && offset == 8) {
        if l.l4 + 12 > l.end {
            return Err(Fault::ChecksumOutside);
        }
        write_checksum(frame, &l, l.end, 8);
        return Ok(());
    }
    let end = known.map_or(frame.len(), |l| l.end);
    if at + 2 > end {
        return Err(Fault::ChecksumOutside);
    }
    let mut c = !fold(sum(&frame[start..end], 0));
    if c == 0 && known.is_some_and(|l| l.proto == UDP) {
        c = 0xffff;
    }
    put16(frame, at, c);
    Ok(())
}

/// Completes a TCP, UDP or SCTP checksum the sender left partial, where nothing says so: the
/// field holds exactly the pseudo-header sum (zero for SCTP) and the checksum does not verify.
/// Returns true when it completed one. Checksums that verify, or are wrong in any other way,
/// are left as they are.
#[inline]
pub fn complete_if_partial(frame: &mut [u8]) -> bool {
    let Some(at) = layout(frame) else { return false };
    if at.fragment {
        return false;
    }
    let Some(off) = field(at.proto) else { return false };
    let len = at.end - at.l4;
    if at.proto == SCTP {
        if len < 12 || frame[at.l4 + 8..at.l4 + 12] != [0; 4] || crc32c(&frame[at.l4..at.end]) == 0 {
            return false;
        }
        write_checksum(frame, &at, at.end, off);
        return true;
    }
    if len < off + 2 {
        return false;
    }
    let ps = pseudo(frame, &at, len);
    if be16(frame, at.l4 + off) != fold(ps) {
        return false;
    }
    // Cold from here: one frame in 65 536 of those with a complete checksum gets here too.
    // One pass: with the pseudo-header sum in the field, the segment's sum T is what the
    // checksum covers (pseudo-header included), so it verifies if T + ps folds to all ones,
    // and its complete value is !T.
    let t = sum(&frame[at.l4..at.end], 0);
    if fold(t + ps) == 0xffff {
        return false;
    }
    let mut c = !fold(t);
    if c == 0 && at.proto == UDP {
        c = 0xffff;
    }
    put16(frame, at.l4 + off, c);
    true
}

/// True when the frame's TCP, UDP or SCTP checksum verifies (`None` for frames without one
/// that can be read: other protocols, fragments, a UDP checksum of zero over IPv4).
pub fn checksum_ok(frame: &[u8]) -> Option<bool> {
    let at = layout(frame).filter(|l| !l.fragment)?;
    let off = field(at.proto)?;
    let len = at.end - at.l4;
    if len < off + 2 {
        return None;
    }
    match at.proto {
        SCTP if len >= 12 => {
            let mut copy = frame[at.l4..at.end].to_vec();
            let want = [copy[8], copy[9], copy[10], copy[11]];
            copy[8..12].fill(0);
            Some(crc32c(&copy).to_le_bytes() == want)
        }
        SCTP => None,
        UDP if !at.v6 && be16(frame, at.l4 + 6) == 0 => None,
        _ => Some(fold(sum(&frame[at.l4..at.end], pseudo(frame, &at, len))) == 0xffff),
    }
}

/// Cuts the super-frame in `frame` into wire frames of at most `gso.size` payload bytes each,
/// as the kernel's software GSO does, handing each to `f` in order; returns how many. The
/// frame's buffer is reused: segments are built in place, so `f` must be done with a segment
/// (copied it) when it returns. Nothing is handed over unless the whole frame can be cut.
///
/// Per segment, as `inet_gso_segment`/`ipv6_gso_segment` and `tcp_gso_segment` or
/// `__udp_gso_segment` make them: the Ethernet header and VLAN tags as they were; IPv4 total
/// length, identification (the first's plus the segment's index) and header checksum; IPv6
/// payload length; TCP sequence number (plus the payload before it), CWR only on the first
/// segment, FIN and PSH only on the last; UDP length; a complete transport checksum. A frame
/// whose payload fits in one segment leaves as one frame with its checksum completed.
pub fn segment(frame: &mut [u8], gso: Gso, mut f: impl FnMut(&[u8])) -> Result<usize, Fault> {
    let mss = usize::from(gso.size);
    if mss == 0 {
        return Err(Fault::ZeroSegmentSize);
    }
    let at = layout(frame).ok_or(Fault::NotSegmentable)?;
    let (want_proto, want_v6) = match gso.kind {
        GsoKind::TcpV4 => (TCP, Some(false)),
        GsoKind::TcpV6 => (TCP, Some(true)),
        GsoKind::Udp => (UDP, None),
    };
    if at.fragment || at.proto != want_proto || want_v6.is_some_and(|v6| v6 != at.v6) {
        return Err(Fault::KindMismatch);
    }
    // A super-frame is never padded: its IP length must be the frame's.
    if at.end != frame.len() {
        return Err(Fault::LengthMismatch);
    }
    let l4_len = if at.proto == TCP {
        let doff = usize::from(*frame.get(at.l4 + 12).ok_or(Fault::LengthMismatch)? >> 4) * 4;
        if doff < 20 {
            return Err(Fault::NotSegmentable);
        }
        doff
    } else {
        8
    };
    let hlen = at.l4 + l4_len;
    if hlen > MAX_HEADER {
        return Err(Fault::HeaderTooLong);
    }
    if hlen > frame.len() {
        return Err(Fault::LengthMismatch);
    }
    let payload = frame.len() - hlen;
    let count = payload.div_ceil(mss).max(1);
    let mut header = [0u8; MAX_HEADER];
    header[..hlen].copy_from_slice(&frame[..hlen]);
    let header = &header[..hlen];
    let id = if at.v6 { 0 } else { be16(header, at.l3 + 4) };
    let seq = if at.proto == TCP {
        u32::from_be_bytes(header[at.l4 + 4..at.l4 + 8].try_into().unwrap())
    } else {
        0
    };
    for k in 0..count {
        let from = k * mss;
        let end = hlen + payload.min(from + mss);
        let seg = &mut frame[from..end];
        seg[..hlen].copy_from_slice(header);
        let len = seg.len();
        let l = Layout { end: len, ..at };
        if at.v6 {
            put16(seg, at.l3 + 4, (len - at.l3 - 40) as u16);
        } else {
            put16(seg, at.l3 + 2, (len - at.l3) as u16);
            put16(seg, at.l3 + 4, id.wrapping_add(k as u16));
            put16(seg, at.l3 + 10, 0);
            let ihl = usize::from(seg[at.l3] & 0x0f) * 4;
            let c = !fold(sum(&seg[at.l3..at.l3 + ihl], 0));
            put16(seg, at.l3 + 10, c);
        }
        if at.proto == TCP {
            let s = seq.wrapping_add((k * mss) as u32);
            seg[at.l4 + 4..at.l4 + 8].copy_from_slice(&s.to_be_bytes());
            const FIN: u8 = 0x01;
            const PSH: u8 = 0x08;
            const CWR: u8 = 0x80;
            if k > 0 {
                seg[at.l4 + 13] &= !CWR;
            }
            if k + 1 < count {
                seg[at.l4 + 13] &= !(FIN | PSH);
            }
            write_checksum(seg, &l, len, 16);
        } else {
            put16(seg, at.l4 + 4, (len - at.l4) as u16);
            write_checksum(seg, &l, len, 6);
        }
        f(seg);
    }
    Ok(count)
}

/// An Ethernet + IPv4 + TCP frame (a VLAN tag if asked) with `payload` bytes and a complete
/// TCP checksum, for tests and benchmarks.
pub fn example_tcp4(payload: usize, vlan: bool) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    if vlan {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let l3 = f.len();
    let total = (20 + 20 + payload).min(usize::from(u16::MAX)) as u16;
    f.extend_from_slice(&[0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, TCP, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    put16(&mut f, l3 + 2, total);
    let c = !fold(sum(&f[l3..l3 + 20], 0));
    put16(&mut f, l3 + 10, c);
    f.extend_from_slice(&[0x9c, 0x40, 0x14, 0x51, 0, 0, 0x10, 0, 0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff]);
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend((0..usize::from(total) - 40).map(|i| (i * 7 + 3) as u8));
    if let Some(at) = layout(&f) {
        write_checksum(&mut f, &at, at.end, 16);
    }
    f
}

/// Leaves the frame's TCP or UDP checksum partial, as a sender handing it to the hardware does
/// (the field holds the pseudo-header sum), for tests and benchmarks.
pub fn leave_partial(f: &mut [u8]) {
    let Some(at) = layout(f) else { return };
    let Some(off) = field(at.proto).filter(|_| at.proto != SCTP) else { return };
    let ps = pseudo(f, &at, at.end - at.l4);
    put16(f, at.l4 + off, fold(ps));
}

/// CRC32c (Castagnoli), as SCTP's checksum.
fn crc32c(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { (c >> 1) ^ 0x82f6_3b78 } else { c >> 1 };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut crc = !0u32;
    for &b in data {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::{example_tcp4 as tcp4, leave_partial as make_partial};

    #[test]
    fn a_partial_checksum_is_completed_and_a_valid_or_corrupt_one_kept() {
        for vlan in [false, true] {
            let good = tcp4(100, vlan);
            assert_eq!(checksum_ok(&good), Some(true));
            let mut f = good.clone();
            make_partial(&mut f);
            assert_eq!(checksum_ok(&f), Some(false));
            assert!(complete_if_partial(&mut f));
            assert_eq!(f, good);
            // Complete already: untouched.
            assert!(!complete_if_partial(&mut f));
            // Corrupt on the wire: left corrupt.
            let mut bad = good.clone();
            let n = bad.len();
            bad[n - 1] ^= 0x40;
            assert!(!complete_if_partial(&mut bad));
            assert_eq!(checksum_ok(&bad), Some(false));
        }
    }

    #[test]
    fn complete_at_follows_the_kernels_offsets() {
        let good = tcp4(33, true);
        let mut f = good.clone();
        make_partial(&mut f);
        let l4 = layout(&f).unwrap().l4;
        complete_at(&mut f, l4, 16).unwrap();
        assert_eq!(f, good);
        assert_eq!(complete_at(&mut f, 80, 16), Err(Fault::ChecksumOutside));
        assert_eq!(complete_at(&mut f, usize::MAX, 16), Err(Fault::ChecksumOutside));
    }

    #[test]
    fn segments_carry_the_right_headers() {
        let mut f = tcp4(3000, false);
        // FIN|PSH|ACK|CWR on the super-frame.
        let at = layout(&f).unwrap();
        f[at.l4 + 13] = 0x80 | 0x10 | 0x08 | 0x01;
        make_partial(&mut f);
        let mut segs = Vec::new();
        let n = segment(&mut f, Gso { kind: GsoKind::TcpV4, size: 1448 }, |s| segs.push(s.to_vec())).unwrap();
        assert_eq!(n, 3);
        let lens: Vec<usize> = segs.iter().map(Vec::len).collect();
        assert_eq!(lens, [14 + 40 + 1448, 14 + 40 + 1448, 14 + 40 + 104]);
        for (k, s) in segs.iter().enumerate() {
            assert_eq!(checksum_ok(s), Some(true));
            assert_eq!(be16(s, 14 + 4), 0x1234 + k as u16);
            assert_eq!(fold(sum(&s[14..34], 0)), 0xffff, "IPv4 header checksum");
            let seq = u32::from_be_bytes(s[38..42].try_into().unwrap());
            assert_eq!(seq, 0x1000 + 1448 * k as u32);
            let flags = s[34 + 13];
            assert_eq!(flags & 0x80 != 0, k == 0, "CWR on the first only");
            assert_eq!(flags & 0x09 != 0, k == 2, "FIN and PSH on the last only");
        }
    }

    #[test]
    fn frames_that_cannot_be_cut_are_refused_whole() {
        let mut f = tcp4(3000, false);
        let mut called = false;
        let tcp6 = Gso { kind: GsoKind::TcpV6, size: 1000 };
        assert_eq!(segment(&mut f, tcp6, |_| called = true), Err(Fault::KindMismatch));
        let zero = Gso { kind: GsoKind::TcpV4, size: 0 };
        assert_eq!(segment(&mut f, zero, |_| called = true), Err(Fault::ZeroSegmentSize));
        // The IP header says the frame is longer than it is.
        put16(&mut f, 16, 4000);
        let tcp4 = Gso { kind: GsoKind::TcpV4, size: 1000 };
        assert_eq!(segment(&mut f, tcp4, |_| called = true), Err(Fault::NotSegmentable));
        // ... or shorter.
        put16(&mut f, 16, 2000);
        assert_eq!(segment(&mut f, tcp4, |_| called = true), Err(Fault::LengthMismatch));
        assert!(!called);
        assert_eq!(vnet_request(&[0, 0x42, 0, 0, 0, 0, 0, 0, 0, 0]), Err(Fault::UnknownGso(0x42)));
        assert_eq!(vnet_request(&[0, 3, 0, 0, 0, 0, 0, 0, 0, 0]), Err(Fault::UdpFragmentation));
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// The kernel's own software GSO and checksum completion on the same super-frames,
    /// captured by the live test `segmentation_matches_the_kernels` (which checks against the
    /// running kernel too): TCPv4, TCPv6, UDP over both, VLAN-tagged, a last segment shorter
    /// than the segment size, CWR/FIN/PSH, and partial checksums alone.
    #[test]
    fn segments_and_checksums_are_the_kernels() {
        let text = include_str!("../tests/data/kernel-gso.txt");
        let mut cases = 0;
        for case in text.split("\ncase ").skip(1) {
            let mut lines = case.lines();
            let name = lines.next().unwrap();
            let vnet: [u8; VNET_HDR_LEN] =
                unhex(lines.next().unwrap().strip_prefix("vnet ").unwrap()).try_into().unwrap();
            let mut frame = unhex(lines.next().unwrap().strip_prefix("in ").unwrap());
            let kernel: Vec<Vec<u8>> = lines.filter_map(|l| l.strip_prefix("out ")).map(unhex).collect();
            let mut ours = Vec::new();
            match vnet_request(&vnet).unwrap() {
                VnetRequest::Segment(gso) => {
                    segment(&mut frame.clone(), gso, |s| ours.push(s.to_vec())).unwrap();
                }
                VnetRequest::Checksum { start, offset } => {
                    let mut f = frame.clone();
                    complete_at(&mut f, start.into(), offset.into()).unwrap();
                    ours.push(f);
                    // Without the header's word, the pseudo-header rule completes it the same.
                    assert!(complete_if_partial(&mut frame), "{name}");
                    assert_eq!(frame, kernel[0], "{name}: completed without the header");
                }
                VnetRequest::None => unreachable!(),
            }
            assert_eq!(ours, kernel, "{name}");
            for k in &kernel {
                assert_eq!(checksum_ok(k), Some(true), "{name}");
            }
            cases += 1;
        }
        assert_eq!(cases, 9);
    }

    #[test]
    fn the_wide_sum_is_the_plain_one() {
        let plain = |d: &[u8]| -> u16 {
            let mut a: u64 =
                d.chunks(2).map(|c| u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))).sum();
            while a > 0xffff {
                a = (a & 0xffff) + (a >> 16);
            }
            a as u16
        };
        let data: Vec<u8> = (0..3001u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in [0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1499, 1500, 3001] {
            assert_eq!(fold(sum(&data[..len], 0)), plain(&data[..len]), "{len} bytes");
        }
        let ones = vec![0xffu8; 4096];
        assert_eq!(fold(sum(&ones, 0)), 0xffff);
    }

    #[test]
    fn crc32c_matches_rfc_3720s_vector() {
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
    }
}
