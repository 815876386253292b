//! The probe's datagram: a magic number, flags, the run, a sequence number and the send time —
//! 20 bytes, so a minimum-size 64-byte Ethernet frame (42 bytes of headers) carries it.
//!
//! | bytes | field |
//! | --- | --- |
//! | 0–1 | magic, [`MAGIC`] |
//! | 2–3 | flags: [`FLAG_END`], [`FLAG_IPV4`] or [`FLAG_IPV6`] |
//! | 4–5 | the sender's run |
//! | 6–11 | the sequence number (48 bits); an end marker's, the count its run sent |
//! | 12–19 | the send time, ns on `CLOCK_MONOTONIC` |
//!
//! All big-endian. A sender from before runs wrote [`MAGIC_BEFORE_RUNS`] and a 64-bit
//! sequence number in bytes 4–11: read as a run of its own. The magic changed with the
//! layout so that a receiver from before runs ignores these datagrams (and says none came)
//! rather than read a run as the top of a sequence number.

use pathem_model::Nanos;

/// "pu".
pub const MAGIC: u16 = 0x7075;
/// "pt": a sender from before runs.
pub const MAGIC_BEFORE_RUNS: u16 = 0x7074;
/// Bytes of header at the start of every probe datagram.
pub const HEADER: usize = 20;
/// Set on the datagrams that close a run; their `seq` field holds the number sent.
pub const FLAG_END: u16 = 1;
/// The sender's address family, one of these two: the frame's headers, which a receiver on a
/// dual-stack socket (`[::]`, IPv4 datagrams arriving v4-mapped) cannot tell from its own.
/// Neither: a sender from before them.
pub const FLAG_IPV4: u16 = 2;
pub const FLAG_IPV6: u16 = 4;
/// Sequence numbers a run can carry: 2^48, past [`crate::session::MAX_COUNT`].
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

/// `--run`: a run as a sender prints it (`{:04x}`), 1 to 4 hexadecimal digits.
pub fn parse_run(s: &str) -> Result<Run, String> {
    let ok = (1..=4).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit());
    match ok.then(|| Run::from_str_radix(s, 16)) {
        Some(Ok(r)) => Ok(r),
        _ => Err("accepted: a sender's run as it prints it, 1 to 4 hexadecimal digits (a38d)".into()),
    }
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
        let (magic, word) = match self.run {
            Some(r) if self.seq < SEQ_LIMIT => (MAGIC, u64::from(r) << 48 | self.seq),
            Some(_) => return None,
            None => (MAGIC_BEFORE_RUNS, self.seq),
        };
        let flags = if self.end { FLAG_END } else { 0 } | family;
        buf[0..2].copy_from_slice(&magic.to_be_bytes());
        buf[2..4].copy_from_slice(&flags.to_be_bytes());
        buf[4..12].copy_from_slice(&word.to_be_bytes());
        buf[12..20].copy_from_slice(&self.sent.as_nanos().to_be_bytes());
        Some(())
    }
}

/// Reads a header; `None` for datagrams that are not the probe's.
pub fn decode(buf: &[u8]) -> Option<Header> {
    let magic = u16::from_be_bytes(buf.get(0..2)?.try_into().ok()?);
    if buf.len() < HEADER || (magic != MAGIC && magic != MAGIC_BEFORE_RUNS) {
        return None;
    }
    let flags = u16::from_be_bytes(buf[2..4].try_into().ok()?);
    let word = u64::from_be_bytes(buf[4..12].try_into().ok()?);
    let (run, seq) = match magic {
        MAGIC => (Some((word >> 48) as Run), word & (SEQ_LIMIT - 1)),
        _ => (None, word),
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
        assert_eq!(b[0..2], super::MAGIC_BEFORE_RUNS.to_be_bytes());
        assert_eq!(decode(&b), Some(old));
        // What a receiver from before runs checks first: the datagrams of a run are not its.
        let new = Header { run: Some(9), seq: 5, ..old };
        new.encode(&mut b).unwrap();
        assert_ne!(b[0..2], super::MAGIC_BEFORE_RUNS.to_be_bytes());
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
    fn a_run_is_read_as_a_sender_prints_it() {
        assert_eq!(super::parse_run("a38d"), Ok(0xa38d));
        assert_eq!(super::parse_run("00E1"), Ok(0xe1));
        assert_eq!(super::parse_run("7"), Ok(7));
        for bad in ["", "12345", "xyz", "-1", "+1", " a1"] {
            assert!(super::parse_run(bad).unwrap_err().contains("1 to 4 hexadecimal digits"), "{bad:?}");
        }
    }

    #[test]
    fn runs_differ_from_call_to_call() {
        let runs: std::collections::HashSet<_> = (0..64).map(|_| super::new_run()).collect();
        // 64 draws of 16 bits: all alike only if the draw is broken.
        assert!(runs.len() > 32, "{runs:?}");
    }
}
