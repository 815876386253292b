//! Standard output and error without `print!`'s panic: a write that fails (a full disk, a
//! file closed under pathem) must end a run with one line and exit 1, not abort it.

use std::io::Write;
use std::sync::{Mutex, PoisonError};

/// The first write to standard output that failed; later writes are skipped.
static STDOUT_FAILED: Mutex<Option<std::io::Error>> = Mutex::new(None);

/// Writes to standard output, remembering the first failure instead of panicking as `print!`
/// does; [`stdout_result`] hands it to the caller at the end.
pub fn out(args: std::fmt::Arguments) {
    // A panic elsewhere while the lock was held leaves nothing half-done in an Option.
    let mut failed = STDOUT_FAILED.lock().unwrap_or_else(PoisonError::into_inner);
    if failed.is_none() {
        if let Err(e) = std::io::stdout().lock().write_fmt(args) {
            *failed = Some(e);
        }
    }
}

/// Writes to standard error; a failure is ignored (there is nowhere left to say it, and the
/// exit code still tells how the run ended).
pub fn err(args: std::fmt::Arguments) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// Flushes standard output; the first write that failed since the start, if any did.
pub fn stdout_result() -> std::io::Result<()> {
    let flushed = std::io::stdout().lock().flush();
    let mut failed = STDOUT_FAILED.lock().unwrap_or_else(PoisonError::into_inner);
    failed.take().map_or(flushed, Err)
}

/// Standard output as an [`std::io::Write`] for code that panics on a failed write (as
/// clap_complete does): writes go through [`out`], so a failure is remembered, not returned.
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut failed = STDOUT_FAILED.lock().unwrap_or_else(PoisonError::into_inner);
        if failed.is_none() {
            if let Err(e) = std::io::stdout().lock().write_all(buf) {
                *failed = Some(e);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
