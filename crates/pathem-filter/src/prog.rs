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
    fn test(self, a: u32, b: u32) -> bool {
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

/// A value of a byte expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Val {
    K(u32),
    /// The frame's length on the wire.
    Len,
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
            Val::Ld { base, idx, size } => {
                let i = idx.eval(p, len)?;
                let (x, k) = match base {
                    Base::Abs(k) => (i, *k),
                    Base::Tran(k) => (i.wrapping_add(ihl(p, *k)?), *k),
                };
                load(p, x.checked_add(k)? as usize, *size)
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
            Val::Len | Val::Ld { .. } => None,
        }
    }
}

/// One test of the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Test {
    /// `(load(off, size) & mask) jmp val`.
    Cmp { off: Off, size: u8, mask: u32, jmp: Jmp, val: u32 },
    /// `a jmp b` between byte expressions.
    Rel { a: Val, jmp: Jmp, b: Val },
    /// `wire_len jmp n`.
    Len { jmp: Jmp, n: u32 },
}

impl Test {
    fn eval(&self, p: &[u8], len: u32) -> Option<bool> {
        match self {
            Test::Cmp { off, size, mask, jmp, val } => {
                let at = match *off {
                    Off::Abs(k) => k,
                    Off::Tran(k, o) => k.checked_add(ihl(p, k)?)?.checked_add(o)?,
                };
                Some(jmp.test(load(p, at as usize, *size)? & mask, *val))
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

const ACCEPT: u32 = u32::MAX;
const REJECT: u32 = u32::MAX - 1;

/// A test with its jumps. Comparisons of a field at a fixed place, the commonest tests, are
/// kept inline; the rest are boxed so that the array stays compact.
#[derive(Debug, Clone)]
enum Insn {
    Abs { off: u32, size: u8, jmp: Jmp, mask: u32, val: u32, jt: u32, jf: u32 },
    Other { test: Box<Test>, jt: u32, jf: u32 },
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
        Prog { insns, start }
    }

    /// Whether the program accepts every frame without looking at it.
    pub(crate) fn is_match_all(&self) -> bool {
        self.start == ACCEPT
    }

    #[inline]
    pub(crate) fn run(&self, p: &[u8], len: u32) -> bool {
        let mut pc = self.start;
        loop {
            let Some(i) = self.insns.get(pc as usize) else { return pc == ACCEPT };
            pc = match i {
                Insn::Abs { off, size, jmp, mask, val, jt, jf } => {
                    let Some(v) = load(p, *off as usize, *size) else { return false };
                    if jmp.test(v & mask, *val) {
                        *jt
                    } else {
                        *jf
                    }
                }
                Insn::Other { test, jt, jf } => match test.eval(p, len) {
                    Some(true) => *jt,
                    Some(false) => *jf,
                    None => return false,
                },
            };
        }
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
