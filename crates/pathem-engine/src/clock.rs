//! Clocks: the engine reads one, once per burst, and passes `now` down.
//!
//! [`VirtualClock`] drives offline runs: waiting means jumping straight to the instant asked
//! for, so a capture of an hour replays in the time it takes to process its frames. The real
//! clock of live runs and benchmarks, and how it sleeps, spins and busy-polls, is
//! [`crate::wait`].

use pathem_model::Nanos;

/// A source of `now` for the engine.
pub trait Clock {
    /// The current instant.
    fn now(&mut self) -> Nanos;
    /// Returns at `t` or later (as soon after as the clock can), or earlier when a live
    /// clock sees input arrive. A real clock also returns after at most
    /// [`crate::wait::MAX_IDLE_WAIT`], so its caller can check whether to stop; a virtual
    /// clock jumps to `t` however far it is. Returns the clock's reading when it returned,
    /// which the loop takes as its next `now` (the waits below too): a wait ends with a
    /// reading, and a second one right after it would only cost time.
    fn wait_until(&mut self, t: Nanos) -> Nanos;
    /// Returns at `t` or as soon after as possible, without giving up the CPU: for a release
    /// so near that polling the ports first would make it late. `from` is a reading of this
    /// clock taken just before: a spin starts there, and reads nothing when it is past `t`.
    fn spin_until(&mut self, t: Nanos, from: Nanos) -> Nanos {
        let _ = from;
        self.wait_until(t)
    }
    /// Waits for input for at most `max` (live ports that cannot say when frames come).
    fn wait_for_input(&mut self, max: Nanos) -> Nanos {
        let now = self.now();
        self.wait_until(now + max)
    }
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
    fn wait_until(&mut self, t: Nanos) -> Nanos {
        self.now = self.now.max(t);
        self.now
    }
    fn idle(&self) -> Nanos {
        Nanos::ZERO
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
}
