//! Choosing and opening a live port by name: `afxdp:IF`, `afpacket:IF`, or a bare `IF`
//! (AF_XDP where it works, else AF_PACKET). Each interface yields a receiving half and a
//! transmitting half, so one direction can receive on it while the other sends through it.

use crate::afpacket::{AfPacketRx, AfPacketTx};
use crate::afxdp::{self, XdpRx, XdpTx};
use crate::port::{PollAt, RxFrame, RxPort, TxPort};
use crate::{iface, Error};
use pathem_model::Nanos;
use std::os::fd::RawFd;

/// The receiving half of a live port.
pub enum LiveRx {
    Packet(AfPacketRx),
    Xdp(XdpRx),
}

/// The transmitting half of a live port. Its batch buffers live inline in the AF_PACKET
/// variant; a live port exists once per interface, so the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum LiveTx {
    Packet(AfPacketTx),
    Xdp(XdpTx),
}

/// An opened interface: its halves and how it was opened, in words.
pub struct Opened {
    pub rx: LiveRx,
    pub tx: LiveTx,
    pub ifname: String,
    pub how: String,
}

/// Splits `afxdp:IF` / `afpacket:IF` / `IF` into (kind, interface).
pub fn parse(spec: &str) -> Result<(&str, &str), Error> {
    let (kind, name) = spec.split_once(':').unwrap_or(("", spec));
    match kind {
        "" | "afxdp" | "afpacket" => Ok((kind, name)),
        _ => Err(Error::Interface {
            name: spec.into(),
            reason: format!("unknown port type `{kind}`; accepted: afxdp:IF, afpacket:IF or IF"),
        }),
    }
}

/// How live ports are opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortOptions {
    /// Longest frame carried, in bytes.
    pub max_frame: usize,
    /// Receive socket buffer of an AF_PACKET port, in bytes (AF_XDP rings are fixed).
    pub rx_buffer: usize,
}

impl Default for PortOptions {
    fn default() -> Self {
        PortOptions { max_frame: 9216, rx_buffer: crate::afpacket::DEFAULT_RX_BUFFER }
    }
}

/// Opens the port `spec`.
pub fn open(spec: &str, options: &PortOptions) -> Result<Opened, Error> {
    let (kind, name) = parse(spec)?;
    let max_frame = options.max_frame;
    let xdp_fits = iface::mtu(name).is_none_or(|m| m as usize + 14 <= afxdp::MAX_FRAME);
    let packet = |how: String| -> Result<Opened, Error> {
        Ok(Opened {
            rx: LiveRx::Packet(AfPacketRx::open(name, max_frame, options.rx_buffer)?),
            tx: LiveTx::Packet(AfPacketTx::open(name, max_frame)?),
            ifname: name.into(),
            how,
        })
    };
    match kind {
        "afpacket" => packet("AF_PACKET".into()),
        "afxdp" if !xdp_fits => Err(Error::Interface {
            name: name.into(),
            reason: format!(
                "its MTU is larger than AF_XDP frames ({} B); use afpacket:{name}",
                afxdp::MAX_FRAME
            ),
        }),
        "afxdp" => {
            let (rx, tx, mode) = afxdp::open(name)?;
            Ok(Opened {
                rx: LiveRx::Xdp(rx),
                tx: LiveTx::Xdp(tx),
                ifname: name.into(),
                how: format!("AF_XDP ({mode})"),
            })
        }
        _ if !xdp_fits => packet("AF_PACKET (the MTU is too large for AF_XDP)".into()),
        _ => match afxdp::open(name) {
            Ok((rx, tx, mode)) => Ok(Opened {
                rx: LiveRx::Xdp(rx),
                tx: LiveTx::Xdp(tx),
                ifname: name.into(),
                how: format!("AF_XDP ({mode})"),
            }),
            Err(e) => packet(format!("AF_PACKET (AF_XDP unavailable: {e})")),
        },
    }
}

impl LiveRx {
    pub fn raw_fd(&self) -> RawFd {
        match self {
            LiveRx::Packet(p) => p.raw_fd(),
            LiveRx::Xdp(x) => x.raw_fd(),
        }
    }
    /// Receive errors seen (an interface that went down).
    pub fn errors(&self) -> u64 {
        match self {
            LiveRx::Packet(p) => p.errors,
            LiveRx::Xdp(_) => 0,
        }
    }
}

impl LiveTx {
    /// Frames the interface refused.
    pub fn errors(&self) -> u64 {
        match self {
            LiveTx::Packet(p) => p.errors,
            LiveTx::Xdp(x) => x.errors,
        }
    }
}

impl RxPort for LiveRx {
    #[inline]
    fn recv_burst<F: FnMut(RxFrame<'_>)>(&mut self, now: Nanos, max: usize, f: F) -> Result<usize, Error> {
        match self {
            LiveRx::Packet(p) => p.recv_burst(now, max, f),
            LiveRx::Xdp(x) => x.recv_burst(now, max, f),
        }
    }
    fn poll_at(&self) -> PollAt {
        match self {
            LiveRx::Packet(p) => p.poll_at(),
            LiveRx::Xdp(x) => x.poll_at(),
        }
    }
    fn kernel_drops(&mut self) -> u64 {
        match self {
            LiveRx::Packet(p) => p.kernel_drops(),
            LiveRx::Xdp(x) => x.kernel_drops(),
        }
    }
}

impl TxPort for LiveTx {
    #[inline]
    fn send(&mut self, release: Nanos, wire_len: u32, data: &[u8]) -> bool {
        match self {
            LiveTx::Packet(p) => p.send(release, wire_len, data),
            LiveTx::Xdp(x) => x.send(release, wire_len, data),
        }
    }
    fn flush(&mut self) -> Result<(), Error> {
        match self {
            LiveTx::Packet(p) => p.flush(),
            LiveTx::Xdp(x) => x.flush(),
        }
    }
    fn queued(&self) -> usize {
        match self {
            LiveTx::Packet(p) => p.queued(),
            LiveTx::Xdp(x) => x.queued(),
        }
    }
}
