//! `pathem demo`: the main job on an embedded default ([`pathem_lab::demo`]), into a folder
//! of the user's or a temporary one.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Folder for in.pcap, out.pcap and stats.json [default: a temporary folder, removed after].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Frames in the generated capture, 1 to 10^6 (the demo holds them all in memory).
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub frames: u64,
    /// Seed of the random models.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
}

pub fn main(args: DemoArgs) -> anyhow::Result<()> {
    crate::within("--frames", args.frames, 1..=1_000_000, "1 to 10^6")?;
    let tmp = tempfile::tempdir()?;
    let dir = args.dir.as_deref().unwrap_or(tmp.path());
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let demo = pathem_lab::demo::run(dir, args.frames, args.seed).map_err(crate::lab_error)?;
    let stats = dir.join("stats.json");
    std::fs::write(&stats, serde_json::to_string_pretty(&demo.report)? + "\n")
        .with_context(|| format!("cannot write {}", stats.display()))?;
    out!("{}", demo.describe());
    if args.dir.is_some() {
        outln!("  files in {}: in.pcap, out.pcap, stats.json", dir.display());
    }
    Ok(())
}
