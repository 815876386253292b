//! The compiled form: a boolean tree of tests, flattened into an array of tests with a jump
//! for true and one for false (as BPF's conditional jumps), run per frame without allocation.

/// Where a fixed-size field is loaded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Off {
    /// This many bytes from the frame's start.
    Abs(u32),
    /// After the IPv4 header that starts at `.0` (its IHL read from the frame), plus `.1`.
    Tran(u32, u32),
}

/// A BPF conditional jump's test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Jmp {
    Eq,
    Gt,
    Ge,
    /// Any of these bits set.
    Set,
}

impl Jmp {
    #[inline(always)]
    pub(crate) fn test(self, a: u32, b: u32) -> bool {
        match self {
            Jmp::Eq => a == b,
            Jmp::Gt => a > b,
            Jmp::Ge => a >= b,
            Jmp::Set => a & b != 0,
        }
    }
}

/// An arithmetic operator of a byte expression (32-bit unsigned, as BPF).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ar {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

impl Ar {
    /// `None` for a division by zero, which makes BPF reject the frame.
    pub(crate) fn apply(self, a: u32, b: u32) -> Option<u32> {
        Some(match self {
            Ar::Add => a.wrapping_add(b),
            Ar::Sub => a.wrapping_sub(b),
            Ar::Mul => a.wrapping_mul(b),
            Ar::Div => a.checked_div(b)?,
            Ar::Mod => a.checked_rem(b)?,
            Ar::And => a & b,
            Ar::Or => a | b,
            Ar::Xor => a ^ b,
            Ar::Shl => a.checked_shl(b).unwrap_or(0),
            Ar::Shr => a.checked_shr(b).unwrap_or(0),
        })
    }
}

/// Where an indexed load (`proto[expr]`) counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Base {
    /// A fixed offset.
    Abs(u32),
    /// After the IPv4 header starting at this offset.
    Tran(u32),
}

impl Base {
    /// Where a load at the constant index `i` reads: libpcap's optimizer folds the index into
    /// the load's offset, modulo 2^32 (`ip[-14:2]` is the Ethernet type).
    pub(crate) fn at(self, i: u32) -> Off {
        match self {
            Base::Abs(k) => Off::Abs(k.wrapping_add(i)),
            Base::Tran(k) => Off::Tran(k, i),
        }
    }
}

/// A value of a byte expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Val {
    K(u32),
    /// The frame's length on the wire.
    Len,
    /// A load at a constant index, folded when compiled ([`Base::at`]).
    At {
        off: Off,
        size: u8,
    },
    /// A load at an index computed from the frame.
    Ld {
        base: Base,
        idx: Box<Val>,
        size: u8,
    },
    Neg(Box<Val>),
    Bin(Ar, Box<Val>, Box<Val>),
}

#[inline(always)]
fn load(p: &[u8], off: usize, size: u8) -> Option<u32> {
    let at = p.get(off..)?;
    match size {
        1 => at.first().map(|&b| u32::from(b)),
        2 => at.first_chunk::<2>().map(|b| u32::from(u16::from_be_bytes(*b))),
        _ => at.first_chunk::<4>().map(|b| u32::from_be_bytes(*b)),
    }
}

#[inline(always)]
fn ihl(p: &[u8], at: u32) -> Option<u32> {
    Some(4 * (u32::from(*p.get(at as usize)?) & 0xf))
}

impl Val {
    /// `None`: a load beyond the frame or a division by zero; BPF rejects the frame.
    fn eval(&self, p: &[u8], len: u32) -> Option<u32> {
        match self {
            Val::K(k) => Some(*k),
            Val::Len => Some(len),
            Val::At { off, size } => load(p, off.at(p)?, *size),
            Val::Ld { base, idx, size } => {
                // BPF's `ld [x + k]` refuses a sum past 2^32 as past the frame (the index and
                // the header length are added modulo 2^32 first, by the ALU).
                let at = match base {
                    Base::Abs(k) => idx.eval(p, len)?.checked_add(*k),
                    Base::Tran(k) => idx.eval(p, len)?.wrapping_add(ihl(p, *k)?).checked_add(*k),
                };
                load(p, at? as usize, *size)
            }
            Val::Neg(a) => Some(a.eval(p, len)?.wrapping_neg()),
            Val::Bin(op, a, b) => {
                let a = a.eval(p, len)?;
                op.apply(a, b.eval(p, len)?)
            }
        }
    }

    /// The value when it does not depend on the frame.
    pub(crate) fn constant(&self) -> Option<u32> {
        match self {
            Val::K(k) => Some(*k),
            Val::Neg(a) => Some(a.constant()?.wrapping_neg()),
            Val::Bin(op, a, b) => op.apply(a.constant()?, b.constant()?),
            Val::Len | Val::At { .. } | Val::Ld { .. } => None,
        }
    }
}

/// One test of the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Test {
    /// `(load(off, size) & mask) jmp val`.
    Cmp { off: Off, size: u8, mask: u32, jmp: Jmp, val: u32 },
    /// `load(off, size)` is one of `vals` (libpcap's chain of equality tests on one field).
    In { off: Off, size: u8, vals: [u32; 3] },
    /// `load(a) & mask == val || load(b) & mask == val`, `b` loaded only when `a` differs
    /// (libpcap's `src or dst` tests).
    Any2 { a: Off, b: Off, size: u8, mask: u32, val: u32 },
    /// `a jmp b` between byte expressions.
    Rel { a: Val, jmp: Jmp, b: Val },
    /// `wire_len jmp n`.
    Len { jmp: Jmp, n: u32 },
}

impl Off {
    #[inline(always)]
    fn at(self, p: &[u8]) -> Option<usize> {
        Some(match self {
            Off::Abs(k) => k as usize,
            // libpcap folds the constant index into the load's offset when compiling
            // (modulo 2^32), then `ld [x + k]` with the header length in x refuses a sum past
            // 2^32 as past the frame (`tcp[-20]` matches nothing).
            Off::Tran(k, o) => ihl(p, k)?.checked_add(k.wrapping_add(o))? as usize,
        })
    }
}

impl Test {
    fn eval(&self, p: &[u8], len: u32) -> Option<bool> {
        match self {
            Test::Cmp { off, size, mask, jmp, val } => {
                Some(jmp.test(load(p, off.at(p)?, *size)? & mask, *val))
            }
            Test::In { off, size, vals } => {
                let v = load(p, off.at(p)?, *size)?;
                Some(vals.contains(&v))
            }
            Test::Any2 { a, b, size, mask, val } => {
                Some(load(p, a.at(p)?, *size)? & mask == *val || load(p, b.at(p)?, *size)? & mask == *val)
            }
            Test::Rel { a, jmp, b } => {
                let a = a.eval(p, len)?;
                Some(jmp.test(a, b.eval(p, len)?))
            }
            Test::Len { jmp, n } => Some(jmp.test(len, *n)),
        }
    }
}

/// A filter's boolean structure before flattening.
#[derive(Debug, Clone)]
pub(crate) enum B {
    Const(bool),
    Test(Test),
    And(Box<B>, Box<B>),
    Or(Box<B>, Box<B>),
    Not(Box<B>),
}

impl B {
    /// The tree walked as written, without fused tests or threaded jumps: what the flat
    /// program must agree with (tests only).
    #[cfg(test)]
    pub(crate) fn eval(&self, p: &[u8], len: u32) -> Option<bool> {
        Some(match self {
            B::Const(c) => *c,
            B::Test(t) => t.eval(p, len)?,
            B::And(a, b) => a.eval(p, len)? && b.eval(p, len)?,
            B::Or(a, b) => a.eval(p, len)? || b.eval(p, len)?,
            B::Not(a) => !a.eval(p, len)?,
        })
    }

    pub(crate) fn and(a: B, b: B) -> B {
        B::And(Box::new(a), Box::new(b))
    }
    pub(crate) fn or(a: B, b: B) -> B {
        B::Or(Box::new(a), Box::new(b))
    }
    // A method, not `std::ops::Not`: it builds a node.
    #[allow(clippy::should_implement_trait)]
    pub(crate) fn not(a: B) -> B {
        B::Not(Box::new(a))
    }
}

#[cold]
#[inline(never)]
fn cold() {}

/// `b`, as a branch rather than a select: the next test's index then does not wait for the
/// frame's bytes, so the processor runs ahead on its prediction (as hashbrown's `likely`).
#[inline(always)]
fn branch(b: bool) -> bool {
    if !b {
        cold();
    }
    b
}

const ACCEPT: u32 = u32::MAX;
const REJECT: u32 = u32::MAX - 1;

/// A test with its jumps. Comparisons of a field at a fixed place, the commonest tests, are
/// kept inline; the rest are boxed so that the array stays compact.
#[derive(Debug, Clone, PartialEq)]
enum Insn {
    /// A byte, half-word or word at a fixed offset equals `val` (the commonest tests, made
    /// last from `Abs`: fewer branches per test).
    Eq8 {
        off: u32,
        val: u32,
        jt: u32,
        jf: u32,
    },
    Eq16 {
        off: u32,
        val: u32,
        jt: u32,
        jf: u32,
    },
    Eq32 {
        off: u32,
        val: u32,
        jt: u32,
        jf: u32,
    },
    /// Any of the bits of `val` set in the half-word at `off` (the fragment offset test).
    Set16 {
        off: u32,
        val: u32,
        jt: u32,
        jf: u32,
    },
    /// The word at `a`, or else the one at `b`, equals `val` (an IPv4 host).
    Any32 {
        a: u32,
        b: u32,
        val: u32,
        jt: u32,
        jf: u32,
    },
    Abs {
        off: u32,
        size: u8,
        jmp: Jmp,
        mask: u32,
        val: u32,
        jt: u32,
        jf: u32,
    },
    AbsIn {
        off: u32,
        size: u8,
        vals: [u32; 3],
        jt: u32,
        jf: u32,
    },
    AbsAny2 {
        a: u32,
        b: u32,
        size: u8,
        mask: u32,
        val: u32,
        jt: u32,
        jf: u32,
    },
    /// A field after the IPv4 header that starts at `ip`.
    Tran {
        ip: u32,
        off: u32,
        size: u8,
        jmp: Jmp,
        mask: u32,
        val: u32,
        jt: u32,
        jf: u32,
    },
    /// Either of two 16-bit fields after the IPv4 header (the ports).
    TranAny2 {
        ip: u32,
        a: u32,
        b: u32,
        val: u32,
        jt: u32,
        jf: u32,
    },
    Other {
        test: Box<Test>,
        jt: u32,
        jf: u32,
    },
    /// A chain of `Any32` tests of the same two words (hosts of several filters, one after the
    /// other), made at once: the words loaded once, then each case's value in order, to its
    /// `jt`; none, to `jf`. A frame too short for the second word goes where the case whose
    /// test needed it would have failed (`oob`).
    Any32Set {
        a: u32,
        b: u32,
        cases: Box<[Case]>,
        jf: u32,
        /// Where a frame too short for the first word goes (the chain's head's failure).
        oob: u32,
    },
    /// A chain of equality tests of one field (ports, networks of several filters), made at
    /// once: the field loaded once, then each case's `(value, jt)` in order; none, to `jf`;
    /// a frame too short for the field, to `oob` (the head's failure, as the chain would).
    EqSet {
        field: Field,
        cases: Box<[(u32, u32)]>,
        jf: u32,
        oob: u32,
    },
}

/// A field several tests compare with a value, for [`Insn::EqSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Field {
    off: Off,
    size: u8,
    mask: u32,
}

/// A case of [`Insn::Any32Set`]: its value, where it jumps, where a short frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Case {
    val: u32,
    jt: u32,
    oob: u32,
}

impl Insn {
    /// The test alone, its jumps cleared: two tests equal so are the same test of the frame.
    fn test_only(&self) -> Insn {
        let mut t = self.clone();
        let (jt, jf) = t.jumps();
        (*jt, *jf) = (0, 0);
        t
    }

    fn targets(&self) -> (u32, u32) {
        // A copy, to read the jumps through the one match that names them (compile time only).
        let mut copy = self.clone();
        let (jt, jf) = copy.jumps();
        (*jt, *jf)
    }

    fn jumps(&mut self) -> (&mut u32, &mut u32) {
        match self {
            Insn::Eq8 { jt, jf, .. }
            | Insn::Set16 { jt, jf, .. }
            | Insn::Any32 { jt, jf, .. }
            | Insn::Eq16 { jt, jf, .. }
            | Insn::Eq32 { jt, jf, .. }
            | Insn::Abs { jt, jf, .. }
            | Insn::AbsIn { jt, jf, .. }
            | Insn::AbsAny2 { jt, jf, .. }
            | Insn::Tran { jt, jf, .. }
            | Insn::TranAny2 { jt, jf, .. }
            | Insn::Other { jt, jf, .. } => (jt, jf),
            // Made after every pass over the jumps (see `Combined::new`): its cases' jumps stay.
            Insn::Any32Set { jf, oob, .. } | Insn::EqSet { jf, oob, .. } => (jf, oob),
        }
    }

    /// The field and value of an equality test, with its jumps.
    fn equality(&self) -> Option<(Field, u32, u32, u32)> {
        let abs = |off, size, mask| Field { off: Off::Abs(off), size, mask };
        Some(match *self {
            Insn::Eq8 { off, val, jt, jf } => (abs(off, 1, u32::MAX), val, jt, jf),
            Insn::Eq16 { off, val, jt, jf } => (abs(off, 2, u32::MAX), val, jt, jf),
            Insn::Eq32 { off, val, jt, jf } => (abs(off, 4, u32::MAX), val, jt, jf),
            Insn::Abs { off, size, jmp: Jmp::Eq, mask, val, jt, jf } => (abs(off, size, mask), val, jt, jf),
            Insn::Tran { ip, off, size, jmp: Jmp::Eq, mask, val, jt, jf } => {
                (Field { off: Off::Tran(ip, off), size, mask }, val, jt, jf)
            }
            _ => return None,
        })
    }
}

/// Tests with their jumps; every jump goes to a lower index or to an end, so a run ends.
#[derive(Debug, Clone)]
pub(crate) struct Prog {
    insns: Vec<Insn>,
    start: u32,
}

impl Prog {
    pub(crate) fn new(root: &B) -> Prog {
        let mut insns = Vec::new();
        let start = emit(root, ACCEPT, REJECT, &mut insns);
        let mut start = start;
        // As libpcap's optimizer, to a fixed point (each round only shortens paths): jumps
        // threaded past tests the path already knows, and tests whose two jumps meet removed,
        // loads and all (so `tcp or port 80` accepts a TCP frame cut before its ports).
        for _ in 0..16 {
            let before = insns.iter().map(Insn::targets).collect::<Vec<_>>();
            thread_jumps(&mut insns, &[start]);
            start = drop_useless(&mut insns, start);
            if insns.iter().map(Insn::targets).eq(before) {
                break;
            }
        }
        specialize(&mut insns);
        Prog { insns, start }
    }

    /// Whether the program accepts every frame without looking at it.
    pub(crate) fn is_match_all(&self) -> bool {
        self.start == ACCEPT
    }

    #[inline(always)]
    pub(crate) fn run(&self, p: &[u8], len: u32) -> bool {
        self.run_to(p, len, |_| REJECT) == ACCEPT
    }

    /// Runs the program to its end (a target past the instructions); a load beyond the frame
    /// at instruction `pc` goes on at `oob(pc)` (BPF: the filter rejects the frame).
    #[inline(always)]
    fn run_to(&self, p: &[u8], len: u32, oob: impl Fn(u32) -> u32) -> u32 {
        let mut pc = self.start;
        loop {
            let at = pc;
            macro_rules! fail {
                () => {{
                    pc = oob(at);
                    continue;
                }};
            }
            let Some(i) = self.insns.get(pc as usize) else { return pc };
            pc = match i {
                Insn::Eq8 { off, val, jt, jf } => {
                    let Some(&b) = p.get(*off as usize) else { fail!() };
                    if branch(u32::from(b) == *val) {
                        *jt
                    } else {
                        *jf
                    }
                }
                Insn::Eq16 { off, val, jt, jf } => {
                    let Some(b) = p.get(*off as usize..).and_then(<[u8]>::first_chunk::<2>) else { fail!() };
                    if branch(u32::from(u16::from_be_bytes(*b)) == *val) {
                        *jt
                    } else {
                        *jf
                    }
                }
                Insn::Eq32 { off, val, jt, jf } => {
                    let Some(b) = p.get(*off as usize..).and_then(<[u8]>::first_chunk::<4>) else { fail!() };
                    if branch(u32::from_be_bytes(*b) == *val) {
                        *jt
                    } else {
                        *jf
                    }
                }
                Insn::Set16 { off, val, jt, jf } => {
                    let Some(b) = p.get(*off as usize..).and_then(<[u8]>::first_chunk::<2>) else { fail!() };
                    if branch(u32::from(u16::from_be_bytes(*b)) & *val != 0) {
                        *jt
                    } else {
                        *jf
                    }
                }
                Insn::Any32 { a, b, val, jt, jf } => {
                    let Some(w) = p.get(*a as usize..).and_then(<[u8]>::first_chunk::<4>) else { fail!() };
                    if branch(u32::from_be_bytes(*w) == *val) {
                        *jt
                    } else {
                        let Some(w) = p.get(*b as usize..).and_then(<[u8]>::first_chunk::<4>) else {
                            fail!()
                        };
                        if branch(u32::from_be_bytes(*w) == *val) {
                            *jt
                        } else {
                            *jf
                        }
                    }
                }
                Insn::Abs { off, size, jmp, mask, val, jt, jf } => {
                    let Some(v) = load(p, *off as usize, *size) else { fail!() };
                    if branch(jmp.test(v & mask, *val)) {
                        *jt
                    } else {
                        *jf
                    }
                }
                Insn::AbsIn { off, size, vals, jt, jf } => {
                    let Some(v) = load(p, *off as usize, *size) else { fail!() };
                    if branch(vals.contains(&v)) {
                        *jt
                    } else {
                        *jf
                    }
                }
                Insn::AbsAny2 { a, b, size, mask, val, jt, jf } => {
                    let Some(v) = load(p, *a as usize, *size) else { fail!() };
                    if branch(v & mask == *val) {
                        *jt
                    } else {
                        let Some(v) = load(p, *b as usize, *size) else { fail!() };
                        if branch(v & mask == *val) {
                            *jt
                        } else {
                            *jf
                        }
                    }
                }
                Insn::Tran { ip, off, size, jmp, mask, val, jt, jf } => {
                    let Some(at) = Off::Tran(*ip, *off).at(p) else { fail!() };
                    let Some(v) = load(p, at, *size) else { fail!() };
                    if branch(jmp.test(v & mask, *val)) {
                        *jt
                    } else {
                        *jf
                    }
                }
                Insn::TranAny2 { ip, a, b, val, jt, jf } => {
                    let Some(base) = Off::Tran(*ip, 0).at(p) else { fail!() };
                    let Some(v) = load(p, base.saturating_add(*a as usize), 2) else { fail!() };
                    if branch(v == *val) {
                        *jt
                    } else {
                        let Some(v) = load(p, base.saturating_add(*b as usize), 2) else { fail!() };
                        if branch(v == *val) {
                            *jt
                        } else {
                            *jf
                        }
                    }
                }
                Insn::Other { test, jt, jf } => match test.eval(p, len) {
                    Some(true) => *jt,
                    Some(false) => *jf,
                    None => fail!(),
                },
                Insn::EqSet { field, cases, jf, oob } => {
                    let Some(v) = field.off.at(p).and_then(|at| load(p, at, field.size)) else {
                        pc = *oob;
                        continue;
                    };
                    let v = v & field.mask;
                    cases.iter().find(|c| c.0 == v).map_or(*jf, |c| c.1)
                }
                Insn::Any32Set { a, b, cases, jf, oob } => {
                    let Some(w) = p.get(*a as usize..).and_then(<[u8]>::first_chunk::<4>) else {
                        pc = *oob;
                        continue;
                    };
                    let wa = u32::from_be_bytes(*w);
                    let wb = p
                        .get(*b as usize..)
                        .and_then(<[u8]>::first_chunk::<4>)
                        .map(|w| u32::from_be_bytes(*w));
                    let mut to = *jf;
                    for c in cases.iter() {
                        if wa == c.val {
                            to = c.jt;
                            break;
                        }
                        match wb {
                            Some(wb) if wb == c.val => {
                                to = c.jt;
                                break;
                            }
                            Some(_) => {}
                            None => {
                                to = c.oob;
                                break;
                            }
                        }
                    }
                    to
                }
            };
        }
    }
}

/// The commonest tests as their own instructions (fewer branches per test).
fn specialize(insns: &mut [Insn]) {
    for i in insns.iter_mut() {
        *i = match *i {
            Insn::Abs { off, size: 1, jmp: Jmp::Eq, mask: u32::MAX, val, jt, jf } => {
                Insn::Eq8 { off, val, jt, jf }
            }
            Insn::Abs { off, size: 2, jmp: Jmp::Eq, mask: u32::MAX, val, jt, jf } => {
                Insn::Eq16 { off, val, jt, jf }
            }
            Insn::Abs { off, size: 4, jmp: Jmp::Eq, mask: u32::MAX, val, jt, jf } => {
                Insn::Eq32 { off, val, jt, jf }
            }
            Insn::Abs { off, size: 2, jmp: Jmp::Set, mask: u32::MAX, val, jt, jf } => {
                Insn::Set16 { off, val, jt, jf }
            }
            Insn::AbsAny2 { a, b, size: 4, mask: u32::MAX, val, jt, jf } => Insn::Any32 { a, b, val, jt, jf },
            _ => continue,
        };
    }
}

/// A specialised instruction as the general one it stands for (what threading reasons on).
fn general(i: &Insn) -> Insn {
    match *i {
        Insn::Eq8 { off, val, jt, jf } => {
            Insn::Abs { off, size: 1, jmp: Jmp::Eq, mask: u32::MAX, val, jt, jf }
        }
        Insn::Eq16 { off, val, jt, jf } => {
            Insn::Abs { off, size: 2, jmp: Jmp::Eq, mask: u32::MAX, val, jt, jf }
        }
        Insn::Eq32 { off, val, jt, jf } => {
            Insn::Abs { off, size: 4, jmp: Jmp::Eq, mask: u32::MAX, val, jt, jf }
        }
        Insn::Set16 { off, val, jt, jf } => {
            Insn::Abs { off, size: 2, jmp: Jmp::Set, mask: u32::MAX, val, jt, jf }
        }
        Insn::Any32 { a, b, val, jt, jf } => Insn::AbsAny2 { a, b, size: 4, mask: u32::MAX, val, jt, jf },
        ref other => other.clone(),
    }
}

/// Several filters tried in order as one program: the first that accepts a frame names its
/// lane (its place from 1), none accepting is lane 0. Each filter's own (optimised) program is
/// kept whole, its accept jumping to its lane's end and its reject to the next filter; then
/// jumps are threaded across filters, so a test a filter made is not made again by the next
/// (`host A`, `host B` test the Ethernet type once). A load beyond the frame rejects the
/// filter it belongs to (BPF's meaning), and the next filter is tried from its start.
#[derive(Debug, Clone)]
pub(crate) struct Combined {
    prog: Prog,
    /// For each instruction, where its filter's reject goes (the next filter's start).
    reject: Vec<u32>,
}

/// The chain of `Any32` tests of the same two words that starts at `i`, each false jump to the
/// next, as one [`Insn::Any32Set`] (when it has two tests or more).
fn any32_set(insns: &[Insn], reject: &[u32], i: usize) -> Option<Insn> {
    let Insn::Any32 { a, b, .. } = insns[i] else { return None };
    let (mut cases, mut at) = (Vec::new(), i);
    loop {
        match insns.get(at) {
            Some(&Insn::Any32 { a: a2, b: b2, val, jt, jf }) if (a2, b2) == (a, b) && cases.len() < 64 => {
                cases.push(Case { val, jt, oob: *reject.get(at)? });
                at = jf as usize;
            }
            _ => break,
        }
    }
    (cases.len() >= 2).then(|| Insn::Any32Set { a, b, cases: cases.into(), jf: at as u32, oob: reject[i] })
}

/// The chain of equality tests of one field that starts at `i`, each false jump to the next,
/// as one [`Insn::EqSet`] (when it has two tests or more).
fn eq_set(insns: &[Insn], reject: &[u32], i: usize) -> Option<Insn> {
    let (field, ..) = insns[i].equality()?;
    let (mut cases, mut at) = (Vec::new(), i);
    while let Some((f, val, jt, jf)) = insns.get(at).and_then(Insn::equality) {
        if f != field || cases.len() >= 64 {
            break;
        }
        cases.push((val, jt));
        at = jf as usize;
    }
    (cases.len() >= 2).then(|| Insn::EqSet { field, cases: cases.into(), jf: at as u32, oob: reject[i] })
}

/// The end of lane `k` in a combined program.
const fn lane_end(k: usize) -> u32 {
    u32::MAX - k as u32
}

impl Combined {
    pub(crate) fn new(progs: &[&Prog]) -> Combined {
        let (mut insns, mut reject, mut entries) = (Vec::new(), Vec::new(), Vec::new());
        // The last filter first: every jump goes to a lower index or to an end.
        let mut next = lane_end(0);
        for (k, p) in progs.iter().enumerate().rev() {
            let base = insns.len() as u32;
            let map = |t: u32| match t {
                ACCEPT => lane_end(k + 1),
                REJECT => next,
                t => base + t,
            };
            for i in &p.insns {
                let mut g = general(i);
                let (jt, jf) = g.jumps();
                (*jt, *jf) = (map(*jt), map(*jf));
                insns.push(g);
                reject.push(next);
            }
            next = map(p.start);
            entries.push(next);
        }
        thread_jumps(&mut insns, &entries);
        specialize(&mut insns);
        let sets: Vec<Option<Insn>> = (0..insns.len())
            .map(|i| any32_set(&insns, &reject, i).or_else(|| eq_set(&insns, &reject, i)))
            .collect();
        for (i, set) in sets.into_iter().enumerate() {
            if let Some(set) = set {
                insns[i] = set;
            }
        }
        Combined { prog: Prog { insns, start: next }, reject }
    }

    /// The lane of the first filter that accepts the frame (from 1), or 0.
    #[inline(always)]
    pub(crate) fn lane(&self, p: &[u8], len: u32) -> usize {
        let end = self.prog.run_to(p, len, |pc| self.reject.get(pc as usize).copied().unwrap_or(lane_end(0)));
        (u32::MAX - end) as usize
    }
}

/// Emits `b` to continue at `t` when true and `f` when false; returns its entry.
fn emit(b: &B, t: u32, f: u32, out: &mut Vec<Insn>) -> u32 {
    match b {
        B::Const(true) => t,
        B::Const(false) => f,
        B::Test(test) => {
            out.push(match *test {
                Test::Cmp { off: Off::Abs(off), size, mask, jmp, val } => {
                    Insn::Abs { off, size, jmp, mask, val, jt: t, jf: f }
                }
                Test::Cmp { off: Off::Tran(ip, off), size, mask, jmp, val } => {
                    Insn::Tran { ip, off, size, jmp, mask, val, jt: t, jf: f }
                }
                Test::Any2 { a: Off::Tran(ip, a), b: Off::Tran(ip2, b), size: 2, mask: u32::MAX, val }
                    if ip == ip2 && a < 0x10000 && b < 0x10000 =>
                {
                    Insn::TranAny2 { ip, a, b, val, jt: t, jf: f }
                }
                Test::In { off: Off::Abs(off), size, vals } => Insn::AbsIn { off, size, vals, jt: t, jf: f },
                Test::Any2 { a: Off::Abs(a), b: Off::Abs(b), size, mask, val } => {
                    Insn::AbsAny2 { a, b, size, mask, val, jt: t, jf: f }
                }
                _ => Insn::Other { test: Box::new(test.clone()), jt: t, jf: f },
            });
            (out.len() - 1) as u32
        }
        B::And(a, b) => {
            let second = emit(b, t, f, out);
            emit(a, second, f, out)
        }
        B::Or(a, b) => {
            let second = emit(b, t, f, out);
            emit(a, t, second, out)
        }
        B::Not(a) => emit(a, f, t, out),
    }
}

/// A field: offset, size and mask.
type Key = (u32, u8, u32);

/// What a path through the program knows of a field it loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fact {
    Eq(u32),
    /// Differs from each of these.
    Ne(Vec<u32>),
}

type Facts = Vec<(Key, Fact)>;

/// What taking the `taken` jump of `insn` tells of a field.
fn edge_fact(insn: &Insn, taken: bool) -> Option<(Key, Fact)> {
    match *insn {
        Insn::Abs { off, size, jmp: Jmp::Eq, mask, val, .. } => {
            Some(((off, size, mask), if taken { Fact::Eq(val) } else { Fact::Ne(vec![val]) }))
        }
        Insn::AbsIn { off, size, vals, .. } if !taken => {
            Some(((off, size, u32::MAX), Fact::Ne(vals.to_vec())))
        }
        _ => None,
    }
}

fn with_fact(facts: &Facts, fact: Option<(Key, Fact)>) -> Facts {
    let mut out = facts.clone();
    let Some((key, f)) = fact else { return out };
    match (out.iter_mut().find(|(k, _)| *k == key), f) {
        (None, f) => out.push((key, f)),
        (Some((_, old)), Fact::Eq(v)) => *old = Fact::Eq(v),
        (Some((_, Fact::Ne(old))), Fact::Ne(new)) => old.extend(new),
        (Some((_, Fact::Eq(_))), Fact::Ne(_)) => {}
    }
    out
}

/// What holds on both paths.
fn meet(a: &Facts, b: &Facts) -> Facts {
    let mut out = Facts::new();
    for (key, fa) in a {
        let Some((_, fb)) = b.iter().find(|(k, _)| k == key) else { continue };
        let f = match (fa, fb) {
            (Fact::Eq(x), Fact::Eq(y)) if x == y => Fact::Eq(*x),
            (Fact::Eq(x), Fact::Ne(s)) | (Fact::Ne(s), Fact::Eq(x)) => {
                Fact::Ne(s.iter().copied().filter(|v| v != x).collect())
            }
            (Fact::Ne(s), Fact::Ne(t)) => Fact::Ne(s.iter().copied().filter(|v| t.contains(v)).collect()),
            _ => continue,
        };
        if f != Fact::Ne(Vec::new()) {
            out.push((*key, f));
        }
    }
    out
}

/// The outcome of `insn` when the path to it already knows it (it loads a field already
/// loaded on the way, so skipping it changes nothing, not even for a short frame).
fn decide(facts: &Facts, insn: &Insn) -> Option<bool> {
    let known = |key: Key| facts.iter().find(|(k, _)| *k == key).map(|(_, f)| f);
    match insn {
        Insn::Abs { off, size, jmp, mask, val, .. } => match known((*off, *size, *mask))? {
            Fact::Eq(v) => Some(jmp.test(*v, *val)),
            Fact::Ne(s) if *jmp == Jmp::Eq && s.contains(val) => Some(false),
            Fact::Ne(_) => None,
        },
        Insn::AbsIn { off, size, vals, .. } => match known((*off, *size, u32::MAX))? {
            Fact::Eq(v) => Some(vals.contains(v)),
            Fact::Ne(s) if vals.iter().all(|v| s.contains(v)) => Some(false),
            Fact::Ne(_) => None,
        },
        _ => None,
    }
}

/// Tests already made on the way, and their outcomes.
type Seen = Vec<(Insn, bool)>;

/// What a path knows is bounded (the most recent facts), so that threading stays cheap on
/// long filters.
const MAX_KNOWN: usize = 64;

fn meet_seen(a: &Seen, b: &Seen) -> Seen {
    a.iter().filter(|x| b.contains(x)).cloned().collect()
}

/// libpcap's jump threading: a jump to a test whose outcome the path already knows (the same
/// test made before, or a field at a fixed offset already compared) goes straight to that
/// outcome (`host X` tests the Ethernet type once, not three times).
///
/// `entries` are where a run may begin knowing nothing (the start, and in a combined program
/// each filter's start, where a load beyond the frame sends a run).
fn thread_jumps(insns: &mut [Insn], entries: &[u32]) {
    let mut incoming: Vec<Option<(Facts, Seen)>> = vec![None; insns.len()];
    for &e in entries {
        if let Some(slot) = incoming.get_mut(e as usize) {
            *slot = Some((Facts::new(), Seen::new()));
        }
    }
    for i in (0..insns.len()).rev() {
        let Some((facts, seen)) = incoming[i].take() else { continue };
        for taken in [true, false] {
            let mut edge = with_fact(&facts, edge_fact(&insns[i], taken));
            let mut eseen = seen.clone();
            eseen.push((insns[i].test_only(), taken));
            if edge.len() > MAX_KNOWN {
                edge.remove(0);
            }
            if eseen.len() > MAX_KNOWN {
                eseen.remove(0);
            }
            let mut target = {
                let (jt, jf) = insns[i].jumps();
                if taken {
                    *jt
                } else {
                    *jf
                }
            };
            while let Some(next) = insns.get_mut(target as usize) {
                let again = || {
                    let t = next.test_only();
                    eseen.iter().find(|(s, _)| *s == t).map(|(_, o)| *o)
                };
                let Some(outcome) = decide(&edge, next).or_else(again) else { break };
                let (jt, jf) = next.jumps();
                target = if outcome { *jt } else { *jf };
            }
            let (jt, jf) = insns[i].jumps();
            *(if taken { jt } else { jf }) = target;
            if let Some(slot) = incoming.get_mut(target as usize) {
                *slot = Some(match slot.take() {
                    Some((old, old_seen)) => (meet(&old, &edge), meet_seen(&old_seen, &eseen)),
                    None => (edge, eseen),
                });
            }
        }
    }
}

/// Removes the tests whose two jumps go to the same place: every jump to one goes where it
/// would have gone. Returns the new entry.
fn drop_useless(insns: &mut [Insn], start: u32) -> u32 {
    let mut to: Vec<u32> = (0..insns.len() as u32).collect();
    let resolve = |to: &[u32], t: u32| to.get(t as usize).copied().unwrap_or(t);
    for i in 0..insns.len() {
        let (jt, jf) = insns[i].jumps();
        *jt = resolve(&to, *jt);
        *jf = resolve(&to, *jf);
        if *jt == *jf {
            to[i] = *jt;
        }
    }
    resolve(&to, start)
}
