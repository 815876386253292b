//! `pathem shell`: run a command behind an emulated link, the Mahimahi way.
//!
//! ```text
//!   pathem-PID            pathem-PID-link                 this namespace
//!   ┌────────────┐        ┌───────────────────────────┐   ┌────────────────────┐
//!   │ CMD  eth0 ─┼─ veth ─┼─ pa ══ pathem ══ pb ──────┼───┼─ pegPID (gateway) ─┼─► routing, NAT
//!   └────────────┘        └───────────────────────────┘   └────────────────────┘
//! ```
//! The command's namespace has one interface, `eth0`, whose other end is pathem's port A;
//! pathem's port B is joined to a gateway interface in this namespace. pathem's two ports live
//! in a namespace of their own, where no IP stack answers on them: every frame between the
//! command and the world crosses pathem, and nothing else. Frames from the command
//! outward take the a→b path (uplink), frames towards it the b→a path (downlink). This
//! namespace routes (and, where nftables or iptables is installed, masquerades) for the
//! command, so it reaches whatever this namespace reaches, including the host's own
//! addresses; `PATHEM_GATEWAY` in its environment is this side's address. Shells nest: a shell started inside another builds its link inside the outer
//! shell's namespace. Everything is removed when the command exits, and pathem exits with
//! the command's status.

use crate::config::{self, ConfigFile};
use crate::netns::{enter, ip, quiet};
use crate::run::{direction_spec, forward, Live, RunArgs};
use crate::spec::PathSpec;
use crate::usage;
use anyhow::{bail, Context};
use clap::Args;
use pathem_engine::EngineConfig;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct ShellArgs {
    /// Impairments for both directions; --uplink/--downlink override them per direction.
    #[command(flatten)]
    pub path: PathSpec,
    /// Flags for frames leaving the shell (a→b), in one string: --uplink "--rate 10mbit".
    #[arg(long, alias = "a-to-b", value_name = "FLAGS", allow_hyphen_values = true)]
    pub uplink: Option<String>,
    /// Flags for frames entering the shell (b→a).
    #[arg(long, alias = "b-to-a", value_name = "FLAGS", allow_hyphen_values = true)]
    pub downlink: Option<String>,
    /// TOML file with [a_to_b] (uplink) and [b_to_a] (downlink) tables; flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Seed of the random models.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Print what the link is and, at the end, its counters.
    #[arg(short, long)]
    pub verbose: bool,
    /// The command to run inside, and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The namespace, links and rules of one shell; removed on drop, whatever happened.
struct Plumbing {
    ns: String,
    link_ns: String,
    gw_if: String,
    nat: Option<Nat>,
}

enum Nat {
    Nft(String),
    Iptables(String),
}

impl Drop for Plumbing {
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
fn pick_subnet(pid: u32) -> anyhow::Result<Ipv4Addr> {
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
    bail!("no free /30 left in 100.64.0.0/10")
}

fn build(pid: u32) -> anyhow::Result<(Plumbing, Ipv4Addr)> {
    let ns = format!("pathem-{pid}");
    let link_ns = format!("pathem-{pid}-link");
    let gw_if = format!("peg{pid}");
    let base = pick_subnet(pid)?;
    let gw = Ipv4Addr::from(u32::from(base) + 1);
    let guest = Ipv4Addr::from(u32::from(base) + 2);
    ip(&["netns", "add", &ns]).map_err(|e| {
        usage(format!("cannot create a network namespace: {e} (needs root or CAP_SYS_ADMIN)"))
    })?;
    let mut p = Plumbing { ns: ns.clone(), link_ns: link_ns.clone(), gw_if: gw_if.clone(), nat: None };
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
    // The ends that originate traffic must hand pathem wire-sized frames with full checksums.
    let off = ["tso", "off", "gso", "off", "gro", "off", "tx", "off"];
    let _ = quiet("ip", &[&["netns", "exec", &ns, "ethtool", "-K", "eth0"][..], &off].concat());
    let _ = quiet("ethtool", &[&["-K", &gw_if][..], &off].concat());
    for dev in ["pa", "pb"] {
        let _ = quiet("ip", &["netns", "exec", &link_ns, "ethtool", "-K", dev, "gro", "off", "lro", "off"]);
    }
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
            eprintln!(
                "pathem: nft could not set up masquerading; the shell reaches this host's addresses only"
            );
        }
    } else if quiet("iptables", &["-t", "nat", "-A", "POSTROUTING", "-s", &subnet, "-j", "MASQUERADE"]) {
        p.nat = Some(Nat::Iptables(subnet));
    }
    Ok((p, gw))
}

pub fn main(args: ShellArgs) -> anyhow::Result<()> {
    let file = match &args.config {
        Some(p) => config::load(p).map_err(usage)?,
        None => ConfigFile::default(),
    };
    let up = file.a_to_b.overridden_by(&args.path).overridden_by(&direction_spec("uplink", &args.uplink)?);
    let down =
        file.b_to_a.overridden_by(&args.path).overridden_by(&direction_spec("downlink", &args.downlink)?);
    let (up, down) = (up.to_config().map_err(usage)?, down.to_config().map_err(usage)?);
    let seed = args.seed.or(file.seed).unwrap_or_else(crate::replay::random_seed);
    let pid = std::process::id();
    let (plumbing, gw) = build(pid)?;
    if args.verbose {
        eprintln!(
            "pathem shell: {} behind uplink [{up}] downlink [{down}], gateway {gw}, seed {seed}",
            plumbing.ns
        );
    }
    let engine =
        EngineConfig { max_frame: 9216, busy_poll: crate::run::BUSY_POLL, ..EngineConfig::default() };
    let run_args = RunArgs {
        port_a: "pa".into(),
        port_b: "pb".into(),
        path: PathSpec::default(),
        a_to_b: None,
        b_to_a: None,
        config: None,
        cores: None,
        seed: Some(seed),
        one_way: false,
        stats_interval: None,
        json: false,
        keep_offloads: true,
        duration: None,
        buffer: None,
        max_frame: 9216,
        busy_poll: pathem_model::units::Duration(crate::run::BUSY_POLL),
        rx_buffer: pathem_model::units::Size(pathem_io::afpacket::DEFAULT_RX_BUFFER as u64),
    };
    let stop = Arc::new(AtomicBool::new(false));
    // Ctrl-C belongs to the command: the shell ends when the command does.
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGQUIT] {
        signal_hook::flag::register(sig, interrupted.clone())?;
    }
    let status = std::thread::scope(|s| -> anyhow::Result<std::process::ExitStatus> {
        let link_ns = plumbing.link_ns.clone();
        let live_stop = stop.clone();
        let (up, down, verbose) = (&up, &down, args.verbose);
        let engine = &engine;
        let run_args = &run_args;
        let link = s.spawn(move || {
            // This thread, and the sockets it opens, live in the link namespace.
            enter(&link_ns)?;
            let live =
                Live { a: "pa", b: "pb", ab: up, ba: down, seed, engine, cores: &[], announce: verbose };
            forward(run_args, &live, live_stop)
        });
        // Give the link a moment to open its sockets before the command sends anything.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &plumbing.ns])
            .args(&args.command)
            .env("PATHEM_SHELL", &plumbing.ns)
            .env("PATHEM_GATEWAY", gw.to_string());
        let status = cmd.status().with_context(|| format!("cannot run {}", args.command[0]));
        stop.store(true, Ordering::Relaxed);
        link.join().map_err(|_| anyhow::anyhow!("the link thread panicked"))??;
        status
    })?;
    drop(plumbing);
    let code = status
        .code()
        .unwrap_or_else(|| 128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(1));
    std::process::exit(code);
}
