//! Choosing and opening a live port by name: `afxdp:IF`, `afpacket:IF`, a bare `IF` (AF_XDP
//! where it works, else AF_PACKET), or `dpdk:DEV` (with the `dpdk` feature). Each port yields a
//! receiving half and a transmitting half, so one direction can receive on it while the other
//! sends through it.

use crate::afpacket::{AfPacketRx, AfPacketTx};
use crate::afxdp::{self, XdpRx, XdpTx};
use crate::filler::TxTiming;
use crate::port::{PollAt, RxFrame, RxPort, TxPort};
use crate::{iface, Error};
use pathem_model::Nanos;
use std::os::fd::RawFd;

/// The receiving half of a live port. A DPDK half keeps its burst arrays inline; a live port
/// exists once per interface, so the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum LiveRx {
    Packet(AfPacketRx),
    Xdp(XdpRx),
    /// A TAP device's frames (`attach`).
    Tap(crate::tap::TapRx),
    /// Never a frame: the direction an `attach` leaves alone (sleeps on an eventfd no one
    /// writes).
    Idle(std::os::fd::OwnedFd),
    #[cfg(feature = "dpdk")]
    Dpdk(crate::dpdk::DpdkRx),
}

/// The transmitting half of a live port. Its batch buffers live inline in the AF_PACKET
/// variant; a live port exists once per interface, so the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum LiveTx {
    Packet(AfPacketTx),
    Xdp(XdpTx),
    /// Never given a frame (its direction's input is [`LiveRx::Idle`]); one that came would
    /// be refused by `send` and stay counted in the engine, never counted as sent.
    Idle,
    #[cfg(feature = "dpdk")]
    Dpdk(crate::dpdk::DpdkTx),
}

/// An opened interface: its halves and how it was opened, in words.
pub struct Opened {
    pub rx: LiveRx,
    pub tx: LiveTx,
    pub ifname: String,
    pub how: String,
}

/// A live port as the user names it: `afxdp:IF`, `afpacket:IF`, a bare `IF`, or `dpdk:DEV`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortSpec {
    /// A kernel interface: AF_XDP where it works, else AF_PACKET.
    Auto(String),
    AfXdp(String),
    AfPacket(String),
    /// A DPDK device, as written after `dpdk:` (a PCI address, a port id, or a virtual device
    /// with its arguments) and as parsed.
    Dpdk {
        text: String,
        device: crate::dpdk::Device,
    },
}

impl std::str::FromStr for PortSpec {
    type Err = Error;
    fn from_str(spec: &str) -> Result<PortSpec, Error> {
        let Some((kind, name)) = spec.split_once(':') else {
            return match spec.is_empty() {
                true => Err(Error::Interface { name: spec.into(), reason: "names no interface".into() }),
                false => Ok(PortSpec::Auto(spec.into())),
            };
        };
        let iface = |f: fn(String) -> PortSpec| match name.is_empty() {
            true => Err(Error::Interface {
                name: spec.into(),
                reason: "names no interface; accepted: afxdp:IF, afpacket:IF, IF or dpdk:DEV".into(),
            }),
            false => Ok(f(name.into())),
        };
        match kind {
            "afxdp" => iface(PortSpec::AfXdp),
            "afpacket" => iface(PortSpec::AfPacket),
            "dpdk" => Ok(PortSpec::Dpdk { text: name.into(), device: crate::dpdk::parse(name)? }),
            _ => Err(Error::Interface {
                name: spec.into(),
                reason: format!(
                    "unknown port type `{kind}`; accepted: afxdp:IF, afpacket:IF, IF or dpdk:DEV"
                ),
            }),
        }
    }
}

impl std::fmt::Display for PortSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortSpec::Auto(i) => f.write_str(i),
            PortSpec::AfXdp(i) => write!(f, "afxdp:{i}"),
            PortSpec::AfPacket(i) => write!(f, "afpacket:{i}"),
            PortSpec::Dpdk { text, .. } => write!(f, "dpdk:{text}"),
        }
    }
}

impl PortSpec {
    /// The kernel interface the port reads, if any: its interface, or a DPDK virtual device's
    /// `iface=`.
    pub fn kernel_iface(&self) -> Option<&str> {
        match self {
            PortSpec::Auto(i) | PortSpec::AfXdp(i) | PortSpec::AfPacket(i) => Some(i),
            PortSpec::Dpdk { device, .. } => device.kernel_iface(),
        }
    }

    /// The interface or device, as written (`pa`, `net_af_xdp0,iface=pa`).
    pub fn name(&self) -> &str {
        match self {
            PortSpec::Auto(i) | PortSpec::AfXdp(i) | PortSpec::AfPacket(i) => i,
            PortSpec::Dpdk { text, .. } => text,
        }
    }
}

/// How live ports are opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortOptions {
    /// Longest frame carried, in bytes.
    pub max_frame: usize,
    /// Receive socket buffer of an AF_PACKET port, in bytes (AF_XDP rings are fixed).
    pub rx_buffer: usize,
    /// DPDK's EAL arguments (`--eal`), added to pathem's defaults.
    pub eal: Option<String>,
    /// How port A's and port B's transmitting halves time frames (`--tx-timing`): A's is the
    /// b→a direction's, B's the a→b direction's.
    pub tx_timing_a: TxTiming,
    pub tx_timing_b: TxTiming,
}

impl Default for PortOptions {
    fn default() -> Self {
        PortOptions {
            max_frame: 9216,
            rx_buffer: crate::afpacket::DEFAULT_RX_BUFFER,
            eal: None,
            tx_timing_a: TxTiming::Software,
            tx_timing_b: TxTiming::Software,
        }
    }
}

/// Prepares the ports of one run before any is opened: DPDK's EAL is initialised once per
/// process, for all its devices together. Returns what pathem added to the EAL's arguments,
/// in words (nothing without DPDK ports).
pub fn prepare(specs: &[&PortSpec], options: &PortOptions) -> Result<Vec<String>, Error> {
    let devices: Vec<crate::dpdk::Device> = specs
        .iter()
        .filter_map(|s| match s {
            PortSpec::Dpdk { device, .. } => Some(device.clone()),
            _ => None,
        })
        .collect();
    if devices.is_empty() {
        return Ok(Vec::new());
    }
    #[cfg(feature = "dpdk")]
    return Ok(crate::dpdk::init(options.eal.as_deref(), &devices)?.added);
    #[cfg(not(feature = "dpdk"))]
    {
        let _ = options;
        Err(crate::dpdk::unavailable(devices[0].port_name().unwrap_or("a port id")))
    }
}

/// Why `spec`, carrying frames of up to `max_frame` bytes, cannot time frames as `timing`
/// says, in one line (`None`: it can, as far as is known before it opens: a device may take
/// shorter frames, which its opening checks).
pub fn timing_refused(spec: &PortSpec, timing: &TxTiming, max_frame: usize) -> Option<String> {
    let TxTiming::Filler(f) = timing else { return None };
    let longest = crate::filler::longest(iface::frame_cap(spec.kernel_iface(), max_frame));
    match spec {
        PortSpec::Dpdk { .. } if f.max > longest => Some(format!(
            "max={} is longer than {spec}'s frames ({longest} B: --max-frame and its MTU)",
            f.max
        )),
        PortSpec::Dpdk { .. } => None,
        _ => Some(format!("{spec} cannot send filler frames (--tx-timing filler): only dpdk: ports can")),
    }
}

/// Opens the port `spec`, its transmitting half timing frames as `timing` says.
pub fn open(spec: &PortSpec, options: &PortOptions, timing: &TxTiming) -> Result<Opened, Error> {
    let max_frame = options.max_frame;
    let name = spec.name();
    if let PortSpec::Dpdk { text, device } = spec {
        return open_dpdk(text, device, options, timing);
    }
    if let Some(why) = timing_refused(spec, timing, max_frame) {
        return Err(Error::Interface { name: name.into(), reason: why });
    }
    let xdp_fits = iface::mtu(name).is_none_or(|m| m as usize + 14 <= afxdp::MAX_FRAME);
    let packet = |how: String| -> Result<Opened, Error> {
        Ok(Opened {
            rx: LiveRx::Packet(AfPacketRx::open(name, max_frame, options.rx_buffer)?),
            tx: LiveTx::Packet(AfPacketTx::open(name, max_frame)?),
            ifname: name.into(),
            how: format!("{how}, kernel receive stamps"),
        })
    };
    match spec {
        PortSpec::AfPacket(_) => packet("AF_PACKET".into()),
        PortSpec::AfXdp(_) if !xdp_fits => Err(Error::Interface {
            name: name.into(),
            reason: format!(
                "its MTU is larger than AF_XDP frames ({} B); use afpacket:{name}",
                afxdp::MAX_FRAME
            ),
        }),
        PortSpec::AfXdp(_) => {
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

#[cfg(feature = "dpdk")]
fn open_dpdk(
    dev: &str,
    device: &crate::dpdk::Device,
    options: &PortOptions,
    timing: &TxTiming,
) -> Result<Opened, Error> {
    let (rx, tx, how) = crate::dpdk::open(dev, device, options.max_frame, options.eal.as_deref(), timing)?;
    Ok(Opened { rx: LiveRx::Dpdk(rx), tx: LiveTx::Dpdk(tx), ifname: dev.into(), how })
}

#[cfg(not(feature = "dpdk"))]
fn open_dpdk(
    dev: &str,
    _device: &crate::dpdk::Device,
    _options: &PortOptions,
    _timing: &TxTiming,
) -> Result<Opened, Error> {
    Err(crate::dpdk::unavailable(dev))
}

impl LiveRx {
    /// The sockets to sleep on until frames arrive (an AF_XDP port has one per receive
    /// queue); `None` for a poll-mode port (DPDK), which has nothing to sleep on and is polled
    /// without rest.
    pub fn raw_fds(&self) -> Vec<Option<RawFd>> {
        match self {
            LiveRx::Packet(p) => vec![Some(p.raw_fd())],
            LiveRx::Xdp(x) => x.raw_fds().map(Some).collect(),
            LiveRx::Tap(t) => vec![Some(t.raw_fd())],
            LiveRx::Idle(fd) => vec![Some(std::os::fd::AsRawFd::as_raw_fd(fd))],
            #[cfg(feature = "dpdk")]
            LiveRx::Dpdk(_) => vec![None],
        }
    }
    /// The receive queues this half reads (AF_XDP and DPDK ports read every queue of their
    /// interface or device); empty for a port that reads what the kernel hands one socket.
    pub fn queue_ids(&self) -> Vec<usize> {
        match self {
            LiveRx::Xdp(x) => x.queue_ids(),
            #[cfg(feature = "dpdk")]
            LiveRx::Dpdk(d) => d.queue_ids(),
            _ => Vec::new(),
        }
    }

    /// Deals the receive queues out to `parts` readers, queue `i` to part `i % parts`: this
    /// half keeps part 0's, and part `p` (1 ≤ p < parts) becomes element `p - 1`, a half of
    /// its own to read on another thread, or `None` when it got no queue (fewer queues than
    /// parts, or a port with one socket: AF_PACKET, TAP).
    pub fn split(&mut self, parts: usize) -> Vec<Option<LiveRx>> {
        match self {
            LiveRx::Xdp(x) => x.split(parts).into_iter().map(|p| p.map(LiveRx::Xdp)).collect(),
            #[cfg(feature = "dpdk")]
            LiveRx::Dpdk(d) => d.split(parts).into_iter().map(|p| p.map(LiveRx::Dpdk)).collect(),
            _ => (1..parts).map(|_| None).collect(),
        }
    }

    /// An attachment's TAP device still holds a frame pathem has not read (asked once more as
    /// it ends); false for every other port.
    pub fn holds_unread(&self) -> bool {
        matches!(self, LiveRx::Tap(t) if t.holds_frames())
    }

    /// Receive errors seen (an interface that went down).
    pub fn errors(&self) -> u64 {
        match self {
            LiveRx::Tap(t) => t.errors,
            // A ring is read without system calls: an interface going down leaves it idle.
            LiveRx::Packet(_) | LiveRx::Xdp(_) | LiveRx::Idle(_) => 0,
            #[cfg(feature = "dpdk")]
            LiveRx::Dpdk(_) => 0,
        }
    }
}

impl LiveTx {
    /// The longest frame this port can send (its interface's MTU with the Ethernet header and
    /// a VLAN tag; a DPDK device's mbufs): the runtime drops longer frames at ingress, as
    /// `oversize`, rather than have the kernel refuse them.
    pub fn max_frame(&self) -> Option<usize> {
        match self {
            LiveTx::Packet(p) => p.max_frame(),
            LiveTx::Xdp(x) => x.max_frame(),
            LiveTx::Idle => None,
            #[cfg(feature = "dpdk")]
            LiveTx::Dpdk(d) => Some(d.max_frame()),
        }
    }
}

impl RxPort for LiveRx {
    #[inline]
    fn recv_burst<F: FnMut(RxFrame<'_>)>(&mut self, now: Nanos, max: usize, f: F) -> Result<usize, Error> {
        match self {
            LiveRx::Packet(p) => p.recv_burst(now, max, f),
            LiveRx::Xdp(x) => x.recv_burst(now, max, f),
            LiveRx::Tap(t) => t.recv_burst(now, max, f),
            LiveRx::Idle(_) => Ok(0),
            #[cfg(feature = "dpdk")]
            LiveRx::Dpdk(d) => d.recv_burst(now, max, f),
        }
    }
    fn poll_at(&self) -> PollAt {
        match self {
            LiveRx::Packet(p) => p.poll_at(),
            LiveRx::Xdp(x) => x.poll_at(),
            LiveRx::Tap(t) => t.poll_at(),
            LiveRx::Idle(_) => PollAt::Unknown,
            #[cfg(feature = "dpdk")]
            LiveRx::Dpdk(d) => d.poll_at(),
        }
    }
    fn kernel_drops(&mut self) -> u64 {
        match self {
            LiveRx::Packet(p) => p.kernel_drops(),
            LiveRx::Xdp(x) => x.kernel_drops(),
            LiveRx::Tap(t) => t.kernel_drops(),
            LiveRx::Idle(_) => 0,
            #[cfg(feature = "dpdk")]
            LiveRx::Dpdk(d) => d.kernel_drops(),
        }
    }
    fn rolled_over(&mut self) -> u64 {
        match self {
            LiveRx::Packet(_) | LiveRx::Xdp(_) | LiveRx::Tap(_) | LiveRx::Idle(_) => 0,
            #[cfg(feature = "dpdk")]
            LiveRx::Dpdk(d) => d.rolled_over(),
        }
    }
    /// What the host itself sent on an attachment's TAP device.
    fn foreign(&self) -> u64 {
        match self {
            LiveRx::Tap(t) => t.foreign(),
            _ => 0,
        }
    }
    fn offload(&self) -> crate::offload::OffloadCounts {
        match self {
            LiveRx::Packet(p) => p.offload(),
            LiveRx::Xdp(x) => x.offload(),
            LiveRx::Tap(t) => t.offload(),
            LiveRx::Idle(_) => Default::default(),
            #[cfg(feature = "dpdk")]
            LiveRx::Dpdk(d) => d.offload(),
        }
    }
}

impl TxPort for LiveTx {
    #[inline]
    fn send(&mut self, release: Nanos, wire_len: u32, data: &[u8]) -> bool {
        match self {
            LiveTx::Packet(p) => p.send(release, wire_len, data),
            LiveTx::Xdp(x) => x.send(release, wire_len, data),
            LiveTx::Idle => false,
            #[cfg(feature = "dpdk")]
            LiveTx::Dpdk(d) => d.send(release, wire_len, data),
        }
    }
    fn flush(&mut self) -> Result<(), Error> {
        match self {
            LiveTx::Packet(p) => p.flush(),
            LiveTx::Xdp(x) => x.flush(),
            LiveTx::Idle => Ok(()),
            #[cfg(feature = "dpdk")]
            LiveTx::Dpdk(d) => d.flush(),
        }
    }
    fn queued(&self) -> usize {
        match self {
            LiveTx::Packet(p) => p.queued(),
            LiveTx::Xdp(x) => x.queued(),
            LiveTx::Idle => 0,
            #[cfg(feature = "dpdk")]
            LiveTx::Dpdk(d) => d.queued(),
        }
    }
    fn refused(&mut self, fresh: bool) -> crate::port::TxRefused {
        match self {
            LiveTx::Packet(p) => p.refused(fresh),
            LiveTx::Xdp(x) => x.refused(fresh),
            LiveTx::Idle => Default::default(),
            #[cfg(feature = "dpdk")]
            LiveTx::Dpdk(d) => d.refused(fresh),
        }
    }

    fn lead(&self) -> Nanos {
        match self {
            #[cfg(feature = "dpdk")]
            LiveTx::Dpdk(d) => d.lead(),
            _ => Nanos::ZERO,
        }
    }

    fn fillers(&self) -> crate::filler::FillerCounts {
        match self {
            #[cfg(feature = "dpdk")]
            LiveTx::Dpdk(d) => d.fillers(),
            _ => Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(s: &str) -> PortSpec {
        s.parse().unwrap()
    }

    #[test]
    fn ports_are_checked_before_anything_opens() {
        assert!("dpdk:eth0".parse::<PortSpec>().unwrap_err().to_string().contains("accepted"));
        assert!("frob:eth0".parse::<PortSpec>().unwrap_err().to_string().contains("accepted"));
        assert!("afxdp:".parse::<PortSpec>().is_err());
        assert!(":eth0".parse::<PortSpec>().is_err(), "an empty type is no type");
        assert_eq!(port("dpdk:net_af_packet0,iface=pa").kernel_iface(), Some("pa"));
        assert_eq!(port("dpdk:0000:3b:00.0").kernel_iface(), None);
        assert_eq!(port("afxdp:eth1").kernel_iface(), Some("eth1"));
        assert_eq!(port("eth1"), PortSpec::Auto("eth1".into()));
        for text in ["afxdp:eth1", "afpacket:eth1", "eth1", "dpdk:net_af_packet0,iface=pa"] {
            assert_eq!(port(text).to_string(), text, "written back as given");
        }
        assert!(prepare(&[&port("afpacket:a"), &port("b")], &PortOptions::default()).unwrap().is_empty());
    }

    #[cfg(not(feature = "dpdk"))]
    #[test]
    fn without_the_feature_a_dpdk_port_says_how_to_get_it() {
        let ring = port("dpdk:net_ring0");
        let e = prepare(&[&ring, &port("pb")], &PortOptions::default()).unwrap_err().to_string();
        assert!(e.contains("--features dpdk"), "{e}");
        let e = open(&ring, &PortOptions::default(), &TxTiming::Software).err().unwrap().to_string();
        assert!(e.contains("--features dpdk"), "{e}");
    }
}
