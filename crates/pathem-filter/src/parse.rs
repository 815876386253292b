//! libpcap's grammar and code generation for Ethernet, rewritten: the same grammar (with
//! its implied qualifiers), the same tests in the same order, and the same `vlan` offsets,
//! which grow by 4 for everything parsed after a `vlan`.

use crate::lex::{Kind, Tok};
use crate::prog::{Ar, Base, Jmp, Off, Test, Val, B};
use crate::FilterError;
use std::net::Ipv6Addr;

/// A protocol qualifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum P {
    Default,
    Link,
    Ip,
    Ip6,
    Arp,
    Rarp,
    Tcp,
    Udp,
    Sctp,
    Icmp,
    Icmp6,
    Igmp,
    Igrp,
    Pim,
    Vrrp,
    Carp,
    Ah,
    Esp,
}

impl P {
    fn from_kw(w: &str) -> Option<P> {
        Some(match w {
            "ether" | "link" => P::Link,
            "ip" => P::Ip,
            "ip6" => P::Ip6,
            "arp" => P::Arp,
            "rarp" => P::Rarp,
            "tcp" => P::Tcp,
            "udp" => P::Udp,
            "sctp" => P::Sctp,
            "icmp" => P::Icmp,
            "icmp6" => P::Icmp6,
            "igmp" => P::Igmp,
            "igrp" => P::Igrp,
            "pim" => P::Pim,
            "vrrp" => P::Vrrp,
            "carp" => P::Carp,
            "ah" => P::Ah,
            "esp" => P::Esp,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            P::Default => "",
            P::Link => "link",
            P::Ip => "ip",
            P::Ip6 => "ip6",
            P::Arp => "arp",
            P::Rarp => "rarp",
            P::Tcp => "tcp",
            P::Udp => "udp",
            P::Sctp => "sctp",
            P::Icmp => "icmp",
            P::Icmp6 => "icmp6",
            P::Igmp => "igmp",
            P::Igrp => "igrp",
            P::Pim => "pim",
            P::Vrrp => "vrrp",
            P::Carp => "carp",
            P::Ah => "ah",
            P::Esp => "esp",
        }
    }

    /// The IP protocol number of a transport protocol qualifier for ports.
    fn port_proto(self) -> Option<Option<u8>> {
        Some(match self {
            P::Default => None,
            P::Tcp => Some(6),
            P::Udp => Some(17),
            P::Sctp => Some(132),
            _ => return None,
        })
    }
}

/// A direction qualifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum D {
    Default,
    Src,
    Dst,
    Or,
    And,
}

/// An address-type qualifier; `Undef` where libpcap's grammar has no qualifiers to imply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum A {
    Default,
    Host,
    Net,
    Port,
    Portrange,
    Proto,
    Undef,
}

#[derive(Debug, Clone, Copy)]
struct Q {
    p: P,
    d: D,
    a: A,
}

const QERR: Q = Q { p: P::Default, d: D::Default, a: A::Undef };

type R<T> = Result<T, FilterError>;

/// A byte expression's value, the protocol checks its loads need, and the constant of its
/// first instruction in libpcap's code when that is one (`ld #k`: its leftmost number, also
/// inside a load's index), which libpcap's gen_arth checks a divisor and a shift by.
type Arth = (Val, Option<B>, Option<u32>);

/// libpcap's scratch memory (BPF_MEMWORDS): a byte expression's values wait there until an
/// operator takes them, and one that needs more at once is refused.
const REGISTERS: u32 = 16;

/// Named ports as netbase's /etc/services lists them: the number and the protocol when the
/// name is for only one of tcp and udp.
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
        "tftp" => (69, U),
        "http" | "www" => (80, T),
        "kerberos" => (88, None),
        "pop3" => (110, T),
        "sunrpc" => (111, None),
        "auth" => (113, T),
        "nntp" => (119, T),
        "ntp" => (123, U),
        "netbios-ns" => (137, U),
        "netbios-dgm" => (138, U),
        "netbios-ssn" => (139, T),
        "imap" | "imap2" => (143, T),
        "snmp" => (161, None),
        "snmp-trap" => (162, None),
        "bgp" => (179, T),
        "ldap" => (389, None),
        "https" => (443, None),
        "microsoft-ds" => (445, T),
        "isakmp" => (500, U),
        // netbase: `syslog 514/udp`, and `shell 514/tcp cmd syslog`.
        "syslog" => (514, None),
        "rtsp" => (554, None),
        "submission" => (587, T),
        "ipp" => (631, T),
        "ldaps" => (636, None),
        "domain-s" => (853, None),
        "rsync" => (873, T),
        "imaps" => (993, T),
        "pop3s" => (995, T),
        "socks" => (1080, T),
        "openvpn" => (1194, None),
        "ms-sql-s" => (1433, T),
        "l2tp" => (1701, U),
        "radius" => (1812, None),
        "radius-acct" => (1813, None),
        "nfs" => (2049, None),
        "mysql" => (3306, T),
        "ms-wbt-server" => (3389, T),
        "ipsec-nat-t" => (4500, U),
        "sip" => (5060, None),
        "mdns" => (5353, U),
        "postgresql" => (5432, T),
        "x11" => (6000, T),
        "redis" => (6379, T),
        "http-alt" => (8080, T),
        _ => return None,
    })
}

/// IP protocol names as netbase's /etc/protocols lists them.
fn ip_proto_by_name(w: &str) -> Option<u32> {
    const T: &[(&str, u32)] = &[
        ("ip", 0),
        ("hopopt", 0),
        ("icmp", 1),
        ("igmp", 2),
        ("ggp", 3),
        ("ipencap", 4),
        ("st", 5),
        ("tcp", 6),
        ("egp", 8),
        ("igp", 9),
        ("pup", 12),
        ("udp", 17),
        ("hmp", 20),
        ("xns-idp", 22),
        ("rdp", 27),
        ("iso-tp4", 29),
        ("dccp", 33),
        ("xtp", 36),
        ("ddp", 37),
        ("idpr-cmtp", 38),
        ("ipv6", 41),
        ("ipv6-route", 43),
        ("ipv6-frag", 44),
        ("idrp", 45),
        ("rsvp", 46),
        ("gre", 47),
        ("esp", 50),
        ("ah", 51),
        ("skip", 57),
        ("ipv6-icmp", 58),
        ("ipv6-nonxt", 59),
        ("ipv6-opts", 60),
        ("rspf", 73),
        ("vmtp", 81),
        ("eigrp", 88),
        ("ospf", 89),
        ("ax.25", 93),
        ("ipip", 94),
        ("etherip", 97),
        ("encap", 98),
        ("pim", 103),
        ("ipcomp", 108),
        ("vrrp", 112),
        ("l2tp", 115),
        ("isis", 124),
        ("sctp", 132),
        ("fc", 133),
        ("mobility-header", 135),
        ("udplite", 136),
        ("mpls-in-ip", 137),
        ("manet", 138),
        ("hip", 139),
        ("shim6", 140),
        ("wesp", 141),
        ("rohc", 142),
        ("ethernet", 143),
    ];
    T.iter().find(|(n, _)| *n == w).map(|(_, v)| *v)
}

/// Ethernet type names libpcap knows (`ether proto \name`), then its LLC SAP names.
fn ether_proto_by_name(w: &str) -> Option<u32> {
    Some(match w {
        "aarp" => 0x80f3,
        "arp" => 0x0806,
        "atalk" => 0x809b,
        "decnet" => 0x6003,
        "ip" => 0x0800,
        "ip6" => 0x86dd,
        "lat" => 0x6004,
        "loopback" => 0x9000,
        "mopdl" => 0x6001,
        "moprc" => 0x6002,
        "rarp" => 0x8035,
        "sca" => 0x6007,
        "iso" => 0xfe,
        "stp" => 0x42,
        "ipx" => 0xe0,
        "netbeui" => 0xf0,
        _ => return None,
    })
}

/// A dotted IPv4 address or prefix as libpcap reads it: the value and its length in bits.
fn atoin(s: &str) -> Option<(u32, u32)> {
    let mut v = 0u32;
    let mut len = 0;
    for part in s.split('.') {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) || len >= 32 {
            return None;
        }
        let n: u32 = part.parse().ok().filter(|&n| n <= 255)?;
        v = (v << 8) | n;
        len += 8;
    }
    Some((v, len))
}

fn cmp(off: Off, size: u8, jmp: Jmp, val: u32) -> B {
    B::Test(Test::Cmp { off, size, mask: u32::MAX, jmp, val })
}

fn mcmp(off: Off, size: u8, val: u32, mask: u32) -> B {
    if mask == 0 {
        // libpcap's optimizer folds the masked load away.
        return B::Const(val == 0);
    }
    B::Test(Test::Cmp { off, size, mask, jmp: Jmp::Eq, val })
}

/// `a jmp b` as a plain field test when it is one (`ip[1] & 0xfc = 0xb8`, `tcp[13] = 2`):
/// the same loads in the same order, so the same outcome, checked more cheaply.
fn simple(a: Val, jmp: Jmp, b: Val) -> Test {
    let field = |v: &Val| -> Option<(Off, u8, u32)> {
        let (ld, mask) = match v {
            Val::Bin(Ar::And, l, m) => (&**l, m.constant()?),
            other => (other, u32::MAX),
        };
        let Val::At { off, size } = *ld else { return None };
        Some((off, size, mask))
    };
    match (field(&a), b.constant()) {
        (Some((off, size, mask)), Some(val)) => Test::Cmp { off, size, mask, jmp, val },
        _ => Test::Rel { a, jmp, b },
    }
}

fn and_opt(a: Option<B>, b: Option<B>) -> Option<B> {
    match (a, b) {
        (Some(a), Some(b)) => Some(B::and(a, b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// The error further into the text (the parse that got further explains more).
fn later(a: FilterError, b: FilterError) -> FilterError {
    if b.pos > a.pos {
        b
    } else {
        a
    }
}

const PRIMITIVE: &str =
    "a primitive (host, net, port, portrange, proto, ip, ip6, arp, rarp, tcp, udp, icmp, \
                         icmp6, sctp, ether, vlan, less, greater, broadcast, multicast, a comparison), \
                         \"not\" or \"(\"";

pub(crate) struct Parser<'a> {
    text: &'a str,
    toks: &'a [Tok],
    i: usize,
    /// Where the Ethernet type is, and where the link-layer payload starts (libpcap's
    /// off_linktype and off_linkpl): 12 and 14, plus 4 for each `vlan` parsed so far.
    linktype: u32,
    linkpl: u32,
    /// Parsing steps left: backtracking is bounded whatever the text.
    fuel: u32,
    depth: u32,
    /// libpcap's registers in use by the byte expression being parsed.
    regs: u32,
}

type Saved = (usize, u32, u32, u32);

impl<'a> Parser<'a> {
    pub(crate) fn new(text: &'a str, toks: &'a [Tok]) -> Self {
        Parser { text, toks, i: 0, linktype: 12, linkpl: 14, fuel: 50_000, depth: 0, regs: 0 }
    }

    /// The whole filter.
    pub(crate) fn filter(&mut self) -> R<B> {
        if self.toks.is_empty() {
            return Ok(B::Const(true));
        }
        let (b, _) = self.expr(QERR)?;
        if self.i < self.toks.len() {
            return Err(self.err("\"and\", \"or\" or the end"));
        }
        Ok(b)
    }

    // ----- tokens and errors -----

    fn peek(&self) -> Option<&'a Tok> {
        let toks: &'a [Tok] = self.toks;
        toks.get(self.i)
    }

    fn peek_at(&self, n: usize) -> Option<&'a Tok> {
        let toks: &'a [Tok] = self.toks;
        toks.get(self.i + n)
    }

    fn is_kw(&self, n: usize, w: &str) -> bool {
        self.peek_at(n).is_some_and(|t| t.kind == Kind::Kw && t.text == w)
    }

    fn is_punct(&self, w: &str) -> bool {
        self.peek().is_some_and(|t| t.kind == Kind::Punct && t.text == w)
    }

    fn err_at(&self, i: usize, expected: &str) -> FilterError {
        let (pos, found) = match self.toks.get(i) {
            Some(t) => (t.pos, format!("{:?}", t.text)),
            None => (self.text.chars().count() + 1, "the end".to_string()),
        };
        FilterError { text: self.text.to_string(), pos, found, expected: expected.to_string() }
    }

    fn err(&self, expected: &str) -> FilterError {
        self.err_at(self.i, expected)
    }

    fn expect_punct(&mut self, w: &str) -> R<()> {
        if self.is_punct(w) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(&format!("{w:?}")))
        }
    }

    fn save(&self) -> Saved {
        (self.i, self.linktype, self.linkpl, self.regs)
    }

    fn restore(&mut self, s: Saved) {
        (self.i, self.linktype, self.linkpl, self.regs) = s;
    }

    /// A value made (a number, `len`, a load): it takes one of libpcap's registers.
    fn alloc_reg(&mut self) -> R<()> {
        if self.regs == REGISTERS {
            return Err(self
                .err("an expression that keeps at most 16 values at once (libpcap's registers): nest less"));
        }
        self.regs += 1;
        Ok(())
    }

    /// Counts a step and a level of nesting; refuses a text that needs too many of either.
    fn enter(&mut self) -> R<()> {
        self.fuel = self.fuel.saturating_sub(1);
        self.depth += 1;
        if self.fuel == 0 || self.depth > 200 {
            return Err(self.err(
                "a simpler filter (pathem reads filters nested at most 200 deep, in at most 50000 steps)",
            ));
        }
        Ok(())
    }

    fn leave<T>(&mut self, r: R<T>) -> R<T> {
        self.depth -= 1;
        r
    }

    // ----- grammar -----

    /// `expr: term | expr and term | expr and id | expr or term | expr or id`.
    fn expr(&mut self, ctx: Q) -> R<(B, Q)> {
        let (mut b, mut q) = self.term(ctx)?;
        while let Some(t) = self.peek() {
            let is_and = match t.kind {
                Kind::And => true,
                Kind::Or => false,
                _ => break,
            };
            self.i += 1;
            let (rhs, q2) = self.term_or_id(q)?;
            b = if is_and { B::and(b, rhs) } else { B::or(b, rhs) };
            q = q2;
        }
        Ok((b, q))
    }

    /// After `and`/`or`: a term, or an id that takes the qualifiers `q` before it. A value
    /// alone (an address, a number or a name with nothing but `and`, `or`, `)` or the end
    /// after it) is only ever an id, so its own error is the one reported (`port 80 or
    /// 70000`: the port's range, not a missing comparison).
    fn term_or_id(&mut self, q: Q) -> R<(B, Q)> {
        let value =
            |t: &Tok| matches!(t.kind, Kind::Num(_) | Kind::Hid | Kind::Hid6 | Kind::Eid(_) | Kind::Id);
        let ends = |t: Option<&Tok>| match t {
            None => true,
            Some(t) => matches!(t.kind, Kind::And | Kind::Or) || (t.kind == Kind::Punct && t.text == ")"),
        };
        if q.a != A::Undef && self.peek().is_some_and(value) && ends(self.peek_at(1)) {
            return self.id(q).map(|b| (b, q));
        }
        let s = self.save();
        match self.term(q) {
            Ok(r) => Ok(r),
            Err(e1) => {
                self.restore(s);
                match self.id(q) {
                    Ok(b) => Ok((b, q)),
                    Err(e2) => Err(later(e1, e2)),
                }
            }
        }
    }

    fn term(&mut self, ctx: Q) -> R<(B, Q)> {
        self.enter()?;
        let r = if self.peek().is_some_and(|t| t.kind == Kind::Not) {
            self.i += 1;
            self.term(ctx).map(|(b, q)| (B::not(b), q))
        } else {
            self.rterm(ctx)
        };
        self.leave(r)
    }

    fn rterm(&mut self, ctx: Q) -> R<(B, Q)> {
        let Some(t) = self.peek() else { return Err(self.err(PRIMITIVE)) };
        match (&t.kind, t.text.as_str()) {
            (Kind::Punct, "(") => {
                let s = self.save();
                self.i += 1;
                let as_expr = self.expr(ctx).and_then(|(b, _)| {
                    self.expect_punct(")")?;
                    Ok(b)
                });
                match as_expr {
                    Ok(b) => Ok((b, ctx)),
                    Err(e1) => {
                        self.restore(s);
                        self.relation().map(|b| (b, QERR)).map_err(|e2| later(e1, e2))
                    }
                }
            }
            (Kind::Kw, w) => {
                if let Some(p) = P::from_kw(w) {
                    if self.is_punct_at(1, "[") {
                        return self.relation().map(|b| (b, QERR));
                    }
                    self.i += 1;
                    return self.after_pname(p);
                }
                match w {
                    "src" | "dst" | "host" | "net" | "port" | "portrange" | "proto" => {
                        self.head_id(P::Default)
                    }
                    "broadcast" | "multicast" => self.cast(P::Default).map(|b| (b, QERR)),
                    "less" | "greater" => {
                        self.i += 1;
                        let Some(Kind::Num(n)) = self.peek().map(|t| &t.kind) else {
                            return Err(self.err("a number"));
                        };
                        let n = *n;
                        self.i += 1;
                        let gt = B::Test(Test::Len { jmp: Jmp::Gt, n });
                        let ge = B::Test(Test::Len { jmp: Jmp::Ge, n });
                        Ok((if w == "less" { B::not(gt) } else { ge }, QERR))
                    }
                    "vlan" => {
                        self.i += 1;
                        let num = if matches!(self.peek().map(|t| &t.kind), Some(Kind::Num(_)))
                            || self.is_punct("(")
                        {
                            Some(self.pnum()?)
                        } else {
                            None
                        };
                        self.vlan(num).map(|b| (b, QERR))
                    }
                    "len" => self.relation().map(|b| (b, QERR)),
                    _ => Err(self.err(PRIMITIVE)),
                }
            }
            (Kind::Num(_), _) | (Kind::Punct, "-") => self.relation().map(|b| (b, QERR)),
            _ => Err(self.err(PRIMITIVE)),
        }
    }

    fn is_punct_at(&self, n: usize, w: &str) -> bool {
        self.peek_at(n).is_some_and(|t| t.kind == Kind::Punct && t.text == w)
    }

    /// After a protocol name: qualifiers and an id, `broadcast`/`multicast`, or the name alone.
    fn after_pname(&mut self, p: P) -> R<(B, Q)> {
        match self.peek() {
            Some(t)
                if t.kind == Kind::Kw
                    && matches!(
                        t.text.as_str(),
                        "src" | "dst" | "host" | "net" | "port" | "portrange" | "proto"
                    ) =>
            {
                self.head_id(p)
            }
            Some(t) if t.kind == Kind::Kw && matches!(t.text.as_str(), "broadcast" | "multicast") => {
                self.cast(p).map(|b| (b, QERR))
            }
            _ => {
                if p == P::Link {
                    return Err(self.err("\"host\", \"src\", \"dst\", \"proto\", \"broadcast\", \"multicast\" or \"[\" after ether"));
                }
                Ok((self.abbrev(p)?, QERR))
            }
        }
    }

    /// `head id`: direction and address-type qualifiers after the protocol `p`.
    fn head_id(&mut self, p: P) -> R<(B, Q)> {
        let mut d = D::Default;
        if self.is_kw(0, "src") || self.is_kw(0, "dst") {
            let first_src = self.is_kw(0, "src");
            let other = if first_src { "dst" } else { "src" };
            self.i += 1;
            d = if first_src { D::Src } else { D::Dst };
            if let Some(t) = self.peek() {
                if matches!(t.kind, Kind::And | Kind::Or) && self.is_kw(1, other) {
                    d = if t.kind == Kind::And { D::And } else { D::Or };
                    self.i += 2;
                } else if matches!(t.kind, Kind::And | Kind::Or) {
                    return Err(self.err_at(self.i + 1, &format!("{other:?} (as in \"src or dst\")")));
                }
            }
        }
        let a = match self.peek() {
            Some(t) if t.kind == Kind::Kw => match t.text.as_str() {
                "host" => A::Host,
                "net" => A::Net,
                "port" => A::Port,
                "portrange" => A::Portrange,
                "proto" if d == D::Default => A::Proto,
                _ => A::Default,
            },
            _ => A::Default,
        };
        if a != A::Default {
            self.i += 1;
        }
        let q = Q { p, d, a };
        let b = self.id(q)?;
        Ok((b, q))
    }

    /// `pnum: NUM | ( pnum )`.
    fn pnum(&mut self) -> R<u32> {
        self.enter()?;
        let r = match self.peek().map(|t| &t.kind) {
            Some(Kind::Num(n)) => {
                let n = *n;
                self.i += 1;
                Ok(n)
            }
            _ if self.is_punct("(") => {
                self.i += 1;
                self.pnum().and_then(|n| {
                    self.expect_punct(")")?;
                    Ok(n)
                })
            }
            _ => Err(self.err("a number")),
        };
        self.leave(r)
    }

    /// An address, number or name that takes qualifiers `q`.
    fn id(&mut self, q: Q) -> R<B> {
        self.enter()?;
        let r = self.id_inner(q);
        self.leave(r)
    }

    fn id_inner(&mut self, q: Q) -> R<B> {
        let Some(t) = self.peek() else { return Err(self.err("an address, a number or a name")) };
        if q.a == A::Undef && t.kind != Kind::Not && !(t.kind == Kind::Punct && t.text == "(") {
            return Err(self.err(PRIMITIVE));
        }
        let at = self.i;
        match &t.kind {
            Kind::Not => {
                self.i += 1;
                Ok(B::not(self.id(q)?))
            }
            Kind::Punct if t.text == "(" => {
                self.i += 1;
                // libpcap's `( pid )`: what follows the parenthesis is a number (itself maybe in
                // parentheses), an address or a name, or `not`, never a parenthesized list.
                let mut b = if self.is_punct("(") {
                    let at = self.i;
                    let v = self.pnum()?;
                    self.ncode(at, None, v, q)?
                } else {
                    self.id(q)?
                };
                while let Some(t) = self.peek() {
                    let is_and = match t.kind {
                        Kind::And => true,
                        Kind::Or => false,
                        _ => break,
                    };
                    self.i += 1;
                    let rhs = self.id(q)?;
                    b = if is_and { B::and(b, rhs) } else { B::or(b, rhs) };
                }
                self.expect_punct(")")?;
                Ok(b)
            }
            Kind::Num(v) => {
                self.i += 1;
                self.ncode(at, None, *v, q)
            }
            Kind::Id => {
                self.i += 1;
                self.scode(at, &t.text, q)
            }
            Kind::Hid => {
                self.i += 1;
                if self.is_punct("/") {
                    self.i += 1;
                    let Some(Kind::Num(len)) = self.peek().map(|t| &t.kind) else {
                        return Err(self.err("a prefix length"));
                    };
                    self.i += 1;
                    return self.mcode(at, &t.text, None, *len, q);
                }
                if self.is_kw(0, "mask") {
                    self.i += 1;
                    let Some(m) = self.peek().filter(|m| m.kind == Kind::Hid) else {
                        return Err(self.err("a dotted mask such as 255.255.0.0"));
                    };
                    self.i += 1;
                    return self.mcode(at, &t.text, Some(&m.text), 0, q);
                }
                match q.a {
                    A::Port | A::Portrange | A::Proto => {
                        let w = match q.a {
                            A::Port => "port",
                            A::Portrange => "portrange",
                            _ => "proto",
                        };
                        Err(self.err_at(at, &format!("a {w}, not an IPv4 address")))
                    }
                    _ => {
                        let Some((v, _)) = atoin(&t.text) else {
                            return Err(self.err_at(at, "a valid IPv4 address"));
                        };
                        self.ncode(at, Some(&t.text), v, q)
                    }
                }
            }
            Kind::Hid6 => {
                self.i += 1;
                let mut len = 128;
                if self.is_punct("/") {
                    self.i += 1;
                    let Some(Kind::Num(l)) = self.peek().map(|t| &t.kind) else {
                        return Err(self.err("a prefix length"));
                    };
                    len = *l;
                    self.i += 1;
                }
                self.mcode6(at, &t.text, len, q)
            }
            Kind::Eid(mac) => {
                self.i += 1;
                if !matches!(q.a, A::Host | A::Default) || q.p != P::Link {
                    return Err(self.err_at(
                        at,
                        "an address of the qualifier's kind (an Ethernet address needs ether host/src/dst)",
                    ));
                }
                Ok(self.ehost(*mac, q.d))
            }
            Kind::Kw => Err(self.err(&format!(
                "an address, a number or a name (a keyword used as a name needs a backslash: \\{})",
                t.text
            ))),
            _ => Err(self.err("an address, a number or a name")),
        }
    }

    // ----- byte expressions -----

    /// `arth relop arth`.
    fn relation(&mut self) -> R<B> {
        let (a, apre, _) = self.arth(0)?;
        let Some(t) = self.peek().filter(|t| t.kind == Kind::Punct) else {
            return Err(self.err("a comparison (=, !=, <, <=, >, >=) or an arithmetic operator"));
        };
        let (jmp, reversed) = match t.text.as_str() {
            ">" => (Jmp::Gt, false),
            ">=" => (Jmp::Ge, false),
            "=" => (Jmp::Eq, false),
            "<=" => (Jmp::Gt, true),
            "<" => (Jmp::Ge, true),
            "!=" => (Jmp::Eq, true),
            _ => return Err(self.err("a comparison (=, !=, <, <=, >, >=) or an arithmetic operator")),
        };
        self.i += 1;
        let (b, bpre, _) = self.arth(0)?;
        // The comparison takes both values from their registers.
        self.regs = self.regs.saturating_sub(2);
        // Two constants compare at compile time, as libpcap's optimizer does: `tcp[100] = 1
        // or 1 = 1` takes every frame, the load it no longer needs never made.
        let t = match (a.constant(), b.constant()) {
            (Some(x), Some(y)) => B::Const(jmp.test(x, y)),
            _ => B::Test(simple(a, jmp, b)),
        };
        let t = if reversed { B::not(t) } else { t };
        Ok(match and_opt(apre, bpre) {
            Some(pre) => B::and(pre, t),
            None => t,
        })
    }

    fn binop(&self) -> Option<(Ar, u8)> {
        let t = self.peek().filter(|t| t.kind == Kind::Punct)?;
        Some(match t.text.as_str() {
            "|" => (Ar::Or, 1),
            "&" => (Ar::And, 2),
            "<<" => (Ar::Shl, 3),
            ">>" => (Ar::Shr, 3),
            "+" => (Ar::Add, 4),
            "-" => (Ar::Sub, 4),
            "*" => (Ar::Mul, 5),
            "/" => (Ar::Div, 5),
            // `%` and `^` have no precedence in libpcap's grammar, so they always shift: they
            // bind the operand before them to the whole expression after them.
            "%" => (Ar::Mod, 0),
            "^" => (Ar::Xor, 0),
            _ => return None,
        })
    }

    fn arth(&mut self, min: u8) -> R<Arth> {
        self.enter()?;
        let r = self.arth_inner(min);
        self.leave(r)
    }

    fn arth_inner(&mut self, min: u8) -> R<Arth> {
        let mut lhs = self.unary()?;
        while let Some((op, prec)) = self.binop() {
            if prec == 0 {
                lhs = self.unbound(op, lhs)?;
                continue;
            }
            if prec < min.max(1) {
                break;
            }
            let at = self.i + 1;
            self.i += 1;
            let rhs = self.arth(prec + 1)?;
            lhs = self.arith(at, op, lhs, rhs)?;
        }
        Ok(lhs)
    }

    /// `lhs % rest` or `lhs ^ rest`: the operator without precedence takes all that follows.
    fn unbound(&mut self, op: Ar, lhs: Arth) -> R<Arth> {
        let at = self.i + 1;
        self.i += 1;
        let rhs = self.arth(0)?;
        self.arith(at, op, lhs, rhs)
    }

    fn arith(&mut self, at: usize, op: Ar, (a, apre, afirst): Arth, (b, bpre, bfirst): Arth) -> R<Arth> {
        // libpcap refuses a divisor, and a shift, by the first instruction of its code when
        // that loads a constant (`x / ip[0]` divides "by zero": the index 0 is loaded first),
        // then its optimizer what it proves constant, but for a shift of a constant, which
        // it folds (`1 << 32` is 0).
        match op {
            Ar::Div | Ar::Mod if bfirst == Some(0) || b.constant() == Some(0) => {
                return Err(self.err_at(
                    at,
                    "a divisor that is not zero and does not start with a 0 (libpcap refuses a division by zero)",
                ));
            }
            Ar::Shl | Ar::Shr
                if bfirst.is_some_and(|k| k > 31)
                    || (a.constant().is_none() && b.constant().is_some_and(|k| k > 31)) =>
            {
                return Err(
                    self.err_at(at, "a shift of at most 31 bits that does not start with a larger number")
                );
            }
            _ => {}
        }
        // The operator takes both values from their registers and leaves its own in one.
        self.regs = self.regs.saturating_sub(1);
        // libpcap's gen_arth keeps only the left operand's protocol checks: `0 - ip[9]`
        // loads the byte whatever the frame is.
        let _ = bpre;
        // What libpcap's optimizer folds: constants, and a result of 0 whatever the other
        // operand is (`0 / ip[1]`, `tcp[100] & 0`), whose load it then drops as dead, so a
        // frame too short for it, or a zero divisor in it, no longer rejects the frame.
        let zero = match op {
            Ar::Mul | Ar::And => a.constant() == Some(0) || b.constant() == Some(0),
            Ar::Div | Ar::Mod | Ar::Shl | Ar::Shr => a.constant() == Some(0),
            _ => false,
        };
        let v = Val::Bin(op, Box::new(a), Box::new(b));
        let v = match v.constant() {
            Some(k) => Val::K(k),
            None if zero => Val::K(0),
            None => v,
        };
        Ok((v, apre, afirst))
    }

    fn unary(&mut self) -> R<Arth> {
        let Some(t) = self.peek() else { return Err(self.err("a number, len, proto[offset] or \"(\"")) };
        match (&t.kind, t.text.as_str()) {
            (Kind::Punct, "-") => {
                self.i += 1;
                self.enter()?;
                let mut r = self.unary();
                while let (Ok(_), Some((op, 0))) = (&r, self.binop()) {
                    r = r.and_then(|v| self.unbound(op, v));
                }
                let (v, pre, first) = self.leave(r)?;
                Ok((Val::Neg(Box::new(v)), pre, first))
            }
            (Kind::Punct, "(") => {
                self.i += 1;
                let v = self.arth(0)?;
                self.expect_punct(")")?;
                Ok(v)
            }
            (Kind::Num(n), _) => {
                let n = *n;
                self.alloc_reg()?;
                self.i += 1;
                Ok((Val::K(n), None, Some(n)))
            }
            (Kind::Kw, "len") => {
                self.alloc_reg()?;
                self.i += 1;
                Ok((Val::Len, None, None))
            }
            (Kind::Kw, w) if P::from_kw(w).is_some() && self.is_punct_at(1, "[") => {
                let p = P::from_kw(w).unwrap_or(P::Link);
                let at = self.i;
                self.i += 2;
                let idx = self.arth(0)?;
                let mut size = 1;
                if self.is_punct(":") {
                    self.i += 1;
                    size = match self.peek().map(|t| &t.kind) {
                        Some(Kind::Num(n @ (1 | 2 | 4))) => *n as u8,
                        _ => return Err(self.err("a size of 1, 2 or 4")),
                    };
                    self.i += 1;
                }
                self.expect_punct("]")?;
                // The loaded value takes a register before the index gives its own back.
                self.alloc_reg()?;
                self.regs -= 1;
                self.load(at, p, idx, size)
            }
            _ => Err(self.err("a number, len, proto[offset] or \"(\"")),
        }
    }

    /// `proto[idx:size]`: where libpcap counts from, and what must hold for the load.
    fn load(&self, at: usize, p: P, (idx, ipre, first): Arth, size: u8) -> R<Arth> {
        let ld = |base: Base| match idx.constant() {
            Some(i) => Val::At { off: base.at(i), size },
            None => Val::Ld { base, idx: Box::new(idx), size },
        };
        let pl = self.linkpl;
        let (v, pre) = match p {
            P::Link => (ld(Base::Abs(0)), ipre),
            P::Ip | P::Ip6 | P::Arp | P::Rarp => (ld(Base::Abs(pl)), and_opt(ipre, Some(self.abbrev(p)?))),
            P::Tcp | P::Udp | P::Sctp | P::Icmp | P::Igmp | P::Igrp | P::Pim | P::Vrrp | P::Carp => {
                let checks = B::and(self.abbrev(p)?, self.not_later_fragment());
                let checks = and_opt(ipre, Some(checks)).unwrap_or(B::Const(true));
                (ld(Base::Tran(pl)), Some(B::and(self.linktype(0x0800)?, checks)))
            }
            P::Icmp6 => {
                let pre = and_opt(ipre, Some(self.linktype(0x86dd)?)).unwrap_or(B::Const(true));
                let pre = B::and(pre, cmp(Off::Abs(pl + 6), 1, Jmp::Eq, 58));
                (ld(Base::Abs(pl + 40)), Some(pre))
            }
            P::Ah | P::Esp | P::Default => {
                return Err(
                    self.err_at(at, "a protocol that can be indexed (libpcap has no index operation for it)")
                )
            }
        };
        Ok((v, pre, first))
    }

    // ----- code generation (libpcap's gen_* functions) -----

    /// The Ethernet type (or 802.3 length and LLC SAP) check, as gen_ether_linktype.
    fn linktype(&self, v: u32) -> R<B> {
        let lt = Off::Abs(self.linktype);
        let is_8023 = || B::not(cmp(lt, 2, Jmp::Gt, 1500));
        Ok(match v {
            0xfe | 0x06 | 0xf0 => B::and(is_8023(), cmp(Off::Abs(self.linkpl), 2, Jmp::Eq, (v << 8) | v)),
            0xe0 | 0x809b | 0x80f3 => {
                return Err(self.err(&format!(
                    "pcap-filter's ether proto {v:#x} (IPX or AppleTalk) is not supported by pathem"
                )))
            }
            v if v <= 1500 => B::and(is_8023(), cmp(Off::Abs(self.linktype + 2), 1, Jmp::Eq, v)),
            v => cmp(lt, 2, Jmp::Eq, v),
        })
    }

    fn not_later_fragment(&self) -> B {
        B::not(cmp(Off::Abs(self.linkpl + 6), 2, Jmp::Set, 0x1fff))
    }

    fn proto_ip(&self, v: u32) -> R<B> {
        Ok(B::and(self.linktype(0x0800)?, cmp(Off::Abs(self.linkpl + 9), 1, Jmp::Eq, v)))
    }

    /// IPv6 Next Header, or the one after a fragment header.
    fn proto_ip6(&self, v: u32) -> R<B> {
        let pl = self.linkpl;
        let nh = |v| cmp(Off::Abs(pl + 6), 1, Jmp::Eq, v);
        let after_frag = B::and(nh(44), cmp(Off::Abs(pl + 40), 1, Jmp::Eq, v));
        Ok(B::and(self.linktype(0x86dd)?, B::or(nh(v), after_frag)))
    }

    /// gen_proto: `[ip|ip6|ether] proto v`.
    fn proto(&self, at: usize, v: u32, q: Q) -> R<B> {
        if q.d != D::Default {
            return Err(self.err_at(at, "no direction before proto"));
        }
        // A value the field cannot hold would compile to a class that matches nothing.
        match q.p {
            P::Link if v > 0xffff => return Err(self.err_at(at, "an Ethernet type 0-65535")),
            P::Default | P::Ip | P::Ip6 if v > 255 => return Err(self.err_at(at, "a protocol number 0-255")),
            _ => {}
        }
        match q.p {
            P::Default => Ok(B::or(self.proto_ip(v)?, self.proto_ip6(v)?)),
            P::Link => self.linktype(v).map_err(|e| FilterError { ..self.err_at(at, &e.expected) }),
            P::Ip => self.proto_ip(v),
            P::Ip6 => self.proto_ip6(v),
            p => {
                Err(self
                    .err_at(at, &format!("ip, ip6 or ether before proto ('{} proto' is bogus)", p.name())))
            }
        }
    }

    /// A protocol name alone (gen_proto_abbrev).
    fn abbrev(&self, p: P) -> R<B> {
        let both = |v| Ok(B::or(self.proto_ip(v)?, self.proto_ip6(v)?));
        match p {
            P::Ip => self.linktype(0x0800),
            P::Ip6 => self.linktype(0x86dd),
            P::Arp => self.linktype(0x0806),
            P::Rarp => self.linktype(0x8035),
            P::Tcp => both(6),
            P::Udp => both(17),
            P::Sctp => both(132),
            P::Pim => both(103),
            P::Ah => both(51),
            P::Esp => both(50),
            P::Icmp => self.proto_ip(1),
            P::Igmp => self.proto_ip(2),
            P::Igrp => self.proto_ip(9),
            P::Vrrp | P::Carp => self.proto_ip(112),
            P::Icmp6 => self.proto_ip6(58),
            P::Link | P::Default => Err(self.err(PRIMITIVE)),
        }
    }

    fn dirs(d: D, atom: impl Fn(u32) -> B) -> B {
        match d {
            D::Src => atom(0),
            D::Dst => atom(2),
            D::And => B::and(atom(0), atom(2)),
            D::Default | D::Or => B::or(atom(0), atom(2)),
        }
    }

    /// gen_port/gen_portrange and their IPv6 twins.
    fn port(&self, lo: u32, hi: u32, proto: Option<u8>, d: D, range: bool) -> R<B> {
        let (lo, hi) = (lo.min(hi), lo.max(hi));
        let atom = |off: Off| {
            if range {
                B::and(cmp(off, 2, Jmp::Ge, lo), B::not(cmp(off, 2, Jmp::Gt, hi)))
            } else {
                cmp(off, 2, Jmp::Eq, lo)
            }
        };
        let pl = self.linkpl;
        // Source or destination: one test that loads the destination only when needed.
        let ports = |off: &dyn Fn(u32) -> Off| match d {
            D::Default | D::Or if !range => {
                B::Test(Test::Any2 { a: off(0), b: off(2), size: 2, mask: u32::MAX, val: lo })
            }
            _ => Self::dirs(d, |o| atom(off(o))),
        };
        // Without a protocol, libpcap tests sctp, tcp and udp in turn, each with its own copy
        // of the port tests (its optimizer then knows which protocol a path has seen).
        let each = |op: &dyn Fn(u32) -> B| match proto {
            Some(v) => op(u32::from(v)),
            // libpcap's order is sctp, tcp, udp: these tests of one byte exclude each other,
            // so tcp and udp first decide the same, sooner for the common protocols.
            None => B::or(op(6), B::or(op(17), op(132))),
        };
        let op4 = |v: u32| {
            let head = B::and(cmp(Off::Abs(pl + 9), 1, Jmp::Eq, v), self.not_later_fragment());
            B::and(head, ports(&|o| Off::Tran(pl, o)))
        };
        let op6 = |v: u32| B::and(cmp(Off::Abs(pl + 6), 1, Jmp::Eq, v), ports(&|o| Off::Abs(pl + 40 + o)));
        let v4 = B::and(self.linktype(0x0800)?, each(&op4));
        let v6 = B::and(self.linktype(0x86dd)?, each(&op6));
        // libpcap tests IPv6 first; both sides begin with the Ethernet type, only one of them
        // can hold, so IPv4 first decides the same and spares IPv4 frames a test.
        Ok(B::or(v4, v6))
    }

    fn hostop(&self, addr: u32, mask: u32, d: D, src: u32, dst: u32) -> B {
        let pl = self.linkpl;
        let at = |o: u32| mcmp(Off::Abs(pl + o), 4, addr, mask);
        match d {
            D::Src => at(src),
            D::Dst => at(dst),
            D::And => B::and(at(src), at(dst)),
            D::Default | D::Or if mask != 0 => {
                B::Test(Test::Any2 { a: Off::Abs(pl + src), b: Off::Abs(pl + dst), size: 4, mask, val: addr })
            }
            D::Default | D::Or => B::or(at(src), at(dst)),
        }
    }

    /// gen_host: IPv4 host or net, over IPv4, ARP and RARP unless qualified.
    fn host4(&self, at: usize, addr: u32, mask: u32, q: Q) -> R<B> {
        let on = |ll, s, d| Ok(B::and(self.linktype(ll)?, self.hostop(addr, mask, q.d, s, d)));
        match q.p {
            P::Default => Ok(B::or(B::or(on(0x0800, 12, 16)?, on(0x0806, 14, 24)?), on(0x8035, 14, 24)?)),
            P::Ip => on(0x0800, 12, 16),
            P::Arp => on(0x0806, 14, 24),
            P::Rarp => on(0x8035, 14, 24),
            p => {
                let what = if q.a == A::Net { "net" } else { "host" };
                Err(self.err_at(
                    at,
                    &format!(
                        "ip, arp or rarp before an IPv4 {what} ('{}' modifier applied to {what})",
                        p.name()
                    ),
                ))
            }
        }
    }

    /// gen_ncode: a number or dotted address with qualifiers.
    fn ncode(&self, at: usize, s: Option<&str>, v: u32, q: Q) -> R<B> {
        let vlen = match s {
            None => 32,
            Some(s) => atoin(s).map(|(_, l)| l).ok_or_else(|| self.err_at(at, "a valid IPv4 address"))?,
        };
        match q.a {
            A::Default | A::Host | A::Net => {
                if q.p == P::Link {
                    return Err(self.err_at(at, "an Ethernet address (illegal link layer address)"));
                }
                let (mut v, mut mask) = (v, u32::MAX);
                if s.is_none() && q.a == A::Net {
                    while v != 0 && v & 0xff00_0000 == 0 {
                        v <<= 8;
                        mask <<= 8;
                    }
                } else {
                    v = v.checked_shl(32 - vlen).unwrap_or(0);
                    mask = mask.checked_shl(32 - vlen).unwrap_or(0);
                }
                self.host4(at, v, mask, q)
            }
            A::Port | A::Portrange => {
                let Some(proto) = q.p.port_proto() else {
                    return Err(self.err_at(at, "tcp, udp or sctp before port (illegal qualifier of 'port')"));
                };
                if v > 65535 {
                    return Err(self.err_at(at, "a port number 0-65535"));
                }
                self.port(v, v, proto, q.d, q.a == A::Portrange)
            }
            A::Proto => self.proto(at, v, q),
            A::Undef => Err(self.err_at(at, PRIMITIVE)),
        }
    }

    /// gen_mcode: `net A.B.C.D/len` and `net A.B.C.D mask M`.
    fn mcode(&self, at: usize, s1: &str, s2: Option<&str>, masklen: u32, q: Q) -> R<B> {
        let Some((n, nlen)) = atoin(s1) else { return Err(self.err_at(at, "a valid IPv4 address")) };
        let n = n.checked_shl(32 - nlen).unwrap_or(0);
        let m = match s2 {
            Some(s2) => {
                let Some((m, mlen)) = atoin(s2) else { return Err(self.err_at(at + 2, "a valid IPv4 mask")) };
                m.checked_shl(32 - mlen).unwrap_or(0)
            }
            None if masklen > 32 => return Err(self.err_at(at + 2, "a prefix length of at most 32")),
            None => u32::MAX.checked_shl(32 - masklen).unwrap_or(0),
        };
        if n & !m != 0 {
            return Err(self.err_at(at, "a network without host bits set (libpcap: non-network bits set)"));
        }
        if q.a != A::Net {
            return Err(self.err_at(at, "net before an address with a mask (mask syntax for networks only)"));
        }
        self.host4(at, n, m, q)
    }

    /// gen_mcode6: an IPv6 host or `net ADDR/len`.
    fn mcode6(&self, at: usize, s: &str, masklen: u32, q: Q) -> R<B> {
        let Ok(addr) = s.parse::<Ipv6Addr>() else { return Err(self.err_at(at, "a valid IPv6 address")) };
        if masklen > 128 {
            return Err(self.err_at(at + 2, "a prefix length of at most 128"));
        }
        let mask = u128::MAX.checked_shl(128 - masklen).unwrap_or(0);
        let a = u128::from(addr);
        if a & !mask != 0 {
            return Err(self.err_at(at, "a network without host bits set (libpcap: non-network bits set)"));
        }
        match q.a {
            A::Default | A::Host if masklen != 128 => {
                return Err(
                    self.err_at(at, "net before an address with a mask (mask syntax for networks only)")
                )
            }
            A::Default | A::Host | A::Net => {}
            _ => return Err(self.err_at(at, "host or net before an IPv6 address")),
        }
        if !matches!(q.p, P::Default | P::Ip6) {
            return Err(self.err_at(
                at,
                &format!("ip6 before an IPv6 address ('{}' modifier applied to ip6 host)", q.p.name()),
            ));
        }
        let pl = self.linkpl;
        let word = |v: u128, k: u32| (v >> (96 - 32 * k)) as u32;
        let one = |off: u32| {
            let w = |k: u32| mcmp(Off::Abs(pl + off + 4 * k), 4, word(a, k), word(mask, k));
            B::and(w(0), B::and(w(1), B::and(w(2), w(3))))
        };
        let op = match q.d {
            D::Src => one(8),
            D::Dst => one(24),
            D::And => B::and(one(8), one(24)),
            D::Default | D::Or => B::or(one(8), one(24)),
        };
        Ok(B::and(self.linktype(0x86dd)?, op))
    }

    /// gen_scode: a name with qualifiers.
    fn scode(&self, at: usize, name: &str, q: Q) -> R<B> {
        match q.a {
            A::Net => Err(self.err_at(
                at,
                "a numeric network (network names need a networks database, which pathem does not use)",
            )),
            A::Default | A::Host => {
                let what = if q.p == P::Link {
                    "an Ethernet address (ether host names need /etc/ethers"
                } else {
                    "an IP address (host names need DNS"
                };
                Err(self.err_at(at, &format!("{what}, which pathem does not use)")))
            }
            A::Port => {
                let Some(qp) = q.p.port_proto() else {
                    return Err(self.err_at(at, "tcp, udp or sctp before port (illegal qualifier of 'port')"));
                };
                let Some((port, named)) = port_by_name(name) else {
                    return Err(self.err_at(
                        at,
                        "a port number or a service name pathem knows (http, domain, ssh, ...)",
                    ));
                };
                let proto = match (qp, named) {
                    (Some(a), Some(b)) if a != b => {
                        let is = if b == 6 { "tcp" } else { "udp" };
                        return Err(
                            self.err_at(at, &format!("a port of this protocol (port '{name}' is {is})"))
                        );
                    }
                    (Some(a), _) => Some(a),
                    (None, n) => n,
                };
                self.port(u32::from(port), u32::from(port), proto, q.d, false)
            }
            A::Portrange => {
                let Some(proto) = q.p.port_proto() else {
                    return Err(self
                        .err_at(at, "tcp, udp or sctp before portrange (illegal qualifier of 'portrange')"));
                };
                // Both ends all digits (`1-100abc` is a typo, not 1-100); a number too long
                // for u64 is as out of range as 65 536.
                let range = name.split_once('-').and_then(|(a, b)| {
                    let num = |s: &str| {
                        (!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
                            .then(|| s.parse::<u64>().unwrap_or(u64::MAX))
                    };
                    Some((num(a)?, num(b)?))
                });
                let Some((lo, hi)) = range else {
                    return Err(self.err_at(
                        at,
                        "a numeric port range N-M (service names in ranges are not supported by pathem)",
                    ));
                };
                if lo > 65535 || hi > 65535 {
                    return Err(self.err_at(at, "ports 0-65535"));
                }
                self.port(lo as u32, hi as u32, proto, q.d, true)
            }
            A::Proto => {
                let v = match q.p {
                    P::Default | P::Ip | P::Ip6 => ip_proto_by_name(name),
                    P::Link => ether_proto_by_name(name),
                    _ => None,
                };
                let Some(v) = v else {
                    return Err(self.err_at(at, "a protocol number or a protocol name pathem knows"));
                };
                self.proto(at, v, q)
            }
            A::Undef => Err(self.err_at(at, PRIMITIVE)),
        }
    }

    /// gen_ehostop: Ethernet source and/or destination.
    fn ehost(&self, mac: [u8; 6], d: D) -> B {
        let hi = u32::from(u16::from_be_bytes([mac[0], mac[1]]));
        let lo = u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]);
        let at = |o: u32| B::and(cmp(Off::Abs(o + 2), 4, Jmp::Eq, lo), cmp(Off::Abs(o), 2, Jmp::Eq, hi));
        match d {
            D::Src => at(6),
            D::Dst => at(0),
            D::And => B::and(at(6), at(0)),
            D::Default | D::Or => B::or(at(6), at(0)),
        }
    }

    /// `[ether|ip|ip6] broadcast|multicast` (tcpdump reading a file has no netmask: an IPv4
    /// broadcast is 0.0.0.0 or 255.255.255.255).
    fn cast(&mut self, p: P) -> R<B> {
        let broadcast = self.is_kw(0, "broadcast");
        let at = self.i;
        self.i += 1;
        let pl = self.linkpl;
        Ok(match (p, broadcast) {
            (P::Default | P::Link, true) => {
                B::and(cmp(Off::Abs(2), 4, Jmp::Eq, u32::MAX), cmp(Off::Abs(0), 2, Jmp::Eq, 0xffff))
            }
            (P::Default | P::Link, false) => cmp(Off::Abs(0), 1, Jmp::Set, 1),
            (P::Ip, true) => {
                let d = |v| cmp(Off::Abs(pl + 16), 4, Jmp::Eq, v);
                B::and(self.linktype(0x0800)?, B::or(d(0), d(u32::MAX)))
            }
            (P::Ip, false) => B::and(self.linktype(0x0800)?, cmp(Off::Abs(pl + 16), 1, Jmp::Ge, 224)),
            (P::Ip6, false) => B::and(self.linktype(0x86dd)?, cmp(Off::Abs(pl + 24), 1, Jmp::Eq, 255)),
            _ => return Err(self.err_at(
                at,
                "ether, ip or ip6 broadcast/multicast (only link-layer/IP broadcast filters are supported)",
            )),
        })
    }

    /// gen_vlan without BPF extensions (as for a file): a VLAN TPID, then the offsets of
    /// everything after grow by 4.
    fn vlan(&mut self, num: Option<u32>) -> R<B> {
        let tpid =
            B::Test(Test::In { off: Off::Abs(self.linktype), size: 2, vals: [0x8100, 0x88a8, 0x9100] });
        let b = match num {
            Some(n) if n > 0x0fff => return Err(self.err_at(self.i - 1, "a VLAN ID of at most 4095")),
            Some(n) => B::and(tpid, mcmp(Off::Abs(self.linkpl), 2, n, 0x0fff)),
            None => tpid,
        };
        self.linktype += 4;
        self.linkpl += 4;
        Ok(b)
    }
}
