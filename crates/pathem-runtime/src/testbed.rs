//! Network namespaces joined by veth pairs: the one test bed that `shell`, `validate`, the
//! benchmarks and the live tests build, and that removes itself when dropped, whatever
//! happened.
//!
//! ```text
//!   {tag}g: g0 ──veth── pa  [{tag}m: pathem's ports]  pb ──veth── s0 :{tag}s
//! ```
//! [`Bed::through`] makes the three namespaces above (gen, mid, sink) with 10.201.0.1 on g0
//! and 10.201.0.2 on s0; [`Bed::direct`] joins gen and sink with one veth pair (g0 — s0), the
//! machine's own floor. Every interface keeps the kernel's defaults, as a user's containers
//! do: checksum offload, TSO and GSO on (the ends hand pathem partial checksums and
//! super-frames, which its ports turn into wire frames), MTU 1500, IPv6 on.

use crate::Error;
use std::process::{Command, Output};

/// The generator's address on g0.
pub const GEN_IP: &str = "10.201.0.1";
/// The sink's address on s0.
pub const SINK_IP: &str = "10.201.0.2";

/// Runs `ip ARGS`, failing with its error message.
pub fn ip(args: &[&str]) -> Result<(), Error> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| Error::Bed(format!("cannot run `ip` ({e}); install iproute2")))?;
    if !out.status.success() {
        return Err(Error::Bed(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Runs a command whose failure is tolerated; true when it succeeded.
pub fn quiet(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd).args(args).output().map(|o| o.status.success()).unwrap_or(false)
}

/// Moves the calling thread (and the sockets it opens, the processes it starts) into network
/// namespace `name`.
pub fn enter(name: &str) -> Result<(), Error> {
    pathem_io::host::enter_netns(name).map_err(Error::Bed)
}

/// The receive counter of interface `dev` in namespace `ns` (what the kernel counted).
pub fn rx_packets(ns: &str, dev: &str) -> Result<u64, Error> {
    let out = Command::new("ip")
        .args(["-n", ns, "-s", "-j", "link", "show", dev])
        .output()
        .map_err(|e| Error::Bed(format!("cannot run `ip` ({e}); install iproute2")))?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::Bed(format!("ip -s link show {dev} in {ns}: {e}")))?;
    v[0]["stats64"]["rx"]["packets"]
        .as_u64()
        .ok_or_else(|| Error::Bed(format!("ip -s link show {dev} in {ns}: no receive counter")))
}

/// The port kinds a bed's forwarder can use, for `bench --live` and the tests.
pub const PORT_KINDS: &str = "afpacket, afxdp, dpdk (net_af_packet virtual devices)";

/// pathem's two ports on a [`Bed::through`]'s `pa` and `pb` for a kind (see [`PORT_KINDS`]).
pub fn bed_ports(kind: &str) -> Result<(String, String), Error> {
    match kind {
        "afpacket" | "afxdp" => Ok((format!("{kind}:pa"), format!("{kind}:pb"))),
        // A ring of 2048 frames, like the AF_PACKET port's buffer (~1300): a burst of a
        // thousand frames fits while the forwarder is off its CPU for a moment.
        "dpdk" => Ok((
            "dpdk:net_af_packet0,iface=pa,framecnt=2048".into(),
            "dpdk:net_af_packet1,iface=pb,framecnt=2048".into(),
        )),
        _ => Err(Error::Bed(format!("port kind `{kind}`: accepted: {PORT_KINDS}"))),
    }
}

/// Namespaces joined by veth pairs; deleted on drop (which deletes their interfaces).
#[derive(Debug)]
pub struct Bed {
    pub gen: String,
    /// The forwarder's namespace, with ports `pa` (towards gen) and `pb` (towards sink);
    /// `None` for a direct bed.
    pub mid: Option<String>,
    pub sink: String,
}

impl Bed {
    /// gen — mid — sink, named `{tag}g`, `{tag}m`, `{tag}s` (the tag makes them unique).
    pub fn through(tag: &str) -> Result<Bed, Error> {
        let bed = Bed { gen: format!("{tag}g"), mid: Some(format!("{tag}m")), sink: format!("{tag}s") };
        bed.make()?;
        Ok(bed)
    }

    /// gen — sink joined by one veth pair (g0 — s0), with the same addresses.
    pub fn direct(tag: &str) -> Result<Bed, Error> {
        let bed = Bed { gen: format!("{tag}g"), mid: None, sink: format!("{tag}s") };
        bed.make()?;
        Ok(bed)
    }

    /// The forwarder's namespace (a bed made by [`Bed::through`]).
    pub fn mid(&self) -> &str {
        self.mid.as_deref().expect("a bed with a forwarder's namespace")
    }

    fn make(&self) -> Result<(), Error> {
        let (g, s) = (&self.gen, &self.sink);
        for n in [Some(g), self.mid.as_ref(), Some(s)].into_iter().flatten() {
            ip(&["netns", "add", n]).map_err(|e| {
                Error::Bed(format!("cannot create a network namespace (needs root or CAP_SYS_ADMIN): {e}"))
            })?;
            ip(&["-n", n, "link", "set", "lo", "up"])?;
        }
        match &self.mid {
            Some(m) => {
                ip(&["link", "add", "g0", "netns", g, "type", "veth", "peer", "name", "pa", "netns", m])?;
                ip(&["link", "add", "s0", "netns", s, "type", "veth", "peer", "name", "pb", "netns", m])?;
                ip(&["-n", m, "link", "set", "pa", "up"])?;
                ip(&["-n", m, "link", "set", "pb", "up"])?;
            }
            None => ip(&["link", "add", "g0", "netns", g, "type", "veth", "peer", "name", "s0", "netns", s])?,
        }
        for (n, d, a) in [(g, "g0", GEN_IP), (s, "s0", SINK_IP)] {
            ip(&["-n", n, "addr", "add", &format!("{a}/24"), "dev", d])?;
            ip(&["-n", n, "link", "set", d, "up"])?;
        }
        Ok(())
    }

    /// Runs `cmd` inside namespace `ns`.
    pub fn exec(&self, ns: &str, cmd: &[&str]) -> std::io::Result<Output> {
        Command::new("ip").args(["netns", "exec", ns]).args(cmd).output()
    }

    /// Resolves the sink's address from gen (ARP through whatever joins them), so that the
    /// first frames measured do not wait for it.
    pub fn warm_up(&self) {
        let _ = self.exec(&self.gen, &["ping", "-c", "1", "-W", "2", SINK_IP]);
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for n in [Some(&self.gen), self.mid.as_ref(), Some(&self.sink)].into_iter().flatten() {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

// ---- the shell's namespaces -------------------------------------------------------------

use std::net::Ipv4Addr;

/// The namespace, links and rules of one shell; removed on drop, whatever happened.
pub struct ShellBed {
    /// The command's namespace (its one interface is `eth0`).
    pub ns: String,
    /// pathem's namespace, with ports `pa` (towards the command) and `pb` (towards this host).
    pub link_ns: String,
    gw_if: String,
    nat: Option<Nat>,
    /// This side's address, the command's gateway.
    pub gateway: Ipv4Addr,
    /// What did not work out and the user should know (no masquerading, say).
    pub warning: Option<String>,
}

enum Nat {
    Nft(String),
    Iptables(String),
}

impl Drop for ShellBed {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth ends, and with them their peers.
        let _ = ip(&["netns", "del", &self.ns]);
        let _ = ip(&["netns", "del", &self.link_ns]);
        let _ = ip(&["link", "del", &self.gw_if]);
        match &self.nat {
            Some(Nat::Nft(table)) => {
                quiet("nft", &["delete", "table", "ip", table]);
            }
            Some(Nat::Iptables(subnet)) => {
                quiet("iptables", &["-t", "nat", "-D", "POSTROUTING", "-s", subnet, "-j", "MASQUERADE"]);
            }
            None => {}
        }
    }
}

/// A /30 in 100.64.0.0/10 (shared address space) that no local interface uses yet.
fn pick_subnet(pid: u32) -> Result<Ipv4Addr, Error> {
    let used = Command::new("ip")
        .args(["-4", "-o", "addr"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let used = used.unwrap_or_default();
    for k in 0..4096u32 {
        let idx = (pid.wrapping_add(k * 7919)) % (1 << 20);
        let base = Ipv4Addr::from(0x6440_0000u32 + idx * 4);
        let gw = Ipv4Addr::from(u32::from(base) + 1);
        let guest = Ipv4Addr::from(u32::from(base) + 2);
        if !used.contains(&format!(" {gw}/")) && !used.contains(&format!(" {guest}/")) {
            return Ok(base);
        }
    }
    Err(Error::Bed("no free /30 left in 100.64.0.0/10".into()))
}

impl ShellBed {
    /// Builds the namespaces, links, routes and NAT of the shell of process `pid`.
    pub fn build(pid: u32) -> Result<ShellBed, Error> {
        let ns = format!("pathem-{pid}");
        let link_ns = format!("pathem-{pid}-link");
        let gw_if = format!("peg{pid}");
        let base = pick_subnet(pid)?;
        let gw = Ipv4Addr::from(u32::from(base) + 1);
        let guest = Ipv4Addr::from(u32::from(base) + 2);
        ip(&["netns", "add", &ns]).map_err(|e| {
            Error::Bed(format!("cannot create a network namespace: {e} (needs root or CAP_SYS_ADMIN)"))
        })?;
        let mut p = ShellBed {
            ns: ns.clone(),
            link_ns: link_ns.clone(),
            gw_if: gw_if.clone(),
            nat: None,
            gateway: gw,
            warning: None,
        };
        ip(&["netns", "add", &link_ns])?;
        ip(&["link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", "pa", "netns", &link_ns])?;
        ip(&["link", "add", &gw_if, "type", "veth", "peer", "name", "pb", "netns", &link_ns])?;
        ip(&["-n", &ns, "addr", "add", &format!("{guest}/30"), "dev", "eth0"])?;
        ip(&["addr", "add", &format!("{gw}/30"), "dev", &gw_if])?;
        for (n, dev) in [(&ns, "lo"), (&ns, "eth0"), (&link_ns, "pa"), (&link_ns, "pb")] {
            ip(&["-n", n, "link", "set", dev, "up"])?;
        }
        ip(&["link", "set", &gw_if, "up"])?;
        ip(&["-n", &ns, "route", "add", "default", "via", &gw.to_string()])?;
        // The command's eth0 and the gateway keep the kernel's offloads (pathem's ports turn
        // what they hand over into wire frames); the link's ports lose GRO with the run.
        let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", "1");
        let subnet = format!("{base}/30");
        let table = format!("pathem{pid}");
        if quiet("nft", &["add", "table", "ip", &table]) {
            let ok = quiet(
                "nft",
                &["add", "chain", "ip", &table, "post", "{ type nat hook postrouting priority 100 ; }"],
            ) && quiet(
                "nft",
                &[
                    "add",
                    "rule",
                    "ip",
                    &table,
                    "post",
                    "ip",
                    "saddr",
                    &subnet,
                    "oifname",
                    "!=",
                    &gw_if,
                    "masquerade",
                ],
            );
            p.nat = Some(Nat::Nft(table));
            if !ok {
                p.warning = Some(
                    "nft could not set up masquerading; the shell reaches this host's addresses only".into(),
                );
            }
        } else if quiet("iptables", &["-t", "nat", "-A", "POSTROUTING", "-s", &subnet, "-j", "MASQUERADE"]) {
            p.nat = Some(Nat::Iptables(subnet));
        }
        Ok(p)
    }
}
