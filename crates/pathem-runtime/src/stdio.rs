//! Standard output and error without `print!`'s panic: a write that fails (a full disk, a
//! file closed under pathem) must end a run with one line and exit 1, not abort it.

use std::io::Write;
use std::sync::{Mutex, PoisonError};

/// The first write to standard output that failed; later writes are skipped.
static STDOUT_FAILED: Mutex<Option<std::io::Error>> = Mutex::new(None);

/// Writes to standard output, remembering the first failure instead of panicking as `print!`
/// does; [`stdout_result`] hands it to the caller at the end.
pub fn out(args: std::fmt::Arguments) {
    remembered(|stdout| stdout.write_fmt(args));
}

/// Runs `write` on standard output unless a write failed before; remembers its failure.
fn remembered(write: impl FnOnce(&mut std::io::StdoutLock) -> std::io::Result<()>) {
    // A panic elsewhere while the lock was held leaves nothing half-done in an Option.
    let mut failed = STDOUT_FAILED.lock().unwrap_or_else(PoisonError::into_inner);
    if failed.is_none() {
        if let Err(e) = write(&mut std::io::stdout().lock()) {
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
        remembered(|stdout| stdout.write_all(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An error and its causes on one line, `: ` between them; a cause whose text its error's
/// message already ends with (an error that says its source, `cannot open F: {source}`) is
/// said once.
pub fn one_line<'a>(chain: impl Iterator<Item = &'a (dyn std::error::Error + 'static)>) -> String {
    let mut line = String::new();
    for cause in chain.map(|c| c.to_string().replace('\n', " ")) {
        if line.is_empty() {
            line = cause;
        } else if line != cause && !line.ends_with(&format!(": {cause}")) {
            line = format!("{line}: {cause}");
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    /// An error saying `.0`, caused by `.1`.
    #[derive(Debug)]
    struct Says(String, Option<Box<dyn Error + 'static>>);
    impl std::fmt::Display for Says {
        fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }
    impl Error for Says {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref()
        }
    }

    fn line(e: &Says) -> String {
        let first: &(dyn Error + 'static) = e;
        super::one_line(std::iter::successors(Some(first), |&e| e.source()))
    }

    #[test]
    fn a_cause_already_said_is_said_once() {
        let io = || Box::new(std::io::Error::from(std::io::ErrorKind::NotFound)) as Box<dyn Error>;
        let opened = Says(format!("cannot open x: {}", io()), Some(io()));
        let said = opened.0.clone();
        assert_eq!(line(&Says("replay".into(), Some(Box::new(opened)))), format!("replay: {said}"));
        let write = Says("cannot write to standard output".into(), Some(io()));
        assert_eq!(line(&write), format!("cannot write to standard output: {}", io()));
    }
}
