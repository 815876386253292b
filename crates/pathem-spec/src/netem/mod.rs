//! tc-netem(8)'s grammar, read as tc reads it, and its meanings in pathem's terms.
//!
//! `--netem "delay 100ms 10ms 25% loss 1%"` (a flag, the TOML key `netem`, a word of
//! `--a-to-b`, of `ctl set`, of a schedule's line) is parsed here once into a [`NetemSpec`] and
//! translated once into pathem's own flags ([`NetemSpec::flags`]): a path given a netem spec is
//! the path those flags make, which [`explain`] prints. [`to_netem`] goes the other way where
//! NetEm has the words.
//!
//! Reading, as tc does (iproute2's netem parser and tc(8)):
//! - keywords may be shortened as tc allows, tc's order deciding (`d` is `delay`, `l` is
//!   `limit`, `r` is `reorder`); an optional value (jitter, a correlation, the rate's
//!   overheads and cell size, a slot's maximum) is taken when the next word starts with a
//!   digit (or `-` for an overhead); `gap` and `ecn` may stand anywhere;
//! - times: `s`, `sec`, `secs`, `ms`, `msec`, `msecs`, `us`, `usec`, `usecs`, `ns`, `nsec`,
//!   `nsecs`, in any case, fractions allowed; a bare slot time is nanoseconds, as every tc
//!   reads it; a bare delay or jitter is refused unless it is 0 (tc(8) says microseconds, and
//!   tc read it so until iproute2 6.9, nanoseconds since);
//! - rates: `bit`, `kbit`, `mbit`, `gbit`, `tbit` (powers of 1000) and `kibit`…`tibit` (of
//!   1024) are bits per second; `bps`, `kbps`…`tbps`, `kibps`…`tibps` are BYTES per second;
//!   a bare number is bits per second; NetEm keeps whole bytes per second;
//! - sizes (limit, a slot's bytes): bare or `b` is bytes, `k`/`kb` 1024, `m`/`mb` 1024²,
//!   `g`/`gb` 1024³, `kbit` 128, `mbit` 1024²/8, `gbit` 1024³/8; whole numbers;
//! - percentages: `1%`, or `1` (a number without `%` is a percentage: `0.3` is 0.3%), 0 to 100;
//! - counts (gap, packets, the rate's overheads and cell size): whole numbers, `0x` hex and
//!   `0` octal as tc reads them.
//!
//! A bad word is refused with one line naming it, its position and what is accepted
//! ([`NetemError`]). Where tc would guess, or pathem's meaning differs from NetEm's, a note
//! says so ([`NetemSpec::notes`]); the README lists every difference.

use crate::error::SpecError;
use crate::path::{quote_word, DistSpec, LossSpec, PathSpec, SlotSpec};
use pathem_model::corr::Correlated;
use pathem_model::dist::{parse_c_integer, Dist};
use pathem_model::limits::{MAX_DELAY, MAX_OVERHEAD, MAX_RATE};
use pathem_model::link::{Cell, Server};
use pathem_model::loss::LossConfig;
use pathem_model::skip::SkipConfig;
use pathem_model::slot::{SlotConfig, Spacing};
use pathem_model::units::{parse_duration, Duration, Probability, QueueLimit, Rate};
use pathem_model::{Nanos, PathConfig};
use std::path::Path;
use std::str::FromStr;

mod explain;
mod notes;
mod words;

pub use explain::{explain, to_netem, Explained};
use words::Reader;

/// NetEm's queue limit when none is given: 1000 frames.
pub const DEFAULT_LIMIT: u64 = 1000;
/// The largest jitter NetEm uses (its draw is 32-bit arithmetic): 2^31 − 1 ns.
pub const JITTER_CAP: Nanos = Nanos(i32::MAX as u64);

const KEYWORDS_ACCEPTED: &str =
    "limit, delay (or latency), distribution, loss (or drop), ecn, corrupt, duplicate, reorder, gap, rate, slot";
const TIME_ACCEPTED: &str =
    "a time from 0 to 1h: a number with s, sec, secs, ms, msec, msecs, us, usec, usecs, \
ns, nsec or nsecs (a bare number is nanoseconds in a slot, and only 0 in a delay or jitter)";
const PERCENT_ACCEPTED: &str =
    "a percentage from 0 to 100, like 1% or 0.5 (a number without % is a percentage too)";
const RATE_ACCEPTED: &str = "a rate from 8bit to 10tbit: bit, kbit, mbit, gbit, tbit, kibit, mibit, gibit, tibit \
(bits per second) or bps, kbps, mbps, gbps, tbps, kibps, mibps, gibps, tibps (BYTES per second); a bare number \
is bits per second";
const SIZE_ACCEPTED: &str =
    "a whole number up to 4294967295, bare or with b, k or kb (1024), m or mb, g or gb, kbit (128), mbit, gbit";
const LOSS_ACCEPTED: &str =
    "PERCENT [CORRELATION], random PERCENT [CORRELATION], state P13 [P31 [P32 [P23 [P14]]]], \
gemodel PERCENT [R [1-H [1-K]]]";
const DIST_ACCEPTED: &str = "uniform, normal, pareto, paretonormal, or a tc table: its NAME (NAME.dist in \
$TC_LIB_DIR or tc's folder: /usr/lib/tc, /usr/lib64/tc, /usr/lib/ARCH-linux-gnu/tc, /lib/tc) or its FILE";
const SLOT_ACCEPTED: &str =
    "slot MIN_DELAY [MAX_DELAY] [packets N] [bytes N], or slot distribution NAME DELAY JITTER \
[packets N] [bytes N]";

/// A word of a netem spec that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("word {word} \"{}\" {reason}; accepted: {accepted}", pathem_model::units::shown(.text))]
pub struct NetemError {
    /// Its position, from 1.
    pub word: usize,
    pub text: String,
    pub reason: String,
    pub accepted: String,
}

fn bad(word: usize, text: &str, reason: impl Into<String>, accepted: impl Into<String>) -> NetemError {
    NetemError { word, text: text.into(), reason: reason.into(), accepted: accepted.into() }
}

/// A keyword of tc's netem grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keyword {
    Limit,
    Delay,
    Loss,
    Seed,
    Ecn,
    Reorder,
    Corrupt,
    Gap,
    Duplicate,
    Distribution,
    Rate,
    Slot,
}

/// tc's keywords in the order tc tries them: a shortened word is the first it begins.
const KEYWORDS: [(&str, Keyword); 14] = [
    ("limit", Keyword::Limit),
    ("latency", Keyword::Delay),
    ("delay", Keyword::Delay),
    ("loss", Keyword::Loss),
    ("drop", Keyword::Loss),
    ("seed", Keyword::Seed),
    ("ecn", Keyword::Ecn),
    ("reorder", Keyword::Reorder),
    ("corrupt", Keyword::Corrupt),
    ("gap", Keyword::Gap),
    ("duplicate", Keyword::Duplicate),
    ("distribution", Keyword::Distribution),
    ("rate", Keyword::Rate),
    ("slot", Keyword::Slot),
];

/// A word that begins `name` (tc's rule for shortened words).
fn begins(word: &str, name: &str) -> bool {
    !word.is_empty() && name.starts_with(word)
}

/// A distribution as a netem spec names it.
#[derive(Clone, Debug, PartialEq)]
enum DistName {
    Named(Dist),
    /// A tc table's NAME or FILE, and the position of its word.
    Table(String, usize),
}

impl DistName {
    fn of(word: &str, at: usize) -> DistName {
        match word {
            "uniform" => DistName::Named(Dist::Uniform),
            "normal" => DistName::Named(Dist::Normal),
            "pareto" => DistName::Named(Dist::Pareto),
            "paretonormal" => DistName::Named(Dist::ParetoNormal),
            name => DistName::Table(name.into(), at),
        }
    }
}

/// A probability with NetEm's optional correlation.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Chance {
    p: Probability,
    corr: Option<Probability>,
}

impl Chance {
    /// The correlation when it is above 0 (0 draws as no correlation does).
    fn corr(&self) -> Option<Probability> {
        self.corr.filter(|c| c.get() > 0.0)
    }
}

#[derive(Clone, Debug, PartialEq)]
struct DelayWords {
    delay: Nanos,
    jitter: Option<Nanos>,
    corr: Option<Probability>,
}

#[derive(Clone, Debug, PartialEq)]
enum LossKind {
    Random,
    State,
    /// With whether R was given (tc's default 1 − p is worth a note).
    Gemodel {
        r_given: bool,
    },
}

#[derive(Clone, Debug, PartialEq)]
struct RateWords {
    rate: Rate,
    overhead: Option<i32>,
    cell: Option<Cell>,
}

#[derive(Clone, Debug, PartialEq)]
enum SlotSpacing {
    Uniform(Nanos, Nanos),
    Dist { name: DistName, delay: Nanos, jitter: Nanos },
}

#[derive(Clone, Debug, PartialEq)]
struct SlotWords {
    spacing: SlotSpacing,
    packets: Option<u64>,
    bytes: Option<u64>,
}

/// What a netem spec says, each with the position of its keyword.
#[derive(Clone, Debug, PartialEq, Default)]
struct Parsed {
    limit: Option<(usize, u64)>,
    delay: Option<(usize, DelayWords)>,
    distribution: Option<(usize, DistName)>,
    loss: Option<(usize, LossKind, LossConfig)>,
    ecn: Option<usize>,
    corrupt: Option<(usize, Chance)>,
    duplicate: Option<(usize, Chance)>,
    reorder: Option<(usize, Chance)>,
    gap: Option<(usize, u32)>,
    rate: Option<(usize, RateWords)>,
    /// Where a `rate` below a byte per second stood (no rate, as NetEm reads it).
    no_rate: Option<(usize, ())>,
    slot: Option<(usize, SlotWords)>,
}

/// A netem spec: its text, what it says, and how tc's words were read.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct NetemSpec {
    text: String,
    parsed: Parsed,
    reading: Vec<String>,
}

impl NetemSpec {
    /// Reads a netem spec as tc reads it (see the module doc). The empty spec says nothing.
    pub fn parse(text: &str) -> Result<NetemSpec, NetemError> {
        let mut r = Reader { words: text.split_whitespace().collect(), next: 0, notes: Vec::new() };
        let mut p = Parsed::default();
        while let Some((at, word)) = r.take() {
            let Some(&(name, keyword)) = KEYWORDS.iter().find(|(name, _)| begins(word, name)) else {
                return Err(bad(at, word, "is not a netem keyword", KEYWORDS_ACCEPTED));
            };
            if name != word {
                r.notes.push(format!("\"{word}\" read as {name}: tc takes a keyword's first letters"));
            }
            let twice = |first: usize| {
                bad(at, word, format!("is given twice (first as word {first})"), "each keyword once")
            };
            macro_rules! once {
                ($field:expr) => {
                    if let Some(first) = $field.as_ref().map(|f| f.0) {
                        return Err(twice(first));
                    }
                };
            }
            match keyword {
                Keyword::Limit => {
                    once!(p.limit);
                    let (vp, v) = r.value(at, word, "a number of frames", SIZE_ACCEPTED)?;
                    let n = r.size(vp, name, v)?;
                    if n == 0 {
                        return Err(bad(
                            vp,
                            v,
                            "is zero: the queue could hold nothing",
                            "1 to 4294967295 frames",
                        ));
                    }
                    p.limit = Some((at, n));
                }
                Keyword::Delay => {
                    once!(p.delay);
                    let (vp, v) = r.value(at, word, "a TIME", TIME_ACCEPTED)?;
                    let delay = r.time(vp, name, v)?;
                    let mut d = DelayWords { delay, jitter: None, corr: None };
                    if let Some((jp, j)) = r.optional() {
                        d.jitter = Some(r.time(jp, "jitter", j)?);
                        if let Some((cp, c)) = r.optional() {
                            d.corr = Some(r.percent(cp, "correlation", c)?);
                        }
                    }
                    p.delay = Some((at, d));
                }
                Keyword::Loss => {
                    if let Some((first, ..)) = &p.loss {
                        return Err(twice(*first));
                    }
                    let (vp, v) = r.value(at, word, "a loss model or a PERCENT", LOSS_ACCEPTED)?;
                    let (kind, spec) = match v {
                        v if v.starts_with(|c: char| c.is_ascii_digit()) => {
                            (LossKind::Random, r.chance(vp, name, v)?)
                        }
                        "random" => {
                            let (pp, pw) = r.value(vp, v, "a PERCENT", PERCENT_ACCEPTED)?;
                            (LossKind::Random, r.chance(pp, "loss random", pw)?)
                        }
                        "state" | "gemodel" => {
                            let (pp, pw) = r.value(vp, v, "a PERCENT", PERCENT_ACCEPTED)?;
                            let first = r.percent(pp, v, pw)?;
                            let mut more = Vec::new();
                            while more.len() < if v == "state" { 4 } else { 3 } {
                                match r.optional() {
                                    Some((op, o)) => more.push(r.percent(op, v, o)?),
                                    None => break,
                                }
                            }
                            let rest = |i: usize, default: f64| {
                                more.get(i)
                                    .copied()
                                    .unwrap_or(Probability::new(default).unwrap_or(Probability::ZERO))
                            };
                            // Written as `--loss` would take it and read back, so the
                            // model's own checks apply.
                            let draft = if v == "state" {
                                // tc's defaults: p31 = 1 − p13, p32 = 0, p23 = 1, p14 = 0.
                                let p13 = first;
                                let (p31, p32, p23, p14) =
                                    (rest(0, 1.0 - p13.get()), rest(1, 0.0), rest(2, 1.0), rest(3, 0.0));
                                LossConfig::FourState { p13, p31, p32, p23, p14 }
                            } else {
                                // tc's defaults: r = 1 − p, 1-H = 100% (lost in bad), 1-K = 0.
                                let (r, loss_bad, loss_good) =
                                    (rest(0, 1.0 - first.get()), rest(1, 1.0), rest(2, 0.0));
                                LossConfig::GilbertElliott { p: first, r, loss_bad, loss_good }
                            };
                            let text = draft.spec().unwrap_or_default();
                            let cfg = text
                                .parse::<LossConfig>()
                                .map_err(|e| bad(vp, v, e.reason, LOSS_ACCEPTED))?;
                            let kind = match v {
                                "state" => LossKind::State,
                                _ => LossKind::Gemodel { r_given: !more.is_empty() },
                            };
                            p.loss = Some((at, kind, cfg));
                            continue;
                        }
                        _ => return Err(bad(vp, v, "is not a loss model", LOSS_ACCEPTED)),
                    };
                    let cfg = match spec.corr() {
                        Some(corr) => LossConfig::Correlated { p: spec.p, corr },
                        None => LossConfig::Random(spec.p),
                    };
                    p.loss = Some((at, kind, cfg));
                }
                Keyword::Seed => {
                    return Err(bad(
                        at,
                        word,
                        "is not a path setting in pathem: a run draws from its own seed, one per direction",
                        "the command's --seed N",
                    ))
                }
                Keyword::Ecn => {
                    if let Some(first) = p.ecn {
                        return Err(twice(first));
                    }
                    p.ecn = Some(at);
                }
                Keyword::Reorder | Keyword::Corrupt | Keyword::Duplicate => {
                    let field = match keyword {
                        Keyword::Reorder => &mut p.reorder,
                        Keyword::Corrupt => &mut p.corrupt,
                        _ => &mut p.duplicate,
                    };
                    once!(field);
                    let (vp, v) = r.value(at, word, "a PERCENT", PERCENT_ACCEPTED)?;
                    *field = Some((at, r.chance(vp, name, v)?));
                }
                Keyword::Gap => {
                    once!(p.gap);
                    let accepted = "a whole number of frames from 0 to 4294967295";
                    let (vp, v) = r.value(at, word, "a DISTANCE", accepted)?;
                    let n = r.count(vp, name, v, 0..=i64::from(u32::MAX), accepted)?;
                    p.gap = Some((at, n as u32));
                }
                Keyword::Distribution => {
                    once!(p.distribution);
                    let (vp, v) = r.value(at, word, "a distribution", DIST_ACCEPTED)?;
                    p.distribution = Some((at, DistName::of(v, vp)));
                }
                Keyword::Rate => {
                    once!(p.rate);
                    once!(p.no_rate);
                    let (vp, v) = r.value(at, word, "a RATE", RATE_ACCEPTED)?;
                    let rate = r.rate(vp, v)?;
                    let (mut overhead, mut cell) = (None, None);
                    let bytes = |n: i64| format!("{n} bytes");
                    if r.next_is_signed() {
                        let (op, o) = r.take().unwrap_or_default();
                        let accepted = format!("a PACKETOVERHEAD from {} to {}", bytes(-65536), bytes(65536));
                        let max = i64::from(MAX_OVERHEAD);
                        overhead = Some(r.count(op, "rate overhead", o, -max..=max, &accepted)? as i32);
                    }
                    if let Some((cp, c)) = r.optional() {
                        let accepted = "a CELLSIZE from 0 to 65535 bytes (0: no cells)";
                        let size = r.count(cp, "rate cellsize", c, 0..=65_535, accepted)? as u32;
                        let mut cell_overhead = 0;
                        if r.next_is_signed() {
                            let (op, o) = r.take().unwrap_or_default();
                            let accepted =
                                "a CELLOVERHEAD from 0 to 65535 bytes (pathem's cells add, never take off)";
                            cell_overhead = r.count(op, "rate celloverhead", o, 0..=65_535, accepted)? as u32;
                        }
                        cell = (size > 0).then_some(Cell { size, overhead: cell_overhead });
                    }
                    // Its framing words are read (and checked) either way.
                    match rate {
                        Some(rate) => p.rate = Some((at, RateWords { rate, overhead, cell })),
                        None => p.no_rate = Some((at, ())),
                    }
                }
                Keyword::Slot => {
                    once!(p.slot);
                    let spacing = match r.optional() {
                        Some((mp, m)) => {
                            let min = r.time(mp, name, m)?;
                            let max = match r.optional() {
                                Some((xp, x)) => {
                                    let max = r.time(xp, name, x)?;
                                    if max < min {
                                        return Err(bad(xp, x, "is below MIN_DELAY", SLOT_ACCEPTED));
                                    }
                                    max
                                }
                                None => min,
                            };
                            SlotSpacing::Uniform(min, max)
                        }
                        None => {
                            let (dp, d) = r.value(at, word, "MIN_DELAY or distribution", SLOT_ACCEPTED)?;
                            if d != "distribution" {
                                return Err(bad(
                                    dp,
                                    d,
                                    "is not a slot's MIN_DELAY or `distribution`",
                                    SLOT_ACCEPTED,
                                ));
                            }
                            let (np, n) = r.value(dp, d, "a distribution", DIST_ACCEPTED)?;
                            let (tp, t) = r.value(np, n, "a DELAY", TIME_ACCEPTED)?;
                            let delay = r.time(tp, "slot", t)?;
                            let (jp, j) = r.value(tp, t, "a JITTER", TIME_ACCEPTED)?;
                            let jitter = r.time(jp, "slot", j)?;
                            if jitter == Nanos::ZERO {
                                return Err(bad(
                                    jp,
                                    j,
                                    "is zero: the distribution needs a spread",
                                    TIME_ACCEPTED,
                                ));
                            }
                            SlotSpacing::Dist { name: DistName::of(n, np), delay, jitter }
                        }
                    };
                    let mut w = SlotWords { spacing, packets: None, bytes: None };
                    let (mut seen_packets, mut seen_bytes) = (false, false);
                    loop {
                        let next = r.peek().unwrap_or("");
                        let again = (seen_packets && begins(next, "packets"))
                            || (seen_bytes && begins(next, "bytes"));
                        if again {
                            let (kp, k) = r.take().unwrap_or_default();
                            return Err(bad(kp, k, "is given twice in slot", "packets and bytes once each"));
                        }
                        if !seen_packets && begins(next, "packets") {
                            seen_packets = true;
                            let (kp, k) = r.take().unwrap_or_default();
                            let accepted = "a whole number of frames from 0 (no limit) to 2147483647";
                            let (vp, v) = r.value(kp, k, "a number of frames", accepted)?;
                            let n = r.count(vp, "slot packets", v, 0..=i64::from(i32::MAX), accepted)?;
                            w.packets = (n > 0).then_some(n as u64);
                        } else if !seen_bytes && begins(next, "bytes") {
                            seen_bytes = true;
                            let (kp, k) = r.take().unwrap_or_default();
                            let (vp, v) = r.value(kp, k, "a number of bytes", SIZE_ACCEPTED)?;
                            let n = r.size(vp, "slot bytes", v)?;
                            if n > i32::MAX as u64 {
                                return Err(bad(
                                    vp,
                                    v,
                                    "is out of range",
                                    "0 (no limit) to 2147483647 bytes",
                                ));
                            }
                            w.bytes = (n > 0).then_some(n);
                        } else {
                            break;
                        }
                    }
                    p.slot = Some((at, w));
                }
            }
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        let word_at = |at: usize| words[at - 1];
        let delay = p.delay.as_ref().map(|(_, d)| d.delay).unwrap_or_default();
        let jitter = p.delay.as_ref().and_then(|(_, d)| d.jitter).unwrap_or_default();
        if let Some((at, c)) = &p.reorder {
            if c.p.get() > 0.0 && delay == Nanos::ZERO {
                return Err(bad(
                    *at,
                    word_at(*at),
                    "needs a delay above 0: reordering sends some frames without their delay",
                    "a delay TIME in the same spec",
                ));
            }
        }
        if let Some((at, gap)) = p.gap {
            // tc refuses only a gap above 0 without a reorder chance; `gap 0` alone does nothing.
            let reorders = p.reorder.as_ref().is_some_and(|(_, c)| c.p.get() > 0.0);
            if gap > 0 && !reorders {
                return Err(bad(
                    at,
                    word_at(at),
                    "needs reorder PERCENT above 0",
                    "reorder PERCENT [CORRELATION] gap DISTANCE (reorder 100% gap 5 sends every 5th frame at once)",
                ));
            }
            match (gap, reorders) {
                (0, true) => r.notes.push("\"gap 0\" read as gap 1, as tc does".into()),
                (0, false) => {
                    r.notes.push("\"gap 0\" without a reorder chance does nothing, as in tc".into())
                }
                _ => {}
            }
        }
        if let Some(at) = p.ecn {
            let loses = |cfg: &LossConfig| match cfg {
                LossConfig::Random(p) | LossConfig::Correlated { p, .. } => p.get() > 0.0,
                _ => true,
            };
            if !p.loss.as_ref().is_some_and(|(_, _, cfg)| loses(cfg)) {
                return Err(bad(
                    at,
                    word_at(at),
                    "needs a loss model: NetEm marks frames it would lose",
                    "loss ... ecn",
                ));
            }
        }
        if let Some((at, _)) = &p.distribution {
            if delay == Nanos::ZERO || jitter == Nanos::ZERO {
                return Err(bad(
                    *at,
                    word_at(*at),
                    "needs a delay and a jitter above 0: it shapes the jitter",
                    "delay TIME JITTER distribution NAME",
                ));
            }
        }
        Ok(NetemSpec { text: text.to_string(), parsed: p, reading: r.notes })
    }

    /// The spec as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// True when the spec says nothing (`--netem ""`: it still replaces every setting netem has
    /// words for, leaving none of them on).
    pub fn is_empty(&self) -> bool {
        self.text.trim().is_empty()
    }

    /// The spec with the tc table FILEs it names made relative to `dir` (a config file's
    /// folder) when they are relative.
    pub fn relative_to(mut self, dir: &Path) -> NetemSpec {
        let fix = |name: &mut DistName| {
            if let DistName::Table(n, _) = name {
                if crate::path::names_a_file(n) && Path::new(n.as_str()).is_relative() {
                    *n = dir.join(n.as_str()).to_string_lossy().into_owned();
                }
            }
        };
        if let Some((_, d)) = &mut self.parsed.distribution {
            fix(d);
        }
        if let Some((_, SlotWords { spacing: SlotSpacing::Dist { name, .. }, .. })) = &mut self.parsed.slot {
            fix(name);
        }
        self
    }

    /// The pathem flags that say what this spec says: the path they make is the path it means.
    pub fn flags(&self) -> PathSpec {
        let p = &self.parsed;
        let mut f = PathSpec::default();
        let mut jittered = false;
        if let Some((_, d)) = &p.delay {
            f.delay = Some(Duration(d.delay));
            if let Some(j) = d.jitter.filter(|j| *j > Nanos::ZERO) {
                jittered = true;
                f.jitter = Some(Duration(j));
                f.delay_correlation = d.corr.filter(|c| c.get() > 0.0);
            }
        }
        if let Some((_, d)) = &p.distribution {
            f.delay_dist = Some(match d {
                DistName::Named(d) => DistSpec::Named(d.clone()),
                DistName::Table(name, _) => DistSpec::Tc(name.clone()),
            });
        }
        if let Some((_, _, cfg)) = &p.loss {
            f.loss = Some(LossSpec::Model(cfg.clone()));
        }
        f.ecn = p.ecn.is_some();
        if let Some((_, c)) = &p.corrupt {
            f.corrupt = Some(c.p);
            f.corrupt_correlation = c.corr();
        }
        if let Some((_, c)) = &p.duplicate {
            f.duplicate = Some(c.p);
            f.duplicate_correlation = c.corr();
        }
        if let Some((_, c)) = p.reorder.as_ref().filter(|(_, c)| c.p.get() > 0.0) {
            let gap = p.gap.map_or(1, |(_, g)| g.max(1));
            f.skip_delay = Some(SkipConfig { p: c.p, corr: c.corr(), gap });
        }
        if let Some((_, w)) = &p.rate {
            f.rate = Some(w.rate);
            f.overhead = Some(i64::from(w.overhead.unwrap_or(0)));
            f.cell = w.cell;
            f.queue = Some(QueueLimit::Packets(p.limit.map_or(DEFAULT_LIMIT, |(_, n)| n)));
        } else if let Some((_, n)) = p.limit {
            // Without a rate, NetEm's limit bounds the frames held in their delay.
            f.limit = Some(u32::try_from(n).unwrap_or(u32::MAX));
        }
        if let Some((_, w)) = &p.slot {
            let (spacing, table) = match &w.spacing {
                SlotSpacing::Uniform(min, max) => (Spacing::Uniform { min: *min, max: *max }, None),
                SlotSpacing::Dist { name, delay, jitter } => {
                    let (dist, table) = match name {
                        DistName::Named(d) => (d.clone(), None),
                        DistName::Table(n, _) => (Dist::Uniform, Some(n.clone())),
                    };
                    (Spacing::Dist { delay: *delay, jitter: *jitter, dist }, table)
                }
            };
            // `slot 0` is no slots in NetEm.
            if spacing != (Spacing::Uniform { min: Nanos::ZERO, max: Nanos::ZERO }) {
                let config = SlotConfig { spacing, packets: w.packets, bytes: w.bytes };
                f.slot = Some(SlotSpec { config, table });
            }
        }
        // NetEm orders frames by their send time, so jitter reorders them, unless a rate
        // makes each frame wait for the one before; a frame sent at once overtakes either way
        // (as pathem's --skip-delay does without --reorder).
        f.reorder = jittered && p.rate.is_none();
        f
    }

    /// A table that cannot be read, named at its word in the spec.
    pub(crate) fn blame(&self, e: SpecError) -> SpecError {
        // The spec's `limit` without a rate became --limit, which a discipline refuses.
        if let (SpecError::Range(r), Some((at, n)), None) = (&e, self.parsed.limit, &self.parsed.rate) {
            if r.key == "limit" {
                let reason =
                    "bounds the frames held (there is no rate), which --aqm's discipline does not take";
                let error =
                    bad(at, &format!("limit {n}"), reason, "limit with a rate (its queue), or no --aqm");
                return SpecError::Netem { spec: self.text.clone(), error };
            }
        }
        let SpecError::File { flag, reason, .. } = &e else { return e };
        let table = match *flag {
            "delay-dist tc:" => match &self.parsed.distribution {
                Some((_, DistName::Table(name, at))) => Some((name, at)),
                _ => None,
            },
            "slot dist=tc:" => match &self.parsed.slot {
                Some((
                    _,
                    SlotWords { spacing: SlotSpacing::Dist { name: DistName::Table(name, at), .. }, .. },
                )) => Some((name, at)),
                _ => None,
            },
            _ => None,
        };
        match table {
            Some((name, at)) => SpecError::Netem {
                spec: self.text.clone(),
                error: bad(*at, name, format!("names no distribution table: {reason}"), DIST_ACCEPTED),
            },
            None => e,
        }
    }
}

impl FromStr for NetemSpec {
    type Err = NetemError;
    fn from_str(s: &str) -> Result<NetemSpec, NetemError> {
        NetemSpec::parse(s)
    }
}

impl std::fmt::Display for NetemSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for NetemSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        NetemSpec::parse(&text).map_err(|e| {
            serde::de::Error::custom(format!("netem \"{}\": {e}", pathem_model::units::shown(&text)))
        })
    }
}

#[cfg(test)]
mod tests;
