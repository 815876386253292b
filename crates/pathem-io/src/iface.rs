//! Facts about network interfaces and the offloads pathem turns off while it runs.
//!
//! Receive aggregation (GRO, LRO) merges wire frames into large ones before pathem sees them,
//! so one emulated loss would drop a whole burst (the DEMU paper, §4.3–4.4). pathem decides
//! per wire frame: it turns those offloads off on its ports for the duration of the run and
//! puts them back afterwards, through the same `SIOCETHTOOL` commands `ethtool -K gro off`
//! uses, so what pathem does is what an administrator would type.
//!
//! Every fact is asked of the calling thread's network namespace (an ioctl or a netlink request
//! on a socket it opens), not read from `/sys/class/net`: sysfs shows the namespace it was
//! mounted in, and a thread that entered another one with `setns` (a shell's link, a test
//! bed's forwarder) would read the host's interface of the same name, or none. The one
//! exception is [`rx_queues`]' last resort, where neither ethtool nor the kernel's queue list
//! answers (a kernel before 6.8 and a driver that reports no channels).

use crate::Error;
use std::io::Write as _;
use std::path::PathBuf;

/// The interface's index in the calling thread's namespace, or `None` where it has none.
pub(crate) fn index(ifname: &str) -> Option<u32> {
    let c = std::ffi::CString::new(ifname).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (idx != 0).then_some(idx)
}

/// The names of the interfaces in the calling thread's namespace.
fn names() -> Vec<String> {
    // SAFETY: if_nameindex returns NULL or an array ending in an entry with index 0 and a NULL
    // name, whose names are NUL-terminated strings; it is read to that end, then freed once.
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut at = list;
        while (*at).if_index != 0 && !(*at).if_name.is_null() {
            out.push(std::ffi::CStr::from_ptr((*at).if_name).to_string_lossy().into_owned());
            at = at.add(1);
        }
        libc::if_freenameindex(list);
        out
    }
}

/// Checks that `ifname` names an existing interface and says what is wrong otherwise.
pub fn check_exists(ifname: &str) -> Result<(), Error> {
    if ifname.is_empty() || ifname.len() > 15 || ifname.contains(['/', ' ', ':']) {
        return Err(Error::Interface {
            name: ifname.into(),
            reason: "is not a valid interface name (1 to 15 characters, no '/', ':' or spaces)".into(),
        });
    }
    if index(ifname).is_none() {
        let known = names();
        return Err(Error::Interface {
            name: ifname.into(),
            reason: format!("does not exist in this network namespace (there are: {})", known.join(", ")),
        });
    }
    Ok(())
}

/// The interface's flags (`SIOCGIFFLAGS`); `None` for one that is gone.
fn flags(ifname: &str) -> Option<i32> {
    ifreq(ifname, libc::SIOCGIFFLAGS, 0).ok().map(|ifr| ifreq_int(&ifr))
}

/// Whether the interface's flags have `flag`; false for one that is gone.
fn has_flag(ifname: &str, flag: i32) -> bool {
    flags(ifname).is_some_and(|f| f & flag != 0)
}

/// True when the interface is administratively up (`IFF_UP`).
pub fn is_up(ifname: &str) -> bool {
    has_flag(ifname, libc::IFF_UP)
}

/// Whether the interface is promiscuous (IFF_PROMISC: set by its administrator, not the
/// count a packet socket's membership holds), in the calling thread's namespace.
pub fn is_promiscuous(ifname: &str) -> bool {
    has_flag(ifname, libc::IFF_PROMISC)
}

/// False when the interface has no carrier (or is down, or gone): a frame sent there is
/// dropped by the device. Asked of the calling thread's network namespace (`IFF_RUNNING`,
/// which the kernel sets for an interface up with its carrier), not of sysfs, which shows the
/// namespace it was mounted in (the shell's link runs in another).
pub fn has_carrier(ifname: &str) -> bool {
    CarrierReader::new(ifname).is_ok_and(|r| r.has_carrier())
}

/// Reads one interface's carrier again and again through a socket it keeps (a loop that asks
/// every few milliseconds makes no socket and no close each time, nor the RCU work a closed
/// socket leaves its CPU). The socket belongs to the network namespace of the thread that
/// made the reader, which is the one asked, wherever the reader is used later.
pub struct CarrierReader {
    socket: std::os::fd::OwnedFd,
    ifname: String,
}

impl CarrierReader {
    /// A reader of `ifname` in the calling thread's network namespace.
    pub fn new(ifname: &str) -> std::io::Result<CarrierReader> {
        Ok(CarrierReader { socket: ifreq_socket()?, ifname: ifname.into() })
    }

    /// [`new`](Self::new), for a port opening `ifname`: its error names the interface.
    pub(crate) fn for_port(ifname: &str) -> Result<CarrierReader, crate::Error> {
        CarrierReader::new(ifname).map_err(|e| crate::Error::Interface {
            name: ifname.into(),
            reason: format!("cannot open a socket to read its carrier: {e}"),
        })
    }

    /// The interface it reads.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// As [`has_carrier`]: false when the interface has no carrier, is down, or is gone.
    pub fn has_carrier(&self) -> bool {
        // SAFETY: SIOCGIFFLAGS reads and writes the union as data, never through a pointer.
        unsafe { ifreq_on(&self.socket, &self.ifname, libc::SIOCGIFFLAGS, [0; 24]) }
            .is_ok_and(|ifr| ifreq_int(&ifr) & libc::IFF_RUNNING != 0)
    }
}

/// A datagram socket of the calling thread's network namespace, to ask interface ioctls on.
fn ifreq_socket() -> std::io::Result<std::os::fd::OwnedFd> {
    // SAFETY: a plain socket(2) call; the result is checked and owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket(2) and has no other owner.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// An interface ioctl (`SIOCGIFMTU`, `SIOCSIFFLAGS`, ...) on a struct ifreq naming `ifname`
/// whose int is `value`, asked of the calling thread's network namespace; returns the ifreq
/// as the kernel left it.
/// Only requests that read and write the union as data are taken (EINVAL for any other: one
/// that reads it as a pointer, such as SIOCGIFCONF, would let the kernel write anywhere).
pub(crate) fn ifreq(ifname: &str, req: libc::c_ulong, value: i32) -> std::io::Result<[u8; 40]> {
    const DATA: [libc::c_ulong; 6] = [
        libc::SIOCGIFMTU,
        libc::SIOCSIFMTU,
        libc::SIOCSIFTXQLEN,
        libc::SIOCGIFFLAGS,
        libc::SIOCSIFFLAGS,
        libc::SIOCGIFHWADDR,
    ];
    if !DATA.contains(&req) {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut union = [0u8; 24];
    union[..4].copy_from_slice(&value.to_ne_bytes());
    // SAFETY: every request let through above reads and writes the union as data, never
    // through a pointer.
    unsafe { ifreq_ioctl(ifname, req, union) }
}

/// [`ifreq_on`] on a fresh datagram socket of the calling thread's network namespace.
///
/// # Safety
/// As [`ifreq_on`].
unsafe fn ifreq_ioctl(ifname: &str, req: libc::c_ulong, union: [u8; 24]) -> std::io::Result<[u8; 40]> {
    let fd = ifreq_socket()?;
    // SAFETY: the caller's promise, passed on.
    unsafe { ifreq_on(&fd, ifname, req, union) }
}

/// The one place pathem builds a struct ifreq: `ifname`, then the 24-byte union, asked on
/// `fd` (a socket; its network namespace is the one asked).
///
/// # Safety
/// `req` must treat the union as `union` says: as data, or as a pointer (`ifr_data`) to memory
/// that is valid, and not otherwise borrowed, for everything the request reads and writes.
unsafe fn ifreq_on(
    fd: &std::os::fd::OwnedFd,
    ifname: &str,
    req: libc::c_ulong,
    union: [u8; 24],
) -> std::io::Result<[u8; 40]> {
    let name = ifname.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut ifr = [0u8; 40];
    ifr[..name.len()].copy_from_slice(name);
    ifr[16..].copy_from_slice(&union);
    // SAFETY: `ifr` is 40 bytes, the size of struct ifreq, and outlives the call; the name is
    // shorter than IFNAMSIZ, so it stays NUL-terminated; what the union points at, if anything,
    // is the caller's promise.
    let rc = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(fd), req as _, ifr.as_mut_ptr()) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(ifr)
}

/// The int an [`ifreq`] answered.
pub(crate) fn ifreq_int(ifr: &[u8; 40]) -> i32 {
    i32::from_ne_bytes([ifr[16], ifr[17], ifr[18], ifr[19]])
}

/// The interface's hardware address (`SIOCGIFHWADDR`), asked of the calling thread's
/// network namespace: its ARP hardware type (1 for Ethernet, 772 for loopback) and its first
/// six bytes (the MAC of an Ethernet interface).
pub fn hwaddr(ifname: &str) -> std::io::Result<(u16, [u8; 6])> {
    let ifr = ifreq(ifname, libc::SIOCGIFHWADDR, 0)?;
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&ifr[18..24]);
    Ok((u16::from_ne_bytes([ifr[16], ifr[17]]), mac))
}

/// True when the interface is there and set down (no `IFF_UP`), in the calling thread's
/// network namespace; false for one that is up or gone.
pub(crate) fn is_down(ifname: &str) -> bool {
    flags(ifname).is_some_and(|f| f & libc::IFF_UP == 0)
}

/// True when the running kernel's release is `major.minor` or later
/// (`/proc/sys/kernel/osrelease`; an unreadable release reads as 0.0).
pub(crate) fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut version = release.trim().split(['.', '-']).map(|n| n.parse::<u32>().unwrap_or(0));
    (version.next().unwrap_or(0), version.next().unwrap_or(0)) >= (major, minor)
}

/// The interface's MTU, asked of the calling thread's network namespace (`SIOCGIFMTU`):
/// `/sys/class/net` shows the namespace sysfs was mounted in, which a thread that entered
/// another one with `setns` (the shell's link) does not see.
pub fn mtu(ifname: &str) -> Option<u32> {
    ifreq(ifname, libc::SIOCGIFMTU, 0).ok().map(|ifr| ifreq_int(&ifr) as u32)
}

/// The longest frame a port sends through interface `ifname` (if it goes through one): at most
/// `max_frame`, and no longer than the interface's MTU allows (with a VLAN tag), which is the
/// user's: frames longer than it are not asked for (nor the MTU raised to carry them).
pub fn frame_cap(ifname: Option<&str>, max_frame: usize) -> usize {
    ifname.and_then(mtu).map_or(max_frame, |m| max_frame.min(m as usize + 18))
}

/// The interface's link speed in bit/s, when the driver reports one (`ETHTOOL_GSET`, which
/// the kernel answers from the driver's link settings, as `ethtool IF` and sysfs's `speed`).
pub fn speed_bps(ifname: &str) -> Option<u64> {
    // struct ethtool_cmd: cmd, supported, advertising (u32), speed (u16), duplex, port,
    // phy_address, transceiver, autoneg, mdio_support (u8), maxtxpkt, maxrxpkt (u32),
    // speed_hi (u16), ... 44 bytes in all.
    let mut cmd = [0u8; 44];
    cmd[..4].copy_from_slice(&ETHTOOL_GSET.to_ne_bytes());
    ethtool(ifname, &mut cmd).ok()?;
    let low = u16::from_ne_bytes([cmd[12], cmd[13]]);
    let high = u16::from_ne_bytes([cmd[28], cmd[29]]);
    let mbit = u32::from(high) << 16 | u32::from(low);
    // SPEED_UNKNOWN is all ones; 0 is no speed either.
    (mbit != 0 && mbit != u32::MAX).then(|| u64::from(mbit) * 1_000_000)
}

/// How many receive queues the interface has, in the calling thread's namespace: its receive
/// and combined channels (`ETHTOOL_GCHANNELS`, as `ethtool -l`); for a driver that reports
/// none, the receive queues the kernel lists for it (the `netdev` generic netlink family's
/// queue dump, Linux 6.8 and later: the queues in use, as an AF_XDP socket may bind to);
/// failing both, sysfs's `queues/rx-*` (right unless the thread entered a namespace with
/// `setns`); at least 1.
pub fn rx_queues(ifname: &str) -> usize {
    let n = channels(ifname)
        .map(|c| c.rx + c.combined)
        .filter(|&n| n > 0)
        .or_else(|| index(ifname).and_then(netdev_rx_queues).filter(|&n| n > 0))
        .or_else(|| sysfs_rx_queues(ifname));
    n.map_or(1, |n| n as usize).max(1)
}

/// An interface's current channels as `ETHTOOL_GCHANNELS` reports them.
struct Channels {
    rx: u32,
    combined: u32,
}

fn channels(ifname: &str) -> Option<Channels> {
    // struct ethtool_channels: cmd, max_rx, max_tx, max_other, max_combined, rx_count,
    // tx_count, other_count, combined_count (nine u32s).
    let mut ch = [0u8; 36];
    ch[..4].copy_from_slice(&ETHTOOL_GCHANNELS.to_ne_bytes());
    ethtool(ifname, &mut ch).ok()?;
    let word = |i: usize| u32::from_ne_bytes(ch[i * 4..i * 4 + 4].try_into().expect("four bytes"));
    Some(Channels { rx: word(5), combined: word(8) })
}

fn sysfs_rx_queues(ifname: &str) -> Option<u32> {
    let dir = std::fs::read_dir(format!("/sys/class/net/{ifname}/queues")).ok()?;
    let n = dir.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with("rx-")).count();
    u32::try_from(n).ok()
}

// Netlink (<linux/netlink.h>, <linux/genetlink.h>, <linux/netdev.h>).
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NETDEV_CMD_QUEUE_GET: u8 = 10;
const NETDEV_A_QUEUE_IFINDEX: u16 = 2;
const NETDEV_A_QUEUE_TYPE: u16 = 3;
const NETDEV_QUEUE_TYPE_RX: u32 = 0;

/// The receive queues the kernel lists for interface `index` in the calling thread's
/// namespace (`netdev` family, `queue-get` dump), or `None` where it cannot say (a kernel
/// before 6.8, no such family). A device that is down lists none.
fn netdev_rx_queues(index: u32) -> Option<u32> {
    let sock = Netlink::open(libc::NETLINK_GENERIC)?;
    let family = genl_message(GENL_ID_CTRL, libc::NLM_F_REQUEST as u16, CTRL_CMD_GETFAMILY, &{
        let mut a = Vec::new();
        put_attr(&mut a, CTRL_ATTR_FAMILY_NAME, b"netdev\0");
        a
    });
    let replies = sock.ask(&family)?;
    let id = replies.iter().find_map(|(_, body)| {
        let v = attributes(body.get(4..)?).find(|&(t, _)| t == CTRL_ATTR_FAMILY_ID)?.1;
        Some(u16::from_ne_bytes(v.get(..2)?.try_into().ok()?))
    })?;
    let dump = genl_message(id, (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16, NETDEV_CMD_QUEUE_GET, &{
        let mut a = Vec::new();
        put_attr(&mut a, NETDEV_A_QUEUE_IFINDEX, &index.to_ne_bytes());
        a
    });
    let replies = sock.ask(&dump)?;
    let rx = replies
        .iter()
        .filter(|(kind, _)| *kind == id)
        .filter(|(_, body)| {
            let mut a = body.get(4..).into_iter().flat_map(attributes);
            a.any(|(t, v)| {
                t == NETDEV_A_QUEUE_TYPE && v.get(..4) == Some(&NETDEV_QUEUE_TYPE_RX.to_ne_bytes()[..])
            })
        })
        .count();
    u32::try_from(rx).ok()
}

/// A generic netlink request: the netlink header, the generic header (`cmd`, version 1) and
/// `attrs`.
fn genl_message(kind: u16, flags: u16, cmd: u8, attrs: &[u8]) -> Vec<u8> {
    let len = 16 + 4 + attrs.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[cmd, 1, 0, 0]);
    m.extend_from_slice(attrs);
    m
}

/// Appends a netlink attribute, padded to 4 bytes.
fn put_attr(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// The attributes in `b` as (type without the nested and byte-order flags, value), walked by
/// their lengths; the walk ends at the first attribute that does not fit.
fn attributes(b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let head = b.get(at..at + 4)?;
        let (len, kind) =
            (usize::from(u16::from_ne_bytes([head[0], head[1]])), u16::from_ne_bytes([head[2], head[3]]));
        let value = b.get(at + 4..at.checked_add(len)?).filter(|_| len >= 4)?;
        at += len.next_multiple_of(4);
        Some((kind & 0x3fff, value))
    })
}

/// The messages in a netlink reply buffer as (type, payload after the 16-byte header), walked
/// by their lengths; the walk ends at the first message that does not fit.
fn messages(b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let head = b.get(at..at + 16)?;
        let len = u32::from_ne_bytes(head[..4].try_into().expect("four bytes")) as usize;
        let kind = u16::from_ne_bytes([head[4], head[5]]);
        let body = b.get(at + 16..at.checked_add(len)?).filter(|_| len >= 16)?;
        at += len.next_multiple_of(4);
        Some((kind, body))
    })
}

/// A netlink socket of the calling thread's namespace.
struct Netlink(std::os::fd::OwnedFd);

impl Netlink {
    fn open(protocol: i32) -> Option<Netlink> {
        // SAFETY: a plain socket(2) call; the result is checked and owned below.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
        if fd < 0 {
            return None;
        }
        // SAFETY: fd was just returned by socket(2) and has no other owner.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let timeout = libc::timeval { tv_sec: 1, tv_usec: 0 };
        // SAFETY: the option's value is a timeval, valid for its size for the call.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&timeout as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        Some(Netlink(fd))
    }

    /// Sends `req` and gathers the replies (type, payload) until the one a plain request gets,
    /// or a dump's end; `None` on an error reply (an unknown family, say) or a failed call.
    fn ask(&self, req: &[u8]) -> Option<Vec<(u16, Vec<u8>)>> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.0);
        // SAFETY: `req` is valid for its length for the call.
        let sent = unsafe { libc::send(fd, req.as_ptr().cast(), req.len(), 0) };
        if sent != req.len() as isize {
            return None;
        }
        let dump = u16::from_ne_bytes([req[6], req[7]]) & libc::NLM_F_DUMP as u16 != 0;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 32 << 10];
        // A dump of a device's queues is a few messages; a bound keeps a confused reply finite.
        for _ in 0..1024 {
            // SAFETY: `buf` is valid and writable for its length for the call.
            let got = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            let chunk = buf.get(..usize::try_from(got).ok()?)?;
            if chunk.is_empty() {
                return None;
            }
            for (kind, body) in messages(chunk) {
                match kind {
                    NLMSG_DONE => return Some(out),
                    // An acknowledgement (error 0) or a refusal: a plain request has no more.
                    NLMSG_ERROR => {
                        let code =
                            body.get(..4).map(|c| i32::from_ne_bytes(c.try_into().expect("four bytes")));
                        return (code == Some(0) && !out.is_empty()).then_some(out);
                    }
                    _ => out.push((kind, body.to_vec())),
                }
            }
            if !dump && !out.is_empty() {
                return Some(out);
            }
        }
        None
    }
}

// Route netlink's link messages (<linux/rtnetlink.h>, <linux/if_link.h>).
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTMGRP_LINK: u32 = 1;
const IFLA_NEW_NETNSID: u16 = 45;
/// struct ifinfomsg: family, pad, type, index, flags, change.
const IFINFOMSG: usize = 16;

/// What a [`LinkWatch`] saw of one interface since it was last asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LinkSeen {
    /// The interface was down at some moment (set down, perhaps up again since; a device
    /// leaving the namespace is set down first).
    pub down: bool,
    /// The interface was moved to another namespace (its `RTM_DELLINK` names where it went,
    /// which a deleted one's does not).
    pub moved: bool,
    /// Messages were lost (the socket's buffer overflowed, or one was longer than the
    /// buffer): what happened meanwhile is not known.
    pub lost: bool,
}

impl LinkSeen {
    /// What one link message (`kind`, its payload `body`) says of interface `index`.
    fn of_message(kind: u16, body: &[u8], index: u32) -> LinkSeen {
        let (Some(of), Some(flags)) = (word(body, 4), word(body, 8)) else { return LinkSeen::default() };
        if of != index {
            return LinkSeen::default();
        }
        let attrs = body.get(IFINFOMSG..).unwrap_or_default();
        LinkSeen {
            down: kind == RTM_NEWLINK && flags & libc::IFF_UP as u32 == 0,
            moved: kind == RTM_DELLINK && attributes(attrs).any(|(t, _)| t == IFLA_NEW_NETNSID),
            lost: false,
        }
    }

    fn or(self, other: LinkSeen) -> LinkSeen {
        LinkSeen {
            down: self.down || other.down,
            moved: self.moved || other.moved,
            lost: self.lost || other.lost,
        }
    }
}

/// The kernel's link messages of the calling thread's network namespace, as they happen: a
/// change a look at the interface's flags every few milliseconds would miss (down and up again
/// between two looks) is in them.
pub(crate) struct LinkWatch {
    sock: Netlink,
    buf: Box<[u8]>,
}

impl LinkWatch {
    /// `None` where the socket cannot be made (a look at the flags is then all there is).
    pub(crate) fn open() -> Option<LinkWatch> {
        let sock = Netlink::open(libc::NETLINK_ROUTE)?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&sock.0);
        // SAFETY: sockaddr_nl is plain data; zeroed is a valid value for it.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = RTMGRP_LINK;
        // SAFETY: `addr` is a sockaddr_nl, valid for its size for the call.
        let bound = unsafe {
            libc::bind(
                fd,
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        // A link message is a few KB; one with many virtual functions' attributes may be more.
        (bound == 0).then(|| LinkWatch { sock, buf: vec![0u8; 64 << 10].into_boxed_slice() })
    }

    /// What the messages received since the last call say of interface `index`.
    pub(crate) fn seen(&mut self, index: u32) -> LinkSeen {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.sock.0);
        let mut seen = LinkSeen::default();
        // Each call takes what is queued; a bound keeps a host changing links without pause
        // from holding the caller (what is left waits for the next call).
        for _ in 0..64 {
            // SAFETY: `buf` is valid and writable for its length for the call. With MSG_TRUNC
            // the call returns a datagram's whole length, even past what it wrote.
            let got = unsafe {
                libc::recv(
                    fd,
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            let Ok(got) = usize::try_from(got) else {
                match std::io::Error::last_os_error().raw_os_error() {
                    Some(libc::ENOBUFS) => seen.lost = true,
                    Some(libc::EINTR) => {}
                    _ => break,
                }
                continue;
            };
            let Some(chunk) = self.buf.get(..got) else {
                seen.lost = true;
                continue;
            };
            for (kind, body) in messages(chunk) {
                seen = seen.or(LinkSeen::of_message(kind, body, index));
            }
        }
        seen
    }
}

/// The 32-bit word at `at` in `b`, if it is all there.
fn word(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at.checked_add(4)?).map(|w| u32::from_ne_bytes(w.try_into().expect("four bytes")))
}

/// The interface's line rate in bit/s: its speed, or [`DEFAULT_LINE_RATE`] when the driver
/// reports none.
///
/// [`DEFAULT_LINE_RATE`]: pathem_model::units::DEFAULT_LINE_RATE
pub fn line_rate_bps(ifname: &str) -> u64 {
    speed_bps(ifname).unwrap_or(pathem_model::units::DEFAULT_LINE_RATE.0)
}

/// The receive offloads that merge wire frames, by the words `ethtool -K` uses for them. They
/// are read and changed with the `SIOCETHTOOL` ioctl's per-feature commands, the kernel's
/// stable interface for them, so no `ethtool` binary is needed (the OCI image has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offload {
    /// Generic receive offload (`rx-gro`).
    Gro,
    /// Large receive offload (`rx-lro`), a bit of the device's ethtool flags.
    Lro,
}

// From <linux/ethtool.h>.
const ETHTOOL_GSET: u32 = 0x01;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_SFLAGS: u32 = 0x26;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_SGRO: u32 = 0x2c;
const ETH_FLAG_LRO: u32 = 1 << 15;

impl Offload {
    const ALL: [Offload; 2] = [Offload::Gro, Offload::Lro];

    fn word(self) -> &'static str {
        match self {
            Offload::Gro => "gro",
            Offload::Lro => "lro",
        }
    }

    fn from_word(word: &str) -> Option<Offload> {
        Offload::ALL.into_iter().find(|o| o.word() == word)
    }

    /// Whether the offload is on.
    fn get(self, ifname: &str) -> std::io::Result<bool> {
        Ok(match self {
            Offload::Gro => ethtool_value(ifname, ETHTOOL_GGRO, 0)? != 0,
            Offload::Lro => ethtool_value(ifname, ETHTOOL_GFLAGS, 0)? & ETH_FLAG_LRO != 0,
        })
    }

    /// Turns the offload on or off. The kernel answers `EOPNOTSUPP` for an offload the device
    /// cannot change (ethtool's "[fixed]").
    fn set(self, ifname: &str, on: bool) -> std::io::Result<()> {
        match self {
            Offload::Gro => ethtool_value(ifname, ETHTOOL_SGRO, on as u32).map(drop),
            Offload::Lro => {
                let flags = ethtool_value(ifname, ETHTOOL_GFLAGS, 0)?;
                let flags = if on { flags | ETH_FLAG_LRO } else { flags & !ETH_FLAG_LRO };
                ethtool_value(ifname, ETHTOOL_SFLAGS, flags).map(drop)
            }
        }
    }
}

/// Turns the transmit checksum offload of `ifname` on or off (`ethtool -K IF tx on|off`):
/// off, the kernel completes a frame's checksum in software before the driver has it.
pub fn set_tx_checksum(ifname: &str, on: bool) -> std::io::Result<()> {
    ethtool_value(ifname, ETHTOOL_STXCSUM, on as u32).map(drop)
}

/// A `SIOCETHTOOL` command whose argument is a `struct ethtool_value` (`cmd`, `data`): sends
/// `data`, returns the `data` the kernel left.
fn ethtool_value(ifname: &str, cmd: u32, data: u32) -> std::io::Result<u32> {
    let mut value = [0u8; 8];
    value[..4].copy_from_slice(&cmd.to_ne_bytes());
    value[4..].copy_from_slice(&data.to_ne_bytes());
    ethtool(ifname, &mut value)?;
    Ok(u32::from_ne_bytes([value[4], value[5], value[6], value[7]]))
}

/// A `SIOCETHTOOL` ioctl on `ifname` whose argument, starting with the command, is `arg`.
/// Only the commands pathem sends are taken, each with a buffer at least as long as the
/// struct the kernel reads and writes for it (EINVAL otherwise).
fn ethtool(ifname: &str, arg: &mut [u8]) -> std::io::Result<()> {
    let cmd = arg.get(..4).map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]));
    let size = match cmd {
        Some(ETHTOOL_GFLAGS | ETHTOOL_SFLAGS | ETHTOOL_GGRO | ETHTOOL_SGRO | ETHTOOL_STXCSUM) => 8,
        Some(ETHTOOL_GCHANNELS) => 36,
        Some(ETHTOOL_GSET) => 44,
        Some(ETHTOOL_GDRVINFO) => 196,
        _ => usize::MAX,
    };
    if arg.len() < size {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut union = [0u8; 24];
    union[..8].copy_from_slice(&(arg.as_mut_ptr() as usize as u64).to_ne_bytes());
    // SAFETY: SIOCETHTOOL reads ifr_data as a pointer to the command's struct, which `arg`
    // holds, mutably borrowed for the call; the command is one of those above and `arg` is
    // at least as long as its struct (ethtool_value 8 bytes, ethtool_channels 36, ethtool_cmd
    // 44, ethtool_drvinfo 196), all the kernel reads or writes.
    unsafe { ifreq_ioctl(ifname, libc::SIOCETHTOOL, union) }.map(drop)
}

/// What pathem changed on an interface, to put back on exit, and its claim on it: the state
/// file, open and locked for as long as this lives.
#[derive(Debug)]
pub struct SavedOffloads {
    ifname: String,
    /// The claim's state file, named where it was made (the claiming thread's namespace).
    state: PathBuf,
    /// That file, locked (`flock`): the kernel lets the lock go when this process ends, however
    /// it ends, so a claim is never held by a process that is gone.
    lock: nix::fcntl::Flock<std::fs::File>,
    /// The offloads that were on and that pathem turned off.
    changed: Vec<Offload>,
}

/// Where pathem notes the offloads it turned off, so that a run killed by SIGKILL is repaired
/// by the next one: `/run/pathem/offloads/<network namespace>-<interface>`.
fn state_file(ifname: &str) -> PathBuf {
    // The calling thread's namespace: a forwarder may have entered another than the process's.
    let ns = std::fs::read_link("/proc/thread-self/ns/net")
        .map(|l| l.to_string_lossy().trim_start_matches("net:[").trim_end_matches(']').to_string())
        .unwrap_or_else(|_| "net".into());
    PathBuf::from(format!("/run/pathem/offloads/{ns}-{ifname}"))
}

/// The process a claim's first line names: its pid (0 where none can be read). The lock, not
/// the note, says whether it lives: a note from before the locks also gave the process's
/// start time after the pid.
fn holder(line: &str) -> u32 {
    line.split_whitespace().next().and_then(|w| w.parse().ok()).unwrap_or(0)
}

/// The refusal of an interface another pathem holds, naming it as its note does.
fn in_use(ifname: &str, note: &str) -> Error {
    let pid = holder(note.lines().next().unwrap_or(""));
    let who = match pid {
        0 => "another pathem".to_string(),
        p if p == std::process::id() => format!("another link of this pathem (pid {p})"),
        p => format!("another pathem (pid {p})"),
    };
    Error::Interface { name: ifname.into(), reason: format!("is in use by {who}") }
}

/// Whether `path` still names the file `file` has open (not removed, not replaced).
fn still_names(path: &std::path::Path, file: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(f), Ok(p)) => (f.dev(), f.ino()) == (p.dev(), p.ino()),
        _ => false,
    }
}

/// Takes the claim file at `path` for `ifname`: made if missing, locked without waiting,
/// exclusively for a run's port, shared for an attachment (two attach each a direction of one
/// interface; a run and an attachment exclude each other). Another holder's lock is a refusal
/// naming it. A file removed between our open and our lock (its holder gave the claim up) is
/// not the claim any more: opened again.
fn lock(
    ifname: &str,
    path: &std::path::Path,
    exclusive: bool,
) -> Result<nix::fcntl::Flock<std::fs::File>, Error> {
    use nix::fcntl::{Flock, FlockArg};
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |what: &str, e: std::io::Error| failure(ifname, what, e, "CAP_DAC_OVERRIDE");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| fail(&format!("cannot make {}", dir.display()), e))?;
    }
    let what = format!("cannot claim it through {}", path.display());
    let how = if exclusive { FlockArg::LockExclusiveNonblock } else { FlockArg::LockSharedNonblock };
    for _ in 0..16 {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| fail(&what, e))?;
        match Flock::lock(file, how) {
            Ok(locked) if still_names(path, &locked) => return Ok(locked),
            Ok(_) => {}
            // Held, and still the claim: refused. Given up meanwhile: opened again.
            Err((file, nix::errno::Errno::EWOULDBLOCK)) if still_names(path, &file) => {
                return Err(in_use(
                    ifname,
                    &String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()),
                ))
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {}
            Err((_, e)) => return Err(fail(&what, std::io::Error::from(e))),
        }
    }
    Err(fail(&what, std::io::Error::from_raw_os_error(libc::EAGAIN)))
}

/// Gives a claim up: its file removed where this is its last holder and the path still names
/// it; left for the others (or for whoever replaced it) otherwise. The lock goes when `lock`
/// is dropped.
fn release(lock: &nix::fcntl::Flock<std::fs::File>, path: &std::path::Path) {
    if lock.relock(nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok() && still_names(path, lock) {
        let _ = std::fs::remove_file(path);
    }
}

/// Reads the note in a claim just taken and puts back on the offloads it says a pathem left
/// off: its holder is gone (it would hold the lock otherwise), killed before it could.
fn recover_stale(ifname: &str, file: &mut std::fs::File) -> Result<(), Error> {
    use std::io::{Read, Seek};
    let mut bytes = Vec::new();
    if file.seek(std::io::SeekFrom::Start(0)).and_then(|_| file.read_to_end(&mut bytes)).is_err() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&bytes);
    let left_off: Vec<Offload> =
        text.lines().nth(1).unwrap_or("").split_whitespace().filter_map(Offload::from_word).collect();
    if !left_off.is_empty() {
        set(ifname, &left_off, true)?;
        let words: Vec<&str> = left_off.iter().map(|o| o.word()).collect();
        // A note on stderr; a stderr that cannot be written loses it (no panic, as eprintln!).
        let _ = writeln!(
            std::io::stderr(),
            "pathem: {ifname}: turned {} back on (left off by a pathem that was killed)",
            words.join(", ")
        );
    }
    Ok(())
}

/// The interface's driver (`veth`, `ixgbe`, ...), as `ethtool -i` names it (`ETHTOOL_GDRVINFO`).
pub fn driver(ifname: &str) -> Option<String> {
    // struct ethtool_drvinfo: cmd, then driver[32], version[32], ... 196 bytes in all.
    let mut info = [0u8; 196];
    info[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
    ethtool(ifname, &mut info).ok()?;
    let driver = &info[4..36];
    let len = driver.iter().position(|&b| b == 0).unwrap_or(driver.len());
    (len > 0).then(|| String::from_utf8_lossy(&driver[..len]).into_owned())
}

/// The interface's combined channels (`ethtool -l`, `ETHTOOL_GCHANNELS`): the queue pairs a
/// driver such as DPDK's net_af_xdp can bind to; `None` where the driver does not say.
pub fn combined_channels(ifname: &str) -> Option<u32> {
    channels(ifname).map(|c| c.combined)
}

/// Claims `ifname` for this process's run and, with `turn_off`, turns off receive aggregation
/// (GRO, LRO) on it, returning what to restore. A claim is a locked state file naming this
/// process and what it turned off: a second pathem on the interface (whose every frame both
/// would forward) is refused while this one lives, even one started at the same moment, and a
/// note left by one that was killed is repaired and taken over. An offload the device cannot
/// change is left as it is.
pub fn claim(ifname: &str, turn_off: bool) -> Result<SavedOffloads, Error> {
    take(ifname, true, turn_off)
}

/// Claims `ifname` for an attachment ([`crate::attach`]): shared with other attachments
/// (each of a direction, which the TAP device's name decides), refused while a run's port
/// holds it, and a run refused on it meanwhile. No offload changes.
pub fn claim_attached(ifname: &str) -> Result<SavedOffloads, Error> {
    take(ifname, false, false)
}

fn take(ifname: &str, exclusive: bool, turn_off: bool) -> Result<SavedOffloads, Error> {
    let path = state_file(ifname);
    let mut lock = lock(ifname, &path, exclusive)?;
    recover_stale(ifname, &mut lock)?;
    let mut on = Vec::new();
    if turn_off {
        for offload in Offload::ALL {
            match offload.get(ifname) {
                Ok(true) => on.push(offload),
                Ok(false) => {}
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
                Err(e) => {
                    release(&lock, &path);
                    return Err(failure(
                        ifname,
                        &format!("cannot read its {} setting", offload.word()),
                        e,
                        "CAP_NET_ADMIN",
                    ));
                }
            }
        }
    }
    // Note what is about to change first: if this process is killed, the next start repairs
    // it. Written over the old note, then cut to its length: the file is never empty.
    let words: Vec<&str> = on.iter().map(|o| o.word()).collect();
    let note = format!("{}\n{}\n", std::process::id(), words.join(" "));
    let _ = std::os::unix::fs::FileExt::write_all_at(&*lock, note.as_bytes(), 0)
        .and_then(|_| lock.set_len(note.len() as u64));
    let mut changed = Vec::new();
    for offload in on {
        match offload.set(ifname, false) {
            Ok(()) => changed.push(offload),
            // One the device holds fixed stays on: there is nothing to put back.
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
            Err(e) => {
                let _ = set(ifname, &changed, true);
                release(&lock, &path);
                let what =
                    format!("cannot turn {} off for the run (or pass --keep-offloads)", offload.word());
                return Err(failure(ifname, &what, e, "CAP_NET_ADMIN"));
            }
        }
    }
    Ok(SavedOffloads { ifname: ifname.into(), state: path, lock, changed })
}

/// Sets every one of `offloads` on or off.
fn set(ifname: &str, offloads: &[Offload], on: bool) -> Result<(), Error> {
    for offload in offloads {
        offload.set(ifname, on).map_err(|e| {
            let what = format!("cannot turn {} {}", offload.word(), if on { "on" } else { "off" });
            failure(ifname, &what, e, "CAP_NET_ADMIN")
        })?;
    }
    Ok(())
}

impl SavedOffloads {
    /// Offloads that were on and are now off, by their `ethtool -K` words.
    pub fn changed(&self) -> Vec<&'static str> {
        self.changed.iter().map(|o| o.word()).collect()
    }

    /// Puts the offloads back as they were (best effort: the interface may be gone) and gives
    /// the claim up (the lock goes with this value).
    pub fn restore(&self) -> Result<(), Error> {
        let put_back = set(&self.ifname, &self.changed, true);
        release(&self.lock, &self.state);
        put_back
    }
}

/// Where a privileged operation is refused, the capability it needs.
fn permission_hint(err: &std::io::Error, capability: &str) -> String {
    match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => format!("{err} (run as root or grant {capability})"),
        _ => err.to_string(),
    }
}

/// The error for an interface on which `what` failed with `err`, with the hint to run as root
/// or grant `capability` where the kernel refused permission.
pub(crate) fn failure(ifname: &str, what: &str, err: std::io::Error, capability: &str) -> crate::Error {
    crate::Error::Interface {
        name: ifname.into(),
        reason: format!("{what}: {}", permission_hint(&err, capability)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A claim's first line: the pid (a note from before the locks gave a start time after
    /// it); words that are not a pid name none.
    #[test]
    fn a_claim_names_its_holder() {
        assert_eq!(holder("123 456"), 123);
        assert_eq!(holder("123"), 123);
        assert_eq!(holder("x 456"), 0);
        assert_eq!(holder(""), 0);
        assert_eq!(holder("-1 5"), 0);
    }

    /// A claim is a lock: a second taker is refused while the first holds it, with the
    /// holder its note names; a claim given up (its file removed) does not hold a taker that
    /// opened the old file back, and one dropped lets the next take it.
    #[test]
    fn a_claim_is_held_until_given_up() {
        let dir = std::env::temp_dir().join(format!("pathem-claim-{}", std::process::id()));
        let path = dir.join("net-eth9");
        let first = lock("eth9", &path, true).expect("a free claim");
        std::fs::write(&path, format!("{} 1\n\n", std::process::id())).unwrap();
        let e = lock("eth9", &path, true).unwrap_err().to_string();
        assert!(e.contains("eth9") && e.contains("another link of this pathem (pid"), "{e}");
        std::fs::write(&path, "4194305 1\n\n").unwrap();
        let e = lock("eth9", &path, true).unwrap_err().to_string();
        assert!(e.contains("is in use by another pathem (pid 4194305)"), "{e}");
        // Given up: the note removed while the lock is still held, as `restore` does.
        std::fs::remove_file(&path).unwrap();
        let second = lock("eth9", &path, true).expect("the claim given up is free");
        drop(first);
        assert!(lock("eth9", &path, true).is_err(), "the second holds it");
        drop(second);
        assert!(lock("eth9", &path, true).is_ok(), "dropped, it is free");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Attachments share a claim; a run's port and an attachment refuse each other; a holder
    /// giving it up removes the file only as its last holder.
    #[test]
    fn attachments_share_a_claim_that_excludes_a_run() {
        let dir = std::env::temp_dir().join(format!("pathem-shared-{}", std::process::id()));
        let path = dir.join("net-eth7");
        let egress = lock("eth7", &path, false).expect("a free claim");
        let ingress = lock("eth7", &path, false).expect("shared with another attachment");
        assert!(lock("eth7", &path, true).is_err(), "a run refused while attachments hold it");
        release(&egress, &path);
        drop(egress);
        assert!(path.exists(), "the other attachment still holds it");
        assert!(lock("eth7", &path, true).is_err());
        release(&ingress, &path);
        drop(ingress);
        assert!(!path.exists(), "the last holder removed it");
        let run = lock("eth7", &path, true).expect("free again");
        assert!(lock("eth7", &path, false).is_err(), "an attachment refused while a run holds it");
        release(&run, &path);
        drop(run);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Takers that come at the same moment: exactly one holds the claim.
    #[test]
    fn one_of_takers_at_once_holds_the_claim() {
        let dir = std::env::temp_dir().join(format!("pathem-race-{}", std::process::id()));
        let path = dir.join("net-eth8");
        for _ in 0..20 {
            let start = std::sync::Barrier::new(8);
            let held: Vec<_> = std::thread::scope(|s| {
                let takers: Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| {
                            start.wait();
                            lock("eth8", &path, true).ok()
                        })
                    })
                    .collect();
                takers.into_iter().filter_map(|t| t.join().unwrap()).collect()
            });
            assert_eq!(held.len(), 1);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_loopbacks_facts_come_from_this_namespace() {
        assert!(is_up("lo") && check_exists("lo").is_ok() && names().contains(&"lo".to_string()));
        // Loopback answers neither ethtool request: the kernel's queue list says.
        assert_eq!(rx_queues("lo"), 1);
        assert_eq!(speed_bps("lo"), None);
        assert!(!is_up("no-such-if0") && rx_queues("no-such-if0") == 1 && speed_bps("no-such-if0").is_none());
        let e = check_exists("no-such-if0").unwrap_err().to_string();
        assert!(e.contains("does not exist in this network namespace") && e.contains("lo"), "{e}");
    }

    /// A carrier reader answers as the one-off question does: loopback has its carrier, a
    /// missing interface none. (That it asks the namespace it was made in, wherever it is
    /// read, needs a namespace of its own: the live test
    /// `a_carrier_reader_asks_the_namespace_it_was_made_in`.)
    #[test]
    fn a_carrier_reader_answers_as_the_one_off_question() {
        let (lo, gone) = (CarrierReader::new("lo").unwrap(), CarrierReader::new("no-such-if0").unwrap());
        assert!(lo.has_carrier() && !gone.has_carrier());
        assert!(has_carrier("lo") && !has_carrier("no-such-if0"));
        assert_eq!(lo.ifname(), "lo");
    }

    /// A link message speaks only of its own interface: down with IFF_UP clear in an
    /// `RTM_NEWLINK`, moved in an `RTM_DELLINK` that names the namespace it went to (not in
    /// one of a deleted device); one cut short says nothing.
    #[test]
    fn a_link_message_speaks_only_of_its_interface() {
        let msg = |index: u32, flags: u32, attrs: &[u8]| {
            let mut b = vec![0u8, 0, 1, 0];
            b.extend_from_slice(&index.to_ne_bytes());
            b.extend_from_slice(&flags.to_ne_bytes());
            b.extend_from_slice(&0u32.to_ne_bytes());
            b.extend_from_slice(attrs);
            b
        };
        let up = libc::IFF_UP as u32 | libc::IFF_RUNNING as u32;
        let mut netnsid = Vec::new();
        put_attr(&mut netnsid, 3, b"pthme0\0");
        put_attr(&mut netnsid, IFLA_NEW_NETNSID, &1i32.to_ne_bytes());
        let of = LinkSeen::of_message;
        let none = LinkSeen::default();
        let down = LinkSeen { down: true, ..none };
        let moved = LinkSeen { moved: true, ..none };
        assert_eq!(of(RTM_NEWLINK, &msg(7, libc::IFF_BROADCAST as u32, &[]), 7), down);
        assert_eq!(of(RTM_NEWLINK, &msg(7, up, &[]), 7), none);
        assert_eq!(of(RTM_NEWLINK, &msg(8, 0, &[]), 7), none, "another interface");
        assert_eq!(of(RTM_NEWLINK, &msg(7, 0, &[])[..10], 7), none, "cut short");
        assert_eq!(of(RTM_DELLINK, &msg(7, 0, &netnsid), 7), moved);
        assert_eq!(of(RTM_DELLINK, &msg(7, 0, &netnsid[..12]), 7), none, "deleted: no namespace named");
        assert_eq!(of(RTM_DELLINK, &msg(9, 0, &netnsid), 7), none);
        assert_eq!(of(RTM_NEWLINK, &msg(7, up, &netnsid), 7), none, "a move is a deletion's");
        assert_eq!(down.or(moved), LinkSeen { down: true, moved: true, lost: false });
    }

    /// Netlink messages and attributes are walked by their lengths, padded to 4 bytes, flags
    /// masked off the type; anything cut short or shorter than its header ends the walk, never
    /// a read past the buffer.
    #[test]
    fn netlink_replies_are_read_within_the_buffer() {
        let mut attrs = Vec::new();
        put_attr(&mut attrs, 1, &7u16.to_ne_bytes());
        put_attr(&mut attrs, 2, b"netdev\0");
        put_attr(&mut attrs, 3 | 0x8000, &0u32.to_ne_bytes());
        assert_eq!(attrs.len(), 8 + 12 + 8);
        let got: Vec<(u16, Vec<u8>)> = attributes(&attrs).map(|(t, v)| (t, v.to_vec())).collect();
        assert_eq!(
            got,
            vec![
                (1, 7u16.to_ne_bytes().to_vec()),
                (2, b"netdev\0".to_vec()),
                (3, 0u32.to_ne_bytes().to_vec())
            ]
        );
        let m = genl_message(0x1d, 1, 10, &attrs);
        let two = [m.clone(), m.clone()].concat();
        let seen: Vec<(u16, usize)> = messages(&two).map(|(k, b)| (k, b.len())).collect();
        assert_eq!(seen, vec![(0x1d, 4 + attrs.len()); 2]);
        for cut in 0..two.len() {
            assert!(messages(&two[..cut]).count() <= 1 + usize::from(cut == two.len()));
            for (_, b) in messages(&two[..cut]) {
                let _ = attributes(&b[4..]).count();
            }
            let _ = attributes(&attrs[..cut.min(attrs.len())]).count();
        }
        // A length under the header's own ends the walk.
        assert_eq!(attributes(&[2, 0, 1, 0, 0, 0, 0, 0]).count(), 0);
        let mut short = m.clone();
        short[..4].copy_from_slice(&8u32.to_ne_bytes());
        assert_eq!(messages(&short).count(), 0);
    }

    proptest::proptest! {
        /// Any bytes as a netlink reply: the walks end without a panic, and every message and
        /// attribute they yield lies inside the buffer, at least as long as its header says.
        #[test]
        fn any_reply_is_walked_within_the_buffer(
            attrs in proptest::collection::vec(proptest::num::u8::ANY, 0..128),
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..128),
        ) {
            // A well-formed message around arbitrary attributes, then arbitrary bytes.
            let b = [genl_message(0x1d, 1, 10, &attrs), tail].concat();
            proptest::prop_assert!(messages(&b).next().is_some());
            let mut seen = 0usize;
            for (_, body) in messages(&b) {
                seen += 16 + body.len();
                proptest::prop_assert!(seen <= b.len());
                for (_, v) in attributes(body.get(4..).unwrap_or(&[])) {
                    proptest::prop_assert!(v.len() < body.len());
                }
            }
            for (_, v) in attributes(&b) {
                proptest::prop_assert!(v.len() + 4 <= b.len());
            }
        }
    }

    /// The kernel's queue list, asked over generic netlink, agrees with sysfs for loopback
    /// (one queue; this test does not change namespaces, so sysfs is right here). A kernel from
    /// 6.8 on must answer (the `netdev` family is always built); an older one may not.
    #[test]
    fn the_kernel_lists_the_loopbacks_queue() {
        let lo = index("lo").expect("loopback");
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("the kernel's release");
        match netdev_rx_queues(lo) {
            Some(n) => assert_eq!(Some(n), sysfs_rx_queues("lo")),
            None => assert!(
                !kernel_at_least(6, 8),
                "Linux {} has the netdev family but did not answer",
                release.trim()
            ),
        }
        assert!(matches!(netdev_rx_queues(u32::MAX), Some(0) | None), "no such interface: no queues");
    }

    #[test]
    fn the_loopbacks_mtu_is_read_and_a_missing_interface_has_none() {
        assert!(mtu("lo").is_some_and(|m| m >= 1500));
        assert_eq!(mtu("no-such-if0"), None);
        assert_eq!(mtu(""), None);
    }

    /// Requests that would have the kernel read the buffer as a pointer, or write past it,
    /// are refused before any system call.
    #[test]
    fn requests_the_buffers_do_not_fit_are_refused() {
        let einval = |r: std::io::Result<()>| r.unwrap_err().raw_os_error() == Some(libc::EINVAL);
        assert!(einval(ifreq("lo", libc::SIOCGIFCONF, 0).map(drop)), "ifr_data read as a pointer");
        let mut value = [0u8; 8];
        value[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
        assert!(einval(ethtool("lo", &mut value)), "196 bytes asked of 8");
        value[..4].copy_from_slice(&0x0bu32.to_ne_bytes()); // ETHTOOL_SSET-like, not taken
        assert!(einval(ethtool("lo", &mut value)));
        assert!(einval(crate::afpacket::set_opt(-1, 283, 4, &[0u64; 3])), "XDP_UMEM_REG");
        assert!(ifreq("lo", libc::SIOCGIFMTU, 0).is_ok());
    }

    #[test]
    fn the_loopback_has_a_carrier_and_a_missing_interface_none() {
        assert!(has_carrier("lo"));
        assert!(!has_carrier("no-such-if0"));
    }

    #[test]
    fn the_loopbacks_offloads_and_driver_are_read_without_ethtool() {
        // lo can aggregate (GRO is on by default) and its driver answers GDRVINFO with nothing.
        assert!(Offload::Gro.get("lo").is_ok());
        assert!(Offload::Lro.get("lo").is_ok_and(|on| !on));
        assert_eq!(driver("no-such-if0"), None);
        assert!(Offload::Gro.get("no-such-if0").is_err());
        assert_eq!(Offload::from_word("gro"), Some(Offload::Gro));
        assert_eq!(Offload::from_word("tso"), None);
    }

    #[test]
    fn bad_names_are_refused_with_a_reason() {
        let e = check_exists("no-such-if0").unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        assert!(check_exists("a/b").unwrap_err().to_string().contains("not a valid"));
        assert!(check_exists("lo").is_ok());
    }
}
