//! `pathem validate`: does pathem do what it is asked? Configured against observed, for a
//! matrix of paths, with the machine's own noise floor measured in the same run.
//!
//! It builds namespaces gen ⇄ pathem ⇄ sink (and gen2 ⇄ sink2 joined directly, for the noise
//! floor), runs pathem in-process between them for each path, sends the probe through, and
//! prints configured vs observed with the tolerance used and pass/fail. Figures and a JSON
//! report go to `--out`. A TCP run (iperf3) through delay and loss is compared with the Mathis
//! et al. estimate MSS/RTT · 1.22/√p.

use crate::usage;
use anyhow::Context;
use clap::Args;
use pathem_lab::testbed::Bed;
use pathem_lab::validate::{self, text};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// Port type pathem uses: afpacket or afxdp (--target runs both).
    #[arg(long, default_value = "afpacket", conflicts_with = "target")]
    pub port: String,
    /// A short run of four paths (what CI runs).
    #[arg(long)]
    pub quick: bool,
    /// Seconds of probe traffic per path, 0.1 to 3600 [default: 3, with --quick 1.5].
    #[arg(long, value_name = "S")]
    pub seconds: Option<f64>,
    /// Instead of the matrix: the latency benchmark (100 kpps of 64-byte CBR frames through
    /// 10 ms, and bursts at the same mean rate), through both port types and directly, three
    /// times each, with the machine's hiccups that bound it. Prints medians over the runs.
    #[arg(long, conflicts_with = "quick")]
    pub target: bool,
    /// Folder for figures and validate.json.
    #[arg(long, value_name = "DIR", default_value = "pathem-validate")]
    pub out: PathBuf,
}

pub fn main(args: ValidateArgs) -> anyhow::Result<()> {
    if args.port != "afpacket" && args.port != "afxdp" {
        return Err(usage(format!("--port {}: accepted: afpacket, afxdp", args.port)));
    }
    let seconds = args.seconds.unwrap_or(if args.quick { 1.5 } else { 3.0 });
    validate::check_seconds(seconds).map_err(crate::lab_error)?;
    // Before the namespaces: a folder that cannot be made stops nothing half built.
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    pathem_lab::testbed::clean_up_on_signals().map_err(crate::lab_error)?;
    let b = Bed::through(&format!("pv{}", std::process::id())).map_err(crate::lab_error)?;
    if args.target {
        const RUNS: usize = 3;
        let direct = Bed::direct(&format!("pvd{}", std::process::id())).map_err(crate::lab_error)?;
        let cpus = validate::cpus().unwrap_or((0, 0));
        outln!(
            "pathem validate --target: 100 kpps of 64-byte frames, {} s per run, {RUNS} runs; pathem on CPU {}, probe on CPU {}",
            seconds, cpus.1, cpus.0
        );
        let done = |run: usize| errln!("pathem validate: run {} of {RUNS} done", run + 1);
        let (rows, hiccups) =
            validate::target(&b, &direct, RUNS, seconds, &args.out, done).map_err(crate::lab_error)?;
        out!("{}", text::target(&rows, &hiccups, RUNS));
        outln!("  report in {}", args.out.join("target.json").display());
        return Ok(());
    }
    let secs = seconds;
    outln!("pathem validate: {} ports, {secs} s per path; figures in {}", args.port, args.out.display());
    let floor_p999 = std::cell::Cell::new(0.0);
    let floor = |s: &pathem_probe::Summary| {
        floor_p999.set(s.deviation_us.p99_9);
        outln!("{}", text::floor(s));
    };
    let case = |c: &validate::Case, r: &validate::CaseReport| out!("{}", text::case(c, r, floor_p999.get()));
    let report = validate::run_matrix(&b, &args.port, secs, args.quick, &args.out, floor, case)
        .map_err(crate::lab_error)?;
    let file = args.out.join("validate.json");
    out!("{}", text::end(&report, &file));
    if !report.all_pass {
        anyhow::bail!("some checks failed (see {})", file.display());
    }
    Ok(())
}
