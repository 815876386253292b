//! Sending and receiving the probe's datagrams.

use crate::analysis::Sample;
use crate::packet::{decode, encode, HEADER};
use crate::pattern::Schedule;
use pathem_io::udp::{now, TimestampedUdp};
use pathem_model::Nanos;
use std::io::ErrorKind;
use std::io::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Finds the probe header in a datagram the kernel looped back with its transmit timestamp,
/// sent over IPv6 (`ipv6`) or IPv4: the copy starts at the frame's link header, so after
/// Ethernet, IP and UDP (42 bytes for IPv4, 62 for IPv6); on a device without a link header
/// after IP and UDP (28, 48); or at the start. Only the family's own offsets are tried, and a
/// header must say that family: an IPv6 address can hold the probe's magic at offset 42.
fn looped_seq(bytes: &[u8], ipv6: bool) -> Option<u64> {
    let offsets = if ipv6 {
        [IPV6_HEADERS, IPV6_HEADERS - ETHERNET, 0]
    } else {
        [IPV4_HEADERS, IPV4_HEADERS - ETHERNET, 0]
    };
    offsets
        .into_iter()
        .filter_map(|at| bytes.get(at..).and_then(decode))
        .find(|h| !h.end && h.ipv6 == Some(ipv6))
        .map(|h| h.seq)
}

/// Sends `count` datagrams of `payload` bytes (at least [`HEADER`]) to `to` on `schedule`,
/// then three end markers carrying the count. Returns the kernel's transmit timestamp of each
/// datagram (indexed by sequence number) where the kernel gives them. Memory grows with what
/// was sent, not with `count`.
pub fn send(
    sock: &UdpSocket,
    to: SocketAddr,
    payload: usize,
    count: u64,
    mut schedule: Schedule,
    progress: bool,
) -> std::io::Result<Vec<Option<Nanos>>> {
    let mut tx_stamps: Vec<Option<Nanos>> = Vec::new();
    let stamped = pathem_io::udp::TxStamps::enable(sock);
    // Transmit timestamps waiting on the error queue: read one at a time in the time left
    // before the next datagram, so that reading them never delays a send.
    let mut waiting = 0u64;
    let collect_one = |stamps: &mut Vec<Option<Nanos>>, waiting: &mut u64| {
        let Some(tx) = &stamped else { return };
        let got = tx.read_one(sock, |bytes, at| {
            if let Some(seq) = looped_seq(bytes, to.is_ipv6()) {
                if let Some(slot) = stamps.get_mut(seq as usize) {
                    *slot = Some(at);
                }
            }
        });
        *waiting = if got { waiting.saturating_sub(1) } else { 0 };
    };
    let mut buf = vec![0u8; payload.max(HEADER)];
    // Sleep rather than spin wherever the gap allows: on a small machine the sender shares
    // the CPUs with the path it measures. Minimum timer slack makes short sleeps precise.
    pathem_io::set_min_timer_slack();
    let start = now() + Nanos::from_millis(1);
    let mut last_report = start;
    for seq in 0..count {
        let at = start + schedule.next_send();
        loop {
            let t = now();
            if t >= at {
                break;
            }
            let left = at - t;
            if left > Nanos::from_micros(60) {
                std::thread::sleep(Duration::from_nanos((left - Nanos::from_micros(50)).as_nanos()));
            } else if stamped.is_some() && waiting > 0 && left > COLLECT_TIME {
                collect_one(&mut tx_stamps, &mut waiting);
            } else {
                std::hint::spin_loop();
            }
        }
        tx_stamps.push(None);
        encode(&mut buf, seq, now(), false, to.is_ipv6());
        sent(send_to(sock, &buf, to), to)?;
        waiting += 1;
        if progress && now() - last_report > Nanos::from_secs(2) {
            last_report = now();
            let _ = writeln!(std::io::stderr(), "pathem probe: sent {seq} of {count}");
        }
    }
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(10));
        while stamped.is_some() && waiting > 0 {
            collect_one(&mut tx_stamps, &mut waiting);
        }
        encode(&mut buf, count, now(), true, to.is_ipv6());
        sent(send_to(sock, &buf, to), to)?;
        waiting += 1;
    }
    Ok(tx_stamps)
}

/// One datagram sent, again if a signal interrupted the call (it did not leave then).
fn send_to(sock: &UdpSocket, buf: &[u8], to: SocketAddr) -> std::io::Result<usize> {
    loop {
        match sock.send_to(buf, to) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// A send's outcome: a full socket buffer is the path's business (and shows as loss), not the
/// sender's; any other refusal (no route, an address of the other family) ends the run
/// rather than count datagrams that never left as lost.
fn sent(r: std::io::Result<usize>, to: SocketAddr) -> std::io::Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(()),
        Err(e) => Err(std::io::Error::new(e.kind(), format!("cannot send to {to}: {e}"))),
    }
}

/// Bytes of an Ethernet header, and of Ethernet, IP and UDP headers around a datagram.
const ETHERNET: usize = 14;
pub const IPV4_HEADERS: usize = ETHERNET + 20 + 8;
pub const IPV6_HEADERS: usize = ETHERNET + 40 + 8;

/// Bytes of headers around a datagram to `addr` in its frame.
pub fn frame_headers(addr: SocketAddr) -> usize {
    if addr.is_ipv6() {
        IPV6_HEADERS
    } else {
        IPV4_HEADERS
    }
}

/// A socket to send from, of `to`'s family.
pub fn sender_for(to: SocketAddr) -> std::io::Result<UdpSocket> {
    let any: SocketAddr = match to {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    UdpSocket::bind(any)
}

/// Time to read one transmit timestamp; the sender reads one only when more is left before
/// its next datagram.
const COLLECT_TIME: Nanos = Nanos::from_micros(4);

/// How long the receiver sleeps between reads of its socket. It reads in batches rather
/// than being woken for every datagram: the kernel stamps each datagram as it arrives, so
/// reading later loses nothing, and on a small machine the CPU time goes to the path instead.
const READ_EVERY: Duration = Duration::from_millis(1);

/// Receives until an end marker arrives (then waits for stragglers: `linger`, or the spread of
/// the delays seen so far if longer, up to `idle`) or until nothing has arrived for `idle`
/// while `sending` (the sender of a pair, if given) is not still at work. Returns the samples
/// and the count the sender announced.
pub fn receive(
    sock: &TimestampedUdp,
    linger: Duration,
    idle: Duration,
    sending: Option<&std::sync::atomic::AtomicBool>,
    progress: bool,
) -> std::io::Result<Arrivals> {
    use std::sync::atomic::Ordering;
    let mut last_report = Instant::now();
    let mut last_arrival = Instant::now();
    // The spread of one-way delays (the largest less the smallest, which no clock offset
    // between the ends changes): a datagram sent just before the end marker may come that
    // much after it.
    let (mut least, mut most) = (i64::MAX, i64::MIN);
    let mut buf = vec![0u8; 65_536];
    let headers = frame_headers(sock.local_addr()?);
    let mut samples = Vec::new();
    let mut total = None;
    let mut ended: Option<Instant> = None;
    loop {
        loop {
            let r = match sock.recv_nowait(&mut buf) {
                Ok(r) => r,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => break,
                Err(e) => return Err(e),
            };
            last_arrival = Instant::now();
            let Some(h) = decode(&buf[..r.len]) else { continue };
            if h.end {
                total = Some(h.seq);
                ended.get_or_insert_with(Instant::now);
            } else {
                let d = r.at.as_nanos().wrapping_sub(h.sent.as_nanos()) as i64;
                (least, most) = (least.min(d), most.max(d));
                // The sender's family where it says (a dual-stack socket takes both).
                let headers = match h.ipv6 {
                    Some(true) => IPV6_HEADERS,
                    Some(false) => IPV4_HEADERS,
                    None => headers,
                };
                samples.push(Sample { seq: h.seq, sent: h.sent, received: r.at, len: r.len + headers });
            }
        }
        if progress && last_report.elapsed() > Duration::from_secs(2) {
            last_report = Instant::now();
            let _ = writeln!(std::io::stderr(), "pathem probe: received {} datagrams", samples.len());
        }
        let done = match ended {
            Some(at) => {
                let spread = Duration::from_nanos(most.saturating_sub(least).max(0) as u64);
                at.elapsed() >= linger.max(spread).min(idle.max(linger))
            }
            None => {
                let still = sending.is_some_and(|s| s.load(Ordering::Acquire));
                !still && last_arrival.elapsed() >= idle
            }
        };
        if done {
            break;
        }
        std::thread::sleep(READ_EVERY);
    }
    Ok(Arrivals { samples, total, socket_drops: sock.drops(), kernel_send_stamps: None })
}

/// What a receiver took in.
#[derive(Clone, Debug, Default)]
pub struct Arrivals {
    /// This run's datagrams (and any stray), in arrival order.
    pub samples: Vec<Sample>,
    /// The count the sender's end marker announced, if one arrived.
    pub total: Option<u64>,
    /// Datagrams this host's socket dropped, its buffer full, where the kernel says: they are
    /// among the lost, but the path did not lose them.
    pub socket_drops: Option<u64>,
    /// With both ends on this host (`pair`): the samples whose send time is the kernel's
    /// transmit stamp; the others keep the sender's own, read before its send call.
    pub kernel_send_stamps: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copy the kernel loops back on the error queue, as a veth or `lo` gives it: the
    /// Ethernet, IP and UDP headers, then the datagram.
    #[test]
    fn a_looped_copy_is_read_behind_its_link_header() {
        for (headers, ipv6) in [(42, false), (62, true), (28, false), (48, true), (0, false), (0, true)] {
            let mut copy = vec![0u8; headers + 64];
            encode(&mut copy[headers..], 7, Nanos(1), false, ipv6);
            assert_eq!(looped_seq(&copy, ipv6), Some(7), "{headers} bytes of headers");
        }
        // An IPv6 destination holding the magic where an IPv4 copy's header would start
        // (2001:db8:7074::2 puts 0x7074 at byte 42 of the frame): the header at 62 is read.
        let mut copy = vec![0u8; 62 + 64];
        encode(&mut copy[42..], 2, Nanos(1), false, false);
        encode(&mut copy[62..], 7, Nanos(1), false, true);
        assert_eq!(looped_seq(&copy, true), Some(7));
    }
}
