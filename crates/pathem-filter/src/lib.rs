//! tcpdump's filter language (pcap-filter(7)) for Ethernet frames, in pure Rust, with the
//! semantics libpcap 1.10 gives it when tcpdump reads a capture file: compiled once into a
//! flat array of tests with true/false jumps (as BPF), and run per frame without allocation.
//!
//! Covered, as libpcap compiles them for DLT_EN10MB:
//! - protocols: `ip`, `ip6`, `arp`, `rarp`, `tcp`, `udp`, `sctp`, `icmp`, `icmp6`, `igmp`,
//!   `igrp`, `pim`, `vrrp`, `carp`, `ah`, `esp`; `[ip|ip6] proto N|name` and `proto N|name`
//!   (names from /etc/protocols: `\tcp`, `ospf`, `ipv6-icmp`, ...; IPv6 also matches the protocol
//!   after a fragment header, as libpcap does); `ether proto N|\name` (`\ip`, `\ip6`, `\arp`,
//!   `\rarp`, `loopback`, `decnet`, ...; values up to 1500 are 802.3 LLC SAPs, as libpcap);
//! - addresses: `[ip|arp|rarp] [src|dst|src or dst|src and dst] host|net` with IPv4 hosts,
//!   abbreviated nets (`net 10`, `host 10.1`), `net A/len`, `net A mask M` (host bits set are
//!   refused, as libpcap); IPv6 hosts and `net ADDR/len`; `ether host|src|dst MAC` in libpcap's
//!   forms (`a:b:c:d:e:f`, `a-b-..`, `a.b.c.d.e.f`, `aabb.ccdd.eeff`, `aabbccddeeff`);
//!   `[ether|ip|ip6] broadcast|multicast`;
//! - ports: `[tcp|udp|sctp] [src|dst|...] port N|name` and `portrange N-M` (IPv4 fragments
//!   other than the first never match; IPv6 ports at the fixed 40-byte header, as libpcap),
//!   with a table of common service names;
//! - `vlan [ID]` (TPIDs 0x8100, 0x88a8, 0x9100), which, as in libpcap, moves the offsets of
//!   everything parsed after it by 4 (`vlan and vlan` is a double tag);
//! - `less N`, `greater N`, and byte expressions: `proto[expr]`, `proto[expr:size]` for ether,
//!   ip, ip6, arp, rarp, tcp, udp, sctp, icmp, icmp6, igmp, igrp, pim, vrrp, carp, with
//!   libpcap's bases and conditions (tcp[] and the like need IPv4 and not a later fragment),
//!   `len`, `+ - * / % & | ^ << >>`, unary minus, `= == != < <= > >=`, and the named constants
//!   (`icmptype`, `icmp-echo`, `icmp6type`, `icmp6-echo`, `tcpflags`, `tcp-syn`, ...); arithmetic
//!   is 32-bit unsigned, a constant zero divisor is refused, a zero divisor at run time rejects
//!   the frame;
//! - `and`/`&&`, `or`/`||` (equal precedence, left to right), `not`/`!`, parentheses, and the
//!   implied qualifiers (`host a or b`, `tcp port 80 or 443 and not 22`).
//!
//! libpcap's quirks are kept: `vlan` moves the offsets of everything after it, across `or`
//! too; `%` and `^` have no precedence (they take all of the expression after them); an
//! arithmetic operator keeps only its left operand's protocol checks (`0 - ip[9] = 250` reads
//! byte 23 of any frame); `ip broadcast` is 0.0.0.0 or 255.255.255.255, as tcpdump reading a
//! file has no netmask; keywords used as names need a `\` (`ip proto \tcp`).
//!
//! As with BPF, a load beyond the captured bytes rejects the whole frame. As libpcap's
//! optimizer, a test whose outcome cannot change the result is skipped (so `tcp or port 80`
//! accepts a TCP frame cut before its ports); the optimizer skips a few more or fewer than
//! pathem in rare filters, which then differ from tcpdump on frames cut short of the bytes
//! they read (never on frames that hold them).
//!
//! Refused, with the word and its position: the rest of pcap-filter(7) (`gateway`, `mpls`,
//! `pppoed`, `pppoes`, `geneve`, `inbound`, `outbound`, `ifindex`, `ifname`/`on`, `wlan`/
//! `fddi`/`tr`/`ppp`/`slip`, 802.11 `type`/`subtype`/`dir`/`addr1`-`addr4`/`ra`/`ta`,
//! `radio`, `decnet`, `iso`, `esis`, `isis` and its levels, `clnp`, `stp`, `ipx`, `netbeui`,
//! `atalk`, `aarp`, `lat`, `sca`, `moprc`, `mopdl`, `llc`, `protochain`, `byte`, ATM and MTP
//! words, pf words), host and network names (they would need DNS or local databases), ether
//! proto values of IPX and AppleTalk, and port ranges given by service names.
//! Unlike libpcap, a filter that can never match (`ip6 proto 6 and ip6 proto 7`) is
//! accepted: libpcap's optimizer refuses those.

mod lex;
mod parse;
mod prog;

use std::fmt;

/// Why a filter's text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct FilterError {
    /// The whole filter text.
    pub text: String,
    /// 1-based character position of the word.
    pub pos: usize,
    /// The word found, quoted, or `the end`.
    pub found: String,
    /// What would have been accepted there; for a word of pcap-filter(7) that pathem does
    /// not implement, the sentence that says so (`pcap-filter's gateway is not supported by
    /// pathem`).
    pub expected: String,
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let expected = if self.expected.starts_with("pcap-filter's ") { "" } else { "expected " };
        write!(f, "filter {:?}: at {}, {}: {expected}{}", self.text, self.pos, self.found, self.expected)
    }
}

/// The most words (tokens) a filter may have: it bounds the depth of what is built.
const MAX_TOKENS: usize = 4096;

/// A compiled filter.
#[derive(Debug, Clone)]
pub struct Filter {
    text: String,
    prog: prog::Prog,
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Filter {
    /// Compiles tcpdump filter text (see the crate's documentation for what is covered).
    /// Empty text matches every frame, as with tcpdump.
    pub fn compile(text: &str) -> Result<Filter, FilterError> {
        let toks = lex::tokenize(text)?;
        if let Some(t) = toks.get(MAX_TOKENS) {
            return Err(FilterError {
                text: text.to_string(),
                pos: t.pos,
                found: format!("{:?}", t.text),
                expected: format!("the end (pathem takes filters of at most {MAX_TOKENS} words)"),
            });
        }
        let root = parse::Parser::new(text, &toks).filter()?;
        Ok(Filter { text: text.to_string(), prog: prog::Prog::new(&root) })
    }

    /// Whether the frame (Ethernet, from the destination MAC, as captured; `wire_len` its
    /// length on the wire, which `len`, `less` and `greater` test) passes the filter.
    #[inline]
    pub fn matches(&self, frame: &[u8], wire_len: u32) -> bool {
        self.prog.run(frame, wire_len)
    }

    /// Whether the filter accepts every frame without looking at it (empty text, for one).
    pub fn is_match_all(&self) -> bool {
        self.prog.is_match_all()
    }
}

/// Filters tried in order, compiled together into one program (as the classes of a
/// direction are): [`classify`](Self::classify) gives the place of the first that matches a
/// frame, exactly as trying each filter's [`Filter::matches`] in turn would, but a test one
/// filter made is not made again by the next (`host A` then `host B` read the Ethernet type
/// once).
#[derive(Debug, Clone)]
pub struct Classifier {
    combined: prog::Combined,
}

impl Classifier {
    pub fn new(filters: &[Filter]) -> Classifier {
        let progs: Vec<&prog::Prog> = filters.iter().map(|f| &f.prog).collect();
        // No filters: a program that ends at once, in lane 0.
        Classifier { combined: prog::Combined::new(&progs) }
    }

    /// 0 when no filter matches the frame, `i` when the `i`-th (from 1) is the first that does.
    #[inline(always)]
    pub fn classify(&self, frame: &[u8], wire_len: u32) -> usize {
        self.combined.lane(frame, wire_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(t: &str) -> String {
        Filter::compile(t).unwrap_err().to_string()
    }

    #[test]
    fn refusals_name_position_and_word() {
        assert_eq!(
            err("tcp prot 80"),
            "filter \"tcp prot 80\": at 5, \"prot\": expected \"and\", \"or\" or the end"
        );
        assert_eq!(
            err("tcp and gateway 1"),
            "filter \"tcp and gateway 1\": at 9, \"gateway\": pcap-filter's gateway is not supported by pathem"
        );
        assert!(err("host").contains("at 5, the end: expected an address"));
        assert!(err("port 99999").contains("at 6, \"99999\": expected a port number 0-65535"));
        assert!(err("port gopherx").contains("at 6, \"gopherx\": expected a port number or a service name"));
        assert!(
            err("net 10.1.0.0/8").contains("at 5, \"10.1.0.0\": expected a network without host bits set")
        );
        assert!(err("(tcp").contains("at 5, the end: expected \")\""));
        assert!(err("tcp and").contains("at 8, the end: expected a primitive"));
        assert!(err("ip host ::1").contains("at 9, \"::1\": expected ip6 before an IPv6 address"));
        assert!(err("src tcp").contains("at 5, \"tcp\": expected an address"));
        assert!(err("ip proto tcp").contains("at 10, \"tcp\""));
        assert!(err("ether host 1").contains("at 12, \"1\": expected an Ethernet address"));
        assert!(err("udp port http")
            .contains("at 10, \"http\": expected a port of this protocol (port 'http' is tcp)"));
        assert!(err("host foo").contains("at 6, \"foo\": expected an IP address (host names need DNS"));
        assert!(err("ip[0] / 0 = 1").contains("at 9, \"0\": expected a divisor that is not zero"));
        assert!(err("ip[0] % (2 - 2) = 1").contains("at 9, \"(\": expected a divisor that is not zero"));
        assert!(err("ip[0] << 32 = 1").contains("at 10, \"32\": expected a shift of at most 31 bits"));
        assert!(err("vlan 4096").contains("at 6, \"4096\": expected a VLAN ID of at most 4095"));
        assert!(err("ether[0:3] = 1").contains("at 9, \"3\": expected a size of 1, 2 or 4"));
        assert!(err("udp[4294967296] = 1")
            .contains("at 5, \"4294967296\": expected a number that fits in 32 bits"));
        assert!(err("ip[0] = 08").contains("at 9, \"08\": expected a number (octal"));
        assert!(err("10.0.0.1").contains("at 1, \"10.0.0.1\": expected a primitive"));
        assert!(err("host 10.0.0.1/32")
            .contains("at 6, \"10.0.0.1\": expected net before an address with a mask"));
        assert!(err("tcp host 1.2.3.4").contains("('tcp' modifier applied to host)"));
        assert!(err("a # b").contains("at 3, '#'"));
        assert!(err("ether proto \\ipx").contains("at 13, \"ipx\": pcap-filter's ether proto 0xe0"));
        assert!(err("ah[0] = 1").contains("at 1, \"ah\": expected a protocol that can be indexed"));
        assert!(err("src or host 1.2.3.4").contains("at 8, \"host\": expected \"dst\""));
    }

    /// `text` is refused with a line that contains `want`.
    fn refused_with(cases: &[(&str, &str)]) {
        for (text, want) in cases {
            assert!(err(text).contains(want), "{text}: {}", err(text));
        }
    }

    /// A value after `and`/`or` that takes the qualifiers before it is refused for what is
    /// wrong with it, not for a comparison it never meant to start.
    #[test]
    fn an_implied_value_is_refused_for_its_own_fault() {
        refused_with(&[
            ("port 80 or 70000", "at 12, \"70000\": expected a port number 0-65535"),
            ("port 80 or 70000 and tcp", "at 12, \"70000\": expected a port number 0-65535"),
            ("udp port 53 or http", "at 16, \"http\": expected a port of this protocol"),
            ("host 10.0.0.1 or 10.0.0.300", "at 18, \"10.0.0.300\""),
            ("ip6 host ::1 or 1.2.3.4", "at 17, \"1.2.3.4\""),
            ("(port 80 or 70000)", "at 13, \"70000\": expected a port number 0-65535"),
        ]);
        // What still reads as a comparison stays one; what is right still compiles.
        for text in [
            "port 80 or 81 and tcp",
            "host 10.0.0.1 or 10.0.0.2",
            "port 80 or len > 100",
            "tcp or ip[0] & 0xf > 5",
        ] {
            assert!(Filter::compile(text).is_ok(), "{text}");
        }
    }

    /// Values the field cannot hold would compile to a class that never matches.
    #[test]
    fn values_out_of_their_field_are_refused() {
        refused_with(&[
            ("ip proto 256", "at 10, \"256\": expected a protocol number 0-255"),
            ("proto 300", "expected a protocol number 0-255"),
            ("ip6 proto 0x1ff", "expected a protocol number 0-255"),
            ("ether proto 0x10000", "expected an Ethernet type 0-65535"),
            ("tcp portrange 1-100abc", "expected a numeric port range N-M"),
            ("tcp portrange 1-2-3", "expected a numeric port range N-M"),
            ("tcp portrange 1-9999999999", "expected ports 0-65535"),
            ("tcp portrange 1-99999999999999999999999", "expected ports 0-65535"),
            ("ether proto arp", "needs a backslash: \\arp"),
        ]);
        for text in ["ip proto 255", "ether proto 0xffff", "tcp portrange 1-65535"] {
            assert!(Filter::compile(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn every_refused_word_is_named() {
        for w in lex::REFUSED {
            for text in [w.to_string(), format!("tcp or {w} 1"), format!("not ({w})")] {
                let e = Filter::compile(&text).unwrap_err();
                assert_eq!(e.found, format!("{w:?}"), "{text}");
                assert_eq!(e.expected, format!("pcap-filter's {w} is not supported by pathem"), "{text}");
                assert!(!e.to_string().contains('\n'));
            }
        }
    }

    #[test]
    fn constant_filters_are_known() {
        assert!(Filter::compile("").unwrap().is_match_all());
        assert!(Filter::compile("net 0.0.0.0/0 or tcp").is_ok());
        assert!(!Filter::compile("tcp").unwrap().is_match_all());
        // As libpcap's optimizer folds them to `ret #65535`, whatever the frame's length.
        for text in ["tcp or not tcp", "port 53 or not port 53", "not (host 10.0.0.1 and not host 10.0.0.1)"]
        {
            assert!(Filter::compile(text).unwrap().is_match_all(), "{text}");
        }
    }

    /// A TCP/IPv4 frame (10.0.0.1:53 → 10.0.0.2:80, SYN) with up to `changes - 1` of its first
    /// 60 bytes set to one of `choices` and cut at a length from 0 to 80, from a xorshift stream:
    /// the same start, the same frames.
    struct Mutated {
        s: u64,
        changes: u64,
        choices: &'static [u8],
        seed: Vec<u8>,
    }

    impl Mutated {
        fn new(s: u64, changes: u64, choices: &'static [u8]) -> Mutated {
            let mut seed =
                vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00, 0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6];
            seed.extend_from_slice(&[
                0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0, 53, 0, 80, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 2,
            ]);
            seed.resize(80, 0);
            Mutated { s, changes, choices, seed }
        }

        fn next(&mut self) -> u64 {
            self.s ^= self.s << 13;
            self.s ^= self.s >> 7;
            self.s ^= self.s << 17;
            self.s
        }

        fn frame(&mut self) -> Vec<u8> {
            let mut f = self.seed.clone();
            for _ in 0..(self.next() % self.changes) {
                let i = (self.next() % 60) as usize;
                f[i] = self.choices[(self.next() % self.choices.len() as u64) as usize];
            }
            let n = (self.next() % 81) as usize;
            f.truncate(n);
            f
        }
    }

    /// The flat program (fused tests, threaded jumps) decides as the tree it came from, on
    /// frames cut at every length and with bytes changed at random.
    #[test]
    fn flat_program_agrees_with_the_tree() {
        let texts = [
            "host 10.0.0.1",
            "host 10.0.0.1 or 10.0.0.2 and not arp",
            "net 10.0.0.0/8 or ip6 and tcp",
            "port 53 or portrange 1-100",
            "tcp port 80 or 443 and not 22",
            "udp src or dst port 53",
            "vlan and vlan 5 or ip",
            "not vlan and (icmp or icmp6)",
            "ip[6:2] & 0x1fff = 0 and tcp[13] & 2 != 0",
            "ether proto 0x42 or ether proto 6 or arp or rarp",
            "(ip or ip6) and (tcp or udp) and not port 22",
            "ip6 host 2001:db8::1 or ether host 02:00:00:00:00:01",
        ];
        const CHOICES: &[u8] =
            &[0x00, 0x06, 0x08, 0x11, 0x2c, 0x35, 0x81, 0x86, 0xdd, 0x0a, 0x45, 0x4f, 0x20, 0xff];
        let mut frames = Mutated::new(0x2545_f491_4f6c_dd1d, 4, CHOICES);
        for text in texts {
            let toks = lex::tokenize(text).unwrap();
            let tree = parse::Parser::new(text, &toks).filter().unwrap();
            let flat = prog::Prog::new(&tree);
            for _ in 0..3000 {
                let f = frames.frame();
                let frame = &f[..];
                assert_eq!(
                    flat.run(frame, 80),
                    tree.eval(frame, 80).unwrap_or(false),
                    "{text}: {frame:02x?}"
                );
            }
        }
    }

    /// Filters compiled together classify as trying each in turn does, on frames cut at every
    /// length and with bytes changed at random.
    #[test]
    fn a_classifier_gives_the_first_filter_that_matches() {
        let texts = [
            "host 10.0.0.9",
            "host 10.0.0.2",
            "host 10.0.0.1",
            "host 10.0.0.8",
            "udp dst port 80",
            "tcp dst port 81",
            "tcp dst port 80",
            "src net 10.0.1.0/24",
            "src net 10.0.0.0/24",
            "host 10.0.0.1 and not tcp",
            "ip6 and tcp",
            "port 80",
            "not ip",
            "vlan and host 10.0.0.2",
            "ip[6:2] & 0x1fff != 0",
            "tcp[13] & 2 != 0 or udp",
            "less 60",
            "net 10.0.0.0/8 and port 53",
            "ether broadcast or arp",
            "tcp port 80 or 443 and not 22",
            "",
        ];
        let filters: Vec<Filter> = texts.iter().map(|t| Filter::compile(t).unwrap()).collect();
        const CHOICES: &[u8] =
            &[0x00, 0x06, 0x08, 0x11, 0x20, 0x35, 0x50, 0x81, 0x86, 0xdd, 0x0a, 0x45, 0xff];
        let mut frames = Mutated::new(0x1234_5678_9abc_def1, 5, CHOICES);
        let mut lanes = [0usize; 40];
        // Every window of filters (the order matters), and every subset's first match.
        for start in 0..texts.len() {
            for end in start..=texts.len() {
                let set = &filters[start..end];
                let c = Classifier::new(set);
                for _ in 0..400 {
                    let f = frames.frame();
                    let (frame, n) = (&f[..], f.len());
                    let want = set.iter().position(|flt| flt.matches(frame, n as u32)).map_or(0, |i| i + 1);
                    let got = c.classify(frame, n as u32);
                    assert_eq!(got, want, "{:?}: {frame:02x?}", &texts[start..end]);
                    lanes[got + start.min(got)] += 1;
                }
            }
        }
        assert!(lanes.iter().filter(|&&n| n > 0).count() > 10, "most filters took some frames: {lanes:?}");
        assert_eq!(Classifier::new(&[]).classify(&frames.seed, 80), 0);
    }

    #[test]
    fn filter_is_clone_debug_send_sync() {
        fn check<T: Clone + fmt::Debug + Send + Sync + 'static>() {}
        check::<Filter>();
        check::<FilterError>();
    }

    #[test]
    fn display_gives_the_text_back() {
        assert_eq!(Filter::compile("tcp port 80").unwrap().to_string(), "tcp port 80");
    }

    #[test]
    fn and_or_are_left_to_right_with_equal_precedence() {
        // "arp or ip and tcp" is "(arp or ip) and tcp": an ARP frame does not match.
        let mut arp = vec![0u8; 42];
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(!Filter::compile("arp or ip and tcp").unwrap().matches(&arp, 42));
        assert!(Filter::compile("tcp and ip or arp").unwrap().matches(&arp, 42));
    }

    #[test]
    fn out_of_bounds_load_rejects_the_whole_filter() {
        let short = [0u8; 10];
        assert!(!Filter::compile("not ip").unwrap().matches(&short, 10));
        assert!(Filter::compile("less 100").unwrap().matches(&short, 10));
        assert!(Filter::compile("").unwrap().matches(&short, 10));
    }

    #[test]
    fn arbitrary_text_and_bytes_never_panic() {
        let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let words = [
            "ip", "tcp", "host", "port", "src", "dst", "and", "or", "!", "(", ")", "1.2.3.4", "80", "less",
            "x",
        ];
        for _ in 0..20_000 {
            let n = (next() % 6) as usize;
            let text: String = (0..n)
                .map(|_| {
                    let r = next();
                    if r % 5 == 0 {
                        char::from_u32((r >> 8) as u32 % 0x3000).unwrap_or('?').to_string()
                    } else {
                        format!("{} ", words[(r >> 8) as usize % words.len()])
                    }
                })
                .collect();
            if let Ok(f) = Filter::compile(&text) {
                let len = (next() % 80) as usize;
                let frame: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                f.matches(&frame, len as u32);
            }
        }
    }
}
