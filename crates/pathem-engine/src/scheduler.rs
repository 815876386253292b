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
    while !stop.load(Ordering::Relaxed) {
        let now = clock.now();
        let mut next = Next::Ended;
        for t in tasks.iter_mut() {
            next = next.earliest(t.poll(now)?);
        }
        if !pacer.wait(next, now, clock) {
            return Ok(());
        }
    }
    Ok(())
}
