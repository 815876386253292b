//! pathem's engine: the stages, the delay line, the clocks, the counters.
//!
//! ```text
//!  rx port ─► Ingress ──────────────────────────────► delay line ─► Egress ─► tx port
//!             fate = Path::process(meta, now, rng)     (SPSC byte    release when
//!             police → link → loss → delay → dup/corr   ring of       now ≥ release,
//!             copy frame + release time, once           records)      never early
//! ```
//! One enqueue and one dequeue per frame: ingress computes everything, egress only compares
//! times. A [`pipeline::Pipeline`] is one direction; [`scheduler::run`] polls pipelines on one
//! thread with one clock read per round, virtual (offline) or real (live).

pub mod clock;
pub mod control;
pub mod delay_line;
pub mod fanin;
pub mod held;
pub mod pipeline;
pub mod scheduler;
pub mod stage;
pub mod stats;
pub mod task;
#[cfg(test)]
mod testing;
pub mod wait;

pub use clock::{Clock, VirtualClock};
pub use control::{ChangeError, Control, Schedule};
pub use fanin::{fan_in, Fanin, QueueReader};
pub use pipeline::{
    buffer_rounding, class_seed, delay_line_size, delay_line_sizing, ClassConfig, EngineConfig, Pipeline,
    Sizing,
};
pub use scheduler::run;
pub use stats::{Counters, DirectionCounters, Stats, DEFAULT_CLASS};
pub use task::{Error, Next, Task};
pub use wait::{monotonic_now, MonotonicClock, Waiter, DEFAULT_BUSY_POLL};
