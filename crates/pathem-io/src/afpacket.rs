//! Live port on any Linux interface through AF_PACKET raw sockets, in batches
//! (`recvmmsg`/`sendmmsg`).
//!
//! Each direction gets its own socket: the receiving one (protocol ETH_P_ALL, promiscuous,
//! `PACKET_IGNORE_OUTGOING`) sees only frames arriving from the wire, never what pathem or the
//! host sends out of the interface; the transmitting one (protocol 0, so it receives nothing)
//! writes frames with `PACKET_QDISC_BYPASS`, straight to the driver. Promiscuity is a socket
//! membership, so the kernel removes it when the socket closes, even after SIGKILL.
//!
//! Frames from a local sender (a veth peer, say) may carry a checksum the sender's stack left
//! for the hardware to fill in; with `PACKET_VNET_HDR` the kernel says so, and pathem
//! completes the checksum before forwarding, as the hardware would have.
//!
//! Receive timestamps are the kernel's (`SO_TIMESTAMPNS`, taken when the frame entered the
//! stack), moved onto CLOCK_MONOTONIC; without them, the burst's read time is corrected back
//! along the burst at the link rate (MoonEm §5.4 software mode).

use crate::iface::failure;
use crate::kstamp::{cmsg_time, monotonic_now, realtime_offset};
use crate::port::{FallbackStamps, PollAt, RxFrame, RxPort, TxPort};
use crate::Error;
use pathem_model::Nanos;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Frames moved per system call.
pub const BURST: usize = 64;

/// Default receive buffer of a port's socket: about a millisecond of minimum-size frames at
/// 1 Mpps (each costs ~768 B of buffer). Large enough to ride out a short stall of pathem's
/// thread, small enough that a flood is dropped (and counted) at the port instead of waiting
/// there tens of milliseconds, unseen by the path's delay (an 8 MB buffer held 17–33 ms).
pub const DEFAULT_RX_BUFFER: usize = 1 << 20;
/// Smallest and largest receive buffer a port accepts.
pub const MIN_RX_BUFFER: usize = 64 << 10;
pub const MAX_RX_BUFFER: usize = 1 << 30;

fn last_os_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// The interface's index in the calling thread's network namespace.
pub(crate) fn ifindex(ifname: &str) -> Result<i32, Error> {
    let c = std::ffi::CString::new(ifname)
        .map_err(|_| Error::Interface { name: ifname.into(), reason: "contains a NUL byte".into() })?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        // Say why, in the words of the interface list when there is one to read.
        crate::iface::check_exists(ifname)?;
        return Err(Error::Interface { name: ifname.into(), reason: last_os_error().to_string() });
    }
    Ok(idx as i32)
}

/// Opens an AF_PACKET socket bound to `ifindex` for `protocol` (network byte order).
fn packet_socket(ifname: &str, ifindex: i32, protocol: u16) -> Result<OwnedFd, Error> {
    let fail = |what: &str, e: std::io::Error| failure(ifname, what, e, "CAP_NET_RAW");
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            i32::from(protocol),
        )
    };
    if fd < 0 {
        return Err(fail("cannot open a packet socket", last_os_error()));
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid starting value.
    let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = protocol;
    addr.sll_ifindex = ifindex;
    // SAFETY: `addr` is a properly initialized sockaddr_ll and the length matches it.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
            size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if rc < 0 {
        return Err(fail("cannot bind to it", last_os_error()));
    }
    Ok(fd)
}

pub(crate) fn set_opt<T>(fd: RawFd, level: i32, name: i32, value: &T) -> std::io::Result<()> {
    // SAFETY: `value` points to a live T and the length passed is its size.
    let rc = unsafe {
        libc::setsockopt(fd, level, name, value as *const T as *const libc::c_void, size_of::<T>() as u32)
    };
    if rc < 0 {
        Err(last_os_error())
    } else {
        Ok(())
    }
}

const PACKET_IGNORE_OUTGOING: i32 = 23;
const PACKET_VNET_HDR: i32 = 15;
/// struct virtio_net_hdr: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset.
const VNET_HDR: usize = 10;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;

/// Completes a checksum the sender left partial: the one's-complement sum of the bytes from
/// `start` (the field at `start + offset` already holds the pseudo-header sum).
fn complete_checksum(frame: &mut [u8], start: usize, offset: usize) {
    let at = start + offset;
    if at + 2 > frame.len() || start >= frame.len() {
        return;
    }
    let mut sum: u64 = 0;
    let mut chunks = frame[start..].chunks_exact(2);
    for c in &mut chunks {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u64::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let mut folded = !(sum as u16);
    if folded == 0 && offset == 6 {
        folded = 0xffff; // UDP sends zero as all ones
    }
    frame[at..at + 2].copy_from_slice(&folded.to_be_bytes());
}
const CMSG_SPACE: usize = 64;

/// The receiving half: frames arriving on the interface.
pub struct AfPacketRx {
    fd: OwnedFd,
    slot: usize,
    bufs: Box<[u8]>,
    iovecs: Box<[libc::iovec]>,
    addrs: Box<[libc::sockaddr_ll]>,
    ctrl: Box<[u8]>,
    msgs: Box<[libc::mmsghdr]>,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC, refreshed every second to follow clock steps.
    realtime_offset: i64,
    offset_at: Nanos,
    line_rate: u64,
    last_arrival: Nanos,
    more: bool,
    /// Each received buffer starts with a virtio_net_hdr.
    vnet: bool,
    /// Receive errors other than "nothing to read" (an interface going down, say).
    pub errors: u64,
    /// Frames the kernel dropped for want of room in the socket buffer (PACKET_STATISTICS
    /// resets on every read, so they are added up here).
    drops: u64,
}

// SAFETY: the raw pointers inside `iovecs` and `msgs` point only into this struct's own boxed
// buffers (`bufs`, `addrs`, `ctrl`, `iovecs`), which move with it and are used by one thread
// at a time through `&mut self`.
unsafe impl Send for AfPacketRx {}

impl AfPacketRx {
    /// Opens the receiving side of `ifname` for frames of up to `max_frame` bytes, with a
    /// socket buffer of `rx_buffer` bytes (see [`DEFAULT_RX_BUFFER`]).
    pub fn open(ifname: &str, max_frame: usize, rx_buffer: usize) -> Result<AfPacketRx, Error> {
        let idx = ifindex(ifname)?;
        let fd = packet_socket(ifname, idx, (libc::ETH_P_ALL as u16).to_be())?;
        let raw = fd.as_raw_fd();
        let opt_err = |what: &str, e: std::io::Error| failure(ifname, what, e, "CAP_NET_RAW");
        // SAFETY: packet_mreq is plain data.
        let mut mreq: libc::packet_mreq = unsafe { zeroed() };
        mreq.mr_ifindex = idx;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        set_opt(raw, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
            .map_err(|e| opt_err("cannot make it promiscuous", e))?;
        let vnet = set_opt(raw, libc::SOL_PACKET, PACKET_VNET_HDR, &1i32).is_ok();
        // Kernels before 4.20 lack this; outgoing frames are then skipped by packet type.
        let _ = set_opt(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32);
        let _ = set_opt(raw, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &1i32);
        // FORCE sets the size where allowed (root), past the system's rmem_max. The kernel
        // doubles what it is given (room for its bookkeeping): ask for half.
        let rcvbuf = (rx_buffer.clamp(MIN_RX_BUFFER, MAX_RX_BUFFER) / 2) as i32;
        if set_opt(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &rcvbuf).is_err() {
            let _ = set_opt(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, &rcvbuf);
        }
        let slot = (max_frame + 1 + if vnet { VNET_HDR } else { 0 }).next_multiple_of(64);
        let mut port = AfPacketRx {
            fd,
            slot,
            bufs: vec![0u8; slot * BURST].into_boxed_slice(),
            // SAFETY: iovec, sockaddr_ll and mmsghdr are plain data; zero is a valid value.
            iovecs: (0..BURST).map(|_| unsafe { zeroed() }).collect(),
            addrs: (0..BURST).map(|_| unsafe { zeroed() }).collect(),
            ctrl: vec![0u8; CMSG_SPACE * BURST].into_boxed_slice(),
            msgs: (0..BURST).map(|_| unsafe { zeroed() }).collect(),
            realtime_offset: 0,
            offset_at: Nanos::ZERO,
            line_rate: crate::iface::speed_bps(ifname).unwrap_or(10_000_000_000),
            last_arrival: Nanos::ZERO,
            more: false,
            vnet,
            errors: 0,
            drops: 0,
        };
        for i in 0..BURST {
            port.iovecs[i].iov_base = port.bufs[i * slot..].as_mut_ptr() as *mut libc::c_void;
            port.iovecs[i].iov_len = slot;
        }
        port.refresh_offset(monotonic_now());
        Ok(port)
    }

    /// The socket, for waiting on it.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn refresh_offset(&mut self, now: Nanos) {
        self.realtime_offset = realtime_offset();
        self.offset_at = now;
    }

    /// The kernel's receive timestamp of message `i`, on CLOCK_MONOTONIC.
    fn kernel_timestamp(&self, i: usize) -> Option<Nanos> {
        // SAFETY: message i's control buffer was set by us and filled by recvmmsg.
        let rt = unsafe { cmsg_time(&self.msgs[i].msg_hdr, libc::SO_TIMESTAMPNS) }?;
        Some(Nanos((rt - self.realtime_offset).max(0) as u64))
    }
}

impl RxPort for AfPacketRx {
    fn recv_burst<F: FnMut(RxFrame<'_>)>(
        &mut self,
        now: Nanos,
        max: usize,
        mut f: F,
    ) -> Result<usize, Error> {
        if now.saturating_sub(self.offset_at) > Nanos::from_secs(1) {
            self.refresh_offset(now);
        }
        let want = max.min(BURST);
        for i in 0..want {
            let m = &mut self.msgs[i];
            m.msg_hdr.msg_name = &mut self.addrs[i] as *mut libc::sockaddr_ll as *mut libc::c_void;
            m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_ll>() as u32;
            m.msg_hdr.msg_iov = &mut self.iovecs[i];
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = self.ctrl[i * CMSG_SPACE..].as_mut_ptr() as *mut libc::c_void;
            m.msg_hdr.msg_controllen = CMSG_SPACE;
            m.msg_hdr.msg_flags = 0;
        }
        // SAFETY: every header points into buffers owned by self with the lengths set above;
        // the kernel writes at most those lengths.
        let n = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                want as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            self.more = false;
            let e = last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::Interrupted {
                // The interface went down or away: keep polling, it may come back.
                self.errors += 1;
            }
            return Ok(0);
        }
        let n = n as usize;
        self.more = n == want;
        // The caller's `now` was read before this call; the thread may have been descheduled
        // since, and frames that arrived meanwhile must not be stamped earlier than they came.
        let now = monotonic_now().max(now);
        // Without kernel timestamps, frame k of the burst arrived before `now` by the wire time
        // of the frames after it.
        let mut fallback = FallbackStamps::<BURST>::new(now, self.line_rate, n);
        let mut delivered = 0;
        #[allow(clippy::needless_range_loop)] // i indexes five parallel arrays
        for i in 0..n {
            if self.addrs[i].sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let truncated = self.msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            let len = (self.msgs[i].msg_len as usize).min(self.slot);
            let stamp = match self.kernel_timestamp(i) {
                Some(t) => t,
                None => fallback.get(i, |j| u64::from(self.msgs[j].msg_len)),
            };
            let arrival = stamp.min(now).max(self.last_arrival);
            self.last_arrival = arrival;
            let buf = &mut self.bufs[i * self.slot..i * self.slot + len];
            let data = if self.vnet && len >= VNET_HDR {
                let (hdr, frame) = buf.split_at_mut(VNET_HDR);
                if hdr[0] & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 {
                    let start = usize::from(u16::from_ne_bytes([hdr[6], hdr[7]]));
                    let offset = usize::from(u16::from_ne_bytes([hdr[8], hdr[9]]));
                    complete_checksum(frame, start, offset);
                }
                &*frame
            } else {
                &*buf
            };
            // A truncated frame reaches the engine one byte longer than it may be: an oversize drop.
            let wire_len = if truncated { self.slot as u32 } else { data.len() as u32 };
            f(RxFrame { arrival, wire_len, data });
            delivered += 1;
        }
        Ok(delivered)
    }

    fn poll_at(&self) -> PollAt {
        PollAt::live(self.more)
    }

    fn kernel_drops(&mut self) -> u64 {
        self.drops += u64::from(ring_drops(self.fd.as_raw_fd()).unwrap_or(0));
        self.drops
    }
}

/// Frames the kernel dropped on packet socket `fd` for want of room (its buffer or ring) since
/// the last call: PACKET_STATISTICS, which resets as it is read.
pub(crate) fn ring_drops(fd: RawFd) -> Option<u32> {
    let mut st = libc::tpacket_stats { tp_packets: 0, tp_drops: 0 };
    let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: `st` is a live tpacket_stats and `len` its size; the kernel writes at most that.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut st as *mut libc::tpacket_stats as *mut libc::c_void,
            &mut len,
        )
    };
    (rc == 0).then_some(st.tp_drops)
}

/// The transmitting half: frames leaving through the interface.
pub struct AfPacketTx {
    fd: OwnedFd,
    slot: usize,
    bufs: Box<[u8]>,
    lens: [usize; BURST],
    iovecs: Box<[libc::iovec]>,
    msgs: Box<[libc::mmsghdr]>,
    queued: usize,
    /// Frames the interface refused (it was down, say) and that were dropped.
    pub errors: u64,
}

// SAFETY: as for AfPacketRx: the pointers refer only to this struct's own boxed buffers.
unsafe impl Send for AfPacketTx {}

impl AfPacketTx {
    /// Opens the transmitting side of `ifname` for frames of up to `max_frame` bytes.
    pub fn open(ifname: &str, max_frame: usize) -> Result<AfPacketTx, Error> {
        let idx = ifindex(ifname)?;
        // Protocol 0: this socket receives nothing, it only sends.
        let fd = packet_socket(ifname, idx, 0)?;
        let _ = set_opt(fd.as_raw_fd(), libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &1i32);
        let _ = set_opt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, &(8i32 << 20));
        let slot = max_frame.next_multiple_of(64).max(64);
        Ok(AfPacketTx {
            fd,
            slot,
            bufs: vec![0u8; slot * BURST].into_boxed_slice(),
            lens: [0; BURST],
            // SAFETY: iovec and mmsghdr are plain data; zero is a valid value.
            iovecs: (0..BURST).map(|_| unsafe { zeroed() }).collect(),
            msgs: (0..BURST).map(|_| unsafe { zeroed() }).collect(),
            queued: 0,
            errors: 0,
        })
    }
}

impl TxPort for AfPacketTx {
    #[inline]
    fn send(&mut self, _release: Nanos, _wire_len: u32, data: &[u8]) -> bool {
        if self.queued == BURST {
            return false;
        }
        let len = data.len().min(self.slot);
        let i = self.queued;
        self.bufs[i * self.slot..i * self.slot + len].copy_from_slice(&data[..len]);
        self.lens[i] = len;
        self.queued += 1;
        true
    }

    fn queued(&self) -> usize {
        self.queued
    }

    fn flush(&mut self) -> Result<(), Error> {
        let mut start = 0;
        while start < self.queued {
            let n = self.queued - start;
            for k in 0..n {
                let i = start + k;
                self.iovecs[k].iov_base = self.bufs[i * self.slot..].as_mut_ptr() as *mut libc::c_void;
                self.iovecs[k].iov_len = self.lens[i];
                // SAFETY: msghdr is plain data; zero is a valid value.
                self.msgs[k].msg_hdr = unsafe { zeroed() };
                self.msgs[k].msg_hdr.msg_iov = &mut self.iovecs[k];
                self.msgs[k].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: the n headers point at iovecs into self.bufs with in-bounds lengths.
            let sent = unsafe { libc::sendmmsg(self.fd.as_raw_fd(), self.msgs.as_mut_ptr(), n as u32, 0) };
            if sent < 0 {
                let e = last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => {
                        // The device queue is full: keep the rest for the next flush.
                        self.compact(start);
                        return Ok(());
                    }
                    _ => {
                        // Down or gone: drop what is queued and carry on; it may come back.
                        self.errors += n as u64;
                        break;
                    }
                }
            }
            start += sent.max(1) as usize;
        }
        self.queued = 0;
        Ok(())
    }
}

impl AfPacketTx {
    /// Moves frames `from..queued` to the front of the batch.
    fn compact(&mut self, from: usize) {
        for (k, i) in (from..self.queued).enumerate() {
            let len = self.lens[i];
            self.bufs.copy_within(i * self.slot..i * self.slot + len, k * self.slot);
            self.lens[k] = len;
        }
        self.queued -= from;
    }
}

/// At most this many sockets are waited on (a thread serves at most a few ports).
const MAX_WAIT_FDS: usize = 8;

/// Sleeps until one of `fds` is readable or `timeout` has passed (a live engine's idle wait).
pub fn wait_readable(fds: &[RawFd], timeout: Nanos) {
    // On the stack: the loop waits here between frames at low rates, so no allocation.
    let mut polls = [libc::pollfd { fd: -1, events: libc::POLLIN, revents: 0 }; MAX_WAIT_FDS];
    let n = fds.len().min(MAX_WAIT_FDS);
    for (p, &fd) in polls.iter_mut().zip(&fds[..n]) {
        p.fd = fd;
    }
    let ts = libc::timespec {
        tv_sec: (timeout.as_nanos() / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout.as_nanos() % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `polls` and `ts` are live locals of the right types; a null sigmask means none.
    unsafe { libc::ppoll(polls.as_mut_ptr(), n as libc::nfds_t, &ts, std::ptr::null()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completes_a_partial_udp_checksum() {
        // IPv4/UDP frame whose UDP checksum field holds only the pseudo-header sum.
        let mut f = crate::mem::udp_frame(80, 7);
        let udp = 34;
        let (src, dst) = ([10u8, 0, 0, 1], [10u8, 0, 0, 2]);
        let udp_len = (80 - udp) as u32;
        let mut pseudo: u32 = u32::from(u16::from_be_bytes([src[0], src[1]]))
            + u32::from(u16::from_be_bytes([src[2], src[3]]))
            + u32::from(u16::from_be_bytes([dst[0], dst[1]]))
            + u32::from(u16::from_be_bytes([dst[2], dst[3]]))
            + 17
            + udp_len;
        while pseudo > 0xffff {
            pseudo = (pseudo & 0xffff) + (pseudo >> 16);
        }
        f[udp + 6..udp + 8].copy_from_slice(&(pseudo as u16).to_be_bytes());
        complete_checksum(&mut f, udp, 6);
        // Verify: the full sum over pseudo-header and UDP segment folds to 0xffff.
        let mut sum: u64 = u64::from(pseudo);
        for c in f[udp..].chunks(2) {
            sum += u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
        // The pseudo-header was counted twice (in the field and here): remove one copy.
        sum -= u64::from(pseudo);
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        let mut check = sum + u64::from(pseudo);
        while check > 0xffff {
            check = (check & 0xffff) + (check >> 16);
        }
        assert_eq!(check, 0xffff);
    }
}
