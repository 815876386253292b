//! The words of a netem spec and their values, read as tc reads them: times, rates, sizes,
//! percentages and counts, with a note wherever tc would guess.

use super::*;

/// The words of a spec, read one after another.
pub(super) struct Reader<'a> {
    pub(super) words: Vec<&'a str>,
    pub(super) next: usize,
    pub(super) notes: Vec<String>,
}

/// Splits `12.5ms` into `("12.5", "ms")` as C's `strtod` reads a decimal number.
fn split_number(word: &str) -> Option<(&str, &str)> {
    let b = word.as_bytes();
    let digits = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let int_end = digits(i);
    let mut seen = int_end > i;
    i = int_end;
    if b.get(i) == Some(&b'.') {
        let frac_end = digits(i + 1);
        seen |= frac_end > i + 1;
        i = frac_end;
    }
    if !seen {
        return None;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let j = i + 1 + usize::from(matches!(b.get(i + 1), Some(b'+' | b'-')));
        let end = digits(j);
        if end > j {
            i = end;
        }
    }
    Some((&word[..i], &word[i..]))
}

/// A word whose number has a unit the quantity does not take.
fn unknown_unit(at: usize, word: &str, unit: &str, accepted: &str) -> NetemError {
    bad(at, word, format!("has unknown unit `{}`", pathem_model::units::shown(unit)), accepted)
}

/// The number of a word, refused when negative or not finite.
fn number<'w>(at: usize, word: &'w str, accepted: &str) -> Result<(f64, &'w str, &'w str), NetemError> {
    let (num, unit) =
        split_number(word).ok_or_else(|| bad(at, word, "does not start with a number", accepted))?;
    let v: f64 = num.parse().map_err(|_| bad(at, word, "does not start with a number", accepted))?;
    if !v.is_finite() {
        return Err(bad(at, word, "is not a finite number", accepted));
    }
    if v < 0.0 {
        return Err(bad(at, word, "is negative", accepted));
    }
    Ok((v, num, unit))
}

impl<'a> Reader<'a> {
    /// The next word and its position (from 1).
    pub(super) fn take(&mut self) -> Option<(usize, &'a str)> {
        let w = self.words.get(self.next).copied()?;
        self.next += 1;
        Some((self.next, w))
    }

    pub(super) fn peek(&self) -> Option<&'a str> {
        self.words.get(self.next).copied()
    }

    /// tc's test for an optional value: the next word starts with a digit.
    pub(super) fn next_is_number(&self) -> bool {
        self.peek().is_some_and(|w| w.starts_with(|c: char| c.is_ascii_digit()))
    }

    /// The same for a value that may be negative.
    pub(super) fn next_is_signed(&self) -> bool {
        self.next_is_number() || self.peek().is_some_and(|w| w.starts_with('-'))
    }

    /// The value `after` (the word at `at`) needs.
    pub(super) fn value(
        &mut self,
        at: usize,
        after: &str,
        what: &str,
        accepted: &str,
    ) -> Result<(usize, &'a str), NetemError> {
        self.take().ok_or_else(|| bad(at, after, format!("needs {what}"), accepted))
    }

    /// An optional value: the next word when it starts with a digit.
    pub(super) fn optional(&mut self) -> Option<(usize, &'a str)> {
        if self.next_is_number() {
            self.take()
        } else {
            None
        }
    }

    /// A time. tc has always read a bare slot time as nanoseconds; a bare delay or jitter it
    /// read as microseconds (as tc(8) still says) until iproute2 6.9, and as nanoseconds since,
    /// so that is refused unless it is 0.
    pub(super) fn time(&mut self, at: usize, ctx: &str, word: &str) -> Result<Nanos, NetemError> {
        let (v, num, unit) = number(at, word, TIME_ACCEPTED)?;
        let canonical = match unit.to_ascii_lowercase().as_str() {
            "s" | "sec" | "secs" => "s",
            "ms" | "msec" | "msecs" => "ms",
            "us" | "usec" | "usecs" => "us",
            "ns" | "nsec" | "nsecs" => "ns",
            "" if ctx == "slot" || v == 0.0 => "ns",
            "" => {
                return Err(bad(
                    at,
                    word,
                    format!(
                        "has no unit: tc(8) reads a bare {ctx} as microseconds, iproute2 6.9 and later as \
                         nanoseconds"
                    ),
                    TIME_ACCEPTED,
                ))
            }
            _ => return Err(unknown_unit(at, word, unit, TIME_ACCEPTED)),
        };
        let t = parse_duration(&format!("{num}{canonical}"))
            .map_err(|e| bad(at, word, e.reason, TIME_ACCEPTED))?;
        if t > MAX_DELAY {
            return Err(bad(at, word, "is out of range", TIME_ACCEPTED));
        }
        Ok(t)
    }

    pub(super) fn percent(&mut self, at: usize, ctx: &str, word: &str) -> Result<Probability, NetemError> {
        let (v, num, unit) = number(at, word, PERCENT_ACCEPTED)?;
        if !unit.is_empty() && unit != "%" {
            return Err(unknown_unit(at, word, unit, PERCENT_ACCEPTED));
        }
        if v > 100.0 {
            return Err(bad(at, word, "is above 100%", PERCENT_ACCEPTED));
        }
        if unit.is_empty() {
            self.notes.push(format!(
                "\"{ctx} {word}\" read as {word}%: tc reads a number without % as a percentage"
            ));
        }
        // The same arithmetic as pathem's own `1%`, so the equivalent flags say the same.
        format!("{num}%").parse::<Probability>().map_err(|e| bad(at, word, e.reason, PERCENT_ACCEPTED))
    }

    /// A rate; `None` for one below a byte per second, which tc sends as 0 and NetEm reads as
    /// no rate (`rate 0` turns a rate off).
    pub(super) fn rate(&mut self, at: usize, word: &str) -> Result<Option<Rate>, NetemError> {
        if word.contains('%') {
            return Err(bad(
                at,
                word,
                "is a share of the device's speed, which a path does not know",
                RATE_ACCEPTED,
            ));
        }
        let (v, _, unit) = number(at, word, RATE_ACCEPTED)?;
        let lower = unit.to_ascii_lowercase();
        let (scale, bytes_unit) = match lower.as_str() {
            "" | "bit" => (1.0, false),
            "kibit" => (1024.0, false),
            "kbit" => (1e3, false),
            "mibit" => (1024.0 * 1024.0, false),
            "mbit" => (1e6, false),
            "gibit" => (1024.0 * 1024.0 * 1024.0, false),
            "gbit" => (1e9, false),
            "tibit" => (1024.0 * 1024.0 * 1024.0 * 1024.0, false),
            "tbit" => (1e12, false),
            "bps" => (8.0, true),
            "kibps" => (8.0 * 1024.0, true),
            "kbps" => (8e3, true),
            "mibps" => (8.0 * 1024.0 * 1024.0, true),
            "mbps" => (8e6, true),
            "gibps" => (8.0 * 1024.0 * 1024.0 * 1024.0, true),
            "gbps" => (8e9, true),
            "tibps" => (8.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0, true),
            "tbps" => (8e12, true),
            _ => return Err(unknown_unit(at, word, unit, RATE_ACCEPTED)),
        };
        let bits = (v * scale).round();
        if bits > MAX_RATE as f64 {
            return Err(bad(at, word, "is out of range", RATE_ACCEPTED));
        }
        let bytes = bits as u64 / 8;
        if bytes == 0 {
            self.notes.push(format!(
                "\"rate {word}\" is 0 bytes per second in tc (NetEm's unit), which NetEm reads as no rate: no rate"
            ));
            return Ok(None);
        }
        let rate = Rate(bytes * 8);
        if unit.is_empty() {
            self.notes.push(format!("\"rate {word}\" read as {rate}: a bare rate is bits per second in tc"));
        }
        if bytes_unit {
            self.notes.push(format!(
                "\"rate {word}\" read as {rate}: tc's bps units are bytes per second (pathem's --rate reads bps as bits)"
            ));
        }
        if bits as u64 % 8 != 0 {
            self.notes.push(format!("\"rate {word}\" is {rate}: NetEm keeps whole bytes per second"));
        }
        Ok(Some(rate))
    }

    pub(super) fn size(&mut self, at: usize, ctx: &str, word: &str) -> Result<u64, NetemError> {
        let (v, _, unit) = number(at, word, SIZE_ACCEPTED)?;
        let scale = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "k" | "kb" => 1024.0,
            "m" | "mb" => 1024.0 * 1024.0,
            "g" | "gb" => 1024.0 * 1024.0 * 1024.0,
            "kbit" => 128.0,
            "mbit" => 1024.0 * 1024.0 / 8.0,
            "gbit" => 1024.0 * 1024.0 * 1024.0 / 8.0,
            _ => return Err(unknown_unit(at, word, unit, SIZE_ACCEPTED)),
        };
        let n = v * scale;
        if n.fract() != 0.0 {
            return Err(bad(at, word, "is not a whole number", SIZE_ACCEPTED));
        }
        if n > f64::from(u32::MAX) {
            return Err(bad(at, word, "is out of range", SIZE_ACCEPTED));
        }
        if !matches!(unit, "" | "b" | "B") {
            self.notes.push(format!("\"{ctx} {word}\" read as {n}: tc's size units are powers of 1024"));
        }
        Ok(n as u64)
    }

    /// A whole number as tc reads one (decimal, `0x` hex, `0` octal) within `range`.
    pub(super) fn count(
        &mut self,
        at: usize,
        ctx: &str,
        word: &str,
        range: std::ops::RangeInclusive<i64>,
        accepted: &str,
    ) -> Result<i64, NetemError> {
        let n = parse_c_integer(word).ok_or_else(|| bad(at, word, "is not a whole number", accepted))?;
        if !range.contains(&n) {
            return Err(bad(at, word, "is out of range", accepted));
        }
        let digits = word.trim_start_matches(['-', '+']);
        if digits.len() > 1 && digits.starts_with('0') {
            self.notes.push(format!(
                "\"{ctx} {word}\" read as {n}: tc reads 0x as hexadecimal and a leading 0 as octal"
            ));
        }
        Ok(n)
    }

    /// A probability and its optional correlation.
    pub(super) fn chance(&mut self, at: usize, ctx: &str, word: &str) -> Result<Chance, NetemError> {
        let p = self.percent(at, ctx, word)?;
        let corr = match self.optional() {
            Some((cp, c)) => Some(self.percent(cp, "correlation", c)?),
            None => None,
        };
        Ok(Chance { p, corr })
    }
}
