//! What the scheduler polls: a [`Task`] (a pipeline, or one of its halves), what it asks for
//! after a poll ([`Next`]), and the failure that stops it ([`Error`]).

use crate::delay_line::AllocError;
use pathem_model::Nanos;

/// A failure that stops the engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A port failed (a capture could not be read or written).
    #[error(transparent)]
    Port(#[from] pathem_io::Error),
    /// A path or engine setting is outside its range.
    #[error(transparent)]
    Config(#[from] pathem_model::limits::RangeError),
    /// The delay line could not be allocated.
    #[error(transparent)]
    DelayLine(#[from] AllocError),
}

impl Error {
    /// True for a setting the user gave (out of range, or a delay line larger than the
    /// machine can hold), rather than a port that failed.
    pub fn is_usage(&self) -> bool {
        match self {
            Error::Config(_) | Error::DelayLine(_) => true,
            Error::Port(e) => e.is_usage(),
        }
    }
}

/// What a task asks of the scheduler after a poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Poll again at once: work is waiting.
    Now,
    /// Poll again at this instant.
    At(Nanos),
    /// Poll again without sleeping (traffic is flowing); the next release, if one is waiting.
    Busy(Option<Nanos>),
    /// Poll again soon; when is not known (live ports).
    Soon,
    /// Done: nothing will ever come.
    Ended,
}

impl Next {
    /// The sooner of two requests (what a round of several tasks asks).
    pub fn earliest(self, other: Next) -> Next {
        use Next::*;
        match (self, other) {
            (Now, _) | (_, Now) => Now,
            (Busy(a), Busy(b)) => Busy(a.into_iter().chain(b).min()),
            (Busy(a), At(b)) | (At(b), Busy(a)) => Busy(Some(a.map_or(b, |a| a.min(b)))),
            (Busy(a), _) | (_, Busy(a)) => Busy(a),
            (At(a), At(b)) => At(a.min(b)),
            (At(a), _) | (_, At(a)) => At(a),
            (Soon, _) | (_, Soon) => Soon,
            (Ended, Ended) => Ended,
        }
    }
}

/// Something the scheduler polls.
pub trait Task {
    fn poll(&mut self, now: Nanos) -> Result<Next, Error>;
}
