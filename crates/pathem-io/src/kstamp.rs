//! The kernel's clocks and the timestamps it attaches to received and sent datagrams.
//!
//! Live ports and the probe share one time base, CLOCK_MONOTONIC. The kernel stamps datagrams
//! on CLOCK_REALTIME; [`RealtimeStamps`] moves them across.

use pathem_model::Nanos;
use std::mem::zeroed;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// A clock's current value in nanoseconds.
pub(crate) fn clock_ns(id: libc::clockid_t) -> i64 {
    // SAFETY: timespec is plain data; zero is a valid value.
    let mut ts: libc::timespec = unsafe { zeroed() };
    // SAFETY: clock_gettime writes one timespec into the live local it is given.
    unsafe { libc::clock_gettime(id, &mut ts) };
    // Saturating: CLOCK_REALTIME can be set (by root) past 2262, where nanoseconds pass i64.
    ts.tv_sec.saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec)
}

/// CLOCK_MONOTONIC now: the time base of live runs and of the probe.
pub fn monotonic_now() -> Nanos {
    Nanos(clock_ns(libc::CLOCK_MONOTONIC) as u64)
}

/// How often [`RealtimeStamps`] reads the two clocks' offset again.
pub const OFFSET_REFRESH: Nanos = Nanos(10_000_000);

/// Kernel timestamps (CLOCK_REALTIME) moved onto CLOCK_MONOTONIC, for a port or a socket.
///
/// The offset between the two clocks is read again once [`OFFSET_REFRESH`] has passed: a
/// step of the realtime clock (an NTP step, `date -s`) shifts the stamps converted for at
/// most that long, not for the rest of the run. Three clock reads every 10 ms.
#[derive(Debug)]
pub struct RealtimeStamps {
    offset: AtomicI64,
    /// CLOCK_MONOTONIC when `offset` was read.
    read_at: AtomicU64,
}

impl RealtimeStamps {
    pub fn new() -> RealtimeStamps {
        RealtimeStamps {
            offset: AtomicI64::new(realtime_offset()),
            read_at: AtomicU64::new(monotonic_now().0),
        }
    }

    /// The CLOCK_REALTIME stamp `rt` (ns since the epoch) on CLOCK_MONOTONIC, with `now` a
    /// recent read of CLOCK_MONOTONIC (it says when the offset is due again).
    #[inline]
    pub fn monotonic(&self, rt: i64, now: Nanos) -> Nanos {
        self.at(now).monotonic(rt)
    }

    /// The offset to convert with at `now`, read again if it is due: taken once for a burst
    /// of stamps, so the stamps themselves cost a subtraction each.
    #[inline]
    pub fn at(&self, now: Nanos) -> Offset {
        self.at_with(now, realtime_offset)
    }

    /// [`at`](Self::at) with the offset read by `read_offset` (tests step it).
    #[inline]
    fn at_with(&self, now: Nanos, read_offset: impl FnOnce() -> i64) -> Offset {
        if now.0.saturating_sub(self.read_at.load(Ordering::Relaxed)) >= OFFSET_REFRESH.0 {
            self.offset.store(read_offset(), Ordering::Relaxed);
            self.read_at.store(now.0, Ordering::Relaxed);
        }
        Offset(self.offset.load(Ordering::Relaxed))
    }
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC as [`RealtimeStamps::at`] gave it.
#[derive(Clone, Copy, Debug)]
pub struct Offset(i64);

impl Offset {
    /// The CLOCK_REALTIME stamp `rt` on CLOCK_MONOTONIC (0 for a stamp before its epoch).
    #[inline]
    pub fn monotonic(self, rt: i64) -> Nanos {
        Nanos(rt.saturating_sub(self.0).max(0) as u64)
    }
}

impl Default for RealtimeStamps {
    fn default() -> RealtimeStamps {
        RealtimeStamps::new()
    }
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC now: subtract it from a kernel timestamp.
///
/// CLOCK_REALTIME is read between two reads of CLOCK_MONOTONIC, and read again when the
/// thread lost its CPU between them (more than 10 µs apart, up to eight tries, the tightest
/// kept): an offset read across a deschedule would be off by its length for as long as it is
/// used, every stamp converted with it that much later.
fn realtime_offset() -> i64 {
    let mut best = (i64::MAX, 0);
    for _ in 0..8 {
        let before = clock_ns(libc::CLOCK_MONOTONIC);
        let real = clock_ns(libc::CLOCK_REALTIME);
        let after = clock_ns(libc::CLOCK_MONOTONIC);
        let width = after - before;
        if width < best.0 {
            best = (width, real - before - width / 2);
        }
        if width <= 10_000 {
            break;
        }
    }
    best.1
}

/// The first timestamp of control-message type `ty` (`SO_TIMESTAMPNS`, or `SO_TIMESTAMPING`
/// whose first entry is the software stamp) in a received message, in CLOCK_REALTIME ns.
///
/// # Safety
/// `msg` must describe a control buffer that a successful `recvmsg`/`recvmmsg` filled.
pub(crate) unsafe fn cmsg_time(msg: &libc::msghdr, ty: i32) -> Option<i64> {
    // SAFETY: guaranteed by the caller; the CMSG_* helpers stay within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            // A message of the type too short for a timespec (a type whose data is something
            // else) is not read past its end.
            let fits = (*c).cmsg_len as usize
                >= libc::CMSG_LEN(std::mem::size_of::<libc::timespec>() as u32) as usize;
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == ty && fits {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                // A realtime stamp past 2262 (a clock set there) is no stamp: the port stamps
                // the frame itself, as when the kernel gave none.
                return ts.tv_sec.checked_mul(1_000_000_000)?.checked_add(ts.tv_nsec);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

/// One `recvmsg` into `buf`: the length and the timestamp of control-message type `ty`.
pub(crate) fn recv_stamped(
    fd: RawFd,
    buf: &mut [u8],
    flags: i32,
    ty: i32,
) -> std::io::Result<(usize, Option<i64>)> {
    let mut ctrl = [0u8; 256];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: msghdr is plain data; zero is valid; it points at live locals below.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = ctrl.len() as _; // usize in glibc, u32 in musl
                                          // SAFETY: msg points at `buf` and `ctrl`, both live for the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, flags) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: recvmsg succeeded and filled the control buffer `msg` describes.
    Ok((n as usize, unsafe { cmsg_time(&msg, ty) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_of_the_realtime_clock_is_followed_within_the_refresh() {
        // Realtime ran 1 ms ahead when the offset was read (at 0); it has since stepped 5 ms
        // back, so a frame that arrives at monotonic t is stamped t − 4 ms.
        let s = RealtimeStamps { offset: AtomicI64::new(1_000_000), read_at: AtomicU64::new(0) };
        let reads = std::cell::Cell::new(0);
        let stepped = || {
            reads.set(reads.get() + 1);
            -4_000_000
        };
        let at = |t: u64| s.at_with(Nanos(t), stepped).monotonic(t as i64 - 4_000_000);
        let due = OFFSET_REFRESH.0;
        assert_eq!(at(3_000_000), Nanos(0), "5 ms early, held at zero");
        assert_eq!(at(due - 1), Nanos(due - 1 - 5_000_000), "the old offset until a read is due");
        assert_eq!(reads.get(), 0);
        assert_eq!(at(due), Nanos(due), "read again once due");
        assert_eq!(at(due + 5_000_000), Nanos(due + 5_000_000));
        assert_eq!(reads.get(), 1, "and not again before the next is due");
    }

    #[test]
    fn the_offset_is_read_without_a_deschedule_in_it() {
        // Whatever the machine does, the offset read matches the two clocks to within the
        // 10 µs the read allows (plus the clocks' own granularity).
        let o = realtime_offset();
        let direct = clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC);
        assert!((o - direct).abs() < 1_000_000, "offset {o} against {direct}");
    }
}
