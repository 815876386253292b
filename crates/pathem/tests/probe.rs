//! `pathem probe` end to end on loopback, and its refusals.

mod common;
use common::{pathem, Dir};

#[test]
fn pair_on_loopback_reports_everything_and_draws_the_figures() {
    let d = Dir::new();
    let (json, figs) = (d.s("probe.json"), d.s("figs"));
    let out = pathem(&[
        "probe",
        "pair",
        "--to",
        "127.0.0.1:47911",
        "--rate",
        "20kpps",
        "--count",
        "4000",
        "--json",
        &json,
        "--figures",
        &figs,
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("4000 sent, 4000 received, 0 lost"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let s = &v["summary"];
    assert_eq!(s["sent"], 4000);
    assert_eq!(s["lost"], 0);
    for key in ["median", "p99", "p99_9", "p99_99", "max"] {
        assert!(s["deviation_us"][key].is_f64(), "{key}");
    }
    assert!((s["throughput_pps"].as_f64().unwrap() / 20_000.0 - 1.0).abs() < 0.05, "{s}");
    // In frame bits, as `--rate` and `--size` (64 bytes) count them.
    assert!((s["throughput_bps"].as_f64().unwrap() / (20_000.0 * 64.0 * 8.0) - 1.0).abs() < 0.05, "{s}");
    for f in ["delay-deviation.svg", "gaps.svg", "loss-bursts.svg"] {
        let svg = std::fs::read_to_string(d.path("figs").join(f)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{f}");
    }
}

/// IPv6 ends, and a receiver whose `--idle` is shorter than the sender's gaps: it waits for
/// the sender, not for the next datagram. A destination the sender cannot reach ends the run.
#[test]
fn pair_over_ipv6_and_sparse_sends_lose_nothing() {
    let out = pathem(&[
        "probe",
        "pair",
        "--to",
        "[::1]:47912",
        "--size",
        "100",
        "--rate",
        "100pps",
        "--count",
        "30",
        "--idle",
        "5ms",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("30 sent, 30 received, 0 lost"), "{text}");
    let out = pathem(&["probe", "send", "--to", "[::1]:47913", "--size", "64"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && err.contains("82 to 1514 to an IPv6 one"), "{err}");
}

/// A dual-stack receiver (`[::]`) and a sender over IPv4: each frame is counted with the
/// sender's headers (64 bytes as `--size` says), not the receiving socket's IPv6 ones.
#[test]
fn a_dual_stack_receiver_counts_an_ipv4_senders_frames() {
    let d = Dir::new();
    let json = d.s("recv.json");
    let (recv, said) = listening("[::]:47914", &["--idle", "3s", "--json", &json]);
    let sent = pathem(&["probe", "send", "--to", "127.0.0.1:47914", "--rate", "10kpps", "--count", "2000"]);
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
    let out = recv.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", said.join().unwrap());
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let s = &v["summary"];
    let bits_per_frame = s["throughput_bps"].as_f64().unwrap() / s["throughput_pps"].as_f64().unwrap();
    assert!((bits_per_frame - 64.0 * 8.0).abs() < 1.0, "{bits_per_frame} bits a frame: {s}");
    assert_eq!((s["sent"].as_u64(), s["sent_known"].as_bool()), (Some(2000), Some(true)), "{s}");
}

/// Starts `pathem probe ARGS` with its output captured.
fn spawn(args: &[&str]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_pathem"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("pathem starts")
}

fn pause(ms: u64) {
    std::thread::sleep(std::time::Duration::from_millis(ms));
}

/// A sender's run as it prints it at its end.
fn run_of(child: std::process::Child) -> String {
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    err.split("(run ").nth(1).and_then(|t| t.split(')').next()).expect("the run is named").to_string()
}

/// Whether a UDP socket of this namespace is bound to `port` (`/proc/net/udp` and `udp6`,
/// read rather than a bind tried, which could take the port from the receiver for a moment).
fn bound(port: u16) -> bool {
    let local = format!(":{port:04X}");
    ["/proc/net/udp", "/proc/net/udp6"].iter().any(|f| {
        let table = std::fs::read_to_string(f).unwrap_or_default();
        table.lines().skip(1).any(|l| l.split_whitespace().nth(1).is_some_and(|a| a.ends_with(&local)))
    })
}

/// A receiver, `pathem probe recv --listen ADDR ARGS`, once its socket is bound; its stderr
/// comes from the thread returned.
fn listening(addr: &str, args: &[&str]) -> (std::process::Child, std::thread::JoinHandle<String>) {
    let port: std::net::SocketAddr = addr.parse().unwrap();
    assert!(!bound(port.port()), "port {} is taken before the receiver starts", port.port());
    let mut child = spawn(&[&["probe", "recv", "--listen", addr][..], args].concat());
    let mut err = child.stderr.take().expect("stderr is piped");
    let said = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut text);
        text
    });
    let start = std::time::Instant::now();
    while !bound(port.port()) {
        if start.elapsed() > std::time::Duration::from_secs(20) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the receiver did not bind {addr}: {}", said.join().unwrap());
        }
        pause(5);
    }
    (child, said)
}

/// A receiver started while another sender is still going: it measures the run it saw begin,
/// whole, though the other ended first and this one sends for longer than `--idle` after that,
/// and counts the other's datagrams as foreign rather than as its own (duplicates, losses,
/// delays).
#[test]
fn a_receiver_keeps_one_senders_run_apart_from_anothers() {
    let d = Dir::new();
    let json = d.s("recv.json");
    let send = ["probe", "send", "--to", "127.0.0.1:47915", "--rate", "10kpps", "--count"];
    // 1 s of datagrams, well under way (past its number 63, 6.3 ms in) when the receiver
    // starts, and ended before the next run.
    let early = spawn(&[&send[..], &["10000", "--run", "e1"]].concat());
    pause(300);
    let (recv, said) = listening("127.0.0.1:47915", &["--idle", "1s", "--json", &json]);
    // 2.5 s, ending more than `--idle` after the first run's end; a run of its own, named, so
    // the two never draw one (what a draw gives is `packet`'s unit test).
    let later = spawn(&[&send[..], &["25000", "--run", "e2"]].concat());
    let (later, early) = (run_of(later), run_of(early));
    assert_eq!((early.as_str(), later.as_str()), ("00e1", "00e2"), "the runs given");
    let out = recv.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", said.join().unwrap());
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let s = &v["summary"];
    assert_eq!(s["run"].as_u64(), u64::from_str_radix(&later, 16).ok(), "{s}");
    assert_eq!((s["sent"].as_u64(), s["received"].as_u64()), (Some(25000), Some(25000)), "{s}");
    assert_eq!(
        (s["lost"].as_u64(), s["duplicates"].as_u64(), s["strays"].as_u64()),
        (Some(0), Some(0), Some(0))
    );
    let foreign = s["foreign"].as_u64().unwrap();
    assert!((1..10000).contains(&foreign), "{foreign} foreign: {s}");
    assert!(text.contains(&format!("{foreign} datagrams of other runs")), "{text}");
}

/// `send --run HEX` and `recv --run HEX`: the receiver measures that run alone, every datagram
/// of another foreign; another's keep it waiting for nothing, and where none of its own came
/// it says what came instead.
#[test]
fn a_receiver_told_a_run_takes_no_other() {
    let (recv, said) = listening("127.0.0.1:47916", &["--idle", "1s", "--run", "AB"]);
    let send = ["probe", "send", "--to", "127.0.0.1:47916", "--rate", "1000pps", "--count"];
    let other = spawn(&[&send[..], &["150", "--run", "ac"]].concat());
    pause(20);
    let own = spawn(&[&send[..], &["100", "--run", "00ab"]].concat());
    assert_eq!((run_of(own), run_of(other)), ("00ab".to_string(), "00ac".to_string()));
    let out = recv.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", said.join().unwrap());
    assert!(text.contains("100 sent, 100 received, 0 lost"), "{text}");
    assert!(text.contains("150 datagrams of other runs") && text.contains("measured: run 00ab"), "{text}");
    // None of its own: it waits `--idle` and says what came.
    let (recv, said) = listening("127.0.0.1:47916", &["--idle", "1s", "--run", "ffff"]);
    run_of(spawn(&[&send[..], &["100", "--run", "1"]].concat()));
    let out = recv.wait_with_output().unwrap();
    let err = said.join().unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no probe datagram of this run arrived within 1s")
            && err.contains("100 of another run did"),
        "{err}"
    );
    for bad in ["xyz", "12345", "", "-1", "-a"] {
        for args in
            [&["probe", "recv", "--listen", "127.0.0.1:47917"][..], &["probe", "send", "--to", "127.0.0.1:9"]]
        {
            let out = pathem(&[args, &["--run", bad]].concat());
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.code() == Some(2) && err.contains("1 to 4 hexadecimal digits"),
                "{bad:?}: {err}"
            );
        }
    }
}

#[test]
fn bad_input_is_refused_with_one_line() {
    for (args, code, says) in [
        (vec!["probe", "send", "--to", "127.0.0.1:9", "--pattern", "zigzag"], 2, "not a known pattern"),
        (vec!["probe", "send", "--to", "127.0.0.1:9", "--rate", "0pps"], 2, "above 0"),
        (vec!["probe", "send", "--to", "127.0.0.1:9", "--rate", "0mbit"], 2, "zero"),
        (vec!["probe", "send", "--to", "127.0.0.1:9", "--size", "20"], 2, "62 to 1514"),
        (
            vec!["probe", "send", "--to", "127.0.0.1:9", "--rate", "10tbit"],
            2,
            "at most 10000000000 datagrams",
        ),
        (vec!["probe", "send", "--to", "127.0.0.1:9", "--rate", "1e306mpps"], 2, "finite rate above 0"),
        (
            vec![
                "probe",
                "send",
                "--to",
                "127.0.0.1:9",
                "--pattern",
                "burst:4294967295,every=1ns",
                "--duration",
                "1s",
            ],
            2,
            "4.294967295e18 datagrams a second for 1s",
        ),
        (vec!["probe", "send", "--to", "nowhere"], 2, "nowhere"),
        (
            vec!["probe", "send", "--to", "127.0.0.1:9", "--count", "2", "--rate", "1e-300pps"],
            2,
            "within 1 day",
        ),
        (
            vec!["probe", "send", "--to", "127.0.0.1:9", "--pattern", "burst:4,every=1ms", "--rate", "5mbit"],
            2,
            "no --rate with",
        ),
        (vec!["probe", "send", "--to", "127.0.0.1:9", "--duration", "0s"], 2, "above 0"),
        (vec!["bench", "--hiccups", "--seconds", "0"], 2, "0.001 to 3600"),
        (vec!["bench", "--hiccups", "--seconds", "NaN"], 2, "0.001 to 3600"),
        (vec!["run", "lo", "lo2", "--busy-poll", "1"], 2, "has no unit"),
        (vec!["run", "lo", "lo2", "--busy-poll", "2s"], 2, "0ms to 1s"),
        (vec!["run", "lo", "lo2", "--stats-interval", "0ms"], 2, "1ms to 1 day"),
        (vec!["run", "lo", "lo2", "--duration", "2000days"], 2, "unknown unit"),
        (vec!["run", "lo", "lo2", "--rx-buffer", "1KiB"], 2, "64KiB to 1GiB"),
        (vec!["run", "lo", "lo2", "--max-frame", "70000"], 2, "1 to 65536"),
        (vec!["run", "lo", "lo2", "--limit", "0"], 2, "'0' for '--limit <N>': 0 is not in 1..=4294967295"),
        (
            vec!["run", "lo", "lo2", "--limit", "5", "--rate", "1mbit", "--aqm", "codel"],
            2,
            "no --limit with --aqm",
        ),
        (vec!["run", "lo", "lo2", "--metrics", "nine"], 2, "accepted: PORT"),
        (vec!["run", "lo", "lo2", "--name", "../x"], 2, "accepted: 1 to 64 letters"),
        // `ctl list` is ctl's own: a link so named could not be shown or changed.
        (vec!["run", "lo", "lo2", "--name", "list"], 2, "--name list: accepted: 1 to 64 letters, digits, '-', '_' or '.', not starting with '.', and not `list`"),
        (vec!["run", "lo", "lo+2"], 2, "give one with --name"),
        (vec!["attach", "", "--delay", "1ms"], 2, "interface : is not a valid interface name"),
        (vec!["attach", "lo", "--rx-buffer", "2GiB"], 2, "--rx-buffer 2147483648 is out of range"),
        (vec!["run", "lo", "lo2", "--schedule", "/nonexistent"], 2, "cannot read"),
        (vec!["run", "lo", "lo2", "--cores", "0,0"], 2, "different CPUs"),
        (vec!["probe", "send", "--to", "127.0.0.1:9", "--count", "100000000000"], 2, "1 to 10000000000"),
        (vec!["probe", "recv", "--listen", "127.0.0.1:9", "--idle", "2h"], 2, "1ms to 1h"),
        (vec!["bench", "--packets", "0"], 2, "1 to 10^12"),
        (vec!["bench", "--rate", "1mbit", "--packets", "100000"], 2, "leave within 10 s"),
        (vec!["bench", "--classes", "64", "--packets", "10"], 2, "0 to 63"),
        (vec!["bench", "--live", "frob"], 2, "port kind `frob`"),
        (vec!["bench", "--live", "afxdp", "--delay", "50ms"], 2, "path flags do not apply"),
        (vec!["bench", "--live", "afxdp", "--queues", "65"], 2, "1 to 64"),
        (vec!["bench", "--live", "afxdp", "--sizes", "59"], 2, "--sizes 59 is out of range"),
        (vec!["bench", "--disciplines", "--packets", "10"], 2, "needs a bottleneck: --rate"),
        (vec!["run", "lo", "lo2", "--class", "tcp prot 1", "--delay 1ms"], 2, "at 5, \"prot\""),
        (vec!["demo", "--frames", "1000001"], 2, "1 to 10^6"),
        (vec!["bench", "--size", "65536"], 2, "14 to 65535"),
        // The lab checks its own ranges, for the command line and any other caller alike.
        (vec!["bench", "--runs", "0", "--packets", "10"], 2, "--runs 0 is out of range; accepted: 1 to 1000"),
        (vec!["bench", "--live", "afxdp", "--runs", "1001"], 2, "--runs 1001 is out of range"),
        (vec!["bench", "--offloads", "--sizes", "63"], 2, "--sizes 63 is out of range; accepted: 64 to 9000"),
        (vec!["bench", "--offloads", "--runs", "0"], 2, "--runs 0 is out of range"),
        // Flags --live would not use are refused, not ignored; a flag that needs another names it.
        (vec!["bench", "--live", "afxdp", "--size", "1500"], 2, "cannot be used with '--size <BYTES>'"),
        (vec!["bench", "--live", "afxdp", "--packets", "9"], 2, "cannot be used with '--packets <N>'"),
        (vec!["bench", "--hiccups", "--packets", "9"], 2, "'--hiccups' cannot be used with '--packets <N>'"),
        // A negative number is a value refused for its sign, not an unknown flag.
        (vec!["bench", "--packets", "-1"], 2, "'-1' for '--packets <N>': accepted: a whole number within"),
        (vec!["probe", "send", "--to", "127.0.0.1:9", "--count", "-5"], 2, "'-5' for '--count <N>'"),
        (vec!["run", "lo", "lo2", "--max-frame", "-1"], 2, "'-1' for '--max-frame <BYTES>'"),
        // A receiver no datagram can reach, or a CPU the machine lacks, is the user's to mend.
        (
            vec!["probe", "send", "--to", "[::1]:9", "--size", "81", "--count", "1"],
            2,
            "82 to 1514 to an IPv6",
        ),
        (vec!["probe", "send", "--to", "127.0.0.1:0", "--count", "1"], 2, "with a port 1 to 65535"),
        (vec!["probe", "pair", "--to", "127.0.0.1:0", "--count", "1"], 2, "with a port 1 to 65535"),
        (vec!["probe", "pair", "--to", "127.0.0.1:9", "--cpu", "9999", "--count", "1"], 2, "no CPU 9999"),
        (
            vec!["probe", "pair", "--to", "127.0.0.1:9", "--send-netns", "no/such", "--count", "1"],
            2,
            "no/such",
        ),
        (vec!["ctl", "list", "show"], 2, "ctl list show: list takes nothing after it"),
        (vec!["ctl", "list", "--json"], 2, "ctl list --json: list takes nothing"),
        (vec!["ctl", "x", "set", "--json", "--delay", "1ms"], 2, "--json is for show"),
        (vec!["bench", "--hiccups", "--runs", "2"], 2, "cannot be used with '--runs <N>'"),
        (vec!["bench", "--hiccups", "--delay", "1ms"], 2, "--hiccups measures the machine: path flags"),
        (vec!["bench", "--packets", "9", "--seconds", "1"], 2, "--seconds is only for --live or --hiccups"),
        (vec!["bench", "--packets", "9", "--sizes", "64"], 2, "--sizes is only for --live or --offloads"),
        (vec!["bench", "--packets", "9", "--queues", "2"], 2, "--queues is only for --live"),
        (vec!["bench", "--offloads", "--packets", "3000000"], 2, "accepted: 1 to 2000000 with --offloads"),
        (vec!["bench", "--offloads", "--core", "1"], 2, "'--offloads' cannot be used with '--core <CPU>'"),
        (
            vec!["bench", "--offloads", "--delay", "1ms"],
            2,
            "--offloads measures the ports' work on a frame: path",
        ),
        (vec!["bench", "--split", "--core", "1"], 2, "'--split' cannot be used with '--core <CPU>'"),
        (vec!["bench", "--queues", "4"], 2, "--queues is only for --live"),
        (vec!["validate", "--seconds", "0.05"], 2, "--seconds 0.05 is out of range; accepted: 0.1 to 3600"),
        (
            vec!["validate", "--target", "--port", "afxdp"],
            2,
            "'--target' cannot be used with '--port <PORT>'",
        ),
        (
            vec!["probe", "recv", "--listen", "127.0.0.1:0"],
            2,
            "--listen 127.0.0.1:0: accepted: IP:PORT with a port 1",
        ),
        (
            vec!["probe", "send", "--to", "127.0.0.1:9", "--pattern", "burst:4294967295,every=1ns"],
            2,
            "--pattern (4.294967295e18 datagrams a second",
        ),
        (vec!["probe", "send", "--to", "127.0.0.1:9", "--duration", "-1s"], 2, "`-1s` is negative"),
        (vec!["probe", "recv", "--listen", "127.0.0.1:9", "--expect-delay", "-1ms"], 2, "`-1ms` is negative"),
        (vec!["run", "lo", "lo2", "--stats-interval", "-1s"], 2, "`-1s` is negative"),
        // A path flag's value that starts with `-` is the flag's to refuse, by name.
        (vec!["netem", "--from-flags", "--cell -48,5"], 2, "'-48,5' for '--cell <SIZE,OVERHEAD>'"),
        (vec!["netem", "--from-flags", "--slot -1ms"], 2, "'-1ms' for '--slot <SPEC>'"),
        (vec!["netem", "--from-flags", "--police -1mbit,burst=1KB"], 2, "'-1mbit,burst=1KB' for '--police"),
        (vec!["netem", "--from-flags", "--aqm -codel"], 2, "'-codel' for '--aqm <KIND>'"),
        (vec!["netem", "--from-flags", "--delay-dist -normal"], 2, "'-normal' for '--delay-dist <DIST>'"),
        (vec!["netem", "--from-flags", "--limit -5"], 2, "'-5' for '--limit <N>'"),
        (
            vec!["netem", "--from-flags", "--loss gi:p13=10%,p31=50%,p32=50%,p23=0"],
            2,
            "p32 above 0 and p23 below 1e-9",
        ),
        (
            vec!["probe", "recv", "--listen", "127.0.0.1:9", "--expect-loss", "trace:/x"],
            2,
            "which only --loss reads; a model is expected here",
        ),
        (vec!["run", "lo"], 2, "were not provided: <PORT_B>"),
        (
            vec!["probe", "recv", "--listen", "127.0.0.1:47912", "--idle", "200ms"],
            1,
            "no probe datagram arrived",
        ),
    ] {
        let out = pathem(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
