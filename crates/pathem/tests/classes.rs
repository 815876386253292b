//! End-to-end: per-flow classes (`--class "FILTER" "FLAGS"`) through `pathem replay`, in virtual
//! time: each class its own path, order kept within a class, no class held back by another,
//! counters per class adding up to the totals, seeded replays byte-identical.

mod common;
use common::{pathem, refused, seq, Dir};
use pathem_io::mem::udp_frame;
use pathem_io::pcap::{read_capture, write_capture};
use pathem_model::Nanos;
use std::process::Output;

/// A UDP frame of flow `port` (destination port, and 10.0.0.`port % 250` as destination).
fn flow_frame(port: u16, size: usize, i: u64) -> Vec<u8> {
    let mut f = udp_frame(size, i);
    f[36..38].copy_from_slice(&port.to_be_bytes());
    f
}

/// Two flows interleaved, a frame of each every 100 µs for 1 s: port 53 and port 9000.
fn two_flows() -> Vec<(Nanos, Vec<u8>)> {
    (0..20_000u64)
        .map(|i| {
            let port = if i % 2 == 0 { 53 } else { 9000 };
            (Nanos::from_secs(1) + Nanos::from_micros(50 * i), flow_frame(port, 200, i))
        })
        .collect()
}

fn replay(d: &Dir, extra: &[&str]) -> Output {
    let (i, o, s) = (d.s("in.pcap"), d.s("out.pcap"), d.s("stats.json"));
    let mut args = vec!["replay", &i, &o, "--seed", "5", "--stats", &s];
    args.extend(extra);
    pathem(&args)
}

fn ok(out: &Output) {
    assert!(out.status.success(), "pathem failed: {}", String::from_utf8_lossy(&out.stderr));
}

fn dport(f: &[u8]) -> u16 {
    u16::from_be_bytes([f[36], f[37]])
}

#[test]
fn each_class_has_its_own_path_and_none_holds_another_back() {
    let d = Dir::new();
    let frames = two_flows();
    write_capture(&d.path("in.pcap"), frames.clone()).unwrap();
    ok(&replay(&d, &["--delay", "5ms", "--class", "udp dst port 53", "--delay 300ms --loss 10%"]));
    let out = read_capture(&d.path("out.pcap")).unwrap();
    let arrival = |s: u64| frames[s as usize].0;
    let (mut dns, mut other) = (Vec::new(), Vec::new());
    for (t, _, f) in &out {
        let delay = *t - arrival(seq(f));
        if dport(f) == 53 {
            assert_eq!(delay, Nanos::from_millis(300), "frame {} of the class", seq(f));
            dns.push(seq(f));
        } else {
            // Never held behind a 300 ms class frame that arrived earlier.
            assert_eq!(delay, Nanos::from_millis(5), "frame {} of the default path", seq(f));
            other.push(seq(f));
        }
    }
    // Order kept within each class; the class lost about 10%, the default path nothing.
    assert!(dns.windows(2).all(|w| w[0] < w[1]) && other.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(other.len(), 10_000);
    assert!((8_800..9_200).contains(&dns.len()), "class kept {}", dns.len());
    // The capture is in release order across classes.
    assert!(out.windows(2).all(|w| w[0].0 <= w[1].0));
    // Counters per class add up to the totals.
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("stats.json")).unwrap()).unwrap();
    let classes = s["classes"].as_array().unwrap();
    let names: Vec<&str> = classes.iter().map(|c| c["class"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "class1"]);
    assert_eq!(classes[1]["filter"], "udp dst port 53");
    for key in ["rx_packets", "tx_packets", "rx_bytes", "tx_bytes"] {
        let sum: u64 = classes.iter().map(|c| c["stats"][key].as_u64().unwrap()).sum();
        assert_eq!(sum, s[key].as_u64().unwrap(), "{key}");
    }
    let lost: u64 = classes.iter().map(|c| c["stats"]["dropped"]["loss"].as_u64().unwrap()).sum();
    assert_eq!(lost, s["dropped"]["loss"].as_u64().unwrap());
    assert_eq!(classes[0]["stats"]["rx_packets"], 10_000);
    assert_eq!(classes[1]["stats"]["dropped"]["loss"].as_u64().unwrap() as usize, 10_000 - dns.len());
}

#[test]
fn a_class_with_its_own_rate_queues_only_its_own_frames() {
    // 10 000 frames of 1000 B per second in the class (80 Mbit/s) through a 10 Mbit/s class
    // link: its queue fills and drops; the other flow, untouched, keeps zero delay.
    let d = Dir::new();
    let frames: Vec<_> = (0..20_000u64)
        .map(|i| {
            let port = if i % 2 == 0 { 5001 } else { 7 };
            (Nanos::from_secs(1) + Nanos::from_micros(50 * i), flow_frame(port, 1000, i))
        })
        .collect();
    write_capture(&d.path("in.pcap"), frames.clone()).unwrap();
    ok(&replay(&d, &["--class", "port 5001", "--rate 10mbit --queue 50pkt"]));
    let out = read_capture(&d.path("out.pcap")).unwrap();
    for (t, _, f) in &out {
        if dport(f) == 7 {
            assert_eq!(*t, frames[seq(f) as usize].0, "the default path is transparent");
        }
    }
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("stats.json")).unwrap()).unwrap();
    let class = &s["classes"][1]["stats"];
    assert!(class["dropped"]["queue"].as_u64().unwrap() > 5_000, "{class}");
    assert_eq!(s["classes"][0]["stats"]["dropped"]["queue"], 0);
}

#[test]
fn seeded_replays_with_classes_are_byte_identical() {
    let (a, b) = (Dir::new(), Dir::new());
    for d in [&a, &b] {
        write_capture(&d.path("in.pcap"), two_flows()).unwrap();
        ok(&replay(
            d,
            &[
                "--loss",
                "5%",
                "--jitter",
                "1ms",
                "--delay",
                "2ms",
                "--class",
                "port 53",
                "--loss 20% --delay 1ms --jitter 1ms",
            ],
        ));
    }
    assert!(std::fs::read(a.path("out.pcap")).unwrap() == std::fs::read(b.path("out.pcap")).unwrap());
}

#[test]
fn classes_come_from_the_config_file_too_and_schedules_change_them() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), two_flows()).unwrap();
    std::fs::write(
        d.path("p.toml"),
        "[[class]]\nname = \"dns\"\nmatch = \"udp port 53\"\ndelay = \"50ms\"\n",
    )
    .unwrap();
    std::fs::write(d.path("s.txt"), "500ms --class dns \"--delay 80ms\"\n").unwrap();
    ok(&replay(&d, &["--config", &d.s("p.toml"), "--schedule", &d.s("s.txt")]));
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(d.path("stats.json")).unwrap()).unwrap();
    assert_eq!(
        s["schedule"],
        serde_json::json!([{"at_ns": 500_000_000u64, "class": "dns", "path": "delay 80ms"}])
    );
    let out = read_capture(&d.path("out.pcap")).unwrap();
    let frames = two_flows();
    let half = Nanos::from_secs(1) + Nanos::from_millis(500);
    for (t, _, f) in &out {
        let arrived = frames[seq(f) as usize].0;
        let want = match (dport(f), arrived < half) {
            (53, true) => Nanos::from_millis(50),
            (53, false) => Nanos::from_millis(80),
            _ => Nanos::ZERO,
        };
        assert_eq!(*t - arrived, want, "frame {}", seq(f));
    }
}

#[test]
fn bad_classes_are_refused_with_one_line() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), two_flows()).unwrap();
    let (i, o) = (d.s("in.pcap"), d.s("out.pcap"));
    for (args, says) in [
        (vec!["--class", "tcp prot 80", "--delay 1ms"], "at 5"),
        (vec!["--class", "udp", "--delay 1x"], "--class \"udp\""),
        (vec!["--class", "udp"], "FLAGS"),
        (vec!["--class", "gateway snow", "--delay 1ms"], "gateway"),
    ] {
        let mut all = vec!["replay", &i, &o];
        all.extend(args);
        let e = refused(&d, &all, 2);
        assert!(e.contains(says), "{e}");
    }
    // A config file's table is named as such, with or without a name, not as --class.
    for (table, says) in [
        ("name = \"web\"\n", "class web (a config file's [[class]] table), its match"),
        ("", "class class1 (a config file's [[class]] table), its match"),
    ] {
        std::fs::write(
            d.path("c.toml"),
            format!("[[class]]\n{table}match = \"tcp prot 80\"\ndelay = \"1ms\"\n"),
        )
        .unwrap();
        let e = refused(&d, &["replay", &i, &o, "--config", &d.s("c.toml")], 2);
        assert!(e.contains(says) && e.contains("at 5") && !e.contains("--class"), "{e}");
    }
    std::fs::write(d.path("s.txt"), "1s --class nosuch \"--delay 1ms\"\n").unwrap();
    let e = refused(&d, &["replay", &i, &o, "--class", "udp", "--delay 1ms", "--schedule", &d.s("s.txt")], 2);
    assert!(e.contains("line 1") && e.contains("nosuch") && e.contains("class1"), "{e}");
}

/// A frame of the mixed capture: `kind` 0 UDP to port 53, 1 UDP to 9000, 2 TCP to
/// 10.0.0.3:443, 3 IPv6 UDP, 4 ARP.
fn mixed_frame(kind: u64, i: u64) -> Vec<u8> {
    let mut f = flow_frame(if kind == 0 { 53 } else { 9000 }, 120, i);
    match kind {
        2 => {
            f[23] = 6;
            f[30..34].copy_from_slice(&[10, 0, 0, 3]);
            f[36..38].copy_from_slice(&443u16.to_be_bytes());
            f[46] = 0x50;
        }
        3 => {
            let mut v6 = f[..14].to_vec();
            v6[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            let mut h = vec![0u8; 40];
            h[0] = 0x60;
            h[4..6].copy_from_slice(&16u16.to_be_bytes());
            h[6] = 17;
            h[7] = 64;
            h[23] = 1;
            h[39] = 2;
            v6.extend_from_slice(&h);
            v6.extend_from_slice(&[0, 9, 0, 53, 0, 16, 0, 0]);
            v6.extend_from_slice(&i.to_be_bytes());
            f = v6;
        }
        4 => {
            f.truncate(14);
            f[0..6].copy_from_slice(&[0xff; 6]);
            f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
            f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 0, 1]);
            f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 10, 0, 0, 3]);
            f.extend_from_slice(&[0; 18]);
        }
        _ => {}
    }
    f
}

/// The frames of each class are exactly those tcpdump prints for its filter: each filter as a
/// class that drops everything it takes, the frames missing from the output against
/// `tcpdump -r` on the input (frames told apart by their timestamps).
#[test]
fn a_class_takes_exactly_what_tcpdump_prints() {
    if std::process::Command::new("tcpdump").arg("--version").output().is_err() {
        assert!(std::env::var("PATHEM_REQUIRE_LIVE").as_deref() != Ok("1"), "tcpdump is required");
        println!("SKIPPED: tcpdump not installed");
        return;
    }
    let d = Dir::new();
    // Frame i at i ms after 1 s: its timestamp names it.
    let frames: Vec<_> = (0..200u64)
        .map(|i| (Nanos::from_secs(1) + Nanos::from_millis(i), mixed_frame(i * 7 % 5, i)))
        .collect();
    write_capture(&d.path("in.pcap"), frames.clone()).unwrap();
    let name = |t: Nanos| (t.as_nanos() / 1_000_000 - 1000) as usize;
    for filter in [
        "udp port 53",
        "tcp port 443",
        "host 10.0.0.3",
        "not udp",
        "udp and dst port 9000",
        "ip6",
        "arp or ip6 and udp",
        "ip[9] = 6 or ether broadcast",
        "greater 100 and not tcp",
        "vlan",
    ] {
        ok(&replay(&d, &["--class", filter, "--loss 100%"]));
        let kept: std::collections::BTreeSet<usize> =
            read_capture(&d.path("out.pcap")).unwrap().iter().map(|(t, _, _)| name(*t)).collect();
        let taken: Vec<usize> = (0..frames.len()).filter(|i| !kept.contains(i)).collect();
        let out = std::process::Command::new("tcpdump")
            .args(["-r", &d.s("in.pcap"), "-n", "-tt", filter])
            .output()
            .unwrap();
        assert!(out.status.success(), "tcpdump {filter}: {}", String::from_utf8_lossy(&out.stderr));
        let printed: Vec<usize> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.parse::<f64>().ok())
            .map(|t| ((t - 1.0) * 1000.0).round() as usize)
            .collect();
        assert_eq!(taken, printed, "{filter}");
    }
}

/// The examples the package ships stay valid: the config file and the schedule replay.
#[test]
fn the_shipped_examples_are_accepted() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), two_flows()).unwrap();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/");
    let (config, schedule) = (format!("{root}path.toml"), format!("{root}schedule.txt"));
    let out = replay(&d, &["--config", &config, "--schedule", &schedule]);
    ok(&out);
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("stats.json")).unwrap()).unwrap();
    let names: Vec<&str> =
        s["classes"].as_array().unwrap().iter().map(|c| c["class"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "dns", "satellite"]);
    assert!(
        s["classes"][1]["stats"]["rx_packets"].as_u64().unwrap() > 0,
        "port 53 frames reach the dns class"
    );
}
