//! What can go wrong when probing a path.

use pathem_model::Nanos;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A sender's or receiver's setting outside its range (`flag` with its dashes).
    #[error("{flag} {value}: accepted: {accepted}")]
    Setting { flag: &'static str, value: String, accepted: &'static str },
    /// A receiver's setting outside its range.
    #[error(transparent)]
    Range(#[from] pathem_model::limits::RangeError),
    /// A thread could not be placed in its namespace or on its CPU.
    #[error(transparent)]
    Place(#[from] pathem_io::host::PlaceError),
    /// A socket could not be opened, or sending or receiving failed (the cause follows in the
    /// error's chain).
    #[error("{what}")]
    Io { what: &'static str, source: std::io::Error },
    /// The receiving socket could not be bound.
    #[error(transparent)]
    Bind(#[from] pathem_io::Error),
    /// Nothing of the run arrived (`foreign`: datagrams of other runs did).
    #[error(
        "no probe datagram {}arrived within {idle} (is the sender running, and the path up?){}",
        if *foreign > 0 { "of this run " } else { "" },
        if *foreign > 0 { format!("; {foreign} of another run did (another sender to this port?)") } else { String::new() }
    )]
    Silence { idle: Nanos, foreign: u64 },
    /// One end of a pair stopped (it panicked, or the receiver failed before the sender began).
    #[error("the {0} stopped before the run ended")]
    Stopped(&'static str),
    /// A figure or the JSON summary could not be written.
    #[error("cannot write {}: {reason}", path.display())]
    Write { path: PathBuf, reason: String },
}

impl Error {
    /// True for what the user named wrongly (a setting, a CPU, a namespace that is not there)
    /// rather than what failed.
    pub fn is_usage(&self) -> bool {
        use pathem_io::host::PlaceError;
        matches!(
            self,
            Error::Setting { .. }
                | Error::Range(_)
                | Error::Place(
                    PlaceError::NoCpu(_) | PlaceError::Pin { .. } | PlaceError::NoNamespace { .. }
                )
        )
    }

    /// An I/O failure while doing `what`.
    pub fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
        move |source| Error::Io { what, source }
    }
}
