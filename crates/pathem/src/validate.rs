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
use pathem_lab::validate;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// Port type pathem uses: afpacket or afxdp.
    #[arg(long, default_value = "afpacket")]
    pub port: String,
    /// A short run of three paths (what CI runs).
    #[arg(long)]
    pub quick: bool,
    /// Seconds of probe traffic per path.
    #[arg(long, value_name = "S", default_value_t = 3.0)]
    pub seconds: f64,
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
    crate::within("--seconds", args.seconds, 0.1..=3600.0, "0.1 to 3600 (above 0)")?;
    let b = Bed::through(&format!("pv{}", std::process::id())).map_err(usage)?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    if args.target {
        return target(&args, &b);
    }
    let secs = if args.quick { args.seconds.min(1.5) } else { args.seconds };
    println!("pathem validate: {} ports, {secs} s per path; figures in {}", args.port, args.out.display());
    let floor_p999 = std::cell::Cell::new(0.0);
    let report = validate::run_matrix(
        &b,
        &args.port,
        secs,
        args.quick,
        &args.out,
        |floor| {
            floor_p999.set(floor.deviation_us.p99_9);
            println!(
                "  noise floor (direct veth, no pathem): deviation median {:.1} p99.9 {:.1} us, gaps kept {:.1}%",
                floor.deviation_us.median,
                floor.deviation_us.p99_9,
                100.0 * floor.gaps_kept_within_2us
            );
        },
        |case, report| {
            let s = &report.summary;
            let flags = if case.flags.is_empty() { "no impairment" } else { &case.flags };
            println!("  {} [{flags}]", case.name);
            println!(
                "    deviation median {:.1} p99 {:.1} p99.9 {:.1} us (pathem adds {:.1} us at p99.9 above the floor); gaps kept {:.1}%",
                s.deviation_us.median,
                s.deviation_us.p99,
                s.deviation_us.p99_9,
                s.deviation_us.p99_9 - floor_p999.get(),
                100.0 * s.gaps_kept_within_2us
            );
            for c in &report.checks {
                println!(
                    "    {:<4} {:<26} configured {:>10.4}  observed {:>10.4}  ({})",
                    if c.pass { "pass" } else { "FAIL" },
                    c.what,
                    c.configured,
                    c.observed,
                    c.tolerance
                );
            }
        },
    )
    .map_err(crate::runtime_error)?;
    if let Some(t) = &report.tcp {
        let (g, m) = (t["goodput_bps"].as_f64().unwrap_or(0.0), t["mathis_bps"].as_f64().unwrap_or(1.0));
        println!(
            "  TCP Reno through --delay 10ms --loss 0.5%: goodput {:.2} Mbit/s, Mathis estimate MSS/RTT·1.22/√p = {:.2} Mbit/s (ratio {:.2})",
            g / 1e6,
            m / 1e6,
            g / m
        );
    }
    let file = args.out.join("validate.json");
    let verdict = if report.all_pass { "all checks passed" } else { "SOME CHECKS FAILED" };
    println!("  {verdict} — report in {}", file.display());
    if !report.all_pass {
        anyhow::bail!("some checks failed (see {})", file.display());
    }
    Ok(())
}

/// The latency benchmark (`--target`): the lab's rounds, printed as a table.
fn target(args: &ValidateArgs, b: &Bed) -> anyhow::Result<()> {
    const RUNS: usize = 3;
    let direct = Bed::direct(&format!("pvd{}", std::process::id())).map_err(usage)?;
    let secs = args.seconds;
    let cpus = validate::cpus();
    println!(
        "pathem validate --target: 100 kpps of 64-byte frames, {secs} s per run, {RUNS} runs; pathem on CPU {}, probe on CPU {}",
        cpus.map_or(0, |c| c.1),
        cpus.map_or(0, |c| c.0)
    );
    let (rows, hiccups) = validate::target(b, &direct, RUNS, secs, &args.out, |run| {
        eprintln!("pathem validate: run {} of {RUNS} done", run + 1)
    })
    .map_err(crate::runtime_error)?;
    println!("  medians over {RUNS} runs; deviation from the configured delay (direct: from 0), us");
    println!(
        "  {:<18} {:>8} {:>8} {:>10} {:>11}  {:>14} {:>14}  {:>18}",
        "", "median", "p99", "p99.9", "gaps ±2us", "adds: median", "adds: p99.9", "pathem late p50/p99.9"
    );
    for r in &rows {
        let show = |v: Option<f64>| v.map(|v| format!("{v:+.1}")).unwrap_or_default();
        let late = match (r.late_p50_us, r.late_p99_9_us) {
            (Some(a), Some(b)) => format!("{a:.1}/{b:.1}"),
            _ => String::new(),
        };
        println!(
            "  {:<18} {:>8.1} {:>8.1} {:>10.1} {:>10.2}%  {:>14} {:>14}  {late:>18}",
            r.case,
            r.deviation_median_us,
            r.deviation_p99_us,
            r.deviation_p99_9_us,
            100.0 * r.gaps_kept_within_2us,
            show(r.adds_median_us),
            show(r.adds_p99_9_us)
        );
    }
    println!("  what bounds the tail: a busy-polling thread on each CPU, measured right after");
    for h in &hiccups {
        println!("    {}", pathem_lab::hiccups::describe(h));
    }
    println!(
        "  a frame due while pathem's CPU is away leaves when it comes back; at 100 kpps a gap of G us delays about G/10 frames"
    );
    println!("  report in {}", args.out.join("target.json").display());
    Ok(())
}
