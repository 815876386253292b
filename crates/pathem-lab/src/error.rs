//! What can go wrong in the lab.

/// A test bed, a measurement or a benchmark that could not be done.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The link under test, a namespace or a port failed.
    #[error(transparent)]
    Runtime(#[from] pathem_runtime::Error),
    /// The probe could not measure.
    #[error(transparent)]
    Probe(#[from] pathem_probe::Error),
    /// A setting of a measurement out of its documented range.
    #[error(transparent)]
    Range(#[from] pathem_model::limits::RangeError),
    /// A port kind the lab cannot build a bed for.
    #[error("port kind `{kind}`: accepted: {}", crate::testbed::PORT_KINDS)]
    PortKind { kind: String },
    /// A tool the lab runs is missing or failed to start.
    #[error("cannot run {tool} ({source}); install {package}")]
    Tool { tool: &'static str, package: &'static str, source: std::io::Error },
    /// A measurement that ran but whose result cannot be used: what went wrong.
    #[error("{0}")]
    Measure(String),
    /// A measurement needs a setting it was not given.
    #[error("{what} needs {needs}")]
    Needs { what: &'static str, needs: &'static str },
    /// A measurement needs more CPUs than the machine has.
    #[error("{what} needs {needs} CPUs; this machine has {has}")]
    Cpus { what: &'static str, needs: usize, has: usize },
    /// A thread of the lab died.
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
    /// A report could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write { path: std::path::PathBuf, source: std::io::Error },
}

impl Error {
    /// True for what the user named wrongly rather than what failed.
    pub fn is_usage(&self) -> bool {
        match self {
            Error::Runtime(e) => e.is_usage(),
            Error::PortKind { .. } | Error::Cpus { .. } | Error::Range(_) | Error::Needs { .. } => true,
            _ => false,
        }
    }
}

/// The engine, a port or a thread's placement fail through the runtime's error, as they do
/// for a link.
macro_rules! through_runtime {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error::Runtime(e.into())
            }
        }
    )*};
}
through_runtime!(pathem_engine::Error, pathem_io::Error, pathem_io::host::PlaceError);
