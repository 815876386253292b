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

/// Runs the pathem binary.
pub fn pathem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pathem")).args(args).output().expect("pathem runs")
}

/// `n` frames of `size` bytes, one every `gap`, starting at 1 s; each payload carries its index.
pub fn cbr(n: u64, size: usize, gap: Nanos) -> Vec<(Nanos, Vec<u8>)> {
    (0..n).map(|i| (Nanos::from_secs(1) + Nanos(gap.as_nanos() * i), udp_frame(size, i))).collect()
}

/// The index a frame made by [`cbr`] carries.
pub fn seq(frame: &[u8]) -> u64 {
    u64::from_be_bytes(frame[42..50].try_into().unwrap())
}

/// Lengths of the runs of `true` (loss bursts) in a loss pattern.
pub fn bursts(lost: &[bool]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut run = 0;
    for &l in lost.iter().chain([false].iter()) {
        if l {
            run += 1;
        } else if run > 0 {
            out.push(run);
            run = 0;
        }
    }
    out
}
