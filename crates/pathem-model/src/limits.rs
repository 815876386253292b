//! The range of every value a user can give pathem, and the check that enforces them.
//!
//! Each bound is chosen from what makes physical sense, far below where pathem's integer
//! arithmetic could saturate: a one-way delay of an hour is already longer than any path on
//! Earth or to the Moon, a frame of 64 KiB is the largest IP datagram, and so on. A value
//! outside its range is refused with one line naming it and the range (see [`RangeError`]),
//! never clamped silently. [`crate::PathConfig::validate`] applies them to a whole path, so
//! every caller (the command line, config files, benchmarks, tests) gets the same checks.

use crate::time::Nanos;

/// Longest delay, jitter, delay half-life, slot spacing, or delay in a trace or table: 1 hour.
pub const MAX_DELAY: Nanos = Nanos::from_secs(3600);
/// Longest span of a delay trace or a rate trace (its times and period): 1 day.
pub const MAX_TRACE_SPAN: Nanos = Nanos::from_secs(86_400);
/// Highest rate of a link or policer: 10 Tbit/s.
pub const MAX_RATE: u64 = 10_000_000_000_000;
/// Largest per-frame overhead, either sign: 64 KiB.
pub const MAX_OVERHEAD: i32 = 65_536;
/// Longest frame the engine carries: 64 KiB (the largest IP datagram plus headers fits).
pub const MAX_FRAME: usize = 65_536;
/// Largest link queue in bytes: 1 TiB.
pub const MAX_QUEUE_BYTES: u64 = 1 << 40;
/// Largest link queue in frames: 2^32.
pub const MAX_QUEUE_PACKETS: u64 = 1 << 32;
/// Deepest policer bucket: 2 GB (tokens are kept in bit·ns, which fit a u64 up to there).
pub const MAX_POLICE_BURST: u64 = 2_000_000_000;
/// Most frames in a slot: 2^32; most bytes: 1 TiB.
pub const MAX_SLOT_PACKETS: u64 = 1 << 32;
pub const MAX_SLOT_BYTES: u64 = 1 << 40;
/// Largest delay line per direction: 1 TiB (the machine's memory is the practical limit).
pub const MAX_BUFFER: u64 = 1 << 40;
/// Longest mean loss burst of a Gilbert-Elliott spec: 10^9 frames.
pub const MAX_BURST: f64 = 1e9;
/// Least chance a loss chain leaves a state it must leave (Gilbert-Elliott's r, 4-state's
/// p31 + p32, and p23 once p32 can lead to state 2): 10^-9, the mean stay of [`MAX_BURST`] frames. A smaller one
/// would draw as never (a probability below 2^-64 is 0 to the generator), so the chain
/// would stay where it was refused for staying.
pub const MIN_LEAVE: f64 = 1.0 / MAX_BURST;

/// A value outside the range pathem accepts for it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--{key} {value} is out of range; accepted: {accepted}")]
pub struct RangeError {
    /// The flag (and TOML key) without its dashes.
    pub key: &'static str,
    pub value: String,
    pub accepted: String,
}

/// Checks `value` (shown as `shown`) against `max`, inclusive.
pub fn at_most<T: PartialOrd>(
    key: &'static str,
    value: T,
    max: T,
    shown: impl ToString,
    accepted: &str,
) -> Result<(), RangeError> {
    if value > max {
        return Err(RangeError { key, value: shown.to_string(), accepted: accepted.to_string() });
    }
    Ok(())
}

/// Checks `value` against `range` (a NaN is outside any range).
pub fn within<T: PartialOrd + std::fmt::Display>(
    key: &'static str,
    value: T,
    range: std::ops::RangeInclusive<T>,
    accepted: &str,
) -> Result<(), RangeError> {
    if !range.contains(&value) {
        return Err(RangeError { key, value: value.to_string(), accepted: accepted.to_string() });
    }
    Ok(())
}

/// A delay-like duration: at most [`MAX_DELAY`].
pub fn delay(key: &'static str, d: Nanos) -> Result<(), RangeError> {
    at_most(key, d, MAX_DELAY, d, "0ns to 1h")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_flag_the_value_and_the_range() {
        let e = delay("jitter", Nanos::from_secs(7200)).unwrap_err();
        assert_eq!(e.to_string(), "--jitter 7200s is out of range; accepted: 0ns to 1h");
        assert!(delay("delay", MAX_DELAY).is_ok());
        assert_eq!(
            within("runs", 0, 1..=1000, "1 to 1000").unwrap_err().to_string(),
            "--runs 0 is out of range; accepted: 1 to 1000"
        );
        assert!(
            within("seconds", f64::NAN, 0.1..=1.0, "0.1 to 1").is_err()
                && within("runs", 5, 1..=5, "").is_ok()
        );
    }
}
