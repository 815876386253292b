//! Clocks: the engine reads one, once per burst, and passes `now` down.
//!
//! [`VirtualClock`] drives offline runs: waiting means jumping straight to the instant asked
//! for, so a capture of an hour replays in the time it takes to process its frames.
//! [`MonotonicClock`] drives live runs and benchmarks: waiting sleeps while the next event is
//! far and spins when it is near (with the thread's timer slack at its minimum), so an idle
//! pathem uses almost no CPU and a due frame still leaves on time.

use pathem_model::Nanos;
use std::time::Instant;

/// A source of `now` for the engine.
pub trait Clock {
    /// The current instant.
    fn now(&mut self) -> Nanos;
    /// Returns at `t` or later (as soon after as the clock can).
    fn wait_until(&mut self, t: Nanos);
    /// Total time spent waiting so far.
    fn idle(&self) -> Nanos;
}

/// Time that moves only when the engine waits: offline emulation.
#[derive(Debug, Default)]
pub struct VirtualClock {
    now: Nanos,
}

impl VirtualClock {
    pub fn starting_at(t: Nanos) -> VirtualClock {
        VirtualClock { now: t }
    }
}

impl Clock for VirtualClock {
    fn now(&mut self) -> Nanos {
        self.now
    }
    fn wait_until(&mut self, t: Nanos) {
        self.now = self.now.max(t);
    }
    fn idle(&self) -> Nanos {
        Nanos::ZERO
    }
}

/// CLOCK_MONOTONIC (through `Instant`), counted from the clock's creation.
#[derive(Debug)]
pub struct MonotonicClock {
    origin: Instant,
    idle: Nanos,
    /// Below this much time to wait, spin instead of sleeping.
    spin_below: Nanos,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl MonotonicClock {
    pub fn new() -> MonotonicClock {
        // Sleeps end within ~50 µs by default; at the minimum slack a sleep ends close to its
        // deadline, which lets the spin window stay short. Failure only costs precision.
        let _ = nix::sys::prctl::set_timerslack(1);
        MonotonicClock { origin: Instant::now(), idle: Nanos::ZERO, spin_below: Nanos::from_micros(100) }
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&mut self) -> Nanos {
        Nanos(self.origin.elapsed().as_nanos() as u64)
    }

    fn wait_until(&mut self, t: Nanos) {
        let start = self.now();
        let mut now = start;
        while now < t {
            let left = t - now;
            if left > self.spin_below {
                std::thread::sleep(std::time::Duration::from_nanos((left - self.spin_below).as_nanos()));
            } else {
                std::hint::spin_loop();
            }
            now = self.now();
        }
        self.idle += now - start;
    }

    fn idle(&self) -> Nanos {
        self.idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_clock_jumps_and_never_goes_back() {
        let mut c = VirtualClock::starting_at(Nanos(10));
        c.wait_until(Nanos(5));
        assert_eq!(c.now(), Nanos(10));
        c.wait_until(Nanos(1_000_000_000_000));
        assert_eq!(c.now(), Nanos(1_000_000_000_000));
    }

    #[test]
    fn monotonic_clock_waits_at_least_until() {
        let mut c = MonotonicClock::new();
        let t = c.now() + Nanos::from_micros(300);
        c.wait_until(t);
        assert!(c.now() >= t);
        assert!(c.idle() > Nanos::ZERO);
    }
}
