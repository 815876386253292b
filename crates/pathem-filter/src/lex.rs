//! The words of a filter, cut as libpcap's scanner cuts them: the longest match wins, and on
//! a tie the earlier rule (keywords, then MAC addresses, numbers, dotted IPv4, IPv6, names).

use crate::FilterError;

/// What a token is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A keyword of the language (its text, lower case as written).
    Kw,
    /// A number, or a named constant such as `tcp-syn`.
    Num(u32),
    /// Dotted IPv4 (`10`, `10.1`, `10.1.2`, `10.1.2.3` forms with at least one dot).
    Hid,
    /// An IPv6 address.
    Hid6,
    /// An Ethernet address.
    Eid([u8; 6]),
    /// Any other name (a host name, a service, a protocol; `\name` escapes a keyword).
    Id,
    /// Punctuation and operators: `( ) [ ] : + - * / % & | ^ = < > >= <= != << >> /`.
    Punct,
    /// `and`, `&&`.
    And,
    /// `or`, `||`.
    Or,
    /// `not`, `!`.
    Not,
}

/// A token, its text (the name without its `\` for an escaped name) and 1-based position.
#[derive(Debug, Clone)]
pub(crate) struct Tok {
    pub kind: Kind,
    pub text: String,
    pub pos: usize,
}

/// Keywords of pcap-filter(7) that pathem implements.
const SUPPORTED: &[&str] = &[
    "dst",
    "src",
    "link",
    "ether",
    "arp",
    "rarp",
    "ip",
    "sctp",
    "tcp",
    "udp",
    "icmp",
    "igmp",
    "igrp",
    "pim",
    "vrrp",
    "carp",
    "ip6",
    "icmp6",
    "ah",
    "esp",
    "host",
    "net",
    "mask",
    "port",
    "portrange",
    "proto",
    "less",
    "greater",
    "broadcast",
    "multicast",
    "len",
    "length",
    "vlan",
    "and",
    "or",
    "not",
];

/// Keywords of libpcap's scanner that pathem refuses by name.
pub(crate) const REFUSED: &[&str] = &[
    "ppp",
    "slip",
    "fddi",
    "tr",
    "wlan",
    "radio",
    "atalk",
    "aarp",
    "decnet",
    "lat",
    "sca",
    "moprc",
    "mopdl",
    "iso",
    "esis",
    "es-is",
    "isis",
    "is-is",
    "l1",
    "l2",
    "iih",
    "lsp",
    "snp",
    "csnp",
    "psnp",
    "clnp",
    "stp",
    "ipx",
    "netbeui",
    "protochain",
    "gateway",
    "type",
    "subtype",
    "direction",
    "dir",
    "address1",
    "addr1",
    "address2",
    "addr2",
    "address3",
    "addr3",
    "address4",
    "addr4",
    "ra",
    "ta",
    "byte",
    "inbound",
    "outbound",
    "ifindex",
    "mpls",
    "pppoed",
    "pppoes",
    "geneve",
    "lane",
    "llc",
    "metac",
    "bcc",
    "oam",
    "oamf4",
    "oamf4ec",
    "oamf4sc",
    "sc",
    "ilmic",
    "vpi",
    "vci",
    "connectmsg",
    "metaconnect",
    "on",
    "ifname",
    "rset",
    "ruleset",
    "rnr",
    "rulenum",
    "srnr",
    "subrulenum",
    "reason",
    "action",
    "fisu",
    "lssu",
    "lsu",
    "msu",
    "hfisu",
    "hlssu",
    "hmsu",
    "sio",
    "opc",
    "dpc",
    "sls",
    "hsio",
    "hopc",
    "hdpc",
    "hsls",
];

/// libpcap's named constants (ICMP and ICMPv6 types, TCP flags and the offsets of those fields).
pub(crate) const CONSTANTS: &[(&str, u32)] = &[
    ("icmptype", 0),
    ("icmpcode", 1),
    ("icmp-echoreply", 0),
    ("icmp-unreach", 3),
    ("icmp-sourcequench", 4),
    ("icmp-redirect", 5),
    ("icmp-echo", 8),
    ("icmp-routeradvert", 9),
    ("icmp-routersolicit", 10),
    ("icmp-timxceed", 11),
    ("icmp-paramprob", 12),
    ("icmp-tstamp", 13),
    ("icmp-tstampreply", 14),
    ("icmp-ireq", 15),
    ("icmp-ireqreply", 16),
    ("icmp-maskreq", 17),
    ("icmp-maskreply", 18),
    ("icmp6type", 0),
    ("icmp6code", 1),
    ("icmp6-destinationunreach", 1),
    ("icmp6-packettoobig", 2),
    ("icmp6-timeexceeded", 3),
    ("icmp6-parameterproblem", 4),
    ("icmp6-echo", 128),
    ("icmp6-echoreply", 129),
    ("icmp6-multicastlistenerquery", 130),
    ("icmp6-multicastlistenerreportv1", 131),
    ("icmp6-multicastlistenerdone", 132),
    ("icmp6-routersolicit", 133),
    ("icmp6-routeradvert", 134),
    ("icmp6-neighborsolicit", 135),
    ("icmp6-neighboradvert", 136),
    ("icmp6-redirect", 137),
    ("icmp6-routerrenum", 138),
    ("icmp6-nodeinformationquery", 139),
    ("icmp6-nodeinformationresponse", 140),
    ("icmp6-ineighbordiscoverysolicit", 141),
    ("icmp6-ineighbordiscoveryadvert", 142),
    ("icmp6-multicastlistenerreportv2", 143),
    ("icmp6-homeagentdiscoveryrequest", 144),
    ("icmp6-homeagentdiscoveryreply", 145),
    ("icmp6-mobileprefixsolicit", 146),
    ("icmp6-mobileprefixadvert", 147),
    ("icmp6-certpathsolicit", 148),
    ("icmp6-certpathadvert", 149),
    ("icmp6-multicastrouteradvert", 151),
    ("icmp6-multicastroutersolicit", 152),
    ("icmp6-multicastrouterterm", 153),
    ("tcpflags", 13),
    ("tcp-fin", 0x01),
    ("tcp-syn", 0x02),
    ("tcp-rst", 0x04),
    ("tcp-push", 0x08),
    ("tcp-ack", 0x10),
    ("tcp-urg", 0x20),
    ("tcp-ece", 0x40),
    ("tcp-cwr", 0x80),
];

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

/// Length of libpcap's name rule `[A-Za-z0-9]([-_.A-Za-z0-9]*[.A-Za-z0-9])?` at the start.
fn id_len(s: &[char]) -> usize {
    if !s.first().is_some_and(|c| c.is_ascii_alphanumeric()) {
        return 0;
    }
    let mut n = s.iter().take_while(|&&c| is_id_char(c)).count();
    while n > 1 && matches!(s.get(n - 1), Some('-' | '_')) {
        n -= 1;
    }
    n
}

/// Length of a number `[0-9]+|0[xX][0-9A-Fa-f]+` at the start.
fn num_len(s: &[char]) -> usize {
    if s.first() == Some(&'0') && matches!(s.get(1), Some('x' | 'X')) {
        let h = s.iter().skip(2).take_while(|c| c.is_ascii_hexdigit()).count();
        if h > 0 {
            return 2 + h;
        }
    }
    s.iter().take_while(|c| c.is_ascii_digit()).count()
}

/// Length of dotted numbers `N.N`, `N.N.N` or `N.N.N.N` at the start (0 if none).
fn hid_len(s: &[char]) -> usize {
    let mut n = num_len(s);
    if n == 0 {
        return 0;
    }
    let mut best = 0;
    for _ in 0..3 {
        if s.get(n) != Some(&'.') {
            break;
        }
        let m = num_len(s.get(n + 1..).unwrap_or(&[]));
        if m == 0 {
            break;
        }
        n += 1 + m;
        best = n;
    }
    best
}

/// Hex digits (at most `max`) at the start.
fn hex_run(s: &[char], max: usize) -> usize {
    s.iter().take(max).take_while(|c| c.is_ascii_hexdigit()).count()
}

/// An Ethernet address at the start, as libpcap's MAC rule: six 1-2 digit groups separated by
/// `:`, `-` or `.`, three 4-digit groups separated by `.`, or twelve digits.
fn mac(s: &[char]) -> Option<(usize, [u8; 6])> {
    let byte =
        |t: &[char]| -> u8 { t.iter().fold(0u8, |a, c| (a << 4) | c.to_digit(16).map_or(0, |d| d as u8)) };
    let mut best: Option<(usize, [u8; 6])> = None;
    for sep in [':', '-', '.'] {
        let mut i = 0;
        let mut out = [0u8; 6];
        let mut ok = true;
        for (g, o) in out.iter_mut().enumerate() {
            if g > 0 {
                if s.get(i) != Some(&sep) {
                    ok = false;
                    break;
                }
                i += 1;
            }
            let n = hex_run(s.get(i..).unwrap_or(&[]), 2);
            if n == 0 {
                ok = false;
                break;
            }
            *o = byte(&s[i..i + n]);
            i += n;
        }
        if ok && best.is_none_or(|(l, _)| i > l) {
            best = Some((i, out));
        }
    }
    let quad = |i: usize| hex_run(s.get(i..).unwrap_or(&[]), 4) == 4;
    let mut out = [0u8; 6];
    let fill = |out: &mut [u8; 6], starts: [usize; 3]| {
        for (g, st) in starts.iter().enumerate() {
            out[2 * g] = byte(&s[*st..st + 2]);
            out[2 * g + 1] = byte(&s[st + 2..st + 4]);
        }
    };
    if quad(0) && s.get(4) == Some(&'.') && quad(5) && s.get(9) == Some(&'.') && quad(10) {
        fill(&mut out, [0, 5, 10]);
        if best.is_none_or(|(l, _)| 14 > l) {
            best = Some((14, out));
        }
    }
    if quad(0) && quad(4) && quad(8) {
        fill(&mut out, [0, 4, 8]);
        if best.is_none_or(|(l, _)| 12 > l) {
            best = Some((12, out));
        }
    }
    best
}

/// The longest IPv6 address at the start (it must contain a `:`).
fn v6_len(s: &[char]) -> usize {
    // The longest IPv6 address libpcap's scanner takes is 45 characters (with an IPv4 tail).
    let run = s.iter().take(45).take_while(|c| c.is_ascii_hexdigit() || **c == ':' || **c == '.').count();
    let mut n = run;
    while n > 0 {
        let t: String = s[..n].iter().collect();
        if t.contains(':') && t.parse::<std::net::Ipv6Addr>().is_ok() {
            return n;
        }
        n -= 1;
    }
    0
}

/// A number's value as libpcap reads it: decimal, `0x` hex or leading-0 octal, at most 32 bits.
fn number(text: &str) -> Result<u32, &'static str> {
    let (digits, radix) = if let Some(h) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        (h, 16)
    } else if text.len() > 1 && text.starts_with('0') {
        (&text[1..], 8)
    } else {
        (text, 10)
    };
    if radix == 8 && digits.bytes().any(|b| b == b'8' || b == b'9') {
        return Err("a number (octal, as it begins with 0, has no digit 8 or 9)");
    }
    u32::from_str_radix(digits, radix).map_err(|_| "a number that fits in 32 bits")
}

fn error(text: &str, pos: usize, found: String, expected: &str) -> FilterError {
    FilterError { text: text.to_string(), pos, found, expected: expected.to_string() }
}

/// The message for a refused pcap-filter word.
pub(crate) fn refusal(word: &str) -> String {
    format!("pcap-filter's {word} is not supported by pathem")
}

/// Cuts `text` into tokens, refusing unsupported keywords by name.
pub(crate) fn tokenize(text: &str) -> Result<Vec<Tok>, FilterError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        if matches!(c, ' ' | '\t' | '\r' | '\n') {
            i += 1;
            continue;
        }
        let pos = i + 1;
        let rest = &chars[i..];
        let two: String = rest.iter().take(2).collect();
        let (len, kind) = if let Some(k) =
            ["&&", "||", ">=", "<=", "!=", "==", "<<", ">>"].iter().find(|&&o| o == two)
        {
            let kind = match *k {
                "&&" => Kind::And,
                "||" => Kind::Or,
                _ => Kind::Punct,
            };
            (2, kind)
        } else if c == ':' && v6_len(rest) > 1 {
            (v6_len(rest), Kind::Hid6)
        } else if c == '!' {
            (1, Kind::Not)
        } else if "+-*/%:[]<>()&|^=".contains(c) {
            (1, Kind::Punct)
        } else if c == '\\' {
            let n =
                rest.iter().skip(1).take_while(|c| !matches!(c, ' ' | '!' | '(' | ')' | '\n' | '\t')).count();
            if n == 0 {
                return Err(error(text, pos, "\"\\\"".into(), "a name after \\"));
            }
            out.push(Tok { kind: Kind::Id, text: rest[1..=n].iter().collect(), pos });
            i += 1 + n;
            continue;
        } else {
            let idl = id_len(rest);
            let word: String = rest[..idl].iter().collect();
            let mut best = (0usize, Kind::Id);
            if idl > 0 && (SUPPORTED.contains(&word.as_str()) || REFUSED.contains(&word.as_str())) {
                best = (idl, Kind::Kw);
            } else if let Some((_, v)) = CONSTANTS.iter().find(|(n, _)| *n == word) {
                best = (idl, Kind::Num(*v));
            }
            if let Some((l, m)) = mac(rest) {
                if l > best.0 {
                    best = (l, Kind::Eid(m));
                }
            }
            let nl = num_len(rest);
            if nl > best.0 {
                best = (nl, Kind::Num(0));
            }
            let hl = hid_len(rest);
            if hl > best.0 {
                best = (hl, Kind::Hid);
            }
            let vl = v6_len(rest);
            if vl > best.0 {
                best = (vl, Kind::Hid6);
            }
            if idl > best.0 {
                best = (idl, Kind::Id);
            }
            if best.0 == 0 {
                return Err(error(
                    text,
                    pos,
                    format!("{c:?}"),
                    "a word, a number, an address or an operator",
                ));
            }
            best
        };
        let word: String = rest[..len].iter().collect();
        let kind = match kind {
            Kind::Num(0) if CONSTANTS.iter().all(|(n, _)| *n != word) => {
                Kind::Num(number(&word).map_err(|e| error(text, pos, format!("{word:?}"), e))?)
            }
            Kind::Kw if REFUSED.contains(&word.as_str()) => {
                return Err(error(text, pos, format!("{word:?}"), &refusal(&word)));
            }
            Kind::Kw if word == "and" => Kind::And,
            Kind::Kw if word == "or" => Kind::Or,
            Kind::Kw if word == "not" => Kind::Not,
            k => k,
        };
        let word = match (&kind, word.as_str()) {
            (Kind::Punct, "==") => "=".to_string(),
            (Kind::Kw, "length") => "len".to_string(),
            _ => word,
        };
        out.push(Tok { kind, text: word, pos });
        i += len;
    }
    Ok(out)
}
