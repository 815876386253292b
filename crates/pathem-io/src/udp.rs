//! A UDP socket whose received datagrams carry the kernel's receive timestamp, on
//! CLOCK_MONOTONIC (the clock the sender stamps with on the same host), for measuring paths.

use crate::Error;
use pathem_model::Nanos;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// A received datagram's length and its kernel receive time.
#[derive(Clone, Copy, Debug)]
pub struct Received {
    pub len: usize,
    pub at: Nanos,
}

/// A bound UDP socket with kernel receive timestamps.
pub struct TimestampedUdp {
    sock: UdpSocket,
    realtime_offset: i64,
}

fn clock(id: libc::clockid_t) -> i64 {
    // SAFETY: clock_gettime writes one timespec into the local it is given.
    let mut ts: libc::timespec = unsafe { zeroed() };
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

impl TimestampedUdp {
    /// Binds to `addr` and turns on `SO_TIMESTAMPNS`.
    pub fn bind(addr: SocketAddr) -> Result<TimestampedUdp, Error> {
        let sock = UdpSocket::bind(addr).map_err(|e| Error::Interface {
            name: addr.to_string(),
            reason: format!("cannot bind a UDP socket: {e}"),
        })?;
        let one: i32 = 1;
        // SAFETY: setsockopt with a pointer to a live i32 and its size.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                &one as *const i32 as *const libc::c_void,
                4,
            );
            let big: i32 = 16 << 20;
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &big as *const i32 as *const libc::c_void,
                4,
            );
        }
        Ok(TimestampedUdp {
            sock,
            realtime_offset: clock(libc::CLOCK_REALTIME) - clock(libc::CLOCK_MONOTONIC),
        })
    }

    /// The socket, for timeouts and sending.
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// Receives one datagram into `buf` (blocking up to the socket's read timeout).
    pub fn recv(&self, buf: &mut [u8]) -> std::io::Result<Received> {
        let mut ctrl = [0u8; 64];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: msghdr is plain data; zero is valid; we point it at live locals below.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctrl.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = ctrl.len();
        // SAFETY: msg points at iov (into `buf`) and `ctrl`, both live for the call.
        let n = unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut msg, 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut at = None;
        // SAFETY: walking the control buffer the kernel filled, within msg_controllen.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_TIMESTAMPNS {
                    let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                    at = Some(ts.tv_sec * 1_000_000_000 + ts.tv_nsec - self.realtime_offset);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let at = at.unwrap_or_else(|| clock(libc::CLOCK_MONOTONIC));
        Ok(Received { len: n as usize, at: Nanos(at.max(0) as u64) })
    }
}

/// CLOCK_MONOTONIC now (what probe senders stamp with).
pub fn now() -> Nanos {
    Nanos(clock(libc::CLOCK_MONOTONIC) as u64)
}

const _: () = assert!(size_of::<libc::timespec>() == 16);

const SOF_TIMESTAMPING_TX_SOFTWARE: u32 = 1 << 1;
const SOF_TIMESTAMPING_SOFTWARE: u32 = 1 << 4;

/// Asks the kernel for software transmit timestamps on `sock` (taken as the driver queues each
/// datagram); they come back on the socket's error queue with a copy of the datagram.
pub fn enable_tx_timestamps(sock: &UdpSocket) -> bool {
    let flags: u32 = SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
    // SAFETY: setsockopt with a pointer to a live u32 and its size.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            &flags as *const u32 as *const libc::c_void,
            4,
        ) == 0
    }
}

/// Reads the transmit timestamps waiting on `sock`'s error queue, calling `f(datagram copy,
/// time on CLOCK_MONOTONIC)` for each; returns how many were read.
pub fn drain_tx_timestamps(sock: &UdpSocket, mut f: impl FnMut(&[u8], Nanos)) -> usize {
    let offset = clock(libc::CLOCK_REALTIME) - clock(libc::CLOCK_MONOTONIC);
    let mut buf = [0u8; 2048];
    let mut ctrl = [0u8; 256];
    let mut n = 0;
    loop {
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: msghdr is plain data; zero is valid; it points at live locals below.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctrl.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = ctrl.len();
        // SAFETY: msg points at `buf` and `ctrl`, both live for the call.
        let len =
            unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if len < 0 {
            return n;
        }
        let mut at = None;
        // SAFETY: walking the control buffer the kernel filled, within msg_controllen.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_TIMESTAMPING {
                    // struct scm_timestamping { struct timespec ts[3]; }: [0] is the software stamp.
                    let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                    at = Some(ts.tv_sec * 1_000_000_000 + ts.tv_nsec - offset);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if let Some(t) = at {
            f(&buf[..len as usize], Nanos(t.max(0) as u64));
            n += 1;
        }
    }
}
