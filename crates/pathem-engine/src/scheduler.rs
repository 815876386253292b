//! The loop that runs tasks on one thread: one clock read per round, every task polled with
//! that `now`, then the wait the policy of [`crate::wait`] chooses. With a virtual clock it is
//! a discrete-event simulation; with the monotonic clock it forwards live traffic.

use crate::clock::Clock;
use crate::task::{Error, Next, Task};
use std::sync::atomic::{AtomicBool, Ordering};

/// Polls `tasks` on this thread until all have ended or `stop` is set, waiting between rounds
/// as [`crate::wait`] says.
pub fn run(tasks: &mut [&mut dyn Task], clock: &mut dyn Clock, stop: &AtomicBool) -> Result<(), Error> {
    let mut pacer = crate::wait::Pacer::default();
    let mut now = clock.now();
    while !stop.load(Ordering::Relaxed) {
        let mut next = Next::Ended;
        for t in tasks.iter_mut() {
            next = next.earliest(t.poll(now)?);
        }
        match pacer.wait(next, now, clock) {
            Some(t) => now = t,
            None => return Ok(()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathem_model::Nanos;

    /// A clock that moves 100 ns at each reading and counts its readings.
    struct Ticking {
        t: Nanos,
        reads: u64,
    }

    impl Clock for Ticking {
        fn now(&mut self) -> Nanos {
            self.reads += 1;
            self.t += Nanos(100);
            self.t
        }
        fn wait_until(&mut self, t: Nanos) -> Nanos {
            self.t = self.t.max(t);
            self.t
        }
        fn idle(&self) -> Nanos {
            Nanos::ZERO
        }
    }

    /// Asks to be polled again 50 ns (a spin) or 1 ms (a wait) after each poll, five times.
    struct Waits {
        polled: Vec<Nanos>,
        gap: Nanos,
    }

    impl Task for Waits {
        fn poll(&mut self, now: Nanos) -> Result<Next, Error> {
            self.polled.push(now);
            Ok(if self.polled.len() == 5 { Next::Ended } else { Next::At(now + self.gap) })
        }
    }

    #[test]
    fn a_round_after_a_wait_reads_the_clock_once() {
        for gap in [Nanos(50), Nanos::from_millis(1)] {
            let mut clock = Ticking { t: Nanos(0), reads: 0 };
            let mut task = Waits { polled: Vec::new(), gap };
            run(&mut [&mut task], &mut clock, &AtomicBool::new(false)).unwrap();
            // One reading to start, then one per wait (the pacer's, for what a round cost): the
            // wait's last reading is the next round's `now`, not read again.
            assert_eq!(clock.reads, 1 + 4, "gap {gap}");
            for w in task.polled.windows(2) {
                assert!(w[1] >= w[0] + gap, "polled at {:?} before it was due", w);
            }
        }
    }
}
