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
pub mod stdio;

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

/// A thread taking connections on a non-blocking listener until dropped: the control socket
/// and the metrics endpoint both serve this way. Each connection is answered on a thread of
/// its own, at most [`MOST_CLIENTS`] at once (one more is closed unanswered), so a client that
/// sends nothing holds only its own (five idle connections held a scrape 10 s, one after
/// another). Between connections it waits in `ppoll` on the listener (at most 100 ms, to see
/// that it is to stop).
pub(crate) struct ServerThread {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Connections answered at once by a [`ServerThread`].
pub(crate) const MOST_CLIENTS: usize = 16;

impl ServerThread {
    /// Starts thread `name` answering each connection `accept` takes from `listener` with
    /// `answer`, on a thread of its own.
    pub(crate) fn spawn<L, S>(
        name: &str,
        listener: L,
        accept: impl Fn(&L) -> std::io::Result<S> + Send + 'static,
        answer: impl Fn(S) + Send + Sync + 'static,
    ) -> Result<ServerThread, Error>
    where
        L: std::os::fd::AsRawFd + Send + 'static,
        S: Send + 'static,
    {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let (answer, busy) = (Arc::new(answer), Arc::new(AtomicUsize::new(0)));
        let client = format!("{name}-client");
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let fd = listener.as_raw_fd();
                while !stopped.load(Ordering::Relaxed) {
                    match accept(&listener) {
                        // Dropped: the connection is closed unanswered.
                        Ok(_) if busy.load(Ordering::Acquire) >= MOST_CLIENTS => {}
                        Ok(stream) => {
                            busy.fetch_add(1, Ordering::AcqRel);
                            let (answer, done) = (answer.clone(), busy.clone());
                            let spawned = std::thread::Builder::new().name(client.clone()).spawn(move || {
                                // Counted out however `answer` ends, a panic included.
                                struct Out(Arc<AtomicUsize>);
                                impl Drop for Out {
                                    fn drop(&mut self) {
                                        self.0.fetch_sub(1, Ordering::AcqRel);
                                    }
                                }
                                let _out = Out(done);
                                answer(stream);
                            });
                            if spawned.is_err() {
                                busy.fetch_sub(1, Ordering::AcqRel);
                            }
                        }
                        Err(_) => {
                            pathem_io::afpacket::wait_readable(&[fd], pathem_model::Nanos::from_millis(100))
                        }
                    }
                }
            })
            .map_err(|source| Error::Io { what: format!("cannot start thread {name}"), source })?;
        Ok(ServerThread { stop, thread: Some(thread) })
    }
}

/// How long a client of the control socket or the metrics endpoint has to send its request,
/// and to take the answer: a client that trickles a byte at a time (or never reads) holds its
/// thread no longer.
pub(crate) const CLIENT_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads a request's first line (at most `limit` bytes; what follows it is left unread) from
/// `stream`, all of it within [`CLIENT_TIME`]: `set_timeout` sets the stream's read timeout to
/// what is left before each read.
pub(crate) fn read_request(
    mut stream: impl std::io::Read,
    set_timeout: impl Fn(std::time::Duration) -> std::io::Result<()>,
    limit: usize,
) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind};
    let deadline = std::time::Instant::now() + CLIENT_TIME;
    let (mut line, mut buf) = (Vec::new(), [0u8; 1024]);
    while line.len() < limit {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(Error::new(ErrorKind::TimedOut, "the request took too long"));
        }
        set_timeout(left)?;
        let n = stream.read(&mut buf[..(limit - line.len()).min(1024)])?;
        if n == 0 {
            break;
        }
        line.extend_from_slice(&buf[..n]);
        if let Some(end) = line.iter().position(|&b| b == b'\n') {
            line.truncate(end + 1);
            break;
        }
    }
    // A line cut at the limit may end inside a character: the caller refuses it as too long.
    if line.len() >= limit && !line.ends_with(b"\n") {
        return Ok(String::from_utf8_lossy(&line).into_owned());
    }
    String::from_utf8(line).map_err(|_| Error::new(ErrorKind::InvalidData, "the request is not UTF-8"))
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
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
    /// A thread could not be placed in its namespace or on its CPU.
    #[error(transparent)]
    Place(#[from] pathem_io::host::PlaceError),
    /// CPUs to run on that cannot be used: the list as given, and what is accepted.
    #[error("--cores {list}: accepted: {accepted}")]
    Cores { list: String, accepted: String },
    /// A port's interface is down.
    #[error("interface {0} is down; bring it up with `ip link set {0} up`")]
    Down(String),
    /// Both ports are the same interface.
    #[error("both ports are {0}: pathem forwards between two different interfaces")]
    SamePort(String),
    /// A file to write that is a file the run reads or writes otherwise (a replay's output
    /// that is its input, a report that is either capture).
    #[error("{path}: it is {what}; name another file")]
    SameFile { path: std::path::PathBuf, what: &'static str },
    /// A link's name outside what names can be.
    #[error("--name {0}: accepted: 1 to 64 letters, digits, '-', '_' or '.', not starting with '.', and not `list` (ctl's own word)")]
    Name(String),
    /// A link's name taken from its interfaces (no `--name`) that names cannot be.
    #[error("the link's name defaults to its interfaces', {0:?}, which is not a name (1 to 64 letters, digits, '-', '_' or '.', not starting with '.', and not `list`): give one with --name")]
    DefaultName(String),
    /// A link's name a running pathem has already.
    #[error("--name {0}: taken by a running pathem (`pathem ctl {0} show` says which); pick another name")]
    NameTaken(String),
    /// No running link of that name.
    #[error("no running pathem is called {0} (`pathem ctl list` shows those there are)")]
    NoSuchLink(String),
    /// The other end of the control socket speaks another version of its protocol.
    #[error("{who} speaks control protocol {theirs} and this pathem {}: use the pathem that started the link for `pathem ctl`", control::PROTOCOL)]
    Version { who: String, theirs: u32 },
    /// A request that cannot be sent as the control protocol carries it.
    #[error("{0}")]
    Unsendable(String),
    /// A running link answered what this pathem cannot read.
    #[error("{name} answered what this pathem cannot read: {reason}")]
    Unreadable { name: String, reason: String },
    /// `--metrics` that names no address.
    #[error("--metrics {0}: accepted: PORT (on 127.0.0.1) or ADDR:PORT, e.g. 9100")]
    MetricsAddr(String),
    /// An address to serve on that cannot be listened on (in use, not this host's).
    #[error("--metrics {addr}: cannot listen there: {source}")]
    Listen { addr: std::net::SocketAddr, source: std::io::Error },
    /// A socket, file or thread could not be made or used.
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    /// A command pathem runs (`ip`, `nft`) failed, with what it said.
    #[error("{command}: {message}")]
    Command { command: String, message: String },
    /// No free address for a shell's link.
    #[error("no free /30 left in 100.64.0.0/10")]
    NoSubnet,
    /// A replay stopped by a signal before its end: nothing was written.
    #[error("stopped by a signal before the end of the capture: no output or report written")]
    Stopped,
    /// A forwarding thread died.
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
    /// A setting outside its documented range.
    #[error(transparent)]
    Range(#[from] pathem_model::limits::RangeError),
    /// `--eal` arguments pathem cannot pass on.
    #[error(transparent)]
    Eal(pathem_io::Error),
    /// `--tx-timing` or `--line-rate` that cannot be, and why.
    #[error("{0}")]
    TxTiming(String),
}

impl Error {
    /// True for what the user named wrongly (a CPU, a port, a name, an address), rather than
    /// what failed while running.
    pub fn is_usage(&self) -> bool {
        use pathem_io::host::PlaceError;
        match self {
            Error::Engine(e) => e.is_usage(),
            Error::Port(e) => e.is_usage(),
            Error::Place(e) => matches!(e, PlaceError::NoCpu(_) | PlaceError::Pin { .. }),
            Error::Cores { .. }
            | Error::Down(_)
            | Error::SamePort(_)
            | Error::SameFile { .. }
            | Error::Name(_)
            | Error::DefaultName(_)
            | Error::NameTaken(_)
            | Error::NoSuchLink(_)
            | Error::Version { .. }
            | Error::Unsendable(_)
            | Error::MetricsAddr(_)
            | Error::Listen { .. }
            | Error::Range(_)
            | Error::TxTiming(_)
            | Error::Eal(_) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use std::time::{Duration, Instant};

    #[test]
    fn a_request_is_read_to_its_line_end_within_the_clients_time() {
        let (mut client, server) = UnixStream::pair().unwrap();
        client.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let line = read_request(&server, |t| server.set_read_timeout(Some(t)), 8 << 10).unwrap();
        assert_eq!(line, "GET /metrics HTTP/1.1\r\n");
        // At most `limit` bytes, whatever follows.
        client.write_all(&[b'x'; 100]).unwrap();
        let line = read_request(&server, |t| server.set_read_timeout(Some(t)), 10).unwrap();
        assert_eq!(line, "xxxxxxxxxx");
    }

    #[test]
    fn a_client_sending_a_byte_at_a_time_is_cut_off_at_the_clients_time() {
        let (mut client, server) = UnixStream::pair().unwrap();
        let trickle = std::thread::spawn(move || {
            // A byte every 300 ms, each within any per-read timeout, for 4 s in all.
            for _ in 0..13 {
                if client.write_all(b"G").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        let start = Instant::now();
        let err = read_request(&server, |t| server.set_read_timeout(Some(t)), 8 << 10).unwrap_err();
        let took = start.elapsed();
        assert!(matches!(err.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock), "{err}");
        assert!(took >= CLIENT_TIME && took < CLIENT_TIME + Duration::from_millis(1500), "{took:?}");
        drop(server);
        trickle.join().unwrap();
    }
}
