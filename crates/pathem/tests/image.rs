//! The OCI image (scripts/image.sh) at work, with podman: as a bump in the wire between two
//! namespaces (`run`), attached inside a container's network namespace (`attach`), as the
//! sidecar of examples/k8s (`podman kube play`), and wired as examples/containerlab wires it.
//!
//! Each container runs with the capabilities docs/containers.md gives for its subcommand and
//! no others (`--cap-drop all`), so these tests check that page too. Everything a test makes
//! (namespaces, links, containers, pods, podman networks) is removed when it ends, whatever
//! happens. The tests need root, iproute2, ping, podman with runc and catatonit, and the image
//! `pathem:latest` (scripts/test.sh installs them and runs scripts/image.sh first). Podman
//! reads scripts/containers.conf. They run one at a time under this file's own harness, which
//! reports a test that cannot run as SKIPPED with the reason, and ends with
//! `image: N passed, N failed, N skipped`; with PATHEM_REQUIRE_LIVE=1 a skip fails the run.

mod common;
use pathem_lab::testbed::{Bed, GEN_IP, SINK_IP};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicU32 = AtomicU32::new(0);

const IMAGE: &str = "localhost/pathem:latest";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// podman with the repository's settings (scripts/containers.conf).
fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .env("CONTAINERS_CONF", repo().join("scripts/containers.conf"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("podman {args:?}: {e}"))
}

fn podman_ok(args: &[&str]) -> String {
    let out = podman(args);
    assert!(out.status.success(), "podman {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sh(cmd: &[&str]) -> Output {
    Command::new(cmd[0]).args(&cmd[1..]).output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn must(cmd: &[&str]) {
    let out = sh(cmd);
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn has(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

/// Why these tests cannot run here, if they cannot.
fn cannot_run() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root (they build network namespaces and run podman as root)".into());
    }
    let missing: Vec<&str> =
        ["ip", "ping", "podman", "runc", "catatonit"].into_iter().filter(|t| !has(t)).collect();
    if !missing.is_empty() {
        return Some(format!("missing {} (scripts/test.sh installs them)", missing.join(", ")));
    }
    if !podman(&["image", "exists", IMAGE]).status.success() {
        return Some(format!("no image {IMAGE} (bash scripts/image.sh builds it)"));
    }
    None
}

fn main() {
    let tests: &[(&str, fn())] = &[
        ("image_run_is_a_bump_in_the_wire", image_run_is_a_bump_in_the_wire),
        ("image_attach_in_a_containers_namespace", image_attach_in_a_containers_namespace),
        ("image_kube_pod_with_a_pathem_sidecar", image_kube_pod_with_a_pathem_sidecar),
        ("image_containerlab_wiring", image_containerlab_wiring),
    ];
    common::harness("image", tests, cannot_run, |_| None);
}

/// A unique short tag for this process's namespaces, containers and links.
fn tag(kind: &str) -> String {
    format!("pi{}{kind}{}", std::process::id() % 100_000, NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A container, removed (killed first) when dropped.
struct Container(String);

impl Container {
    /// `podman run -d --name NAME OPTIONS IMAGE ARGS`, then waits until pathem prints `ready`
    /// on stderr (its startup lines), or fails with what it printed.
    fn start(name: &str, options: &[&str], args: &[&str], ready: &str) -> Container {
        let c = Container(name.to_string());
        let all = [&["run", "-d", "--name", name][..], options, &[IMAGE], args].concat();
        podman_ok(&all);
        c.wait_for(ready);
        c
    }

    fn logs(&self) -> String {
        let out = podman(&["logs", &self.0]);
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    }

    fn wait_for(&self, ready: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let logs = self.logs();
            if logs.contains(ready) {
                return;
            }
            let running = podman_ok(&["inspect", "--format", "{{.State.Running}}", &self.0]);
            assert!(
                running.trim() == "true" && Instant::now() < deadline,
                "container {} did not print {ready:?}: {logs}",
                self.0
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "0", &self.0]);
    }
}

/// Network namespaces and root-namespace links, deleted when dropped.
#[derive(Default)]
struct Cleanup {
    netns: Vec<String>,
    links: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for l in &self.links {
            let _ = sh(&["ip", "link", "del", l]);
        }
        for n in &self.netns {
            let _ = sh(&["ip", "netns", "del", n]);
        }
    }
}

/// Ping from namespace `ns` (the root namespace with `None`) to `to`: (min, avg) in ms.
fn ping(ns: Option<&str>, to: &str, count: u32) -> (f64, f64) {
    let c = count.to_string();
    let ping = ["ping", "-n", "-q", "-c", &c, "-i", "0.05", "-W", "2", to];
    let out = match ns {
        Some(ns) => sh(&[&["ip", "netns", "exec", ns][..], &ping].concat()),
        None => sh(&ping),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("min/avg")).unwrap_or_else(|| panic!("no rtt in {text}"));
    let nums: Vec<f64> = line
        .split('=')
        .nth(1)
        .unwrap()
        .trim()
        .split('/')
        .map(|x| x.trim_end_matches(" ms").parse().unwrap_or(0.0))
        .collect();
    (nums[0], nums[1])
}

/// A warm-up ping (ARP through the path), then `count` measured.
fn rtt(ns: Option<&str>, to: &str, count: u32) -> (f64, f64) {
    let _ = ping(ns, to, 2);
    ping(ns, to, count)
}

/// The capabilities of docs/containers.md, as podman options (after `--cap-drop all`).
fn caps(list: &str) -> Vec<String> {
    let mut o = vec!["--cap-drop".to_string(), "all".to_string()];
    if !list.is_empty() {
        o.extend(["--cap-add".to_string(), list.to_string()]);
    }
    o
}

/// `run` in the image between a bed's pa and pb (the container shares the bed's middle
/// namespace): AF_PACKET ports with NET_RAW alone, AF_XDP ports with NET_RAW, NET_ADMIN, BPF
/// and IPC_LOCK (and the bpf() system call, which podman's seccomp profile gives only with
/// SYS_ADMIN). Without the capability it names, pathem refuses with one line.
fn image_run_is_a_bump_in_the_wire() {
    let seccomp = ["--security-opt", "seccomp=unconfined"];
    for (kind, list, extra) in
        [("afpacket", "NET_RAW", &[][..]), ("afxdp", "NET_RAW,NET_ADMIN,BPF,IPC_LOCK", &seccomp[..])]
    {
        let id = tag("r");
        let bed = Bed::through(&id).expect("the test bed");
        let net = format!("ns:/run/netns/{}", bed.mid());
        let opts: Vec<String> = [vec!["--network".to_string(), net.clone()], caps(list)].concat();
        let opts: Vec<&str> = opts.iter().map(|s| s.as_str()).chain(extra.iter().copied()).collect();
        // A veth's GRO is off unless someone turned it on: pathem reads that and changes nothing.
        let (pa, pb) = (format!("{kind}:pa"), format!("{kind}:pb"));
        let args = ["run", &pa, &pb, "--delay", "30ms"];
        let c = Container::start(&format!("{id}c"), &opts, &args, "forwarding");
        let (min, avg) = rtt(Some(&bed.gen), SINK_IP, 20);
        println!("  image run {kind} ({list}): rtt min {min:.2} avg {avg:.2} ms");
        assert!(min >= 60.0 && avg < 63.0, "{kind} through the image: rtt min {min} avg {avg}");
        drop(c);

        // Without capabilities: refused with the one it needs.
        let out =
            podman(&[&["run", "--rm", "--network", &net, "--cap-drop", "all", IMAGE][..], &args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("CAP_NET_RAW"), "{kind} without capabilities: {err}");
        if kind == "afpacket" {
            gro_is_turned_off_and_back_on_from_the_image(&bed, &net, &args);
        }
    }
}

/// With GRO on at a port, `run` in the image (which has no ethtool) turns it off through the
/// ethtool ioctl while it runs, given NET_ADMIN, and puts it back when podman stops it;
/// without NET_ADMIN it refuses with one line naming the capability and `--keep-offloads`.
fn gro_is_turned_off_and_back_on_from_the_image(bed: &Bed, net: &str, args: &[&str]) {
    let gro = || {
        let out = sh(&["ip", "netns", "exec", bed.mid(), "ethtool", "-k", "pa"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines().find(|l| l.starts_with("generic-receive-offload")).unwrap_or("").to_string()
    };
    must(&["ip", "netns", "exec", bed.mid(), "ethtool", "-K", "pa", "gro", "on"]);
    assert!(gro().ends_with(": on"), "{}", gro());
    let out = podman(
        &[&["run", "--rm", "--network", net, "--cap-drop", "all", "--cap-add", "NET_RAW", IMAGE][..], args]
            .concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("CAP_NET_ADMIN") && err.contains("--keep-offloads"),
        "GRO on, NET_RAW alone: {err}"
    );
    assert!(gro().ends_with(": on"), "left as it was: {}", gro());
    let name = format!("{}o", tag("r"));
    let opts: Vec<String> =
        [vec!["--network".to_string(), net.to_string()], caps("NET_RAW,NET_ADMIN")].concat();
    let opts: Vec<&str> = opts.iter().map(|s| s.as_str()).collect();
    let c = Container::start(&name, &opts, args, "forwarding");
    assert!(gro().ends_with(": off"), "GRO off while pathem runs: {}", gro());
    let (min, avg) = rtt(Some(&bed.gen), SINK_IP, 10);
    println!("  image run afpacket (NET_RAW,NET_ADMIN, GRO turned off): rtt min {min:.2} avg {avg:.2} ms");
    assert!(min >= 60.0 && avg < 63.0, "through the image with GRO turned off: rtt min {min} avg {avg}");
    podman_ok(&["stop", "-t", "10", &name]);
    assert!(gro().ends_with(": on"), "GRO back on after podman stop: {}", gro());
    drop(c);
}

/// `attach` in the image, in the network namespace of a bed's sink (as a sidecar shares its
/// pod's): NET_ADMIN, NET_RAW, BPF and /dev/net/tun, with the bpf() system call allowed (or
/// SYS_ADMIN in place of BPF under podman's default seccomp profile). The sink's egress
/// takes the delay; stopping the container gives the interface back whole.
fn image_attach_in_a_containers_namespace() {
    let id = tag("a");
    let bed = Bed::direct(&id).expect("the test bed");
    let net = format!("ns:/run/netns/{}", bed.sink);
    bed.warm_up();
    let variants: [(&str, &[&str]); 2] = [
        ("NET_ADMIN,NET_RAW,BPF", &["--security-opt", "seccomp=unconfined"]),
        ("NET_ADMIN,NET_RAW,SYS_ADMIN", &[]),
    ];
    for (i, (list, extra)) in variants.into_iter().enumerate() {
        let opts: Vec<String> = [
            vec!["--network".to_string(), net.clone(), "--device".into(), "/dev/net/tun".into()],
            caps(list),
        ]
        .concat();
        let opts: Vec<&str> = opts.iter().map(|s| s.as_str()).chain(extra.iter().copied()).collect();
        let c =
            Container::start(&format!("{id}c{i}"), &opts, &["attach", "s0", "--delay", "20ms"], "attached");
        let (min, avg) = rtt(Some(&bed.gen), SINK_IP, 20);
        println!("  image attach ({list}): rtt min {min:.2} avg {avg:.2} ms");
        assert!(min >= 20.0 && avg < 22.0, "attach in a container ({list}): rtt min {min} avg {avg}");
        podman_ok(&["stop", "-t", "5", &c.0]);
        drop(c);
        let links = String::from_utf8_lossy(&sh(&["ip", "-n", &bed.sink, "-o", "link"]).stdout).into_owned();
        assert!(!links.contains("pthm"), "taps left after the container stopped: {links}");
        let (min, _) = rtt(Some(&bed.gen), SINK_IP, 5);
        assert!(min < 5.0, "s0 after the container stopped: rtt min {min}");
    }
    // Without /dev/net/tun: refused with one line.
    let out = podman(
        &[
            &["run", "--rm", "--network", &net, "--cap-add", "NET_ADMIN,NET_RAW,SYS_ADMIN", IMAGE][..],
            &["attach", "s0"],
        ]
        .concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("/dev/net/tun"), "attach without the tun device: {err}");
}

/// A podman network of its own (a bridge in the root namespace), removed when dropped with
/// what podman and CNI keep of it.
struct Network(String);

impl Drop for Network {
    fn drop(&mut self) {
        let _ = podman(&["network", "rm", "-f", &self.0]);
        let _ = std::fs::remove_dir_all(format!("/var/lib/cni/networks/{}", self.0));
    }
}

/// A pod played from a manifest, taken down (and removed) when dropped.
struct Kube {
    file: tempfile::NamedTempFile,
    pod: String,
}

impl Drop for Kube {
    fn drop(&mut self) {
        let path = self.file.path().to_str().unwrap().to_string();
        let _ = podman(&["kube", "down", &path]);
        let _ = podman(&["pod", "rm", "-f", "-t", "0", &self.pod]);
    }
}

/// examples/k8s/pathem-sidecar.yaml under `podman kube play` (on a podman network of the
/// test's own, as pods cannot join a named namespace): the host's pings to the pod take the
/// ConfigMap's 25 ms out and 5 ms in; `pathem ctl` works from the app container through the
/// shared emptyDir; the metrics answer on the pod's address.
fn image_kube_pod_with_a_pathem_sidecar() {
    let id = tag("k");
    let manifest =
        std::fs::read_to_string(repo().join("examples/k8s/pathem-sidecar.yaml")).expect("the manifest");
    assert!(manifest.contains("name: pathem-demo\n"), "the manifest's pod is pathem-demo");
    let pod = format!("{id}pod");
    let mut file = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::io::Write::write_all(&mut file, manifest.replace("pathem-demo", &pod).as_bytes()).unwrap();
    let path = file.path().to_str().unwrap().to_string();

    let net = Network(format!("{id}net"));
    let subnet = format!("10.206.{}.0/24", std::process::id() % 200 + 20);
    podman_ok(&["network", "create", "--subnet", &subnet, &net.0]);
    let kube = Kube { file, pod: pod.clone() };
    podman_ok(&["kube", "play", "--network", &net.0, &path]);
    let (app, sidecar) = (Container(format!("{pod}-app")), Container(format!("{pod}-pathem")));
    sidecar.wait_for("metrics: http://0.0.0.0:9464");
    let ip = podman_ok(&[
        "inspect",
        "--format",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        &app.0,
    ]);
    let ip = ip.trim();
    assert!(ip.starts_with("10.206."), "the pod's address: {ip:?}");

    let (min, avg) = rtt(None, ip, 20);
    println!("  kube pod (25 ms out, 5 ms in): rtt min {min:.2} avg {avg:.2} ms");
    assert!(min >= 30.0 && avg < 33.0, "the pod's rtt: min {min} avg {avg}");

    // ctl from the app container, through the shared /run/pathem.
    let show = podman_ok(&["exec", &app.0, "/usr/local/bin/pathem", "ctl", "pod", "show"]);
    assert!(show.contains("delay 25ms") && show.contains("delay 5ms"), "ctl pod show: {show}");
    podman_ok(&["exec", &app.0, "/usr/local/bin/pathem", "ctl", "pod", "set", "--delay", "40ms"]);
    let (min, avg) = ping(None, ip, 10);
    println!("  kube pod after ctl set --delay 40ms: rtt min {min:.2} avg {avg:.2} ms");
    assert!(min >= 45.0 && avg < 48.0, "after ctl set: rtt min {min} avg {avg}");

    // The metrics on the pod's address, where the annotations send Prometheus.
    let metrics = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect((ip, 9464)).expect("the metrics port");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    assert!(metrics.contains("pathem_tx_frames_total{direction=\"a_to_b\"}"), "metrics: {metrics}");

    drop((app, sidecar));
    drop(kube);
    let left = podman_ok(&["ps", "-a", "--filter", &format!("pod={pod}"), "--format", "{{.Names}}"]);
    assert!(left.trim().is_empty(), "containers left: {left}");
    drop(net);
}

/// The wiring of examples/containerlab: two hosts (namespaces h1 and h2, with eth1 each) and
/// pathem's node, a container whose namespace holds eth1 (to h1) and eth2 (to h2), running
/// `run eth1 eth2` (pathem.clab.yml); then pathem sharing h1's namespace and attaching to its
/// eth1 (attach.clab.yml).
fn image_containerlab_wiring() {
    let id = tag("l");
    let (h1, h2, node) = (format!("{id}h1"), format!("{id}h2"), format!("{id}p"));
    let mut clean = Cleanup::default();
    for n in [&h1, &h2, &node] {
        clean.netns.push(n.clone());
        must(&["ip", "netns", "add", n]);
        must(&["ip", "-n", n, "link", "set", "lo", "up"]);
    }
    // h1:eth1 — pathem:eth1 and pathem:eth2 — h2:eth1, as the topology's links.
    must(&[
        "ip", "link", "add", "eth1", "netns", &h1, "type", "veth", "peer", "name", "eth1", "netns", &node,
    ]);
    must(&[
        "ip", "link", "add", "eth1", "netns", &h2, "type", "veth", "peer", "name", "eth2", "netns", &node,
    ]);
    for (n, a) in [(&h1, GEN_IP), (&h2, SINK_IP)] {
        must(&["ip", "-n", n, "addr", "add", &format!("{a}/24"), "dev", "eth1"]);
        must(&["ip", "-n", n, "link", "set", "eth1", "up"]);
    }
    for d in ["eth1", "eth2"] {
        must(&["ip", "-n", &node, "link", "set", d, "up"]);
    }
    let net = format!("ns:/run/netns/{node}");
    let opts = ["--network", &net, "--cap-drop", "all", "--cap-add", "NET_RAW"];
    let args = ["run", "afpacket:eth1", "afpacket:eth2", "--delay", "10ms"];
    let c = Container::start(&format!("{id}c"), &opts, &args, "forwarding");
    let (min, avg) = rtt(Some(&h1), SINK_IP, 20);
    println!("  containerlab run eth1 eth2 (10 ms): rtt min {min:.2} avg {avg:.2} ms");
    assert!(min >= 20.0 && avg < 23.0, "through pathem's node: rtt min {min} avg {avg}");
    drop(c);

    // attach.clab.yml: h1 — h2 joined directly, pathem in h1's namespace on its eth1.
    let (d1, d2) = (format!("{id}d1"), format!("{id}d2"));
    for n in [&d1, &d2] {
        clean.netns.push(n.clone());
        must(&["ip", "netns", "add", n]);
    }
    must(&["ip", "link", "add", "eth1", "netns", &d1, "type", "veth", "peer", "name", "eth1", "netns", &d2]);
    for (n, a) in [(&d1, GEN_IP), (&d2, SINK_IP)] {
        must(&["ip", "-n", n, "addr", "add", &format!("{a}/24"), "dev", "eth1"]);
        must(&["ip", "-n", n, "link", "set", "eth1", "up"]);
    }
    let net = format!("ns:/run/netns/{d1}");
    let opts = [
        "--network",
        &net,
        "--device",
        "/dev/net/tun",
        "--cap-drop",
        "all",
        "--cap-add",
        "NET_ADMIN,NET_RAW,BPF",
        "--security-opt",
        "seccomp=unconfined",
    ];
    let c = Container::start(&format!("{id}c2"), &opts, &["attach", "eth1", "--delay", "15ms"], "attached");
    let (min, avg) = rtt(Some(&d1), SINK_IP, 20);
    println!("  containerlab attach eth1 (15 ms): rtt min {min:.2} avg {avg:.2} ms");
    assert!(min >= 15.0 && avg < 17.0, "attached to h1's eth1: rtt min {min} avg {avg}");
    drop(c);
    drop(clean);
}
