//! The wait policy of every live loop, in one place: when pathem sleeps, when it spins on the
//! clock, and when it keeps polling its ports.
//!
//! - **Sleep** while nothing is due and no traffic flows: in `ppoll` on the receiving sockets
//!   ([`MonotonicClock::waiting_on`]), which wakes at once when a frame arrives, for at most
//!   [`MAX_IDLE_WAIT`] (so the loop sees a stop request), or until [`SPIN_BELOW`] before the
//!   next release. An idle pathem uses almost no CPU.
//! - **Busy-poll** for [`DEFAULT_BUSY_POLL`] after each frame (the pipeline's `busy_poll`):
//!   waking from a sleep took ≈65 µs on a small VM, and every frame that woke pathem waited for
//!   it. Rounds start at least [`BUSY_POLL_STEP`] apart.
//! - **Spin** on the clock when the next release is nearer than what a round of polls costs
//!   (an exponential mean, capped at [`MAX_SPIN_GUARD`]): a round started then would still be
//!   polling when the frame falls due. Frames arriving meanwhile wait in the port, stamped.
//!
//! Offline runs use a [`crate::VirtualClock`], to which waiting is a jump.

use crate::clock::Clock;
use crate::task::Next;
use pathem_model::Nanos;
use std::os::fd::RawFd;

/// How long live loops keep polling after a frame unless told otherwise (`--busy-poll`).
pub const DEFAULT_BUSY_POLL: Nanos = Nanos::from_millis(1);
/// A busy-polling loop starts its rounds at least this far apart (a round that took longer
/// is followed at once).
pub const BUSY_POLL_STEP: Nanos = Nanos::from_micros(1);
/// Longest a live loop sleeps before it checks whether to stop.
pub const MAX_IDLE_WAIT: Nanos = Nanos::from_millis(10);
/// Longest the loop spins ahead of a release instead of polling its ports.
pub const MAX_SPIN_GUARD: Nanos = Nanos::from_micros(20);
/// A live clock that can be woken by input stops sleeping this long before a release and
/// goes back to polling (and spinning) instead.
pub const SPIN_BELOW: Nanos = Nanos::from_micros(50);

/// The loop's memory between rounds: what one round of polls costs.
#[derive(Debug, Default)]
pub struct Pacer {
    round: Nanos,
}

impl Pacer {
    /// Waits as `next` (the earliest of what the tasks asked, polled at `now`) calls for, and
    /// returns the `now` of the next round: the clock's last reading, so a round after a wait
    /// reads the clock once (the spin's own last reading is the instant it polls at). `None`
    /// when every task has ended.
    pub fn wait(&mut self, next: Next, now: Nanos, clock: &mut dyn Clock) -> Option<Nanos> {
        Some(match next {
            Next::Ended => return None,
            Next::Now => clock.now(),
            Next::At(_) | Next::Busy(_) => {
                let after = clock.now();
                self.round =
                    Nanos((self.round.as_nanos() * 7 + (after - now).as_nanos()) / 8).min(MAX_SPIN_GUARD);
                match next {
                    Next::At(t) | Next::Busy(Some(t)) if t <= after + self.round => {
                        clock.spin_until(t, after)
                    }
                    // A real clock returns within MAX_IDLE_WAIT whatever `t` is, so the loop
                    // sees `stop`; a virtual one jumps there at no cost.
                    Next::At(t) => clock.wait_until(t),
                    // Busy: poll again; a virtual clock (which never busy-polls) would still move.
                    _ => clock.spin_until(now + BUSY_POLL_STEP, after),
                }
            }
            Next::Soon => clock.wait_for_input(MAX_IDLE_WAIT),
        })
    }
}

/// Sleeps up to the given time or until input arrives; returns true when input woke it.
pub type Waiter = Box<dyn FnMut(Nanos) -> bool + Send>;

/// CLOCK_MONOTONIC in nanoseconds, the time base of live ports' receive timestamps.
pub struct MonotonicClock {
    idle: Nanos,
    /// Below this much time to wait, spin instead of sleeping.
    spin_below: Nanos,
    /// Live runs: how to sleep while still waking up for arriving frames.
    waiter: Option<Waiter>,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl std::fmt::Debug for MonotonicClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MonotonicClock").field("idle", &self.idle).finish()
    }
}

/// CLOCK_MONOTONIC now, the time base live ports stamp frames on.
pub use pathem_io::kstamp::monotonic_now;

impl MonotonicClock {
    pub fn new() -> MonotonicClock {
        // Sleeps end within ~50 µs by default; at the minimum slack a sleep ends close to its
        // deadline, which lets the spin window stay short. Failure only costs precision.
        pathem_io::set_min_timer_slack();
        MonotonicClock { idle: Nanos::ZERO, spin_below: Nanos::from_micros(100), waiter: None }
    }

    /// A clock for live ports: long waits sleep in `waiter`, which returns early when frames
    /// arrive, so an idle emulator uses almost no CPU and a busy one reacts at once.
    pub fn with_waiter(waiter: Waiter) -> MonotonicClock {
        MonotonicClock { spin_below: SPIN_BELOW, waiter: Some(waiter), ..MonotonicClock::new() }
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&mut self) -> Nanos {
        monotonic_now()
    }

    fn wait_until(&mut self, t: Nanos) -> Nanos {
        let start = self.now();
        let t = t.min(start + MAX_IDLE_WAIT);
        let mut now = start;
        while now < t {
            let left = t - now;
            if left > self.spin_below {
                let nap = left - self.spin_below;
                match &mut self.waiter {
                    Some(w) => {
                        if w(nap) {
                            let now = monotonic_now();
                            self.idle += now - start;
                            return now;
                        }
                    }
                    None => std::thread::sleep(std::time::Duration::from_nanos(nap.as_nanos())),
                }
            } else if self.waiter.is_some() {
                // Near a release: go back to the loop, which polls the ports while it waits.
                break;
            } else {
                std::hint::spin_loop();
            }
            now = self.now();
        }
        self.idle += now - start;
        now
    }

    fn spin_until(&mut self, t: Nanos, from: Nanos) -> Nanos {
        let mut now = from;
        while now < t {
            std::hint::spin_loop();
            now = self.now();
        }
        self.idle += now - from;
        now
    }

    fn wait_for_input(&mut self, max: Nanos) -> Nanos {
        let start = self.now();
        match &mut self.waiter {
            Some(w) => {
                w(max);
            }
            None => std::thread::sleep(std::time::Duration::from_nanos(max.as_nanos().min(50_000))),
        }
        let now = monotonic_now();
        self.idle += now - start;
        now
    }

    fn idle(&self) -> Nanos {
        self.idle
    }
}

impl MonotonicClock {
    /// The clock of a live loop: it sleeps until the next release or until one of `fds` (the
    /// receiving sockets) has frames.
    pub fn waiting_on(fds: Vec<RawFd>) -> MonotonicClock {
        MonotonicClock::with_waiter(Box::new(move |nap: Nanos| {
            pathem_io::afpacket::wait_readable(&fds, nap);
            true
        }))
    }

    /// The clock of a live loop over receiving ports, each with its socket or `None` for a
    /// poll-mode port (DPDK): it sleeps on the sockets as [`waiting_on`](Self::waiting_on) does,
    /// but never sleeps while a poll-mode port is among them, which has nothing to wake it
    /// (waits return at once and the loop polls again, as a DPDK application does).
    pub fn for_ports(fds: Vec<Option<RawFd>>) -> MonotonicClock {
        match fds.into_iter().collect::<Option<Vec<RawFd>>>() {
            Some(fds) => MonotonicClock::waiting_on(fds),
            None => MonotonicClock::with_waiter(Box::new(|_| true)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_waits_at_least_until() {
        let mut c = MonotonicClock::new();
        let t = c.now() + Nanos::from_micros(300);
        c.wait_until(t);
        assert!(c.now() >= t);
        assert!(c.idle() > Nanos::ZERO);
    }

    #[test]
    fn a_poll_mode_port_never_sleeps() {
        let mut c = MonotonicClock::for_ports(vec![None]);
        let start = c.now();
        c.wait_until(start + Nanos::from_secs(3600));
        c.wait_for_input(Nanos::from_secs(3600));
        assert!(c.now() - start < Nanos::from_millis(5), "a wait slept");
    }

    #[test]
    fn a_live_wait_returns_within_the_idle_cap() {
        let mut c = MonotonicClock::waiting_on(Vec::new());
        let start = c.now();
        c.wait_until(start + Nanos::from_secs(3600));
        assert!(c.now() - start < Nanos::from_secs(1));
    }
}
