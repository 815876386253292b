//! What a user asks of a path, in every form it comes: flags (`--delay 10ms`), a config file's
//! tables (`delay = "10ms"`), a schedule's lines and `pathem ctl NAME set` words. All of them
//! are one [`PathSpec`] (clap `Args` and serde `Deserialize` on the same struct, so flags and
//! keys cannot drift), merged one way ([`PathSpec::overridden_by`]: what is set wins, field by
//! field) and checked one way ([`PathSpec::to_config`]: combinations, ranges, the files a spec
//! names), into the models' [`pathem_model::PathConfig`].
//!
//! - [`path`]: one direction's spec, the per-direction strings (`--a-to-b "..."`);
//! - [`mod@file`]: the `--config FILE.toml` file;
//! - [`schedule`]: `--schedule FILE`, changes at set times;
//! - [`change`]: the words of `ctl set`, applied to both directions or neither;
//! - [`link`]: a link's two directions, from the file, the common flags and each one's own;
//! - [`netem`]: tc-netem(8)'s grammar (`--netem "SPEC"`), its meanings as pathem flags, and
//!   the way back;
//! - [`error`]: what can be wrong with any of them.

pub mod change;
pub mod class;
pub mod error;
pub mod file;
pub mod link;
pub mod netem;
pub mod path;
pub mod schedule;

pub use error::{ScheduleError, SpecError};
pub use netem::{NetemError, NetemSpec};
pub use path::PathSpec;
