//! What `matches` costs per frame: run with
//! `cargo test --release -p pathem-filter --test cost -- --ignored --nocapture`.

use pathem_filter::Filter;
use std::hint::black_box;
use std::time::Instant;

/// An IPv4 UDP frame 10.0.0.1:5353 -> 10.0.0.2:53, 60 bytes.
fn udp_frame() -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    let mut ip = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
    ip.extend_from_slice(&[0x14, 0xe9, 0x00, 0x35, 0, 8, 0, 0]);
    f.extend_from_slice(&ip);
    f.resize(60, 0);
    f
}

/// The best of several rounds: the machine may be busy with other work.
fn ns_per_call(f: &Filter, frame: &[u8]) -> f64 {
    let n = 2_000_000u32;
    let mut best = f64::MAX;
    for _ in 0..7 {
        let start = Instant::now();
        let mut hits = 0u32;
        for _ in 0..n {
            hits += u32::from(f.matches(black_box(frame), black_box(60)));
        }
        black_box(hits);
        best = best.min(start.elapsed().as_nanos() as f64 / f64::from(n));
    }
    best
}

#[test]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
fn cost_per_frame() {
    let frame = udp_frame();
    for text in [
        "",
        "ip",
        "host 10.0.0.3",
        "udp port 53",
        "tcp port 80",
        "ip[1] & 0xfc == 0xb8",
        "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn",
        "udp[2:2] / 2 = 26",
        "vlan 10 and host 10.0.0.1",
        "udp",
        "ip and udp",
        "ip[9] = 17",
        "udp src port 5353",
        "udp dst port 53",
        "ip6 or ip",
        "ip[6:2] & 0x1fff = 0",
        "udp and ip[6:2] & 0x1fff = 0",
        "ip[6:2] & 0x1fff = 0 and ip[23] = 0",
        "udp[0:2] = 5353",
    ] {
        let f = Filter::compile(text).unwrap();
        println!("{:>48}: {:5.1} ns, match {}", text, ns_per_call(&f, &frame), f.matches(&frame, 60));
    }
    let eight: Vec<Filter> =
        ["host 10.0.0.3", "tcp port 80", "port 443", "icmp", "ip6", "arp", "vlan 10", "net 192.168.0.0/16"]
            .iter()
            .map(|t| Filter::compile(t).unwrap())
            .collect();
    let last = Filter::compile("udp port 53").unwrap();
    let n = 1_000_000u32;
    let mut best = f64::MAX;
    for _ in 0..7 {
        let start = Instant::now();
        let mut hits = 0usize;
        for _ in 0..n {
            let fr = black_box(&frame[..]);
            hits += eight.iter().position(|f| f.matches(fr, 60)).unwrap_or_else(|| {
                if last.matches(fr, 60) {
                    8
                } else {
                    9
                }
            });
        }
        black_box(hits);
        best = best.min(start.elapsed().as_nanos() as f64 / f64::from(n));
    }
    println!("8 non-matching filters then a matching one: {best:.1} ns");
}
