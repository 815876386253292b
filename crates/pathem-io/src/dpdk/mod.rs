//! DPDK ports: `dpdk:PCI`, `dpdk:PORT_ID` or `dpdk:VDEV` (`dpdk:net_af_xdp0,iface=eth1`).
//!
//! The ports themselves (`port`) exist only with the `dpdk` cargo feature, which compiles a
//! small C shim against the machine's DPDK. What is here is plain Rust and always built, so a
//! `dpdk:` port is checked the same way with or without the feature, and one built without it
//! says how to get it:
//! - [`parse`]: what a `dpdk:` port names;
//! - [`eal_args`]: the EAL's arguments, pathem's defaults around the user's `--eal`;
//! - [`ClockFit`]: a device clock moved onto CLOCK_MONOTONIC, refreshed while running.

#[cfg(feature = "dpdk")]
mod port;
#[cfg(feature = "dpdk")]
pub use port::{init, open, DpdkRx, DpdkTx};

use crate::Error;
use pathem_model::Nanos;
use std::sync::Mutex;

/// A DPDK port at close: how many of its pool's mbufs were still out of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closed {
    pub port: String,
    pub driver: String,
    /// mbufs still in use after the port was closed.
    pub in_use: u32,
    /// mbufs in use once the port had started, before any frame: the receive buffers the
    /// driver posted. Most drivers free theirs at close; net_af_xdp keeps its fill ring's.
    pub at_start: u32,
    pub pool: u32,
    /// Sockets the driver left open after closing the port, which pathem closed (net_af_xdp
    /// in DPDK 22.11 leaves its AF_XDP socket bound, so the interface's queue stays taken).
    pub sockets_closed: u32,
}

impl Closed {
    /// The report of one closed port, in words.
    pub fn describe(&self) -> String {
        let mut text = match self.in_use {
            0 => format!("{}: closed, all {} mbufs back in its pool", self.port, self.pool),
            n => format!(
                "{}: closed with {n} of {} mbufs out of its pool ({} posted {} for receiving at start)",
                self.port, self.pool, self.driver, self.at_start
            ),
        };
        if self.sockets_closed > 0 {
            text += &format!("; closed {} socket(s) {} left open", self.sockets_closed, self.driver);
        }
        text
    }
}

static CLOSED: Mutex<Vec<Closed>> = Mutex::new(Vec::new());

/// The DPDK ports closed since the last call, with their pools' counts (none without the
/// `dpdk` feature).
pub fn closed() -> Vec<Closed> {
    std::mem::take(&mut *CLOSED.lock().unwrap_or_else(|e| e.into_inner()))
}

/// What a `dpdk:` port names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Device {
    /// A PCI address, `0000:3b:00.0` (a short `3b:00.0` gets domain 0000), with optional
    /// device arguments after a comma.
    Pci { addr: String, args: Option<String> },
    /// A port the EAL probed by itself (its allow list, from `--eal`).
    PortId(u16),
    /// A virtual device: its name (`net_af_xdp0`) and the whole device string.
    Vdev { name: String, devargs: String },
}

/// Highest port id accepted (DPDK's RTE_MAX_ETHPORTS is 32 in most builds, 1024 at most).
pub const MAX_PORT_ID: u16 = 1023;

fn refuse(dev: &str, reason: impl Into<String>) -> Error {
    Error::Dpdk { dev: dev.into(), reason: reason.into() }
}

const ACCEPTED: &str = "accepted: dpdk:PCI (0000:3b:00.0), dpdk:PORT_ID (0 to 1023) or \
                        dpdk:VDEV (net_af_xdp0,iface=eth1)";

/// Parses what follows `dpdk:`.
pub fn parse(dev: &str) -> Result<Device, Error> {
    if dev.is_empty() {
        return Err(refuse(dev, format!("no device named; {ACCEPTED}")));
    }
    if dev.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
        return Err(refuse(dev, "contains white space or control characters"));
    }
    if dev.bytes().all(|b| b.is_ascii_digit()) {
        return match dev.parse::<u16>() {
            Ok(id) if id <= MAX_PORT_ID => Ok(Device::PortId(id)),
            _ => Err(refuse(dev, format!("port id out of range; {ACCEPTED}"))),
        };
    }
    let (head, args) = match dev.split_once(',') {
        Some((h, a)) => (h, Some(a)),
        None => (dev, None),
    };
    if let Some(addr) = pci_address(head) {
        return Ok(Device::Pci { addr, args: args.filter(|a| !a.is_empty()).map(str::to_string) });
    }
    let name_ok = head.len() <= 63
        && head.starts_with("net_")
        && head.len() > 4
        && head.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !name_ok {
        return Err(refuse(dev, format!("not a PCI address, port id or net_ virtual device; {ACCEPTED}")));
    }
    Ok(Device::Vdev { name: head.into(), devargs: dev.into() })
}

/// `DDDD:BB:DD.F` or `BB:DD.F` (hexadecimal), as DPDK names it (with the domain).
fn pci_address(s: &str) -> Option<String> {
    let parts: Vec<&str> = s.split(':').collect();
    let (domain, bus, devfn) = match parts.as_slice() {
        [d, b, df] => (*d, *b, *df),
        [b, df] => ("0000", *b, *df),
        _ => return None,
    };
    let (dev, func) = devfn.split_once('.')?;
    let hex = |t: &str, n: usize| t.len() == n && t.bytes().all(|b| b.is_ascii_hexdigit());
    let func_ok = func.len() == 1 && matches!(func.as_bytes()[0], b'0'..=b'7');
    (hex(domain, 4) && hex(bus, 2) && hex(dev, 2) && func_ok)
        .then(|| format!("{domain}:{bus}:{dev}.{func}").to_ascii_lowercase())
}

impl Device {
    /// The kernel interface a vdev reads (`iface=` of net_af_packet and net_af_xdp), whose
    /// receive offloads pathem turns off as it does for its own ports.
    pub fn kernel_iface(&self) -> Option<&str> {
        self.devarg("iface")
    }

    /// A virtual device's argument `key=` (`framesz`, `qpairs`), as given.
    pub fn devarg(&self, key: &str) -> Option<&str> {
        match self {
            Device::Vdev { devargs, .. } => {
                devargs.split(',').skip(1).find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            }
            _ => None,
        }
    }

    /// The name DPDK gives the port (what `rte_eth_dev_get_port_by_name` finds).
    pub fn port_name(&self) -> Option<&str> {
        match self {
            Device::Pci { addr, .. } => Some(addr),
            Device::Vdev { name, .. } => Some(name),
            Device::PortId(_) => None,
        }
    }
}

/// The argument words of `--eal`, split on white space (quotes are not interpreted).
pub fn split_eal(text: &str) -> Result<Vec<String>, Error> {
    if text.contains(['"', '\'', '\\']) {
        return Err(refuse(
            "--eal",
            format!("`{text}`: quotes and backslashes are not interpreted; give EAL arguments separated by spaces"),
        ));
    }
    let words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    // The EAL prints its usage and ends the process for these, before pathem could undo what
    // it set up (offloads turned off): refused, with where to read them.
    if let Some(w) = words.iter().find(|w| matches!(w.as_str(), "-h" | "--help" | "-v" | "--version")) {
        return Err(refuse(
            "--eal",
            format!("`{w}`: the EAL would print and end pathem there; `dpdk-testpmd {w}` prints the EAL's options and version"),
        ));
    }
    Ok(words)
}

/// Whether `args` has any of the options `names` (`-a`, `--allow=…` and `--allow …` alike).
fn has(args: &[String], names: &[&str]) -> bool {
    args.iter().any(|a| {
        names.iter().any(|n| {
            a == n
                || a.starts_with(&format!("{n}="))
                || (n.len() == 2 && a.starts_with(n) && !n.starts_with("--"))
        })
    })
}

/// What [`eal_args`] decided, for the startup message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EalPlan {
    pub args: Vec<String>,
    /// Defaults pathem added, in words (`--no-huge: no hugepages are reserved`).
    pub added: Vec<String>,
}

/// The EAL's arguments for `devices`: pathem's defaults, then the user's `--eal` words (later
/// arguments win, so the user's override), then the devices' own.
///
/// Defaults, each only where `--eal` says nothing of it:
/// - one lcore (`-l CPU`, the first CPU pathem may run on): pathem runs its own threads and
///   places them with `--cores`; the EAL's thread affinity is put back after initialisation;
/// - `--log-level=warning` (DPDK's notices are many), and its logs on standard error;
/// - without hugepages reserved (`hugepages == 0`) and only virtual devices: `--no-huge -m 512`;
/// - `--no-huge` runs with `--no-shconf`; with hugepages, `--in-memory`: no files left in
///   /var/run/dpdk, and several pathems (or pathem and testpmd) side by side;
/// - only virtual devices: `--no-pci` (the EAL would otherwise take every NIC bound to a
///   DPDK driver); PCI devices: `-a ADDR` for each (the allow list).
pub fn eal_args(user: &[String], devices: &[Device], first_cpu: usize, hugepages: u64) -> EalPlan {
    let mut plan = EalPlan { args: vec!["pathem".into()], added: Vec::new() };
    let add = |plan: &mut EalPlan, words: &[&str], why: &str| {
        plan.args.extend(words.iter().map(|w| w.to_string()));
        plan.added.push(format!("{} ({why})", words.join(" ")));
    };
    if !has(user, &["-l", "-c", "--lcores"]) {
        add(
            &mut plan,
            &["-l", &first_cpu.to_string()],
            "the EAL's one lcore; pathem places its threads with --cores",
        );
    }
    if !has(user, &["--log-level"]) {
        plan.args.push("--log-level=warning".into());
    }
    if !has(user, &["--telemetry", "--no-telemetry"]) {
        // pathem serves its own metrics (--metrics).
        plan.args.push("--no-telemetry".into());
    }
    let only_vdevs = devices.iter().all(|d| matches!(d, Device::Vdev { .. }));
    let mut no_huge = has(user, &["--no-huge"]);
    if !no_huge && hugepages == 0 && only_vdevs {
        add(&mut plan, &["--no-huge"], "no hugepages are reserved; virtual devices work without");
        no_huge = true;
    }
    if no_huge && !has(user, &["-m", "--socket-mem"]) {
        add(&mut plan, &["-m", "512"], "memory for the mbuf pools without hugepages");
    }
    if !has(user, &["--in-memory", "--no-shconf", "--file-prefix", "--proc-type"]) {
        if no_huge {
            add(&mut plan, &["--no-shconf"], "no shared files");
        } else {
            add(&mut plan, &["--in-memory"], "no shared files");
        }
    }
    let user_lists = has(user, &["-a", "--allow", "-b", "--block", "--no-pci"]);
    if only_vdevs && !user_lists {
        add(&mut plan, &["--no-pci"], "only virtual devices: leave the machine's NICs alone");
    }
    plan.args.extend(user.iter().cloned());
    if !user_lists {
        for d in devices {
            if let Device::Pci { addr, args } = d {
                plan.args.push("-a".into());
                plan.args.push(match args {
                    Some(a) => format!("{addr},{a}"),
                    None => addr.clone(),
                });
            }
        }
    }
    plan
}

/// A device clock moved onto CLOCK_MONOTONIC: from two readings of both clocks, the device's
/// rate and offset. Refreshed while running (each new reading becomes the base, the one
/// before it gives the rate over the interval between them), so drift is followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockFit {
    /// (monotonic ns, device ticks) at the older and the newer reading.
    old: (u64, u64),
    new: (u64, u64),
}

impl ClockFit {
    /// From two readings, the older first; `None` when the device clock did not advance.
    pub fn new(old: (u64, u64), new: (u64, u64)) -> Option<ClockFit> {
        (new.1 > old.1 && new.0 > old.0).then_some(ClockFit { old, new })
    }

    /// Takes a newer reading; keeps the fit if the device clock went backwards (a reset).
    pub fn refresh(&mut self, reading: (u64, u64)) {
        if let Some(f) = ClockFit::new(self.new, reading) {
            *self = f;
        }
    }

    /// The monotonic instant of device time `ticks`; saturates at 0 and at the maximum.
    pub fn to_monotonic(&self, ticks: u64) -> Nanos {
        let (m0, d0) = (self.old.0 as i128, self.old.1 as i128);
        let (m1, d1) = (self.new.0 as i128, self.new.1 as i128);
        let t = m1 + (ticks as i128 - d1) * (m1 - m0) / (d1 - d0);
        Nanos(t.clamp(0, u64::MAX as i128) as u64)
    }

    /// Device ticks per second.
    pub fn hz(&self) -> f64 {
        (self.new.1 - self.old.1) as f64 * 1e9 / (self.new.0 - self.old.0) as f64
    }
}

#[cfg(not(feature = "dpdk"))]
/// Without the `dpdk` feature: the one line that says how to get it.
pub fn unavailable(dev: &str) -> Error {
    refuse(
        dev,
        "this pathem was built without DPDK; rebuild with `cargo build --release --features dpdk` \
         (needs libdpdk-dev and pkg-config)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        split_eal(s).unwrap()
    }

    #[test]
    fn devices_parse() {
        assert_eq!(parse("0000:3B:00.1").unwrap(), Device::Pci { addr: "0000:3b:00.1".into(), args: None });
        assert_eq!(
            parse("3b:00.0,rxq_cqe_comp_en=0").unwrap(),
            Device::Pci { addr: "0000:3b:00.0".into(), args: Some("rxq_cqe_comp_en=0".into()) }
        );
        assert_eq!(parse("7").unwrap(), Device::PortId(7));
        let v = parse("net_af_xdp0,iface=veth1,start_queue=0").unwrap();
        assert_eq!(
            v,
            Device::Vdev {
                name: "net_af_xdp0".into(),
                devargs: "net_af_xdp0,iface=veth1,start_queue=0".into()
            }
        );
        assert_eq!(v.kernel_iface(), Some("veth1"));
        assert_eq!(parse("net_memif0").unwrap().kernel_iface(), None);
        // An argument by its whole key only.
        let d = parse("net_af_packet0,iface=pa,qpairs=4,framesz=4096").unwrap();
        assert_eq!((d.devarg("qpairs"), d.devarg("framesz")), (Some("4"), Some("4096")));
        assert_eq!((d.devarg("pairs"), d.devarg("q"), d.devarg("blocksz")), (None, None, None));
    }

    #[test]
    fn bad_devices_say_what_is_accepted() {
        for bad in ["", "1024", "99999", "eth0", "net_", "0000:3b:00.8", "3b:0.0", "net_x y", "net_a\u{1}"] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("dpdk:"), "{bad}: {e}");
        }
        assert!(parse("eth0").unwrap_err().to_string().contains("accepted"));
    }

    #[test]
    fn eal_defaults_stand_back_for_the_user() {
        let vdev = [parse("net_af_packet0,iface=pa").unwrap()];
        let p = eal_args(&[], &vdev, 1, 0);
        assert_eq!(
            p.args,
            words("pathem -l 1 --log-level=warning --no-telemetry --no-huge -m 512 --no-shconf --no-pci")
        );
        let p = eal_args(&words("-l 0-1 --no-huge -m 256 --file-prefix x"), &vdev, 0, 0);
        assert_eq!(
            p.args,
            words(
                "pathem --log-level=warning --no-telemetry --no-pci -l 0-1 --no-huge -m 256 --file-prefix x"
            )
        );
        // Hugepages reserved: use them, in memory.
        let p = eal_args(&[], &vdev, 0, 512);
        assert_eq!(p.args, words("pathem -l 0 --log-level=warning --no-telemetry --in-memory --no-pci"));
        // A NIC: allow-listed, never --no-pci, never an automatic --no-huge.
        let nic = [parse("0000:3b:00.0").unwrap(), vdev[0].clone()];
        let p = eal_args(&[], &nic, 0, 0);
        assert_eq!(
            p.args,
            words("pathem -l 0 --log-level=warning --no-telemetry --in-memory -a 0000:3b:00.0")
        );
        let p = eal_args(&words("-a 0000:5e:00.0"), &nic, 0, 0);
        assert_eq!(
            p.args,
            words("pathem -l 0 --log-level=warning --no-telemetry --in-memory -a 0000:5e:00.0")
        );
        assert!(split_eal("--vdev 'net_ring0'").is_err());
    }

    #[test]
    fn clock_fit_follows_rate_and_offset() {
        // A 1 GHz device clock started 5 s before CLOCK_MONOTONIC's 100 s, running 100 ppm fast.
        let dev = |mono: u64| ((mono as f64 - 95e9) * 1.0001) as u64;
        let mut fit =
            ClockFit::new((100_000_000_000, dev(100_000_000_000)), (101_000_000_000, dev(101_000_000_000)))
                .unwrap();
        assert!((fit.hz() - 1.0001e9).abs() < 1.0);
        let t = 101_500_000_000u64;
        assert!(fit.to_monotonic(dev(t)).as_nanos().abs_diff(t) <= 1);
        // The device slows to nominal: a refresh follows it.
        let dev2 = |mono: u64| dev(102_000_000_000) + (mono - 102_000_000_000);
        fit.refresh((102_000_000_000, dev(102_000_000_000)));
        fit.refresh((103_000_000_000, dev2(103_000_000_000)));
        assert!(fit.to_monotonic(dev2(103_200_000_000)).as_nanos().abs_diff(103_200_000_000) <= 1);
        // A clock that went backwards is ignored; extremes saturate.
        let before = fit;
        fit.refresh((104_000_000_000, 5));
        assert_eq!(fit, before);
        // A device far ahead of CLOCK_MONOTONIC: its tick 0 comes before monotonic 0.
        let ahead = ClockFit::new((1_000_000_000, 50_000_000_000), (2_000_000_000, 51_000_000_000)).unwrap();
        assert_eq!(ahead.to_monotonic(0), Nanos(0));
        let fast = ClockFit::new((1, 0), (2, 1_000_000)).unwrap();
        assert_eq!(fast.to_monotonic(u64::MAX).as_nanos(), 2 + (u64::MAX - 1_000_000) / 1_000_000);
        let slow = ClockFit::new((0, 0), (1_000_000, 1)).unwrap();
        assert_eq!(slow.to_monotonic(u64::MAX), Nanos(u64::MAX));
        assert!(ClockFit::new((1, 1), (2, 1)).is_none());
    }
}
