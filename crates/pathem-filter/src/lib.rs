//! A first subset of tcpdump's filter language (pcap-filter(7)), compiled once into a small
//! tree and evaluated per Ethernet frame without allocation.
//!
//! Covered: `ip`, `ip6`, `arp`, `rarp`, `tcp`, `udp`, `icmp`, `icmp6`, `sctp`; `[ip|ip6] proto
//! N` and `proto N` (numbers); `[ip|arp|rarp] [src|dst|src or dst|src and dst] host A.B.C.D`;
//! `[tcp|udp|sctp] [src|dst|...] port N|name` and `portrange N-M` (IPv4 fragments other than
//! the first never match; IPv6 ports at the fixed 40-byte header); `less N`, `greater N`;
//! `[ether] broadcast`, `[ether] multicast`;
//! `and`/`&&`, `or`/`||` (equal precedence, left to right, as tcpdump), `not`/`!`, parentheses.
//! Everything else (byte expressions, `net`, `vlan`, `ether ...`, IPv6 addresses, implied
//! qualifiers, ...) is refused at compile time with the word and its position.
//!
//! As with BPF, a load beyond the captured bytes rejects the whole frame, not just the
//! primitive that made it.

use std::fmt;

/// Why a filter's text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("filter {text:?}: at {pos}, {found}: expected {expected}")]
pub struct FilterError {
    /// The whole filter text.
    pub text: String,
    /// 1-based character position of the word.
    pub pos: usize,
    /// The word found, quoted, or `the end`.
    pub found: String,
    /// What would have been accepted there.
    pub expected: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Src,
    Dst,
    /// `src or dst` (the default).
    Any,
    /// `src and dst`.
    Both,
}

#[derive(Debug, Clone)]
enum Node {
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    /// The Ethernet type field equals this.
    Ether(u16),
    /// IPv4 with this protocol number.
    Ip4Proto(u8),
    /// IPv6 whose Next Header is this, or a fragment header followed by this.
    Ip6Proto(u8),
    /// IPv4 source and/or destination address.
    Ip4Host(Dir, u32),
    /// ARP (or RARP, by the ether type) sender/target protocol address.
    ArpHost(u16, Dir, u32),
    /// A transport port range (`port` is `lo == hi`) over IPv4 (non-first fragments never match) or IPv6 (fixed header).
    Port {
        protos: [Option<u8>; 3],
        dir: Dir,
        lo: u16,
        hi: u16,
    },
    /// Destination MAC ff:ff:ff:ff:ff:ff (`true`) or with the group bit set (`false`).
    MacDst {
        broadcast: bool,
    },
    /// `wire_len <= n` (less) or `wire_len >= n` (greater).
    Len {
        greater: bool,
        n: u32,
    },
}

/// A compiled filter.
#[derive(Debug, Clone)]
pub struct Filter {
    text: String,
    root: Option<Node>,
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn ld8(p: &[u8], off: usize) -> Option<u32> {
    p.get(off).map(|&b| u32::from(b))
}
fn ld16(p: &[u8], off: usize) -> Option<u32> {
    Some(u32::from(u16::from_be_bytes([*p.get(off)?, *p.get(off + 1)?])))
}
fn ld32(p: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_be_bytes([*p.get(off)?, *p.get(off + 1)?, *p.get(off + 2)?, *p.get(off + 3)?]))
}

fn dir_match(dir: Dir, a: impl FnOnce() -> Option<bool>, b: impl FnOnce() -> Option<bool>) -> Option<bool> {
    match dir {
        Dir::Src => a(),
        Dir::Dst => b(),
        Dir::Any => Some(a()? || b()?),
        Dir::Both => Some(a()? && b()?),
    }
}

impl Node {
    /// `None`: a load went beyond the frame, so the whole filter rejects it.
    fn eval(&self, p: &[u8], wire_len: u32) -> Option<bool> {
        Some(match self {
            Node::And(a, b) => a.eval(p, wire_len)? && b.eval(p, wire_len)?,
            Node::Or(a, b) => a.eval(p, wire_len)? || b.eval(p, wire_len)?,
            Node::Not(a) => !a.eval(p, wire_len)?,
            Node::Ether(t) => ld16(p, 12)? == u32::from(*t),
            Node::Ip4Proto(v) => ld16(p, 12)? == 0x0800 && ld8(p, 23)? == u32::from(*v),
            Node::Ip6Proto(v) => {
                let v = u32::from(*v);
                ld16(p, 12)? == 0x86dd && {
                    let nh = ld8(p, 20)?;
                    (nh == 44 && ld8(p, 54)? == v) || nh == v
                }
            }
            Node::Ip4Host(dir, a) => {
                ld16(p, 12)? == 0x0800
                    && dir_match(*dir, || Some(ld32(p, 26)? == *a), || Some(ld32(p, 30)? == *a))?
            }
            Node::ArpHost(t, dir, a) => {
                ld16(p, 12)? == u32::from(*t)
                    && dir_match(*dir, || Some(ld32(p, 28)? == *a), || Some(ld32(p, 38)? == *a))?
            }
            Node::Port { protos, dir, lo, hi } => {
                let range = u32::from(*lo)..=u32::from(*hi);
                let in_range = |off: usize| Some(range.contains(&ld16(p, off)?));
                let proto_ok = |v: u32| protos.iter().flatten().any(|&q| u32::from(q) == v);
                match ld16(p, 12)? {
                    0x0800 => {
                        proto_ok(ld8(p, 23)?) && ld16(p, 20)? & 0x1fff == 0 && {
                            let l4 = 14 + 4 * (ld8(p, 14)? as usize & 0xf);
                            dir_match(*dir, || in_range(l4), || in_range(l4 + 2))?
                        }
                    }
                    0x86dd => proto_ok(ld8(p, 20)?) && dir_match(*dir, || in_range(54), || in_range(56))?,
                    _ => false,
                }
            }
            Node::MacDst { broadcast: true } => ld32(p, 0)? == 0xffff_ffff && ld16(p, 4)? == 0xffff,
            Node::MacDst { broadcast: false } => ld8(p, 0)? & 1 == 1,
            Node::Len { greater, n } => {
                if *greater {
                    wire_len >= *n
                } else {
                    wire_len <= *n
                }
            }
        })
    }
}

impl Filter {
    /// Compiles tcpdump filter text (the covered subset; see the crate's documentation).
    /// Empty text matches every frame, as with tcpdump.
    pub fn compile(text: &str) -> Result<Filter, FilterError> {
        let toks = tokenize(text);
        let mut p = Parser { text, toks: &toks, i: 0 };
        let root = if toks.is_empty() { None } else { Some(p.expr()?) };
        if p.i < toks.len() {
            return Err(p.err("\"and\", \"or\" or the end"));
        }
        Ok(Filter { text: text.to_string(), root })
    }

    /// Whether the frame (Ethernet, from the destination MAC; `wire_len` its length on the
    /// wire) passes the filter.
    pub fn matches(&self, frame: &[u8], wire_len: u32) -> bool {
        match &self.root {
            None => true,
            Some(n) => n.eval(frame, wire_len).unwrap_or(false),
        }
    }
}

/// A word and its 1-based character position.
#[derive(Debug, Clone)]
struct Tok {
    pos: usize,
    word: String,
}

fn tokenize(text: &str) -> Vec<Tok> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c == '(' || c == ')' {
            i += 1;
        } else if c == '!' {
            i += if chars.get(i + 1) == Some(&'=') { 2 } else { 1 };
        } else if (c == '&' || c == '|') && chars.get(i + 1) == Some(&c) {
            i += 2;
        } else {
            while i < chars.len()
                && !chars[i].is_whitespace()
                && !"()!&|".contains(chars[i])
                && (i == start || chars[i] != '[')
            {
                i += 1;
            }
            if i == start {
                i += 1;
            }
        }
        out.push(Tok { pos: start + 1, word: chars[start..i].iter().collect() });
    }
    out
}

struct Parser<'a> {
    text: &'a str,
    toks: &'a [Tok],
    i: usize,
}

const PRIMITIVE: &str = "a primitive (host, port, less, greater, ip, ip6, arp, rarp, tcp, udp, icmp, sctp), \
                         \"not\" or \"(\"";

/// Words of pcap-filter(7) that this crate does not implement yet: refused by name.
const NOT_YET: &[&str] = &[
    "net", "vlan", "len", "icmp6", "gateway", "mpls", "pppoed", "pppoes", "inbound", "outbound", "ifname",
    "wlan", "type", "subtype", "decnet", "atalk", "ipx", "iso", "stp", "netbeui", "lat", "moprc", "mopdl",
    "aarp", "sca", "geneve",
];

/// Named ports, as netbase's /etc/services lists them: the number and the protocols it is
/// named for (`None` for both tcp and udp, which then also means sctp, as libpcap does).
fn port_by_name(w: &str) -> Option<(u16, Option<u8>)> {
    const T: Option<u8> = Some(6);
    const U: Option<u8> = Some(17);
    Some(match w {
        "ftp-data" => (20, T),
        "ftp" => (21, T),
        "ssh" => (22, T),
        "telnet" => (23, T),
        "smtp" => (25, T),
        "domain" => (53, None),
        "bootps" => (67, U),
        "bootpc" => (68, U),
        "http" | "www" => (80, T),
        "pop3" => (110, T),
        "ntp" => (123, U),
        "snmp" => (161, None),
        "bgp" => (179, T),
        "https" => (443, None),
        _ => return None,
    })
}

fn parse_num(w: &str) -> Option<u32> {
    if let Some(h) = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        u32::from_str_radix(h, 16).ok()
    } else if w.len() > 1 && w.starts_with('0') {
        u32::from_str_radix(&w[1..], 8).ok()
    } else {
        w.parse().ok()
    }
}

fn parse_ip4(w: &str) -> Option<u32> {
    let parts: Vec<&str> = w.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut a = 0u32;
    for p in parts {
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        a = (a << 8) | p.parse::<u8>().ok()? as u32;
    }
    Some(a)
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a str> {
        let toks: &'a [Tok] = self.toks;
        toks.get(self.i).map(|t| t.word.as_str())
    }

    fn err(&self, expected: &str) -> FilterError {
        let (pos, found) = match self.toks.get(self.i) {
            Some(t) => (t.pos, format!("{:?}", t.word)),
            None => (self.text.chars().count() + 1, "the end".to_string()),
        };
        FilterError { text: self.text.to_string(), pos, found, expected: expected.to_string() }
    }

    /// Alternation and concatenation: equal precedence, left to right.
    fn expr(&mut self) -> Result<Node, FilterError> {
        let mut left = self.unary()?;
        loop {
            match self.peek() {
                Some("and" | "&&") => {
                    self.i += 1;
                    left = Node::And(Box::new(left), Box::new(self.unary()?));
                }
                Some("or" | "||") => {
                    self.i += 1;
                    left = Node::Or(Box::new(left), Box::new(self.unary()?));
                }
                _ => return Ok(left),
            }
        }
    }

    fn unary(&mut self) -> Result<Node, FilterError> {
        match self.peek() {
            Some("not" | "!") => {
                self.i += 1;
                Ok(Node::Not(Box::new(self.unary()?)))
            }
            Some("(") => {
                self.i += 1;
                let e = self.expr()?;
                if self.peek() != Some(")") {
                    return Err(self.err("\")\", \"and\" or \"or\""));
                }
                self.i += 1;
                Ok(e)
            }
            _ => self.primitive(),
        }
    }

    fn number(&mut self, what: &str) -> Result<u32, FilterError> {
        match self.peek().and_then(parse_num) {
            Some(n) => {
                self.i += 1;
                Ok(n)
            }
            None => Err(self.err(what)),
        }
    }

    fn primitive(&mut self) -> Result<Node, FilterError> {
        let Some(w) = self.peek() else { return Err(self.err(PRIMITIVE)) };
        let start = self.i;
        let proto = match w {
            "less" | "greater" => {
                let greater = w == "greater";
                self.i += 1;
                let n = self.number("a number")?;
                return Ok(Node::Len { greater, n });
            }
            "ether" | "broadcast" | "multicast" => {
                if w == "ether" {
                    self.i += 1;
                }
                let broadcast =
                    match self.peek() {
                        Some("broadcast") => true,
                        Some("multicast") => false,
                        _ => return Err(self.err(
                            "\"broadcast\" or \"multicast\" (other ether primitives are not supported yet)",
                        )),
                    };
                self.i += 1;
                return Ok(Node::MacDst { broadcast });
            }
            "ip" | "arp" | "rarp" | "tcp" | "udp" | "sctp" | "ip6" | "icmp" | "icmp6" => {
                self.i += 1;
                Some(w)
            }
            _ => None,
        };
        let dir = match self.peek() {
            Some("src") => {
                self.i += 1;
                let both = |p: &Self, w: &str| {
                    p.peek() == Some(w) && p.toks.get(p.i + 1).is_some_and(|t| t.word == "dst")
                };
                if both(self, "or") {
                    self.i += 2;
                    Dir::Any
                } else if both(self, "and") {
                    self.i += 2;
                    Dir::Both
                } else {
                    Dir::Src
                }
            }
            Some("dst") => {
                self.i += 1;
                Dir::Dst
            }
            _ => Dir::Any,
        };
        let qualified = dir != Dir::Any || self.i > start + usize::from(proto.is_some());
        match (proto, self.peek()) {
            (Some("ip" | "arp" | "rarp") | None, Some("host")) => {
                self.i += 1;
                let Some(a) = self.peek().and_then(parse_ip4) else {
                    return Err(self.err("an IPv4 address A.B.C.D (IPv6 and host names not supported yet)"));
                };
                self.i += 1;
                let arp = |t| Node::ArpHost(t, dir, a);
                Ok(match proto {
                    Some("ip") => Node::Ip4Host(dir, a),
                    Some("arp") => arp(0x0806),
                    Some("rarp") => arp(0x8035),
                    _ => Node::Or(
                        Box::new(Node::Or(Box::new(Node::Ip4Host(dir, a)), Box::new(arp(0x0806)))),
                        Box::new(arp(0x8035)),
                    ),
                })
            }
            (q @ (Some("ip" | "ip6") | None), Some("proto")) if !qualified => {
                self.i += 1;
                let Some(v) = self.peek().and_then(parse_num).and_then(|n| u8::try_from(n).ok()) else {
                    return Err(self.err("a protocol number 0-255 (names are not supported yet)"));
                };
                self.i += 1;
                Ok(match q {
                    Some("ip") => Node::Ip4Proto(v),
                    Some(_) => Node::Ip6Proto(v),
                    None => Node::Or(Box::new(Node::Ip4Proto(v)), Box::new(Node::Ip6Proto(v))),
                })
            }
            (Some("tcp" | "udp" | "sctp") | None, Some(kw @ ("port" | "portrange"))) => {
                self.i += 1;
                if kw == "portrange" {
                    let range = self.peek().and_then(|w| {
                        let (a, b) = w.split_once('-')?;
                        let a = u16::try_from(parse_num(a)?).ok()?;
                        let b = u16::try_from(parse_num(b)?).ok()?;
                        Some((a.min(b), a.max(b)))
                    });
                    let Some((lo, hi)) = range else {
                        return Err(self.err("a port range N-M of numbers 0-65535"));
                    };
                    self.i += 1;
                    let protos = match proto {
                        Some("tcp") => [Some(6), None, None],
                        Some("udp") => [Some(17), None, None],
                        Some("sctp") => [Some(132), None, None],
                        _ => [Some(6), Some(17), Some(132)],
                    };
                    return Ok(Node::Port { protos, dir, lo, hi });
                }
                let port = match self.peek() {
                    Some(w) if port_by_name(w).is_some() => port_by_name(w),
                    Some(w) => parse_num(w).and_then(|n| u16::try_from(n).ok()).map(|n| (n, None)),
                    None => None,
                };
                let Some((port, named_for)) = port else {
                    return Err(self.err("a port number 0-65535 or a known service name (http, ssh, ...)"));
                };
                let qualifier = match proto {
                    Some("tcp") => Some(6),
                    Some("udp") => Some(17),
                    Some("sctp") => Some(132),
                    _ => None,
                };
                let protos = match (qualifier, named_for) {
                    (Some(q), Some(n)) if q != n => {
                        return Err(self.err("a port named for this protocol (the name is for another)"))
                    }
                    (Some(q), _) | (None, Some(q)) => [Some(q), None, None],
                    (None, None) => [Some(6), Some(17), Some(132)],
                };
                self.i += 1;
                Ok(Node::Port { protos, dir, lo: port, hi: port })
            }
            (Some(p), _) if !qualified => Ok(match p {
                "ip" => Node::Ether(0x0800),
                "ip6" => Node::Ether(0x86dd),
                "arp" => Node::Ether(0x0806),
                "rarp" => Node::Ether(0x8035),
                "icmp" => Node::Ip4Proto(1),
                "icmp6" => Node::Ip6Proto(58),
                _ => {
                    let v = match p {
                        "tcp" => 6,
                        "udp" => 17,
                        _ => 132,
                    };
                    Node::Or(Box::new(Node::Ip4Proto(v)), Box::new(Node::Ip6Proto(v)))
                }
            }),
            (_, Some(w)) if NOT_YET.contains(&w) => {
                Err(self.err(&format!("{PRIMITIVE}; \"{w}\" is not supported by pathem yet")))
            }
            (Some(_), _) => Err(self.err("\"host\" or \"port\" (the qualifiers this protocol takes here)")),
            (None, _) if qualified => Err(self.err("\"host\" or \"port\"")),
            (None, _) => Err(self.err(PRIMITIVE)),
        }
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
        assert!(err("host").contains("at 5, the end: expected an IPv4 address"));
        assert!(err("port 99999").contains("at 6, \"99999\""));
        assert!(err("port gopherx").contains("at 6, \"gopherx\""));
        assert!(err("net 10").contains("at 1, \"net\"") && err("net 10").contains("not supported"));
        assert!(err("(tcp").contains("at 5, the end: expected \")\""));
        assert!(err("tcp and").contains("at 8, the end"));
        assert!(err("ip host ::1").contains("at 9, \"::1\""));
        assert!(err("tcp[13] = 2").contains("at 4, \"[13]\""));
        assert!(err("src tcp").contains("at 5, \"tcp\""));
        assert!(err("portrange 80").contains("at 11, \"80\": expected a port range"));
        assert!(err("src or dst").contains("at 11, the end: expected \"host\" or \"port\""));
        assert!(err("ip proto tcp").contains("at 10, \"tcp\": expected a protocol number"));
        assert!(err("ip proto 256").contains("at 10, \"256\""));
        assert!(err("ether host 1").contains("at 7, \"host\": expected \"broadcast\" or \"multicast\""));
        assert!(err("udp port http").contains("at 10, \"http\""));
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
