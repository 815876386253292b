//! Network namespaces pathem builds for its users: `pathem shell`'s (the command's namespace
//! behind an emulated link, with NAT to the host), and the helpers every namespace builder
//! uses (`ip`, entering a namespace). The test bed of the lab (`pathem_lab::testbed`) is
//! built with the same helpers.

use crate::Error;
use std::process::Command;

/// Runs `ip ARGS`, failing with its error message.
pub fn ip(args: &[&str]) -> Result<(), Error> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|source| Error::Io { what: "cannot run `ip` (install iproute2)".into(), source })?;
    if !out.status.success() {
        return Err(Error::Command {
            command: format!("ip {}", args.join(" ")),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
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
    Ok(pathem_io::host::enter_netns(name)?)
}

use std::net::Ipv4Addr;

/// Ctrl-C, SIGTERM, SIGQUIT and a hang-up (the terminal closed) belong to the shell's command:
/// the shell ends when the command does, and cleans up its bed. Called before the bed is
/// built, so no signal finds the namespaces without a cleanup (a hang-up used to end the
/// shell at once and leave them). A closed pipe on the shell's own output (`2>&1 | head -1`)
/// fails the write, which costs a note, rather than killing the shell before its cleanup.
pub fn leave_signals_to_the_command() -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    pathem_io::ignore_sigpipe();
    let caught = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM, SIGQUIT, SIGHUP] {
        signal_hook::flag::register(sig, caught.clone())?;
    }
    Ok(())
}

/// The namespace, links and rules of one shell (`pathem shell`); removed on drop, whatever
/// happened.
///
/// ```text
///   pathem-PID            pathem-PID-link                 this namespace
///   ┌────────────┐        ┌───────────────────────────┐   ┌────────────────────┐
///   │ CMD  eth0 ─┼─ veth ─┼─ pa ══ pathem ══ pb ──────┼───┼─ pegPID (gateway) ─┼─► routing, NAT
///   └────────────┘        └───────────────────────────┘   └────────────────────┘
/// ```
/// The command's namespace has one interface, `eth0`, whose other end is pathem's port A;
/// pathem's port B is joined to a gateway interface in this namespace. pathem's two ports live
/// in a namespace of their own, where no IP stack answers on them: every frame between the
/// command and the world crosses pathem, and nothing else. Frames from the command
/// outward take the a→b path (uplink), frames towards it the b→a path (downlink). This
/// namespace routes (and, where nftables or iptables is installed, masquerades) for the
/// command, so it reaches whatever this namespace reaches, including the host's own
/// addresses; `PATHEM_GATEWAY` in its environment is this side's address. Shells nest: a
/// shell started inside another builds its link inside the outer shell's namespace.
/// Everything is removed when the command exits.
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
    /// This shell turned IPv4 forwarding on (it was off): the last shell to end turns it off.
    forwarding_on: bool,
}

/// The namespace's IPv4 forwarding switch (per network namespace).
const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

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
        // Off again as it was, unless another shell (which found it on) still runs.
        if self.forwarding_on && !other_shells(&self.ns) {
            let _ = std::fs::write(IP_FORWARD, "0");
        }
    }
}

/// True when a shell other than the one of namespace `ns` has its namespace up.
fn other_shells(ns: &str) -> bool {
    let Ok(names) = std::fs::read_dir("/run/netns") else { return false };
    names.filter_map(|e| e.ok()?.file_name().into_string().ok()).any(|n| {
        n != ns
            && n.strip_prefix("pathem-")
                .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
    })
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
    Err(Error::NoSubnet)
}

impl ShellBed {
    /// Runs `command` (a program and its arguments) in the command's namespace, with
    /// `PATHEM_SHELL`, `PATHEM_GATEWAY` and `PATHEM_NAME` (`link`, the `ctl` name) in its
    /// environment, and waits for it; its exit code, or 128 + the signal that ended it, as a
    /// shell gives it.
    pub fn run(&self, command: &[String], link: &str) -> std::io::Result<i32> {
        use std::os::unix::process::ExitStatusExt;
        let status = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .args(command)
            .env("PATHEM_SHELL", &self.ns)
            .env("PATHEM_GATEWAY", self.gateway.to_string())
            .env("PATHEM_NAME", link)
            .status()?;
        Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(1)))
    }

    /// Builds the namespaces, links, routes and NAT of the shell of process `pid`.
    pub fn build(pid: u32) -> Result<ShellBed, Error> {
        let ns = format!("pathem-{pid}");
        let link_ns = format!("pathem-{pid}-link");
        let gw_if = format!("peg{pid}");
        let base = pick_subnet(pid)?;
        let gw = Ipv4Addr::from(u32::from(base) + 1);
        let guest = Ipv4Addr::from(u32::from(base) + 2);
        ip(&["netns", "add", &ns]).map_err(|e| match e {
            Error::Command { command, message } => {
                Error::Command { command, message: format!("{message} (needs root or CAP_SYS_ADMIN)") }
            }
            e => e,
        })?;
        let mut p = ShellBed {
            ns: ns.clone(),
            link_ns: link_ns.clone(),
            gw_if: gw_if.clone(),
            nat: None,
            gateway: gw,
            warning: None,
            forwarding_on: false,
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
        // Forwarding as the host has it, or on for as long as a shell needs it.
        if std::fs::read_to_string(IP_FORWARD).is_ok_and(|v| v.trim() == "0") {
            p.forwarding_on = std::fs::write(IP_FORWARD, "1").is_ok();
        }
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
