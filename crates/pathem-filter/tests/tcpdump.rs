//! Ground truth: the frames each filter accepts, against what tcpdump prints for the same
//! capture (frame N carries the timestamp N seconds; `tcpdump -tt` prints it first). Without tcpdump the test prints `SKIPPED: tcpdump not installed` (and fails when
//! PATHEM_REQUIRE_LIVE=1).

use pathem_filter::Filter;
use std::collections::BTreeSet;
use std::process::Command;

fn eth(ty: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ty.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn ip4(proto: u8, src: [u8; 4], dst: [u8; 4], frag: u16, ihl: u8, l4: &[u8]) -> Vec<u8> {
    let hl = 4 * usize::from(ihl);
    let mut h = vec![0u8; hl];
    h[0] = 0x40 | ihl;
    h[2..4].copy_from_slice(&((hl + l4.len()) as u16).to_be_bytes());
    h[6..8].copy_from_slice(&frag.to_be_bytes());
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    h.extend_from_slice(l4);
    eth(0x0800, &h)
}

fn ip6(nh: u8, l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 40];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
    h[6] = nh;
    h[7] = 64;
    h[23] = 1;
    h[39] = 2;
    h.extend_from_slice(l4);
    eth(0x86dd, &h)
}

fn ports(sp: u16, dp: u16, len: usize) -> Vec<u8> {
    let mut l4 = vec![0u8; len];
    l4[0..2].copy_from_slice(&sp.to_be_bytes());
    l4[2..4].copy_from_slice(&dp.to_be_bytes());
    l4
}

fn arp(ty: u16, spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1];
    a.extend_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    a.extend_from_slice(&spa);
    a.extend_from_slice(&[0; 6]);
    a.extend_from_slice(&tpa);
    eth(ty, &a)
}

const A: [u8; 4] = [10, 0, 0, 1];
const B: [u8; 4] = [10, 0, 0, 2];
const C: [u8; 4] = [192, 168, 1, 7];

fn frames() -> Vec<Vec<u8>> {
    let mut v = vec![
        ip4(6, A, B, 0, 5, &ports(40000, 80, 20)),
        ip4(6, B, A, 0, 5, &ports(80, 40000, 20)),
        ip4(6, A, C, 0, 6, &ports(22, 443, 20)),
        ip4(17, A, B, 0, 5, &ports(5353, 53, 8)),
        ip4(17, C, A, 0, 5, &ports(123, 123, 8)),
        ip4(1, A, B, 0, 5, &[8, 0, 0, 0, 0, 0, 0, 0]),
        ip4(132, A, B, 0, 5, &ports(80, 9999, 12)),
        ip4(6, A, B, 0x2000, 5, &ports(1000, 80, 20)),
        ip4(6, A, B, 0x0010, 5, &ports(1000, 80, 20)),
        ip4(17, B, C, 0x00b9, 5, &ports(53, 53, 8)),
        ip6(6, &ports(40000, 80, 20)),
        ip6(17, &ports(53, 5353, 8)),
        ip6(58, &[128, 0, 0, 0, 0, 0, 0, 0]),
        ip6(132, &ports(22, 23, 12)),
        ip6(44, &[6, 0, 0, 1, 0, 0, 0, 0, 0x1f, 0x90, 0x00, 0x50, 0, 0, 0, 0]),
        arp(0x0806, A, B),
        arp(0x0806, C, A),
        arp(0x8035, B, C),
        eth(0x9000, &[0; 46]),
    ];
    // VLAN-tagged IPv4 TCP to port 80: untagged-only filters see ether type 0x8100.
    let mut tagged = ip4(6, A, B, 0, 5, &ports(40000, 80, 20));
    tagged.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
    v.push(tagged);
    // IPv6 fragment header carrying ICMPv6; IPv6 UDP whose ports are beyond the capture.
    v.push(ip6(44, &[58, 0, 0, 1, 0, 0, 0, 0, 128, 0, 0, 0]));
    v.push(ip6(17, &[]));
    // Broadcast ARP and multicast IPv4 UDP (01:00:5e:00:00:fb).
    let mut bc = arp(0x0806, B, C);
    bc[..6].fill(0xff);
    v.push(bc);
    let mut mc = ip4(17, A, [224, 0, 0, 251], 0, 5, &ports(5353, 5353, 8));
    mc[..6].copy_from_slice(&[0x01, 0, 0x5e, 0, 0, 0xfb]);
    v.push(mc);
    // Truncated: an IPv4 TCP frame cut in its header, one cut before the ports, one just an
    // Ethernet header's start.
    let t = ip4(6, A, B, 0, 5, &ports(40000, 80, 20));
    v.push(t[..30].to_vec());
    v.push(t[..35].to_vec());
    v.push(t[..10].to_vec());
    // Long frame.
    v.push(ip4(17, A, B, 0, 5, &ports(9, 9, 1400)));
    v
}

/// Classic pcap, microseconds, linktype 1; frames stored whole except the truncated ones,
/// which keep their original length on the wire.
fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) -> Vec<u32> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    let mut wire = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let wl = if f.len() < 40 { 54 } else { f.len() as u32 };
        wire.push(wl);
        out.extend_from_slice(&(i as u32 + 1).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&wl.to_le_bytes());
        out.extend_from_slice(f);
    }
    std::fs::write(path, out).unwrap();
    wire
}

const FILTERS: &[&str] = &[
    "",
    "ip",
    "ip6",
    "arp",
    "rarp",
    "tcp",
    "udp",
    "icmp",
    "sctp",
    "not ip",
    "! tcp",
    "host 10.0.0.1",
    "src host 10.0.0.1",
    "dst host 10.0.0.1",
    "ip host 10.0.0.2",
    "ip src host 192.168.1.7",
    "arp host 10.0.0.1",
    "arp dst host 10.0.0.2",
    "rarp host 192.168.1.7",
    "host 192.168.1.7",
    "port 80",
    "port http",
    "src port 80",
    "dst port 80",
    "tcp port 80",
    "udp port 53",
    "udp port domain",
    "sctp port 80",
    "port 53",
    "icmp6",
    "broadcast",
    "ether broadcast",
    "multicast",
    "ether multicast and not broadcast",
    "ip proto 17",
    "ip6 proto 58",
    "ip6 proto 6",
    "proto 132",
    "ip proto 1 or ip6 proto 17",
    "portrange 50-80",
    "tcp portrange 20-23",
    "udp dst portrange 100-200",
    "src and dst port 123",
    "src or dst port 22",
    "src and dst host 10.0.0.1",
    "port domain",
    "port ntp",
    "port https",
    "tcp port https",
    "udp port 80",
    "port 22",
    "tcp port 443 or udp port 123",
    "port 123 and host 10.0.0.1",
    "tcp and not port 80",
    "less 60",
    "greater 100",
    "less 54",
    "greater 54",
    "ip or arp and udp",
    "arp or ip and tcp",
    "(arp or ip) and not tcp",
    "not (tcp or udp)",
    "ip6 and tcp",
    "ip6 and udp port 5353",
    "tcp && port 80 || arp",
    "not ip6 and not arp",
    "src port 40000 or dst port 40000",
];

#[test]
fn frames_accepted_are_those_tcpdump_prints() {
    if Command::new("tcpdump").arg("--version").output().is_err() {
        if std::env::var("PATHEM_REQUIRE_LIVE").as_deref() == Ok("1") {
            panic!("tcpdump not installed and PATHEM_REQUIRE_LIVE=1");
        }
        println!("SKIPPED: tcpdump not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("mix.pcap");
    let frames = frames();
    let wire = write_pcap(&cap, &frames);
    let mut bad = Vec::new();
    for text in FILTERS {
        let out = Command::new("tcpdump")
            .arg("-r")
            .arg(&cap)
            .args(["-nn", "-tt"])
            .args((!text.is_empty()).then_some(*text))
            .output()
            .unwrap();
        assert!(out.status.success(), "tcpdump {text:?}: {}", String::from_utf8_lossy(&out.stderr));
        let theirs: BTreeSet<usize> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split('.').next()?.parse().ok())
            .collect();
        let f = Filter::compile(text).unwrap();
        let ours: BTreeSet<usize> = frames
            .iter()
            .zip(&wire)
            .enumerate()
            .filter(|(_, (fr, w))| f.matches(fr, **w))
            .map(|(i, _)| i + 1)
            .collect();
        if ours != theirs {
            bad.push(format!("{text:?}: pathem {ours:?}, tcpdump {theirs:?}"));
        }
    }
    println!("{} filters compared against tcpdump over {} frames", FILTERS.len(), frames.len());
    assert!(bad.is_empty(), "differences:\n{}", bad.join("\n"));
}
