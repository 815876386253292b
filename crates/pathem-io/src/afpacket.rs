//! Live port on any Linux interface through AF_PACKET raw sockets: frames are read in place
//! from a packet-mmap receive ring (TPACKET_V2) and sent in batches (`sendmmsg`).
//!
//! Each direction gets its own socket: the receiving one (protocol ETH_P_ALL, promiscuous,
//! `PACKET_IGNORE_OUTGOING`) sees only frames arriving from the wire, never what pathem or the
//! host sends out of the interface; the transmitting one (protocol 0, so it receives nothing)
//! writes frames with `PACKET_QDISC_BYPASS`, straight to the driver. Promiscuity is a socket
//! membership, so the kernel removes it when the socket closes, even after SIGKILL.
//!
//! Frames from a local sender (a veth peer, a container) come as its stack handed them down:
//! with checksums left for the hardware to fill in, and as GSO super-frames of up to 64 KB.
//! With `PACKET_VNET_HDR` the kernel says which, and the port completes the checksums and cuts
//! the super-frames into wire frames ([`crate::offload`]) before the path sees them. A VLAN tag
//! the kernel keeps out of the frame (hardware-accelerated, as veth does) comes back from the
//! ring's slot header (from `PACKET_AUXDATA` on a [`RawSocket`]) and is put back into the
//! frame, as libpcap does.
//!
//! Receive timestamps are the kernel's (taken when the frame entered the stack, or when it
//! reached the ring if the stack took none), from the ring's slot header, moved onto
//! CLOCK_MONOTONIC.

use crate::iface::failure;
use crate::kstamp::{monotonic_now, RealtimeStamps};
use crate::mmap::Mmap;
use crate::offload::VnetRequest;
use crate::port::{PollAt, RxFrame, RxPort, TxBatch, TxErrorClass, TxPort, TxRefused};
use crate::Error;
use pathem_model::Nanos;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Frames moved per burst: ring slots read, or frames per `sendmmsg`.
pub const BURST: usize = 64;

/// Default receive buffer of a port's socket: about a millisecond of minimum-size frames at
/// 1 Mpps (each costs ~768 B of buffer). Large enough to ride out a short stall of pathem's
/// thread, small enough that a flood is dropped (and counted) at the port instead of waiting
/// there tens of milliseconds, unseen by the path's delay (an 8 MB buffer held 17–33 ms).
pub const DEFAULT_RX_BUFFER: usize = 1 << 20;
/// What a minimum-size frame costs a socket buffer (its truesize): a port's receive ring has a
/// slot for each this many bytes of its receive buffer, so a flood is dropped where the socket
/// buffer would have dropped it.
const SMALL_FRAME_TRUESIZE: usize = 768;
/// Smallest and largest receive buffer a port accepts.
pub const MIN_RX_BUFFER: usize = 64 << 10;
pub const MAX_RX_BUFFER: usize = 1 << 30;

fn last_os_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// The interface's index in the calling thread's network namespace.
pub(crate) fn ifindex(ifname: &str) -> Result<i32, Error> {
    if ifname.contains('\0') {
        return Err(Error::Interface { name: ifname.into(), reason: "contains a NUL byte".into() });
    }
    match crate::iface::index(ifname) {
        Some(idx) => Ok(idx as i32),
        None => {
            // Say why, in the words of the interface list when there is one to read.
            crate::iface::check_exists(ifname)?;
            Err(Error::Interface { name: ifname.into(), reason: last_os_error().to_string() })
        }
    }
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

/// The error of a port whose interface was deleted while pathem ran.
pub(crate) fn gone(ifname: &str) -> Error {
    Error::Interface { name: ifname.into(), reason: "is gone: it was deleted while pathem ran".into() }
}

/// getsockopt(2) into a `T` the kernel fills (at most its size; fields an older kernel does
/// not know stay zero).
///
/// # Safety
/// `T` must be plain data for which every bit pattern is valid (integers, arrays of them).
pub(crate) unsafe fn get_opt<T>(fd: RawFd, level: i32, name: i32) -> std::io::Result<T> {
    // SAFETY: the caller vouches that all-zero bytes, and any the kernel writes, are a valid T.
    let mut value: T = unsafe { zeroed() };
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a live T and `len` its size: the kernel writes at most that many bytes.
    let rc =
        unsafe { libc::getsockopt(fd, level, name, &mut value as *mut T as *mut libc::c_void, &mut len) };
    if rc < 0 {
        Err(last_os_error())
    } else {
        Ok(value)
    }
}

/// Asks for a receive buffer of `bytes` on `fd`: FORCE passes the system's `rmem_max` where
/// the caller may (root); otherwise the plain request, which the kernel caps.
pub(crate) fn set_receive_buffer(fd: RawFd, bytes: i32) {
    if set_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &bytes).is_err() {
        let _ = set_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &bytes);
    }
}

/// setsockopt(2) with `value`, read by the kernel as data. AF_XDP's options are refused
/// (EINVAL): registering a UMEM hands the kernel an address it then writes frames to.
pub(crate) fn set_opt<T>(fd: RawFd, level: i32, name: i32, value: &T) -> std::io::Result<()> {
    const SOL_XDP: i32 = 283;
    if level == SOL_XDP {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: `value` points to a live T and the length passed is its size; the kernel only
    // reads it (the options that keep an address to write to later are AF_XDP's, refused
    // above; a packet ring is memory the kernel allocates and we map).
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
const PACKET_AUXDATA: i32 = 8;
/// struct virtio_net_hdr: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset.
const VNET_HDR: usize = crate::offload::VNET_HDR_LEN;
/// Room kept in front of each receive buffer for a VLAN tag the kernel kept apart.
const TAG_ROOM: usize = 4;
/// The longest frame a GSO super-frame can make: 64 KB of IP packet behind two VLAN tags.
const SUPER_FRAME: usize = 65_535 + 14 + 8;
/// Control messages per received frame: a timestamp and the auxiliary data.
const CMSG_SPACE: usize = 128;

/// The VLAN tag (TPID and TCI, as on the wire) the kernel kept out of a received frame, from
/// the message's `PACKET_AUXDATA`.
///
/// # Safety
/// `msg` must be a message filled by `recvmsg`/`recvmmsg`, whose control buffer is live.
unsafe fn kept_vlan_tag(msg: &libc::msghdr) -> Option<[u8; 4]> {
    // SAFETY: guaranteed by the caller; the CMSG_* helpers stay within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == PACKET_AUXDATA {
                let aux = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::tpacket_auxdata);
                return tag_of(aux.tp_status, aux.tp_vlan_tci, aux.tp_vlan_tpid);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

/// Puts a VLAN tag back behind the Ethernet addresses of the frame at `buf[start..end]`, which
/// has `TAG_ROOM` bytes free in front of it (and `lead` bytes of header before the frame):
/// the bytes before the tag move 4 to the front. Returns the frame's new start.
fn insert_tag(buf: &mut [u8], start: usize, end: usize, lead: usize, tag: [u8; 4]) -> usize {
    let head = (lead + 12).min(end - start);
    buf.copy_within(start..start + head, start - TAG_ROOM);
    buf[start - TAG_ROOM + head..start + head].copy_from_slice(&tag);
    start - TAG_ROOM
}

/// A packet-mmap ring shared with the kernel (TPACKET_V2): `frames` slots of `frame_size`
/// bytes back to back (blocks hold whole slots), each starting with a `tpacket2_hdr` whose
/// status word says which side the slot belongs to.
struct Ring {
    map: Mmap,
    frame_size: usize,
    frames: usize,
}

/// Where a V2 slot's `sockaddr_ll` starts: behind the header, aligned.
const SLOT_ADDR: usize = size_of::<libc::tpacket2_hdr>().next_multiple_of(libc::TPACKET_ALIGNMENT);
/// A ring's blocks: the kernel allocates each as one piece of 2^n pages.
const RING_BLOCK: usize = 1 << 16;

impl Ring {
    /// Asks the kernel for a receive ring of at least `slots` slots of `frame_size` bytes (a
    /// power of two), whole blocks of them, and maps it.
    fn rx(fd: RawFd, frame_size: usize, slots: usize) -> std::io::Result<Ring> {
        debug_assert!(frame_size.is_power_of_two() && frame_size >= 64);
        let block = RING_BLOCK.max(frame_size);
        let per_block = block / frame_size;
        let blocks = slots.div_ceil(per_block).max(1);
        let frames = blocks * per_block;
        let req = libc::tpacket_req {
            tp_block_size: block as u32,
            tp_block_nr: blocks as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: frames as u32,
        };
        set_opt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
        Ok(Ring { map: Mmap::socket(fd, block * blocks, 0)?, frame_size, frames })
    }

    /// Slot `i`'s status word, shared with the kernel. Panics if `i` is not a slot.
    fn status(&self, i: usize) -> &std::sync::atomic::AtomicU32 {
        assert!(i < self.frames, "slot {i} of {}", self.frames);
        // SAFETY: slot i lies inside the mapping, starts 16-byte aligned and begins with the
        // u32 status; the mapping lives as long as `self`, and the kernel too reads and writes
        // the word whole.
        unsafe { &*(self.map.ptr().add(i * self.frame_size) as *const std::sync::atomic::AtomicU32) }
    }

    /// Slot `i`, header included.
    ///
    /// # Safety
    /// The slot must be this side's (its status handed it over) for as long as the slice
    /// lives, and `i < frames`.
    unsafe fn slot(&mut self, i: usize) -> &mut [u8] {
        // SAFETY: guaranteed by the caller; the slot lies inside the mapping.
        unsafe { std::slice::from_raw_parts_mut(self.map.ptr().add(i * self.frame_size), self.frame_size) }
    }
}

/// The header the kernel wrote at the start of a receive slot.
fn slot_header(slot: &[u8]) -> libc::tpacket2_hdr {
    // SAFETY: every slot is longer than the header; tpacket2_hdr is plain data.
    unsafe { std::ptr::read_unaligned(slot.as_ptr() as *const libc::tpacket2_hdr) }
}

/// The VLAN tag (TPID and TCI, as on the wire) the kernel kept out of a frame, from the
/// status and fields of its ring header or auxiliary data.
fn tag_of(status: u32, tci: u16, tpid: u16) -> Option<[u8; 4]> {
    if status & libc::TP_STATUS_VLAN_VALID == 0 {
        return None;
    }
    let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 { tpid } else { 0x8100 };
    let [a, b] = tpid.to_be_bytes();
    let [c, d] = tci.to_be_bytes();
    Some([a, b, c, d])
}

/// The receiving half: frames arriving on the interface, read from a packet-mmap ring in
/// place. A frame longer than a slot (a GSO super-frame) the kernel queues whole on the
/// socket as well (`PACKET_COPY_THRESH`), marks its slot `TP_STATUS_COPY`, and the port reads
/// it from there, in the same order.
pub struct AfPacketRx {
    /// Before `fd`: unmapped before the socket closes.
    ring: Ring,
    fd: OwnedFd,
    /// The next slot to read.
    head: usize,
    /// A whole frame read from the socket's queue, behind room for a tag.
    copy: Box<[u8]>,
    /// The ring's stamps (CLOCK_REALTIME) on CLOCK_MONOTONIC.
    stamps: RealtimeStamps,
    last_arrival: Nanos,
    /// Each frame comes behind a virtio_net_hdr.
    vnet: bool,
    /// What the port did to frames a local sender left to the hardware.
    offload: crate::offload::OffloadCounts,
    /// Frames the kernel dropped for want of room in the ring, or could not keep whole
    /// (PACKET_STATISTICS resets on every read, so they are added up here).
    drops: u64,
}

impl AfPacketRx {
    /// Opens the receiving side of `ifname` for frames of up to `max_frame` bytes, with a
    /// ring of about `rx_buffer` bytes (see [`DEFAULT_RX_BUFFER`]).
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
        // The version and the virtio-net header go before the ring, which fixes its layout.
        set_opt(raw, libc::SOL_PACKET, libc::PACKET_VERSION, &(libc::tpacket_versions::TPACKET_V2 as i32))
            .map_err(|e| opt_err("cannot use packet ring version 2", e))?;
        let vnet = set_opt(raw, libc::SOL_PACKET, PACKET_VNET_HDR, &1i32).is_ok();
        // Kernels before 4.20 lack this; outgoing frames are then skipped by packet type.
        let _ = set_opt(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32);
        // Enables the stack's receive stamps, which the ring then carries.
        let _ = set_opt(raw, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &1i32);
        let rx_buffer = rx_buffer.clamp(MIN_RX_BUFFER, MAX_RX_BUFFER);
        // Frames too long for a slot wait whole in the socket buffer: room for a few.
        set_receive_buffer(raw, (rx_buffer / 2) as i32);
        set_opt(raw, libc::SOL_PACKET, libc::PACKET_COPY_THRESH, &1i32)
            .map_err(|e| opt_err("cannot keep long frames whole", e))?;
        // A slot holds a wire frame of the interface's MTU (two VLAN tags in it) behind the
        // kernel's header, address and virtio-net header; longer frames come whole through
        // the socket.
        let mtu = crate::iface::mtu(ifname).unwrap_or(1500) as usize;
        let frame_size = (RX_LEAD + mtu + 14 + 8).next_power_of_two().max(2048);
        // As many slots as minimum-size frames a socket buffer of `rx_buffer` bytes holds.
        let ring = Ring::rx(raw, frame_size, rx_buffer / SMALL_FRAME_TRUESIZE)
            .map_err(|e| opt_err("cannot set up its receive ring", e))?;
        let copy_len = TAG_ROOM + VNET_HDR + max_frame.max(SUPER_FRAME) + 1;
        Ok(AfPacketRx {
            ring,
            fd,
            head: 0,
            copy: vec![0u8; copy_len].into_boxed_slice(),
            stamps: RealtimeStamps::new(),
            last_arrival: Nanos::ZERO,
            vnet,
            offload: Default::default(),
            drops: 0,
        })
    }

    /// The socket, for waiting on it.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Whether a frame waits in the socket now (its ring, or its queue of long frames),
    /// unread.
    pub fn holds_frames(&self) -> bool {
        readable(self.fd.as_raw_fd(), std::time::Duration::ZERO)
    }

    /// From now on takes only frames carrying socket-buffer mark `mark` (a classic BPF
    /// filter on the socket): the others are not this socket's, neither read nor counted as
    /// drops. `attach` reads a TAP device's receive side this way: the frames the interface's
    /// programs steer there carry the mark, and nothing else is taken should another program
    /// redirect frames into the device.
    pub fn only_marked(&self, ifname: &str, mark: u32) -> Result<(), Error> {
        // ld mark; jeq #mark, 0, 1; ret #-1 (the whole frame); ret #0 (not taken).
        const SKF_AD_MARK: u32 = (-0x1000i32 + 20) as u32;
        let mut code = [
            libc::sock_filter { code: 0x20, jt: 0, jf: 0, k: SKF_AD_MARK },
            libc::sock_filter { code: 0x15, jt: 0, jf: 1, k: mark },
            libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: u32::MAX },
            libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0 },
        ];
        let prog = libc::sock_fprog { len: code.len() as u16, filter: code.as_mut_ptr() };
        // The kernel copies the program during the call.
        set_opt(self.fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
            .map_err(|e| failure(ifname, "cannot filter its packet socket by mark", e, "CAP_NET_RAW"))
    }

    /// Reads the whole frame the kernel queued for a `TP_STATUS_COPY` slot into `copy`
    /// (behind room for a tag): its length and whether it was longer than the buffer.
    fn read_copy(&mut self) -> Option<(usize, bool)> {
        let room = self.copy.len() - TAG_ROOM;
        // A socket error pending (ENETDOWN once the interface went down) is returned, and
        // cleared, by the next read instead of the queued frame: read again, or every later
        // copy would read the frame before its own.
        for _ in 0..2 {
            // SAFETY: the buffer is live and the length passed is what follows TAG_ROOM in it.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.copy[TAG_ROOM..].as_mut_ptr() as *mut libc::c_void,
                    room,
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            // With MSG_TRUNC a packet socket says the frame's whole length.
            if n >= 0 {
                return Some(((n as usize).min(room), n as usize > room));
            }
            if matches!(last_os_error().raw_os_error(), Some(libc::EAGAIN) | None) {
                return None;
            }
        }
        None
    }
}

/// Room the kernel takes in front of a frame in a receive slot, at most: the header and
/// address aligned with 16 bytes to spare, then the virtio-net header.
const RX_LEAD: usize = (libc::TPACKET2_HDRLEN + 16).next_multiple_of(libc::TPACKET_ALIGNMENT) + VNET_HDR;

/// Hands one received frame, at `buf[start..end]` behind `lead` bytes of virtio-net header
/// and with `TAG_ROOM` free bytes in front, to `f`: its kept VLAN tag put back, a checksum
/// the sender left completed, a super-frame cut into wire frames. Returns the frames handed on.
#[allow(clippy::too_many_arguments)]
fn deliver<F: FnMut(RxFrame<'_>)>(
    buf: &mut [u8],
    (mut start, end): (usize, usize),
    lead: usize,
    tag: Option<[u8; 4]>,
    truncated: bool,
    arrival: Nanos,
    offload: &mut crate::offload::OffloadCounts,
    f: &mut F,
) -> usize {
    let len = end - start;
    if len < lead {
        offload.refused += 1;
        return 0;
    }
    if let Some(tag) = tag {
        start = insert_tag(buf, start, end, lead, tag);
    }
    let tagged = end - start - len;
    let buf = &mut buf[start..end];
    let request = if lead > 0 {
        let hdr: &[u8; VNET_HDR] = buf[..VNET_HDR].try_into().expect("VNET_HDR bytes");
        crate::offload::vnet_request(hdr)
    } else {
        Ok(VnetRequest::None)
    };
    let frame = &mut buf[lead..];
    let outcome = match request {
        Ok(VnetRequest::None) => Ok(()),
        // The kernel counts the checksum's start from the frame without a kept tag.
        Ok(VnetRequest::Checksum { start, offset }) => {
            crate::offload::complete_at(frame, usize::from(start) + tagged, offset.into())
                .map(|()| offload.csum_completed += 1)
        }
        Ok(VnetRequest::Segment(_)) if truncated => Err(crate::offload::Fault::LengthMismatch),
        Ok(VnetRequest::Segment(gso)) => {
            let cut = crate::offload::segment(frame, gso, |seg| {
                f(RxFrame { arrival, wire_len: seg.len() as u32, data: seg });
            });
            match cut {
                Ok(segments) => {
                    offload.gso_frames += 1;
                    offload.gso_segments += segments as u64;
                    return segments;
                }
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    };
    if outcome.is_err() {
        offload.refused += 1;
        return 0;
    }
    // A truncated frame reaches the engine one byte longer than it may be: an oversize drop.
    let wire_len = if truncated { (frame.len() + 1) as u32 } else { frame.len() as u32 };
    f(RxFrame { arrival, wire_len, data: frame });
    1
}

impl RxPort for AfPacketRx {
    fn recv_burst<F: FnMut(RxFrame<'_>)>(
        &mut self,
        now: Nanos,
        max: usize,
        mut f: F,
    ) -> Result<usize, Error> {
        use std::sync::atomic::Ordering;
        let lead = if self.vnet { VNET_HDR } else { 0 };
        let mut delivered = 0;
        if self.ring.status(self.head).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            return Ok(0);
        }
        // The caller's `now` was read before this call; the kernel may have stamped frames
        // since, and none may arrive later than the instant they are read.
        let mut now = monotonic_now().max(now);
        let offset = self.stamps.at(now);
        for _ in 0..max.min(BURST) {
            let i = self.head;
            let status = self.ring.status(i).load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: the status handed slot i to this side until it is given back below.
            let slot = unsafe { self.ring.slot(i) };
            let hdr = slot_header(slot);
            let outgoing = slot[SLOT_ADDR + std::mem::offset_of!(libc::sockaddr_ll, sll_pkttype)]
                == libc::PACKET_OUTGOING;
            let stamp = i64::from(hdr.tp_sec) * 1_000_000_000 + i64::from(hdr.tp_nsec);
            let mut arrival = offset.monotonic(stamp);
            if arrival > now {
                // Stamped after `now` was read: the slot filled during this burst (the thread
                // may have lost its CPU for milliseconds in it). Its stamp is true, and earlier
                // than the clock now; held down to the older `now` the frame would leave that
                // much before its delay is up. What is left above a fresh `now` is the
                // offset's error.
                now = monotonic_now().max(now);
                arrival = arrival.min(now);
            }
            let arrival = arrival.max(self.last_arrival);
            let tag = tag_of(status, hdr.tp_vlan_tci, hdr.tp_vlan_tpid);
            let (mac, snap) = (usize::from(hdr.tp_mac), hdr.tp_snaplen as usize);
            if status & libc::TP_STATUS_COPY != 0 {
                // The whole frame waits in the socket's queue (the slot holds its head): read
                // it even when outgoing, so the queue keeps in step with the ring.
                match self.read_copy() {
                    Some(_) if outgoing => {}
                    Some((len, truncated)) => {
                        self.last_arrival = arrival;
                        let end = TAG_ROOM + len;
                        delivered += deliver(
                            &mut self.copy,
                            (TAG_ROOM, end),
                            lead,
                            tag,
                            truncated,
                            arrival,
                            &mut self.offload,
                            &mut f,
                        );
                    }
                    // Marked for a copy the queue does not hold: lost before pathem saw it.
                    None => self.drops += 1,
                }
            } else if !outgoing {
                let fits = mac >= SLOT_ADDR + size_of::<libc::sockaddr_ll>() + TAG_ROOM + lead
                    && mac + snap <= slot.len();
                if !fits {
                    // Not a layout the kernel writes: counted, never read out of bounds.
                    self.offload.refused += 1;
                } else if snap < hdr.tp_len as usize {
                    // Too long for a slot and no room left in the socket buffer for it whole:
                    // the kernel kept only its head.
                    self.drops += 1;
                } else {
                    self.last_arrival = arrival;
                    delivered += deliver(
                        slot,
                        (mac - lead, mac + snap),
                        lead,
                        tag,
                        false,
                        arrival,
                        &mut self.offload,
                        &mut f,
                    );
                }
            }
            // Done with the slot: back to the kernel.
            self.ring.status(i).store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.head = if i + 1 == self.ring.frames { 0 } else { i + 1 };
        }
        Ok(delivered)
    }

    fn poll_at(&self) -> PollAt {
        let ready = self.ring.status(self.head).load(std::sync::atomic::Ordering::Acquire);
        PollAt::live(ready & libc::TP_STATUS_USER != 0)
    }

    fn kernel_drops(&mut self) -> u64 {
        self.drops += u64::from(ring_drops(self.fd.as_raw_fd()).unwrap_or(0));
        self.drops
    }

    fn offload(&self) -> crate::offload::OffloadCounts {
        self.offload
    }
}

/// Frames the kernel dropped on packet socket `fd` for want of room (its buffer or ring) since
/// the last call: PACKET_STATISTICS, which resets as it is read.
pub(crate) fn ring_drops(fd: RawFd) -> Option<u32> {
    // SAFETY: tpacket_stats is two u32 counters.
    let st: libc::tpacket_stats = unsafe { get_opt(fd, libc::SOL_PACKET, libc::PACKET_STATISTICS) }.ok()?;
    Some(st.tp_drops)
}

/// The transmitting half: frames leaving through the interface.
pub struct AfPacketTx {
    fd: OwnedFd,
    batch: TxBatch<BURST>,
    iovecs: Box<[libc::iovec]>,
    msgs: Box<[libc::mmsghdr]>,
    /// Frames the kernel refused (too large, the interface down, ...), by class.
    refused: TxRefused,
    /// The interface's MTU when opened.
    mtu: Option<u32>,
    /// The interface, and its carrier, asked when the kernel drops a frame (ENOBUFS): without
    /// carrier it is refused.
    carrier: crate::iface::CarrierReader,
}

// SAFETY: the raw pointers in `msgs` refer only to this struct's own boxed `iovecs`, which
// point into its own batch, and are rewritten before each use; nothing is shared.
unsafe impl Send for AfPacketTx {}

impl AfPacketTx {
    /// Opens the transmitting side of `ifname` for frames of up to `max_frame` bytes.
    pub fn open(ifname: &str, max_frame: usize) -> Result<AfPacketTx, Error> {
        let idx = ifindex(ifname)?;
        // Protocol 0: this socket receives nothing, it only sends.
        let fd = packet_socket(ifname, idx, 0)?;
        let _ = set_opt(fd.as_raw_fd(), libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &1i32);
        let _ = set_opt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, &(8i32 << 20));
        Ok(AfPacketTx {
            fd,
            batch: TxBatch::new(max_frame),
            // SAFETY: iovec and mmsghdr are plain data; zero is a valid value.
            iovecs: (0..BURST).map(|_| unsafe { zeroed() }).collect(),
            msgs: (0..BURST).map(|_| unsafe { zeroed() }).collect(),
            refused: TxRefused::default(),
            mtu: crate::iface::mtu(ifname),
            carrier: crate::iface::CarrierReader::for_port(ifname)?,
        })
    }

    /// Like [`open`](Self::open), but frames go through the interface's qdisc and tc
    /// programs (not straight to the driver) with socket mark `mark` (0: none): `attach` sends
    /// back through the interface it steers, whose program lets frames with the mark pass.
    pub fn open_marked(ifname: &str, max_frame: usize, mark: u32) -> Result<AfPacketTx, Error> {
        let tx = AfPacketTx::open(ifname, max_frame)?;
        let fd = tx.fd.as_raw_fd();
        let fail = |what: &str, e| failure(ifname, what, e, "CAP_NET_ADMIN");
        set_opt(fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &0i32)
            .map_err(|e| fail("cannot send through the qdisc", e))?;
        set_opt(fd, libc::SOL_SOCKET, libc::SO_MARK, &mark)
            .map_err(|e| fail("cannot set the socket mark", e))?;
        Ok(tx)
    }

    /// The longest frame the interface sends: its MTU, the Ethernet header and a VLAN tag.
    pub fn max_frame(&self) -> Option<usize> {
        self.mtu.map(|m| m as usize + 14 + 4)
    }
}

impl TxPort for AfPacketTx {
    #[inline]
    fn send(&mut self, _release: Nanos, _wire_len: u32, data: &[u8]) -> bool {
        self.batch.push(data, &mut self.refused)
    }

    fn queued(&self) -> usize {
        self.batch.len()
    }

    fn refused(&mut self, _fresh: bool) -> TxRefused {
        self.refused
    }

    fn flush(&mut self) -> Result<(), Error> {
        let mut start = 0;
        while start < self.batch.len() {
            let n = self.batch.len() - start;
            for k in 0..n {
                let frame = self.batch.frame_mut(start + k);
                self.iovecs[k].iov_base = frame.as_mut_ptr() as *mut libc::c_void;
                self.iovecs[k].iov_len = frame.len();
                // SAFETY: msghdr is plain data; zero is a valid value.
                self.msgs[k].msg_hdr = unsafe { zeroed() };
                self.msgs[k].msg_hdr.msg_iov = &mut self.iovecs[k];
                self.msgs[k].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: the n headers point at iovecs into the batch's frames, with their lengths;
            // the batch is not touched until the call returns.
            let sent = unsafe { libc::sendmmsg(self.fd.as_raw_fd(), self.msgs.as_mut_ptr(), n as u32, 0) };
            if sent < 0 {
                let errno = last_os_error().raw_os_error().unwrap_or(0);
                match errno {
                    libc::EAGAIN | libc::EINTR => {
                        // The socket's send buffer is full: keep the rest for the next flush.
                        self.batch.consume(start);
                        return Ok(());
                    }
                    // The kernel dropped the frame (NET_XMIT_DROP). Without carrier nothing can
                    // leave: refused, and the others go on. With carrier it is congestion (the
                    // peer's backlog, a qdisc's queue) that passes: the frame is sent again on
                    // a later flush, as a device queue would hold it.
                    libc::ENOBUFS if !self.carrier.has_carrier() => {
                        self.refused.add(TxErrorClass::Down, errno, self.batch.frame(start).len());
                        start += 1;
                        continue;
                    }
                    libc::ENOBUFS => {
                        self.batch.consume(start);
                        return Ok(());
                    }
                    _ => match TxErrorClass::of_errno(errno) {
                        // Down or gone: what is queued cannot leave. Down may come back; gone
                        // (the interface deleted) never does, and the run ends saying so.
                        TxErrorClass::Down => {
                            for i in start..self.batch.len() {
                                self.refused.add(TxErrorClass::Down, errno, self.batch.frame(i).len());
                            }
                            if matches!(errno, libc::ENXIO | libc::ENODEV) {
                                self.batch.consume(usize::MAX);
                                return Err(gone(self.carrier.ifname()));
                            }
                            break;
                        }
                        // sendmmsg fails on the batch's first frame only: that one is refused,
                        // the others go on.
                        class => {
                            self.refused.add(class, errno, self.batch.frame(start).len());
                            start += 1;
                            continue;
                        }
                    },
                }
            }
            start += sent.max(1) as usize;
        }
        self.batch.consume(usize::MAX);
        Ok(())
    }
}

/// A plain packet socket on one interface, for tests and tools that talk to the kernel
/// directly: it sends frames with or without a virtio-net header (a GSO super-frame, a partial
/// checksum, as a local sender's stack would hand them down) and reads frames as the kernel
/// delivers them (with the header when asked for), 16 MiB of them at most. Blocking reads with
/// a timeout.
pub struct RawSocket {
    fd: OwnedFd,
    vnet: bool,
}

impl RawSocket {
    /// Opens a socket on `ifname` for every protocol; `vnet` prefixes every frame read or
    /// written with a `struct virtio_net_hdr`.
    pub fn open(ifname: &str, vnet: bool) -> Result<RawSocket, Error> {
        let idx = ifindex(ifname)?;
        let fd = packet_socket(ifname, idx, (libc::ETH_P_ALL as u16).to_be())?;
        if vnet {
            set_opt(fd.as_raw_fd(), libc::SOL_PACKET, PACKET_VNET_HDR, &1i32)
                .map_err(|e| failure(ifname, "cannot ask for virtio-net headers", e, "CAP_NET_RAW"))?;
        }
        let _ = set_opt(fd.as_raw_fd(), libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32);
        let _ = set_opt(fd.as_raw_fd(), libc::SOL_PACKET, PACKET_AUXDATA, &1i32);
        // A burst read after it arrived: a frame built from a page takes a page of the buffer
        // whatever its length, and the default (208 KiB) holds about 50.
        set_receive_buffer(fd.as_raw_fd(), 16 << 20);
        Ok(RawSocket { fd, vnet })
    }

    /// Sends one frame, after its virtio-net header on a `vnet` socket.
    pub fn send(&self, bytes: &[u8]) -> std::io::Result<()> {
        // SAFETY: `bytes` is a live slice and the length passed is its own.
        let rc =
            unsafe { libc::send(self.fd.as_raw_fd(), bytes.as_ptr() as *const libc::c_void, bytes.len(), 0) };
        if rc < 0 {
            Err(last_os_error())
        } else {
            Ok(())
        }
    }

    /// The next frame (after its virtio-net header on a `vnet` socket), with a VLAN tag the
    /// kernel kept apart put back, or `None` when none comes within `timeout`.
    pub fn recv(&self, timeout: std::time::Duration) -> Option<Vec<u8>> {
        if !readable(self.fd.as_raw_fd(), timeout) {
            return None;
        }
        let lead = if self.vnet { VNET_HDR } else { 0 };
        let mut buf = vec![0u8; TAG_ROOM + SUPER_FRAME + lead];
        let mut ctrl = [0u8; CMSG_SPACE];
        let mut iov = libc::iovec {
            iov_base: buf[TAG_ROOM..].as_mut_ptr() as *mut libc::c_void,
            iov_len: buf.len() - TAG_ROOM,
        };
        // SAFETY: msghdr is plain data; zero is valid; it points at the live locals above.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctrl.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = ctrl.len() as _;
        // SAFETY: the message points at live buffers with their own lengths.
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            return None;
        }
        let end = TAG_ROOM + n as usize;
        // SAFETY: `msg` was just filled by recvmsg and its control buffer is live.
        let start = match unsafe { kept_vlan_tag(&msg) } {
            Some(tag) => insert_tag(&mut buf, TAG_ROOM, end, lead, tag),
            None => TAG_ROOM,
        };
        Some(buf[start..end].to_vec())
    }
}

/// Whether a frame waits on socket `fd` (in its ring or its queue), waiting up to `timeout`
/// for one.
fn readable(fd: RawFd, timeout: std::time::Duration) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one live pollfd.
    let ready = unsafe { libc::poll(&mut p, 1, ms) };
    ready > 0 && p.revents & libc::POLLIN != 0
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
        // `as _`: musl deprecates naming its time_t.
        tv_sec: (timeout.as_nanos() / 1_000_000_000) as _,
        tv_nsec: (timeout.as_nanos() % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `polls` and `ts` are live locals of the right types; a null sigmask means none.
    unsafe { libc::ppoll(polls.as_mut_ptr(), n as libc::nfds_t, &ts, std::ptr::null()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_tag_goes_back_behind_the_addresses() {
        let mut buf = vec![0u8; TAG_ROOM + VNET_HDR + 20];
        for (i, b) in buf[TAG_ROOM..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let end = buf.len();
        let start = insert_tag(&mut buf, TAG_ROOM, end, VNET_HDR, [0x81, 0x00, 0x00, 0x05]);
        assert_eq!(start, 0);
        // The header and the addresses moved to the front, the tag behind them, the rest stays.
        assert_eq!(&buf[..VNET_HDR + 12], &(0..22).collect::<Vec<u8>>()[..]);
        assert_eq!(&buf[VNET_HDR + 12..VNET_HDR + 16], &[0x81, 0x00, 0x00, 0x05]);
        assert_eq!(&buf[VNET_HDR + 16..], &(22..30).collect::<Vec<u8>>()[..]);
    }
}
