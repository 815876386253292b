//! The kernel's clocks and the timestamps it attaches to received and sent datagrams.
//!
//! Live ports and the probe share one time base, CLOCK_MONOTONIC. The kernel stamps datagrams
//! on CLOCK_REALTIME; `realtime_offset` moves them across.

use pathem_model::Nanos;
use std::mem::zeroed;
use std::os::fd::RawFd;

/// A clock's current value in nanoseconds.
pub(crate) fn clock_ns(id: libc::clockid_t) -> i64 {
    // SAFETY: clock_gettime writes one timespec into the local it is given.
    let mut ts: libc::timespec = unsafe { zeroed() };
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// CLOCK_MONOTONIC now: the time base of live runs and of the probe.
pub fn monotonic_now() -> Nanos {
    Nanos(clock_ns(libc::CLOCK_MONOTONIC) as u64)
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC now: subtract it from a kernel timestamp.
///
/// CLOCK_REALTIME is read between two reads of CLOCK_MONOTONIC, and read again when the
/// thread lost its CPU between them (more than 10 µs apart, up to eight tries, the tightest
/// kept): an offset read across a deschedule would be off by its length for as long as it is
/// used, every stamp converted with it that much later.
pub(crate) fn realtime_offset() -> i64 {
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
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == ty {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                return Some(ts.tv_sec * 1_000_000_000 + ts.tv_nsec);
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
