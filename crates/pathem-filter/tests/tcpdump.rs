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

/// An IPv4 packet (without the Ethernet header): TOS, fragment field, IHL.
fn ip4_pkt(proto: u8, src: [u8; 4], dst: [u8; 4], tos: u8, frag: u16, ihl: u8, l4: &[u8]) -> Vec<u8> {
    let hl = 4 * usize::from(ihl);
    let mut h = vec![0u8; hl];
    h[0] = 0x40 | ihl;
    h[1] = tos;
    h[2..4].copy_from_slice(&((hl + l4.len()) as u16).to_be_bytes());
    h[6..8].copy_from_slice(&frag.to_be_bytes());
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    h.extend_from_slice(l4);
    h
}

fn ip4(proto: u8, src: [u8; 4], dst: [u8; 4], frag: u16, ihl: u8, l4: &[u8]) -> Vec<u8> {
    eth(0x0800, &ip4_pkt(proto, src, dst, 0, frag, ihl, l4))
}

fn ip6_pkt(nh: u8, src: [u8; 16], dst: [u8; 16], l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 40];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
    h[6] = nh;
    h[7] = 64;
    h[8..24].copy_from_slice(&src);
    h[24..40].copy_from_slice(&dst);
    h.extend_from_slice(l4);
    h
}

fn ip6(nh: u8, l4: &[u8]) -> Vec<u8> {
    eth(0x86dd, &ip6_pkt(nh, S6, D6, l4))
}

fn ports(sp: u16, dp: u16, len: usize) -> Vec<u8> {
    let mut l4 = vec![0u8; len];
    l4[0..2].copy_from_slice(&sp.to_be_bytes());
    l4[2..4].copy_from_slice(&dp.to_be_bytes());
    l4
}

/// A TCP header with these flags.
fn tcp(sp: u16, dp: u16, flags: u8) -> Vec<u8> {
    let mut t = ports(sp, dp, 20);
    t[12] = 0x50;
    t[13] = flags;
    t
}

fn icmp(ty: u8, code: u8) -> Vec<u8> {
    vec![ty, code, 0, 0, 0, 1, 0, 1]
}

fn arp(ty: u16, spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1];
    a.extend_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    a.extend_from_slice(&spa);
    a.extend_from_slice(&[0; 6]);
    a.extend_from_slice(&tpa);
    eth(ty, &a)
}

/// `inner` (an Ethernet frame) with a VLAN tag (TPID, ID) inserted after the MACs.
fn tag(inner: Vec<u8>, tpid: u16, id: u16) -> Vec<u8> {
    let mut f = inner;
    let mut t = tpid.to_be_bytes().to_vec();
    t.extend_from_slice(&id.to_be_bytes());
    f.splice(12..12, t);
    f
}

const A: [u8; 4] = [10, 0, 0, 1];
const B: [u8; 4] = [10, 0, 0, 2];
const C: [u8; 4] = [192, 168, 1, 7];
const N: [u8; 4] = [172, 16, 5, 4];
const S6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const D6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

fn frames() -> Vec<Vec<u8>> {
    let mut v = vec![
        // 1-3: IPv4 TCP: SYN; SYN-ACK with DSCP EF (tos 0xb8); IHL 6 with ECT(0).
        ip4(6, A, B, 0, 5, &tcp(40000, 80, 0x02)),
        eth(0x0800, &ip4_pkt(6, B, A, 0xb8, 0, 5, &tcp(80, 40000, 0x12))),
        eth(0x0800, &ip4_pkt(6, A, C, 0x02, 0, 6, &tcp(22, 443, 0x18))),
        // 4-5: IPv4 UDP; the second with CE (tos 0x03).
        ip4(17, A, B, 0, 5, &ports(5353, 53, 8)),
        eth(0x0800, &ip4_pkt(17, C, A, 0x03, 0, 5, &ports(123, 123, 8))),
        // 6-8: ICMP echo, echo reply, unreachable.
        ip4(1, A, B, 0, 5, &icmp(8, 0)),
        ip4(1, B, A, 0, 5, &icmp(0, 0)),
        ip4(1, C, A, 0, 5, &icmp(3, 3)),
        // 9: SCTP.
        ip4(132, A, B, 0, 5, &ports(80, 9999, 12)),
        // 10-12: fragments: first (MF), a later TCP one, a later UDP one.
        ip4(6, A, B, 0x2000, 5, &tcp(1000, 80, 0x10)),
        ip4(6, A, B, 0x0010, 5, &tcp(1000, 80, 0x10)),
        ip4(17, B, C, 0x00b9, 5, &ports(53, 53, 8)),
        // 13-16: IPv6 TCP SYN, UDP, ICMPv6 echo request, SCTP.
        ip6(6, &tcp(40000, 80, 0x02)),
        ip6(17, &ports(53, 5353, 8)),
        ip6(58, &icmp(128, 0)),
        ip6(132, &ports(22, 23, 12)),
        // 17-18: IPv6 fragment header before TCP (8080 -> 80) and before ICMPv6 echo reply.
        ip6(44, &[&[6, 0, 0, 1, 0, 0, 0, 0][..], &tcp(8080, 80, 0x10)].concat()),
        ip6(44, &[&[58, 0, 0, 1, 0, 0, 0, 0][..], &icmp(129, 0)].concat()),
        // 19: IPv6 UDP whose ports are beyond the capture.
        ip6(17, &[]),
        // 20-22: ARP, ARP, RARP.
        arp(0x0806, A, B),
        arp(0x0806, C, A),
        arp(0x8035, B, C),
        // 23: ether type 0x9000 (loopback).
        eth(0x9000, &[0; 46]),
        // 24-25: 802.3 with LLC: STP (SAP 0x42) and SAP 0x06.
        eth(46, &[&[0x42, 0x42, 0x03][..], &[0; 43]].concat()),
        eth(46, &[&[0x06, 0x06, 0x03][..], &[0; 43]].concat()),
        // 26-27: 802.1Q VLAN 5 IPv4 TCP to port 80, VLAN 10 IPv4 UDP to 53.
        tag(ip4(6, A, B, 0, 5, &tcp(40000, 80, 0x02)), 0x8100, 5),
        tag(ip4(17, A, C, 0, 5, &ports(1234, 53, 8)), 0x8100, 10),
        // 28: 802.1ad 10 over 802.1Q 20, IPv4 TCP.
        tag(tag(ip4(6, A, B, 0, 5, &tcp(22, 40000, 0x10)), 0x8100, 20), 0x88a8, 10),
        // 29: VLAN 7 IPv6 UDP.
        tag(ip6(17, &ports(53, 5353, 8)), 0x8100, 7),
        // 30: 0x9100 30 over 0x8100 40, IPv6 TCP.
        tag(tag(ip6(6, &tcp(443, 50000, 0x11)), 0x8100, 40), 0x9100, 30),
        // 31: VLAN 10 ARP.
        tag(arp(0x0806, A, C), 0x8100, 10),
    ];
    // 32: broadcast ARP; 33: multicast IPv4 UDP (01:00:5e:00:00:fb); 34: IPv6 multicast
    // ICMPv6 (33:33:00:00:00:01); 35: DHCP to 255.255.255.255 from 0.0.0.0.
    let mut bc = arp(0x0806, B, C);
    bc[..6].fill(0xff);
    v.push(bc);
    let mut mc = ip4(17, A, [224, 0, 0, 251], 0, 5, &ports(5353, 5353, 8));
    mc[..6].copy_from_slice(&[0x01, 0, 0x5e, 0, 0, 0xfb]);
    v.push(mc);
    let mut ff02 = [0u8; 16];
    ff02[0] = 0xff;
    ff02[1] = 0x02;
    ff02[15] = 1;
    let mut m6 = eth(0x86dd, &ip6_pkt(58, S6, ff02, &icmp(135, 0)));
    m6[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    v.push(m6);
    let mut dhcp = ip4(17, [0; 4], [255; 4], 0, 5, &ports(68, 67, 300));
    dhcp[..6].fill(0xff);
    v.push(dhcp);
    // 36-38: truncated: an IPv4 TCP frame cut in its header, one cut before the ports, one
    // just an Ethernet header's start.
    let t = ip4(6, A, B, 0, 5, &tcp(40000, 80, 0x02));
    v.push(t[..30].to_vec());
    v.push(t[..35].to_vec());
    v.push(t[..10].to_vec());
    // 39: long frame (1514 bytes).
    v.push(ip4(17, A, B, 0, 5, &ports(9, 9, 1472)));
    // 40-42: TCP FIN-ACK, RST, ECE-CWR-SYN.
    v.push(ip4(6, B, A, 0, 5, &tcp(80, 40000, 0x11)));
    v.push(ip4(6, C, B, 0, 5, &tcp(443, 1234, 0x04)));
    v.push(eth(0x0800, &ip4_pkt(6, A, C, 0x01, 0, 5, &tcp(50000, 443, 0xc2))));
    // 43: IGMP; 44: GRE; 45: IHL 15 TCP from 172.16.5.4; 46: Ethernet header only (IPv4).
    v.push(ip4(2, A, [224, 0, 0, 1], 0, 6, &[0x11, 0, 0, 0, 0, 0, 0, 0]));
    v.push(ip4(47, N, B, 0, 5, &[0; 24]));
    v.push(ip4(6, N, [10, 1, 2, 3], 0, 15, &tcp(2222, 8080, 0x02)));
    v.push(eth(0x0800, &[]));
    // 47: a MAC-addressed frame from 00:1b:21:0a:0b:0c to aa:bb:cc:dd:ee:ff, IPv4 UDP.
    let mut mac = ip4(17, C, N, 0, 5, &ports(161, 162, 8));
    mac[..12].copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00, 0x1b, 0x21, 0x0a, 0x0b, 0x0c]);
    v.push(mac);
    // 48: IPv6 hop-by-hop options before TCP (libpcap looks past a fragment header only);
    // 49: VLAN 10 ICMP echo; 50: VLAN 5 ICMPv6 echo with a fragment header.
    v.push(ip6(0, &[&[6, 0, 0, 0, 0, 0, 0, 0][..], &tcp(40000, 80, 0x02)].concat()));
    v.push(tag(ip4(1, C, B, 0, 5, &icmp(8, 0)), 0x8100, 10));
    v.push(tag(ip6(44, &[&[58, 0, 0, 1, 0, 0, 0, 0][..], &icmp(128, 0)].concat()), 0x8100, 5));
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
        let wl = if f.len() < 40 && f.len() != 14 { 54 } else { f.len() as u32 };
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
    "icmp6",
    "igmp",
    "pim or vrrp or ah or esp",
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
    "host 10.0.0.3",
    "host 10.0.0.1 or 10.0.0.2",
    "src host 10.0.0.1 or 10.0.0.2",
    "0 - ip[9] = 4294967290",
    "ip[0] + tcp[0] = 0x45",
    "ip[0] = tcp[0] - 0x59",
    "ether[ip[0] - 0x40] = 0x45",
    "tcp[ip[0] & 0xf] = 0x50",
    "host 10.0.0.1 and not 10.0.0.2",
    "src and dst host 10.0.0.1",
    "src or dst host 192.168.1.7",
    "host 2001:db8::1",
    "ip6 dst host 2001:db8::2",
    "host ff02::1",
    "net 2001:db8::/32",
    "ip6 src net 2001:db8::/127",
    "net 10.0.0.0/8",
    "net 10",
    "net 10.0.0.0 mask 255.255.255.254",
    "src net 172.16.0.0/12",
    "dst net 192.168",
    "host 10.0",
    "ip net 224.0.0.0/4",
    "net 0.0.0.0/0",
    "port 80",
    "port http",
    "src port 80",
    "dst port 80",
    "tcp port 80",
    "udp port 53",
    "udp port domain",
    "sctp port 80",
    "port 53",
    "port 80 or 443",
    "tcp port 80 or 443 and not 22",
    "tcp dst port 80 or 443",
    "port 23 or 22 or 8080",
    "portrange 50-80",
    "tcp portrange 20-23",
    "udp dst portrange 100-200",
    "portrange 40000-65535",
    "src and dst port 123",
    "src or dst port 22",
    "port https",
    "tcp port https",
    "udp port 80",
    "udp port snmp",
    "port 123 and host 10.0.0.1",
    "tcp and not port 80",
    "less 60",
    "greater 100",
    "less 54",
    "greater 54",
    "greater 1514",
    "len > 100",
    "len <= 60 and ip",
    "len - 14 = 1500",
    "ip or arp and udp",
    "arp or ip and tcp",
    "(arp or ip) and not tcp",
    "not (tcp or udp)",
    "ip6 and tcp",
    "ip6 and udp port 5353",
    "tcp && port 80 || arp",
    "not ip6 and not arp",
    "src port 40000 or dst port 40000",
    "broadcast",
    "ether broadcast",
    "multicast",
    "ether multicast and not broadcast",
    "ip multicast",
    "ip6 multicast",
    "ip broadcast",
    "ether host 02:00:00:00:00:01",
    "ether src 00:1b:21:0a:0b:0c",
    "ether dst aa-bb-cc-dd-ee-ff",
    "ether host aabb.ccdd.eeff",
    "ether dst aabbccddeeff or 2:0:0:0:0:1",
    "ether src 2:0:0:0:0:2 and ip6",
    "ether src and dst 02:00:00:00:00:01",
    "ether proto 0x0800",
    "ether proto \\ip",
    "ether proto \\ip6",
    "ether proto \\arp",
    "ether proto \\rarp",
    "ether proto \\loopback",
    "ether proto 0x9000 or ether proto 0x8035",
    "ether proto 0x42",
    "ether proto \\stp",
    "ether proto 6",
    "ether proto 0x8100",
    "ip proto 17",
    "ip6 proto 58",
    "ip6 proto 6",
    "proto 132",
    "ip proto 1 or ip6 proto 17",
    "ip proto \\tcp",
    "ip proto gre",
    "proto \\udp",
    "ip6 proto ipv6-icmp",
    "ip proto 6 and ip[6:2] & 0x1fff != 0",
    "ip[6:2] & 0x1fff != 0",
    "ip[6:2] & 0x1fff = 0 and tcp",
    "ip[6] & 0x20 != 0",
    "ip[0] & 0xf > 5",
    "ip[1] & 0xfc == 0xb8",
    "ip[1] & 0x3 = 3",
    "ip[1] & 0x3 != 0",
    "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn",
    "tcp[tcpflags] & tcp-syn != 0",
    "tcp[13] & tcp-rst != 0 or tcp[13] & tcp-fin != 0",
    "tcp[tcpflags] & (tcp-ece|tcp-cwr) = tcp-ece|tcp-cwr",
    "tcp[tcpflags] & (tcp-push|tcp-urg) != 0",
    "tcp[0:2] = 22",
    "tcp[2:2] > 1023",
    "udp[2:2] = 53",
    "udp[0:4] = 0x14e90035",
    "icmp[icmptype] == icmp-echo",
    "icmp[icmptype] = icmp-echoreply or icmp[icmptype] = icmp-unreach",
    "icmp[icmpcode] = 3",
    "icmp6[icmp6type] == icmp6-echo",
    "icmp6[icmp6type] = icmp6-neighborsolicit",
    "icmp6[0] > 127",
    "sctp[2:2] = 9999",
    "igmp[0] = 0x11",
    "ether[12:2] = 0x8100",
    "ether[0] & 1 = 1",
    "ether[len - 1] = 0",
    "arp[7] = 1",
    "rarp[0:2] = 1",
    "ip6[6] = 44",
    "ip6[40] = 58",
    "ip[9] / 2 = 3",
    "ip[9] % 5 = 2",
    "ip[9] % 5 + 1 = 2",
    "ip[2:2] / (ip[9] - 6) > 1",
    "ip[2:2] % (ip[9] - 17) = 0",
    "ip[2:2] - 20 > 100",
    "ip[9] * 2 + 1 = 13",
    "-ip[9] = 4294967290",
    "ip[9] ^ 1 = 7",
    "ip[9] << 1 >> 1 = 6",
    "ip[8] | 1 = 65 and ip[8] & 0x40 = 64",
    "ip[0] & 0xf0 = 0x40 && ip[9] = 0x06",
    "ip[12:4] = 0x0a000001",
    "ip[16:4] & 0xffffff00 = 0x0a000000",
    "ip[9] = 010",
    "ip[100] = 0",
    "tcp[100] = 0 or udp",
    "(ip[0]) & 0xf = 6",
    "1 = 1",
    "len != len",
    "vlan",
    "vlan 5",
    "vlan 10",
    "vlan and ip",
    "vlan and ip6",
    "vlan and udp port 53",
    "ip or vlan and ip",
    "vlan or ip",
    "vlan 10 and host 10.0.0.1",
    "vlan 10 and host 192.168.1.7",
    "vlan and vlan",
    "vlan and vlan and tcp",
    "vlan 10 and vlan 20",
    "vlan 30 and vlan 40 and ip6",
    "vlan and vlan and ip6 and tcp port 443",
    "vlan and arp",
    "vlan and tcp[tcpflags] & tcp-syn != 0",
    "vlan and ip[9] = 17",
    "not vlan",
    "vlan and not ip",
    "tcp or vlan and tcp",
    "(vlan and ip) or ip",
    "ether[12:2] = 0x88a8 and vlan and vlan 20",
    "vlan and ether proto 0x0800",
    "vlan and src host 10.0.0.1 or dst host 10.0.0.3",
    "net 10.0.0.0 mask 255.0.0.1",
    "host (10.0.0.1 or 10.0.0.2)",
    "tcp port (80 or 443)",
    "dst port (53 or (123 and not 22))",
    "dst port ((53)) or ((80))",
    "port 22 or (not (443 or 80))",
    "host 10.0.0.1 and (port 80) or 22",
    "not not tcp",
    "!tcp",
    "ip and not (port 80 or 22)",
    "tcp[13]&tcp-syn!=0",
    "ip[9]=6&&tcp[2:2]=80||udp",
    "ether host 02:00:00:00:00:01 or 02:00:00:00:00:02",
    "arp and src host 10.0.0.1 or 10.0.0.2",
    "udp and port 53 or 123",
    "port 53 and not 5353",
    "portrange 1-100 or 50000-60000",
    "net 10.0.0.0/30 or 192.168.1.0/24",
    "ip6 net 2001:db8::/64 and tcp",
    "ip proto 17 or 6",
    "proto 6 or 17 or 58",
    "ether proto 0x0806 or 0x8035",
    "(tcp) or (udp)",
    "((ip))",
    "(ip[9] + 1) * 2 = 14",
    "((ip[9])) = 6",
    "(1) = 1",
    "ip[9] - 1 - 1 = 4",
    "ip[9] / 3 * 3 = 6",
    "ip[9] & 4 | 2 = 6",
    "ip[9] | 2 & 4 = 6",
    "ip[9] ^ 1 + 1 = 4",
    "ip[9] + 1 ^ 1 = 6",
    "ip[9] * 2 % 5 = 2",
    "1 << ip[9] >> ip[9] = 1",
    "ip[0] & 0xf << 2 = 20",
    "- ip[9] % 4 = 4294967294",
    "ip[9] - ip[9] = 0",
    // libpcap's optimizer folds a result of 0 and drops the load it no longer needs: a
    // zero divisor in it, or a frame too short for it, no longer rejects the frame.
    "0 / ip[1] = 0",
    "0 % ip[1] = 0",
    "tcp[100] & 0 = 0",
    "tcp[100] * 0 = 0",
    "0 >> tcp[0:4] = 0",
    "0 << udp[0] = 0 and udp",
    "tcp[100] = 1 or 1 = 1",
    "tcp[100] = 1 and 1 = 0 or tcp",
    // BPF adds offsets modulo 2^32.
    "icmp6[-34] = 58",
    "ip6[-2:2] = 0x86dd",
    "ip[-14:2] = 0x0800",
    "ip[4294967282:2] = 0x0800",
    "arp[-2:2] = 0x0806",
    "tcp[-1] = 6",
    // A load whose offset passes 2^32 at run time rejects the frame (BPF checks x + k without
    // wrapping); a constant index is folded into k first, modulo 2^32.
    "tcp[0xffffffe8] = 0",
    "tcp[-20] = 0x45",
    "ip[0 - ip[9]] = 0",
    "ip[1 - ip[0]] = 0",
    "ip[ip[2:2] - 1] = 0 and ip[2:2] = 0",
    "udp[0 - udp[0]] = 0 or tcp[4294967295 - tcp[0]] = 0",
    // A constant index inside arithmetic is folded as in a plain field test.
    "ip[-14:2] >> 8 = 8",
    "arp[-2:2] + 0 = 0x0806",
    "tcp[-20] >> 4 = 4",
    "tcp[-1] + 0 = 6",
    "ip[-(14):2] + 0 = 0x0800",
    // libpcap's 16 registers: 16 values at once pass, and a divisor or a shift is judged by
    // the constant its code starts with, then by what the optimizer proves; a shift of a
    // constant by 32 or more is folded to 0.
    "ip[0] ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 = 0x45",
    "1 << (16 + 16) = 0",
    "ip[0] & (1 << (30 + 10)) = 0",
    "ip[1] >> (16 * 2 + ip[0]) = 0",
    "ip[1] / (2 - 2 + ip[0]) = 1",
    "ip[1] / ip[1] = 1",
    "ip[1] / len = 0",
    // netbase: syslog is 514/udp and an alias of 514/tcp (shell).
    "port syslog",
    "tcp port syslog",
    "tcp[0:4] & 0xffff = 80",
    "ip[2:2] > 1000 and len > 1000",
    "icmp[0] = 8 or icmp6[0] = 128",
    "ether[6:4] = 0x00000002 and ether[10:2] = 2",
    "ether proto 0xfe or ether proto \\netbeui or ether proto \\iso",
    "igrp or carp",
    "vlan and portrange 50-60",
    "vlan 7 and udp port 53",
    "vlan 30 and vlan 40 and tcp port 443",
    "vlan and vlan and ip6 src host 2001:db8::1",
    "vlan and net 10.0.0.0/24",
    "vlan and ether host 02:00:00:00:00:01",
    "vlan and ether[12:2] = 0x8100",
    "vlan and ip[9] = 6 and tcp[13] & tcp-syn != 0",
    "vlan and udp[2:2] = 53",
    "vlan and icmp6[0] = 128 or icmp6[0] = 128",
    "vlan and ip6 multicast or ip multicast",
    "vlan and arp host 10.0.0.1",
    "vlan and ether proto \\arp",
    "vlan 10 or vlan 20",
    "vlan 10 and vlan 20 and ip and tcp[0:2] = 22",
    "not vlan 5 and tcp",
    "ip and len >= 60 and ip[2:2] + 14 = len",
    "udp and udp[4:2] = len - 34",
    "tcp[12] >> 4 = 5",
    "tcp[12] / 16 * 4 = 20 and tcp[tcpflags] = tcp-syn",
    "ip[0] & 0x0f * 4 = 24",
    "ip[9] != 6 and ip[9] != 17",
    "ip[9] < 6 or ip[9] >= 132",
    "ip[9] <= 2",
    "ip6 proto 0",
    "vlan and icmp[icmptype] = icmp-echo",
    "vlan 5 and icmp6",
    "vlan and ip6 proto 58",
    "vlan and icmp6[icmp6type] = icmp6-echo",
    "vlan and not icmp",
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
    let (mut none, mut all) = (0, 0);
    for text in FILTERS {
        let out = Command::new("tcpdump")
            .arg("-r")
            .arg(&cap)
            .args(["-nn", "-tt", "--"])
            .args((!text.is_empty()).then_some(*text))
            .output()
            .unwrap();
        if !out.status.success() {
            bad.push(format!(
                "{text:?}: tcpdump refuses it: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            continue;
        }
        let theirs: BTreeSet<usize> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split('.').next()?.parse().ok())
            .collect();
        let f = match Filter::compile(text) {
            Ok(f) => f,
            Err(e) => {
                bad.push(format!("{text:?}: pathem refuses it: {e}"));
                continue;
            }
        };
        let ours: BTreeSet<usize> = frames
            .iter()
            .zip(&wire)
            .enumerate()
            .filter(|(_, (fr, w))| f.matches(fr, **w))
            .map(|(i, _)| i + 1)
            .collect();
        none += usize::from(theirs.is_empty());
        all += usize::from(theirs.len() == frames.len());
        if ours != theirs {
            bad.push(format!("{text:?}: pathem {ours:?}, tcpdump {theirs:?}"));
        }
    }
    println!(
        "{} filters compared against tcpdump over {} frames ({none} match none, {all} match all)",
        FILTERS.len(),
        frames.len()
    );
    assert!(
        none >= 5 && all >= 2,
        "the capture should leave some filters matching nothing and some everything"
    );
    assert!(bad.is_empty(), "differences:\n{}", bad.join("\n"));
}

/// Filters tcpdump refuses (syntax and meaning): pathem must refuse each too.
const BAD: &[&str] = &[
    "tcp prot 80",
    "host",
    "10.0.0.1",
    "tcp and 80",
    "not 22",
    "(tcp",
    "tcp)",
    "tcp and",
    "and tcp",
    "port 99999",
    "port gopherx",
    "udp port http",
    "ip port 80",
    "ip proto tcp",
    "ether proto ip",
    "src proto 6",
    "src or 10.0.0.1",
    "net 10/8",
    "net 10.1.0.0/8",
    "net 10.0.0.1 mask 255.0.0.0",
    "net 10.0.0.0/33",
    "host 10.0.0.1/32",
    "host 2001:db8::/32",
    "net 2001:db8::1/32",
    "ip6 host 10.0.0.1",
    "ip host 2001:db8::1",
    "tcp host 10.0.0.1",
    "arp net 2001:db8::/32",
    "ether host 1",
    "ether host 10.0.0.1",
    "ether src 1:2:3:4:5",
    "host 02:00:00:00:00:01",
    "ip[0] / 0 = 1",
    "ip[0] % 0 = 1",
    "ip[0] << 32 = 1",
    "ip[0] << (16 + 16) = 0",
    "ip[0] >> (40 - 8) = 0",
    "ether[0:3] = 1",
    "ip[0] = 08",
    "udp[4294967296] = 1",
    "len-1 > 0",
    "ip[0] = 1/(1-1)",
    "1 = 1 = 1",
    "ip[0]",
    "len",
    "vlan 4096",
    "less",
    "greater x",
    "tcp proto 6",
    "arp proto 6",
    "ip6 broadcast",
    "arp multicast",
    "ether",
    "ip6 proto \\icmp6",
    "ip proto \\nosuchproto",
    "portrange 80-",
    "portrange 80-70000",
    "a # b",
    "()",
    "!",
    "tcp[0] = 1 and and",
    "ip and ()",
    "src src host 10.0.0.1",
    "host 10.0.0.1 10.0.0.2",
    "ether proto 0x10000 or",
    "port 80 and host",
    "ip6 and 2001:db8::2",
    "ip and 10.0.0.1",
    "ip and not 10.0.0.1",
    "host 10.0.0.1 and ((10.0.0.2 or 10.0.0.3))",
    "port 80 or ((443 or 22) or 53)",
    "ip[0] ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 = 0x45",
    "1+(1+(1+(1+(1+(1+(1+(1+(1+(1+(1+(1+(1+(1+(1+(1+(1)))))))))))))))) = 17",
    "ip[0] ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ 0 ^ ip[1] = 0x45",
    "ip[0] / (0 + ip[1]) = 1",
    "ip[0] >> (40 - ip[1]) = 0",
    "ip[1] / ip[0] = 1",
    "ip[1] >> ip[40] = 1",
    "ip[1] / -0 = 1",
    "ip[1] / (-ip[0]) = 1",
    "ip[1] >> (16 * 2) = 1",
    "ip[1] / (ip[0] - ip[0]) = 1",
    "ip[1] % (0 * 5) = 1",
    "ip[1] / (1 - 1) = 1",
    "ip[1] >> (32) = 1",
];

/// Filters whose words pathem refuses by name: each gives one line naming the word.
const REFUSED: &[(&str, &str)] = &[
    ("gateway 10.0.0.1", "gateway"),
    ("mpls", "mpls"),
    ("mpls 100 and ip", "mpls"),
    ("pppoed", "pppoed"),
    ("pppoes 5", "pppoes"),
    ("geneve", "geneve"),
    ("inbound", "inbound"),
    ("outbound", "outbound"),
    ("ifname eth0", "ifname"),
    ("on eth0", "on"),
    ("wlan host 02:00:00:00:00:01", "wlan"),
    ("decnet host 1.2", "decnet"),
    ("iso", "iso"),
    ("isis", "isis"),
    ("atalk", "atalk"),
    ("llc", "llc"),
    ("stp", "stp"),
    ("ipx", "ipx"),
    ("netbeui", "netbeui"),
    ("ip protochain 6", "protochain"),
    ("radio[0] = 1", "radio"),
    ("type mgt", "type"),
    ("tcp and ifindex 2", "ifindex"),
    ("vpi 1", "vpi"),
];

fn tcpdump_accepts(cap: &std::path::Path, text: &str) -> bool {
    let out = Command::new("tcpdump").arg("-r").arg(cap).args(["-nn", "--", text]).output().unwrap();
    out.status.success()
}

#[test]
fn filters_refused_are_those_tcpdump_refuses() {
    if Command::new("tcpdump").arg("--version").output().is_err() {
        if std::env::var("PATHEM_REQUIRE_LIVE").as_deref() == Ok("1") {
            panic!("tcpdump not installed and PATHEM_REQUIRE_LIVE=1");
        }
        println!("SKIPPED: tcpdump not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("mix.pcap");
    write_pcap(&cap, &frames());
    let mut bad = Vec::new();
    for text in BAD {
        if tcpdump_accepts(&cap, text) {
            bad.push(format!("{text:?}: tcpdump accepts it"));
        }
        if Filter::compile(text).is_ok() {
            bad.push(format!("{text:?}: pathem accepts it"));
        }
    }
    for (text, word) in REFUSED {
        match Filter::compile(text) {
            Ok(_) => bad.push(format!("{text:?}: pathem accepts it")),
            Err(e) => {
                let line = e.to_string();
                if !line.contains(&format!("pcap-filter's {word} is not supported by pathem"))
                    || line.contains('\n')
                {
                    bad.push(format!("{text:?}: {line}"));
                }
            }
        }
    }
    println!("{} bad filters refused by both, {} words refused by name", BAD.len(), REFUSED.len());
    assert!(bad.is_empty(), "differences:\n{}", bad.join("\n"));
}

/// Primitives to build random filters from, some of them bare ids that take the qualifiers
/// before them (and are refused where there are none).
const PIECES: &[&str] = &[
    "ip",
    "ip6",
    "tcp",
    "udp",
    "icmp",
    "arp",
    "rarp",
    "vlan",
    "vlan 10",
    "vlan 20",
    "host 10.0.0.1",
    "src host 10.0.0.2",
    "dst host 192.168.1.7",
    "net 10.0.0.0/24",
    "net 10",
    "port 80",
    "tcp port 53",
    "udp dst port 53",
    "src port 40000",
    "portrange 1-100",
    "ether broadcast",
    "multicast",
    "ip[9] = 6",
    "tcp[13] & 2 != 0",
    "len > 60",
    "less 100",
    "greater 200",
    "ip proto 17",
    "proto 58",
    "ether host 02:00:00:00:00:01",
    "ether src 2:0:0:0:0:2",
    "10.0.0.2",
    "80",
    "53",
    "not 53",
    "(443 or 22)",
    "ip6 host 2001:db8::1",
    "2001:db8::2",
    "icmp[icmptype] = icmp-echo",
    "ether proto \\arp",
    "udp[2:2] > 100",
    "ip[1] & 3 = 2",
    "ip6 proto 6",
    "sctp",
    "icmp6",
    "ip multicast",
    "ether[0] & 1 = 0",
    "ip[9] + 1 * 2 = 8",
    "ip[9] % 4 + 1 = 3",
    "ip[0] & 0xf << 2 > 20",
    "ip[9] ^ 2 | 1 = 7",
    "- ip[9] + 20 = 14",
    "len - 14 > 40",
    "tcp[12] >> 4 = 5",
    "ip[9] / 3 = 2",
    "0 - ip[9] < 10",
    "udp[0:2] % 1000 = 353",
    "src or dst port 53",
    "src and dst host 10.0.0.1",
    "tcp portrange 40000-50000",
    "port http",
    "udp port domain",
    "ip6 net 2001:db8::/64",
    "net 10.0.0.0 mask 255.255.0.0",
    "ip broadcast",
    "ip6 multicast",
    "ether proto \\ip6",
    "(10.0.0.1 or 10.0.0.3)",
    "not 10.0.0.2",
    "icmp6[0] = 128",
    "vlan and vlan",
    "arp[7] = 1",
    "ip6[6] = 44",
    "ether[12:2] = 0x8100",
    "greater 60",
];

/// A random expression of depth at most `d`.
fn random_expr(next: &mut impl FnMut() -> u64, d: u32) -> String {
    match if d == 0 { 0 } else { next() % 6 } {
        0 | 1 => PIECES[(next() % PIECES.len() as u64) as usize].to_string(),
        2 => format!("not {}", random_expr(next, d - 1)),
        3 => format!("({})", random_expr(next, d - 1)),
        4 => format!("{} and {}", random_expr(next, d - 1), random_expr(next, d - 1)),
        _ => format!("{} or {}", random_expr(next, d - 1), random_expr(next, d - 1)),
    }
}

fn tcpdump_matches(cap: &std::path::Path, text: &str) -> Option<BTreeSet<usize>> {
    let out = Command::new("tcpdump").arg("-r").arg(cap).args(["-nn", "-tt", "--", text]).output().unwrap();
    if !out.status.success() {
        // libpcap's optimizer refuses a filter it proves matches nothing; pathem accepts it.
        let never = String::from_utf8_lossy(&out.stderr).contains("expression rejects all packets");
        return never.then(BTreeSet::new);
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split('.').next()?.parse().ok())
            .collect(),
    )
}

#[test]
fn random_filters_agree_with_tcpdump() {
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
    // PATHEM_RANDOM_FILTERS=N and PATHEM_RANDOM_SEED=S explore further than the default run.
    let mut s: u64 = std::env::var("PATHEM_RANDOM_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let (mut bad, mut accepted, mut refused, mut cut_short) = (Vec::new(), 0, 0, 0);
    let runs = std::env::var("PATHEM_RANDOM_FILTERS").ok().and_then(|n| n.parse().ok()).unwrap_or(400);
    for _ in 0..runs {
        let mut text = random_expr(&mut next, 3);
        if next() % 5 == 0 {
            // A word dropped: mostly a syntax error, which both must refuse.
            let words: Vec<&str> = text.split(' ').collect();
            let cut = (next() % words.len() as u64) as usize;
            text = words
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != cut)
                .map(|(_, w)| *w)
                .collect::<Vec<_>>()
                .join(" ");
        }
        let theirs = tcpdump_matches(&cap, &text);
        let ours = Filter::compile(&text).ok().map(|f| {
            frames
                .iter()
                .zip(&wire)
                .enumerate()
                .filter(|(_, (fr, w))| f.matches(fr, **w))
                .map(|(i, _)| i + 1)
                .collect()
        });
        match (&theirs, &ours) {
            (Some(_), None) => {
                let e = Filter::compile(&text).unwrap_err();
                if !e.expected.starts_with("pcap-filter's") {
                    bad.push(format!("{text:?}: tcpdump accepts it, pathem: {e}"));
                }
            }
            (None, Some(_)) => bad.push(format!("{text:?}: pathem accepts it, tcpdump refuses it")),
            (Some(t), Some(o)) if t != o => {
                // Frames cut short of what a filter reads (19, 36-38, 46): libpcap's optimizer
                // removes some of those reads and keeps others; pathem removes the tests whose
                // outcome cannot matter, which is most of them but not always the same ones.
                let whole = |s: &BTreeSet<usize>| {
                    s.iter().copied().filter(|i| ![19, 36, 37, 38, 46].contains(i)).collect::<Vec<_>>()
                };
                if whole(t) != whole(o) {
                    bad.push(format!("{text:?}: pathem {o:?}, tcpdump {t:?}"));
                } else {
                    cut_short += 1;
                }
            }
            _ => {}
        }
        accepted += usize::from(theirs.is_some());
        refused += usize::from(theirs.is_none());
    }
    println!(
        "{runs} random filters: tcpdump accepts {accepted}, refuses {refused}; \
         {cut_short} differ only on frames cut short"
    );
    assert!(bad.is_empty(), "differences:\n{}", bad.join("\n"));
}
