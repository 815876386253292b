//! Values with units as people type them: durations, rates, sizes, queue limits, probabilities.
//!
//! Every parser returns a [`UnitError`] that names the bad value and says what is accepted, so
//! the CLI and the config loader can report it on one line. The same `FromStr` serves flags and
//! TOML (through `Deserialize`), so both accept exactly the same spellings.

use crate::time::Nanos;
use serde::de::{self, Deserializer, Visitor};
use std::fmt;
use std::str::FromStr;

/// A value that does not parse as the quantity asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{}` {reason}; accepted: {accepted}", shown(.value))]
pub struct UnitError {
    pub value: String,
    pub reason: String,
    pub accepted: &'static str,
}

impl UnitError {
    fn new(value: &str, reason: impl Into<String>, accepted: &'static str) -> UnitError {
        UnitError { value: value.to_string(), reason: reason.into(), accepted }
    }
}

/// A value as a message quotes it: whole up to 64 characters, else its start and its length
/// (a long line of a file given by mistake, a capture or a minified JSON, would make the one
/// line of the message megabytes long).
pub fn shown(value: &str) -> std::borrow::Cow<'_, str> {
    const MOST: usize = 64;
    match value.char_indices().nth(MOST) {
        None => std::borrow::Cow::Borrowed(value),
        Some((end, _)) => std::borrow::Cow::Owned(format!("{}… ({} bytes)", &value[..end], value.len())),
    }
}

const DURATION_ACCEPTED: &str = "a number with unit ns, us, ms, s, min or h (e.g. 10ms, 2.5us)";
const RATE_ACCEPTED: &str =
    "a number above 0 with unit bit, kbit, mbit, gbit (also k, m, g, bps, kbps, mbps, gbps; powers of 1000), e.g. 100mbit";
const SIZE_ACCEPTED: &str =
    "bytes, optionally with unit B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB, e.g. 64KB";
const QUEUE_ACCEPTED: &str = "a size like 64KB or 1500B, or a frame count like 100pkt";
const PROB_ACCEPTED: &str = "a percentage like 1% or a fraction from 0 to 1 like 0.01";

/// Splits `"10.5ms"` into `(10.5, "ms")`; the unit is lower-cased.
pub(crate) fn split_number(s: &str, accepted: &'static str) -> Result<(f64, String), UnitError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(UnitError::new(s, "is empty", accepted));
    }
    let end = t
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_digit()
                || c == '.'
                || ((c == '-' || c == '+') && (i == 0 || t[..i].ends_with(['e', 'E'])))
                || ((c == 'e' || c == 'E')
                    && i > 0
                    && t[i + 1..].starts_with(|n: char| n.is_ascii_digit() || n == '-' || n == '+')))
        })
        .map_or(t.len(), |(i, _)| i);
    let (num, unit) = t.split_at(end);
    let v: f64 = num.parse().map_err(|_| UnitError::new(s, "does not start with a number", accepted))?;
    if v.is_nan() || v.is_infinite() {
        return Err(UnitError::new(s, "is not a finite number", accepted));
    }
    if v < 0.0 {
        return Err(UnitError::new(s, "is negative", accepted));
    }
    // `-0` is 0, not a negative value to carry on (and print as `-0`).
    let v = if v == 0.0 { 0.0 } else { v };
    if vanished(num, v) {
        return Err(UnitError::new(s, "is too small to represent (it is not 0)", accepted));
    }
    Ok((v, unit.trim().to_ascii_lowercase()))
}

/// True when `literal`, a decimal number above 0, was read as `v` = 0 because an f64 cannot
/// hold it (`1e-400`): a value the user wrote as not zero, to be refused, never taken as 0.
pub fn vanished(literal: &str, v: f64) -> bool {
    let mantissa = literal.split(['e', 'E']).next().unwrap_or(literal);
    v == 0.0 && mantissa.contains(|c: char| ('1'..='9').contains(&c))
}

/// The unit of `s` as typed (`split_number` gives it lower-cased, of the same length).
fn typed_unit<'a>(s: &'a str, unit: &str) -> &'a str {
    let t = s.trim();
    t.get(t.len().saturating_sub(unit.len())..).unwrap_or("")
}

/// Rounds to a whole count of the unit's smallest step (1 ns, 1 bit/s, 1 byte): a value above
/// 0 that would round to 0 is refused rather than taken as 0.
fn to_u64(s: &str, v: f64, accepted: &'static str) -> Result<u64, UnitError> {
    let r = v.round();
    if r >= u64::MAX as f64 {
        return Err(UnitError::new(s, "is too large", accepted));
    }
    if r == 0.0 && v > 0.0 {
        return Err(UnitError::new(s, "is above 0 but rounds to 0 (below the smallest step)", accepted));
    }
    Ok(r as u64)
}

/// Parses a duration such as `10ms`, `2.5us`, `1s`, `250ns`. A unit is required.
pub fn parse_duration(s: &str) -> Result<Nanos, UnitError> {
    let (v, unit) = split_number(s, DURATION_ACCEPTED)?;
    let scale: u64 = match unit.as_str() {
        "ns" => 1,
        "us" | "µs" | "usec" => 1_000,
        "ms" | "msec" => 1_000_000,
        "s" | "sec" => 1_000_000_000,
        "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "" => return Err(UnitError::new(s, "has no unit", DURATION_ACCEPTED)),
        _ => return Err(UnitError::new(s, format!("has unknown unit `{unit}`"), DURATION_ACCEPTED)),
    };
    // Whole numbers are taken exactly (an f64 holds only 53 bits); fractions go through f64.
    let digits = s.trim().trim_end_matches(|c: char| !c.is_ascii_digit());
    if let Ok(whole) = digits.parse::<u64>() {
        let too_large = || UnitError::new(s, "is too large", DURATION_ACCEPTED);
        return whole.checked_mul(scale).map(Nanos).ok_or_else(too_large);
    }
    Ok(Nanos(to_u64(s, v * scale as f64, DURATION_ACCEPTED)?))
}

/// A duration as typed by the user; parses with [`parse_duration`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Duration(pub Nanos);

impl FromStr for Duration {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        parse_duration(s).map(Duration)
    }
}

/// The line rate pathem assumes where nobody says one: a port whose speed the kernel or the
/// NIC does not report (a veth, a virtual DPDK device), and the engine's default.
pub const DEFAULT_LINE_RATE: Rate = Rate(10_000_000_000);

/// A bit rate in bits per second (never zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rate(pub u64);

impl Rate {
    pub fn bits_per_sec(self) -> u64 {
        self.0
    }
    pub fn bytes_per_sec(self) -> u64 {
        self.0 / 8
    }
}

impl FromStr for Rate {
    type Err = UnitError;
    /// `bps`-style units mean bits per second here, as people type them (tc's `bps` means
    /// bytes per second; pathem does not follow it, see the README).
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let (v, unit) = split_number(s, RATE_ACCEPTED)?;
        if typed_unit(s, &unit).contains('B') {
            let why = "has an upper-case B, which means bytes: rates here are in bits (100 MB/s is 800mbit)";
            return Err(UnitError::new(s, why, RATE_ACCEPTED));
        }
        let scale = match unit.as_str() {
            "bit" | "bps" | "b/s" | "bit/s" => 1.0,
            "k" | "kbit" | "kbps" | "kb/s" | "kbit/s" => 1e3,
            "m" | "mbit" | "mbps" | "mb/s" | "mbit/s" => 1e6,
            "g" | "gbit" | "gbps" | "gb/s" | "gbit/s" => 1e9,
            "t" | "tbit" | "tbps" | "tb/s" | "tbit/s" => 1e12,
            "" => return Err(UnitError::new(s, "has no unit", RATE_ACCEPTED)),
            _ => return Err(UnitError::new(s, format!("has unknown unit `{unit}`"), RATE_ACCEPTED)),
        };
        let bits = to_u64(s, v * scale, RATE_ACCEPTED)?;
        if bits == 0 {
            return Err(UnitError::new(s, "is zero", RATE_ACCEPTED));
        }
        Ok(Rate(bits))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (div, unit) in [(1_000_000_000, "gbit"), (1_000_000, "mbit"), (1_000, "kbit")] {
            if self.0 % div == 0 {
                return write!(f, "{}{unit}", self.0 / div);
            }
        }
        write!(f, "{}bit", self.0)
    }
}

/// A number of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

/// A byte count with a binary unit, for people: `512 B`, `4.0 MiB`.
pub fn binary_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut i) = (n as f64, 0);
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    match i {
        0 => format!("{n} B"),
        _ => format!("{v:.1} {}", UNITS[i]),
    }
}

/// Refuses a size whose unit reads as bits: a lower-case b after an upper-case multiple
/// (`64Kb`, `1Mb`). All lower-case (`64kb`) stays bytes, as documented.
fn bits_for_bytes(s: &str, unit: &str, accepted: &'static str) -> Result<(), UnitError> {
    let typed = typed_unit(s, unit);
    if typed.ends_with('b') && typed.starts_with(|c: char| c.is_ascii_uppercase()) {
        let why = format!("has unit `{typed}`, which reads as bits: sizes are in bytes (B, KB, KiB, ...)");
        return Err(UnitError::new(s, why, accepted));
    }
    Ok(())
}

fn parse_size_unit(s: &str, v: f64, unit: &str, accepted: &'static str) -> Result<Option<u64>, UnitError> {
    let scale = match unit {
        "" | "b" | "byte" | "bytes" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "tb" | "t" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Ok(None),
    };
    to_u64(s, v * scale, accepted).map(Some)
}

impl FromStr for Size {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let (v, unit) = split_number(s, SIZE_ACCEPTED)?;
        bits_for_bytes(s, &unit, SIZE_ACCEPTED)?;
        match parse_size_unit(s, v, &unit, SIZE_ACCEPTED)? {
            Some(b) => Ok(Size(b)),
            None => Err(UnitError::new(s, format!("has unknown unit `{unit}`"), SIZE_ACCEPTED)),
        }
    }
}

/// A limit on what a queue may hold: bytes of frames, or a number of frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueLimit {
    Bytes(u64),
    Packets(u64),
}

impl FromStr for QueueLimit {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let (v, unit) = split_number(s, QUEUE_ACCEPTED)?;
        let limit = match unit.as_str() {
            "pkt" | "pkts" | "p" | "packet" | "packets" | "frame" | "frames" => {
                if v.fract() != 0.0 {
                    return Err(UnitError::new(s, "is not a whole number of frames", QUEUE_ACCEPTED));
                }
                QueueLimit::Packets(to_u64(s, v, QUEUE_ACCEPTED)?)
            }
            _ => match bits_for_bytes(s, &unit, QUEUE_ACCEPTED).and(parse_size_unit(
                s,
                v,
                &unit,
                QUEUE_ACCEPTED,
            ))? {
                Some(b) => QueueLimit::Bytes(b),
                None => return Err(UnitError::new(s, format!("has unknown unit `{unit}`"), QUEUE_ACCEPTED)),
            },
        };
        if matches!(limit, QueueLimit::Bytes(0) | QueueLimit::Packets(0)) {
            return Err(UnitError::new(s, "is zero (the queue could hold nothing)", QUEUE_ACCEPTED));
        }
        Ok(limit)
    }
}

/// A probability in `[0, 1]`.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Default)]
pub struct Probability(f64);

impl Probability {
    pub const ZERO: Probability = Probability(0.0);
    pub const ONE: Probability = Probability(1.0);

    /// `None` when `p` is outside `[0, 1]` or NaN.
    pub fn new(p: f64) -> Option<Probability> {
        (0.0..=1.0).contains(&p).then_some(Probability(p))
    }
    pub fn get(self) -> f64 {
        self.0
    }
    /// Text that parses back to exactly this probability: a percentage where one does
    /// (`1%`, `0.3%`), else the fraction itself (`0.123456789012345`).
    pub fn spec(self) -> String {
        self.percent().unwrap_or_else(|| self.0.to_string())
    }

    /// The percentage that parses back to exactly this probability, when there is one (a
    /// number near `p · 100` whose hundredth is `p`; not every `p` is one).
    pub fn percent(self) -> Option<String> {
        let bits = (self.0 * 100.0).to_bits();
        (0..=8u64)
            .flat_map(|d| [bits.saturating_add(d), bits.saturating_sub(d)])
            .map(|b| format!("{}%", f64::from_bits(b)))
            .find(|text| text.parse::<Probability>().map(|p| p.0) == Ok(self.0))
    }

    /// The 64-bit threshold `t` such that a uniform `u64` below `t` happens with this
    /// probability (to within 2^-64); one compare per decision instead of a float draw.
    pub fn threshold(self) -> u64 {
        if self.0 >= 1.0 {
            u64::MAX
        } else {
            (self.0 * 18_446_744_073_709_551_616.0) as u64
        }
    }
}

impl FromStr for Probability {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let (v, unit) = split_number(s, PROB_ACCEPTED)?;
        let p = match unit.as_str() {
            "%" => v / 100.0,
            "" => {
                if v > 1.0 {
                    return Err(UnitError::new(
                        s,
                        format!("is above 1 (100%); write {v}% for {v} percent"),
                        PROB_ACCEPTED,
                    ));
                }
                v
            }
            _ => return Err(UnitError::new(s, format!("has unknown unit `{unit}`"), PROB_ACCEPTED)),
        };
        if p == 0.0 && v > 0.0 {
            return Err(UnitError::new(s, "is too small to represent (it is not 0)", PROB_ACCEPTED));
        }
        Probability::new(p).ok_or_else(|| UnitError::new(s, "is above 100%", PROB_ACCEPTED))
    }
}

impl fmt::Display for Probability {
    /// As a percentage to 12 significant digits, so the float's last bits do not show
    /// (`0.001%`, not `0.000999999999999999…%`); never 0 for a probability above 0.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&percent(self.0, 12))
    }
}

/// A fraction as a percentage to `digits` significant digits (1 to 17), rounded through the
/// exponent form and shown without trailing zeros: `percent(0.6666, 4)` is `66.67%`.
pub fn percent(x: f64, digits: usize) -> String {
    let v = x * 100.0;
    let shown: f64 = format!("{v:.*e}", digits.clamp(1, 17) - 1).parse().unwrap_or(v);
    format!("{shown}%")
}

/// Deserializes any `FromStr` type from a TOML string, or from a number written without quotes
/// (which then goes through the same parser, so `loss = 0.01` and `overhead = 24` work).
struct FromStrVisitor<T>(std::marker::PhantomData<T>);

impl<T> Visitor<'_> for FromStrVisitor<T>
where
    T: FromStr<Err = UnitError>,
{
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string with a unit, or a number")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
}

/// Implements `Deserialize` for types whose `FromStr` is the single source of truth.
#[macro_export]
macro_rules! deserialize_from_str {
    ($($t:ty),* $(,)?) => {$(
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::units::deserialize_via_from_str(d)
            }
        }
    )*};
}

/// The function behind [`deserialize_from_str!`].
pub fn deserialize_via_from_str<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr<Err = UnitError>,
{
    d.deserialize_any(FromStrVisitor(std::marker::PhantomData))
}

deserialize_from_str!(Duration, Rate, Size, QueueLimit, Probability);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_units() {
        assert_eq!(binary_bytes(512), "512 B");
        assert_eq!(binary_bytes(4 << 20), "4.0 MiB");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10ms"), Ok(Nanos::from_millis(10)));
        assert_eq!(parse_duration("2.5us"), Ok(Nanos(2500)));
        assert_eq!(parse_duration("1s"), Ok(Nanos::from_secs(1)));
        assert_eq!(parse_duration(" 7ns "), Ok(Nanos(7)));
        assert_eq!(parse_duration("0ms"), Ok(Nanos(0)));
        assert_eq!(parse_duration("1e3us"), Ok(Nanos::from_millis(1)));
        assert_eq!(parse_duration("1.5min"), Ok(Nanos::from_secs(90)));
        assert_eq!(parse_duration("1h"), Ok(Nanos::from_secs(3600)));
        for bad in ["", "10", "10q", "-1ms", "NaNms", "nan", "ms", "infs", "1e30s"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.to_string().contains("accepted"), "{bad}: {e}");
        }
        assert!(parse_duration("10q").unwrap_err().to_string().contains("unknown unit `q`"));
        assert!(parse_duration("-1ms").unwrap_err().to_string().contains("negative"));
    }

    #[test]
    fn rates() {
        assert_eq!("100mbit".parse(), Ok(Rate(100_000_000)));
        assert_eq!("100Mbps".parse(), Ok(Rate(100_000_000)));
        assert_eq!("1.5g".parse(), Ok(Rate(1_500_000_000)));
        assert_eq!("64kbit".parse(), Ok(Rate(64_000)));
        assert_eq!("9600bit".parse(), Ok(Rate(9600)));
        for bad in ["0mbit", "100", "100furlong", "-5mbit", ""] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
        assert_eq!(Rate(100_000_000).to_string(), "100mbit");
    }

    #[test]
    fn sizes_and_queues() {
        assert_eq!("64KB".parse(), Ok(Size(64_000)));
        assert_eq!("64KiB".parse(), Ok(Size(65_536)));
        assert_eq!("1500".parse(), Ok(Size(1500)));
        assert_eq!("2MiB".parse(), Ok(Size(2 << 20)));
        assert_eq!("100pkt".parse(), Ok(QueueLimit::Packets(100)));
        assert_eq!("64KB".parse(), Ok(QueueLimit::Bytes(64_000)));
        for bad in ["0pkt", "1.5pkt", "10parsecs", "-1KB", "0B"] {
            assert!(bad.parse::<QueueLimit>().is_err(), "{bad}");
        }
    }

    /// A long value is quoted as its start and its length, never split inside a character.
    #[test]
    fn long_values_are_quoted_cut() {
        assert_eq!(shown("10ms"), "10ms");
        let exactly = "é".repeat(64);
        assert_eq!(shown(&exactly), exactly);
        let long = "é".repeat(65);
        assert_eq!(shown(&long), format!("{}… (130 bytes)", "é".repeat(64)));
        let e = format!("1{}s", "0".repeat(3_000_000)).parse::<Duration>().unwrap_err().to_string();
        assert!(e.len() < 300, "{e}");
        let trace = crate::link::RateTrace::parse(&"x".repeat(3_000_000)).unwrap_err().to_string();
        assert!(trace.len() < 200, "{trace}");
    }

    /// A value above 0 is never taken as 0, and byte and bit spellings are not swapped.
    #[test]
    fn nothing_rounds_to_zero_and_bytes_are_not_bits() {
        for bad in ["0.4ns", "1e-400s", "0.0000001us"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration("0.6ns"), Ok(Nanos(1)));
        assert_eq!(parse_duration("0ms"), Ok(Nanos::ZERO));
        assert!("0.4bit".parse::<Rate>().is_err());
        assert!("0.4B".parse::<Size>().is_err());
        assert!("1e-400".parse::<Probability>().is_err());
        assert!("1e-323%".parse::<Probability>().is_err());
        assert_eq!("0%".parse::<Probability>().unwrap().get(), 0.0);
        assert_eq!("0.00001".parse::<Probability>().unwrap().to_string(), "0.001%");
        let tiny = "1e-300".parse::<Probability>().unwrap().to_string();
        assert!(tiny.ends_with("1%") && tiny.starts_with("0.000"), "{tiny}");
        assert_eq!("33.3%".parse::<Probability>().unwrap().to_string(), "33.3%");
        for bad in ["100MB/s", "100MBps", "1B/s", "5GBps", "10KBit"] {
            let e = bad.parse::<Rate>().unwrap_err().to_string();
            assert!(e.contains("upper-case B"), "{bad}: {e}");
        }
        assert_eq!("100Mbps".parse(), Ok(Rate(100_000_000)), "bits, as typed");
        for bad in ["64Kb", "1Mb"] {
            assert!(bad.parse::<Size>().unwrap_err().to_string().contains("bits"), "{bad}");
            assert!(bad.parse::<QueueLimit>().is_err(), "{bad}");
        }
        assert_eq!("64kb".parse(), Ok(Size(64_000)), "all lower-case stays bytes");
        assert_eq!("64KiB".parse(), Ok(Size(65_536)));
    }

    #[test]
    fn probabilities() {
        assert_eq!("1%".parse::<Probability>().unwrap().get(), 0.01);
        assert_eq!("0.01".parse::<Probability>().unwrap().get(), 0.01);
        assert_eq!("100%".parse::<Probability>().unwrap().get(), 1.0);
        assert_eq!("0".parse::<Probability>().unwrap().get(), 0.0);
        // `-0` is 0, shown without its sign.
        for zero in ["-0", "-0%", "-0.0e5"] {
            let p = zero.parse::<Probability>().unwrap();
            assert!(p.get().is_sign_positive() && p.get() == 0.0, "{zero}");
            assert_eq!(p.to_string(), "0%", "{zero}");
        }
        for bad in ["101%", "1.5", "5", "-1%", "x", "", "NaN", "3‰"] {
            assert!(bad.parse::<Probability>().is_err(), "{bad}");
        }
        assert!("5".parse::<Probability>().unwrap_err().to_string().contains("5%"));
        for x in [0.0, 1.0, 0.01, 0.003, 0.1 + 0.2, 1.0 / 3.0, 0.123_456_789_012_345, 1e-9, 0.999_999] {
            let p = Probability::new(x).unwrap();
            assert_eq!(p.spec().parse::<Probability>(), Ok(p), "{x}: {}", p.spec());
        }
        assert_eq!(Probability::new(0.003).unwrap().spec(), "0.3%");
        // 1 − 0.81 is no number's hundredth: written as the fraction, which reads back.
        let r = Probability::new(1.0 - 0.81).unwrap();
        assert_eq!((r.percent(), r.spec().parse()), (None, Ok(r)));
        assert_eq!(Probability::ONE.threshold(), u64::MAX);
        assert_eq!(Probability::ZERO.threshold(), 0);
        assert_eq!(Probability::new(0.5).unwrap().threshold(), 1 << 63);
    }

    #[test]
    fn deserialize_from_toml_values() {
        #[derive(serde::Deserialize)]
        struct T {
            a: Duration,
            b: Probability,
            c: Size,
            d: Probability,
        }
        let v: T = toml::from_str("a = '5ms'\nb = 0.25\nc = 1500\nd = '3%'").unwrap();
        assert_eq!(v.a.0, Nanos::from_millis(5));
        assert_eq!(v.b.get(), 0.25);
        assert_eq!(v.c, Size(1500));
        assert_eq!(v.d.get(), 0.03);
        let e = toml::from_str::<T>("a = '5q'\nb = 0.25\nc = 1500\nd = 0").err().unwrap();
        assert!(e.to_string().contains("unknown unit `q`"), "{e}");
    }
}

#[cfg(test)]
mod fuzz {
    use super::*;

    proptest::proptest! {
        /// No input makes a parser panic; whatever it refuses, it says what is accepted.
        #[test]
        fn parsers_never_panic(s in "\\PC{0,12}") {
            for e in [
                parse_duration(&s).err(),
                s.parse::<Rate>().err(),
                s.parse::<Size>().err(),
                s.parse::<QueueLimit>().err(),
                s.parse::<Probability>().err(),
            ].into_iter().flatten() {
                proptest::prop_assert!(e.to_string().contains("accepted:"));
            }
        }

        /// Durations written by `Display` parse back to the same value.
        #[test]
        fn durations_round_trip(n in 0u64..u64::MAX / 2) {
            proptest::prop_assert_eq!(parse_duration(&Nanos(n).to_string()), Ok(Nanos(n)));
        }
    }
}
