//! pathem's impairment models: pure functions of (configuration, state, frame metadata,
//! arrival time, seeded random source) → verdict.
//!
//! Nothing here reads a clock, touches a socket or spawns a thread, so every model runs the
//! same in virtual time (offline replay, tests) as in real time (live emulation). Each model
//! keeps its `Config` (what the user asked for) apart from its state (what it remembers), so a
//! configuration can change while the state carries on.

pub mod aqm;
pub mod corr;
pub mod delay;
pub mod dist;
pub mod frame;
pub mod limits;
pub mod link;
pub mod loss;
pub mod path;
pub mod police;
pub mod rng;
pub mod skip;
pub mod slot;
pub mod spec;
pub mod time;
pub mod trace;
pub mod units;

pub use path::{DropReason, FrameMeta, Path, PathConfig, Verdict};
pub use rng::Rng;
pub use time::Nanos;
