//! Live port through AF_XDP sockets: frames go from the driver to pathem without the kernel's
//! network stack, and back.
//!
//! One socket per receive queue of the interface, each with its own UMEM. Queue 0's UMEM is
//! split in two: the first half feeds its fill ring for receiving, the second half is a free
//! list for transmitting (all frames leave through queue 0's socket, so a flow keeps its order
//! on the way out). [`open`] returns the port's two halves, each owning its rings, so the
//! receive half can serve one direction and the transmit half the other, even on different
//! threads. The receive half reads every queue and merges their frames in the order of the
//! XDP program's receive stamps: the path sees one arrival sequence, so a rate and a queue stay
//! one bottleneck however the interface spreads its flows (RSS), and a flow, which RSS keeps on
//! one queue, stays in order.
//!
//! The XDP program that steers the interface's frames into the socket is five instructions,
//! assembled here (its source is the comment on `redirect_program`); it needs no libxdp or
//! libbpf. It is attached through a BPF link, which the kernel removes when the link's file
//! descriptor closes: on exit, on a crash, even after SIGKILL, no stale program stays behind.
//! Native (driver) mode is tried first, then generic mode; zero-copy first, then copy mode.
//! Frames are copied into the delay line at ingress, so a UMEM frame returns to the fill ring
//! at once.

use crate::bpf::{
    insn, map_create, map_put, owned, BPF_PROG_TYPE_XDP, BPF_PSEUDO_MAP_FD, BPF_XDP, FN_REDIRECT_MAP,
    XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE,
};
use crate::iface::failure as fail;
use crate::mmap::Mmap;
use crate::port::{wire_time, FallbackStamps, PollAt, RxFrame, RxPort, TxErrorClass, TxPort, TxRefused};
use crate::Error;
use pathem_model::Nanos;
use std::mem::size_of;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

const FRAME_SIZE: usize = 4096;
const RX_FRAMES: usize = 2048;
const TX_FRAMES: usize = 2048;
const RING: u32 = 2048;
/// Frames moved per call.
pub const BURST: usize = 64;
/// Longest frame an AF_XDP port carries (a UMEM frame, less the driver's headroom).
pub const MAX_FRAME: usize = 3498;

const SOL_XDP: i32 = 283;
const XDP_MMAP_OFFSETS: i32 = 1;
const XDP_RX_RING: i32 = 2;
const XDP_TX_RING: i32 = 3;
const XDP_UMEM_REG: i32 = 4;
const XDP_UMEM_FILL_RING: i32 = 5;
const XDP_UMEM_COMPLETION_RING: i32 = 6;
const XDP_STATISTICS: i32 = 7;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_RING_NEED_WAKEUP: u32 = 1;
const XDP_PGOFF_RX_RING: i64 = 0;
const XDP_PGOFF_TX_RING: i64 = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: i64 = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;

#[repr(C)]
struct XdpUmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

/// struct xdp_statistics (the first three fields exist since 4.18, the rest since 5.9).
#[repr(C)]
#[derive(Default)]
struct XdpStatistics {
    rx_dropped: u64,
    rx_invalid_descs: u64,
    tx_invalid_descs: u64,
    rx_ring_full: u64,
    rx_fill_ring_empty_descs: u64,
    tx_ring_empty_descs: u64,
}

#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct XdpDesc {
    addr: u64,
    len: u32,
    options: u32,
}

fn os_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Marks the receive timestamp the XDP program leaves in front of a frame ("pathemts").
const STAMP_MAGIC: u64 = u64::from_le_bytes(*b"pathemts");
/// Bytes of metadata in front of a received frame: the stamp, then the magic.
const META_LEN: usize = 16;

/// The XDP program, in C:
/// ```c
/// SEC("xdp") int pathem_redirect(struct xdp_md *ctx) {
///     if (bpf_xdp_adjust_meta(ctx, -16) == 0) {
///         __u64 now = bpf_ktime_get_ns();             /* CLOCK_MONOTONIC */
///         __u64 *meta = (void *)(long)ctx->data_meta;
///         if ((void *)(meta + 2) <= (void *)(long)ctx->data) {
///             meta[0] = now;
///             meta[1] = STAMP_MAGIC;
///         }
///     }
///     return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
/// }
/// ```
/// The stamp is taken as the driver hands the frame over, before it waits in the ring for
/// pathem to read it; AF_XDP copies the metadata with the frame. Where a driver has no room
/// for metadata, frames go without and pathem stamps them when it reads them. A queue without
/// a socket passes its frames to the stack (the `XDP_PASS` fallback).
fn redirect_program(map_fd: i32, stamp: bool) -> Vec<u8> {
    let magic = STAMP_MAGIC.to_le_bytes();
    let (lo, hi) = (
        i32::from_le_bytes([magic[0], magic[1], magic[2], magic[3]]),
        i32::from_le_bytes([magic[4], magic[5], magic[6], magic[7]]),
    );
    let stamping = [
        insn(0xb7, 2, 0, 0, -(META_LEN as i32)), //  0: r2 = -16 (r1 is ctx)
        insn(0x85, 0, 0, 0, 54),                 //  1: call bpf_xdp_adjust_meta
        insn(0x55, 0, 0, 10, 0),                 //  2: if r0 != 0 goto 13
        insn(0x85, 0, 0, 0, 5),                  //  3: call bpf_ktime_get_ns
        insn(0x61, 2, 6, 0, 0),                  //  4: r2 = ctx->data
        insn(0x61, 3, 6, 8, 0),                  //  5: r3 = ctx->data_meta
        insn(0xbf, 4, 3, 0, 0),                  //  6: r4 = r3
        insn(0x07, 4, 0, 0, META_LEN as i32),    //  7: r4 += 16
        insn(0x2d, 4, 2, 4, 0),                  //  8: if r4 > r2 goto 13
        insn(0x7b, 3, 0, 0, 0),                  //  9: *(u64 *)(r3 + 0) = r0
        insn(0x18, 1, 0, 0, lo),                 // 10: r1 = STAMP_MAGIC (ld_imm64)
        insn(0x00, 0, 0, 0, hi),                 // 11:      (second half)
        insn(0x7b, 3, 1, 8, 0),                  // 12: *(u64 *)(r3 + 8) = r1
    ];
    let redirect = [
        insn(0x61, 2, 6, 16, 0),                     // r2 = ctx->rx_queue_index
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd), // r1 = map (ld_imm64)
        insn(0x00, 0, 0, 0, 0),                      //      (second half)
        insn(0xb7, 3, 0, 0, 2),                      // r3 = XDP_PASS
        insn(0x85, 0, 0, 0, FN_REDIRECT_MAP),        // call bpf_redirect_map
        insn(0x95, 0, 0, 0, 0),                      // exit
    ];
    let ctx = [insn(0xbf, 6, 1, 0, 0)]; // r6 = ctx (kept across calls)
    let stamping: &[[u8; 8]] = if stamp { &stamping } else { &[] };
    [&ctx[..], stamping, &redirect[..]].concat().concat()
}

/// Loads the XDP program: the stamping one, or where the kernel refuses it (no metadata
/// helpers), the plain redirect. Returns the program and whether it stamps.
fn load_program(ifname: &str, map_fd: i32) -> Result<(OwnedFd, bool), Error> {
    let mut last = None;
    for stamp in [true, false] {
        match crate::bpf::load(BPF_PROG_TYPE_XDP, BPF_XDP, &redirect_program(map_fd, stamp), "pathem") {
            Ok(fd) => return Ok((fd, stamp)),
            Err(e) => last = Some(e),
        }
    }
    let (e, msg) = last.unwrap_or_else(|| (os_err(), String::new()));
    Err(fail(
        ifname,
        &format!("cannot load the XDP program ({})", msg.trim()),
        e,
        "CAP_BPF and CAP_NET_ADMIN",
    ))
}

/// What keeps the steering in place: the map, the program, the link.
struct Steering {
    _map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    mode: &'static str,
    /// The program stamps frames (the kernel took the metadata helpers).
    stamps: bool,
}

/// Steers the frames of receive queue `q` into socket `xsks[q]`.
fn steer(ifname: &str, ifindex: u32, xsks: &[RawFd]) -> Result<Steering, Error> {
    let map = map_create(BPF_MAP_TYPE_XSKMAP, xsks.len() as u32)
        .map_err(|e| fail(ifname, "cannot create the XSK map", e, "CAP_BPF"))?;

    let (prog, stamps) = load_program(ifname, map.as_raw_fd())?;

    for (queue, &xsk) in xsks.iter().enumerate() {
        map_put(&map, queue as u32, xsk as u32)
            .map_err(|e| fail(ifname, "cannot register the socket", e, "CAP_BPF"))?;
    }

    let mut last = None;
    for (flags, mode) in [(XDP_FLAGS_DRV_MODE, "native"), (XDP_FLAGS_SKB_MODE, "generic")] {
        match crate::bpf::link(&prog, ifindex, BPF_XDP, flags) {
            Ok(link) => return Ok(Steering { _map: map, _prog: prog, _link: link, mode, stamps }),
            Err(e) => last = Some(e),
        }
    }
    let e = last.unwrap_or_else(os_err);
    let hint = if e.raw_os_error() == Some(libc::EBUSY) {
        " (another XDP program is attached; detach it with `ip link set IF xdp off`)"
    } else {
        ""
    };
    Err(fail(ifname, &format!("cannot attach the XDP program{hint}"), e, "CAP_NET_ADMIN"))
}

/// An XDP program that gives every frame the same verdict, attached to an interface for as
/// long as this lives (a BPF link: gone with the process, even after SIGKILL).
pub struct FixedVerdict {
    _prog: OwnedFd,
    _link: OwnedFd,
}

/// Attaches an XDP program that passes every frame on to `ifname` in native mode.
///
/// On a veth, a native XDP program makes the kernel stop segmentation offload on the peer
/// (`veth_fix_features`): a local sender's stack then cuts its super-frames in software before
/// they cross, and the interface delivers wire frames. Ports that cannot cut super-frames
/// themselves (DPDK's `net_af_packet`, whose ring slots would truncate them) use this. It also
/// makes a veth poll with NAPI, which frames sent by `ndo_xdp_xmit` need ([`crate::xdpgen`]).
pub fn pass_through(ifname: &str) -> Result<FixedVerdict, Error> {
    fixed_verdict(ifname, XDP_PASS, "pass-through")
}

/// Attaches an XDP program that drops every frame to `ifname` in native mode, for as long as
/// the result lives: a sink that costs the receiver next to nothing. A veth counts the frames
/// it drops as received (`rx_packets`).
pub fn drop_all(ifname: &str) -> Result<FixedVerdict, Error> {
    fixed_verdict(ifname, XDP_DROP, "dropping")
}

const XDP_DROP: i32 = 1;
const XDP_PASS: i32 = 2;

fn fixed_verdict(ifname: &str, verdict: i32, what: &str) -> Result<FixedVerdict, Error> {
    let ifindex = crate::afpacket::ifindex(ifname)? as u32;
    let code = [insn(0xb7, 0, 0, 0, verdict), insn(0x95, 0, 0, 0, 0)].concat(); // r0 = verdict; exit
    let prog = crate::bpf::load(BPF_PROG_TYPE_XDP, BPF_XDP, &code, "pathem")
        .map_err(|(e, _)| fail(ifname, &format!("cannot load the {what} XDP program"), e, "CAP_BPF"))?;
    let link = crate::bpf::link(&prog, ifindex, BPF_XDP, XDP_FLAGS_DRV_MODE)
        .map_err(|e| fail(ifname, &format!("cannot attach the {what} XDP program"), e, "CAP_NET_ADMIN"))?;
    Ok(FixedVerdict { _prog: prog, _link: link })
}

/// A ring shared with the kernel.
struct Ring {
    _map: Mmap,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut u8,
    mask: u32,
}

impl Ring {
    fn map(fd: RawFd, off: &RingOffset, pgoff: i64, entry: usize, ifname: &str) -> Result<Ring, Error> {
        let len = off.desc as usize + RING as usize * entry;
        let map = Mmap::socket(fd, len, pgoff)
            .map_err(|e| fail(ifname, "cannot map an AF_XDP ring", e, "CAP_NET_RAW"))?;
        let base = map.ptr();
        // SAFETY: the offsets come from XDP_MMAP_OFFSETS and lie inside the mapping; the
        // producer/consumer/flags words are u32s the kernel also accesses atomically.
        unsafe {
            Ok(Ring {
                _map: map,
                producer: base.add(off.producer as usize) as *const AtomicU32,
                consumer: base.add(off.consumer as usize) as *const AtomicU32,
                flags: base.add(off.flags as usize) as *const AtomicU32,
                desc: base.add(off.desc as usize),
                mask: RING - 1,
            })
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping owned by self (see Ring::map).
        unsafe { &*self.producer }
    }
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.consumer }
    }
    fn needs_wakeup(&self) -> bool {
        // SAFETY: as above.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }
    /// Entry `i` of a ring of u64 addresses (fill, completion).
    fn addr(&self, i: u32) -> *mut u64 {
        // SAFETY: the index is masked into the ring's RING entries of 8 bytes.
        unsafe { (self.desc as *mut u64).add((i & self.mask) as usize) }
    }
    /// Entry `i` of a ring of descriptors (rx, tx).
    fn desc(&self, i: u32) -> *mut XdpDesc {
        // SAFETY: the index is masked into the ring's RING entries of 16 bytes.
        unsafe { (self.desc as *mut XdpDesc).add((i & self.mask) as usize) }
    }
}

/// A socket and its UMEM. Queue 0's is shared by both halves and holds the steering; the
/// sockets of the other queues only receive.
struct Socket {
    fd: OwnedFd,
    umem: Mmap,
    _steering: Option<Steering>,
}

impl Socket {
    fn kick_tx(&self) -> std::io::Result<()> {
        // SAFETY: a zero-length sendto on our own socket only asks the kernel to process the
        // TX ring.
        let rc = unsafe {
            libc::sendto(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0)
        };
        if rc < 0 {
            Err(os_err())
        } else {
            Ok(())
        }
    }
    fn kick_rx(&self) {
        // SAFETY: a zero-length recvfrom on our own socket only asks the kernel to refill.
        unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
    }
    /// Where the `len` bytes at UMEM offset `addr` start, and how many of them lie within the
    /// buffer of FRAME_SIZE that holds `addr` (none past the UMEM's end): a descriptor the
    /// kernel checked always fits, but nothing here trusts that.
    fn frame(&self, addr: u64, len: usize) -> (*mut u8, usize) {
        let at = usize::try_from(addr).unwrap_or(usize::MAX).min(self.umem.len());
        let len = len.min(FRAME_SIZE - at % FRAME_SIZE).min(self.umem.len() - at);
        // SAFETY: `at` is at most the UMEM's length: within the mapping or one past its end.
        (unsafe { self.umem.ptr().add(at) }, len)
    }

    /// The XDP program's receive stamp in front of the received frame at `addr`, if it left
    /// one; with `clear`, the marker is cleared so that a later frame in the same buffer cannot
    /// reuse it (a frame is peeked at while it waits its turn, cleared when it is taken).
    fn stamp(&self, addr: u64, clear: bool) -> Option<Nanos> {
        if (addr as usize) % FRAME_SIZE < META_LEN || addr as usize > self.umem.len() {
            return None;
        }
        // SAFETY: the META_LEN bytes before the frame lie in the headroom of the same UMEM
        // buffer (checked above), which belongs to the receiving half until it is returned to
        // the fill ring; unaligned accesses because the kernel may place frames at any offset.
        unsafe {
            let meta = self.umem.ptr().add(addr as usize - META_LEN) as *mut u64;
            let magic = meta.add(1);
            if std::ptr::read_unaligned(magic) != STAMP_MAGIC {
                return None;
            }
            if clear {
                std::ptr::write_unaligned(magic, 0);
            }
            Some(Nanos(std::ptr::read_unaligned(meta)))
        }
    }
}

/// The socket's XDP_STATISTICS, where the kernel gives them.
fn statistics(fd: RawFd) -> Option<XdpStatistics> {
    // SAFETY: XdpStatistics is six u64 counters (older kernels fill fewer; the rest stay zero).
    unsafe { crate::afpacket::get_opt(fd, SOL_XDP, XDP_STATISTICS) }.ok()
}

/// One receive queue's socket and rings.
struct RxQueue {
    /// The interface's queue number.
    id: u32,
    sock: Arc<Socket>,
    rx: Ring,
    fill: Ring,
}

/// One queue's place while several are merged in a burst ([`XdpRx::recv_merged`]).
#[derive(Clone, Copy, Default)]
struct Head {
    /// The consumer index at the burst's start.
    cons: u32,
    /// Frames the burst can take from this queue: those waiting, at most the burst's size.
    reach: u32,
    taken: u32,
    /// For a software stamp: the wire time of the frames within reach behind the head.
    behind: Option<Nanos>,
}

/// The receiving half: a socket on each of the interface's receive queues.
pub struct XdpRx {
    queues: Vec<RxQueue>,
    /// Per queue, while merging one burst.
    heads: Vec<Head>,
    line_rate: u64,
    last_arrival: Nanos,
    more: bool,
    offload: crate::offload::OffloadCounts,
}

/// The transmitting half.
pub struct XdpTx {
    sock: Arc<Socket>,
    tx: Ring,
    comp: Ring,
    free: Vec<u64>,
    queued: u32,
    /// Frames the kernel dropped from the transmit ring (`tx_invalid_descs`), read when a
    /// kick fails. A kick refused while the interface is down leaves the frames in the ring,
    /// sent once it is back (or reported as still queued at the end): they are not refused.
    refused: TxRefused,
    mtu: Option<u32>,
    /// The interface, and its carrier, asked when a kick fails: a frame the device dropped
    /// without carrier is refused as down.
    carrier: crate::iface::CarrierReader,
    /// The kernel's count of invalid transmit descriptors, as last read into `refused`.
    invalid: u64,
}

// SAFETY: each half touches only its own two rings and its own part of the UMEM (receive
// frames or transmit frames), and the kernel synchronizes with it through the rings'
// atomic producer/consumer words; the socket itself is safe to use from any thread.
unsafe impl Send for XdpRx {}
// SAFETY: as above.
unsafe impl Send for XdpTx {}
// SAFETY: the halves share `Socket` for its fd and its mapping's address, which never change;
// what they write through it (a frame's bytes, the receive stamp's marker in its headroom)
// lies in buffers the writing half alone owns at the time (receive buffers between the rx
// and the fill ring, transmit buffers off the rings), so no byte is written by both.
unsafe impl Sync for Socket {}
// SAFETY: as above.
unsafe impl Send for Socket {}

/// A socket bound to one queue, before the steering.
struct Bound {
    fd: OwnedFd,
    umem: Mmap,
    rx: Ring,
    fill: Ring,
    /// The transmit and completion rings (queue 0's socket only).
    tx: Option<(Ring, Ring)>,
    copy: &'static str,
}

/// Opens an AF_XDP socket on each receive queue of `ifname` (its frames steered there by one
/// XDP program, queue by queue), and returns the receiving half (all the sockets), the
/// transmitting half (queue 0's socket) and the mode obtained.
pub fn open(ifname: &str) -> Result<(XdpRx, XdpTx, String), Error> {
    let ifindex = crate::afpacket::ifindex(ifname)? as u32;
    let queues = crate::iface::rx_queues(ifname);
    if queues > crate::MAX_RX_QUEUES {
        return Err(Error::Interface {
            name: ifname.into(),
            reason: format!(
                "has {queues} receive queues and an AF_XDP port reads at most {}: run `ethtool -L {ifname} combined {}` first, or use afpacket:{ifname}",
                crate::MAX_RX_QUEUES,
                crate::MAX_RX_QUEUES
            ),
        });
    }
    let bound = (0..queues as u32).map(|q| bind_queue(ifname, ifindex, q)).collect::<Result<Vec<_>, _>>()?;
    let fds: Vec<RawFd> = bound.iter().map(|b| b.fd.as_raw_fd()).collect();
    let steering = steer(ifname, ifindex, &fds)?;
    let copy = if bound.iter().all(|b| b.copy == "zero-copy") { "zero-copy" } else { "copy" };
    let stamped = if steering.stamps {
        "kernel receive stamps from XDP (bpf_ktime_get_ns)"
    } else {
        "software receive stamps when read"
    };
    let spread = if queues > 1 { format!(", {queues} receive queues") } else { String::new() };
    let mode = format!("{} XDP, {copy}, {stamped}{spread}", steering.mode);
    let mut steering = Some(steering);
    let mut rx_queues = Vec::with_capacity(queues);
    let mut tx_rings = None;
    for (id, b) in (0..).zip(bound) {
        let sock = Arc::new(Socket { fd: b.fd, umem: b.umem, _steering: steering.take() });
        if let Some(rings) = b.tx {
            tx_rings = Some((sock.clone(), rings));
        }
        rx_queues.push(RxQueue { id, sock, rx: b.rx, fill: b.fill });
    }
    let Some((sock, (tx, comp))) = tx_rings else {
        unreachable!("queue 0 is always bound with a transmit ring")
    };
    let free = (0..TX_FRAMES as u64).map(|i| (RX_FRAMES as u64 + i) * FRAME_SIZE as u64).collect();
    Ok((
        XdpRx {
            heads: vec![Head::default(); rx_queues.len()],
            queues: rx_queues,
            line_rate: crate::iface::line_rate_bps(ifname),
            last_arrival: Nanos::ZERO,
            more: false,
            offload: Default::default(),
        },
        XdpTx {
            sock,
            tx,
            comp,
            free,
            queued: 0,
            refused: TxRefused::default(),
            mtu: crate::iface::mtu(ifname),
            carrier: crate::iface::CarrierReader::for_port(ifname)?,
            invalid: 0,
        },
        mode,
    ))
}

/// Opens a socket with its UMEM on receive queue `queue` of the interface and binds it; the
/// socket of queue 0 also transmits.
fn bind_queue(ifname: &str, ifindex: u32, queue: u32) -> Result<Bound, Error> {
    let transmits = queue == 0;
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(fail(ifname, "cannot open an AF_XDP socket", os_err(), "CAP_NET_RAW"));
    }
    // SAFETY: a descriptor socket(2) just returned, owned by nothing else.
    let fd = unsafe { owned(fd) };
    let raw = fd.as_raw_fd();
    let umem_len = FRAME_SIZE * (RX_FRAMES + if transmits { TX_FRAMES } else { 0 });
    let umem =
        Mmap::anonymous(umem_len).map_err(|e| fail(ifname, "cannot allocate the UMEM", e, "CAP_IPC_LOCK"))?;
    let reg = XdpUmemReg {
        addr: umem.ptr() as u64,
        len: umem_len as u64,
        chunk_size: FRAME_SIZE as u32,
        headroom: 0,
    };
    let setopt = |name: i32, v: *const libc::c_void, len: usize, what: &str| -> Result<(), Error> {
        // SAFETY: v points to a live value of `len` bytes.
        let rc = unsafe { libc::setsockopt(raw, SOL_XDP, name, v, len as u32) };
        if rc < 0 {
            Err(fail(ifname, what, os_err(), "CAP_NET_RAW"))
        } else {
            Ok(())
        }
    };
    setopt(
        XDP_UMEM_REG,
        &reg as *const XdpUmemReg as *const libc::c_void,
        size_of::<XdpUmemReg>(),
        "cannot register the UMEM",
    )?;
    let ring = RING;
    let rings: &[(i32, &str)] = &[
        (XDP_UMEM_FILL_RING, "fill ring"),
        (XDP_UMEM_COMPLETION_RING, "completion ring"),
        (XDP_RX_RING, "rx ring"),
        (XDP_TX_RING, "tx ring"),
    ];
    for &(opt, what) in &rings[..if transmits { 4 } else { 3 }] {
        setopt(opt, &ring as *const u32 as *const libc::c_void, 4, &format!("cannot size the {what}"))?;
    }
    let mut off = MmapOffsets::default();
    let mut len = size_of::<MmapOffsets>() as u32;
    // SAFETY: `off` is a live MmapOffsets and `len` its size; the kernel writes at most that.
    if unsafe {
        libc::getsockopt(
            raw,
            SOL_XDP,
            XDP_MMAP_OFFSETS,
            &mut off as *mut MmapOffsets as *mut libc::c_void,
            &mut len,
        )
    } < 0
    {
        return Err(fail(ifname, "cannot read the ring offsets", os_err(), "CAP_NET_RAW"));
    }
    let rx = Ring::map(raw, &off.rx, XDP_PGOFF_RX_RING, size_of::<XdpDesc>(), ifname)?;
    let fill = Ring::map(raw, &off.fr, XDP_UMEM_PGOFF_FILL_RING, 8, ifname)?;
    let tx = match transmits {
        true => Some((
            Ring::map(raw, &off.tx, XDP_PGOFF_TX_RING, size_of::<XdpDesc>(), ifname)?,
            Ring::map(raw, &off.cr, XDP_UMEM_PGOFF_COMPLETION_RING, 8, ifname)?,
        )),
        false => None,
    };

    // Give every receive frame to the kernel before binding.
    for i in 0..RX_FRAMES as u32 {
        // SAFETY: the fill ring has RING ≥ RX_FRAMES entries and nobody else produces into it.
        unsafe { *fill.addr(i) = u64::from(i) * FRAME_SIZE as u64 };
    }
    fill.producer().store(RX_FRAMES as u32, Ordering::Release);

    // A socket closed a moment ago (a previous run) is released by the kernel asynchronously:
    // the queue reads as busy for a few milliseconds.
    for attempt in 0..40 {
        for (flags, copy) in [(XDP_ZEROCOPY, "zero-copy"), (XDP_COPY, "copy")] {
            let addr = SockaddrXdp {
                family: libc::AF_XDP as u16,
                flags: flags | XDP_USE_NEED_WAKEUP,
                ifindex,
                queue_id: queue,
                shared_umem_fd: 0,
            };
            // SAFETY: addr is a properly laid out sockaddr_xdp and the length is its size.
            let rc = unsafe {
                libc::bind(
                    raw,
                    &addr as *const SockaddrXdp as *const libc::sockaddr,
                    size_of::<SockaddrXdp>() as u32,
                )
            };
            if rc == 0 {
                return Ok(Bound { fd, umem, rx, fill, tx, copy });
            }
        }
        if os_err().raw_os_error() != Some(libc::EBUSY) || attempt == 39 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let what = format!("cannot bind the AF_XDP socket to receive queue {queue}");
    Err(fail(ifname, &what, os_err(), "CAP_NET_RAW"))
}

impl XdpRx {
    /// The sockets, for waiting on them.
    pub fn raw_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.queues.iter().map(|q| q.sock.fd.as_raw_fd())
    }

    /// The interface's receive queues this half reads.
    pub fn queue_ids(&self) -> Vec<usize> {
        self.queues.iter().map(|q| q.id as usize).collect()
    }

    /// Deals the receive queues out to `parts` readers, queue `i` to part `i % parts`: this
    /// half keeps part 0's (queue 0 among them, whose socket also transmits), and each other
    /// part with a queue becomes a half of its own, for a thread of its own (`None` for a part
    /// left without one). A queue's socket and UMEM go with it whole.
    pub fn split(&mut self, parts: usize) -> Vec<Option<XdpRx>> {
        let parts = parts.max(1);
        let mut dealt: Vec<Vec<RxQueue>> = (0..parts).map(|_| Vec::new()).collect();
        for (i, q) in std::mem::take(&mut self.queues).into_iter().enumerate() {
            dealt[i % parts].push(q);
        }
        let mut dealt = dealt.into_iter();
        self.queues = dealt.next().unwrap_or_default();
        self.heads = vec![Head::default(); self.queues.len()];
        dealt
            .map(|queues| {
                (!queues.is_empty()).then(|| XdpRx {
                    heads: vec![Head::default(); queues.len()],
                    queues,
                    line_rate: self.line_rate,
                    last_arrival: Nanos::ZERO,
                    more: false,
                    offload: Default::default(),
                })
            })
            .collect()
    }
}

impl RxQueue {
    /// Frames waiting in the receive ring, from its consumer index.
    fn waiting(&self) -> (u32, u32) {
        let cons = self.rx.consumer().load(Ordering::Relaxed);
        (cons, self.rx.producer().load(Ordering::Acquire).wrapping_sub(cons))
    }

    /// Receive descriptor `i`.
    fn desc(&self, i: u32) -> XdpDesc {
        // SAFETY: the index is masked into the ring (`Ring::desc`); a descriptor is plain data.
        unsafe { *self.rx.desc(i) }
    }

    /// The frame of receive descriptor `i`, as a slice of the UMEM.
    ///
    /// # Safety
    /// The kernel has published `i` (it lies between the consumer and the producer read with
    /// Acquire), it has not been released yet, and no other reference to its frame is alive.
    #[allow(clippy::mut_from_ref)] // the frame lies in the UMEM, not in self; see # Safety
    unsafe fn frame(&self, i: u32) -> (XdpDesc, &mut [u8]) {
        let d = self.desc(i);
        // Cut to the UMEM buffer that holds `addr`, within the UMEM.
        let (at, len) = self.sock.frame(d.addr, d.len as usize);
        // SAFETY: `len` bytes from `at` lie in one receive buffer of our UMEM, which the kernel
        // wrote; the frame is ours (nobody else reads or writes it) until it goes back to the
        // fill ring, and the caller holds no other reference to it.
        let data = unsafe { std::slice::from_raw_parts_mut(at, len) };
        (d, data)
    }

    /// Returns `n` frames to the kernel: consumed from the receive ring from `cons`, their
    /// buffers back to the fill ring.
    fn release(&self, cons: u32, n: u32) {
        if n == 0 {
            return;
        }
        let fill_prod = self.fill.producer().load(Ordering::Relaxed);
        for k in 0..n {
            // SAFETY: as in `frame`; the fill ring always has room for the frames taken out
            // of the rx ring (both hold RING entries, and RX_FRAMES buffers circulate).
            unsafe {
                let addr = (*self.rx.desc(cons.wrapping_add(k))).addr;
                *self.fill.addr(fill_prod.wrapping_add(k)) = addr & !(FRAME_SIZE as u64 - 1);
            }
        }
        self.fill.producer().store(fill_prod.wrapping_add(n), Ordering::Release);
        self.rx.consumer().store(cons.wrapping_add(n), Ordering::Release);
    }

    fn wake(&self) {
        if self.fill.needs_wakeup() {
            self.sock.kick_rx();
        }
    }
}

impl RxPort for XdpRx {
    fn recv_burst<F: FnMut(RxFrame<'_>)>(&mut self, now: Nanos, max: usize, f: F) -> Result<usize, Error> {
        match self.queues.len() {
            1 => self.recv_one(now, max, f),
            _ => self.recv_merged(now, max, f),
        }
    }

    fn poll_at(&self) -> PollAt {
        PollAt::live(self.more)
    }

    /// Frames the sockets lost: no fill-ring buffer for them (`rx_dropped`), a full receive
    /// ring (`rx_ring_full`), or descriptors the kernel could not use (`rx_invalid_descs`).
    fn kernel_drops(&mut self) -> u64 {
        self.queues
            .iter()
            .filter_map(|q| statistics(q.sock.fd.as_raw_fd()))
            .map(|st| st.rx_dropped + st.rx_ring_full + st.rx_invalid_descs)
            .sum()
    }

    fn offload(&self) -> crate::offload::OffloadCounts {
        self.offload
    }
}

impl XdpRx {
    /// One queue: its frames in ring order.
    fn recv_one<F: FnMut(RxFrame<'_>)>(&mut self, now: Nanos, max: usize, mut f: F) -> Result<usize, Error> {
        let q = &self.queues[0];
        let (cons, avail) = q.waiting();
        let n = (avail as usize).min(max).min(BURST);
        self.more = n > 0 && n == max.min(BURST);
        if n == 0 {
            q.wake();
            return Ok(0);
        }
        // Frames carry the XDP program's stamp where the driver kept metadata; the others get
        // software stamps read now (the caller's `now` may be stale if the thread was
        // descheduled): now for the last frame, earlier ones by the wire time after them.
        let now = crate::kstamp::monotonic_now().max(now);
        let mut fallback = FallbackStamps::<BURST>::new(now, self.line_rate, n);
        for k in 0..n as u32 {
            // SAFETY: cons..cons+n are published and not yet released; `data` is dropped
            // before the next frame is taken.
            let (d, data) = unsafe { q.frame(cons.wrapping_add(k)) };
            // XDP does not say which checksums the sender left partial: complete those whose
            // field holds exactly the pseudo-header sum and that do not verify (crate::offload).
            if crate::offload::complete_if_partial(data) {
                self.offload.csum_completed += 1;
            }
            let stamp = match q.sock.stamp(d.addr, true).filter(|&t| t <= now) {
                Some(t) => t,
                None => fallback.get(k as usize, |j| u64::from(q.desc(cons.wrapping_add(j as u32)).len)),
            };
            let arrival = stamp.max(self.last_arrival);
            self.last_arrival = arrival;
            f(RxFrame { arrival, wire_len: data.len() as u32, data: &*data });
        }
        // The frames were copied into the delay line: hand them straight back for reuse.
        q.release(cons, n as u32);
        q.wake();
        Ok(n)
    }

    /// Several queues: their frames merged in the order of the XDP program's receive stamps,
    /// so that the path sees one arrival sequence, as from one queue. A frame without a stamp
    /// (a driver without room for metadata, a kernel without the metadata helper) is stamped
    /// no earlier than it can have arrived: now, less the wire time of the frames behind it in
    /// its queue (which came after it) that this burst can take. So the queues' unstamped
    /// frames interleave, a queue holding more going back further, rather than one queue's
    /// going first in every burst; a burst reads at most its own size of descriptors a queue.
    fn recv_merged<F: FnMut(RxFrame<'_>)>(
        &mut self,
        now: Nanos,
        max: usize,
        mut f: F,
    ) -> Result<usize, Error> {
        let now = crate::kstamp::monotonic_now().max(now);
        let want = max.min(BURST);
        let heads = &mut self.heads;
        let mut total = 0usize;
        for (h, q) in heads.iter_mut().zip(&self.queues) {
            let (cons, avail) = q.waiting();
            *h = Head { cons, reach: avail.min(want as u32), taken: 0, behind: None };
            total += avail as usize;
        }
        let n = total.min(want);
        self.more = total > n;
        let line_rate = self.line_rate;
        for _ in 0..n {
            // The queue whose next frame arrived first.
            let mut best = (Nanos(u64::MAX), 0);
            for (i, h) in heads.iter_mut().enumerate().filter(|(_, h)| h.taken < h.reach) {
                let q = &self.queues[i];
                let stamp = q.sock.stamp(q.desc(h.cons.wrapping_add(h.taken)).addr, false);
                let t = stamp.filter(|&t| t <= now).unwrap_or_else(|| {
                    // Worked out once a burst, then less each frame taken (below).
                    let behind = h.behind.get_or_insert_with(|| {
                        (h.taken + 1..h.reach).fold(Nanos::ZERO, |sum, j| {
                            let len = u64::from(q.desc(h.cons.wrapping_add(j)).len);
                            sum.saturating_add(wire_time(len, line_rate))
                        })
                    });
                    now.saturating_sub(*behind)
                });
                if t < best.0 {
                    best = (t, i);
                }
            }
            let i = best.1;
            let h = &mut heads[i];
            let q = &self.queues[i];
            // The next frame's wire time leaves what is behind the new head.
            if let Some(b) = h.behind.as_mut().filter(|_| h.taken + 1 < h.reach) {
                let len = u64::from(q.desc(h.cons.wrapping_add(h.taken + 1)).len);
                *b = b.saturating_sub(wire_time(len, line_rate));
            }
            // SAFETY: taken < waiting: published and not yet released; `data` is dropped before
            // the next frame is taken.
            let (d, data) = unsafe { q.frame(h.cons.wrapping_add(h.taken)) };
            h.taken += 1;
            q.sock.stamp(d.addr, true);
            if crate::offload::complete_if_partial(data) {
                self.offload.csum_completed += 1;
            }
            let arrival = best.0.max(self.last_arrival);
            self.last_arrival = arrival;
            f(RxFrame { arrival, wire_len: data.len() as u32, data: &*data });
        }
        for (q, h) in self.queues.iter().zip(heads.iter()) {
            q.release(h.cons, h.taken);
            q.wake();
        }
        Ok(n)
    }
}

impl XdpTx {
    /// The longest frame the interface sends: its MTU, the Ethernet header and a VLAN tag.
    pub fn max_frame(&self) -> Option<usize> {
        self.mtu.map(|m| m as usize + 14 + 4)
    }

    /// Reads the descriptors the kernel dropped from the transmit ring.
    fn read_refused(&mut self) {
        if let Some(st) = statistics(self.sock.fd.as_raw_fd()) {
            let new = st.tx_invalid_descs.saturating_sub(self.invalid);
            if new > 0 {
                self.invalid = st.tx_invalid_descs;
                self.refused.frames[TxErrorClass::Other as usize] += new;
                self.refused.errno[TxErrorClass::Other as usize] = 0;
            }
        }
    }

    /// Counts the frame the device dropped after the kernel took it from the ring: its length
    /// is the descriptor's before the consumer the kernel last showed.
    #[cold]
    fn dropped_by_device(&mut self) {
        let last = self.tx.consumer().load(Ordering::Acquire).wrapping_sub(1);
        // SAFETY: a descriptor is plain data in the mapped ring (`Ring::desc` masks the index);
        // the kernel has consumed this one, and only we write descriptors.
        let len = unsafe { (*self.tx.desc(last)).len } as usize;
        match self.carrier.has_carrier() {
            false => self.refused.add(TxErrorClass::Down, libc::ENETDOWN, len),
            true => self.refused.add(TxErrorClass::Other, 0, len),
        }
    }

    /// Takes back transmit frames the kernel has finished with.
    fn reclaim(&mut self) {
        let cons = self.comp.consumer().load(Ordering::Relaxed);
        let n = self.comp.producer().load(Ordering::Acquire).wrapping_sub(cons);
        for k in 0..n {
            // SAFETY: entries cons..cons+n were published by the kernel.
            self.free.push(unsafe { *self.comp.addr(cons.wrapping_add(k)) });
        }
        self.comp.consumer().store(cons.wrapping_add(n), Ordering::Release);
    }
}

impl TxPort for XdpTx {
    #[inline]
    fn send(&mut self, _release: Nanos, _wire_len: u32, data: &[u8]) -> bool {
        if data.len() > FRAME_SIZE {
            self.refused.too_large(data.len());
            return true;
        }
        if self.free.is_empty() {
            self.reclaim();
        }
        let prod = self.tx.producer().load(Ordering::Relaxed).wrapping_add(self.queued);
        let room = RING - prod.wrapping_sub(self.tx.consumer().load(Ordering::Acquire));
        let Some(&addr) = self.free.last() else { return false };
        if room == 0 || self.queued as usize == BURST {
            return false;
        }
        self.free.pop();
        let len = data.len();
        // SAFETY: `addr` is a free transmit frame of FRAME_SIZE bytes (≥ len) in our UMEM; the kernel
        // does not read it until we publish its descriptor.
        unsafe {
            let (at, room) = self.sock.frame(addr, len);
            debug_assert_eq!(room, len, "a transmit buffer holds FRAME_SIZE bytes");
            std::ptr::copy_nonoverlapping(data.as_ptr(), at, room);
            *self.tx.desc(prod) = XdpDesc { addr, len: len as u32, options: 0 };
        }
        self.queued += 1;
        true
    }

    fn refused(&mut self, fresh: bool) -> TxRefused {
        if fresh {
            self.read_refused();
        }
        self.refused
    }

    fn queued(&self) -> usize {
        let prod = self.tx.producer().load(Ordering::Relaxed);
        let cons = self.tx.consumer().load(Ordering::Acquire);
        prod.wrapping_sub(cons) as usize + self.queued as usize
    }

    fn flush(&mut self) -> Result<(), Error> {
        if self.queued > 0 {
            let prod = self.tx.producer().load(Ordering::Relaxed);
            self.tx.producer().store(prod.wrapping_add(self.queued), Ordering::Release);
            self.queued = 0;
        }
        // With need-wakeup the kernel says when it must be kicked; it always asks in copy mode,
        // where one kick sends at most 32 frames: kick again while the kernel takes more, so
        // nothing waits in the ring for later traffic. A kick that moves nothing means the
        // device is full (or down): the frames stay queued and the next flush tries again.
        let prod = self.tx.producer().load(Ordering::Relaxed);
        for _ in 0..RING / 32 + 1 {
            let before = self.tx.consumer().load(Ordering::Acquire);
            if before == prod || !self.tx.needs_wakeup() {
                break;
            }
            if let Err(e) = self.sock.kick_tx() {
                match e.raw_os_error() {
                    // In copy mode the device dropped the frame the kernel took last
                    // (NET_XMIT_DROP: no carrier, its peer's backlog full); the kernel has
                    // consumed it and will complete it, unsent. One frame per EBUSY.
                    Some(libc::EBUSY) => self.dropped_by_device(),
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => {}
                    // The socket was unbound: its interface is gone (deleted), for good.
                    Some(libc::ENXIO) => {
                        let lost = self.queued();
                        self.refused.frames[TxErrorClass::Down as usize] += lost as u64;
                        self.refused.errno[TxErrorClass::Down as usize] = libc::ENXIO;
                        return Err(crate::afpacket::gone(self.carrier.ifname()));
                    }
                    _ => {
                        self.read_refused();
                        break;
                    }
                }
            }
            if self.tx.consumer().load(Ordering::Acquire) == before {
                break;
            }
        }
        self.reclaim();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (opcode, offset) of each instruction.
    fn decode(code: &[u8]) -> Vec<(u8, i16)> {
        code.chunks(8).map(|i| (i[0], i16::from_ne_bytes([i[2], i[3]]))).collect()
    }

    #[test]
    fn every_jump_of_the_stamping_program_lands_on_the_redirect() {
        let plain = decode(&redirect_program(7, false));
        let stamping = decode(&redirect_program(7, true));
        assert_eq!(plain.len(), 7);
        assert_eq!(stamping.len(), 20);
        // The redirect is the program's last six instructions, the same in both.
        let redirect_at = stamping.len() - 6;
        assert_eq!(stamping[redirect_at..], plain[1..]);
        for (at, &(op, off)) in stamping.iter().enumerate() {
            if op & 0x07 == 0x05 && op != 0x85 && op != 0x95 {
                assert_eq!(at as i64 + 1 + i64::from(off), redirect_at as i64, "jump at {at}");
            }
        }
        assert_eq!(stamping.last(), Some(&(0x95, 0)));
    }
}
