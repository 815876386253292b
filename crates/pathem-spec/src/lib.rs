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

/// The longest trace file read (delay, rate and loss traces, distribution tables).
pub const MAX_TRACE_FILE: u64 = 256 << 20;
/// The longest config or schedule file read.
pub const MAX_TEXT_FILE: u64 = 64 << 20;

/// Reads a text file of at most `limit` bytes; past it (`/dev/zero`, a capture given by
/// mistake) the reason is one line, and nothing larger than the limit is held. A byte order
/// mark that some editors put first is not text: it is left out (it would make the first
/// value look right in a message and still be refused).
pub(crate) fn read_text(path: &std::path::Path, limit: u64) -> Result<String, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut text = String::new();
    f.take(limit + 1).read_to_string(&mut text).map_err(|e| e.to_string())?;
    if text.len() as u64 > limit {
        return Err(format!(
            "it is longer than {} (the limit for such a file)",
            pathem_model::units::binary_bytes(limit)
        ));
    }
    match text.strip_prefix('\u{feff}') {
        Some(rest) => Ok(rest.to_string()),
        None => Ok(text),
    }
}
pub use netem::{NetemError, NetemSpec};
pub use path::PathSpec;
