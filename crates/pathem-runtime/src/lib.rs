//! pathem's live runtime: the one way a live link is run, by `pathem run`, `pathem shell`,
//! `pathem validate`, `pathem bench --live` and the live tests alike, so what is measured is
//! what users run.
//!
//! ```text
//!  Link::start(LinkSpec) ── (in a namespace, if asked) turn receive offloads off,
//!                           open port A and port B (AF_XDP / AF_PACKET),
//!                           build the a→b and b→a pipelines, place them on threads/CPUs
//!  Link::counters()      ── single-writer counters, read by any thread at any time
//!  Link::stop()          ── stop receiving, send what is due, drain the ports,
//!                           put the offloads back, return the final counters
//! ```
//! The wait policy of every live loop is `pathem_engine::wait`; the shell's namespaces are
//! [`netns`]. Offline, [`replay`] runs the same engine in virtual time. What measures pathem
//! (the test bed, validate, the benchmarks) is the lab's (`pathem-lab`), never linked here.

pub mod control;
pub mod link;
pub mod metrics;
pub mod netns;
pub mod replay;
pub mod session;

pub use link::{Final, Link, LinkSpec, Started};
pub use session::Session;

/// A seed for runs that did not ask for one.
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
    );
    h.finish()
}

/// Accepts connections on a non-blocking listener until `stop`, handing each to `answer`;
/// between connections it waits in `ppoll` on the listener (at most 100 ms, to see `stop`).
/// The control socket and the metrics endpoint both serve this way.
pub(crate) fn accept_loop<S>(
    fd: std::os::fd::RawFd,
    stop: &std::sync::atomic::AtomicBool,
    mut accept: impl FnMut() -> std::io::Result<S>,
    mut answer: impl FnMut(S),
) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        match accept() {
            Ok(stream) => answer(stream),
            Err(_) => pathem_io::afpacket::wait_readable(&[fd], pathem_model::Nanos::from_millis(100)),
        }
    }
}

/// A live link that could not be started or run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A port could not be opened or used.
    #[error(transparent)]
    Port(#[from] pathem_io::Error),
    /// The engine refused a setting or failed while running.
    #[error(transparent)]
    Engine(#[from] pathem_engine::Error),
    /// A namespace, link or command of a test bed.
    #[error("{0}")]
    Bed(String),
    /// A CPU to run on that cannot be used.
    #[error("{0}")]
    Cores(String),
    /// Ports that cannot be used together (the same interface twice, one that is down).
    #[error("{0}")]
    Ports(String),
    /// The control socket, or a request to a running link.
    #[error("{0}")]
    Control(String),
    /// A measurement (the probe, iperf3) failed.
    #[error("{0}")]
    Measure(String),
    /// A forwarding thread died.
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
}
