//! Sending and receiving the probe's datagrams.

use crate::analysis::Sample;
use crate::packet::{decode, encode, HEADER};
use crate::pattern::Schedule;
use pathem_io::udp::{now, TimestampedUdp};
use pathem_model::Nanos;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Finds the probe header in a datagram the kernel looped back with its transmit timestamp:
/// after the IPv4 and UDP headers (28 bytes), the IPv6 ones (48), or at the start.
fn looped_seq(bytes: &[u8]) -> Option<u64> {
    [28usize, 48, 0]
        .into_iter()
        .filter_map(|at| bytes.get(at..).and_then(decode))
        .find(|h| !h.end)
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
            if let Some(seq) = looped_seq(bytes) {
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
        encode(&mut buf, seq, now(), false);
        // A full socket buffer is the path's business (and shows as loss), not the sender's.
        let _ = sock.send_to(&buf, to);
        waiting += 1;
        if progress && now() - last_report > Nanos::from_secs(2) {
            last_report = now();
            eprintln!("pathem probe: sent {seq} of {count}");
        }
    }
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(10));
        while stamped.is_some() && waiting > 0 {
            collect_one(&mut tx_stamps, &mut waiting);
        }
        encode(&mut buf, count, now(), true);
        let _ = sock.send_to(&buf, to);
        waiting += 1;
    }
    Ok(tx_stamps)
}

/// Time to read one transmit timestamp; the sender reads one only when more is left before
/// its next datagram.
const COLLECT_TIME: Nanos = Nanos::from_micros(4);

/// How long the receiver sleeps between reads of its socket. It reads in batches rather
/// than being woken for every datagram: the kernel stamps each datagram as it arrives, so
/// reading later loses nothing, and on a small machine the CPU time goes to the path instead.
const READ_EVERY: Duration = Duration::from_millis(1);

/// Receives until an end marker arrives (then waits `linger` for stragglers) or until nothing
/// has arrived for `idle`. Returns the samples and the count the sender announced.
pub fn receive(
    sock: &TimestampedUdp,
    linger: Duration,
    idle: Duration,
    progress: bool,
) -> std::io::Result<(Vec<Sample>, Option<u64>)> {
    let mut last_report = Instant::now();
    let mut last_arrival = Instant::now();
    let mut buf = vec![0u8; 65_536];
    let mut samples = Vec::new();
    let mut total = None;
    let mut deadline: Option<Instant> = None;
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
                deadline.get_or_insert_with(|| Instant::now() + linger);
            } else {
                samples.push(Sample { seq: h.seq, sent: h.sent, received: r.at, len: r.len });
            }
        }
        if progress && last_report.elapsed() > Duration::from_secs(2) {
            last_report = Instant::now();
            eprintln!("pathem probe: received {} datagrams", samples.len());
        }
        let done = match deadline {
            Some(d) => Instant::now() >= d,
            None => last_arrival.elapsed() >= idle,
        };
        if done {
            break;
        }
        std::thread::sleep(READ_EVERY);
    }
    Ok((samples, total))
}
