//! pathem's ports: where frames come from and where they go.
//!
//! Every backend is one module behind the burst traits of [`port`]:
//! - [`pcap`]: offline, a classic pcap capture in (micro- or nanosecond, either byte order),
//!   a nanosecond pcap out whose timestamps are the release times;
//! - [`mem`]: a synthetic generator and a counting sink, to measure the engine alone;
//! - [`afpacket`]: live, any Linux interface, through batched AF_PACKET sockets;
//! - [`afxdp`]: live, through AF_XDP sockets and an XDP redirect program;
//! - [`offload`]: what a NIC would have done to frames a local sender left to it (partial
//!   checksums, GSO super-frames), done by the live ports before the path;
//! - [`dpdk`]: live, DPDK ethdev ports (NICs bound to DPDK, virtual devices), with the
//!   `dpdk` cargo feature.
//!
//! Ports know nothing of impairments; they move bytes and say when they next have work.

pub mod afpacket;
pub mod afxdp;
pub mod attach;
mod bpf;
pub mod copygen;
pub mod dpdk;
pub mod filler;
pub mod host;
pub mod iface;
pub mod kstamp;
pub mod live;
pub mod mem;
mod mmap;
pub mod offload;
pub mod pcap;
pub mod port;
pub mod tap;
pub mod udp;
pub mod xdpgen;

/// Most receive queues a port reads: an AF_XDP port's sockets, a DPDK port's queues. An
/// interface or device with more is refused, never read in part.
pub const MAX_RX_QUEUES: usize = 64;

pub use port::{PollAt, RxFrame, RxPort, TxErrorClass, TxPort, TxRefused};

use std::path::PathBuf;

/// A port that could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be opened or created.
    #[error("cannot open {}: {source}", path.display())]
    Open { path: PathBuf, source: std::io::Error },
    /// A capture is not one pathem can read.
    #[error("{}: {reason}", path.display())]
    Format { path: PathBuf, reason: String },
    /// A capture holds a value outside the range pathem accepts for it (a frame's lengths or
    /// timestamp, a release time a pcap cannot hold: README's Ranges), as a flag out of range.
    #[error("{}: {reason}", path.display())]
    OutOfRange { path: PathBuf, reason: String },
    /// A network interface cannot be used as a port.
    #[error("interface {name}: {reason}")]
    Interface { name: String, reason: String },
    /// A DPDK port or the EAL could not be set up.
    #[error("dpdk:{dev}: {reason}")]
    Dpdk { dev: String, reason: String },
    /// Writing a capture failed (disk full, I/O error).
    #[error("cannot write {}: {reason}", path.display())]
    Write { path: PathBuf, reason: String },
}

impl Error {
    /// True for a value out of its documented range, which the command line reports as bad
    /// usage (exit code 2), rather than a file or device that failed.
    pub fn is_usage(&self) -> bool {
        matches!(self, Error::OutOfRange { .. })
    }
}

/// A temporary file named `prefix…suffix` in the directory `path` goes into, to be moved onto
/// `path` once whole (`persist`), so a file a run writes appears complete or not at all. It
/// is made with the mode any new file gets (0666 less the umask), not a temporary's 0600. A
/// `path` that is a directory is refused, and a missing directory is said as the system says
/// it (without the temporary's name).
pub fn temp_beside(
    path: &std::path::Path,
    prefix: &str,
    suffix: &str,
) -> std::io::Result<tempfile::NamedTempFile> {
    use std::os::unix::fs::PermissionsExt;
    if path.is_dir() {
        return Err(std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    std::fs::metadata(dir)?;
    let mode = std::fs::Permissions::from_mode(0o666);
    tempfile::Builder::new().prefix(prefix).suffix(suffix).permissions(mode).tempfile_in(dir)
}

/// True when `a` and `b` name one file, however they are spelled (`./x`, `d/../x`, a link to
/// it): the same inode where both are there, else the same name in the same directory.
pub fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return (x.dev(), x.ino()) == (y.dev(), y.ino());
    }
    let place = |p: &std::path::Path| {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        Some((std::fs::canonicalize(dir).ok()?, p.file_name()?.to_owned()))
    };
    a == b || place(a).is_some_and(|x| place(b) == Some(x))
}

/// A `KEY: N kB` line of a /proc file (`/proc/meminfo` `MemTotal`, `/proc/self/status`
/// `VmHWM`) in bytes, where the system has it.
pub fn proc_kb(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?;
    let kb: u64 = line.trim().trim_end_matches("kB").trim().parse().ok()?;
    kb.checked_mul(1024)
}

/// Sets the calling thread's timer slack to 1 ns, so its short sleeps end close to their
/// deadlines (the default slack lets them end up to 50 µs late). Failure only costs precision.
pub fn set_min_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack; no memory is passed.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
}

/// Makes a write to a closed pipe fail with EPIPE instead of killing the process: for a live
/// run, which stops with its cleanup when its output goes (see `pathem_runtime::session`).
pub fn ignore_sigpipe() {
    // SAFETY: ignoring SIGPIPE affects no Rust invariant (std ignores it by default); writes
    // to a closed pipe then return EPIPE, which every writer of a live run handles.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// Lets the process die quietly of SIGPIPE when its output is closed (`pathem ... | head`),
/// as command-line tools do, instead of failing on every later write.
pub fn default_sigpipe() {
    // SAFETY: restoring the default disposition of SIGPIPE affects no Rust invariant; it is
    // done once at start, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}
