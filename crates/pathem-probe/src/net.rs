//! Sending and receiving the probe's datagrams.

use crate::analysis::Sample;
use crate::packet::{decode, encode, HEADER};
use crate::pattern::Schedule;
use pathem_io::udp::{now, TimestampedUdp};
use pathem_model::Nanos;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

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
/// datagram (indexed by sequence number) where the kernel gives them.
pub fn send(
    sock: &UdpSocket,
    to: SocketAddr,
    payload: usize,
    count: u64,
    mut schedule: Schedule,
    progress: bool,
) -> std::io::Result<Vec<Option<Nanos>>> {
    let mut tx_stamps: Vec<Option<Nanos>> = vec![None; count as usize];
    let stamped = pathem_io::udp::enable_tx_timestamps(sock);
    let collect = |stamps: &mut Vec<Option<Nanos>>| {
        if stamped {
            pathem_io::udp::drain_tx_timestamps(sock, |bytes, at| {
                if let Some(seq) = looped_seq(bytes) {
                    if let Some(slot) = stamps.get_mut(seq as usize) {
                        *slot = Some(at);
                    }
                }
            });
        }
    };
    let mut buf = vec![0u8; payload.max(HEADER)];
    // Sleep rather than spin wherever the gap allows: on a small machine the sender shares
    // the CPUs with the path it measures. Minimum timer slack makes short sleeps precise.
    let _ = nix_timerslack();
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
            } else {
                std::hint::spin_loop();
            }
        }
        encode(&mut buf, seq, now(), false);
        // A full socket buffer is the path's business (and shows as loss), not the sender's.
        let _ = sock.send_to(&buf, to);
        if seq % 32 == 31 {
            collect(&mut tx_stamps);
        }
        if progress && now() - last_report > Nanos::from_secs(2) {
            last_report = now();
            eprintln!("pathem probe: sent {seq} of {count}");
        }
    }
    collect(&mut tx_stamps);
    for _ in 0..3 {
        encode(&mut buf, count, now(), true);
        let _ = sock.send_to(&buf, to);
        std::thread::sleep(Duration::from_millis(10));
        collect(&mut tx_stamps);
    }
    Ok(tx_stamps)
}

/// Receives until an end marker arrives (then waits `linger` for stragglers) or until nothing
/// has arrived for `idle`. Returns the samples and the count the sender announced.
pub fn receive(
    sock: &TimestampedUdp,
    linger: Duration,
    idle: Duration,
    progress: bool,
) -> std::io::Result<(Vec<Sample>, Option<u64>)> {
    let mut last_report = std::time::Instant::now();
    let mut buf = vec![0u8; 65_536];
    let mut samples = Vec::new();
    let mut total = None;
    let mut deadline: Option<std::time::Instant> = None;
    loop {
        let wait = match deadline {
            Some(d) => d.saturating_duration_since(std::time::Instant::now()),
            None => idle,
        };
        if wait.is_zero() {
            break;
        }
        sock.socket().set_read_timeout(Some(wait))?;
        match sock.recv(&mut buf) {
            Ok(r) => {
                let Some(h) = decode(&buf[..r.len]) else { continue };
                if h.end {
                    total = Some(h.seq);
                    deadline.get_or_insert_with(|| std::time::Instant::now() + linger);
                } else {
                    samples.push(Sample { seq: h.seq, sent: h.sent, received: r.at, len: r.len });
                    if progress && last_report.elapsed() > Duration::from_secs(2) {
                        last_report = std::time::Instant::now();
                        eprintln!("pathem probe: received {} datagrams", samples.len());
                    }
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                if deadline.is_none() {
                    break;
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok((samples, total))
}

/// Sets this thread's timer slack to 1 ns (PR_SET_TIMERSLACK).
fn nix_timerslack() -> i32 {
    // SAFETY: prctl(PR_SET_TIMERSLACK, 1) only changes this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) }
}
