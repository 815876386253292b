//! Network namespaces joined by veth pairs: the one test bed that `validate`, the benchmarks
//! and the live tests build, and that removes itself when dropped, whatever happened.
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
use pathem_io::live::PortSpec;
use pathem_runtime::netns::ip;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};

/// The generator's address on g0.
pub const GEN_IP: &str = "10.201.0.1";
/// The sink's address on s0.
pub const SINK_IP: &str = "10.201.0.2";

/// The receive counter of interface `dev` in namespace `ns` (what the kernel counted).
pub fn rx_packets(ns: &str, dev: &str) -> Result<u64, Error> {
    let out = Command::new("ip")
        .args(["-n", ns, "-s", "-j", "link", "show", dev])
        .output()
        .map_err(|source| Error::Tool { tool: "ip", package: "iproute2", source })?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Measure(format!("ip -s link show {dev} in {ns}: {}", said.trim())));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::Measure(format!("ip -s link show {dev} in {ns}: {e}")))?;
    v[0]["stats64"]["rx"]["packets"]
        .as_u64()
        .ok_or_else(|| Error::Measure(format!("ip -s link show {dev} in {ns}: no receive counter")))
}

/// The port kinds a bed's forwarder can use, for `bench --live` and the tests.
pub const PORT_KINDS: &str =
    "afpacket, afxdp, dpdk (net_af_packet virtual devices), attach (pathem attached to the sender's g0)";

/// Checks a kind of [`PORT_KINDS`].
pub fn check_kind(kind: &str) -> Result<(), Error> {
    match kind {
        "attach" => Ok(()),
        _ => bed_ports(kind).map(|_| ()),
    }
}

/// pathem's two ports on a [`Bed::through`]'s `pa` and `pb` for a kind (see [`PORT_KINDS`]).
pub fn bed_ports(kind: &str) -> Result<(PortSpec, PortSpec), Error> {
    let (a, b) = match kind {
        "afpacket" | "afxdp" => (format!("{kind}:pa"), format!("{kind}:pb")),
        // A ring of 2048 frames, like the AF_PACKET port's buffer (~1300): a burst of a
        // thousand frames fits while the forwarder is off its CPU for a moment.
        "dpdk" => (
            "dpdk:net_af_packet0,iface=pa,framecnt=2048".into(),
            "dpdk:net_af_packet1,iface=pb,framecnt=2048".into(),
        ),
        _ => return Err(Error::PortKind { kind: kind.into() }),
    };
    Ok((a.parse()?, b.parse()?))
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
        Bed::through_queues(tag, 1)
    }

    /// As [`Bed::through`], with `queues` transmit and receive queues on every veth (a sender
    /// spreads its flows over them by hash, as over a NIC's RSS queues).
    pub fn through_queues(tag: &str, queues: u32) -> Result<Bed, Error> {
        let bed = Bed { gen: format!("{tag}g"), mid: Some(format!("{tag}m")), sink: format!("{tag}s") };
        bed.make(queues)?;
        Ok(bed)
    }

    /// gen — sink joined by one veth pair (g0 — s0), with the same addresses.
    pub fn direct(tag: &str) -> Result<Bed, Error> {
        let bed = Bed { gen: format!("{tag}g"), mid: None, sink: format!("{tag}s") };
        bed.make(1)?;
        Ok(bed)
    }

    /// The forwarder's namespace (a bed made by [`Bed::through`]).
    pub fn mid(&self) -> &str {
        self.mid.as_deref().expect("a bed with a forwarder's namespace")
    }

    fn make(&self, queues: u32) -> Result<(), Error> {
        let (g, s) = (&self.gen, &self.sink);
        let q = queues.to_string();
        let veth = |a: &str, an: &str, b: &str, bn: &str| {
            let each = ["numtxqueues", &q, "numrxqueues", &q];
            let mut args = vec!["link", "add", a, "netns", an];
            args.extend(each);
            args.extend(["type", "veth", "peer", "name", b, "netns", bn]);
            args.extend(each);
            ip(&args)
        };
        for n in [Some(g), self.mid.as_ref(), Some(s)].into_iter().flatten() {
            hold(Left::Netns(n.clone()));
            ip(&["netns", "add", n])?;
            ip(&["-n", n, "link", "set", "lo", "up"])?;
        }
        match &self.mid {
            Some(m) => {
                veth("g0", g, "pa", m)?;
                veth("s0", s, "pb", m)?;
                ip(&["-n", m, "link", "set", "pa", "up"])?;
                ip(&["-n", m, "link", "set", "pb", "up"])?;
            }
            None => veth("g0", g, "s0", s)?,
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

impl Bed {
    /// iperf3 from gen to the sink's address `to` (IPv4 or IPv6) with the client's `args`: a
    /// one-test server on the sink, started first; returns the client's JSON report.
    pub fn iperf3(&self, to: &str, args: &[&str]) -> Result<serde_json::Value, Error> {
        self.iperf3_start(to, args)?.wait()
    }

    /// The same, running in the background (ping alongside, say) until [`Iperf3::wait`].
    pub fn iperf3_start(&self, to: &str, args: &[&str]) -> Result<Iperf3, Error> {
        let spawn = |ns: &str, words: &[&str], out: Stdio| {
            Group::spawn(
                Command::new("ip").args(["netns", "exec", ns]).args(words).stdout(out).stderr(Stdio::null()),
            )
            .map_err(|source| Error::Tool { tool: "iperf3", package: "iperf3", source })
        };
        let server = spawn(&self.sink, &["iperf3", "-s", "-1", "-B", to], Stdio::null())?;
        std::thread::sleep(std::time::Duration::from_millis(300));
        let words = [&["iperf3", "-c", to, "-J", "--connect-timeout", "3000"][..], args].concat();
        let client = spawn(&self.gen, &words, Stdio::piped())?;
        Ok(Iperf3 { server, client })
    }
}

/// A child process in a process group of its own (`ip netns exec` and what it runs), killed
/// with its group when dropped, or by a signal's cleanup ([`clean_up_on_signals`]).
pub(crate) struct Group(pub(crate) Child);

impl Group {
    /// Starts `cmd` in a process group of its own.
    pub(crate) fn spawn(cmd: &mut Command) -> std::io::Result<Group> {
        let child = cmd.process_group(0).spawn()?;
        hold(Left::Group(child.id() as i32));
        Ok(Group(child))
    }

    /// Asks the group to stop (SIGINT), and kills it (dropped) if it has not within 5 s.
    pub(crate) fn stop(mut self) {
        let group = nix::unistd::Pid::from_raw(-(self.0.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::SIGINT);
        exited_within(&mut self.0, 100);
    }
}

/// The child's exit status if it has ended or ends within `tries` looks 50 ms apart.
pub(crate) fn exited_within(child: &mut Child, tries: u32) -> Option<std::process::ExitStatus> {
    for _ in 0..tries {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    None
}

impl Drop for Group {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.0.id() as i32),
                nix::sys::signal::SIGKILL,
            );
        }
        let _ = self.0.wait();
        let_go(&Left::Group(self.0.id() as i32));
    }
}

/// What a signal's cleanup removes: the namespaces of the beds and the process groups of the
/// children started for them, from when they are made until they are gone.
static LEFT: std::sync::Mutex<Vec<Left>> = std::sync::Mutex::new(Vec::new());

#[derive(PartialEq)]
enum Left {
    Netns(String),
    Group(i32),
}

fn left() -> std::sync::MutexGuard<'static, Vec<Left>> {
    LEFT.lock().unwrap_or_else(|e| e.into_inner())
}

fn hold(l: Left) {
    left().push(l);
}

fn let_go(l: &Left) {
    left().retain(|x| x != l);
}

/// Ctrl-C, SIGTERM, SIGQUIT or a hang-up end the command after its children (in process
/// groups of their own, which a terminal's signal does not reach: testpmd, iperf3) are killed
/// and its beds' namespaces deleted, with the interfaces, programs and sockets in them. For the
/// commands that build beds (`bench --live`, `validate`); called once, before the first bed.
pub fn clean_up_on_signals() -> Result<(), Error> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let fail = |source| Error::Measure(format!("cannot set up the cleanup on signals: {source}"));
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGQUIT, SIGHUP]).map_err(fail)?;
    std::thread::Builder::new()
        .name("pathem-cleanup".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                // Held until the exit: the command's own threads, seeing a child end, may
                // drop what they made (and would report the killed child as a failure and
                // exit with 1 first); dropping takes this lock, so they wait for the exit.
                let mut held = left();
                let left = std::mem::take(&mut *held);
                let groups: Vec<_> = left
                    .iter()
                    .filter_map(|l| match l {
                        Left::Group(pid) => Some(nix::unistd::Pid::from_raw(*pid)),
                        Left::Netns(_) => None,
                    })
                    .collect();
                for &pid in &groups {
                    let _ = nix::sys::signal::killpg(pid, nix::sys::signal::SIGKILL);
                }
                // Gone before the command ends: a killed testpmd takes a while to give back
                // its hugepages, and was seen still running after the bench had exited.
                for &pid in &groups {
                    reap(pid, std::time::Duration::from_secs(5));
                }
                for l in &left {
                    if let Left::Netns(n) = l {
                        let _ = ip(&["netns", "del", n]);
                    }
                }
                let _ =
                    writeln!(std::io::stderr(), "pathem: stopped by signal {sig}; its test bed is removed");
                std::process::exit(128 + sig);
            }
        })
        .map_err(fail)?;
    Ok(())
}

/// Waits up to `within` for child `pid`, killed, to end (reaping it); at once when another
/// thread has reaped it already.
fn reap(pid: nix::unistd::Pid, within: std::time::Duration) {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let until = std::time::Instant::now() + within;
    while std::time::Instant::now() < until {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => std::thread::sleep(std::time::Duration::from_millis(20)),
            _ => return,
        }
    }
}

/// An iperf3 test under way (see [`Bed::iperf3_start`]); its processes are killed if dropped.
pub struct Iperf3 {
    server: Group,
    client: Group,
}

impl Iperf3 {
    /// Waits for the client and returns its JSON report (iperf3's own `error` when it failed).
    pub fn wait(mut self) -> Result<serde_json::Value, Error> {
        let mut text = String::new();
        if let Some(mut out) = self.client.0.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut out, &mut text);
        }
        let _ = self.client.0.wait();
        drop(self.server);
        serde_json::from_str(&text)
            .map_err(|e| Error::Measure(format!("iperf3 gave no report ({e}): {text}")))
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for n in [Some(&self.gen), self.mid.as_ref(), Some(&self.sink)].into_iter().flatten() {
            let _ = ip(&["netns", "del", n]);
            let_go(&Left::Netns(n.clone()));
        }
    }
}
