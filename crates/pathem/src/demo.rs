//! `pathem demo`: the main job on an embedded default, with nothing to prepare.
//!
//! Generates a capture of a 50 Mbit/s stream of mixed-size UDP frames, replays it through a
//! typical access path (20 Mbit/s bottleneck with a 64 KB queue, 1% random loss, 20 ms delay),
//! and prints what pathem did next to what was asked: drops by reason, and the one-way delay
//! each frame received (read back from the two captures by the sequence number it carries).

use crate::replay::{replay, ReplayArgs};
use crate::report;
use anyhow::Context;
use clap::Args;
use pathem_io::mem::udp_frame;
use pathem_io::pcap::{read_capture, write_capture};
use pathem_model::DropReason;
use pathem_model::Nanos;
use pathem_spec::PathSpec;
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Folder for in.pcap, out.pcap and stats.json [default: a temporary folder, removed after].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Frames in the generated capture.
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub frames: u64,
    /// Seed of the random models.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
}

const SIZES: [usize; 4] = [64, 590, 1514, 1024];
const OFFERED_BPS: u64 = 50_000_000;

pub fn main(args: DemoArgs) -> anyhow::Result<()> {
    let tmp;
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
            d.clone()
        }
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let input = dir.join("in.pcap");
    let output = dir.join("out.pcap");
    // Constant bit rate at 50 Mbit/s on the wire (frame + 24 B framing), starting at t = 1 s.
    let mut t = Nanos::from_secs(1);
    let frames: Vec<(Nanos, Vec<u8>)> = (0..args.frames)
        .map(|i| {
            let f = udp_frame(SIZES[i as usize % SIZES.len()], i);
            let at = t;
            t += Nanos((f.len() as u64 + 24) * 8 * 1_000_000_000 / OFFERED_BPS);
            (at, f)
        })
        .collect();
    write_capture(&input, frames.clone())?;
    let path = PathSpec {
        delay: Some("20ms".parse()?),
        loss: Some("1%".parse()?),
        rate: Some("20mbit".parse()?),
        queue: Some("64KB".parse()?),
        ..PathSpec::default()
    };
    let replay_args = ReplayArgs {
        input: input.clone(),
        output: output.clone(),
        path,
        config: None,
        seed: Some(args.seed),
        stats: Some(dir.join("stats.json")),
        buffer: None,
        schedule: None,
        max_frame: 65_535,
    };
    let r = replay(&replay_args)?;
    std::fs::write(dir.join("stats.json"), serde_json::to_string_pretty(&r)? + "\n")?;

    let sent: HashMap<u64, Nanos> =
        frames.iter().map(|(t, f)| (u64::from_be_bytes(f[42..50].try_into().unwrap()), *t)).collect();
    let out = read_capture(&output)?;
    let mut delays: Vec<u64> = out
        .iter()
        .map(|(t, _, f)| (*t - sent[&u64::from_be_bytes(f[42..50].try_into().unwrap())]).as_nanos())
        .collect();
    delays.sort_unstable();
    let q = |p: f64| Nanos(delays.get(((delays.len() as f64 - 1.0) * p) as usize).copied().unwrap_or(0));

    print!("{}", report::summary(&input, &output, &r));
    println!("  offered    {} Mbit/s of 64/590/1024/1514 B UDP frames, CBR", OFFERED_BPS / 1_000_000);
    println!(
        "  one-way delay of forwarded frames: min {}  median {}  p99 {}  max {}",
        fmt_ms(q(0.0)),
        fmt_ms(q(0.5)),
        fmt_ms(q(0.99)),
        fmt_ms(q(1.0))
    );
    println!("    (20 ms propagation + transmission at 20 Mbit/s + waiting in the 64 KB queue)");
    let kept_by_link = r.stats.rx_packets - r.stats.dropped.get(DropReason::Queue);
    println!(
        "  loss after the link: {} of {} frames = {:.2}% (configured 1%)",
        r.stats.dropped.get(DropReason::Loss),
        kept_by_link,
        100.0 * r.stats.dropped.get(DropReason::Loss) as f64 / kept_by_link.max(1) as f64
    );
    if args.dir.is_some() {
        println!("  files in {}: in.pcap, out.pcap, stats.json", dir.display());
    }
    Ok(())
}

fn fmt_ms(t: Nanos) -> String {
    format!("{:.3} ms", t.as_nanos() as f64 / 1e6)
}
