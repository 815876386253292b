//! `pathem demo`: the main job on an embedded default, with nothing to prepare.
//!
//! Generates a capture of a 50 Mbit/s stream of mixed-size UDP frames, replays it through a
//! typical access path (20 Mbit/s bottleneck with a 64 KB queue, 1% random loss, 20 ms delay),
//! and reads back what pathem did next to what was asked: drops by reason, and the one-way
//! delay each frame received (matched across the two captures by the sequence number it
//! carries).

use crate::Error;
use pathem_engine::EngineConfig;
use pathem_io::mem::udp_frame;
use pathem_io::pcap::{read_capture, write_capture};
use pathem_model::{DropReason, Nanos, PathConfig};
use pathem_runtime::replay::{replay_file, ReplayReport};
use pathem_spec::PathSpec;
use std::collections::HashMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// The frame sizes of the generated stream, in turn.
const SIZES: [usize; 4] = [64, 590, 1514, 1024];
/// Its rate on the wire (frame + 24 B of preamble, FCS and gap).
const OFFERED_BPS: u64 = 50_000_000;
/// The path it goes through, as flags.
pub const PATH: &str = "--delay 20ms --loss 1% --rate 20mbit --queue 64KB";

/// What the demo did.
pub struct Demo {
    pub input: PathBuf,
    pub output: PathBuf,
    pub report: ReplayReport,
    /// One-way delays of the forwarded frames: min, median, p99, max.
    pub delays: [Nanos; 4],
}

/// The demo's path.
pub fn path() -> PathConfig {
    let spec = PathSpec::from_flags(PATH).expect("the demo's path parses");
    spec.to_config().expect("the demo's path is valid")
}

/// Generates `frames` frames into `dir/in.pcap`, replays them with `seed` into `dir/out.pcap`
/// and measures the delays.
pub fn run(dir: &Path, frames: u64, seed: u64) -> Result<Demo, Error> {
    let (input, output) = (dir.join("in.pcap"), dir.join("out.pcap"));
    // Constant bit rate on the wire, starting at t = 1 s.
    let mut t = Nanos::from_secs(1);
    let generated: Vec<(Nanos, Vec<u8>)> = (0..frames)
        .map(|i| {
            let f = udp_frame(SIZES[i as usize % SIZES.len()], i);
            let at = t;
            t += Nanos((f.len() as u64 + 24) * 8 * 1_000_000_000 / OFFERED_BPS);
            (at, f)
        })
        .collect();
    write_capture(&input, generated.iter().cloned())?;
    let engine = EngineConfig { offline: true, ..EngineConfig::default() };
    let report = replay_file(&input, &output, &path(), &[], None, seed, &engine, None)?;
    let seq = |f: &[u8]| u64::from_be_bytes(f[42..50].try_into().expect("8 bytes"));
    let sent: HashMap<u64, Nanos> = generated.iter().map(|(t, f)| (seq(f), *t)).collect();
    let mut delays: Vec<Nanos> = read_capture(&output)?
        .iter()
        .filter_map(|(t, _, f)| sent.get(&seq(f)).map(|s| t.saturating_sub(*s)))
        .collect();
    delays.sort_unstable();
    let q = |p: f64| delays.get(((delays.len() as f64 - 1.0) * p) as usize).copied().unwrap_or(Nanos::ZERO);
    Ok(Demo { input, output, report, delays: [q(0.0), q(0.5), q(0.99), q(1.0)] })
}

impl Demo {
    /// The demo's screen: the replay's summary, then the delays and the loss against what was
    /// asked.
    pub fn describe(&self) -> String {
        let mut out = self.report.summary(&self.input, &self.output);
        let ms = |t: Nanos| format!("{:.3} ms", t.as_nanos() as f64 / 1e6);
        let [min, median, p99, max] = self.delays;
        let s = &self.report.stats;
        let _ = writeln!(
            out,
            "  offered    {} Mbit/s of 64/590/1024/1514 B UDP frames, CBR",
            OFFERED_BPS / 1_000_000
        );
        let _ = writeln!(
            out,
            "  one-way delay of forwarded frames: min {}  median {}  p99 {}  max {}",
            ms(min),
            ms(median),
            ms(p99),
            ms(max)
        );
        let _ =
            writeln!(out, "    (20 ms propagation + transmission at 20 Mbit/s + waiting in the 64 KB queue)");
        let kept_by_link = s.rx_packets.saturating_sub(s.dropped.get(DropReason::Queue));
        let lost = s.dropped.get(DropReason::Loss);
        let _ = writeln!(
            out,
            "  loss after the link: {lost} of {kept_by_link} frames = {:.2}% (configured 1%)",
            100.0 * lost as f64 / kept_by_link.max(1) as f64
        );
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_demo_does_what_it_says() {
        let dir = tempfile::tempdir().unwrap();
        let d = super::run(dir.path(), 5_000, 1).unwrap();
        let s = &d.report.stats;
        assert!(s.balances() && s.in_flight == 0, "{s:?}");
        assert!(d.delays[0] >= pathem_model::Nanos::from_millis(20), "{:?}", d.delays);
        let text = d.describe();
        assert!(text.contains("one-way delay") && text.contains("configured 1%"), "{text}");
    }
}
