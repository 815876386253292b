//! The probe's datagram: a magic number, flags, a sequence number and the send time — 20
//! bytes, so a minimum-size 64-byte Ethernet frame (42 bytes of headers) carries it.

use pathem_model::Nanos;

pub const MAGIC: u16 = 0x7074; // "pt"
/// Bytes of header at the start of every probe datagram.
pub const HEADER: usize = 20;
/// Set on the datagrams that close a run; their `seq` field holds the number sent.
pub const FLAG_END: u16 = 1;
/// The sender's address family, one of these two: the frame's headers, which a receiver on a
/// dual-stack socket (`[::]`, IPv4 datagrams arriving v4-mapped) cannot tell from its own.
/// Neither: a sender from before them.
pub const FLAG_IPV4: u16 = 2;
pub const FLAG_IPV6: u16 = 4;

/// A decoded probe header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub seq: u64,
    pub sent: Nanos,
    pub end: bool,
    /// Sent over IPv6 (`Some(true)`) or IPv4; `None` where the sender did not say.
    pub ipv6: Option<bool>,
}

/// Writes a header at the start of `buf` (which must hold at least [`HEADER`] bytes) of a
/// datagram sent over IPv6 (`ipv6`) or IPv4.
pub fn encode(buf: &mut [u8], seq: u64, sent: Nanos, end: bool, ipv6: bool) {
    let flags = if end { FLAG_END } else { 0 } | if ipv6 { FLAG_IPV6 } else { FLAG_IPV4 };
    buf[0..2].copy_from_slice(&MAGIC.to_be_bytes());
    buf[2..4].copy_from_slice(&flags.to_be_bytes());
    buf[4..12].copy_from_slice(&seq.to_be_bytes());
    buf[12..20].copy_from_slice(&sent.as_nanos().to_be_bytes());
}

/// Reads a header; `None` for datagrams that are not the probe's.
pub fn decode(buf: &[u8]) -> Option<Header> {
    if buf.len() < HEADER || buf[0..2] != MAGIC.to_be_bytes() {
        return None;
    }
    let flags = u16::from_be_bytes(buf[2..4].try_into().ok()?);
    Some(Header {
        seq: u64::from_be_bytes(buf[4..12].try_into().ok()?),
        sent: Nanos(u64::from_be_bytes(buf[12..20].try_into().ok()?)),
        end: flags & FLAG_END != 0,
        ipv6: match (flags & FLAG_IPV4 != 0, flags & FLAG_IPV6 != 0) {
            (true, false) => Some(false),
            (false, true) => Some(true),
            // Neither (an older sender) or both (not the probe's making): the receiver's own.
            _ => None,
        },
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip_and_foreign_data() {
        let mut b = [0u8; 64];
        super::encode(&mut b, 42, pathem_model::Nanos(7), false, false);
        let header = super::Header { seq: 42, sent: pathem_model::Nanos(7), end: false, ipv6: Some(false) };
        assert_eq!(super::decode(&b), Some(header));
        super::encode(&mut b, 42, pathem_model::Nanos(7), true, true);
        assert_eq!(super::decode(&b), Some(super::Header { end: true, ipv6: Some(true), ..header }));
        // A sender from before the family flags: the receiver's own family.
        b[3] &= !(super::FLAG_IPV4 | super::FLAG_IPV6) as u8;
        assert_eq!(super::decode(&b).map(|h| h.ipv6), Some(None));
        assert_eq!(super::decode(&[0u8; 64]), None);
        assert_eq!(super::decode(&b[..10]), None);
    }
}
