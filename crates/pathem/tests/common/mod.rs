//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use pathem_io::mem::udp_frame;
use pathem_model::Nanos;
use std::path::PathBuf;
use std::process::{Command, Output};

/// A temporary folder for one test's captures.
pub struct Dir(tempfile::TempDir);

impl Dir {
    pub fn new() -> Dir {
        Dir(tempfile::tempdir().unwrap())
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
    pub fn s(&self, name: &str) -> String {
        self.path(name).to_str().unwrap().to_string()
    }
}

/// Runs the pathem binary, in a process group of its own that is killed if it has not ended
/// within two minutes (a hang fails the test instead of holding up the run).
pub fn pathem(args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let child = Command::new(env!("CARGO_BIN_EXE_pathem"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("pathem runs");
    let group = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(std::time::Duration::from_secs(120)) {
        Ok(out) => out.expect("pathem runs"),
        Err(_) => {
            let _ =
                nix::sys::signal::killpg(nix::unistd::Pid::from_raw(group as i32), nix::sys::signal::SIGKILL);
            panic!("pathem {args:?} did not end within 120 s (killed)");
        }
    }
}

/// Runs pathem with `args`, which must fail with exit `code`, one line on stderr, nothing on
/// stdout and no `out.pcap` in `d`; returns the line.
pub fn refused(d: &Dir, args: &[&str], code: i32) -> String {
    let out = pathem(args);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "one line for {args:?}: {err}");
    assert!(!d.path("out.pcap").exists(), "no output for {args:?}");
    err
}

/// `n` frames of `size` bytes, one every `gap`, starting at 1 s; each payload carries its index.
pub fn cbr(n: u64, size: usize, gap: Nanos) -> Vec<(Nanos, Vec<u8>)> {
    (0..n).map(|i| (Nanos::from_secs(1) + Nanos(gap.as_nanos() * i), udp_frame(size, i))).collect()
}

/// The index a frame made by [`cbr`] carries.
pub fn seq(frame: &[u8]) -> u64 {
    u64::from_be_bytes(frame[42..50].try_into().unwrap())
}

/// Lengths of the runs of `true` (loss bursts) in a loss pattern: the model's own measure.
pub fn bursts(lost: &[bool]) -> Vec<usize> {
    pathem_model::loss::burst_lengths(lost)
}

/// The harness of the test files that need root and tools (live, image): runs the tests named on
/// the command line (all by default; a word filters by substring, as libtest does), one at a
/// time, and reports each; a test that cannot run (`cannot_run` for all, `skip` for one) is
/// SKIPPED with the reason, never passed, and a skip fails the run when PATHEM_REQUIRE_LIVE=1.
/// Ends with `SUITE: N passed, N failed, N skipped`.
pub fn harness(
    suite: &str,
    tests: &[(&str, fn())],
    cannot_run: impl FnOnce() -> Option<String>,
    skip: impl Fn(&str) -> Option<String>,
) {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let chosen: Vec<_> = tests
        .iter()
        .filter(|(n, _)| filters.is_empty() || filters.iter().any(|f| n.contains(f.as_str())))
        .collect();
    if std::env::args().any(|a| a == "--list") {
        for (n, _) in &chosen {
            println!("{n}: test");
        }
        return;
    }
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let why = cannot_run();
    println!("\nrunning {} {suite} tests", chosen.len());
    for (name, test) in &chosen {
        if let Some(why) = why.clone().or_else(|| skip(name)) {
            println!("test {name} ... SKIPPED: {why}");
            skipped += 1;
            continue;
        }
        let started = std::time::Instant::now();
        match std::panic::catch_unwind(test) {
            Ok(()) => {
                println!("test {name} ... ok ({:.1} s)", started.elapsed().as_secs_f64());
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{suite}: {passed} passed, {failed} failed, {skipped} skipped");
    let required = std::env::var("PATHEM_REQUIRE_LIVE").is_ok_and(|v| v == "1");
    if failed > 0 || (skipped > 0 && required) {
        if skipped > 0 && required {
            eprintln!("{suite} tests were required (PATHEM_REQUIRE_LIVE=1) but {skipped} could not run");
        }
        std::process::exit(1);
    }
}
