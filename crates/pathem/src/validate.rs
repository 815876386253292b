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
use clap::{Args, Parser};
use pathem_lab::bench::median;
use pathem_lab::testbed::Bed;
use pathem_lab::validate::{self, Case, TargetRun};
use pathem_model::PathConfig;
use pathem_spec::PathSpec;
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

#[derive(Parser, Debug)]
#[command(no_binary_name = true)]
struct Flags {
    #[command(flatten)]
    path: PathSpec,
}

fn config(flags: &str) -> anyhow::Result<PathConfig> {
    let words: Vec<&str> = flags.split_whitespace().collect();
    let f = Flags::try_parse_from(&words)
        .map_err(|e| usage(e.to_string().lines().next().unwrap_or("").to_string()))?;
    f.path.to_config().map_err(usage)
}

pub fn main(args: ValidateArgs) -> anyhow::Result<()> {
    if args.port != "afpacket" && args.port != "afxdp" {
        return Err(usage(format!("--port {}: accepted: afpacket, afxdp", args.port)));
    }
    crate::within("--seconds", args.seconds, 0.1..=3600.0, "0.1 to 3600 (above 0)")?;
    let id = std::process::id();
    let b = Bed::through(&format!("pv{id}")).map_err(usage)?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let secs = if args.quick { args.seconds.min(1.5) } else { args.seconds };

    if args.target {
        return target(&args, &b);
    }
    // The machine's own noise floor: the same probe over a direct veth pair, no pathem.
    let floor = validate::noise_floor(secs, &args.out.join("noise-floor")).map_err(crate::runtime_error)?;

    let mut cases: Vec<(&str, &str, f64, usize, Option<&str>)> = vec![
        ("transparent", "", 10_000.0, 64, None),
        ("constant delay", "--delay 10ms", 10_000.0, 64, None),
        ("random loss", "--loss 1%", 10_000.0, 64, Some("1%")),
        ("rate and queue", "--rate 20mbit --queue 100pkt", 4_000.0, 1000, None),
    ];
    if !args.quick {
        cases.extend([
            ("normal jitter", "--delay 10ms --jitter 2ms --delay-dist normal --reorder", 5_000.0, 64, None),
            ("correlated delay", "--delay 10ms --jitter 2ms --delay-dist normal --delay-half-life 5ms --reorder", 5_000.0, 64, None),
            ("Gilbert-Elliott loss", "--loss ge:loss=2%,burst=4", 10_000.0, 64, Some("ge:loss=2%,burst=4")),
            ("4-state loss", "--loss gi:p13=1%,p31=50%", 10_000.0, 64, None),
            ("policer", "--police 10mbit,burst=20KB", 2_000.0, 1000, None),
            ("combined", "--delay 20ms --jitter 1ms --delay-dist normal --reorder --loss 1% --rate 50mbit --queue 300pkt", 3_000.0, 500, Some("1%")),
        ]);
    }
    let mut reports = Vec::new();
    let mut base: Option<(f64, f64)> = None;
    println!("pathem validate: {} ports, {secs} s per path; figures in {}", args.port, args.out.display());
    println!(
        "  noise floor (direct veth, no pathem): deviation median {:.1} p99.9 {:.1} us, gaps kept {:.1}%",
        floor.deviation_us.median,
        floor.deviation_us.p99_9,
        100.0 * floor.gaps_kept_within_2us
    );
    for (name, flags, pps, size, expect_loss) in cases {
        let case = Case {
            name: name.into(),
            flags: flags.into(),
            path: config(flags)?,
            pps,
            size,
            expect_loss: expect_loss.map(|l| l.parse()).transpose()?,
        };
        let dir = args.out.join(name.replace(' ', "-"));
        let report =
            validate::run_case(&b, &args.port, &case, secs, base, &dir).map_err(crate::runtime_error)?;
        let (s, checks) = (&report.summary, &report.checks);
        if case.path.is_transparent() {
            base = Some((s.delay_us.mean, s.delay_std_us));
        }
        println!("  {name} [{}]", if flags.is_empty() { "no impairment" } else { flags });
        println!(
            "    deviation median {:.1} p99 {:.1} p99.9 {:.1} us (pathem adds {:.1} us at p99.9 above the floor); gaps kept {:.1}%",
            s.deviation_us.median,
            s.deviation_us.p99,
            s.deviation_us.p99_9,
            s.deviation_us.p99_9 - floor.deviation_us.p99_9,
            100.0 * s.gaps_kept_within_2us
        );
        for c in checks {
            println!(
                "    {:<4} {:<26} configured {:>10.4}  observed {:>10.4}  ({})",
                if c.pass { "pass" } else { "FAIL" },
                c.what,
                c.configured,
                c.observed,
                c.tolerance
            );
        }
        reports.push(report);
    }

    // TCP through delay and loss, against Mathis et al.
    let tcp = match args.quick {
        true => None,
        false => {
            let t = validate::tcp_vs_mathis(&b, &args.port, secs).map_err(crate::runtime_error)?;
            let (g, m) = (t["goodput_bps"].as_f64().unwrap_or(0.0), t["mathis_bps"].as_f64().unwrap_or(1.0));
            println!(
                "  TCP Reno through --delay 10ms --loss 0.5%: goodput {:.2} Mbit/s, Mathis estimate MSS/RTT·1.22/√p = {:.2} Mbit/s (ratio {:.2})",
                g / 1e6,
                m / 1e6,
                g / m
            );
            Some(t)
        }
    };
    let all_pass = reports.iter().all(|r| r.checks.iter().all(|c| c.pass));
    let json = serde_json::json!({ "port": args.port, "noise_floor": floor, "cases": reports, "tcp": tcp, "all_pass": all_pass });
    let file = args.out.join("validate.json");
    std::fs::write(&file, serde_json::to_string_pretty(&json)? + "\n")?;
    println!(
        "  {} — report in {}",
        if all_pass { "all checks passed" } else { "SOME CHECKS FAILED" },
        file.display()
    );
    if !all_pass {
        anyhow::bail!("some checks failed (see {})", file.display());
    }
    Ok(())
}

/// The latency benchmark: 100 kpps of 64-byte frames through 10 ms, CBR and in bursts of 10
/// every 100 µs, through each port type and over a direct veth pair (the floor) in the same
/// run, three times; then the machine's hiccups, which bound the tail.
fn target(args: &ValidateArgs, b: &Bed) -> anyhow::Result<()> {
    const RUNS: usize = 3;
    let direct = Bed::direct(&format!("pvd{}", std::process::id())).map_err(usage)?;
    let secs = args.seconds;
    let patterns = validate::TARGET_PATTERNS;
    let cpus = validate::cpus;
    println!(
        "pathem validate --target: 100 kpps of 64-byte frames, {secs} s per run, {RUNS} runs; pathem on CPU {}, probe on CPU {}",
        cpus().map_or(0, |c| c.1),
        cpus().map_or(0, |c| c.0)
    );
    let mut runs: Vec<TargetRun> = Vec::new();
    for run in 0..RUNS {
        runs.extend(validate::target_round(b, &direct, run, secs, &args.out).map_err(crate::runtime_error)?);
        eprintln!("pathem validate: run {} of {RUNS} done", run + 1);
    }
    let of = |case: &str, f: &dyn Fn(&TargetRun) -> f64| -> f64 {
        median(&runs.iter().filter(|r| r.case == case).map(f).collect::<Vec<_>>())
    };
    // What pathem adds: its run minus the direct run of the same pattern in the same round.
    let adds = |case: &str, pname: &str, f: &dyn Fn(&TargetRun) -> f64| -> f64 {
        median(
            &(0..RUNS)
                .filter_map(|i| {
                    let at = |c: &str| runs.iter().find(|r| r.case == c && r.run == i);
                    Some(f(at(case)?) - f(at(&format!("direct {pname}"))?))
                })
                .collect::<Vec<_>>(),
        )
    };
    println!("  medians over {RUNS} runs; deviation from the configured delay (direct: from 0), us");
    println!(
        "  {:<18} {:>8} {:>8} {:>10} {:>11}  {:>14} {:>14}  {:>18}",
        "", "median", "p99", "p99.9", "gaps ±2us", "adds: median", "adds: p99.9", "pathem late p50/p99.9"
    );
    for (pname, _) in patterns {
        for kind in ["direct", "afxdp", "afpacket"] {
            let case = format!("{kind} {pname}");
            let (m, p99, p999, gaps) = (
                of(&case, &|r| r.deviation_median_us),
                of(&case, &|r| r.deviation_p99_us),
                of(&case, &|r| r.deviation_p99_9_us),
                of(&case, &|r| r.gaps_kept_within_2us),
            );
            let (adds_m, adds_t, late) = if kind == "direct" {
                (String::new(), String::new(), String::new())
            } else {
                (
                    format!("{:+.1}", adds(&case, pname, &|r| r.deviation_median_us)),
                    format!("{:+.1}", adds(&case, pname, &|r| r.deviation_p99_9_us)),
                    format!(
                        "{:.1}/{:.1}",
                        of(&case, &|r| r.late_p50_us.unwrap_or(f64::NAN)),
                        of(&case, &|r| r.late_p99_9_us.unwrap_or(f64::NAN))
                    ),
                )
            };
            println!(
                "  {case:<18} {m:>8.1} {p99:>8.1} {p999:>10.1} {:>10.2}%  {adds_m:>14} {adds_t:>14}  {late:>18}",
                100.0 * gaps
            );
        }
    }
    let hiccups = pathem_lab::hiccups::measure(secs.min(5.0));
    println!("  what bounds the tail: a busy-polling thread on each CPU, measured right after");
    for h in &hiccups {
        println!("    {}", pathem_lab::hiccups::describe(h));
    }
    println!(
        "  a frame due while pathem's CPU is away leaves when it comes back; at 100 kpps a gap of G us delays about G/10 frames"
    );
    let json = serde_json::json!({ "target": runs, "hiccups": hiccups });
    let file = args.out.join("target.json");
    std::fs::write(&file, serde_json::to_string_pretty(&json)? + "\n")?;
    println!("  report in {}", file.display());
    Ok(())
}
