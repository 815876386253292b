//! TAP devices as ports: a device on whose receive side frames are steered for pathem.
//!
//! [`Tap::create`] makes a non-persistent device: the kernel removes it when its last
//! descriptor closes, so a killed pathem leaves none behind. The device is made silent before
//! it comes up (no ARP, IPv6 off, no addresses).
//!
//! Frames reach pathem on the device's *receive* side: `attach`'s programs redirect them
//! there with a mark, and a packet socket on the device ([`TapRx`]) takes the marked ones
//! from its ring, many a call and with no system call a frame, before the device's own
//! program drops them (the host's stack never sees them). The kernel's work for each frame
//! (the copy into the ring) is done on the CPU that steered it, as the host's sending
//! thread's or the interface's receive work, not on pathem's. GSO super-frames and frames
//! whose checksum was left to the hardware come as they are, with a virtio-net header, and
//! the packet socket's port cuts and completes them ([`crate::offload`]). What the host sends
//! *on* the device (a DHCP client that took it for a new interface) goes the other way, to
//! its descriptor: the reader empties that at its looks and counts it ([`RxPort::foreign`]).
//! Frames pathem sends *on* the device go through a packet socket with the mark, where
//! `attach`'s program on the device's egress takes them on (see [`crate::attach`]).

use crate::afpacket::AfPacketRx;
use crate::iface::{ifreq, ifreq_int};
use crate::port::{PollAt, RxFrame, RxPort};
use crate::Error;
use pathem_model::Nanos;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNGETIFF: libc::c_ulong = 0x8004_54d2;
const IFF_TAP: i16 = 0x0002;
const IFF_NO_PI: i16 = 0x1000;
/// Refuse a device that exists already (rather than take over another's persistent one).
const IFF_TUN_EXCL: i16 = 0x8000u16 as i16;

/// A TAP device, open.
pub struct Tap {
    fd: OwnedFd,
    pub name: String,
    pub ifindex: u32,
}

fn os_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

impl Tap {
    /// Creates TAP device `name` (at most 15 bytes) with `mtu` and a transmit queue of
    /// `queue` frames, silent and up. Fails with `EBUSY` in the reason when a device of that
    /// name exists (a live process holds it, or it is another's persistent one).
    pub fn create(name: &str, mtu: u32, queue: u32) -> Result<Tap, Error> {
        let fail = |what: &str, e: std::io::Error| crate::iface::failure(name, what, e, "CAP_NET_ADMIN");
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(Error::Interface { name: name.into(), reason: "is not 1 to 15 bytes".into() });
        }
        // SAFETY: a plain open(2) of a NUL-terminated path; the result is checked.
        let raw = unsafe {
            libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC)
        };
        if raw < 0 {
            return Err(fail("cannot open /dev/net/tun", os_err()));
        }
        // SAFETY: raw was just returned by open(2) and has no other owner.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // TUNSETIFF takes the ifreq on the tun descriptor itself, not on a socket.
        let mut ifr = [0u8; 40];
        ifr[..name.len()].copy_from_slice(name.as_bytes());
        ifr[16..18].copy_from_slice(&(IFF_TAP | IFF_NO_PI | IFF_TUN_EXCL).to_ne_bytes());
        // SAFETY: `ifr` is 40 bytes, the size of struct ifreq, and outlives the call; `name` is
        // shorter than IFNAMSIZ (checked above), so it stays NUL-terminated.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, ifr.as_mut_ptr()) } < 0 {
            return Err(fail("cannot create the TAP device", os_err()));
        }
        let ifindex = crate::afpacket::ifindex(name)? as u32;
        // Silent before it comes up: no IPv6 (router solicitations, MLD), no ARP.
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1");
        ifreq(name, libc::SIOCSIFMTU, mtu as i32).map_err(|e| fail("cannot set its MTU", e))?;
        ifreq(name, libc::SIOCSIFTXQLEN, queue as i32)
            .map_err(|e| fail("cannot set its transmit queue", e))?;
        let flags = ifreq(name, libc::SIOCGIFFLAGS, 0).map_err(|e| fail("cannot read its flags", e))?;
        let up = (ifreq_int(&flags) & 0xffff) | libc::IFF_UP | libc::IFF_NOARP;
        ifreq(name, libc::SIOCSIFFLAGS, up).map_err(|e| fail("cannot bring it up", e))?;
        Ok(Tap { fd, name: name.into(), ifindex })
    }

    /// The device's drops since it was created, from its `drop` columns in the calling
    /// thread's namespace's `/proc/thread-self/net/dev` (a thread that entered a namespace sees
    /// its own there, where `/sys` shows the one it was mounted in): on the way in, before its
    /// packet socket saw them (a CPU's backlog full, the device down), and on the way out, of
    /// what the host sent on it (its queue full before a look read them). `None` when it is
    /// not there to ask.
    pub fn drops(name: &str) -> Option<(u64, u64)> {
        let text = std::fs::read_to_string("/proc/thread-self/net/dev").ok()?;
        let rest = text
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(name)?.strip_prefix(':').map(str::to_string))?;
        let column = |n: usize| rest.split_whitespace().nth(n)?.parse().ok();
        Some((column(3)?, column(11)?))
    }

    /// The receiving half: frames of up to `max_frame` bytes that reach the device's receive
    /// side with socket-buffer mark `mark`, from a packet ring of about `rx_buffer` bytes
    /// (as a packet-socket port's, [`crate::afpacket::DEFAULT_RX_BUFFER`]). The device lives
    /// as long as this.
    pub fn reader(self, max_frame: usize, rx_buffer: usize, mark: u32) -> Result<TapRx, Error> {
        let ring = AfPacketRx::open(&self.name, max_frame, rx_buffer)?;
        ring.only_marked(&self.name, mark)?;
        Ok(TapRx {
            ring,
            fd: self.fd,
            name: self.name,
            buf: vec![0u8; max_frame + 1].into_boxed_slice(),
            errors: 0,
            foreign: 0,
            deleted: None,
            ifindex: self.ifindex,
            watch: crate::iface::LinkWatch::open(),
            down: 0,
            away: 0,
            moved: false,
            drops: 0,
            host_drops: 0,
        })
    }
}

/// The host's own frames read from a device's descriptor at one look, at most: a host that
/// keeps sending on the device cannot hold the forwarding loop there.
const FOREIGN_PER_LOOK: usize = 1024;

/// Reads the frames the kernel steered into the device.
pub struct TapRx {
    /// The packet socket on the device, which takes the marked frames from its receive side.
    ring: AfPacketRx,
    /// The device's descriptor: it keeps the device, and what the host sends on the device
    /// waits in it.
    fd: OwnedFd,
    name: String,
    /// One frame of the host's own, read to be counted.
    buf: Box<[u8]>,
    /// Errors reading the descriptor other than "nothing to read".
    pub errors: u64,
    /// Frames the host itself sent on the device (a DHCP client or LLDP agent that took it
    /// for one of its interfaces), read from its descriptor and not forwarded: they never
    /// crossed the interface pathem is attached to.
    foreign: u64,
    /// Why the device's descriptor says it is gone (deleted under pathem).
    deleted: Option<std::io::Error>,
    /// The kernel's link messages (opened with the reader, in its namespace): a device set
    /// down and up again between two looks was down all the same, and a device moved away
    /// says so in them.
    watch: Option<crate::iface::LinkWatch>,
    /// Looks in a row (with the drop counts, every few milliseconds) that found the device
    /// down at its index here, or since its messages said it was: two make it down. A device
    /// leaving the namespace (deleted, moved) is set down first and is then no longer at its
    /// index: that down is not counted.
    down: u8,
    /// The device's index when it was made, where the kernel steers frames to it.
    ifindex: u32,
    /// Without the messages (or where some were lost): looks in a row that found the device
    /// alive (its descriptor names it) but not at that index in this network namespace. Two
    /// make it moved, as a name may change between the two questions of a look.
    away: u8,
    /// Moved to another namespace (and perhaps back, at another index), where what is steered
    /// to the index cannot reach it.
    moved: bool,
    /// The device's receive drops at the last look that found them.
    drops: u64,
    /// The host's own frames the device dropped before a look read them (its transmit drops).
    host_drops: u64,
}

impl TapRx {
    /// The packet socket, for waiting on it.
    pub fn raw_fd(&self) -> RawFd {
        self.ring.raw_fd()
    }

    /// Whether a frame waits in the packet socket now, unread: asked once more as an
    /// attachment ends, after its last read.
    pub fn holds_frames(&self) -> bool {
        self.ring.holds_frames()
    }

    /// Why the frames steered to the device can no longer reach it: deleted, moved to another
    /// network namespace, or set down.
    fn gone(&self) -> Option<String> {
        if let Some(e) = &self.deleted {
            return Some(format!("was deleted while pathem read it ({e})"));
        }
        if self.moved {
            return Some("was moved to another network namespace while pathem read it (the frames steered to it were lost)".into());
        }
        if self.down >= 2 {
            return Some("was set down while pathem read it (the frames steered to it were lost)".into());
        }
        None
    }

    /// The device's name now, asked of its descriptor (`TUNGETIFF`).
    fn current_name(&self) -> Option<String> {
        let mut ifr = [0u8; 40];
        // SAFETY: `ifr` is 40 bytes, the size of struct ifreq, and outlives the call; TUNGETIFF
        // writes the device's name (NUL-terminated within IFNAMSIZ) and flags into it.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), TUNGETIFF as _, ifr.as_mut_ptr()) } < 0 {
            return None;
        }
        let end = ifr[..libc::IFNAMSIZ].iter().position(|&b| b == 0)?;
        String::from_utf8(ifr[..end].to_vec()).ok().filter(|n| !n.is_empty())
    }

    /// Reads what the host sent on the device (at most [`FOREIGN_PER_LOOK`] frames) and
    /// counts it; notes a device deleted under pathem, which its descriptor then says.
    fn take_foreign(&mut self) {
        for _ in 0..FOREIGN_PER_LOOK {
            // SAFETY: reading at most `buf.len()` bytes into a live buffer of that size.
            let rc = unsafe {
                libc::read(self.fd.as_raw_fd(), self.buf.as_mut_ptr() as *mut libc::c_void, self.buf.len())
            };
            if rc > 0 {
                self.foreign += 1;
                continue;
            }
            if rc < 0 {
                let e = os_err();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => {}
                    Some(libc::EBADFD) | Some(libc::EIO) | Some(libc::ENODEV) | Some(libc::ENXIO) => {
                        self.deleted = Some(e);
                    }
                    _ => self.errors += 1,
                }
            }
            return;
        }
    }
}

impl RxPort for TapRx {
    fn recv_burst<F: FnMut(RxFrame<'_>)>(&mut self, now: Nanos, max: usize, f: F) -> Result<usize, Error> {
        // The kernel drops what it steers to a device that is gone, down or elsewhere, unseen
        // by pathem: once the ring holds nothing more from before, the caller ends (and gives
        // back what it steered here).
        let gone = self.gone();
        let n = self.ring.recv_burst(now, max, f)?;
        match gone {
            Some(reason) if n == 0 => Err(Error::Interface { name: self.name.clone(), reason }),
            _ => Ok(n),
        }
    }

    fn poll_at(&self) -> PollAt {
        self.ring.poll_at()
    }

    /// Also looks at the device's name, whether it is still up, in this network namespace and
    /// not deleted, and reads what the host sent on it (system calls, at the same pace).
    /// Drops that cannot be read now stay what they were: a count never goes back. (The
    /// kernel renames only a device that is down, so a rename ends the reader as a device set
    /// down does.) The drops are the device's on the way in and the packet ring's.
    fn kernel_drops(&mut self) -> u64 {
        self.take_foreign();
        let named = self.current_name();
        let alive = named.is_some();
        let at_index = |n: &str| crate::iface::index(n) == Some(self.ifindex);
        // The name the descriptor gives is the device's in whichever namespace it is now: taken
        // only while the device is this namespace's at its index (here, another device may
        // have that name).
        let here = match named {
            Some(name) if at_index(&name) => {
                self.name = name;
                true
            }
            _ => at_index(&self.name),
        };
        let look = |looks: u8, seen: bool| if seen { looks.saturating_add(1) } else { 0 };
        let seen = self.watch.as_mut().map(|w| w.seen(self.ifindex));
        match seen {
            Some(s) if !s.lost => self.moved |= s.moved,
            // No messages to go by: a device alive but not at its index here, twice.
            _ => {
                self.away = look(self.away, alive && !here);
                self.moved |= self.away >= 2;
            }
        }
        // Once down, down: the frames steered to it meanwhile were lost, whatever it is now.
        let was_down = seen.is_some_and(|s| s.down) || (self.down > 0 && self.watch.is_some());
        self.down = look(self.down, here && (was_down || crate::iface::is_down(&self.name)));
        if let Some((rx, tx)) = Tap::drops(&self.name) {
            (self.drops, self.host_drops) = (rx.max(self.drops), tx.max(self.host_drops));
        }
        self.drops.saturating_add(self.ring.kernel_drops())
    }

    /// The host's own frames: read at the looks, or dropped by the device before one.
    fn foreign(&self) -> u64 {
        self.foreign.saturating_add(self.host_drops)
    }

    fn offload(&self) -> crate::offload::OffloadCounts {
        self.ring.offload()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn drops_of_a_missing_device_are_none() {
        assert_eq!(super::Tap::drops("no-such-tap0"), None);
        // The loopback's drop columns read as numbers.
        assert!(super::Tap::drops("lo").is_some());
    }
}
