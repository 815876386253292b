//! Time as pathem sees it: a count of nanoseconds.
//!
//! One type serves both instants (nanoseconds since an origin the clock chose) and spans.
//! Models never read a clock; the engine passes `now` in.
//!
//! Arithmetic cannot wrap, by construction: `+` saturates at [`Nanos::MAX`] (584 years) and
//! `-` at zero, and the constructors saturate too. Inputs are bounded far below that (a delay
//! is at most [`crate::limits::MAX_DELAY`]), so saturation is a last line of defence, never a
//! result: where a saturated instant could reach an output, the output refuses it (a pcap
//! capture cannot hold a time past 2106, and says so). [`Nanos::checked_add`] is there for
//! callers that must tell.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A number of nanoseconds: an instant on some clock, or a span between two.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(pub u64);

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);
    pub const MAX: Nanos = Nanos(u64::MAX);

    pub const fn from_secs(s: u64) -> Nanos {
        Nanos(s.saturating_mul(1_000_000_000))
    }
    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms.saturating_mul(1_000_000))
    }
    pub const fn from_micros(us: u64) -> Nanos {
        Nanos(us.saturating_mul(1_000))
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-9
    }
    pub const fn saturating_add(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(other.0))
    }
    pub const fn saturating_sub(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(other.0))
    }
    /// `None` where the sum would not fit.
    pub const fn checked_add(self, other: Nanos) -> Option<Nanos> {
        match self.0.checked_add(other.0) {
            Some(n) => Some(Nanos(n)),
            None => None,
        }
    }
}

/// Saturates at [`Nanos::MAX`] (see the module doc).
impl Add for Nanos {
    type Output = Nanos;
    #[inline]
    fn add(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(rhs.0))
    }
}

/// Saturates at [`Nanos::MAX`].
impl AddAssign for Nanos {
    #[inline]
    fn add_assign(&mut self, rhs: Nanos) {
        self.0 = self.0.saturating_add(rhs.0);
    }
}

/// Saturates at zero: a span is never negative.
impl Sub for Nanos {
    type Output = Nanos;
    #[inline]
    fn sub(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(rhs.0))
    }
}

impl From<std::time::Duration> for Nanos {
    fn from(d: std::time::Duration) -> Nanos {
        Nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// Prints the largest unit that keeps the value exact, e.g. `10ms`, `1500us`, `7ns`.
impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (div, unit) in [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")] {
            if n != 0 && n % div == 0 {
                return write!(f, "{}{unit}", n / div);
            }
        }
        write!(f, "{n}ns")
    }
}

impl fmt::Debug for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_picks_exact_unit() {
        assert_eq!(Nanos::from_millis(10).to_string(), "10ms");
        assert_eq!(Nanos(1_500_000).to_string(), "1500us");
        assert_eq!(Nanos(7).to_string(), "7ns");
        assert_eq!(Nanos(0).to_string(), "0ns");
        assert_eq!(Nanos::from_secs(3).to_string(), "3s");
    }

    #[test]
    fn arithmetic() {
        assert_eq!(Nanos(5) + Nanos(7), Nanos(12));
        assert_eq!(Nanos(5).saturating_sub(Nanos(7)), Nanos::ZERO);
        assert_eq!(Nanos::MAX.saturating_add(Nanos(1)), Nanos::MAX);
        assert_eq!(Nanos::from(std::time::Duration::from_micros(3)), Nanos(3000));
    }

    #[test]
    fn arithmetic_never_wraps() {
        assert_eq!(Nanos::MAX + Nanos(1), Nanos::MAX);
        let mut t = Nanos(u64::MAX - 1);
        t += Nanos(5);
        assert_eq!(t, Nanos::MAX);
        assert_eq!(Nanos(3) - Nanos(5), Nanos::ZERO);
        assert_eq!(Nanos::from_secs(u64::MAX), Nanos::MAX);
        assert_eq!(Nanos::from_micros(u64::MAX / 2), Nanos::MAX);
        assert_eq!(Nanos(1).checked_add(Nanos::MAX), None);
        assert_eq!(Nanos(1).checked_add(Nanos(2)), Some(Nanos(3)));
    }
}
