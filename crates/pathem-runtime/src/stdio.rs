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

/// A refusal of clap's (rendered) as one line: its first line, which names the flag, the value
/// and what is accepted, or ends in a colon before the lines that list what is missing
/// (joined here); the usage after a blank line is noise. A number that is not a whole one of
/// the flag's type (a sign on a count, a fraction, too many digits) says what is accepted and
/// where each flag's range is.
pub fn usage_line(rendered: &str) -> String {
    let mut lines = rendered.lines().map(str::trim).skip_while(|l| l.is_empty());
    let first = lines.next().unwrap_or("bad arguments").trim_start_matches("error: ");
    let listed: Vec<&str> = lines.take_while(|l| first.ends_with(':') && !l.is_empty()).collect();
    let whole = "accepted: a whole number within the flag's range (README, \"Ranges\")";
    // clap quotes the value whole: a long one is cut as pathem's own messages cut it.
    let clipped;
    let first = match first.strip_prefix("invalid value '").and_then(|rest| rest.split_once("' for '")) {
        Some((value, rest)) if matches!(pathem_model::units::shown(value), std::borrow::Cow::Owned(_)) => {
            clipped = format!("invalid value '{}' for '{rest}", pathem_model::units::shown(value));
            clipped.as_str()
        }
        _ => first,
    };
    [first, &listed.join(", ")]
        .join(" ")
        .trim_end()
        .replace("invalid digit found in string", whole)
        .replace("number too large to fit in target type", &format!("too large; {whole}"))
        .replace("number too small to fit in target type", &format!("too small; {whole}"))
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

    #[test]
    fn clap_refusals_are_one_line_that_says_what_is_accepted() {
        use super::usage_line;
        let missing = "error: the following required arguments were not provided:\n  --to <IP:PORT>\n  \
                       --x <N>\n\nUsage: pathem probe pair --to <IP:PORT>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            usage_line(missing),
            "the following required arguments were not provided: --to <IP:PORT>, --x <N>"
        );
        let long =
            format!("error: invalid value '{}' for '--delay <DUR>': it is long\n\nFor more", "9".repeat(70));
        assert_eq!(
            usage_line(&long),
            format!("invalid value '{}… (70 bytes)' for '--delay <DUR>': it is long", "9".repeat(64))
        );
        let sign = "error: invalid value '-1' for '--packets <N>': invalid digit found in string\n\nFor more";
        assert_eq!(
            usage_line(sign),
            "invalid value '-1' for '--packets <N>': accepted: a whole number within the flag's range \
             (README, \"Ranges\")"
        );
        let big = usage_line(
            "error: invalid value '9e99' for '--runs <N>': number too large to fit in target type",
        );
        assert!(big.ends_with(
            "'--runs <N>': too large; accepted: a whole number within the flag's range (README, \"Ranges\")"
        ));
        assert_eq!(usage_line(""), "bad arguments");
    }
}
