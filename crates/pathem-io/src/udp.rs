//! A UDP socket whose received datagrams carry the kernel's receive timestamp, on
//! CLOCK_MONOTONIC (the clock the sender stamps with on the same host), for measuring paths.

use crate::afpacket::{set_opt, set_receive_buffer};
use crate::kstamp::{monotonic_now, recv_stamped, RealtimeStamps};
use crate::Error;
use pathem_model::Nanos;
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
    stamps: RealtimeStamps,
}

impl TimestampedUdp {
    /// Binds to `addr` and turns on `SO_TIMESTAMPNS`.
    pub fn bind(addr: SocketAddr) -> Result<TimestampedUdp, Error> {
        let sock = UdpSocket::bind(addr).map_err(|e| Error::Interface {
            name: addr.to_string(),
            reason: format!("cannot bind a UDP socket: {e}"),
        })?;
        let _ = set_opt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &1i32);
        // Room for a second of 100 kpps: the receiver reads in batches.
        set_receive_buffer(sock.as_raw_fd(), RECEIVE_BUFFER);
        Ok(TimestampedUdp { sock, stamps: RealtimeStamps::new() })
    }

    /// The socket, for timeouts and sending.
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// The address it is bound to.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Datagrams the kernel dropped at this socket since it was made, its receive buffer
    /// full (`SO_MEMINFO`'s drop count): they crossed the path and were lost here. `None`
    /// where the kernel does not say.
    pub fn drops(&self) -> Option<u64> {
        const SK_MEMINFO_DROPS: usize = 8;
        // SAFETY: an array of u32, which every bit pattern is; the kernel fills at most its
        // size (SK_MEMINFO_VARS is 9 on every kernel with the option).
        let info: [u32; 9] =
            unsafe { crate::afpacket::get_opt(self.sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_MEMINFO) }
                .ok()?;
        Some(u64::from(info[SK_MEMINFO_DROPS]))
    }

    /// Receives one datagram into `buf` if one is waiting (`WouldBlock` otherwise).
    pub fn recv_nowait(&self, buf: &mut [u8]) -> std::io::Result<Received> {
        let (len, rt) = recv_stamped(self.sock.as_raw_fd(), buf, libc::MSG_DONTWAIT, libc::SO_TIMESTAMPNS)?;
        let now = monotonic_now();
        let at = rt.map_or(now, |t| self.stamps.monotonic(t, now).min(now));
        Ok(Received { len, at })
    }
}

/// A probe socket's receive buffer: 64 MiB (the system's `rmem_max` caps it without root).
const RECEIVE_BUFFER: i32 = 64 << 20;

/// CLOCK_MONOTONIC now (what probe senders stamp with).
pub use crate::kstamp::monotonic_now as now;

const SOF_TIMESTAMPING_TX_SOFTWARE: u32 = 1 << 1;
const SOF_TIMESTAMPING_SOFTWARE: u32 = 1 << 4;

/// Transmit timestamps turned on for a socket (see [`TxStamps::enable`]).
#[derive(Debug)]
pub struct TxStamps {
    stamps: RealtimeStamps,
}

impl TxStamps {
    /// Asks the kernel for software transmit timestamps on `sock` (taken as the driver queues
    /// each datagram); they come back on the socket's error queue with a copy of the
    /// datagram. `None` where the kernel refuses. The error queue counts against the socket's
    /// receive buffer: raised (as `bind` does a receiver's) so that a burst's stamps wait
    /// there rather than being dropped while the sender is busy sending it.
    pub fn enable(sock: &UdpSocket) -> Option<TxStamps> {
        let flags: u32 = SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
        set_opt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &flags).ok()?;
        set_receive_buffer(sock.as_raw_fd(), RECEIVE_BUFFER);
        Some(TxStamps { stamps: RealtimeStamps::new() })
    }

    /// Reads one transmit timestamp from `sock`'s error queue, if one is waiting, calling
    /// `f(datagram copy, time on CLOCK_MONOTONIC)`; returns whether one was read.
    pub fn read_one(&self, sock: &UdpSocket, f: impl FnOnce(&[u8], Nanos)) -> bool {
        let mut buf = [0u8; 2048];
        let flags = libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT;
        match recv_stamped(sock.as_raw_fd(), &mut buf, flags, libc::SO_TIMESTAMPING) {
            // struct scm_timestamping { struct timespec ts[3]; }: the first is the software stamp.
            Ok((len, Some(t))) => {
                let now = monotonic_now();
                f(&buf[..len], self.stamps.monotonic(t, now).min(now));
                true
            }
            Ok((_, None)) => true,
            Err(_) => false,
        }
    }
}
