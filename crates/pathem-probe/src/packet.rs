//! The probe's datagram: a magic number, flags, the run, a sequence number and the send time —
//! 20 bytes, so a minimum-size 64-byte Ethernet frame (42 bytes of headers) carries it.
//!
//! | bytes | field |
//! | --- | --- |
//! | 0–1 | magic, `0x7074` ("pt") |
//! | 2–3 | flags: [`FLAG_END`], [`FLAG_IPV4`] or [`FLAG_IPV6`], [`FLAG_RUN`] |
//! | 4–11 | with [`FLAG_RUN`]: the run (16 bits), then the sequence number (48 bits); without it (a sender from before runs), the sequence number (64 bits) |
//! | 12–19 | the send time, ns on `CLOCK_MONOTONIC` |
//!
//! All big-endian. An end marker's sequence number is the count its run sent.

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
/// Bytes 4–5 name the sender's run: a receiver tells its datagrams from another sender's, or
/// from a run before, that reach the same port.
pub const FLAG_RUN: u16 = 8;
/// Sequence numbers a run can carry beside its run number: 2^48, past [`crate::session::MAX_COUNT`].
pub const SEQ_LIMIT: u64 = 1 << 48;

/// A sender's run: drawn at random when it starts, so two runs share one with odds of 1 in 65 536.
pub type Run = u16;

/// A decoded probe header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The sender's run; `None` from a sender from before runs.
    pub run: Option<Run>,
    /// Below [`SEQ_LIMIT`] with a run.
    pub seq: u64,
    pub sent: Nanos,
    pub end: bool,
    /// Sent over IPv6 (`Some(true)`) or IPv4; `None` where the sender did not say.
    pub ipv6: Option<bool>,
}

/// A fresh run number: random, different in each process and each call.
pub fn new_run() -> Run {
    use std::hash::{BuildHasher, RandomState};
    let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    RandomState::new().hash_one((at, std::process::id())) as Run
}

impl Header {
    /// Writes the header at the start of `buf`. `None` if `buf` is shorter than [`HEADER`]
    /// or a run's sequence number reaches [`SEQ_LIMIT`] (nothing written then).
    pub fn encode(&self, buf: &mut [u8]) -> Option<()> {
        let buf = buf.get_mut(..HEADER)?;
        let family = match self.ipv6 {
            Some(true) => FLAG_IPV6,
            Some(false) => FLAG_IPV4,
            None => 0,
        };
        let (run, word) = match self.run {
            Some(r) if self.seq < SEQ_LIMIT => (FLAG_RUN, u64::from(r) << 48 | self.seq),
            Some(_) => return None,
            None => (0, self.seq),
        };
        let flags = if self.end { FLAG_END } else { 0 } | family | run;
        buf[0..2].copy_from_slice(&MAGIC.to_be_bytes());
        buf[2..4].copy_from_slice(&flags.to_be_bytes());
        buf[4..12].copy_from_slice(&word.to_be_bytes());
        buf[12..20].copy_from_slice(&self.sent.as_nanos().to_be_bytes());
        Some(())
    }
}

/// Reads a header; `None` for datagrams that are not the probe's.
pub fn decode(buf: &[u8]) -> Option<Header> {
    if buf.len() < HEADER || buf[0..2] != MAGIC.to_be_bytes() {
        return None;
    }
    let flags = u16::from_be_bytes(buf[2..4].try_into().ok()?);
    let word = u64::from_be_bytes(buf[4..12].try_into().ok()?);
    let (run, seq) = match flags & FLAG_RUN {
        0 => (None, word),
        _ => (Some((word >> 48) as Run), word & (SEQ_LIMIT - 1)),
    };
    Some(Header {
        run,
        seq,
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
    use super::{decode, Header, SEQ_LIMIT};
    use pathem_model::Nanos;

    #[test]
    fn round_trip_and_foreign_data() {
        let mut b = [0u8; 64];
        let header = Header { run: Some(0xbeef), seq: 42, sent: Nanos(7), end: false, ipv6: Some(false) };
        header.encode(&mut b).unwrap();
        assert_eq!(decode(&b), Some(header));
        let end = Header { end: true, ipv6: Some(true), seq: SEQ_LIMIT - 1, ..header };
        end.encode(&mut b).unwrap();
        assert_eq!(decode(&b), Some(end));
        // A sender from before the family flags: the receiver's own.
        b[3] &= !(super::FLAG_IPV4 | super::FLAG_IPV6) as u8;
        assert_eq!(decode(&b).map(|h| h.ipv6), Some(None));
        assert_eq!(decode(&[0u8; 64]), None);
        assert_eq!(decode(&b[..10]), None);
    }

    #[test]
    fn a_sender_from_before_runs_has_none_and_its_whole_number() {
        let old = Header { run: None, seq: u64::MAX - 3, sent: Nanos(9), end: false, ipv6: None };
        let mut b = [0u8; 20];
        old.encode(&mut b).unwrap();
        assert_eq!(b[3] & super::FLAG_RUN as u8, 0);
        assert_eq!(decode(&b), Some(old));
    }

    #[test]
    fn what_does_not_fit_is_not_written() {
        let mut b = [0u8; 20];
        let h = Header { run: Some(1), seq: SEQ_LIMIT, sent: Nanos(1), end: false, ipv6: Some(false) };
        assert_eq!(h.encode(&mut b), None);
        assert_eq!(b, [0u8; 20]);
        let h = Header { seq: 1, ..h };
        assert_eq!(h.encode(&mut b[..19]), None);
    }

    #[test]
    fn runs_differ_from_call_to_call() {
        let runs: std::collections::HashSet<_> = (0..64).map(|_| super::new_run()).collect();
        // 64 draws of 16 bits: all alike only if the draw is broken.
        assert!(runs.len() > 32, "{runs:?}");
    }
}
