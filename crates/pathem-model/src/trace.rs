//! What can be wrong with a trace or table file (`--loss-trace`, `--rate-trace`,
//! `--delay-trace`, `--delay-dist table:`).

/// A trace or table pathem cannot use: the line at fault, or the file as a whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// One line (1-based) is wrong.
    #[error("line {line}: {message}")]
    Line { line: usize, message: String },
    /// The file as a whole is wrong (empty, too short, a period before its end).
    #[error("{0}")]
    Whole(String),
}

impl TraceError {
    /// Line `index` (0-based, as `enumerate` counts) is wrong.
    pub fn line(index: usize, message: impl std::fmt::Display) -> TraceError {
        TraceError::Line { line: index + 1, message: message.to_string() }
    }
}
