//! Live end-to-end tests in network namespaces: gen ⇄ pathem ⇄ sink over veth pairs.
//!
//! Each test builds its own namespaces (named after the test process and a counter) and
//! removes them when it ends, whatever happens. Traffic stays inside those namespaces. The
//! tests need root and iproute2, ethtool, iperf3, ping and tcpdump (scripts/test.sh installs
//! them). The ends keep the kernel's defaults (offloads on, MTU 1500, IPv6 on), as users' do.
//! They run one at a time (rates and delays are measured on a 2-core machine) under this
//! file's own harness, which reports a test that cannot run as SKIPPED with the reason, never
//! as passed, and ends with `live: N passed, N failed, N skipped`. With PATHEM_REQUIRE_LIVE=1
//! (the test script sets it when run as root) a skip fails the run.

mod common;
use pathem_io::afpacket::{AfPacketRx, AfPacketTx};
use pathem_io::kstamp::monotonic_now;
use pathem_io::{PollAt, RxPort, TxPort};
use pathem_model::Nanos;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

static NEXT: AtomicU32 = AtomicU32::new(0);

const PATHEM: &str = env!("CARGO_BIN_EXE_pathem");
use pathem_lab::testbed::{Bed, GEN_IP, SINK_IP};

fn rx_packets(ns: &str, dev: &str) -> u64 {
    pathem_lab::testbed::rx_packets(ns, dev).expect("the interface's counter")
}

/// Why the live tests cannot run here, if they cannot.
fn cannot_run() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root (they build network namespaces; run scripts/test.sh as root)".into());
    }
    let missing: Vec<&str> = ["ip", "ethtool", "iperf3", "ping", "nstat", "tcpdump"]
        .into_iter()
        .filter(|t| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    (!missing.is_empty()).then(|| format!("missing {} (scripts/test.sh installs them)", missing.join(", ")))
}

/// The harness: runs the tests named on the command line (all by default; a word filters by
/// substring, as libtest does), one at a time, and reports each.
fn main() {
    let tests: &[(&str, fn())] = &[
        ("constant_delay_adds_twice_the_delay_to_the_rtt", constant_delay_adds_twice_the_delay_to_the_rtt),
        (
            "udp_loss_within_statistical_bounds_and_none_below_capacity",
            udp_loss_within_statistical_bounds_and_none_below_capacity,
        ),
        ("xdp_program_is_gone_after_exit", xdp_program_is_gone_after_exit),
        ("rate_caps_tcp_throughput", rate_caps_tcp_throughput),
        ("directions_are_independent", directions_are_independent),
        (
            "sigint_stops_cleanly_and_restores_the_interfaces",
            sigint_stops_cleanly_and_restores_the_interfaces,
        ),
        ("bad_ports_are_refused_with_one_line", bad_ports_are_refused_with_one_line),
        ("a_second_run_on_a_port_in_use_is_refused", a_second_run_on_a_port_in_use_is_refused),
        ("shell_adds_the_delay_both_ways_and_cleans_up", shell_adds_the_delay_both_ways_and_cleans_up),
        ("an_interface_that_goes_down_and_up_is_resumed", an_interface_that_goes_down_and_up_is_resumed),
        (
            "frames_a_port_without_carrier_drops_are_not_counted_as_sent",
            frames_a_port_without_carrier_drops_are_not_counted_as_sent,
        ),
        (
            "frames_longer_than_a_slot_pass_after_down_and_up",
            frames_longer_than_a_slot_pass_after_down_and_up,
        ),
        ("a_port_whose_interface_is_deleted_ends_the_run", a_port_whose_interface_is_deleted_ends_the_run),
        ("short_validate_passes", short_validate_passes),
        (
            "a_burst_through_a_delay_arrives_whole_without_later_traffic",
            a_burst_through_a_delay_arrives_whole_without_later_traffic,
        ),
        ("a_flood_is_counted_frame_for_frame", a_flood_is_counted_frame_for_frame),
        ("ctl_steers_a_running_link_and_shows_it", ctl_steers_a_running_link_and_shows_it),
        ("ctl_set_holds_over_a_schedule", ctl_set_holds_over_a_schedule),
        ("ctl_reaches_a_running_shell", ctl_reaches_a_running_shell),
        ("metrics_and_show_agree", metrics_and_show_agree),
        ("stages_on_two_cpus_forward_everything", stages_on_two_cpus_forward_everything),
        ("a_change_takes_effect_at_once", a_change_takes_effect_at_once),
        (
            "a_frame_that_comes_while_a_burst_is_read_keeps_its_stamp",
            a_frame_that_comes_while_a_burst_is_read_keeps_its_stamp,
        ),
        ("aqm_keeps_the_rtt_under_load_short", aqm_keeps_the_rtt_under_load_short),
        ("segmentation_matches_the_kernels", segmentation_matches_the_kernels),
        ("frames_are_taken_as_the_kernel_hands_them", frames_are_taken_as_the_kernel_hands_them),
        ("frames_that_cannot_leave_are_counted_by_reason", frames_that_cannot_leave_are_counted_by_reason),
        ("tagged_frames_cross_every_port_whole", tagged_frames_cross_every_port_whole),
        ("attach_delays_each_direction_and_tcp_keeps_up", attach_delays_each_direction_and_tcp_keeps_up),
        (
            "attach_leaves_nothing_after_sigkill_and_refuses_what_it_cannot_do",
            attach_leaves_nothing_after_sigkill_and_refuses_what_it_cannot_do,
        ),
        ("attach_on_the_host_end_of_a_containers_veth", attach_on_the_host_end_of_a_containers_veth),
        (
            "attach_counts_what_its_taps_held_and_ends_when_one_is_deleted",
            attach_counts_what_its_taps_held_and_ends_when_one_is_deleted,
        ),
        ("classes_give_two_addresses_their_own_paths", classes_give_two_addresses_their_own_paths),
        (
            "a_change_whose_lines_do_not_fit_together_changes_nothing",
            a_change_whose_lines_do_not_fit_together_changes_nothing,
        ),
        ("attach_with_classes_delays_each_address_its_own", attach_with_classes_delays_each_address_its_own),
        (
            "attach_hands_on_the_longest_frame_its_interface_takes",
            attach_hands_on_the_longest_frame_its_interface_takes,
        ),
        (
            "the_live_bench_stopped_by_a_signal_leaves_nothing",
            the_live_bench_stopped_by_a_signal_leaves_nothing,
        ),
        ("the_live_bench_measures_its_generator_apart", the_live_bench_measures_its_generator_apart),
        ("every_sender_of_the_live_bench_reaches_pa", every_sender_of_the_live_bench_reaches_pa),
        (
            "the_copying_sender_sends_each_frame_64_times_unchanged",
            the_copying_sender_sends_each_frame_64_times_unchanged,
        ),
        ("every_queue_is_read_as_one_bottleneck", every_queue_is_read_as_one_bottleneck),
        (
            "a_thread_in_a_namespace_sees_its_interfaces_not_the_hosts",
            a_thread_in_a_namespace_sees_its_interfaces_not_the_hosts,
        ),
        (
            "a_carrier_reader_asks_the_namespace_it_was_made_in",
            a_carrier_reader_asks_the_namespace_it_was_made_in,
        ),
        ("dpdk_every_queue_is_read_as_one_bottleneck", dpdk_every_queue_is_read_as_one_bottleneck),
        ("queues_read_on_two_cpus_stay_one_bottleneck", queues_read_on_two_cpus_stay_one_bottleneck),
        (
            "dpdk_queues_read_on_two_cpus_stay_one_bottleneck",
            dpdk_queues_read_on_two_cpus_stay_one_bottleneck,
        ),
        ("dpdk_sigint_balances_and_returns_every_mbuf", dpdk_sigint_balances_and_returns_every_mbuf),
        ("dpdk_bad_arguments_are_refused_with_one_line", dpdk_bad_arguments_are_refused_with_one_line),
        ("dpdk_a_frame_longer_than_an_mbuf_is_refused", dpdk_a_frame_longer_than_an_mbuf_is_refused),
        ("dpdk_frames_follow_the_interfaces_mtu", dpdk_frames_follow_the_interfaces_mtu),
        ("ports_refuse_a_frame_longer_than_they_hold", ports_refuse_a_frame_longer_than_they_hold),
        (
            "a_tap_reader_counts_the_hosts_own_frames_at_its_looks",
            a_tap_reader_counts_the_hosts_own_frames_at_its_looks,
        ),
        (
            "a_packet_socket_filtered_by_mark_takes_only_marked_frames",
            a_packet_socket_filtered_by_mark_takes_only_marked_frames,
        ),
        ("dpdk_filler_frames_start_each_frame_at_its_time", dpdk_filler_frames_start_each_frame_at_its_time),
        ("dpdk_capture_stamps_keep_the_captures_spacing", dpdk_capture_stamps_keep_the_captures_spacing),
    ];
    common::harness("live", tests, cannot_run, |name| {
        (name.starts_with("dpdk_") && !cfg!(feature = "dpdk"))
            .then(|| "built without the dpdk feature (cargo test --features dpdk)".to_string())
    });
}

fn sh(cmd: &[&str]) -> Output {
    Command::new(cmd[0]).args(&cmd[1..]).output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn must(cmd: &[&str]) -> String {
    let out = sh(cmd);
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Three namespaces: gen (10.201.0.1) — mid (pathem's ports pa, pb) — sink (10.201.0.2).
struct Topo {
    gen: String,
    mid: String,
    sink: String,
    pathem: Option<Child>,
    /// pathem's stdout lines (JSON counters with --json).
    json: Option<mpsc::Receiver<String>>,
    /// The namespaces: the runtime's own test bed, removed on drop (after pathem is killed).
    bed: Option<Bed>,
    /// What pathem printed on stderr after it started.
    stderr: Arc<Mutex<Vec<String>>>,
}

/// The port kinds every data-path test runs through: pathem's own sockets, and with the
/// `dpdk` feature, DPDK ports (net_af_packet virtual devices on the same veth interfaces).
fn kinds() -> Vec<&'static str> {
    let mut k = vec!["afpacket", "afxdp"];
    if cfg!(feature = "dpdk") {
        k.push("dpdk");
    }
    k
}

/// Port A and port B of a kind: the bed's (`KIND:pa KIND:pb`; `dpdk`: net_af_packet virtual
/// devices on pa and pb), `dpdk-xdp`: a net_af_xdp virtual device on pa facing pathem's
/// AF_XDP port on pb, or `dpdk-queues`: net_af_packet devices with four queue pairs.
fn ports(kind: &str) -> (String, String) {
    match kind {
        "dpdk-xdp" => ("dpdk:net_af_xdp0,iface=pa".into(), "afxdp:pb".into()),
        // net_af_packet with a socket per queue pair (the kernel spreads frames by flow hash).
        "dpdk-queues" => {
            ("dpdk:net_af_packet0,iface=pa,qpairs=4".into(), "dpdk:net_af_packet1,iface=pb,qpairs=4".into())
        }
        _ => {
            let (a, b) = pathem_lab::testbed::bed_ports(kind).expect("a port kind of the bed");
            (a.to_string(), b.to_string())
        }
    }
}

impl Topo {
    fn new() -> Topo {
        Topo::with_queues(1)
    }

    /// A bed whose veths have `queues` transmit and receive queues.
    fn with_queues(queues: u32) -> Topo {
        let id = format!("pt{}x{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let bed = Bed::through_queues(&id, queues).expect("the test bed");
        Topo {
            gen: bed.gen.clone(),
            mid: bed.mid().to_string(),
            sink: bed.sink.clone(),
            pathem: None,
            json: None,
            bed: Some(bed),
            stderr: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn exec(&self, ns: &str, cmd: &[&str]) -> Output {
        let mut all = vec!["ip", "netns", "exec", ns];
        all.extend_from_slice(cmd);
        sh(&all)
    }

    /// Starts `pathem run pa pb ARGS` in mid (AF_PACKET ports) and waits until it forwards.
    fn start(&mut self, args: &[&str]) {
        self.start_with("afpacket", args)
    }

    /// Starts pathem with ports of the given kind (see [`ports`]).
    fn start_with(&mut self, kind: &str, args: &[&str]) {
        let (a, b) = ports(kind);
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.mid, PATHEM, "run", &a, &b]).args(args);
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("pathem starts");
        let (out_tx, out_rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = out_tx.send(line);
            }
        });
        self.json = Some(out_rx);
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut before = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(10)) {
                Ok(l) if l.contains("forwarding") => break,
                Ok(l) => before.push(l),
                Err(_) => panic!("pathem did not start: {}", before.join("\n")),
            }
        }
        let lines = Arc::new(Mutex::new(before));
        self.stderr = lines.clone();
        std::thread::spawn(move || {
            while let Ok(l) = rx.recv() {
                lines.lock().unwrap().push(l);
            }
        });
        self.pathem = Some(child);
        // ARP through the path before measuring.
        self.exec(&self.gen, &["ping", "-c", "1", "-W", "3", SINK_IP]);
    }

    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        Some(interrupt(&mut self.pathem.take()?))
    }

    /// The JSON lines pathem printed so far (with --json), parsed.
    fn json_lines(&self) -> Vec<serde_json::Value> {
        let Some(rx) = &self.json else { return Vec::new() };
        rx.try_iter().filter_map(|l| serde_json::from_str(&l).ok()).collect()
    }

    /// Stops pathem and returns its final counters (needs --json).
    fn stop_json(&mut self) -> serde_json::Value {
        let status = self.stop().expect("pathem was running");
        assert!(status.success(), "pathem exit status {status}");
        std::thread::sleep(Duration::from_millis(100));
        let lines = self.json_lines();
        lines.into_iter().rev().find(|v| v["event"] == "final").expect("a final JSON line")
    }

    /// Turns IPv6 off on every interface of the bed, so that only the test's frames move.
    fn quiet(&self) {
        for (ns, dev) in [(&self.gen, "g0"), (&self.sink, "s0"), (&self.mid, "pa"), (&self.mid, "pb")] {
            self.exec(ns, &["sysctl", "-qw", &format!("net.ipv6.conf.{dev}.disable_ipv6=1")]);
        }
    }

    /// Round-trip times from gen to sink: (min, avg) in ms.
    fn rtt(&self, count: u32) -> (f64, f64) {
        ping_in(&self.gen, SINK_IP, count)
    }

    /// iperf3 from gen to sink (or back with `reverse`); returns its JSON report.
    fn iperf(&self, args: &[&str], reverse: bool) -> serde_json::Value {
        self.iperf_to(SINK_IP, args, reverse)
    }

    /// iperf3 from gen to the sink's address `to` (IPv4 or IPv6), through the bed's helper.
    fn iperf_to(&self, to: &str, args: &[&str], reverse: bool) -> serde_json::Value {
        let all = [args, if reverse { &["-R"][..] } else { &[][..] }].concat();
        let bed = self.bed.as_ref().expect("the bed");
        bed.iperf3(to, &all).unwrap_or_else(|e| panic!("iperf3 {args:?}: {e}"))
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        if let Some(mut c) = self.pathem.take() {
            let _ = stop_or_kill(&mut c);
        }
        drop(self.bed.take());
    }
}

/// Stops a pathem the test started: SIGINT, so that it puts back what it changed and removes
/// its control socket; SIGKILL after 5 s, and `None`. Drops use it as it is (a panic must not
/// start there); tests through [`interrupt`], which fails on a pathem that needed SIGKILL.
fn stop_or_kill(child: &mut Child) -> Option<std::process::ExitStatus> {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGINT);
    for _ in 0..100 {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Removes the control socket a pathem killed on purpose left behind (a stale socket is
/// replaced by the next pathem of that name anyway; the test cleans up what it caused).
fn remove_stale_socket(name: &str) {
    let path = format!("/run/pathem/{name}.sock");
    if std::os::unix::net::UnixStream::connect(&path).is_err() {
        let _ = std::fs::remove_file(path);
    }
}

/// Runs `f` on a thread inside network namespace `ns`.
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("namespace exists");
        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
}

/// Sends `n` numbered UDP datagrams from `from` (namespace, address) to `to`, one every
/// `gap`, and returns how many arrived.
fn udp_count(from: (&str, &str), to: (&str, &str), n: u32, gap: Duration) -> u32 {
    let (to_ns, to_ip) = (to.0.to_string(), to.1.to_string());
    let (from_ns, from_ip) = (from.0.to_string(), from.1.to_string());
    let (ready_tx, ready_rx) = mpsc::channel();
    let receiver = in_ns(&to_ns, move || {
        // A large receive buffer (the probe's, 64 MiB): a burst the path releases at once (a delay
        // decrease holds frames back, then lets them go together) must not overflow the sink's
        // own socket, which would count as loss that pathem did not cause.
        let addr = format!("{to_ip}:9999").parse().unwrap();
        let udp = pathem_io::udp::TimestampedUdp::bind(addr).expect("bind");
        let sock = udp.socket();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        ready_tx.send(()).unwrap();
        let mut got = 0u32;
        let mut buf = [0u8; 256];
        while sock.recv(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    ready_rx.recv().unwrap();
    let target = format!("{}:9999", to.1);
    in_ns(&from_ns, move || {
        let sock = std::net::UdpSocket::bind((from_ip.as_str(), 0)).expect("bind");
        let start = std::time::Instant::now();
        for i in 0..n {
            while start.elapsed() < gap * i {
                std::hint::spin_loop();
            }
            sock.send_to(&i.to_be_bytes(), &target).expect("send");
        }
    })
    .join()
    .unwrap();
    receiver.join().unwrap()
}

/// Datagrams the sink's UDP sockets dropped for want of buffer since the last `nstat -n`.
fn udp_rcvbuf_errors(t: &Topo) -> u64 {
    let out = t.exec(&t.sink, &["nstat", "UdpRcvbufErrors"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("UdpRcvbufErrors"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn udp_loss(report: &serde_json::Value) -> (u64, u64) {
    let sum = &report["end"]["sum"];
    match (sum["lost_packets"].as_u64(), sum["packets"].as_u64()) {
        (Some(l), Some(n)) => (l, n),
        _ => panic!("no UDP counts in iperf3's report: {}", report.get("error").unwrap_or(&report["end"])),
    }
}

fn constant_delay_adds_twice_the_delay_to_the_rtt() {
    let mut all = kinds();
    if cfg!(feature = "dpdk") {
        // A DPDK port facing one of pathem's own.
        all.push("dpdk-xdp");
    }
    for kind in all {
        let mut t = Topo::new();
        t.start_with(kind, &["--delay", "25ms"]);
        let (min, avg) = t.rtt(20);
        assert!((50.0..53.0).contains(&min), "{kind}: rtt min {min} avg {avg} for 2 × 25 ms");
        assert!(t.stop().unwrap().success());
    }
}

fn udp_loss_within_statistical_bounds_and_none_below_capacity() {
    for kind in kinds() {
        let mut t = Topo::new();
        t.start_with(kind, &["--a-to-b", "--loss 10%", "--seed", "5"]);
        let n = 20_000;
        let got = udp_count((&t.gen, GEN_IP), (&t.sink, SINK_IP), n, Duration::from_micros(50));
        let lost = f64::from(n - got);
        let sigma = (f64::from(n) * 0.1 * 0.9).sqrt();
        assert!((lost - f64::from(n) * 0.1).abs() < 4.0 * sigma, "{kind}: lost {lost} of {n}");
        t.stop();

        // No impairment, well below capacity: pathem loses nothing. iperf3 also counts what
        // its own server's socket dropped when the server did not get a CPU in time (two CPUs,
        // one of them polled by pathem); the sink's stack counts those apart.
        t.start_with(kind, &[]);
        t.exec(&t.sink, &["nstat", "-n"]);
        let (lost, n) = udp_loss(&t.iperf(&["-u", "-b", "50M", "-l", "1400", "-t", "3"], false));
        let overflowed = udp_rcvbuf_errors(&t);
        assert!(
            n > 10_000 && lost <= overflowed,
            "{kind}: lost {lost} of {n} with no impairment ({overflowed} overflowed the server's socket)"
        );
        t.stop();
    }
}

fn xdp_program_is_gone_after_exit() {
    let mut t = Topo::new();
    t.start_with("afxdp", &["--delay", "1ms"]);
    let shown = String::from_utf8_lossy(&t.exec(&t.mid, &["ip", "link", "show", "pa"]).stdout).into_owned();
    assert!(shown.contains("xdp"), "program attached while running: {shown}");
    // Even SIGKILL leaves nothing behind: the program hangs on a BPF link owned by the process.
    let child = t.pathem.take().unwrap();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGKILL);
    let mut child = child;
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(300));
    let shown = String::from_utf8_lossy(&t.exec(&t.mid, &["ip", "link", "show", "pa"]).stdout).into_owned();
    assert!(!shown.contains("xdp"), "no stale program after SIGKILL: {shown}");
    // And the next start works at once.
    t.start_with("afxdp", &[]);
    assert!(t.rtt(3).0 < 5.0);
    t.stop();
}

fn rate_caps_tcp_throughput() {
    for kind in kinds() {
        let mut t = Topo::new();
        t.start_with(kind, &["--rate", "20mbit", "--queue", "100pkt"]);
        let r = t.iperf(&["-t", "4"], false);
        let bps = r["end"]["sum_received"]["bits_per_second"].as_f64().unwrap();
        // 20 Mbit/s on the wire carries 1448 of every 1538 bytes as TCP payload: 18.8 Mbit/s.
        assert!(bps <= 20e6 && bps > 0.85 * 18.8e6, "{kind}: TCP goodput {bps} through a 20 Mbit/s link");
        t.stop();
    }
}

fn directions_are_independent() {
    for kind in kinds() {
        let mut t = Topo::new();
        t.start_with(
            kind,
            &["--a-to-b", "--delay 10ms", "--b-to-a", "--delay 30ms --loss 20%", "--seed", "3"],
        );
        let (min, _) = t.rtt(40);
        assert!((40.0..43.0).contains(&min), "{kind}: rtt {min} for 10 ms + 30 ms");
        let n = 10_000;
        let up = udp_count((&t.gen, GEN_IP), (&t.sink, SINK_IP), n, Duration::from_micros(100));
        let down = udp_count((&t.sink, SINK_IP), (&t.gen, GEN_IP), n, Duration::from_micros(100));
        assert_eq!(up, n, "{kind}: a->b has no loss");
        let lost = f64::from(n - down);
        let sigma = (f64::from(n) * 0.2 * 0.8).sqrt();
        assert!((lost - f64::from(n) * 0.2).abs() < 4.0 * sigma, "{kind}: b->a lost {lost} of {n}");
        t.stop();
    }
}

fn sigint_stops_cleanly_and_restores_the_interfaces() {
    let mut t = Topo::new();
    let mid = t.mid.clone();
    let gro = |dev: &str| -> String {
        let out = sh(&["ip", "netns", "exec", &mid, "ethtool", "-k", dev]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines().find(|l| l.starts_with("generic-receive-offload")).unwrap_or("").to_string()
    };
    t.exec(&mid, &["ethtool", "-K", "pa", "gro", "on"]);
    assert!(gro("pa").contains(": on"));
    t.start(&["--delay", "1ms"]);
    assert!(gro("pa").contains(": off"), "GRO is off while pathem runs: {}", gro("pa"));
    // Promiscuity taken by a packet socket shows as a count in `ip -d link`.
    let link =
        String::from_utf8_lossy(&t.exec(&mid, &["ip", "-d", "link", "show", "pa"]).stdout).into_owned();
    assert!(link.contains("promiscuity 1"), "{link}");
    assert!(t.stop().unwrap().success(), "exit status 0 after SIGINT");
    assert!(gro("pa").contains(": on"), "GRO restored: {}", gro("pa"));
    let link =
        String::from_utf8_lossy(&t.exec(&mid, &["ip", "-d", "link", "show", "pa"]).stdout).into_owned();
    assert!(link.contains("promiscuity 0"), "promiscuity dropped: {link}");
    // The path works again without pathem's leftovers: a second run forwards at once.
    t.start(&[]);
    let (min, _) = t.rtt(3);
    assert!(min < 5.0);
    t.stop();

    // Killed outright, pathem cannot restore GRO; the next start does.
    t.start(&[]);
    assert!(gro("pa").contains(": off"));
    let mut child = t.pathem.take().unwrap();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGKILL);
    let _ = child.wait();
    assert!(gro("pa").contains(": off"), "left off by the killed run");
    t.start(&[]);
    t.stop();
    assert!(gro("pa").contains(": on"), "repaired by the next run: {}", gro("pa"));

    // A run that fails after its link started (its metrics port is taken) stops the link
    // before it exits: GRO comes back at once.
    let taken =
        in_ns(&mid, || std::net::TcpListener::bind("127.0.0.1:0").expect("a free port")).join().unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out =
        sh(&["ip", "netns", "exec", &mid, "timeout", "20", PATHEM, "run", "pa", "pb", "--metrics", &port]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(gro("pa").contains(": on"), "GRO restored after a failed start: {} ({err})", gro("pa"));
    drop(taken);

    // Its output closed (`| head -1`): the run stops as it does for SIGTERM, with its cleanup,
    // where SIGPIPE used to kill it (GRO left off, its control socket left behind).
    let script = format!(
        "timeout 20 {PATHEM} run pa pb --json --stats-interval 50ms --name pipe{} | head -1; exit ${{PIPESTATUS[0]}}",
        std::process::id()
    );
    let out = sh(&["ip", "netns", "exec", &mid, "bash", "-c", &script]);
    let (said, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{said} {err}");
    assert!(said.starts_with("{\"event\":\"interval\""), "{said}");
    assert!(gro("pa").contains(": on"), "GRO restored after the output closed: {}", gro("pa"));
    let socket = format!("/run/pathem/pipe{}.sock", std::process::id());
    assert!(!std::path::Path::new(&socket).exists(), "{socket} left behind");

    // Its standard error closed before it starts: the lines it says on starting are lost,
    // where SIGPIPE used to kill it right after its ports opened (GRO left off); it runs its
    // second and cleans up.
    let script = format!(
        "timeout 20 {PATHEM} run pa pb --duration 1s 2>&1 >/dev/null | true; exit ${{PIPESTATUS[0]}}"
    );
    let out = sh(&["ip", "netns", "exec", &mid, "bash", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(gro("pa").contains(": on"), "GRO restored after a run whose stderr closed: {}", gro("pa"));
}

fn bad_ports_are_refused_with_one_line() {
    let t = Topo::new();
    t.exec(&t.mid, &["ip", "link", "set", "pb", "down"]);
    for (args, says) in [
        (vec!["run", "pa", "nope0"], "does not exist"),
        (vec!["run", "pa", "pa"], "both ports are pa"),
        (vec!["run", "pa", "pb"], "is down"),
        (vec!["run", "afxdp:pa", "afxdp:pb"], "is down"),
        (vec!["run", "pa", "tap:pb"], "unknown port type"),
        (vec!["run", "pa", "pb", "--cores", "0,1,2,3,4,5,6,7,8"], "--cores"),
    ] {
        let mut cmd = vec!["netns", "exec", t.mid.as_str(), PATHEM];
        cmd.extend_from_slice(&args);
        let out = Command::new("ip").args(&cmd).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// Two pathems on one interface would each forward every frame (the far end saw each twice):
/// the second is refused while the first runs, whatever its port kind or --keep-offloads, and
/// starts once the first has stopped.
fn a_second_run_on_a_port_in_use_is_refused() {
    let mut t = Topo::new();
    t.start(&["--delay", "1ms"]);
    for args in [
        vec!["run", "afpacket:pa", "afpacket:pb", "--duration", "1s", "--name", "second"],
        vec!["run", "pb", "pa", "--duration", "1s", "--keep-offloads", "--name", "second"],
    ] {
        let mut cmd = vec!["netns", "exec", t.mid.as_str(), "timeout", "20", PATHEM];
        cmd.extend_from_slice(&args);
        let out = Command::new("ip").args(&cmd).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("is in use by another pathem (pid"), "{args:?}: {err}");
    }
    let (min, _) = t.rtt(3);
    assert!(min >= 2.0, "the first run still forwards, once: rtt {min} ms");
    assert!(t.stop().unwrap().success());
    let mid = t.mid.clone();
    let out =
        sh(&["ip", "netns", "exec", &mid, "timeout", "20", PATHEM, "run", "pa", "pb", "--duration", "1s"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn shell_adds_the_delay_both_ways_and_cleans_up() {
    // A host that does not forward: the shell turns forwarding on for its command and off
    // again at its end (the host's own setting is put back after the test).
    const FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";
    let host_forwards = std::fs::read_to_string(FORWARD).unwrap();
    std::fs::write(FORWARD, "0").unwrap();
    let child = Command::new(PATHEM)
        .args([
            "shell",
            "--delay",
            "50ms",
            "--",
            "sh",
            "-c",
            "ping -n -q -c 4 -i 0.3 $PATHEM_GATEWAY; exit 3",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its own namespaces (another pathem's may come and go meanwhile).
    let ns = format!("pathem-{}", child.id());
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(3),
        "the command's status: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text.lines().find(|l| l.contains("min/avg")).unwrap_or_else(|| panic!("{text}"));
    let min: f64 = line.split('=').nth(1).unwrap().trim().split('/').next().unwrap().parse().unwrap();
    assert!((100.0..104.0).contains(&min), "rtt {min} ms through a 50 ms shell");
    let left = must(&["ip", "netns", "list"]);
    assert!(!left.contains(&ns), "namespaces left behind: {left}");
    let forwards = std::fs::read_to_string(FORWARD).unwrap();
    std::fs::write(FORWARD, host_forwards.trim()).unwrap();
    assert_eq!(forwards.trim(), "0", "IPv4 forwarding left on by the shell");

    // The terminal closes: the hang-up reaches the shell and its command (one process group);
    // the command ends, and the shell cleans up after it instead of dying with its namespaces.
    let mut child = {
        use std::os::unix::process::CommandExt;
        Command::new(PATHEM)
            .args(["shell", "--delay", "1ms", "--", "sleep", "30"])
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let ns = format!("pathem-{}", child.id());
    // Once its command runs (a `sleep` in the shell's process group).
    let group = child.id().to_string();
    let up = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        sh(&["pgrep", "-g", &group, "-x", "sleep"]).status.success()
    });
    assert!(up && must(&["ip", "netns", "list"]).contains(&ns), "the shell {ns} runs its command");
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGHUP);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(129), "the command's hang-up is the shell's status");
    let left = must(&["ip", "netns", "list"]);
    assert!(!left.contains(&ns), "namespaces left behind after a hang-up: {left}");

    // Its own output closed (`pathem shell -v ... 2>&1 | head -0`): the shell loses its notes,
    // not its life: the command runs, its status is the shell's, and the bed is removed.
    let mut child = Command::new(PATHEM)
        .args(["shell", "-v", "--delay", "1ms", "--", "sh", "-c", "exit 4"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let ns = format!("pathem-{}", child.id());
    let status = child.wait().unwrap();
    let left = must(&["ip", "netns", "list"]);
    for gone in left.lines().filter_map(|l| l.split_whitespace().next()).filter(|n| n.starts_with(&ns)) {
        let _ = sh(&["ip", "netns", "del", gone]); // what a failed run left, for the tests after it
    }
    assert_eq!(status.code(), Some(4), "the command's status through a closed stderr: {status:?}");
    assert!(!left.contains(&ns), "namespaces left behind when the shell's stderr closed: {left}");

    // Nested: 20 ms outside, 10 ms inside = 60 ms round trip.
    let out = Command::new(PATHEM)
        .args(["shell", "--delay", "20ms", "--", PATHEM, "shell", "--delay", "10ms", "--", "sh", "-c"])
        .arg(format!("ping -n -q -c 3 -i 0.3 {}", "$PATHEM_GATEWAY"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("min/avg")).unwrap_or_else(|| panic!("{text}"));
    let min: f64 = line.split('=').nth(1).unwrap().trim().split('/').next().unwrap().parse().unwrap();
    // The inner shell's gateway is in the outer shell: only the inner link is crossed.
    assert!((20.0..24.0).contains(&min), "rtt {min} ms to the inner gateway");
}

/// pb stays up but loses its carrier (its peer s0 goes down): the device drops what pathem
/// hands it. Those frames are refused (not sent) at once, the port neither spins nor holds
/// them, and every frame is accounted for. Before, AF_XDP counted them as sent (the kernel's
/// EBUSY was taken for "busy, try again") and AF_PACKET retried them without end (ENOBUFS),
/// at full CPU, with 64 frames stuck in the port at the end.
fn frames_a_port_without_carrier_drops_are_not_counted_as_sent() {
    let mut all = vec!["afpacket", "afxdp"];
    if cfg!(feature = "dpdk") {
        // net_af_packet: the kernel drops the frames without a word to the driver; the port
        // reads the carrier itself.
        all.push("dpdk");
    }
    for kind in all {
        let mut t = Topo::new();
        t.quiet();
        t.start_with(kind, &["--delay", "1ms", "--json", "--busy-poll", "0ms"]);
        assert!(t.rtt(3).0 < 5.0);
        t.exec(&t.sink, &["ip", "link", "set", "s0", "down"]);
        if kind == "dpdk" {
            // The DPDK port reads the carrier every 10 ms (its driver hears nothing of it): a
            // frame in that moment is sent and lost, as README says.
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = t.exec(&t.gen, &["ping", "-n", "-q", "-c", "30", "-i", "0.02", "-W", "1", SINK_IP]);
        assert!(!out.status.success(), "{kind}: nothing crosses without carrier");
        // Pathem idles while nothing can leave (the time it took in those seconds).
        let pid = t.pathem.as_ref().unwrap().id();
        let cpu = || -> u64 {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let f: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
            f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
                + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
        };
        let before = cpu();
        std::thread::sleep(Duration::from_secs(1));
        let ticks = cpu() - before;
        t.exec(&t.sink, &["ip", "link", "set", "s0", "up"]);
        let s = t.stop_json();
        let a = &s["a_to_b"];
        let errors = &a["port_tx_errors"];
        let refused: u64 = errors.as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
        println!("  {kind}: {refused} frames refused without carrier ({errors}), {ticks} CPU ticks idle");
        assert!(errors["down"].as_u64().unwrap() >= 30, "{kind}: the 30 pings refused as down: {a}");
        let dropped: u64 = a["dropped"].as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
        assert_eq!(
            a["rx_packets"].as_u64().unwrap() + a["duplicated"].as_u64().unwrap(),
            a["tx_packets"].as_u64().unwrap() + dropped + refused + a["in_flight"].as_u64().unwrap(),
            "{kind}: {a}"
        );
        assert_eq!(a["in_flight"].as_u64().unwrap(), 0, "{kind}: nothing held in the port: {a}");
        // A spinning port takes the whole second (100 ticks at HZ=100, 250 at 250). A DPDK
        // port polls its device whatever it holds, as DPDK's drivers are made to be read.
        assert!(ticks < 50 || kind == "dpdk", "{kind}: {ticks} ticks in a second with nothing to send");
    }
}

/// AF_PACKET reads a frame longer than its ring's slots from the socket's queue. Taking pa
/// down leaves an error pending on the socket, which the next such read returned instead of
/// the frame: that frame was counted lost, stayed queued, and from then on each long frame
/// left only when the next one came (the MTU is raised after the start, so the slots stay
/// sized for 1500 and every ping of 3000 bytes goes through the queue).
fn frames_longer_than_a_slot_pass_after_down_and_up() {
    let mut t = Topo::new();
    t.quiet();
    for (ns, dev) in [(&t.gen, "g0"), (&t.mid, "pb"), (&t.sink, "s0")] {
        t.exec(ns, &["ip", "link", "set", dev, "mtu", "9000"]);
    }
    let mac = must(&["ip", "-n", &t.sink, "-j", "link", "show", "s0"]);
    let mac: serde_json::Value = serde_json::from_str(&mac).unwrap();
    let mac = mac[0]["address"].as_str().unwrap().to_string();
    // One way: no replies come back, so the generator knows the sink's address by heart.
    must(&["ip", "-n", &t.gen, "neigh", "replace", SINK_IP, "lladdr", &mac, "dev", "g0"]);
    t.start(&["--one-way", "--json"]);
    t.exec(&t.mid, &["ip", "link", "set", "pa", "mtu", "9000"]);
    let received = || -> u64 {
        let out = t.exec(&t.sink, &["cat", "/sys/class/net/s0/statistics/rx_packets"]);
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    // One ping of `size` bytes: does it reach the sink within a second, by itself?
    let crosses = |size: &str| {
        let before = received();
        t.exec(&t.gen, &["ping", "-n", "-q", "-c", "1", "-W", "1", "-s", size, SINK_IP]);
        (0..20).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            received() > before
        })
    };
    assert!(crosses("3000"), "a long frame crosses");
    t.exec(&t.mid, &["ip", "link", "set", "pa", "down"]);
    std::thread::sleep(Duration::from_millis(200));
    t.exec(&t.mid, &["ip", "link", "set", "pa", "up"]);
    std::thread::sleep(Duration::from_millis(500));
    for size in ["3100", "3200", "3300"] {
        assert!(crosses(size), "a {size}-byte ping crosses by itself after the down and up");
    }
    let s = t.stop_json();
    assert_eq!(s["a_to_b"]["port_rx_dropped"].as_u64(), Some(0), "{}", s["a_to_b"]);
}

/// pb is deleted while pathem runs (with its peer s0): the next frame for it ends the run,
/// exit 1 and one line naming pb; before, AF_PACKET refused every frame for ever and AF_XDP
/// piled them up in its ring, both without a word until stopped.
fn a_port_whose_interface_is_deleted_ends_the_run() {
    for kind in ["afpacket", "afxdp"] {
        let mut t = Topo::new();
        t.quiet();
        t.start_with(kind, &["--delay", "1ms"]);
        assert!(t.rtt(3).0 < 5.0);
        t.exec(&t.mid, &["ip", "link", "del", "pb"]);
        t.exec(&t.gen, &["ping", "-n", "-q", "-c", "5", "-i", "0.1", "-W", "1", SINK_IP]);
        let mut child = t.pathem.take().unwrap();
        let ended = (0..50).find_map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            child.try_wait().unwrap()
        });
        let Some(status) = ended else {
            let _ = stop_or_kill(&mut child);
            panic!("{kind}: pathem still runs with pb gone");
        };
        std::thread::sleep(Duration::from_millis(100));
        let lines = t.stderr.lock().unwrap().join("\n");
        assert_eq!(status.code(), Some(1), "{kind}: {lines}");
        assert!(lines.contains("pb") && lines.contains("is gone"), "{kind}: {lines}");
    }
}

fn an_interface_that_goes_down_and_up_is_resumed() {
    for kind in ["afpacket", "afxdp"] {
        let mut t = Topo::new();
        t.start_with(kind, &["--delay", "1ms", "--json"]);
        assert!(t.rtt(3).0 < 5.0);
        t.exec(&t.mid, &["ip", "link", "set", "pb", "down"]);
        let out = t.exec(&t.gen, &["ping", "-c", "2", "-i", "0.2", "-W", "1", SINK_IP]);
        assert!(!out.status.success(), "{kind}: nothing crosses while pb is down");
        t.exec(&t.mid, &["ip", "link", "set", "pb", "up"]);
        // The link and the neighbour entries take a moment to come back; give them a few tries.
        let mut mins = Vec::new();
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(500));
            let out = t.exec(&t.gen, &["ping", "-n", "-q", "-c", "5", "-i", "0.05", "-W", "2", SINK_IP]);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let min = text
                .lines()
                .find(|l| l.contains("min/avg"))
                .and_then(|l| l.split('=').nth(1)?.trim().split('/').next()?.parse::<f64>().ok());
            mins.push(min);
            if min.is_some_and(|m| m < 5.0) {
                break;
            }
        }
        assert!(
            mins.last().copied().flatten().is_some_and(|m| m < 5.0),
            "{kind}: forwarding resumed: {mins:?}"
        );
        let s = t.stop_json();
        let a = &s["a_to_b"];
        let down = a["port_tx_errors"]["down"].as_u64().unwrap();
        let lines = t.stderr.lock().unwrap().join("\n");
        println!("  {kind}: {down} frames refused while pb was down");
        if kind == "afpacket" {
            // The kernel refused them: not sent, counted as such, and said so at exit.
            assert!(down >= 2, "{kind}: {a}");
            assert!(lines.contains("frames not sent, pb was down: Network is down"), "{lines}");
        }
        // AF_XDP's ring keeps them (a kick cannot hand them over): they leave once pb is up.
        assert!(!lines.contains("transmit errors"), "{lines}");
        let dropped: u64 = a["dropped"].as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
        assert_eq!(
            a["rx_packets"].as_u64().unwrap() + a["duplicated"].as_u64().unwrap(),
            a["tx_packets"].as_u64().unwrap() + dropped + down + a["in_flight"].as_u64().unwrap(),
            "{kind}: {a}"
        );
    }
}

/// What cannot leave is counted by its reason, never as sent: a super-frame whose IP header
/// lies about its length is dropped whole (`offload`), and a frame longer than the output's
/// MTU is dropped before the path (`oversize`) rather than refused by the kernel.
fn frames_that_cannot_leave_are_counted_by_reason() {
    for kind in ["afpacket", "afxdp"] {
        let mut t = Topo::new();
        must(&["ip", "-n", &t.mid, "link", "set", "pb", "mtu", "1000"]);
        t.start_with(kind, &["--json"]);
        let out = t.exec(&t.gen, &["ping", "-n", "-c", "3", "-i", "0.2", "-W", "1", "-s", "1200", SINK_IP]);
        assert!(!out.status.success(), "{kind}: 1242-byte frames cannot leave through an MTU of 1000");
        if kind == "afpacket" {
            // A local sender's super-frame (g0 keeps TSO on) whose IP header says it is 100
            // bytes shorter than it is, then a good one.
            let gen = t.gen.clone();
            in_ns(&gen, move || {
                let tx = pathem_io::afpacket::RawSocket::open("g0", true).expect("g0");
                for lie in [true, false] {
                    let mut frame = super_frame(false, false, false, 2000, 0x18);
                    let hdr = vnet_header(&frame, 1, 900, false);
                    if lie {
                        let total = u16::from_be_bytes([frame[16], frame[17]]) - 100;
                        frame[16..18].copy_from_slice(&total.to_be_bytes());
                    }
                    tx.send(&[&hdr[..], &frame].concat()).expect("send");
                }
            })
            .join()
            .unwrap();
            std::thread::sleep(Duration::from_millis(300));
        }
        let s = t.stop_json();
        let a = &s["a_to_b"];
        println!("  {kind}: dropped {}, tx errors {}", a["dropped"], a["port_tx_errors"]);
        assert!(a["dropped"]["oversize"].as_u64().unwrap() >= 3, "{kind}: {a}");
        let refused: u64 = a["port_tx_errors"].as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
        assert_eq!(refused, 0, "{kind}: {a}");
        if kind == "afpacket" {
            assert_eq!(a["dropped"]["offload"], 1, "{kind}: the lying super-frame: {a}");
            assert_eq!(a["offload"]["gso_frames"], 1, "{kind}: the good one was cut: {a}");
            assert_eq!(a["offload"]["gso_segments"], 3, "{kind}: 2000 bytes in 900-byte segments: {a}");
        }
        let dropped: u64 = a["dropped"].as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
        assert_eq!(
            a["rx_packets"].as_u64().unwrap() + a["duplicated"].as_u64().unwrap(),
            a["tx_packets"].as_u64().unwrap() + dropped + a["in_flight"].as_u64().unwrap(),
            "{kind}: {a}"
        );
    }
}

fn short_validate_passes() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(PATHEM).args(["validate", "--quick", "--out"]).arg(dir.path()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("all checks passed"), "{text}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("validate.json")).unwrap()).unwrap();
    assert_eq!(v["all_pass"], true);
    assert!(dir.path().join("constant-delay").join("delay-deviation.svg").exists());
}

/// A raw frame of the test's own (IEEE local experimental ethertype 0x88b5), broadcast, with
/// `seq` after the header.
fn marked_frame(seq: u32, size: usize) -> Vec<u8> {
    let mut f = vec![0u8; size];
    f[0..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0x5e, 0x01]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f
}

fn marked_seq(f: &[u8]) -> Option<u32> {
    (f.len() >= 18 && f[12..14] == 0x88b5u16.to_be_bytes())
        .then(|| u32::from_be_bytes(f[14..18].try_into().unwrap()))
}

/// Sends `frames` out of `dev` in namespace `ns` as fast as the socket takes them; returns
/// CLOCK_MONOTONIC before the first and after the last was handed to the kernel.
fn blast(ns: &str, dev: &str, frames: Vec<Vec<u8>>) -> (Nanos, Nanos) {
    let dev = dev.to_string();
    in_ns(ns, move || {
        let mut tx = AfPacketTx::open(&dev, 2048).expect("generator socket");
        let start = monotonic_now();
        for f in &frames {
            while !tx.send(Nanos::ZERO, f.len() as u32, f) {
                tx.flush().unwrap();
            }
        }
        while tx.queued() > 0 {
            tx.flush().unwrap();
        }
        (start, monotonic_now())
    })
    .join()
    .unwrap()
}

fn a_burst_through_a_delay_arrives_whole_without_later_traffic() {
    // As it comes, and all due at one instant (a 20 ms slot gathers the burst): then the
    // transmit port gets 1000 frames at once, more than one kick of its ring sends.
    let cases = kinds().into_iter().flat_map(|k| [(k, false), (k, true)]);
    for (kind, slot) in cases {
        let mut t = Topo::new();
        t.quiet();
        let mut args = vec!["--delay", "10ms", "--json"];
        if slot {
            args.extend_from_slice(&["--slot", "20ms"]);
        }
        t.start_with(kind, &args);
        // The sink reads every frame arriving on s0 with its kernel timestamp.
        let (ready_tx, ready_rx) = mpsc::channel();
        let sink = in_ns(&t.sink, move || {
            let mut rx = AfPacketRx::open("s0", 2048, 16 << 20).expect("sink socket");
            ready_tx.send(()).unwrap();
            let mut got: Vec<(u32, Nanos)> = Vec::new();
            let end = std::time::Instant::now() + Duration::from_millis(1500);
            while std::time::Instant::now() < end {
                rx.recv_burst(monotonic_now(), 64, |f| {
                    if let Some(seq) = marked_seq(f.data) {
                        got.push((seq, f.arrival));
                    }
                })
                .unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
            got
        });
        ready_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let (start, end) = blast(&t.gen, "g0", (0..1000).map(|i| marked_frame(i, 64)).collect());
        let got = sink.join().unwrap();
        let s = t.stop_json();
        let mut seqs: Vec<u32> = got.iter().map(|g| g.0).collect();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len(), 1000, "{kind}: {} of 1000 arrived; pathem: {}", seqs.len(), s["a_to_b"]);
        let last = got.iter().map(|g| g.1).max().unwrap();
        let first = got.iter().map(|g| g.1).min().unwrap();
        assert!(first >= start + Nanos::from_millis(10), "{kind}: none early");
        // Sent within (end − start); each leaves 10 ms after it came, plus what pathem's
        // transmit takes for 1000 frames: a few ms at most, never "when later traffic comes".
        let due = end + Nanos::from_millis(if slot { 30 } else { 10 });
        let late = last.saturating_sub(due);
        assert!(late < Nanos::from_millis(20), "{kind}: the last frame came {late} after its due time");
        let a = &s["a_to_b"];
        assert_eq!(a["port_tx_queued"], 0, "{kind}: {a}");
        assert_eq!(a["in_flight"], 0, "{kind}: {a}");
    }
}

/// `bench --live`: the generator has its own row, far above what a forwarder can take (the
/// rows say which rates the sender set), testpmd's reference is measured in the same rounds,
/// and no forwarder delivers more than reached it. Rates are reported, never asserted.
/// Ctrl-C in the middle of `bench --live` (while testpmd forwards, where it is installed):
/// the bench ends with 130 after killing testpmd (in a process group of its own, which the
/// terminal's signal does not reach) and deleting its bed.
fn the_live_bench_stopped_by_a_signal_leaves_nothing() {
    // Running ones: a killed testpmd stays a zombie until init reaps it.
    let testpmd = || sh(&["pgrep", "-x", "-r", "D,R,S,T", "dpdk-testpmd"]).status.success();
    assert!(!testpmd(), "a dpdk-testpmd runs before the test");
    let mut bench = Command::new(PATHEM)
        .args(["bench", "--live", "afxdp", "--sizes", "64", "--runs", "3", "--seconds", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let bed = format!("pb{}", bench.id());
    // The generator row takes 2 s; testpmd's comes next where it is installed.
    let stage = || if pathem_lab::bench::testpmd_installed() { testpmd() } else { has_netns(&bed) };
    let up = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        stage()
    });
    assert!(up, "the bench never reached its forwarders");
    std::thread::sleep(Duration::from_millis(300));
    let status = stop_or_kill(&mut bench);
    let mut said = String::new();
    let _ = std::io::Read::read_to_string(&mut bench.stderr.take().unwrap(), &mut said);
    assert_eq!(status.and_then(|s| s.code()), Some(130), "{said}");
    assert!(said.contains("stopped by signal 2"), "{said}");
    assert!(!has_netns(&bed), "namespaces left: {}", must(&["ip", "netns", "list"]));
    assert!(!testpmd(), "dpdk-testpmd left running");
}

fn has_netns(prefix: &str) -> bool {
    must(&["ip", "netns", "list"]).lines().any(|l| l.starts_with(prefix))
}

fn the_live_bench_measures_its_generator_apart() {
    let out = must(&[
        PATHEM,
        "bench",
        "--live",
        "afxdp,afpacket",
        "--sizes",
        "64",
        "--runs",
        "1",
        "--seconds",
        "0.5",
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let rows = json["rows"].as_array().expect("rows");
    // The sender, and why each faster one was passed over (the kernel's error).
    let sender = &json["sender"];
    let passed_over = sender["passed_over"].as_array().expect("passed_over");
    let order = ["xdp-live-frames", "xdp-copies", "udp-gso", "af_xdp", "af_packet"];
    let rank = order.iter().position(|s| sender["sender"] == *s).unwrap_or_else(|| panic!("{sender}"));
    assert_eq!(passed_over.len(), rank, "{sender}");
    eprintln!("sender {sender}");
    // testpmd's rows where it is installed (the test script installs it).
    let mut want = vec!["generator", "testpmd", "bypass", "engine", "impaired"];
    if !pathem_lab::bench::testpmd_installed() {
        want.remove(1);
    }
    for kind in ["afxdp", "afpacket"] {
        let modes: Vec<&str> =
            rows.iter().filter(|r| r["port"] == kind).map(|r| r["mode"].as_str().unwrap()).collect();
        assert_eq!(modes, want, "{kind}");
    }
    for r in rows {
        // Every documented key in every row (null where it has no value).
        for key in [
            "port",
            "size",
            "mode",
            "mpps",
            "offered_mpps",
            "generator_bound",
            "rate_bound",
            "of_raw",
            "of_testpmd",
        ] {
            assert!(r.as_object().unwrap().contains_key(key), "{key} in {r}");
        }
        let (mpps, offered) = (r["mpps"].as_f64().unwrap(), r["offered_mpps"].as_f64().unwrap());
        eprintln!(
            "{} {}: {mpps:.3} Mpps of {offered:.3} offered, generator-bound {}",
            r["port"], r["mode"], r["generator_bound"]
        );
        assert!(mpps > 0.0 && r["size"] == 64, "{r}");
        assert!(r["generator_bound"].is_boolean(), "{r}");
        // Only a path with a rate link can be rate-bound; the bench's 100 Gbit/s carries 142
        // Mpps of 64-byte frames, which no forwarder here comes near (the computation itself
        // is checked in pathem-lab's unit tests).
        assert!(r["rate_bound"] == false, "{r}");
        // What reached the sink reached pa first (a 1% margin: the counters are read apart).
        assert!(mpps <= offered * 1.01, "forwarded more than offered: {r}");
        match r["mode"].as_str().unwrap() {
            "generator" => {
                assert!(r["generator_bound"] == false && r["of_testpmd"] == serde_json::Value::Null, "{r}")
            }
            "testpmd" => assert!(r["of_testpmd"] == serde_json::Value::Null, "{r}"),
            _ => {
                assert!(r["of_testpmd"].as_f64().unwrap() > 0.0 && r["of_raw"].as_f64().unwrap() > 0.0, "{r}")
            }
        }
    }
}

/// Each of `bench --live`'s senders puts frames on pa in the generator's own row, except one
/// the kernel refuses, which the bench's choice passes over with the kernel's error: some
/// kernels refuse the XDP generator's live frames (EPERM) and the bench goes on with the
/// next sender. The choice is the fastest that works.
fn every_sender_of_the_live_bench_reaches_pa() {
    use pathem_lab::bench::{choose_sender, live_run, Sender};
    let bed = Bed::through(&format!("ps{}", std::process::id())).expect("the test bed");
    let choice = choose_sender(&bed).expect("a sender");
    eprintln!("chosen {:?}, passed over {:?}", choice.sender, choice.passed_over);
    let all = [Sender::XdpLiveFrames, Sender::XdpCopies, Sender::UdpGso, Sender::AfXdp, Sender::AfPacket];
    let chosen = all.iter().position(|&s| s == choice.sender).unwrap();
    assert_eq!(choice.passed_over.len(), chosen, "{choice:?}");
    for (i, &sender) in all.iter().enumerate() {
        let run = live_run(&bed, "afxdp", 64, "generator", &pathem_model::PathConfig::default(), 0.3, sender);
        if i < chosen {
            let e = run.expect_err("a sender the choice passed over");
            eprintln!("{sender:?}: {e} (passed over: {})", choice.passed_over[i]);
            continue;
        }
        let r = run.unwrap_or_else(|e| panic!("{sender:?}: {e}"));
        eprintln!("{sender:?}: {:.3} Mpps reached pa", r.offered);
        assert!(r.offered > 0.01, "{sender:?}: {:.4} Mpps reached pa", r.offered);
        // pa drops every frame in this row: what reaches the sink is pb's own (IPv6 neighbour
        // discovery), a few frames.
        assert!(r.forwarded < 0.001, "{sender:?}: {:.4} Mpps reached the sink", r.forwarded);
    }
    // The super-frames' frames leave g0 whole: forwarded to the sink, each is 64 bytes with a
    // UDP checksum that verifies; g0's transmit checksum offload is on again after.
    if choice.sender <= Sender::UdpGso {
        let sink = bed.sink.clone();
        let (ready, up) = mpsc::channel();
        let read = in_ns(&sink, move || {
            let sock = pathem_io::afpacket::RawSocket::open("s0", false).expect("a socket on s0");
            ready.send(()).unwrap();
            let mut frames = Vec::new();
            while let Some(f) = sock.recv(Duration::from_millis(500)) {
                if f.len() >= 42 && f[23] == 17 && f[36..38] == 9u16.to_be_bytes() && frames.len() < 1000 {
                    frames.push(f);
                }
            }
            frames
        });
        up.recv().unwrap();
        let path = pathem_model::PathConfig::default();
        live_run(&bed, "afpacket", 64, "bypass", &path, 0.2, Sender::UdpGso).expect("a run");
        let frames = read.join().unwrap();
        assert!(frames.len() >= 100, "{} frames reached the sink", frames.len());
        for f in &frames {
            assert_eq!(f.len(), 64, "{f:?}");
            assert_eq!(pathem_io::offload::checksum_ok(f), Some(true), "{f:?}");
        }
        let k = must(&["ip", "netns", "exec", &bed.gen, "ethtool", "-k", "g0"]);
        assert!(k.lines().any(|l| l == "tx-checksumming: on"), "{k}");
    }
}

/// The copying sender of `bench --live` (where the kernel refuses the XDP generator's live
/// frames): each frame written into f0 reaches pa [`COPIES`] times, byte for byte, and no
/// more. Frames of 64 and 600 bytes, one at a time (the socket reading them on pa holds a
/// frame's copies, not twenty frames' worth).
///
/// [`COPIES`]: pathem_io::copygen::COPIES
fn the_copying_sender_sends_each_frame_64_times_unchanged() {
    use pathem_io::copygen::{CopyGenerator, COPIES};
    use pathem_lab::bench::{feed, FEED, FEED_PEER};
    let bed = Bed::through(&format!("pc{}", std::process::id())).expect("the test bed");
    let size = |seq: u32| if seq % 2 == 0 { 64 } else { 600 };
    let (ready, up) = mpsc::channel();
    let read = in_ns(bed.mid(), move || {
        // pa takes what g0's ndo_xdp_xmit sends only while it polls with NAPI, as it does with
        // an XDP program: one passing every frame to the stack, where the socket sees it.
        let _napi = pathem_io::afxdp::pass_through("pa").expect("an XDP program on pa");
        let sock = pathem_io::afpacket::RawSocket::open("pa", false).expect("a socket on pa");
        ready.send(()).unwrap();
        let mut frames = Vec::new();
        while let Some(f) = sock.recv(Duration::from_millis(500)) {
            if marked_seq(&f).is_some() {
                frames.push(f);
            }
        }
        frames
    });
    up.recv().unwrap();
    in_ns(&bed.gen, move || {
        feed().expect("the feed pair");
        feed().expect("the feed pair, made once");
        let _copies = CopyGenerator::attach(FEED_PEER, "g0").expect("the copying program");
        let mut tx = AfPacketTx::open(FEED, 2048).expect("a socket on f0");
        for seq in 0..20 {
            let f = marked_frame(seq, size(seq));
            assert!(tx.send(Nanos::ZERO, f.len() as u32, &f));
            tx.flush().unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(100));
    })
    .join()
    .unwrap();
    let frames = read.join().unwrap();
    for seq in 0..20 {
        let want = marked_frame(seq, size(seq));
        let got = frames.iter().filter(|f| marked_seq(f) == Some(seq)).collect::<Vec<_>>();
        assert_eq!(got.len(), COPIES as usize, "frame {seq}: {} copies reached pa", got.len());
        assert!(got.iter().all(|f| **f == want), "frame {seq} changed on its way");
    }
    assert_eq!(frames.len(), 20 * COPIES as usize);
}

/// An AF_XDP port on an interface with four receive queues reads them all: eight UDP flows
/// spread over the queues by the sender's hash go through one 50 Mbit/s bottleneck with one
/// queue of 100 frames (the queues' frames share it: the sink receives no faster than the
/// rate), every frame that reached pa is forwarded or counted as dropped, and each flow
/// arrives in its order.
fn every_queue_is_read_as_one_bottleneck() {
    a_port_reads_every_queue("afxdp", None);
}

/// A thread that entered a namespace with `setns` (a shell's link, a bench's forwarder) learns
/// the facts of that namespace's interfaces, not of the host's: sysfs, which shows the
/// namespace it was mounted in, is not asked. An AF_XDP port opened there on a veth with four
/// queues binds a socket to each (it used to read the host's sysfs, find no `pa`, and bind one:
/// frames on the other three queues passed to the stack, around the emulation).
fn a_thread_in_a_namespace_sees_its_interfaces_not_the_hosts() {
    let t = Topo::with_queues(4);
    let mid = t.mid.clone();
    // A multiqueue tap with no queue attached: the kernel made 256 receive queues for it and
    // uses one (its driver reports no channels, so the kernel's list of queues in use says).
    for cmd in [
        &["ip", "-n", &mid, "tuntap", "add", "dev", "tq0", "mode", "tap", "multi_queue"][..],
        &["ip", "-n", &mid, "link", "set", "tq0", "up"],
    ] {
        assert!(sh(cmd).status.success(), "{cmd:?}");
    }
    std::thread::spawn(move || {
        use pathem_io::iface;
        pathem_io::host::enter_netns(&mid).expect("the bed's namespace");
        assert_eq!(iface::rx_queues("pa"), 4);
        assert_eq!(iface::rx_queues("tq0"), 1);
        assert!(iface::is_up("pa") && iface::is_up("pb"));
        // A veth reports 10 Gbit/s, as `ethtool pa` says.
        assert_eq!(iface::speed_bps("pa"), Some(10_000_000_000));
        assert!(iface::check_exists("pa").is_ok());
        let e = iface::check_exists("nosuch0").unwrap_err().to_string();
        assert!(e.contains("there are:") && e.contains("pa") && e.contains("pb"), "{e}");
        let (_rx, _tx, mode) = pathem_io::afxdp::open("pa").expect("an AF_XDP port on pa");
        assert!(mode.contains("4 receive queues"), "{mode}");
    })
    .join()
    .expect("the checks in the namespace");
}

/// A port's carrier reader asks on the socket it keeps: the namespace it was made in, wherever
/// it is read. Made in a fresh namespace, whose loopback is down, it says so when read from
/// this thread, whose loopback is up (a reader asking the reading thread's namespace would say
/// up).
fn a_carrier_reader_asks_the_namespace_it_was_made_in() {
    use pathem_io::iface::{has_carrier, CarrierReader};
    let fresh = std::thread::spawn(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("a network namespace of its own");
        CarrierReader::new("lo").expect("a reader in it")
    })
    .join()
    .expect("the reader made in its namespace");
    assert!(!fresh.has_carrier() && has_carrier("lo"));
}

/// The same with `--cores 0,1` one way: the input reads queues 0 and 2 on CPU 0, a queue
/// reader on CPU 1 (with the output) reads 1 and 3 and hands their frames over. The frames
/// of both CPUs' queues reach the sink, in each flow's order, through one bottleneck.
fn queues_read_on_two_cpus_stay_one_bottleneck() {
    a_port_reads_every_queue("afxdp", Some("0,1"));
}

/// The same for DPDK's net_af_packet with four queue pairs, its queues read on two CPUs.
fn dpdk_queues_read_on_two_cpus_stay_one_bottleneck() {
    a_port_reads_every_queue("dpdk-queues", Some("0,1"));
}

/// The same for DPDK's net_af_packet with four queue pairs; net_af_xdp, which binds only to
/// combined channels (a veth has none), is refused on such an interface.
fn dpdk_every_queue_is_read_as_one_bottleneck() {
    let t = Topo::with_queues(4);
    let out = t.exec(&t.mid, &[PATHEM, "run", "dpdk:net_af_xdp0,iface=pa", "afpacket:pb"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.starts_with("pathem:")).collect();
    assert!(!out.status.success() && said.len() == 1, "{err}");
    assert!(said[0].contains("4 receive queues") && said[0].contains("combined channels"), "{err}");
    drop(t);
    a_port_reads_every_queue("dpdk-queues", None);
}

/// Sixteen UDP flows over a veth with four queues into a port of `kind`, one way, its stages
/// (and queues) on `cores` if given; see the tests above.
fn a_port_reads_every_queue(kind: &str, cores: Option<&str>) {
    let mut t = Topo::with_queues(4);
    t.quiet();
    let mut args =
        vec!["--rate", "50mbit", "--queue", "100pkt", "--one-way", "--json", "--stats-interval", "100ms"];
    args.extend(cores.iter().flat_map(|c| ["--cores", c]));
    t.start_with(kind, &args);
    let said = t.stderr.lock().unwrap().join("\n");
    assert!(said.matches("4 receive queues").count() == 2, "{kind}: {said}");
    if cores.is_some() {
        assert!(said.contains("receive queues 0,2 on CPU 0; 1,3 on CPU 1"), "{kind}: {said}");
    }
    let queue_counts = |t: &Topo| -> Vec<u64> {
        let out = must(&["ip", "netns", "exec", &t.mid, "ethtool", "-S", "pa"]);
        (0..4)
            .map(|q| {
                let key = format!("rx_queue_{q}_xdp_packets:");
                out.lines().find_map(|l| l.trim().strip_prefix(&key)).map_or(0, |v| v.trim().parse().unwrap())
            })
            .collect()
    };
    // Sixteen UDP sockets in gen's stack: the stack picks a transmit queue per socket (by its
    // flow hash), and the veth hands each frame to pa's receive queue of the same number.
    let (flows, each, size) = (16u16, 750u64, 600usize);
    let mac = must(&["ip", "-n", &t.sink, "-j", "link", "show", "s0"]);
    let mac: serde_json::Value = serde_json::from_str(&mac).unwrap();
    let mac = mac[0]["address"].as_str().unwrap().to_string();
    // One way: no replies come back, so the generator knows the sink's address by heart.
    must(&["ip", "-n", &t.gen, "neigh", "replace", SINK_IP, "lladdr", &mac, "dev", "g0"]);
    let sink = t.sink.clone();
    let (ready_tx, ready_rx) = mpsc::channel();
    let capture = in_ns(&sink, move || {
        let mut rx = AfPacketRx::open("s0", 2048, 8 << 20).expect("sink socket");
        ready_tx.send(()).unwrap();
        let mut got: Vec<(u16, u64, Nanos)> = Vec::new();
        let mut quiet_since = monotonic_now();
        while monotonic_now() - quiet_since < Nanos::from_millis(500) {
            let n = rx
                .recv_burst(monotonic_now(), 64, |f| {
                    if f.data.len() >= 50 && f.data[23] == 17 && f.data[36..38] == 9u16.to_be_bytes() {
                        let flow = u16::from_be_bytes([f.data[34], f.data[35]]);
                        got.push((flow, u64::from_be_bytes(f.data[42..50].try_into().unwrap()), f.arrival));
                    }
                })
                .unwrap();
            if n > 0 {
                quiet_since = monotonic_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        got
    });
    ready_rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let before = t.json_lines().pop().expect("interval counters");
    let (q0, pa0) = (queue_counts(&t), rx_packets(&t.mid, "pa"));
    in_ns(&t.gen, move || {
        let socks: Vec<std::net::UdpSocket> = (0..flows)
            .map(|f| std::net::UdpSocket::bind((GEN_IP, 1000 + f)).expect("a flow's socket"))
            .collect();
        let mut payload = vec![0u8; size - 42];
        for seq in 0..each {
            payload[..8].copy_from_slice(&seq.to_be_bytes());
            for s in &socks {
                // A full socket buffer waits; what the stack refuses is not counted as sent.
                while s.send_to(&payload, (SINK_IP, 9)).is_err() {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
    })
    .join()
    .unwrap();
    let got = capture.join().unwrap();
    let (q1, pa1) = (queue_counts(&t), rx_packets(&t.mid, "pa"));
    let s = t.stop_json();
    let per_queue: Vec<u64> = q1.iter().zip(&q0).map(|(a, b)| a - b).collect();
    let (d, b) = (&s["a_to_b"], &before["a_to_b"]);
    let u = |k: &str| d[k].as_u64().unwrap() - b[k].as_u64().unwrap();
    let sum = |v: &serde_json::Value| {
        v["dropped"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum::<u64>()
    };
    eprintln!("{kind}: per queue {per_queue:?}; at pa {}; pathem {d}; sink {}", pa1 - pa0, got.len());
    assert!(per_queue.iter().filter(|&&n| n > 0).count() >= 2, "the flows did not spread: {per_queue:?}");
    if cores.is_some() {
        // Both CPUs read frames: queues 1 and 3 are the reader's alone.
        let (input, reader) = (per_queue[0] + per_queue[2], per_queue[1] + per_queue[3]);
        assert!(input > 0 && reader > 0, "one CPU's queues got no flow: {per_queue:?}");
    }
    // Every frame that reached pa: taken by pathem (forwarded, or dropped as counted), or
    // lost by the sockets before pathem saw it.
    assert_eq!(d["in_flight"], 0, "{d}");
    assert_eq!(u("rx_packets"), u("tx_packets") + sum(d) - sum(b), "{d}");
    assert!(pa1 - pa0 >= flows as u64 * each, "the flows did not all reach pa");
    assert_eq!(u("rx_packets") + u("port_rx_dropped"), pa1 - pa0, "frames at pa unaccounted for: {d}");
    assert!(d["dropped"]["queue"].as_u64().unwrap() > 0, "the bottleneck never filled: {d}");
    assert_eq!(got.len() as u64, u("tx_packets"), "the sink got what pathem sent");
    let per_flow: Vec<usize> = (0..flows).map(|f| got.iter().filter(|g| g.0 == 1000 + f).count()).collect();
    eprintln!("{kind}: per flow {per_flow:?}");
    // Each flow in its order.
    // Software stamps (DPDK over net_af_packet) order frames read on two CPUs by when each CPU
    // read them: the input's flows share the bottleneck less well (6–21 frames against 133–333
    // for the reader's in one run; docs/design.md), and in a debug build, where the input
    // reads slower, one of them got none in a run of 16 (0–5 frames for the input's, 166–283
    // for the reader's). There, most flows need only arrive, in order.
    // The same for AF_XDP on a kernel that refuses its XDP program the metadata helper
    // (`bpf_xdp_adjust_meta`, refused by a 6.18 build here): the port says "software receive
    // stamps" and stamps what it reads when it reads it.
    let software = said.contains("software receive stamps");
    let stamped_late = cores.is_some() && (kind.starts_with("dpdk") || software);
    if software {
        eprintln!("{kind}: software receive stamps (the kernel refuses the XDP program's stamps)");
    }
    // net_af_packet's fanout moves frames off a full socket's ring onto another socket (DPDK
    // 22.11 sets rollover): read on another queue, they may pass their flow's earlier frames.
    // Where the kernel moved none, every flow keeps its order; where it moved some, the
    // counter says so (and only a port with such a fanout may have any).
    let rolled = u("port_rx_rolled_over");
    assert!(rolled == 0 || kind == "dpdk-queues", "{kind}: {rolled} frames rolled over: {d}");
    let mut through = 0;
    for flow in 0..flows {
        let seqs: Vec<u64> = got.iter().filter(|g| g.0 == 1000 + flow).map(|g| g.1).collect();
        assert!(stamped_late || seqs.len() >= 5, "flow {flow}: {} frames", seqs.len());
        let in_order = seqs.windows(2).all(|w| w[0] < w[1]);
        assert!(in_order || rolled > 0, "flow {flow} out of order, none rolled over: {seqs:?}");
        if !in_order {
            eprintln!("{kind}: flow {flow} out of order after {rolled} frames rolled over: {seqs:?}");
        }
        through += usize::from(!seqs.is_empty());
    }
    assert!(through * 2 > flows as usize, "{through} of {flows} flows got through: {per_flow:?}");
    // One bottleneck: the frames left no faster than 50 Mbit/s allows (a bottleneck per
    // queue would have let them out two to four times as fast). The 10% margin is for the
    // stamps at the sink, where a frame can be stamped late by a millisecond or two.
    let wire = (size as u64 + 24) * 8 * 1_000_000_000 / 50_000_000;
    let span = got.last().unwrap().2 - got[0].2;
    let least = Nanos(wire * (got.len() as u64 - 1));
    assert!(
        span.0 as f64 >= least.0 as f64 * 0.9,
        "{} frames in {span:?}, at least {least:?} at the rate",
        got.len()
    );
}

fn a_flood_is_counted_frame_for_frame() {
    for kind in kinds() {
        let mut t = Topo::new();
        t.quiet();
        // A small socket buffer makes the port the bottleneck: the flood shows as port drops.
        t.start_with(
            kind,
            &["--delay", "1ms", "--json", "--stats-interval", "100ms", "--rx-buffer", "256KiB"],
        );
        std::thread::sleep(Duration::from_millis(400));
        let before = t.json_lines().pop().expect("interval counters");
        let (pa0, s00) = (rx_packets(&t.mid, "pa"), rx_packets(&t.sink, "s0"));
        let n = 400_000u32;
        // As fast as the generator goes, and pathem stopped for 100 ms of it: whether or not
        // the generator outruns pathem on this machine, the port (its buffer or ring) overflows.
        let gen = t.gen.clone();
        let flood =
            std::thread::spawn(move || blast(&gen, "g0", (0..n).map(|i| marked_frame(i, 64)).collect()));
        std::thread::sleep(Duration::from_millis(30));
        let pid = nix::unistd::Pid::from_raw(t.pathem.as_ref().unwrap().id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::SIGSTOP).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        nix::sys::signal::kill(pid, nix::sys::signal::SIGCONT).unwrap();
        flood.join().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let (pa1, s01) = (rx_packets(&t.mid, "pa"), rx_packets(&t.sink, "s0"));
        let after = t.stop_json();
        let (b, a) = (&before["a_to_b"], &after["a_to_b"]);
        let d = |k: &str| a[k].as_u64().unwrap() - b[k].as_u64().unwrap();
        let (rx, tx, port_drops) = (d("rx_packets"), d("tx_packets"), d("port_rx_dropped"));
        let dropped: u64 = ["loss", "queue", "police", "ber", "delay_line", "oversize"]
            .iter()
            .map(|k| a["dropped"][k].as_u64().unwrap() - b["dropped"][k].as_u64().unwrap())
            .sum();
        eprintln!(
            "{kind}: port {} = rx {rx} + port drops {port_drops}; tx {tx}, sink {}; lateness p50 {} ns",
            pa1 - pa0,
            s01 - s00,
            a["late"]["p50_ns"]
        );
        assert!(port_drops > 0, "{kind}: the flood was not faster than pathem: {a}");
        assert_eq!(pa1 - pa0, rx + port_drops, "{kind}: the interface's count = pathem's + the port's drops");
        assert_eq!(
            rx,
            tx + dropped + a["in_flight"].as_u64().unwrap(),
            "{kind}: rx = tx + drops + in flight: {a}"
        );
        assert_eq!(a["port_tx_queued"], 0, "{kind}");
        assert_eq!(s01 - s00, tx, "{kind}: the sink got what pathem counted as sent");
    }
}

/// Runs `pathem ctl ARGS` (the socket is a file: no namespace needed).
fn ctl(args: &[&str]) -> Output {
    Command::new(PATHEM).arg("ctl").args(args).output().expect("pathem ctl runs")
}

/// A `ctl set` on a link that follows a schedule builds on the step in effect and holds
/// when later steps fall due; a step still changes what the set left alone.
fn ctl_set_holds_over_a_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let schedule = dir.path().join("s.txt");
    std::fs::write(&schedule, "0s --delay 20ms\n2s --loss 2%\n").unwrap();
    let mut t = Topo::new();
    let name = format!("t{}h{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    t.start_with("afpacket", &["--schedule", schedule.to_str().unwrap(), "--name", &name, "--json"]);
    let path = |dir: &str| -> String {
        let v: serde_json::Value = serde_json::from_slice(&ctl(&[&name, "show", "--json"]).stdout).unwrap();
        v[dir]["path"].as_str().unwrap().to_string()
    };
    let out = ctl(&[&name, "set", "--a-to-b", "--rate 100mbit --queue 100pkt"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (ab, ba) = (path("a_to_b"), path("b_to_a"));
    assert!(ab.contains("delay 20ms") && ab.contains("100mbit"), "the step's delay kept: {ab}");
    assert!(ba.contains("delay 20ms") && !ba.contains("100mbit"), "{ba}");
    let (min, _) = t.rtt(5);
    assert!((40.0..44.0).contains(&min), "rtt {min} for 2 × 20 ms");
    // After the 2 s step: its loss joins, the set's rate holds.
    std::thread::sleep(Duration::from_millis(2300));
    let ab = path("a_to_b");
    assert!(ab.contains("delay 20ms") && ab.contains("100mbit") && ab.contains("loss"), "{ab}");
    // A reset drops the start's flags, the steps' and the sets' alike: only its own remain.
    let out = ctl(&[&name, "set", "--reset", "--delay", "5ms"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for dir in ["a_to_b", "b_to_a"] {
        let p = path(dir);
        assert!(p.contains("delay 5ms") && !p.contains("mbit") && !p.contains("loss"), "{dir}: {p}");
    }
    let (min, _) = t.rtt(5);
    assert!((10.0..13.0).contains(&min), "rtt {min} for 2 × 5 ms");
    // One direction's own reset: that direction alone.
    let out = ctl(&[&name, "set", "--b-to-a", "--reset"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(path("b_to_a").contains("no impairment") && path("a_to_b").contains("delay 5ms"));
    let out = ctl(&[&name, "set", "--reset"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(path("a_to_b").contains("no impairment"), "{}", path("a_to_b"));
    t.stop();
}

fn ctl_steers_a_running_link_and_shows_it() {
    let mut t = Topo::new();
    let name = format!("t{}c{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    t.start_with("afpacket", &["--delay", "10ms", "--name", &name, "--json"]);
    let (min, _) = t.rtt(10);
    assert!((20.0..23.0).contains(&min), "rtt {min} for 2 × 10 ms");
    // The socket is its owner's only.
    let meta = std::fs::metadata(format!("/run/pathem/{name}.sock")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o600);
    // The RTT follows a change.
    let out = ctl(&[&name, "set", "--delay", "30ms"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (min, _) = t.rtt(10);
    assert!((60.0..63.0).contains(&min), "rtt {min} after set --delay 30ms");
    // One direction only.
    let out = ctl(&[&name, "set", "--b-to-a", "--delay 5ms"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (min, _) = t.rtt(10);
    assert!((35.0..38.0).contains(&min), "rtt {min} after 30 ms + 5 ms");
    // show --json says what is in effect.
    let out = ctl(&[&name, "show", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("show --json");
    assert!(v["a_to_b"]["path"].as_str().unwrap().contains("delay 30ms"), "{v}");
    assert!(v["b_to_a"]["path"].as_str().unwrap().contains("delay 5ms"), "{v}");
    // It says where each port's receive stamps come from (`kernel` for AF_PACKET, XDP or
    // software for AF_XDP, the device or software for DPDK).
    for key in ["how_a", "how_b"] {
        assert!(v[key].as_str().unwrap().contains("receive stamps"), "{key}: {v}");
    }
    let text = String::from_utf8_lossy(&ctl(&[&name, "show"]).stdout).into_owned();
    assert_eq!(
        text.lines().filter(|l| l.trim_start().starts_with("port ") && l.contains("receive stamps")).count(),
        2,
        "{text}"
    );
    assert!(v["a_to_b"]["stats"]["rx_packets"].as_u64().unwrap() > 0);
    assert!(
        ctl(&["list"]).stdout.starts_with(name.as_bytes())
            || String::from_utf8_lossy(&ctl(&["list"]).stdout).contains(&name)
    );
    // A steady UDP flow across ten changes of delay loses nothing and is counted exactly.
    let ctl_name = name.clone();
    let changer = std::thread::spawn(move || {
        for i in 0..10 {
            std::thread::sleep(Duration::from_millis(100));
            let d = if i % 2 == 0 { "2ms" } else { "8ms" };
            let out = ctl(&[&ctl_name, "set", "--a-to-b", &format!("--delay {d}")]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
    });
    let n = 15_000;
    let got = udp_count((&t.gen, GEN_IP), (&t.sink, SINK_IP), n, Duration::from_micros(100));
    changer.join().unwrap();
    assert_eq!(got, n, "nothing lost across ten changes");
    // Bad input: one line each, nothing changed.
    for (args, says) in [
        (vec![name.as_str(), "set", "--delay", "10q"], "unknown unit"),
        (vec![name.as_str(), "set", "--loss", "150%"], "above 100%"),
        (vec![name.as_str(), "set"], "accepted"),
        (vec![name.as_str(), "frobnicate"], "accepted: show, set"),
        (vec!["no-such-link", "show"], "no running pathem"),
        (vec!["../etc", "show"], "accepted"),
    ] {
        let out = ctl(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let v: serde_json::Value = serde_json::from_slice(&ctl(&[&name, "show", "--json"]).stdout).unwrap();
    assert!(!v["a_to_b"]["path"].as_str().unwrap().contains("loss"), "a refused set changed nothing: {v}");
    // A relative file name is the client's: taken from its directory, not pathem's.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lost.txt"), "0000000001").unwrap();
    let out = Command::new(PATHEM)
        .args(["ctl", &name, "set", "--a-to-b", "--loss trace:lost.txt"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&ctl(&[&name, "show", "--json"]).stdout).unwrap();
    assert!(v["a_to_b"]["path"].as_str().unwrap().contains("loss trace of 10 frames"), "{v}");
    // A client of another protocol version (an older pathem sends no version) gets a line
    // saying so, not a parse failure.
    {
        use std::io::Write;
        let mut sock = std::os::unix::net::UnixStream::connect(format!("/run/pathem/{name}.sock")).unwrap();
        writeln!(sock, r#"{{"cmd":"show"}}"#).unwrap();
        let mut answer = String::new();
        BufReader::new(&sock).read_line(&mut answer).unwrap();
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!((v["version"].as_u64(), v["reply"].as_str()), (Some(1), Some("refused")), "{v}");
        assert!(v["error"].as_str().unwrap().contains("control protocol 0"), "{v}");
    }
    // Switches turn on and off live, like any field.
    let path_of = |name: &str| {
        let v: serde_json::Value = serde_json::from_slice(&ctl(&[name, "show", "--json"]).stdout).unwrap();
        v["a_to_b"]["path"].as_str().unwrap().to_string()
    };
    assert!(ctl(&[&name, "set", "--reorder", "--ecn", "--jitter", "1ms"]).status.success());
    let on = path_of(&name);
    assert!(on.contains("reorder") && on.contains("ecn"), "{on}");
    assert!(t.rtt(5).0 > 0.0, "forwarding with reordering on");
    assert!(ctl(&[&name, "set", "--no-reorder", "--no-ecn"]).status.success());
    let off = path_of(&name);
    assert!(!off.contains("reorder") && !off.contains("ecn") && off.contains("jitter"), "{off}");
    // A second instance cannot take the name; another name works side by side.
    let t2 = Topo::new();
    let taken =
        t2.exec(&t2.mid, &[PATHEM, "run", "afpacket:pa", "afpacket:pb", "--name", &name, "--duration", "1s"]);
    assert_eq!(taken.status.code(), Some(2), "{}", String::from_utf8_lossy(&taken.stderr));
    assert!(String::from_utf8_lossy(&taken.stderr).contains("taken by a running pathem"));
    let other = t2.exec(
        &t2.mid,
        &[PATHEM, "run", "afpacket:pa", "afpacket:pb", "--name", &format!("{name}b"), "--duration", "1s"],
    );
    assert!(other.status.success(), "{}", String::from_utf8_lossy(&other.stderr));
    let s = t.stop_json();
    let a = &s["a_to_b"];
    assert_eq!(a["rx_packets"], a["tx_packets"], "every frame through: {a}");
    assert!(!std::path::Path::new(&format!("/run/pathem/{name}.sock")).exists(), "socket removed on exit");
}

fn ctl_reaches_a_running_shell() {
    let name = format!("t{}s{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let script = format!(
        "{PATHEM} ctl {name} set --delay 25ms && ping -n -q -c 3 -i 0.2 $PATHEM_GATEWAY && {PATHEM} ctl $PATHEM_NAME show --json"
    );
    let out = Command::new(PATHEM)
        .args(["shell", "--delay", "5ms", "--name", &name, "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    let line = text.lines().find(|l| l.contains("min/avg")).unwrap_or_else(|| panic!("{text}"));
    let min: f64 = line.split('=').nth(1).unwrap().trim().split('/').next().unwrap().parse().unwrap();
    assert!((50.0..54.0).contains(&min), "rtt {min} after ctl set --delay 25ms in the shell");
    assert!(text.contains(&format!("\"name\":\"{name}\"")), "{text}");
}

/// One HTTP GET of `path` on 127.0.0.1:`port`, from inside namespace `ns`; the body.
fn scrape(ns: &str, port: u16, path: &'static str) -> String {
    in_ns(ns, move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics listen");
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    })
    .join()
    .unwrap()
}

fn metrics_and_show_agree() {
    let mut t = Topo::new();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = format!("t{}m{n}", std::process::id());
    let port = 19_000 + (std::process::id() % 500) as u16 * 2 + n as u16 % 2;
    t.start_with(
        "afpacket",
        &[
            "--delay",
            "1ms",
            "--rate",
            "50mbit",
            "--queue",
            "50pkt",
            "--name",
            &name,
            "--metrics",
            &port.to_string(),
        ],
    );
    t.rtt(20);
    std::thread::sleep(Duration::from_millis(300));
    // The stacks at the ends send now and then on their own (IPv6 neighbour and router
    // discovery): a scrape between two shows reads counters between theirs.
    let show =
        || -> serde_json::Value { serde_json::from_slice(&ctl(&[&name, "show", "--json"]).stdout).unwrap() };
    let v = show();
    let started = std::time::Instant::now();
    let text = scrape(&t.mid, port, "/metrics");
    let took = started.elapsed();
    let after = show();
    assert!(text.starts_with("HTTP/1.1 200 OK") && text.contains("openmetrics-text"), "{text}");
    let value = |metric: &str| -> u64 {
        let line =
            text.lines().find(|l| l.starts_with(metric)).unwrap_or_else(|| panic!("{metric} in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    for (metric, key) in [
        ("pathem_rx_frames_total{direction=\"a_to_b\"}", "rx_packets"),
        ("pathem_tx_frames_total{direction=\"a_to_b\"}", "tx_packets"),
        ("pathem_rx_frames_total{direction=\"b_to_a\"}", "rx_packets"),
    ] {
        let dir = if metric.contains("b_to_a") { "b_to_a" } else { "a_to_b" };
        let (before, after) =
            (v[dir]["stats"][key].as_u64().unwrap(), after[dir]["stats"][key].as_u64().unwrap());
        let got = value(metric);
        assert!((before..=after).contains(&got), "{metric} {got}, show {before} before and {after} after");
    }
    assert!(value("pathem_delay_line_capacity_bytes{direction=\"a_to_b\"}") > 0);
    assert!(text.contains("pathem_path_info{direction=\"a_to_b\",path=\"rate 50mbit"), "{text}");
    assert!(text.contains("pathem_lateness_seconds_bucket{"), "{text}");
    assert!(scrape(&t.mid, port, "/nothing").starts_with("HTTP/1.1 404"));
    let many = in_ns(&t.mid, move || {
        use std::io::{Read, Write};
        let started = std::time::Instant::now();
        for _ in 0..100 {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            write!(s, "GET /metrics HTTP/1.1\r\n\r\n").unwrap();
            let mut out = Vec::new();
            s.read_to_end(&mut out).unwrap();
        }
        started.elapsed() / 100
    })
    .join()
    .unwrap();
    eprintln!("metrics: first scrape {took:?}, then {many:?} each over 100 ({} bytes)", text.len());
    t.stop();
}

fn stages_on_two_cpus_forward_everything() {
    // A thread per direction.
    let mut t = Topo::new();
    t.start_with("afpacket", &["--delay", "5ms", "--cores", "0,1"]);
    let (min, _) = t.rtt(10);
    assert!((10.0..13.0).contains(&min), "rtt {min} for 2 × 5 ms, a thread per direction");
    let n = 10_000;
    assert_eq!(udp_count((&t.gen, GEN_IP), (&t.sink, SINK_IP), n, Duration::from_micros(50)), n);
    t.stop();
    // One way, its input and its output on a CPU each (the delay line between the threads).
    let mut t = Topo::new();
    let mac = must(&["ip", "-n", &t.sink, "-j", "link", "show", "s0"]);
    let mac: serde_json::Value = serde_json::from_str(&mac).unwrap();
    let mac = mac[0]["address"].as_str().unwrap().to_string();
    // No replies come back one way: the generator knows the sink's address by heart.
    must(&["ip", "-n", &t.gen, "neigh", "replace", SINK_IP, "lladdr", &mac, "dev", "g0"]);
    let name = format!("t{}o{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    t.start_with("afxdp", &["--delay", "2ms", "--one-way", "--cores", "0,1", "--json", "--name", &name]);
    assert_eq!(
        udp_count((&t.gen, GEN_IP), (&t.sink, SINK_IP), n, Duration::from_micros(50)),
        n,
        "split stages"
    );
    // There is no b -> a path to change: refused, not reported as done.
    let out = ctl(&[&name, "set", "--b-to-a", "--delay 5ms"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--b-to-a: this link forwards a -> b only"), "{err}");
    let s = t.stop_json();
    assert!(s["b_to_a"].is_null(), "one way");
    assert_eq!(s["a_to_b"]["in_flight"], 0);
    // The same split with a queue discipline: its decisions cross from the input's thread
    // to the output's.
    let mut t = Topo::new();
    let mac = must(&["ip", "-n", &t.sink, "-j", "link", "show", "s0"]);
    let mac: serde_json::Value = serde_json::from_str(&mac).unwrap();
    let mac = mac[0]["address"].as_str().unwrap().to_string();
    must(&["ip", "-n", &t.gen, "neigh", "replace", SINK_IP, "lladdr", &mac, "dev", "g0"]);
    t.start_with(
        "afxdp",
        &["--delay", "2ms", "--rate", "20mbit", "--aqm", "fq-codel", "--one-way", "--cores", "0,1", "--json"],
    );
    let got = udp_count((&t.gen, GEN_IP), (&t.sink, SINK_IP), n, Duration::from_micros(50));
    let s = t.stop_json();
    assert_eq!(got, n, "split stages with fq-codel: {s}");
    assert_eq!(s["a_to_b"]["in_flight"], 0, "{s}");
    assert!(s["a_to_b"]["sojourn"]["max_ns"].as_u64().unwrap() > 0, "{s}");
}

/// `ctl set` takes effect at once: datagrams sent after it returns see the new delay, and no
/// datagram with the old delay was sent after one with the new delay.
///
/// The one-way delay is the sink's kernel receive stamp minus the sender's stamp. On a busy
/// two-core machine the sender can lose its CPU between stamping a datagram and sending it
/// (this test once failed so: an old-delay datagram stamped before a deschedule looked 15 ms
/// slower and passed for a new-delay one). So the sender notes its clock after each send too,
/// and only datagrams sent within 1 ms of their stamp count; and the bands leave 10 ms of
/// margin for pathem's own hiccups: old < 20 ms, new ≥ 29.5 ms (a delay never shrinks).
fn a_change_takes_effect_at_once() {
    let mut t = Topo::new();
    let name = format!("t{}e{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    t.start_with("afpacket", &["--delay", "10ms", "--name", &name]);
    // The sink notes each datagram's number and receive stamp (both ends read CLOCK_MONOTONIC).
    let (ready_tx, ready_rx) = mpsc::channel();
    let sink = in_ns(&t.sink, move || {
        let sock = pathem_io::udp::TimestampedUdp::bind(format!("{SINK_IP}:9998").parse().unwrap()).unwrap();
        sock.socket().set_read_timeout(Some(Duration::from_millis(10))).unwrap();
        ready_tx.send(()).unwrap();
        let mut buf = [0u8; 64];
        let mut seen: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
        let end = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < end {
            if let Ok(r) = sock.recv_nowait(&mut buf) {
                seen.insert(u64::from_be_bytes(buf[..8].try_into().unwrap()), r.at.as_nanos());
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        seen
    });
    ready_rx.recv().unwrap();
    let sender = in_ns(&t.gen, move || {
        let sock = std::net::UdpSocket::bind((GEN_IP, 0)).unwrap();
        let end = std::time::Instant::now() + Duration::from_millis(2500);
        let mut sent = Vec::new();
        let mut seq = 0u64;
        while std::time::Instant::now() < end {
            let before = monotonic_now().as_nanos();
            let _ = sock.send_to(&seq.to_be_bytes(), (SINK_IP, 9998));
            let after = monotonic_now().as_nanos();
            sent.push((seq, before, after));
            seq += 1;
            while monotonic_now().as_nanos() < before + 50_000 {
                std::hint::spin_loop();
            }
        }
        sent
    });
    std::thread::sleep(Duration::from_millis(1000));
    let asked = monotonic_now().as_nanos();
    let out = ctl(&[&name, "set", "--delay", "30ms"]);
    let answered = monotonic_now().as_nanos();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sent = sender.join().unwrap();
    let seen = sink.join().unwrap();
    // (sent at, one-way delay) of the datagrams that left within 1 ms of their stamp.
    let delays: Vec<(u64, u64)> = sent
        .iter()
        .filter(|(_, before, after)| after - before < 1_000_000)
        .filter_map(|(seq, before, _)| seen.get(seq).map(|&r| (*before, r.saturating_sub(*before))))
        .collect();
    // A datagram with less than 20 ms is surely of the old delay; one with more than 29.5 ms
    // may be of the old too, stalled 20 ms on a loaded machine (CI once saw one 30 ms after
    // `ctl` started, and an old one 150 ms later, `ctl` itself taking 191 ms). So the switch
    // is the last old one, and the first new one is the first after it.
    let last_old = delays.iter().filter(|(_, d)| *d < 20_000_000).map(|(s, _)| *s).max().expect("old delays");
    let first_new = delays.iter().filter(|(s, d)| *s > last_old && *d >= 29_500_000).map(|(s, _)| *s).min();
    let first_new = first_new.expect("the change took effect");
    eprintln!(
        "ctl set: `pathem ctl` ran {:.2} ms; the first datagram with the new delay was sent {:.2} ms after it was started ({:.2} ms after it returned); the last with the old, {:.2} ms after; {} of {} datagrams counted",
        (answered - asked) as f64 / 1e6,
        (first_new as f64 - asked as f64) / 1e6,
        (first_new as f64 - answered as f64) / 1e6,
        (last_old as f64 - asked as f64) / 1e6,
        delays.len(),
        sent.len()
    );
    assert!(first_new < answered + 50_000_000, "applied by the next datagrams");
    // Everything sent 5 ms after `ctl` returned has the new delay.
    let late_old = delays.iter().filter(|(s, d)| *s > answered + 5_000_000 && *d < 29_500_000).count();
    assert_eq!(late_old, 0, "datagrams sent after the change with less than the new delay");
}

/// A frame the kernel puts in the AF_PACKET port's ring while the port is reading a burst
/// (its thread lost the CPU in the middle, for 5 ms here) keeps its own receive stamp. It was
/// once held down to the instant the burst began, so it left that much before its delay was
/// up: under load `a_change_takes_effect_at_once` saw 30 frames leave 2–3 ms early at once.
fn a_frame_that_comes_while_a_burst_is_read_keeps_its_stamp() {
    let t = Topo::new();
    // pb's socket is made in the middle namespace and used from the sink's, which reads s0.
    let tx = in_ns(&t.mid, || pathem_io::afpacket::RawSocket::open("pb", false).expect("pb")).join().unwrap();
    let got = in_ns(&t.sink, move || {
        let mut rx = AfPacketRx::open("s0", 2048, 1 << 20).expect("sink socket");
        tx.send(&marked_frame(0, 64)).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while rx.poll_at() != PollAt::Now && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(100));
        }
        let mut got: Vec<(u32, Nanos)> = Vec::new();
        let mut second_sent = None;
        rx.recv_burst(monotonic_now(), 64, |f| {
            if let Some(seq) = marked_seq(f.data) {
                got.push((seq, f.arrival));
                if seq == 0 {
                    // Frame 1 lands in the ring while this burst is being read.
                    std::thread::sleep(Duration::from_millis(5));
                    second_sent = Some(monotonic_now());
                    tx.send(&marked_frame(1, 64)).unwrap();
                }
            }
        })
        .unwrap();
        // Whatever this burst did not take, the next one does.
        rx.recv_burst(monotonic_now(), 64, |f| {
            if let Some(seq) = marked_seq(f.data) {
                got.push((seq, f.arrival));
            }
        })
        .unwrap();
        (got, second_sent.expect("frame 0 was read"))
    });
    let (got, second_sent) = got.join().unwrap();
    let arrival = |seq| got.iter().find(|g| g.0 == seq).map(|g| g.1).expect("both frames read");
    eprintln!(
        "frame 1 sent {} after frame 0's arrival, stamped {} after it",
        second_sent - arrival(0),
        arrival(1) - arrival(0)
    );
    // Stamped by the kernel after `second_sent` was read; 100 µs for the offset's error.
    assert!(
        arrival(1) + Nanos::from_micros(100) >= second_sent,
        "frame 1 arrived at {} but was sent at {second_sent}",
        arrival(1)
    );
}

fn dpdk_sigint_balances_and_returns_every_mbuf() {
    let mut t = Topo::new();
    t.quiet();
    t.start_with("dpdk", &["--a-to-b", "--delay 300ms", "--json"]);
    // Frames in flight at the signal: sent for 200 ms, stopped 100 ms later, 300 ms of delay.
    let n = 2000;
    let gen = t.gen.clone();
    let flood = std::thread::spawn(move || {
        blast(&gen, "g0", (0..n).map(|i| marked_frame(i, 200)).collect());
    });
    flood.join().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let s = t.stop_json();
    let a = &s["a_to_b"];
    let get = |k: &str| a[k].as_u64().unwrap();
    let dropped: u64 = ["loss", "queue", "police", "ber", "delay_line", "oversize"]
        .iter()
        .map(|k| a["dropped"][k].as_u64().unwrap())
        .sum();
    assert!(get("rx_packets") >= u64::from(n), "every frame reached pathem: {a}");
    assert!(get("in_flight") > 0, "frames were still in the delay line at the signal: {a}");
    assert_eq!(
        get("rx_packets"),
        get("tx_packets") + dropped + get("in_flight") + get("port_tx_queued"),
        "rx = tx + drops + in flight + in port: {a}"
    );
    std::thread::sleep(Duration::from_millis(200));
    let err = t.stderr.lock().unwrap().join("\n");
    for port in ["net_af_packet0", "net_af_packet1"] {
        assert!(
            err.contains(&format!("dpdk:{port}: closed, all 4095 mbufs back in its pool")),
            "{port}'s pool after SIGINT: {err}"
        );
    }
}

/// A frame longer than the port's mbufs hold, handed to a DPDK port by a caller other than
/// the runtime (which caps frames below that), is refused as too large and counted, never
/// copied past the mbuf (the length was checked only in debug builds).
fn dpdk_a_frame_longer_than_an_mbuf_is_refused() {
    #[cfg(feature = "dpdk")]
    {
        use pathem_io::{TxErrorClass, TxPort};
        // On a thread of its own: the EAL pins the thread that starts it, and processes the
        // harness starts later must not inherit that.
        std::thread::spawn(|| {
            let dev = pathem_io::dpdk::parse("net_null0").unwrap();
            let (_rx, mut tx, _) =
                pathem_io::dpdk::open("dpdk:net_null0", &dev, 1514, None, &Default::default())
                    .expect("net_null0");
            let long = vec![0u8; tx.max_frame() + 1];
            assert!(tx.send(Nanos::ZERO, long.len() as u32, &long), "taken, to be counted as refused");
            let r = tx.refused(true);
            assert_eq!(r.frames[TxErrorClass::TooLarge as usize], 1, "{r:?}");
            assert_eq!(r.bytes, long.len() as u64);
            let fits = vec![0u8; 64];
            assert!(tx.send(Nanos::ZERO, 64, &fits));
            tx.flush().unwrap();
            assert_eq!(tx.refused(true).frames[TxErrorClass::TooLarge as usize], 1, "only the long one");
        })
        .join()
        .unwrap();
    }
}

/// DPDK's net_af_packet on a veth: an interface whose frames outgrow the driver's ring slots
/// (the kernel cuts them, the driver hands them on as if whole) is refused with one line, and
/// the transmitting half takes frames up to the interface's MTU, not its mbufs' room, so a
/// longer one is dropped as oversize rather than counted as sent and lost in the kernel.
fn dpdk_frames_follow_the_interfaces_mtu() {
    #[cfg(feature = "dpdk")]
    {
        let t = Topo::new();
        must(&["ip", "-n", &t.mid, "link", "set", "pa", "mtu", "9000"]);
        let out = t.exec(
            &t.mid,
            &[PATHEM, "run", "dpdk:net_af_packet0,iface=pa", "afpacket:pb", "--duration", "1s"],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        let said: Vec<&str> = err.lines().filter(|l| l.starts_with("pathem:")).collect();
        assert!(!out.status.success() && said.len() == 1, "{err}");
        assert!(said[0].contains("has MTU 9000") && said[0].contains("lower the MTU to 1964"), "{err}");
        must(&["ip", "-n", &t.mid, "link", "set", "pb", "mtu", "1400"]);
        // Made promiscuous by its administrator, pb stays so after the port closes.
        must(&["ip", "-n", &t.mid, "link", "set", "pb", "promisc", "on"]);
        let max = in_ns(&t.mid, || {
            let dev = pathem_io::dpdk::parse("net_af_packet1,iface=pb").unwrap();
            let (_rx, tx, _) =
                pathem_io::dpdk::open("dpdk:net_af_packet1,iface=pb", &dev, 2048, None, &Default::default())
                    .expect("net_af_packet1 on pb");
            tx.max_frame()
        })
        .join()
        .unwrap();
        assert_eq!(max, 1400 + 18, "pb's MTU, its header and a VLAN tag");
        let link = must(&["ip", "-n", &t.mid, "link", "show", "pb"]);
        assert!(link.contains("PROMISC"), "the administrator's promiscuity cleared: {link}");
    }
}

/// The same for the AF_XDP port (4 KiB transmit frames) and the AF_PACKET port (slots of the
/// `max_frame` it was opened with, 1514 here): a longer frame is refused and counted; both
/// cut it to fit and sent it short.
fn ports_refuse_a_frame_longer_than_they_hold() {
    let t = Topo::new();
    let refused = in_ns(&t.mid, || {
        let (_rx, xdp, _) = pathem_io::afxdp::open("pb").expect("an AF_XDP port on pb");
        let packet = AfPacketTx::open("pa", 1514).expect("an AF_PACKET port on pa");
        fn long_then_short(mut tx: impl TxPort) -> pathem_io::TxRefused {
            assert!(tx.send(Nanos::ZERO, 5000, &[0u8; 5000]), "taken, to be counted as refused");
            assert!(tx.send(Nanos::ZERO, 64, &marked_frame(0, 64)));
            tx.flush().unwrap();
            tx.refused(true)
        }
        [long_then_short(xdp), long_then_short(packet)]
    })
    .join()
    .unwrap();
    for (port, r) in ["afxdp", "afpacket"].iter().zip(refused) {
        assert_eq!(r.frames[pathem_io::TxErrorClass::TooLarge as usize], 1, "{port}: {r:?}");
        assert_eq!(r.bytes, 5000, "{port}");
    }
}

/// What the host sends on a TAP device waits in its descriptor: the reader reads it at its
/// looks, at most 1 024 frames a look (a host that keeps sending cannot hold the forwarding
/// loop there), counts it and forwards none of it.
fn a_tap_reader_counts_the_hosts_own_frames_at_its_looks() {
    use pathem_io::RxPort;
    let t = Topo::new();
    let (looks, got, drops) = in_ns(&t.mid, || {
        let tap = pathem_io::tap::Tap::create("ptown0", 1500, 2000).expect("a TAP device");
        let sender = pathem_io::afpacket::RawSocket::open("ptown0", false).expect("a packet socket");
        let mut rx = tap.reader(1518, 1 << 20, 0x7061_7468).expect("a reader");
        for seq in 0..1100 {
            sender.send(&marked_frame(seq, 60)).expect("sent on the device");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut looks = Vec::new();
        for _ in 0..3 {
            rx.kernel_drops();
            looks.push(rx.foreign());
        }
        let mut got = 0;
        rx.recv_burst(Nanos::ZERO, 64, |_| got += 1).expect("read");
        (looks, got, rx.kernel_drops())
    })
    .join()
    .unwrap();
    assert_eq!(looks, vec![1024, 1100, 1100], "the host's frames, 1 024 a look");
    assert_eq!((got, drops), (0, 0), "none of them forwarded, none dropped");
}

/// A packet socket that takes only frames with attach's mark (what attach reads its TAP
/// devices with) takes those and leaves the others, across a veth pair in one namespace
/// (which keeps a frame's mark).
fn a_packet_socket_filtered_by_mark_takes_only_marked_frames() {
    use pathem_io::{RxPort, TxPort};
    const MARK: u32 = 0x7061_7468;
    let t = Topo::new();
    for cmd in [
        vec!["ip", "-n", &t.mid, "link", "add", "ptm0", "type", "veth", "peer", "name", "ptm1"],
        vec!["ip", "-n", &t.mid, "link", "set", "ptm0", "up"],
        vec!["ip", "-n", &t.mid, "link", "set", "ptm1", "up"],
    ] {
        let out = sh(&cmd);
        assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let got = in_ns(&t.mid, || {
        let mut rx = pathem_io::afpacket::AfPacketRx::open("ptm0", 1518, 1 << 20).expect("a reader");
        rx.only_marked("ptm0", MARK).expect("a filter");
        for (mark, first) in [(MARK, 0), (MARK + 1, 100), (0, 200)] {
            let mut tx = pathem_io::afpacket::AfPacketTx::open_marked("ptm1", 1518, mark).expect("a sender");
            for seq in first..first + 5 {
                assert!(tx.send(Nanos::ZERO, 60, &marked_frame(seq, 60)));
            }
            tx.flush().expect("sent");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut got = Vec::new();
        rx.recv_burst(Nanos::ZERO, 64, |f| got.push(marked_seq(f.data))).expect("read");
        (got, rx.kernel_drops())
    })
    .join()
    .unwrap();
    let marked: Vec<Option<u32>> = (0..5).map(Some).collect();
    assert_eq!(got, (marked, 0), "the five marked frames, no other, none dropped");
}

fn dpdk_bad_arguments_are_refused_with_one_line() {
    let t = Topo::new();
    let b = "dpdk:net_af_packet1,iface=pb";
    for (args, code, says) in [
        (vec!["run", "dpdk:eth0", b], 2, "accepted: dpdk:PCI"),
        (vec!["run", "dpdk:99999", b], 2, "port id out of range"),
        (vec!["run", "dpdk:net_af_packet0,iface=nope0", b], 2, "nope0"),
        (vec!["run", "dpdk:net_bogus0", b], 1, "check the driver name"),
        (vec!["run", "dpdk:net_af_packet0,iface=pa,qpairs=65", b], 1, "qpairs=65: accepted: 1 to 64"),
        (
            vec!["run", "dpdk:net_af_packet0,iface=pa", "dpdk:0", "--eal", "--no-huge --no-pci"],
            1,
            "the device the other port opened",
        ),
        (vec!["run", "dpdk:net_af_packet0,iface=pa", b, "--eal", "-l 5"], 1, "invalid core list"),
        (vec!["run", "dpdk:net_af_xdp0,iface=pb", b], 2, "both ports are pb"),
        (vec!["run", "dpdk:net_af_packet0,iface=pa", b, "--eal", "--bogus-option"], 1, "unrecognized option"),
        (vec!["run", "dpdk:net_af_packet0,iface=pa", b, "--eal", "-m 'x'"], 2, "quotes"),
        (vec!["run", "dpdk:net_af_packet0,iface=pa", b, "--eal", "--help"], 2, "dpdk-testpmd --help"),
        (vec!["run", "dpdk:0000:99:00.0", b, "--eal", "--no-huge"], 1, "dpdk-devbind"),
        (vec!["run", "dpdk:0000:99:00.0", b], 1, "hugepages"),
    ] {
        let mut cmd = vec!["netns", "exec", t.mid.as_str(), PATHEM];
        cmd.extend_from_slice(&args);
        let out = Command::new("ip").args(&cmd).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: nothing on stdout: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// ping's summary, min/avg/max/mdev in ms.
fn ping_rtts(out: &Output) -> Vec<f64> {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("min/avg")).unwrap_or_else(|| panic!("no rtt in {text}"));
    line.split('=')
        .nth(1)
        .unwrap()
        .trim()
        .split('/')
        .map(|x| x.trim_end_matches(" ms").parse().unwrap_or(0.0))
        .collect()
}

/// Ping's RTT (avg, max in ms) from gen to sink while iperf3 sends TCP (CUBIC) from gen to
/// sink with `streams` flows for 7 s; and each flow's goodput in bit/s.
fn rtt_under_load(t: &Topo, streams: u32) -> ((f64, f64), Vec<f64>) {
    let bed = t.bed.as_ref().expect("the bed");
    let run = bed
        .iperf3_start(SINK_IP, &["-t", "7", "-C", "cubic", "-P", &streams.to_string()])
        .expect("iperf3 starts");
    // Let the flows fill what queue they can, then measure for 3 s.
    std::thread::sleep(Duration::from_secs(3));
    let out = t.exec(&t.gen, &["ping", "-n", "-q", "-c", "30", "-i", "0.1", "-W", "2", SINK_IP]);
    let nums = ping_rtts(&out);
    let v = run.wait().unwrap_or_else(|e| panic!("iperf3: {e}"));
    let flows = v["end"]["streams"]
        .as_array()
        .map(|s| s.iter().filter_map(|x| x["receiver"]["bits_per_second"].as_f64()).collect())
        .unwrap_or_default();
    ((nums[1], nums[2]), flows)
}

/// Bufferbloat and its cure: CUBIC through a 20 Mbit/s bottleneck with 10 ms each way. With a
/// 1000-frame drop-tail queue the flow fills what its window allows and ping's RTT grows past
/// five times the base; with CoDel, FQ-CoDel, PIE or DualPI2 it stays near 2 × 10 ms plus the
/// target. Two flows share FQ-CoDel fairly, and a running link switches from drop-tail to
/// CoDel through `ctl set`.
fn aqm_keeps_the_rtt_under_load_short() {
    let mut table = Vec::new();
    let mut rtt = std::collections::BTreeMap::new();
    for aqm in ["droptail", "codel", "fq-codel", "pie", "dualpi2"] {
        let mut t = Topo::new();
        let queue = if aqm == "droptail" { "1000pkt" } else { "10000pkt" };
        t.start_with(
            "afpacket",
            &["--rate", "20mbit", "--delay", "10ms", "--queue", queue, "--aqm", aqm, "--json"],
        );
        let ((avg, max), flows) = rtt_under_load(&t, 1);
        let s = t.stop_json();
        let a = &s["a_to_b"];
        table.push(format!(
            "{aqm:>9}: rtt avg {avg:6.1} ms max {max:6.1} ms, goodput {:5.1} Mbit/s, aqm_drop {} overlimit {} sojourn p50 {} us",
            flows.iter().sum::<f64>() / 1e6,
            a["dropped"]["aqm_drop"],
            a["dropped"]["overlimit"],
            a["sojourn"]["p50_ns"].as_u64().unwrap_or(0) / 1000
        ));
        let total: f64 = flows.iter().sum();
        assert!(total > 0.75 * 18.8e6, "{aqm}: goodput {total} through 20 Mbit/s");
        rtt.insert(aqm, avg);
    }
    println!("RTT under load, CUBIC through 20 Mbit/s, 10 ms each way:");
    for l in &table {
        println!("  {l}");
    }
    // The flow's window, not the 1000 frames (615 ms at 20 Mbit/s), bounds drop-tail's queue
    // in these 7 s (CI once read 149.5 ms). Five times the 20 ms base RTT is bloat however
    // far the window has grown.
    assert!(rtt["droptail"] > 100.0, "drop-tail's queue should bloat: {rtt:?}");
    for (aqm, bound) in [("codel", 45.0), ("fq-codel", 45.0), ("pie", 60.0), ("dualpi2", 60.0)] {
        assert!(rtt[aqm] < bound, "{aqm}: {rtt:?}");
        assert!(rtt[aqm] * 3.0 < rtt["droptail"], "{aqm}: {rtt:?}");
    }
    // Two flows through FQ-CoDel get a fair share each.
    let mut t = Topo::new();
    t.start_with("afpacket", &["--rate", "20mbit", "--delay", "10ms", "--aqm", "fq-codel"]);
    let (_, flows) = rtt_under_load(&t, 2);
    t.stop();
    assert_eq!(flows.len(), 2, "{flows:?}");
    let (a, b) = (flows[0], flows[1]);
    let jain = (a + b).powi(2) / (2.0 * (a * a + b * b));
    println!("  fq-codel, two flows: {:.1} and {:.1} Mbit/s, Jain index {jain:.3}", a / 1e6, b / 1e6);
    assert!(jain > 0.95, "two flows through fq-codel: {flows:?}");
    // A running link changes discipline under load, keeping its frames.
    let mut t = Topo::new();
    let name = format!("t{}q{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    t.start_with(
        "afpacket",
        &["--rate", "20mbit", "--delay", "10ms", "--queue", "1000pkt", "--name", &name, "--json"],
    );
    let set_name = name.clone();
    let changer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(2));
        let out = ctl(&[&set_name, "set", "--rate", "20mbit", "--delay", "10ms", "--aqm", "codel"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    });
    let ((avg, _), _) = rtt_under_load(&t, 1);
    changer.join().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&ctl(&[&name, "show", "--json"]).stdout).unwrap();
    assert!(v["a_to_b"]["path"].as_str().unwrap().contains("aqm codel"), "{v}");
    let s = t.stop_json();
    let a = &s["a_to_b"];
    println!("  drop-tail switched to codel after 2 s: rtt avg {avg:.1} ms");
    assert!(avg < 60.0, "after ctl set --aqm codel: rtt {avg}");
    assert!(a["dropped"]["aqm_drop"].as_u64().unwrap() > 0, "{a}");
    let balance = a["rx_packets"].as_u64().unwrap() + a["duplicated"].as_u64().unwrap();
    let dropped: u64 = a["dropped"].as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
    assert_eq!(
        balance,
        a["tx_packets"].as_u64().unwrap() + dropped + a["in_flight"].as_u64().unwrap(),
        "{a}"
    );
}

/// A namespace of the test's own, removed on drop.
struct Netns(String);

impl Netns {
    fn new(prefix: &str) -> Netns {
        let name = format!("{prefix}{}x{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        must(&["ip", "netns", "add", &name]);
        Netns(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.0]);
    }
}

/// Source MAC of the frames the segmentation test builds (told apart from the kernel's own
/// IPv6 neighbour discovery on the same link).
const GSO_SRC: [u8; 6] = [0x02, 0x9a, 0, 0, 0, 1];

/// A super-frame as a sender's stack hands it down: Ethernet (a VLAN tag if asked), IPv4 or
/// IPv6, TCP (flags `flags`, with a timestamp option) or UDP, `payload` bytes, and the
/// transport checksum partial (the field holds the pseudo-header sum, length included).
fn super_frame(v6: bool, udp: bool, vlan: bool, payload: usize, flags: u8) -> Vec<u8> {
    let mut f = vec![0x02, 0x9a, 0, 0, 0, 2];
    f.extend_from_slice(&GSO_SRC);
    if vlan {
        f.extend_from_slice(&[0x81, 0x00, 0x20, 0x07]);
    }
    f.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
    let l4_len = if udp { 8 } else { 32 } + payload;
    let proto = if udp { 17u8 } else { 6 };
    let l3 = f.len();
    if v6 {
        f.extend_from_slice(&[0x60, 0x0a, 0xbc, 0xde]);
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&[proto, 64]);
        f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    } else {
        f.extend_from_slice(&[0x45, 0x02]);
        f.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
        f.extend_from_slice(&[0xff, 0xf0, 0x40, 0, 64, proto, 0, 0, 10, 9, 0, 1, 10, 9, 0, 2]);
        let mut s: u32 = f[l3..l3 + 20].chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        f[l3 + 10..l3 + 12].copy_from_slice(&(!(s as u16)).to_be_bytes());
    }
    let l4 = f.len();
    if udp {
        f.extend_from_slice(&[0x9c, 0x41, 0x13, 0x8a]);
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
    } else {
        f.extend_from_slice(&[
            0x9c, 0x40, 0x14, 0x51, 0xff, 0xff, 0xfa, 0x00, 0, 0, 0x10, 1, 0x80, flags, 0x01, 0xf5,
        ]);
        f.extend_from_slice(&[0, 0, 0, 0, 1, 1, 8, 10, 0, 1, 2, 3, 4, 5, 6, 7]);
    }
    f.extend((0..payload).map(|i| (i * 31 + 7) as u8));
    // The pseudo-header sum, as the stack leaves it for the hardware.
    let addrs = if v6 { &f[l3 + 8..l3 + 40] } else { &f[l3 + 12..l3 + 20] };
    let mut s: u64 = addrs.chunks(2).map(|c| u64::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    s += u64::from(proto) + l4_len as u64;
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    let at = l4 + if udp { 6 } else { 16 };
    f[at..at + 2].copy_from_slice(&(s as u16).to_be_bytes());
    f
}

/// The virtio-net header a stack gives such a frame.
fn vnet_header(frame: &[u8], gso_type: u8, gso_size: u16, udp: bool) -> [u8; 10] {
    let vlan = frame[12] == 0x81;
    let l3 = if vlan { 18 } else { 14 };
    let l4 = l3 + if frame[l3 - 2] == 0x86 { 40 } else { 20 };
    let hdr_len = l4 + if udp { 8 } else { 32 };
    let mut h = [0u8; 10];
    h[0] = 1; // VIRTIO_NET_HDR_F_NEEDS_CSUM
    h[1] = gso_type;
    h[2..4].copy_from_slice(&(hdr_len as u16).to_ne_bytes());
    h[4..6].copy_from_slice(&gso_size.to_ne_bytes());
    h[6..8].copy_from_slice(&(l4 as u16).to_ne_bytes());
    h[8..10].copy_from_slice(&(if udp { 6u16 } else { 16 }).to_ne_bytes());
    h
}

/// The wire frames pathem makes of `frame` sent behind virtio-net header `hdr`: its segments,
/// the frame with its checksum completed, or the frame as it is.
fn wire_frames(hdr: &[u8; 10], frame: &[u8]) -> Vec<Vec<u8>> {
    let mut ours = Vec::new();
    let mut buf = frame.to_vec();
    match pathem_io::offload::vnet_request(hdr).unwrap() {
        pathem_io::offload::VnetRequest::Segment(gso) => {
            pathem_io::offload::segment(&mut buf, gso, |s| ours.push(s.to_vec())).unwrap();
        }
        pathem_io::offload::VnetRequest::Checksum { start, offset } => {
            pathem_io::offload::complete_at(&mut buf, start.into(), offset.into()).unwrap();
            ours.push(buf);
        }
        pathem_io::offload::VnetRequest::None => ours.push(buf),
    }
    ours
}

/// VLAN-tagged frames from a local sender cross every port with their tags, byte for byte:
/// a plain frame, one with a checksum left to the hardware, and a super-frame longer than an
/// AF_PACKET ring slot (read whole from the socket, cut here). The veth keeps the tag out of
/// the frame on its way to a packet socket; the port puts it back.
fn tagged_frames_cross_every_port_whole() {
    for kind in kinds() {
        let mut t = Topo::new();
        t.start_with(kind, &["--json"]);
        let cases: Vec<(&str, [u8; 10], Vec<u8>)> = {
            // With its checksum complete: a partial one looks the same without its header.
            let udp = super_frame(false, true, true, 200, 0);
            let plain = wire_frames(&vnet_header(&udp, 0, 0, true), &udp).remove(0);
            let partial = super_frame(true, true, true, 900, 0);
            let sup = super_frame(false, false, true, 6000, 0x18);
            vec![
                ("plain", [0; 10], plain),
                ("partial checksum", vnet_header(&partial, 0, 0, true), partial),
                ("super-frame", vnet_header(&sup, 1, 1448, false), sup),
            ]
        };
        let expected: Vec<Vec<u8>> = cases.iter().flat_map(|(_, h, f)| wire_frames(h, f)).collect();
        let sink = t.sink.clone();
        let got = in_ns(&sink, move || {
            let rx = pathem_io::afpacket::RawSocket::open("s0", false).expect("s0");
            let mut got = Vec::new();
            let until = std::time::Instant::now() + Duration::from_secs(2);
            while std::time::Instant::now() < until {
                if let Some(f) = rx.recv(Duration::from_millis(100)) {
                    if f.get(6..12) == Some(&GSO_SRC[..]) {
                        got.push(f);
                    }
                }
            }
            got
        });
        std::thread::sleep(Duration::from_millis(300));
        let gen = t.gen.clone();
        in_ns(&gen, move || {
            let tx = pathem_io::afpacket::RawSocket::open("g0", true).expect("g0");
            for (name, hdr, frame) in cases {
                tx.send(&[&hdr[..], &frame].concat()).unwrap_or_else(|e| panic!("{name}: send: {e}"));
            }
        })
        .join()
        .unwrap();
        let got = got.join().expect("the sink");
        let s = t.stop_json();
        println!("  {kind}: {} of {} tagged wire frames arrived byte for byte", got.len(), expected.len());
        assert_eq!(got.len(), expected.len(), "{kind}: {}", s["a_to_b"]);
        for (k, (a, b)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(hex(a), hex(b), "{kind}: frame {k}");
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn segmentation_matches_the_kernels() {
    // The reference: a veth whose segmentation and checksum offloads are off, so the kernel
    // cuts super-frames and completes checksums in software before they reach the peer
    // (this test turns them off on purpose: that is what it measures against).
    let ns = Netns::new("pk");
    must(&["ip", "-n", &ns.0, "link", "add", "k0", "type", "veth", "peer", "name", "k1"]);
    must(&["ip", "netns", "exec", &ns.0, "ethtool", "-K", "k0", "tso", "off", "gso", "off", "tx", "off"]);
    must(&["ip", "-n", &ns.0, "link", "set", "k0", "up"]);
    must(&["ip", "-n", &ns.0, "link", "set", "k1", "up"]);
    // (name, IPv6, UDP, VLAN, payload, TCP flags, gso_type, gso_size, with a checksum only)
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, bool, bool, bool, usize, u8, u8, u16)> = vec![
        ("tcp4 3 segments, last short, FIN PSH CWR", false, false, false, 3000, 0x80 | 0x19, 1, 1448),
        ("tcp4 exact multiple", false, false, false, 2896, 0x10, 1, 1448),
        ("tcp4 vlan", false, false, true, 4000, 0x18, 1, 1448),
        ("tcp6 ECN flag", true, false, false, 5000, 0x80 | 0x18, 4 | 0x80, 1428),
        ("tcp6 vlan", true, false, true, 2500, 0x18, 4, 1428),
        ("udp4 segmentation", false, true, false, 3000, 0, 5, 1472),
        ("udp6 segmentation", true, true, false, 2000, 0, 5, 1000),
        ("tcp4 partial checksum only", false, false, false, 700, 0x18, 0, 0),
        ("udp6 partial checksum only", true, true, true, 900, 0, 0, 0),
    ];
    let results = in_ns(&ns.0, move || {
        let tx = pathem_io::afpacket::RawSocket::open("k0", true).expect("k0");
        let rx = pathem_io::afpacket::RawSocket::open("k1", false).expect("k1");
        let mut out = Vec::new();
        for (name, v6, udp, vlan, payload, flags, gso_type, gso_size) in cases {
            let frame = super_frame(v6, udp, vlan, payload, flags);
            let hdr = vnet_header(&frame, gso_type, gso_size, udp);
            tx.send(&[&hdr[..], &frame].concat()).unwrap_or_else(|e| panic!("{name}: send: {e}"));
            let mut kernel = Vec::new();
            while let Some(f) = rx.recv(Duration::from_millis(300)) {
                if f.get(6..12) == Some(&GSO_SRC[..]) {
                    kernel.push(f);
                }
            }
            out.push((name, hdr, frame, kernel));
        }
        out
    })
    .join()
    .expect("the capture");
    let mut fixture = String::from("# pathem's segmentation reference, written by the live test\n");
    fixture += &format!("# segmentation_matches_the_kernels on Linux {}\n", must(&["uname", "-r"]).trim());
    for (name, hdr, frame, kernel) in &results {
        let ours = wire_frames(hdr, frame);
        assert!(!kernel.is_empty(), "{name}: the kernel sent nothing");
        assert_eq!(ours.len(), kernel.len(), "{name}: segments");
        for (k, (a, b)) in ours.iter().zip(kernel).enumerate() {
            assert_eq!(hex(a), hex(b), "{name}: segment {k} differs from the kernel's");
        }
        println!("  {name}: {} segments, byte for byte the kernel's", kernel.len());
        fixture += &format!("case {name}\nvnet {}\nin {}\n", hex(hdr), hex(frame));
        for k in kernel {
            fixture += &format!("out {}\n", hex(k));
        }
    }
    if let Ok(path) = std::env::var("PATHEM_WRITE_GSO_FIXTURE") {
        std::fs::write(&path, fixture).expect("the fixture");
    }
}

/// The sink's IPv6 address on s0 (the generator's is fd00:201::1).
const SINK_IP6: &str = "fd00:201::2";

/// TCP goodput of an iperf3 report, in Mbit/s.
fn mbps(report: &serde_json::Value) -> f64 {
    report["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6
}

/// Every port kind between ends with the kernel's default offloads (checksum offload, TSO and
/// GSO on, MTU 1500, IPv6 on), as a user's containers have them: TCP over IPv4 and IPv6
/// through a free path, UDP whose checksums the sender left partial arriving complete (checked
/// in a capture on the receiver), and TCP through a 100 Mbit/s link with a queue of 20 wire
/// frames with ping alongside. Nothing is refused by a transmitting port.
fn frames_are_taken_as_the_kernel_hands_them() {
    let mut all = kinds();
    if cfg!(feature = "dpdk") {
        all.push("dpdk-xdp");
    }
    for kind in all {
        let mut t = Topo::new();
        must(&["ip", "-n", &t.gen, "addr", "add", "fd00:201::1/64", "dev", "g0", "nodad"]);
        must(&["ip", "-n", &t.sink, "addr", "add", &format!("{SINK_IP6}/64"), "dev", "s0", "nodad"]);
        let offloads = String::from_utf8_lossy(&t.exec(&t.gen, &["ethtool", "-k", "g0"]).stdout).into_owned();
        for feature in
            ["tx-checksumming: on", "tcp-segmentation-offload: on", "generic-segmentation-offload: on"]
        {
            assert!(offloads.contains(feature), "the bed keeps the kernel's {feature}");
        }

        t.start_with(kind, &["--json"]);
        let v4 = mbps(&t.iperf(&["-t", "3"], false));
        let v6 = mbps(&t.iperf_to(SINK_IP6, &["-t", "3"], false));
        // UDP with partial checksums (the sender's offload is on), captured on the receiver.
        let dir = tempfile::tempdir().unwrap();
        let cap = dir.path().join("udp.pcap");
        let cap_s = cap.to_str().unwrap().to_string();
        let mut dump = Command::new("ip")
            .args([
                "netns", "exec", &t.sink, "tcpdump", "-i", "s0", "-Q", "in", "-w", &cap_s, "-U", "-n", "udp",
                "and", "port", "5201",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tcpdump");
        std::thread::sleep(Duration::from_millis(700));
        let udp = t.iperf(&["-u", "-b", "20M", "-l", "1200", "-t", "2"], false);
        std::thread::sleep(Duration::from_millis(300));
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(dump.id() as i32), nix::sys::signal::SIGINT);
        let _ = dump.wait();
        let s = t.stop_json();
        let (frames, bad) = udp_checksums(&cap);
        let a = &s["a_to_b"];
        println!(
            "  {kind}: TCP {v4:.0} Mbit/s (IPv6 {v6:.0}), UDP {frames} frames captured, {bad} bad checksums; \
             {} super-frames cut into {}, {} checksums completed",
            a["offload"]["gso_frames"], a["offload"]["gso_segments"], a["offload"]["csum_completed"]
        );
        assert!(udp["end"]["sum"]["packets"].as_u64().unwrap_or(0) > 0, "{kind}: iperf3 -u sent nothing");
        assert!(frames > 1000 && bad == 0, "{kind}: {bad} of {frames} UDP frames with a bad checksum");
        assert!(v4 >= 200.0 && v6 >= 200.0, "{kind}: TCP {v4:.0} Mbit/s, IPv6 {v6:.0} Mbit/s");
        for dir in ["a_to_b", "b_to_a"] {
            let e = &s[dir]["port_tx_errors"];
            let refused: u64 = e.as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
            assert_eq!(refused, 0, "{kind} {dir}: frames refused: {e}");
            assert_eq!(s[dir]["dropped"]["offload"], 0, "{kind} {dir}");
            let d = &s[dir];
            let dropped: u64 = d["dropped"].as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
            assert_eq!(
                d["rx_packets"].as_u64().unwrap() + d["duplicated"].as_u64().unwrap(),
                d["tx_packets"].as_u64().unwrap() + dropped + refused + d["in_flight"].as_u64().unwrap(),
                "{kind} {dir}: {d}"
            );
        }

        // A queue of 20 wire frames, not of 20 super-frames.
        t.start_with(kind, &["--a-to-b", "--rate 100mbit --queue 20pkt", "--json"]);
        let gen = t.gen.clone();
        let pinger = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            let out =
                sh(&["ip", "netns", "exec", &gen, "ping", "-n", "-q", "-c", "20", "-i", "0.1", SINK_IP]);
            ping_rtts(&out)
        });
        let shaped = mbps(&t.iperf(&["-t", "5"], false));
        let rtt = pinger.join().unwrap();
        let s = t.stop_json();
        println!(
            "  {kind}: through 100mbit/20pkt TCP {shaped:.1} Mbit/s, ping avg {:.2} max {:.2} ms, queue drops {}",
            rtt[1], rtt[2], s["a_to_b"]["dropped"]["queue"]
        );
        // The shaper is a hard ceiling; the floor catches a queue that starves TCP (counted in
        // super-frames' bytes, or cutting them) or frames held until later traffic, which read
        // well under half the link. How close to the link TCP comes is a timing and on this
        // shared host reads 78-94 Mbit/s for the same code, so it is printed, not asserted.
        assert!((60.0..=100.0).contains(&shaped), "{kind}: TCP {shaped:.1} Mbit/s through 100mbit/20pkt");
        // Twenty wire frames queue 2.4 ms at 100 Mbit/s, twenty super-frames 100 ms: the mean
        // of the 20 pings tells them apart, where the largest caught a host's one 15 ms pause
        // (CI, 2026-11-27: mean 2.15 ms, max 14.8).
        assert!(rtt[1] < 12.0, "{kind}: ping mean {} ms (max {}) alongside", rtt[1], rtt[2]);
    }
}

/// UDP frames in a capture, and how many of them carry a checksum that does not verify.
fn udp_checksums(path: &std::path::Path) -> (u64, u64) {
    let file = std::fs::File::open(path).expect("the capture");
    let mut reader = pcap_file::pcap::PcapReader::new(file).expect("a pcap capture");
    let (mut frames, mut bad) = (0, 0);
    while let Some(p) = reader.next_packet() {
        let p = p.expect("a whole capture");
        if let Some(ok) = pathem_io::offload::checksum_ok(&p.data) {
            frames += 1;
            bad += u64::from(!ok);
        }
    }
    (frames, bad)
}

/// A running `pathem attach`, killed if dropped (a failed test leaves nothing attached).
struct Attach(Child);

impl Drop for Attach {
    fn drop(&mut self) {
        let _ = stop_or_kill(&mut self.0);
    }
}

/// `pathem attach IF ARGS` in namespace `ns` (the machine's own when `None`), started and
/// waited for until it has attached; its stderr lines are kept in the returned list.
fn attach(ns: Option<&str>, iface: &str, args: &[&str]) -> (Attach, Arc<Mutex<Vec<String>>>) {
    attach_with(ns, iface, args, Stdio::null())
}

/// [`attach`], its standard output to `stdout`.
fn attach_with(
    ns: Option<&str>,
    iface: &str,
    args: &[&str],
    stdout: Stdio,
) -> (Attach, Arc<Mutex<Vec<String>>>) {
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, PATHEM]);
            c
        }
        None => Command::new(PATHEM),
    };
    cmd.args(["attach", iface]).args(args);
    let mut child = cmd.stdout(stdout).stderr(Stdio::piped()).spawn().expect("pathem starts");
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let lines = Arc::new(Mutex::new(Vec::new()));
    loop {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(l) if l.contains("control:") => break,
            Ok(l) => lines.lock().unwrap().push(l),
            Err(_) => {
                let _ = child.kill();
                panic!("pathem attach did not start: {:?}", lines.lock().unwrap());
            }
        }
    }
    let keep = lines.clone();
    std::thread::spawn(move || {
        while let Ok(l) = rx.recv() {
            keep.lock().unwrap().push(l);
        }
    });
    (Attach(child), lines)
}

/// Stops a pathem (run or attach) with SIGINT and returns its exit status; kills it and fails
/// the test if it has not stopped within 5 s.
fn interrupt(child: &mut Child) -> std::process::ExitStatus {
    stop_or_kill(child).expect("pathem stops within 5 s of SIGINT")
}

/// Ping from `ns` to `to`: (min, avg) in ms.
fn ping_in(ns: &str, to: &str, count: u32) -> (f64, f64) {
    let c = count.to_string();
    let out = sh(&["ip", "netns", "exec", ns, "ping", "-n", "-q", "-c", &c, "-i", "0.05", "-W", "2", to]);
    let nums = ping_rtts(&out);
    (nums[0], nums[1])
}

/// What pathem makes on an interface it attaches to: its TAP devices and tcx programs.
fn attach_leftovers(ns: &str, iface: &str) -> (String, (u32, u32)) {
    let links = String::from_utf8_lossy(&sh(&["ip", "-n", ns, "-o", "link"]).stdout).into_owned();
    let taps: Vec<&str> = links.lines().filter(|l| l.contains("pthm")).collect();
    let iface = iface.to_string();
    let progs =
        in_ns(ns, move || pathem_io::attach::tcx_programs(&iface).expect("tcx query")).join().unwrap();
    (taps.join("\n"), progs)
}

fn attach_delays_each_direction_and_tcp_keeps_up() {
    let id = format!("pt{}x{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let bed = Bed::direct(&id).expect("the test bed");
    let (gen, sink) = (bed.gen.clone(), bed.sink.clone());
    bed.exec(&sink, &["ip", "addr", "add", "fd00:201::2/64", "dev", "s0", "nodad"]).unwrap();
    bed.exec(&gen, &["ip", "addr", "add", "fd00:201::1/64", "dev", "g0", "nodad"]).unwrap();
    bed.warm_up();
    bed.exec(&gen, &["ping", "-c", "1", "-W", "2", "fd00:201::2"]).unwrap();
    let name = format!("t{}a{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));

    // Egress alone, as tc's root netem: IPv4 and IPv6 both take the delay.
    // In NetEm's words, as the README's first example.
    let (mut child, lines) = attach(
        Some(&gen),
        "g0",
        &["--netem", "delay 40ms", "--name", &name, "--metrics", "9477", "--buffer", "8MiB"],
    );
    // The delay line is said, and `--buffer` sizes it (a config file's `buffer` too).
    assert!(
        lines.lock().unwrap().iter().any(|l| l.ends_with("delay line: 8388608 B (--buffer)")),
        "{:?}",
        lines.lock().unwrap()
    );
    let (min, avg) = ping_in(&gen, SINK_IP, 20);
    assert!(min >= 40.0 && avg <= 42.0, "egress --netem 'delay 40ms': rtt min {min} avg {avg}");
    // Metrics as for a run: egress is a_to_b.
    let metrics = scrape(&gen, 9477, "/metrics");
    let sent = metrics
        .lines()
        .find_map(|l| l.strip_prefix("pathem_tx_frames_total{direction=\"a_to_b\"} "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(sent.is_some_and(|n| n >= 20), "egress frames in the metrics: {sent:?}");
    let (min, avg) = ping_in(&gen, "fd00:201::2", 10);
    assert!(min >= 40.0 && avg <= 42.0, "IPv6: rtt min {min} avg {avg}");
    // ctl steers it; a direction not attached is refused.
    let out = ctl(&[&name, "set", "--delay", "20ms"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (min, avg) = ping_in(&gen, SINK_IP, 10);
    assert!(min >= 20.0 && avg <= 22.0, "after ctl set --delay 20ms: rtt min {min} avg {avg}");
    let out = ctl(&[&name, "set", "--ingress", "--delay 5ms"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("not attached"), "{err}");
    // The peer sees the frames with the kernel's wire view: tcpdump on g0 still works.
    let dump = std::thread::spawn({
        let gen = gen.clone();
        move || sh(&["timeout", "5", "ip", "netns", "exec", &gen, "tcpdump", "-ni", "g0", "-c", "2", "icmp"])
    });
    std::thread::sleep(Duration::from_millis(700));
    ping_in(&gen, SINK_IP, 2);
    let dump = dump.join().unwrap();
    assert!(String::from_utf8_lossy(&dump.stdout).contains("ICMP echo"), "tcpdump sees the traffic");
    assert!(interrupt(&mut child.0).success(), "exit 0 after SIGINT");
    assert_eq!(attach_leftovers(&gen, "g0"), (String::new(), (0, 0)), "SIGINT leaves nothing");
    let (min, _) = ping_in(&gen, SINK_IP, 5);
    assert!(min < 5.0, "the plain link after SIGINT: {min} ms");

    // Ingress adds its own delay.
    let (mut child, _) = attach(Some(&gen), "g0", &["--delay", "40ms", "--ingress", "--netem 'delay 10ms'"]);
    let (min, avg) = ping_in(&gen, SINK_IP, 20);
    // The minimum shows the two delays add; the mean only that nothing adds more (a loaded
    // machine spreads it by a few milliseconds: CI read 52.2 once).
    assert!(min >= 50.0 && avg <= 55.0, "egress 40 ms + ingress 10 ms: rtt min {min} avg {avg}");
    assert!(interrupt(&mut child.0).success());

    // TCP through 100 Mbit/s and 5 ms each way keeps up, both ways.
    let (mut child, _) = attach(
        Some(&gen),
        "g0",
        &["--rate", "100mbit", "--delay", "5ms", "--ingress", "--rate 100mbit --delay 5ms"],
    );
    for reverse in [false, true] {
        let args: &[&str] = if reverse { &["-t", "5", "-R"] } else { &["-t", "5"] };
        let report = bed.iperf3(SINK_IP, args).expect("iperf3");
        let mbit = mbps(&report);
        println!("  attach TCP {}: {mbit:.1} Mbit/s", if reverse { "ingress" } else { "egress" });
        // A ceiling the shaper holds and a floor well clear of the host's noise (86-94 Mbit/s
        // read for the same code): a stall, or frames lost between the delay line and the
        // port, reads far lower.
        assert!(
            (60.0..=100.0).contains(&mbit),
            "TCP through 100 Mbit/s (reverse {reverse}): {mbit:.1} Mbit/s"
        );
    }
    assert!(interrupt(&mut child.0).success());
}

/// Frames steered into attach's TAP devices and not read yet when it stops are the path's,
/// counted, and each one counted as sent arrives; frames the host itself sends on a TAP
/// device are not forwarded; a TAP device deleted or set down under a running attach ends it,
/// one line and a non-zero exit, the interface given back.
fn attach_counts_what_its_taps_held_and_ends_when_one_is_deleted() {
    use nix::sys::signal::{kill, Signal};
    let id = format!("pt{}x{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let bed = Bed::direct(&id).expect("the test bed");
    let gen = bed.gen.clone();
    bed.warm_up();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("final.json");
    let file = std::fs::File::create(&out).unwrap();
    // A packet ring of 4 MiB holds 5 461 frames: the 2 000 held below fit (1 MiB holds 1 365).
    let args = ["--delay", "1ms", "--ingress", "--delay 1ms", "--rx-buffer", "4MiB", "--json"];
    let (mut running, lines) = attach_with(Some(&gen), "g0", &args, file.into());
    let pid = nix::unistd::Pid::from_raw(running.0.id() as i32);
    // The host sends a frame on the egress TAP device: read from its descriptor at a look,
    // not forwarded.
    let tap = attach_tap(&gen, "pthme");
    in_ns(&gen, move || {
        use pathem_io::TxPort;
        let (_, mac) = pathem_io::iface::hwaddr(&tap).expect("the tap's address");
        let mut frame = vec![0xffu8; 6];
        frame.extend(mac);
        frame.extend([0x88, 0xb5]);
        frame.resize(60, 0);
        let mut tx = pathem_io::afpacket::AfPacketTx::open(&tap, 1518).expect("a packet socket on the tap");
        assert!(tx.send(pathem_model::Nanos::ZERO, 60, &frame));
        tx.flush().unwrap();
    })
    .join()
    .unwrap();
    // Stopped, it reads nothing: 2 000 datagrams each way wait in the TAP devices' rings (more than
    // the few bursts it reads before it sees the stop). Stopped again right after it goes on,
    // it reads them all: each is sent, or still in the delay line (its 1 ms not yet over), and
    // each sent one arrives at its receiver's stack (a closed port there, so its UDP
    // `NoPorts` counts it), the ones sent back through the ingress device too.
    const HELD: u64 = 2_000;
    let no_ports = |ns: &str| -> u64 {
        let out = sh(&["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
        let (names, values) = (udp.next().expect("Udp names"), udp.next().expect("Udp values"));
        let i = names.split_whitespace().position(|w| w == "NoPorts").expect("NoPorts");
        values.split_whitespace().nth(i).and_then(|v| v.parse().ok()).expect("a count")
    };
    let sink = bed.sink.clone();
    let before = [no_ports(&sink), no_ports(&gen)];
    // Frames reaching gen's stack with pathem's mark (the interface's programs clear it, also
    // at stop, when they give way to one that only clears it).
    let marked =
        "add table ip pthmark; add chain ip pthmark c { type filter hook prerouting priority -300; }; \
                  add rule ip pthmark c meta mark 0x70617468 counter";
    let made = bed.exec(&gen, &["nft", marked]).unwrap();
    assert!(made.status.success(), "nft: {}", String::from_utf8_lossy(&made.stderr));
    kill(pid, Signal::SIGSTOP).unwrap();
    let blast = |to: &str| format!("for i in $(seq {HELD}); do echo x > /dev/udp/{to}/9; done");
    bed.exec(&gen, &["bash", "-c", &blast(SINK_IP)]).unwrap();
    bed.exec(&sink, &["bash", "-c", &blast(GEN_IP)]).unwrap();
    kill(pid, Signal::SIGINT).unwrap();
    kill(pid, Signal::SIGCONT).unwrap();
    assert!(interrupt(&mut running.0).success(), "{:?}", lines.lock().unwrap());
    let arrived = [no_ports(&sink) - before[0], no_ports(&gen) - before[1]];
    let last = std::fs::read_to_string(&out).unwrap().lines().last().unwrap_or("").to_string();
    let json: serde_json::Value = serde_json::from_str(&last).expect("the final counters");
    for (d, arrived) in ["a_to_b", "b_to_a"].into_iter().zip(arrived) {
        let n = |k: &str| json[d][k].as_u64().unwrap();
        let (rx, tx, in_flight) = (n("rx_packets"), n("tx_packets"), n("in_flight"));
        assert!(rx >= HELD && n("port_rx_dropped") == 0, "{d}: {HELD} datagrams held at stop: {last}");
        assert_eq!(rx, tx + in_flight, "{d}: each frame read sent or in flight: {last}");
        assert!(tx >= HELD / 10, "{d}: sent (the last read still in their 1 ms): {last}");
        // The frames sent may include a few of the hosts' own (ARP, neighbour discovery)
        // that were waiting too; every datagram among them arrives.
        assert!(arrived <= tx && arrived + 8 >= tx.min(HELD), "{d}: {arrived} arrived of those sent: {last}");
    }
    assert!(json.get("taps_unread").is_none(), "{last}");
    let rules = sh(&["ip", "netns", "exec", &gen, "nft", "list", "table", "ip", "pthmark"]);
    let rules = String::from_utf8_lossy(&rules.stdout).into_owned();
    assert!(rules.contains("counter packets 0 "), "frames reached the stack with pathem's mark: {rules}");
    let foreign: u64 = ["a_to_b", "b_to_a"].iter().filter_map(|d| json[d]["port_rx_foreign"].as_u64()).sum();
    assert_eq!(foreign, 1, "the host's own frame, read and not forwarded: {last}");

    // A ring too small for what waits (64 KiB: 85 frames): the kernel drops the rest at the
    // port, and each datagram is counted, read or dropped.
    let out = dir.path().join("small.json");
    let file = std::fs::File::create(&out).unwrap();
    let args = ["--delay", "1ms", "--rx-buffer", "64KiB", "--json"];
    let (mut running, lines) = attach_with(Some(&gen), "g0", &args, file.into());
    let pid = nix::unistd::Pid::from_raw(running.0.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    bed.exec(&gen, &["bash", "-c", &blast(SINK_IP)]).unwrap();
    kill(pid, Signal::SIGINT).unwrap();
    kill(pid, Signal::SIGCONT).unwrap();
    assert!(interrupt(&mut running.0).success(), "{:?}", lines.lock().unwrap());
    let last = std::fs::read_to_string(&out).unwrap().lines().last().unwrap_or("").to_string();
    let json: serde_json::Value = serde_json::from_str(&last).expect("the final counters");
    let n = |k: &str| json["a_to_b"][k].as_u64().unwrap();
    let (rx, dropped) = (n("rx_packets"), n("port_rx_dropped"));
    assert!(rx + dropped >= HELD && dropped >= HELD / 2, "each datagram read or dropped at the port: {last}");
    assert_eq!(rx, n("tx_packets") + n("in_flight"), "each frame read sent or in flight: {last}");

    // The ingress TAP device deleted under it.
    let (mut running, lines) = attach(Some(&gen), "g0", &["--delay", "1ms", "--ingress", "--delay 1ms"]);
    bed.exec(&gen, &["ip", "link", "del", &attach_tap(&gen, "pthmi")]).unwrap();
    ends_given_back(&mut running, &lines, &gen, "was deleted");

    // The egress TAP device set down under it, and up again at once: the kernel dropped what
    // it steered there meanwhile, though every later look finds it up.
    let (mut running, lines) = attach(Some(&gen), "g0", &["--delay", "1ms"]);
    let tap = attach_tap(&gen, "pthme");
    let flip = format!("ip link set {tap} down && ip link set {tap} up");
    bed.exec(&gen, &["bash", "-c", &flip]).unwrap();
    ends_given_back(&mut running, &lines, &gen, "was set down");

    // The egress TAP device moved to another namespace: what the kernel steers to its index in
    // gen would be dropped there.
    let away = Netns::new("ptaway");
    let (mut running, lines) = attach(Some(&gen), "g0", &["--delay", "1ms"]);
    bed.exec(&gen, &["ip", "link", "set", &attach_tap(&gen, "pthme"), "netns", &away.0]).unwrap();
    ends_given_back(&mut running, &lines, &gen, "was moved to another network namespace");
}

/// The name of attach's TAP device in `ns` starting with `prefix` (`pthme`, `pthmi`).
fn attach_tap(ns: &str, prefix: &str) -> String {
    let links = String::from_utf8_lossy(&sh(&["ip", "-n", ns, "-o", "link"]).stdout).into_owned();
    let tap = links.split_whitespace().find(|w| w.starts_with(prefix)).expect("attach's tap");
    tap.trim_end_matches(':').to_string()
}

/// An attach on g0 in `gen` that must end by itself: exit 1 within 5 s, a line saying
/// `says`, nothing of it left, the plain link's RTT.
fn ends_given_back(running: &mut Attach, lines: &Mutex<Vec<String>>, gen: &str, says: &str) {
    let status = (0..100).find_map(|_| {
        std::thread::sleep(Duration::from_millis(50));
        running.0.try_wait().unwrap()
    });
    assert!(
        status.is_some_and(|s| s.code() == Some(1)),
        "ends, exit 1: {status:?} {:?}",
        lines.lock().unwrap()
    );
    // Its last line passes through the reading thread: waited for, not assumed there.
    let said = || lines.lock().unwrap().iter().any(|l| l.contains(says));
    for _ in 0..100 {
        if said() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(said(), "{:?}", lines.lock().unwrap());
    assert_eq!(attach_leftovers(gen, "g0"), (String::new(), (0, 0)), "nothing left");
    let (min, _) = ping_in(gen, SINK_IP, 3);
    assert!(min < 5.0, "the plain link: {min} ms");
    remove_stale_socket("g0");
}

fn attach_leaves_nothing_after_sigkill_and_refuses_what_it_cannot_do() {
    let id = format!("pt{}x{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let bed = Bed::direct(&id).expect("the test bed");
    let (gen, sink) = (bed.gen.clone(), bed.sink.clone());
    bed.warm_up();
    let (mut running, _) = attach(Some(&gen), "g0", &["--delay", "40ms", "--ingress", "--delay 10ms"]);
    let child = &mut running.0;
    let (min, _) = ping_in(&gen, SINK_IP, 5);
    assert!(min >= 50.0, "attached: {min} ms");
    let (taps, progs) = attach_leftovers(&gen, "g0");
    assert_eq!((taps.lines().count(), progs), (2, (1, 1)), "two taps, a program each way on g0: {taps}");
    // Refusals while it runs: a second attach names the first; bad input is one line, exit 2.
    for (args, says) in [
        (vec!["g0", "--delay", "1ms"], format!("already attached by pid {}", child.id())),
        (vec!["g0", "--ingress", "--delay 1ms"], "already attached".into()),
        (vec!["nope0"], "does not exist".into()),
        (vec!["lo"], "loopback".into()),
        (vec!["g0", "--mark", "0"], "--mark".into()),
        (vec!["g0", "--cores", "0,1,0,1"], "--cores".into()),
        (vec!["g0", "--rx-buffer", "1KiB"], "--rx-buffer 1024 is out of range".into()),
        (vec!["g0", "--ingress", "--delay x"], "ingress".into()),
    ] {
        let out =
            Command::new("ip").args(["netns", "exec", &gen, PATHEM, "attach"]).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(&says), "{args:?}: {err}");
    }
    // A run on the attached interface is refused while the attach lives, naming it.
    for cmd in [
        vec!["ip", "link", "add", "x0", "type", "veth", "peer", "name", "x1"],
        vec!["ip", "link", "set", "x0", "up"],
    ] {
        let out = Command::new("ip").args(["netns", "exec", &gen]).args(&cmd).output().unwrap();
        assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = Command::new("ip")
        .args(["netns", "exec", &gen, "timeout", "20", PATHEM, "run", "g0", "x0", "--duration", "1s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("is in use by another pathem (pid {})", child.id())), "{err}");
    // `--buffer` past its range, on an interface no one attached: one line, exit 2.
    let out = Command::new("ip")
        .args(["netns", "exec", &sink, PATHEM, "attach", "s0", "--delay", "1ms", "--buffer", "2TiB"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.trim_end().lines().count() == 1 && err.contains("--buffer"), "{err}");
    // SIGKILL: the kernel removes the taps and programs; the plain link works at once.
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGKILL);
    let _ = child.wait();
    let killed = std::time::Instant::now();
    let (min, _) = ping_in(&gen, SINK_IP, 3);
    assert!(min < 5.0 && killed.elapsed() < Duration::from_secs(1), "RTT back: {min} ms");
    let mut left = attach_leftovers(&gen, "g0");
    for _ in 0..20 {
        if left == (String::new(), (0, 0)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        left = attach_leftovers(&gen, "g0");
    }
    assert_eq!(left, (String::new(), (0, 0)), "nothing left after SIGKILL");
    remove_stale_socket("g0");
    // Two pathems may attach a direction each: they share the interface's claim.
    let (egr, ing) = (format!("{id}e"), format!("{id}i"));
    let (egress, _) = attach(Some(&gen), "g0", &["--delay", "40ms", "--name", &egr]);
    let (ingress, _) = attach(Some(&gen), "g0", &["--ingress", "--delay 10ms", "--name", &ing]);
    let (min, _) = ping_in(&gen, SINK_IP, 3);
    assert!(min >= 50.0, "40 ms out, 10 ms back: {min} ms");
    drop((egress, ingress));
    // Without privileges: one line, and nothing made.
    let out = Command::new("ip")
        .args(["netns", "exec", &gen, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        .args([
            "--inh-caps=-all",
            "--bounding-set=-all",
            PATHEM,
            "attach",
            "g0",
            "--delay",
            "1ms",
            "--name",
            "x",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.trim_end().lines().count() == 1, "unprivileged: {err}");
    assert!(err.contains("root") || err.contains("CAP_"), "unprivileged: {err}");

    let filters = sh(&["ip", "netns", "exec", &gen, "tc", "filter", "show", "dev", "g0", "ingress"]);
    assert!(filters.stdout.is_empty(), "no tc filter: {}", String::from_utf8_lossy(&filters.stdout));
}

/// The host end of a container's veth, in the machine's own namespace: attach there, the
/// container (a namespace this test makes) sees the delay.
fn attach_on_the_host_end_of_a_containers_veth() {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let (ns, host) =
        (format!("pt{}c{n}", std::process::id()), format!("pth{}h{n}", std::process::id() % 100_000));
    struct Cleanup(String, String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = sh(&["ip", "link", "del", &self.1]);
            let _ = sh(&["ip", "netns", "del", &self.0]);
        }
    }
    let _cleanup = Cleanup(ns.clone(), host.clone());
    must(&["ip", "netns", "add", &ns]);
    must(&["ip", "link", "add", &host, "type", "veth", "peer", "name", "eth0", "netns", &ns]);
    must(&["ip", "addr", "add", "10.203.0.1/30", "dev", &host]);
    must(&["ip", "link", "set", &host, "up"]);
    must(&["ip", "-n", &ns, "addr", "add", "10.203.0.2/30", "dev", "eth0"]);
    must(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
    let _ = sh(&["ping", "-c", "1", "-W", "2", "10.203.0.2"]);
    let (mut child, _) = attach(None, &host, &["--delay", "30ms"]);
    let out = sh(&["ip", "netns", "exec", &ns, "ping", "-n", "-q", "-c", "10", "-i", "0.05", "10.203.0.1"]);
    let (min, avg) = (ping_rtts(&out)[0], ping_rtts(&out)[1]);
    assert!(min >= 30.0 && avg <= 32.0, "the container sees 30 ms: min {min} avg {avg}");
    assert!(interrupt(&mut child.0).success());
}

/// A second address of the sink, on the bed's subnet: the target of the class tests.
const SINK_IP_2: &str = "10.201.0.3";

/// `ctl NAME show --json`, parsed.
fn show_json(name: &str) -> serde_json::Value {
    let out = ctl(&[name, "show", "--json"]);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("show --json: {}", String::from_utf8_lossy(&out.stderr)))
}

/// `ctl set` changing several paths at once, each of whose delay lines fits the machine's
/// memory alone but not all together: refused with one line before any path changes (a
/// change used to apply path by path and stop at the first line it could not make, with the
/// paths before it changed and its record of them not).
fn a_change_whose_lines_do_not_fit_together_changes_nothing() {
    let mut t = Topo::new();
    let name = format!("t{}k{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    // 100 Gbit/s × 400 ms wants 5 GB, capped at the 4 GiB a line takes without --buffer: one
    // more such line than the machine's memory holds.
    const CAP: u64 = 4 << 30;
    let classes = pathem_io::proc_kb("/proc/meminfo", "MemTotal").unwrap() / CAP;
    let mut args =
        vec!["--one-way".to_string(), "--delay".into(), "1ms".into(), "--name".into(), name.clone()];
    for port in 1..=classes {
        args.extend(["--class".into(), format!("udp port {port}"), "--delay 1ms".into()]);
    }
    let big = "--rate 100gbit --delay 400ms";
    // At the start too: such paths are refused before any line is made.
    let mut at_start = vec![PATHEM, "run", "pa", "pb", "--one-way", "--rate", "100gbit", "--delay", "400ms"];
    let filters: Vec<String> = (1..=classes).map(|port| format!("udp port {port}")).collect();
    for f in &filters {
        at_start.extend(["--class", f.as_str(), big]);
    }
    let out = t.exec(&t.mid, &at_start);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("every path's line together"), "{err}");
    t.start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let names: Vec<String> = (1..=classes).map(|i| format!("class{i}")).collect();
    let mut set = vec![name.as_str(), "set", "--rate", "100gbit", "--delay", "400ms"];
    for class in &names {
        set.extend(["--class", class.as_str(), big]);
    }
    let out = ctl(&set);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.trim_end().lines().count() == 1, "{err}");
    assert!(err.contains("every path's line together"), "{err}");
    let v = show_json(&name);
    let paths: Vec<&str> = std::iter::once(&v["a_to_b"]["path"])
        .chain(v["a_to_b"]["classes"].as_array().unwrap().iter().map(|c| &c["path"]))
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(paths.len() as u64, classes + 2, "the default path, then it and each class: {v}");
    assert!(paths.iter().all(|p| p.contains("1ms") && !p.contains("100gbit")), "changed: {paths:?}");
    t.stop();
}

fn classes_give_two_addresses_their_own_paths() {
    let mut t = Topo::new();
    t.exec(&t.sink, &["ip", "addr", "add", &format!("{SINK_IP_2}/24"), "dev", "s0"]);
    let name = format!("t{}k{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let class = format!("host {SINK_IP_2}");
    t.start(&[
        "--delay",
        "5ms",
        "--class",
        &class,
        "--delay 40ms",
        "--name",
        &name,
        "--json",
        "--metrics",
        "9479",
    ]);
    t.exec(&t.gen, &["ping", "-c", "1", "-W", "3", SINK_IP_2]);
    // Each address its own RTT: 2 × 5 ms by the default path, 2 × 40 ms by the class.
    let (min, avg) = t.rtt(10);
    assert!((10.0..12.0).contains(&min), "default path: rtt min {min} avg {avg}");
    let (min2, avg2) = ping_in(&t.gen, SINK_IP_2, 10);
    assert!((80.0..82.0).contains(&min2), "class: rtt min {min2} avg {avg2}");
    println!("  run: default path (5 ms) rtt avg {avg:.2} ms, class (40 ms) {avg2:.2} ms");
    // One class changes, the other path does not.
    let out = ctl(&[&name, "set", "--class", "class1", "--delay 20ms"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (min2, avg2) = ping_in(&t.gen, SINK_IP_2, 10);
    assert!((40.0..42.0).contains(&min2), "class after set --delay 20ms: rtt min {min2} avg {avg2}");
    let (min, avg) = t.rtt(10);
    assert!((10.0..12.0).contains(&min), "default path untouched: rtt min {min} avg {avg}");
    println!(
        "  run: after ctl set --class class1 \"--delay 20ms\": class {avg2:.2} ms, default path {avg:.2} ms"
    );
    // A class that does not exist is refused with one line; adding one live is not possible.
    let out = ctl(&[&name, "set", "--class", "video", "--delay 1ms"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.trim_end().lines().count() == 1, "{err}");
    assert!(err.contains("video") && err.contains("class1") && !err.contains("class1, class1"), "{err}");
    let out = ctl(&[&name, "set", "--class", "default", "--delay 1ms"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("flags without --class"), "{err}");
    // show: per class, the class's own path, counters adding up to the direction's.
    let v = show_json(&name);
    let classes = v["a_to_b"]["classes"].as_array().expect("classes in show");
    assert_eq!(classes.len(), 2, "{v}");
    assert_eq!(
        (classes[0]["class"].as_str(), classes[1]["class"].as_str()),
        (Some("default"), Some("class1"))
    );
    assert_eq!(classes[1]["filter"].as_str(), Some(class.as_str()));
    assert!(classes[1]["path"].as_str().unwrap().contains("20ms"), "{v}");
    assert!(classes[0]["path"].as_str().unwrap().contains("5ms"), "{v}");
    for d in ["a_to_b", "b_to_a"] {
        let sum: u64 = v[d]["classes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["stats"]["rx_packets"].as_u64().unwrap())
            .sum();
        assert_eq!(sum, v[d]["stats"]["rx_packets"].as_u64().unwrap(), "{d}: {v}");
    }
    assert!(v["a_to_b"]["classes"][1]["stats"]["rx_packets"].as_u64().unwrap() >= 21, "{v}");
    // Prometheus: the class label.
    let metrics = scrape(&t.mid, 9479, "/metrics");
    let line = "pathem_class_rx_frames_total{direction=\"a_to_b\",class=\"class1\"} ";
    assert!(metrics.lines().any(|l| l.starts_with(line)), "{line} in\n{metrics}");
    let f = t.stop_json();
    let classes = f["classes"].as_array().expect("classes in the final report");
    assert_eq!(classes.len(), 4, "two directions, two paths each: {f}");
}

/// A veth takes an untagged frame of MTU + 18 bytes (room for a VLAN tag it does not hold):
/// attach's ingress hands it on to the stack, as the plain interface does (a packet socket
/// on a device of IF's MTU would refuse it as too large).
fn attach_hands_on_the_longest_frame_its_interface_takes() {
    let id = format!("pt{}x{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let bed = Bed::direct(&id).expect("the test bed");
    let (gen, sink) = (bed.gen.clone(), bed.sink.clone());
    bed.warm_up();
    bed.exec(&sink, &["ip", "link", "set", "s0", "mtu", "1504"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("final.json");
    let file = std::fs::File::create(&out).unwrap();
    let (mut running, lines) =
        attach_with(Some(&gen), "g0", &["--ingress", "--delay 1ms", "--json"], file.into());
    let no_ports = || -> u64 {
        let out = sh(&["ip", "netns", "exec", &gen, "cat", "/proc/net/snmp"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
        let (names, values) = (udp.next().expect("Udp names"), udp.next().expect("Udp values"));
        let i = names.split_whitespace().position(|w| w == "NoPorts").expect("NoPorts");
        values.split_whitespace().nth(i).and_then(|v| v.parse().ok()).expect("a count")
    };
    let before = no_ports();
    // 1 476 bytes of UDP payload: a 1 504-byte datagram, a 1 518-byte frame.
    let send = format!("head -c 1476 /dev/zero > /dev/udp/{GEN_IP}/9");
    for _ in 0..3 {
        bed.exec(&sink, &["bash", "-c", &send]).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    let arrived = no_ports() - before;
    assert!(interrupt(&mut running.0).success(), "{:?}", lines.lock().unwrap());
    let last = std::fs::read_to_string(&out).unwrap().lines().last().unwrap_or("").to_string();
    assert_eq!(arrived, 3, "each 1 518-byte frame reached the stack: {last}");
    let json: serde_json::Value = serde_json::from_str(&last).expect("the final counters");
    assert_eq!(json["b_to_a"]["port_tx_errors"]["too_large"], 0, "none refused as too large: {last}");
}

fn attach_with_classes_delays_each_address_its_own() {
    let id = format!("pt{}x{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let bed = Bed::direct(&id).expect("the test bed");
    let (gen, sink) = (bed.gen.clone(), bed.sink.clone());
    bed.exec(&sink, &["ip", "addr", "add", &format!("{SINK_IP_2}/24"), "dev", "s0"]).unwrap();
    bed.warm_up();
    bed.exec(&gen, &["ping", "-c", "1", "-W", "2", SINK_IP_2]).unwrap();
    let name = format!("t{}a{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let class = format!("dst host {SINK_IP_2}");
    let args = ["--delay", "10ms", "--class", &class, "--netem 'delay 30ms'", "--name", &name];
    let (mut child, _) = attach(Some(&gen), "g0", &args);
    let (min, avg) = ping_in(&gen, SINK_IP, 10);
    assert!(min >= 10.0 && avg <= 12.0, "egress default path: rtt min {min} avg {avg}");
    let (min2, avg2) = ping_in(&gen, SINK_IP_2, 10);
    assert!(min2 >= 30.0 && avg2 <= 32.0, "egress class: rtt min {min2} avg {avg2}");
    println!("  attach: default path (10 ms) rtt avg {avg:.2} ms, class (netem delay 30ms) {avg2:.2} ms");
    let out = ctl(&[&name, "set", "--class", "class1", "--delay 50ms"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (min2, avg2) = ping_in(&gen, SINK_IP_2, 10);
    assert!(min2 >= 50.0 && avg2 <= 52.0, "class after set: rtt min {min2} avg {avg2}");
    let (min, avg) = ping_in(&gen, SINK_IP, 10);
    assert!(min >= 10.0 && avg <= 12.0, "default path untouched: rtt min {min} avg {avg}");
    println!("  attach: after ctl set --class class1 \"--delay 50ms\": class {avg2:.2} ms, default path {avg:.2} ms");
    assert!(interrupt(&mut child.0).success(), "exit 0 after SIGINT");
    assert_eq!(attach_leftovers(&gen, "g0"), (String::new(), (0, 0)), "SIGINT leaves nothing");
}

/// `--tx-timing filler` through DPDK's `net_pcap` (no NIC): 300 frames read at once from a
/// capture go through a 100 Mbit/s link to a capture written in wire order, fillers and
/// frames. Each record costs its length + 24 B at the line rate, so the bytes before a frame
/// say when it starts on the wire; every frame must start where the same path's offline
/// replay (same seed) releases it, relative to the first, within one minimum frame's time
/// (67.2 ns at 10 Gbit/s, 672 ns at 1 Gbit/s), with no drift over the 300: without jitter, one
/// 100 Mbit/s serialization after the previous frame. (A capture is no clocked wire: the
/// port's plan follows the frames, however slowly the driver writes the file.)
fn dpdk_filler_frames_start_each_frame_at_its_time() {
    use pathem_io::pcap::{read_capture, write_capture};
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.unwrap();
    let at = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let frames: Vec<(Nanos, Vec<u8>)> =
        (0..300).map(|i| (Nanos::from_secs(1), pathem_io::mem::udp_frame(60, i))).collect();
    write_capture(dir.path().join("in.pcap").as_ref(), frames).unwrap();
    write_capture(dir.path().join("empty.pcap").as_ref(), Vec::new()).unwrap();
    for (line, line_bps, jitter) in [
        ("10gbit", 10_000_000_000u64, None),
        ("10gbit", 10_000_000_000, Some("2us")),
        ("1gbit", 1_000_000_000, None),
    ] {
        let path: Vec<&str> = ["--rate", "100mbit", "--seed", "7"]
            .into_iter()
            .chain(jitter.map(|j| ["--delay", "1ms", "--jitter", j]).into_iter().flatten())
            .collect();
        let (a, b) = (
            format!("dpdk:net_pcap0,rx_pcap={},tx_pcap={}", at("in.pcap"), at("back.pcap")),
            format!("dpdk:net_pcap1,rx_pcap={},tx_pcap={}", at("empty.pcap"), at("out.pcap")),
        );
        let mut args = vec!["30", PATHEM, "run", "--one-way", &a, &b, "--duration", "1s", "--json"];
        args.extend(["--tx-timing", "filler", "--line-rate", line]);
        args.extend(&path);
        let out = Command::new("timeout").args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last: serde_json::Value =
            stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a final JSON line");
        let c = &last["a_to_b"];
        assert!(err.contains("transmit timed by filler frames"), "{err}");
        let (i, r) = (at("in.pcap"), at("ref.pcap"));
        let mut replay = vec!["replay", i.as_str(), r.as_str()];
        replay.extend(&path);
        let done = common::pathem(&replay);
        assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
        let reference: Vec<Nanos> =
            read_capture(r.as_ref()).unwrap().into_iter().map(|(t, _, _)| t).collect();
        let (starts, seqs, fillers, filler_bytes) = wire_starts(&at("out.pcap"), line_bps);
        let context = format!("line {line}, jitter {jitter:?}: {c}");
        assert_eq!(seqs, (0..300).collect::<Vec<u64>>(), "every frame once, in order; {context}");
        assert_eq!(reference.len(), 300, "{context}");
        assert_eq!(c["tx_packets"], 300, "{context}");
        assert_eq!(
            (c["tx_filler_frames"].as_u64(), c["tx_filler_bytes"].as_u64()),
            (Some(fillers), Some(filler_bytes)),
            "{context}"
        );
        assert_eq!((&c["tx_filler_late"], &c["tx_filler_errors"]), (&0.into(), &0.into()), "{context}");
        let min_frame = 84 * 8 * 1_000_000_000 / line_bps;
        let (mut worst_gap, mut worst_drift) = (0i64, 0i64);
        for k in 1..300 {
            let want = (reference[k] - reference[0]).as_nanos() as i64;
            let drift = starts[k] as i64 - starts[0] as i64 - want;
            let gap =
                (starts[k] - starts[k - 1]) as i64 - (reference[k] - reference[k - 1]).as_nanos() as i64;
            worst_drift = worst_drift.max(drift.abs());
            worst_gap = worst_gap.max(gap.abs());
            if jitter.is_none() {
                assert_eq!((reference[k] - reference[k - 1]).as_nanos(), 6720, "the reference's spacing");
            }
        }
        eprintln!("    {line}, jitter {jitter:?}: {fillers} fillers, worst gap error {worst_gap} ns, worst drift {worst_drift} ns");
        assert!(
            worst_gap <= min_frame as i64 && worst_drift <= min_frame as i64,
            "gap {worst_gap} ns, drift {worst_drift} ns, one frame {min_frame} ns; {context}"
        );
    }
}

/// A capture written by net_pcap's `tx_pcap` read as a wire at `line_bps`: each real frame's
/// start in ns from the first record (every record costing its length + 24 B), the real
/// frames' sequence numbers, and the fillers' count and bytes (each checked to be a filler).
fn wire_starts(path: &str, line_bps: u64) -> (Vec<u64>, Vec<u64>, u64, u64) {
    let wire = pathem_io::pcap::read_capture(path.as_ref()).unwrap();
    let (mut bytes, mut starts, mut seqs) = (0u64, Vec::new(), Vec::new());
    let (mut fillers, mut filler_bytes) = (0u64, 0u64);
    for (_, len, data) in &wire {
        if data[12..14] == [0x88, 0xb5] {
            assert_eq!(data[..6], [2, 0, 0, 0, 0, 0], "a filler's destination");
            assert!((60..=1514).contains(len), "a filler of {len} B");
            assert!(data[14..].iter().all(|&b| b == 0), "a filler carries zeros");
            fillers += 1;
            filler_bytes += u64::from(*len);
        } else {
            starts.push(bytes * 8 * 1_000_000_000 / line_bps);
            seqs.push(common::seq(data));
        }
        bytes += u64::from(*len) + 24;
    }
    (starts, seqs, fillers, filler_bytes)
}

/// The receive stamps net_pcap puts on each frame (its capture time, in microseconds, in the
/// mbuf's timestamp field) reach the path: the driver reads the file at once, pathem holds
/// each frame until its capture time comes on its own clock, and 200 frames at irregular gaps
/// (20 to 69 us) leave 10 ms later with the capture's own gaps, measured at byte precision
/// through filler timing on the way out (within one minimum frame, 67.2 ns at 10 Gbit/s). The
/// stamps are converted by one offset (the first frame's), so nothing is lost to conversion.
fn dpdk_capture_stamps_keep_the_captures_spacing() {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.unwrap();
    let at = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let mut t = Nanos::from_secs(1_700_000_000);
    let mut sent = Vec::new();
    for i in 0..200u64 {
        sent.push((t, pathem_io::mem::udp_frame(60, i)));
        t += Nanos::from_micros(20 + (i * 7919) % 50);
    }
    let times: Vec<u64> = sent.iter().map(|(t, _)| t.as_nanos()).collect();
    pathem_io::pcap::write_capture(at("in.pcap").as_ref(), sent).unwrap();
    pathem_io::pcap::write_capture(at("empty.pcap").as_ref(), Vec::new()).unwrap();
    let (a, b) = (
        format!("dpdk:net_pcap0,rx_pcap={},tx_pcap={}", at("in.pcap"), at("back.pcap")),
        format!("dpdk:net_pcap1,rx_pcap={},tx_pcap={}", at("empty.pcap"), at("out.pcap")),
    );
    let args = [
        "30",
        PATHEM,
        "run",
        "--one-way",
        &a,
        &b,
        "--duration",
        "1s",
        "--json",
        "--delay",
        "10ms",
        "--tx-timing",
        "filler",
        "--line-rate",
        "10gbit",
    ];
    let out = Command::new("timeout").args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("receive stamps from the capture"),
        "the port says where its stamps come from: {err}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last: serde_json::Value =
        stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a final JSON line");
    let c = &last["a_to_b"];
    assert_eq!(
        (c["rx_packets"].as_u64(), c["tx_packets"].as_u64(), c["tx_filler_late"].as_u64()),
        (Some(200), Some(200), Some(0)),
        "{c}"
    );
    let (starts, seqs, _, _) = wire_starts(&at("out.pcap"), 10_000_000_000);
    assert_eq!(seqs, (0..200).collect::<Vec<u64>>(), "every frame once, in order");
    let worst = (1..200)
        .map(|k| ((starts[k] - starts[0]) as i64 - (times[k] - times[0]) as i64).abs())
        .max()
        .unwrap();
    eprintln!("    200 frames at the capture's gaps: worst error {worst} ns");
    assert!(worst <= 67, "a frame {worst} ns from the capture's spacing");
}
