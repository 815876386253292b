//! Sending and receiving the probe's datagrams.

use crate::analysis::Sample;
use crate::packet::{decode, Header, Run, HEADER};
use crate::pattern::Schedule;
use pathem_io::udp::{now, TimestampedUdp};
use pathem_model::Nanos;
use std::io::ErrorKind;
use std::io::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Finds the probe header in a datagram of `run` the kernel looped back with its transmit
/// timestamp, sent over IPv6 (`ipv6`) or IPv4: the copy starts at the frame's link header, so after
/// Ethernet, IP and UDP (42 bytes for IPv4, 62 for IPv6); on a device without a link header
/// after IP and UDP (28, 48); or at the start. Only the family's own offsets are tried, and a
/// header must say that family: an IPv6 address can hold the probe's magic at offset 42.
fn looped_seq(bytes: &[u8], run: Run, ipv6: bool) -> Option<u64> {
    let offsets = if ipv6 {
        [IPV6_HEADERS, IPV6_HEADERS - ETHERNET, 0]
    } else {
        [IPV4_HEADERS, IPV4_HEADERS - ETHERNET, 0]
    };
    offsets
        .into_iter()
        .filter_map(|at| bytes.get(at..).and_then(decode))
        .find(|h| !h.end && h.ipv6 == Some(ipv6) && h.run == Some(run))
        .map(|h| h.seq)
}

/// Sends `count` datagrams (below [`crate::packet::SEQ_LIMIT`]) of `payload` bytes (at least
/// [`HEADER`]) of `run` to `to` on `schedule`, then three end markers carrying the count. Returns the kernel's transmit timestamp of each
/// datagram (indexed by sequence number) where the kernel gives them. Memory grows with what
/// was sent, not with `count`.
pub fn send(
    sock: &UdpSocket,
    to: SocketAddr,
    run: Run,
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
            if let Some(seq) = looped_seq(bytes, run, to.is_ipv6()) {
                if let Some(slot) = stamps.get_mut(seq as usize) {
                    *slot = Some(at);
                }
            }
        });
        *waiting = if got { waiting.saturating_sub(1) } else { 0 };
    };
    let mut buf = vec![0u8; payload.max(HEADER)];
    let mut header =
        Header { run: Some(run), seq: 0, sent: Nanos::ZERO, end: false, ipv6: Some(to.is_ipv6()) };
    let write = |buf: &mut [u8], header: &Header| {
        header.encode(buf).ok_or_else(|| {
            let what =
                format!("datagram {} does not fit the probe's header (runs count below 2^48)", header.seq);
            std::io::Error::new(ErrorKind::InvalidInput, what)
        })
    };
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
        (header.seq, header.sent) = (seq, now());
        write(&mut buf, &header)?;
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
        (header.seq, header.sent, header.end) = (count, now(), true);
        write(&mut buf, &header)?;
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

/// Receives until the run measured has ended (its end marker, then a wait for stragglers:
/// `linger`, or the spread of its delays seen so far if longer, up to `idle`) or until nothing
/// that keeps it waiting (see [`Collector::take`]) has arrived for `idle` while `sending` (the
/// sender of a pair, if given) is not still at work. The run measured is `want`, or without
/// it the one [`Collector`] picks. Returns its samples, the count its sender announced, and
/// what else arrived.
pub fn receive(
    sock: &TimestampedUdp,
    want: Option<Run>,
    linger: Duration,
    idle: Duration,
    sending: Option<&std::sync::atomic::AtomicBool>,
    progress: bool,
) -> std::io::Result<Arrivals> {
    use std::sync::atomic::Ordering;
    let mut last_report = Instant::now();
    let mut last_arrival = Instant::now();
    let mut buf = vec![0u8; 65_536];
    let headers = frame_headers(sock.local_addr()?);
    let mut got = Collector::new(want, headers);
    let mut ended: Option<Instant> = None;
    loop {
        loop {
            let r = match sock.recv_nowait(&mut buf) {
                Ok(r) => r,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => break,
                Err(e) => return Err(e),
            };
            let Some(h) = decode(&buf[..r.len]) else { continue };
            if got.take(h, r.at, r.len) {
                last_arrival = Instant::now();
            }
        }
        if progress && last_report.elapsed() > Duration::from_secs(2) {
            last_report = Instant::now();
            let _ = writeln!(std::io::stderr(), "pathem probe: received {} datagrams", got.samples.len());
        }
        let done = match got.ended() {
            Some(spread) => {
                let at = *ended.get_or_insert_with(Instant::now);
                let spread = Duration::from_nanos(spread.as_nanos());
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
    Ok(Arrivals { socket_drops: sock.drops(), ..got.finish() })
}

/// A run a datagram numbered below this arrived of began while the receiver listened (its
/// first numbers may be lost on the path); one whose numbers all start above was under way
/// before the receiver started. Time cannot tell them apart: a stale sender's next datagram
/// may come well after the receiver's first read of an empty socket.
pub const BEGAN_BELOW: u64 = 64;

/// What a receiver knows of one run.
#[derive(Clone, Copy, Debug)]
struct RunState {
    /// Datagrams (not end markers).
    count: u64,
    /// The receiver saw it begin: a datagram numbered below [`BEGAN_BELOW`] arrived. Otherwise
    /// it was under way when the receiver started (a sender from before), and its end does not
    /// end the receiver.
    began: bool,
    /// The count its first end marker announced, and that marker's place among the runs' ends.
    end: Option<(u64, usize)>,
    /// Where its first datagram came among the runs: the earlier wins a tie.
    first: usize,
    /// Least and most one-way delay, ns (the receiver's clock less the sender's).
    least: i64,
    most: i64,
}

/// What a receiver keeps of the datagrams it reads: each sample under its run, and what it
/// knows of each run. Datagrams of several runs can reach one port (two senders, or a sender
/// still going from before the receiver started); [`Collector::finish`] keeps one run's and
/// counts the others' as foreign. Pure, so it is tested and fuzzed without a socket.
#[derive(Clone, Debug)]
pub struct Collector {
    want: Option<Run>,
    /// Bytes of headers around a datagram where its sender does not say its family.
    headers: usize,
    samples: Vec<(Option<Run>, Sample)>,
    runs: std::collections::HashMap<Option<Run>, RunState>,
    /// Runs whose end marker came.
    ends: usize,
    /// A run began under the receiver.
    any_began: bool,
}

impl Collector {
    /// Keeps run `want`'s datagrams (`None`: the run [`finish`](Collector::finish) picks);
    /// `headers` is the receiver's own family's.
    pub fn new(want: Option<Run>, headers: usize) -> Collector {
        Collector { want, headers, samples: Vec::new(), runs: Default::default(), ends: 0, any_began: false }
    }

    /// Takes a datagram of `len` bytes that arrived at `at`; true if it keeps a receiver
    /// waiting: of the run wanted, or with none wanted of a run not ended before it that began
    /// under the receiver (any, while none did).
    pub fn take(&mut self, h: Header, at: Nanos, len: usize) -> bool {
        let first = self.runs.len();
        let run = self.runs.entry(h.run).or_insert(RunState {
            count: 0,
            began: false,
            end: None,
            first,
            least: i64::MAX,
            most: i64::MIN,
        });
        let unended = run.end.is_none();
        if h.end {
            if unended {
                run.end = Some((h.seq, self.ends));
                self.ends += 1;
            }
        } else {
            let d = at.as_nanos().wrapping_sub(h.sent.as_nanos()) as i64;
            (run.least, run.most) = (run.least.min(d), run.most.max(d));
            run.count += 1;
            run.began |= h.seq < BEGAN_BELOW;
            self.any_began |= run.began;
            // The sender's family where it says (a dual-stack socket takes both).
            let headers = match h.ipv6 {
                Some(true) => IPV6_HEADERS,
                Some(false) => IPV4_HEADERS,
                None => self.headers,
            };
            let sample = Sample { seq: h.seq, sent: h.sent, received: at, len: len.saturating_add(headers) };
            self.samples.push((h.run, sample));
        }
        match self.want {
            Some(w) => h.run == Some(w),
            // Once a run began under the receiver, runs from before keep it waiting no more.
            None => unended && (run.began || !self.any_began),
        }
    }

    /// The first run to end among those `keep` takes, by its end marker's arrival.
    fn first_ended(&self, keep: impl Fn(&RunState) -> bool) -> Option<(Option<Run>, &RunState)> {
        let ended = self.runs.iter().filter(|(_, s)| s.end.is_some() && keep(s));
        ended.min_by_key(|(_, s)| s.end.map(|(_, at)| at)).map(|(r, s)| (*r, s))
    }

    /// Whether the run measured has ended: with a run wanted, its end marker came; otherwise
    /// one the receiver saw begin ended. If so, the spread of its one-way delays (the largest
    /// less the smallest, which no clock offset between the ends changes): a datagram sent
    /// just before the end marker may come that much after it.
    pub fn ended(&self) -> Option<Nanos> {
        let done = match self.want {
            Some(w) => self.runs.get(&Some(w)).filter(|s| s.end.is_some()),
            None => self.first_ended(|s| s.began).map(|(_, s)| s),
        };
        done.map(|s| Nanos(s.most.saturating_sub(s.least).max(0) as u64))
    }

    /// The run measured: the one wanted; or of the runs the receiver saw begin the first to
    /// end, or with none ended the one most datagrams came from; failing those (every run
    /// under way when the receiver started), the first to end of those any datagram came from,
    /// or the one most came from. Of runs tied, the earliest to arrive. `None` in the outer
    /// option: nothing came.
    fn measured(&self) -> Option<Option<Run>> {
        if let Some(w) = self.want {
            return Some(Some(w));
        }
        let most = |keep: fn(&RunState) -> bool| {
            let runs = self.runs.iter().filter(|(_, s)| keep(s));
            runs.max_by_key(|(_, s)| (s.count, std::cmp::Reverse(s.first))).map(|(r, _)| *r)
        };
        let begun = self.first_ended(|s| s.began).map(|(r, _)| r).or_else(|| most(|s| s.began));
        let stale = || self.first_ended(|s| s.count > 0).map(|(r, _)| r).or_else(|| most(|_| true));
        begun.or_else(stale)
    }

    /// The run measured, its samples in arrival order and the count its sender announced;
    /// every other datagram counted as foreign.
    pub fn finish(self) -> Arrivals {
        let run = self.measured();
        let state = run.and_then(|r| self.runs.get(&r));
        let total = state.and_then(|s| s.end).map(|(n, _)| n);
        let all = self.samples.len() as u64;
        let samples: Vec<Sample> =
            self.samples.into_iter().filter(|&(r, _)| Some(r) == run).map(|(_, s)| s).collect();
        Arrivals {
            foreign: all - samples.len() as u64,
            run: run.flatten(),
            samples,
            total,
            ..Arrivals::default()
        }
    }
}

/// What a receiver took in.
#[derive(Clone, Debug, Default)]
pub struct Arrivals {
    /// The run measured's datagrams (and any stray numbered past its count), in arrival order.
    pub samples: Vec<Sample>,
    /// The count the run's end marker announced, if one arrived.
    pub total: Option<u64>,
    /// The run measured; `None` for a sender from before runs.
    pub run: Option<Run>,
    /// Datagrams of other runs (another sender to the same port, or a run from before this
    /// one): in nothing else.
    pub foreign: u64,
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

    fn header(run: Option<Run>, seq: u64, ipv6: bool) -> Header {
        Header { run, seq, sent: Nanos(1), end: false, ipv6: Some(ipv6) }
    }

    /// The copy the kernel loops back on the error queue, as a veth or `lo` gives it: the
    /// Ethernet, IP and UDP headers, then the datagram.
    #[test]
    fn a_looped_copy_is_read_behind_its_link_header() {
        for (headers, ipv6) in [(42, false), (62, true), (28, false), (48, true), (0, false), (0, true)] {
            let mut copy = vec![0u8; headers + 64];
            header(Some(3), 7, ipv6).encode(&mut copy[headers..]).unwrap();
            assert_eq!(looped_seq(&copy, 3, ipv6), Some(7), "{headers} bytes of headers");
            assert_eq!(looped_seq(&copy, 4, ipv6), None, "another run's");
        }
        // An IPv6 destination holding the magic where an IPv4 copy's header would start
        // (2001:db8:7074::2 puts 0x7074 at byte 42 of the frame): the header at 62 is read.
        let mut copy = vec![0u8; 62 + 64];
        header(Some(3), 2, false).encode(&mut copy[42..]).unwrap();
        header(Some(3), 7, true).encode(&mut copy[62..]).unwrap();
        assert_eq!(looped_seq(&copy, 3, true), Some(7));
    }

    fn end(run: Option<Run>, count: u64) -> Header {
        Header { end: true, ..header(run, count, false) }
    }

    #[test]
    fn a_receiver_measures_the_run_it_saw_begin_and_counts_the_others_as_foreign() {
        let mut c = Collector::new(None, IPV4_HEADERS);
        // A run under way when the receiver started: its first read holds number 500.
        assert!(c.take(header(Some(1), 500, false), Nanos(10), 22));
        // This one from its number 1 (number 0 lost on the path).
        for seq in 1..4 {
            assert!(c.take(header(Some(2), seq, false), Nanos(20 + seq), 22));
        }
        // Once a run began under the receiver, one from before keeps no one waiting.
        assert!(!c.take(header(Some(1), 501, false), Nanos(30), 22));
        assert_eq!(c.ended(), None);
        // The run joined late ends first: that does not end the receiver.
        assert!(!c.take(end(Some(1), 600), Nanos(35), 22));
        assert_eq!(c.ended(), None);
        assert!(!c.take(header(Some(1), 502, false), Nanos(36), 22));
        assert!(c.take(header(Some(2), 4, false), Nanos(37), 22));
        assert!(c.take(end(Some(2), 5), Nanos(40), 22));
        assert!(!c.take(end(Some(2), 9), Nanos(41), 22));
        // Delays 19 to 22 (sent at 1, arrived at 20 + seq, the last at 37): the spread is 16 ns.
        assert_eq!(c.ended(), Some(Nanos(16)));
        let got = c.finish();
        assert_eq!((got.run, got.total), (Some(2), Some(5)), "the first end marker's count");
        assert_eq!(got.foreign, 3);
        assert_eq!(got.samples.iter().map(|s| s.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(got.samples[0].len, 22 + IPV4_HEADERS);
    }

    #[test]
    fn a_run_seen_from_its_first_numbers_began_though_others_came_first() {
        let mut c = Collector::new(None, IPV4_HEADERS);
        // Both in the first read; run 2 from its number 63 (all before lost).
        c.take(header(Some(1), 500, false), Nanos(10), 22);
        c.take(header(Some(2), BEGAN_BELOW - 1, false), Nanos(11), 22);
        c.take(end(Some(1), 900), Nanos(12), 22);
        assert_eq!(c.ended(), None);
        c.take(end(Some(2), BEGAN_BELOW), Nanos(13), 22);
        assert!(c.ended().is_some());
        assert_eq!(c.finish().run, Some(2));
    }

    /// A run seen begin whose end never came (its sender stopped, its end markers lost) is
    /// measured over one from before that ended; and a run of end markers alone is measured
    /// only where nothing else came.
    #[test]
    fn a_run_seen_begin_is_measured_over_an_ended_one_from_before() {
        let mut c = Collector::new(None, IPV4_HEADERS);
        c.take(header(Some(1), 900, false), Nanos(10), 22);
        assert!(c.take(header(Some(2), 0, false), Nanos(11), 22));
        c.take(end(Some(1), 1000), Nanos(12), 22);
        c.take(end(Some(3), 5), Nanos(13), 22);
        assert_eq!(c.ended(), None);
        let got = c.finish();
        assert_eq!((got.run, got.total, got.foreign, got.samples.len()), (Some(2), None, 1, 1));
        let mut c = Collector::new(None, IPV4_HEADERS);
        c.take(end(Some(3), 5), Nanos(9), 22);
        c.take(header(Some(1), 900, false), Nanos(10), 22);
        c.take(end(Some(1), 1000), Nanos(12), 22);
        assert_eq!(c.finish().run, Some(1), "the run datagrams came from, not the end markers'");
    }

    #[test]
    fn a_run_joined_late_is_measured_when_no_other_ends() {
        let mut c = Collector::new(None, IPV4_HEADERS);
        c.take(header(Some(1), 150, false), Nanos(10), 22);
        c.take(header(Some(2), BEGAN_BELOW, false), Nanos(11), 22);
        c.take(end(Some(2), 190), Nanos(12), 22);
        assert_eq!(c.ended(), None, "the receiver waits for a run it sees begin");
        let got = c.finish();
        assert_eq!((got.run, got.total, got.foreign, got.samples.len()), (Some(2), Some(190), 1, 1));
    }

    #[test]
    fn without_an_end_marker_the_run_most_datagrams_came_from_is_measured() {
        let mut c = Collector::new(None, IPV6_HEADERS);
        c.take(header(Some(1), 0, false), Nanos(1), 22);
        for seq in 0..2 {
            c.take(header(Some(2), seq, true), Nanos(2), 22);
        }
        // A sender from before runs, and its family unsaid: the receiver's own headers.
        c.take(Header { ipv6: None, ..header(None, 0, false) }, Nanos(3), 22);
        let got = c.clone().finish();
        assert_eq!((got.run, got.total, got.foreign, got.samples.len()), (Some(2), None, 2, 2));
        assert_eq!(got.samples[0].len, 22 + IPV6_HEADERS);
        // Tied: the run that came first.
        c.take(header(Some(1), 1, false), Nanos(4), 22);
        assert_eq!(c.finish().run, Some(1));
        let old = Collector::new(None, IPV4_HEADERS);
        let mut old2 = old.clone();
        old2.take(Header { ipv6: None, ..header(None, 5, false) }, Nanos(3), 22);
        let got = old2.finish();
        assert_eq!((got.run, got.foreign, got.samples[0].len), (None, 0, 22 + IPV4_HEADERS));
        let got = old.finish();
        assert!(got.samples.is_empty() && got.foreign == 0 && got.total.is_none() && got.run.is_none());
    }

    #[test]
    fn a_wanted_run_is_measured_whatever_else_comes() {
        let mut c = Collector::new(Some(7), IPV4_HEADERS);
        assert!(!c.take(header(Some(8), 0, false), Nanos(1), 22), "another run's keeps no one waiting");
        assert!(!c.take(header(None, 0, false), Nanos(1), 22));
        assert!(!c.take(end(Some(8), 1), Nanos(2), 22));
        assert_eq!(c.ended(), None, "another run's end does not stop it");
        // Its own, joined late (its first numbers lost) still ends it: it is the one wanted.
        assert!(c.take(header(Some(7), 100, false), Nanos(3), 22));
        assert!(c.take(end(Some(7), 101), Nanos(4), 22));
        assert_eq!(c.ended(), Some(Nanos(0)));
        let got = c.finish();
        assert_eq!((got.run, got.total, got.foreign, got.samples.len()), (Some(7), Some(101), 2, 1));
        // Nothing of its own came: no samples, and what came is foreign.
        let mut c = Collector::new(Some(7), IPV4_HEADERS);
        c.take(header(Some(8), 0, false), Nanos(1), 22);
        let got = c.finish();
        assert_eq!((got.run, got.total, got.foreign, got.samples.len()), (Some(7), None, 1, 0));
    }
}
