//! Time as pathem sees it: a count of nanoseconds.
//!
//! One type serves both instants (nanoseconds since an origin the clock chose) and spans.
//! Models never read a clock; the engine passes `now` in.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A number of nanoseconds: an instant on some clock, or a span between two.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(pub u64);

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);
    pub const MAX: Nanos = Nanos(u64::MAX);

    pub const fn from_secs(s: u64) -> Nanos {
        Nanos(s * 1_000_000_000)
    }
    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms * 1_000_000)
    }
    pub const fn from_micros(us: u64) -> Nanos {
        Nanos(us * 1_000)
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
}

impl Add for Nanos {
    type Output = Nanos;
    #[inline]
    fn add(self, rhs: Nanos) -> Nanos {
        Nanos(self.0 + rhs.0)
    }
}

impl AddAssign for Nanos {
    #[inline]
    fn add_assign(&mut self, rhs: Nanos) {
        self.0 += rhs.0;
    }
}

impl Sub for Nanos {
    type Output = Nanos;
    #[inline]
    fn sub(self, rhs: Nanos) -> Nanos {
        Nanos(self.0 - rhs.0)
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
}
