//! What can be wrong with what a user asked, in every form it comes: one enum for the spec
//! library ([`SpecError`]), the per-line errors of a schedule ([`ScheduleError`]), the
//! per-word errors of a netem spec ([`crate::netem::NetemError`]), and the line of clap's that
//! a flags string gets.

use pathem_model::Nanos;
use std::path::PathBuf;

/// A setting that makes no sense as given, or a file it names that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    #[error("--{0} needs --rate or --rate-trace: without a bottleneck nothing ever waits in the link")]
    NeedsRate(&'static str),
    #[error("--{0} and --{1} cannot be used together: {2}")]
    Conflict(&'static str, &'static str, &'static str),
    #[error("--{0} needs --jitter: it shapes the delay's variation")]
    NeedsJitter(&'static str),
    #[error("--{flag} {}: {reason}", path.display())]
    File { flag: &'static str, path: PathBuf, reason: String },
    #[error(transparent)]
    Range(#[from] pathem_model::limits::RangeError),
    /// Flags given in a string that clap refused (its first line).
    #[error("{0}")]
    Flags(String),
    /// One direction's flags (`--a-to-b "..."`) that could not be used.
    #[error("--{flag} \"{}\": {reason}", pathem_model::units::shown(.text))]
    Direction { flag: String, text: String, reason: Box<SpecError> },
    /// A config file that could not be read.
    #[error("cannot read config {}: {reason}", path.display())]
    ConfigUnreadable { path: PathBuf, reason: String },
    /// A config file with a bad line.
    #[error("config {}:{line}: {message}", path.display())]
    Config { path: PathBuf, line: usize, message: String },
    /// A schedule file that could not be read.
    #[error("--schedule {}: cannot read it: {reason}", path.display())]
    ScheduleUnreadable { path: PathBuf, reason: String },
    /// A schedule file with a bad line.
    #[error("schedule {}: {error}", path.display())]
    Schedule { path: PathBuf, error: ScheduleError },
    /// A netem spec (`--netem "..."`) with a bad word.
    #[error("--netem \"{}\": {error}", pathem_model::units::shown(.spec))]
    Netem { spec: String, error: crate::netem::NetemError },
    /// A class (`--class`, `[[class]]`) that cannot be used.
    #[error("{0}")]
    Class(String),
    /// A class's filter that is not tcpdump's language as pathem takes it.
    #[error("--class {0}")]
    Filter(#[from] pathem_filter::FilterError),
    /// A setting NetEm has no words for (asked of [`crate::netem::to_netem`]).
    #[error("{setting} has no NetEm equivalent: {reason}")]
    NotNetem { setting: String, reason: String },
}

impl SpecError {
    /// True for what the user named wrongly (exit 2), false for what failed. Everything a spec
    /// can get wrong is the user's, a file it names that cannot be read included; the match
    /// makes a new variant decide.
    pub fn is_usage(&self) -> bool {
        match self {
            SpecError::NeedsRate(_)
            | SpecError::Conflict(..)
            | SpecError::NeedsJitter(_)
            | SpecError::File { .. }
            | SpecError::Range(_)
            | SpecError::Flags(_)
            | SpecError::Direction { .. }
            | SpecError::ConfigUnreadable { .. }
            | SpecError::Config { .. }
            | SpecError::ScheduleUnreadable { .. }
            | SpecError::Schedule { .. }
            | SpecError::Netem { .. }
            | SpecError::Class(_)
            | SpecError::Filter(_)
            | SpecError::NotNetem { .. } => true,
        }
    }
}

/// What is wrong with a schedule's text.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    /// A line that cannot be used, with its 1-based number.
    #[error("line {line}: {reason}")]
    Line { line: usize, reason: String },
    #[error("holds no TIME FLAGS line")]
    Empty,
    #[error("repeat {period}: accepted: after the last time ({last}), at least 1ms for each of the {lines} timed lines, up to 1 day")]
    Period { period: Nanos, last: Nanos, lines: u64 },
}

/// The first line of clap's message, without its `error: ` prefix.
pub(crate) fn first_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let line = rendered.lines().find(|l| !l.trim().is_empty()).unwrap_or("bad flags");
    line.trim_start_matches("error: ").to_string()
}
