//! `pathem bench`: the engine alone, synthetic frames in and out of memory, real clock.
//!
//! Each round runs the configured path and, right after, the same frames with no impairment,
//! so the two are compared on the same machine in the same state; the medians over the rounds
//! are reported with their ratio. The time counted is busy time: the wall time of a run minus
//! the time the engine slept waiting for the last delayed frames to fall due.

use crate::usage;
use clap::Args;
use pathem_engine::Stats;
pub use pathem_lab::bench::median;
use pathem_lab::bench::{engine_alone, engine_split};
use pathem_model::PathConfig;
use pathem_spec::PathSpec;
use serde::Serialize;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub path: PathSpec,
    /// Frames per run.
    #[arg(long, value_name = "N", default_value_t = 10_000_000)]
    pub packets: u64,
    /// Frame size in bytes (without FCS).
    #[arg(long, value_name = "BYTES", default_value_t = 64)]
    pub size: usize,
    /// Rounds; each round runs the path and the no-impairment baseline once (with --live:
    /// every mode once).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub runs: usize,
    /// Pin the benchmark thread to this CPU.
    #[arg(long, value_name = "CPU")]
    pub core: Option<usize>,
    /// Seed of the random models.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Run the direction's input and output stages on two threads (CPUs 0 and 1), and compare
    /// with the same path on one thread in the same round (with --live: as `run --one-way
    /// --cores 0,1` does).
    #[arg(long, conflicts_with = "hiccups")]
    pub split: bool,
    /// Measure the path (it needs a rate) with each queue discipline in turn, every round:
    /// drop-tail, drop-head, RED, CoDel, FQ-CoDel, PIE and DualPI2 with their defaults, each
    /// one's cost per frame and its ratio to drop-tail in the same round.
    #[arg(long, conflicts_with_all = ["split", "live", "hiccups"])]
    pub disciplines: bool,
    /// Measure what the ports do to frames a local sender left to the hardware, per frame at
    /// each of --sizes, next to the copy every frame costs anyway: the pseudo-header check
    /// every AF_XDP and DPDK frame pays, completing a partial checksum, cutting a 64 KB
    /// super-frame.
    #[arg(long, conflicts_with_all = ["split", "live", "hiccups", "disciplines"])]
    pub offloads: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Measure live forwarding instead, on a veth path in namespaces made for it, through
    /// these port types (afpacket, afxdp, dpdk; comma-separated; dpdk is also measured with
    /// dpdk-testpmd, and needs --features dpdk). Needs root.
    #[arg(long, value_name = "KINDS", value_delimiter = ',')]
    pub live: Vec<String>,
    /// With --live: frame sizes to measure.
    #[arg(long, value_name = "BYTES", value_delimiter = ',', default_value = "64,1500")]
    pub sizes: Vec<usize>,
    /// Measure this machine instead: how often and for how long a busy-polling thread on each
    /// CPU loses its CPU (the floor of any software emulator's timing precision here).
    #[arg(long, conflicts_with = "live")]
    pub hiccups: bool,
    /// With --live or --hiccups: seconds per run.
    #[arg(long, value_name = "S", default_value_t = 3.0)]
    pub seconds: f64,
}

#[derive(Serialize, Debug)]
struct BenchReport {
    packets: u64,
    size: usize,
    runs: usize,
    path: String,
    mpps: f64,
    ns_per_packet: f64,
    baseline_mpps: f64,
    baseline_ns_per_packet: f64,
    /// Median over rounds of (cost with the path / cost without it in the same round): pairs
    /// runs made back to back, so the machine's slow swings cancel out.
    ratio: f64,
    /// Median cost with the path over median cost without it.
    ratio_of_medians: f64,
    ns_per_packet_runs: Vec<f64>,
    baseline_ns_per_packet_runs: Vec<f64>,
    last_run: Stats,
}

/// One run of the engine alone on one thread.
fn measure(path: &PathConfig, args: &BenchArgs) -> anyhow::Result<(f64, Stats)> {
    engine_alone(path, args.packets, args.size, args.seed).map_err(crate::runtime_error)
}

/// One run with the engine split over CPUs 0 and 1.
fn measure_split(path: &PathConfig, args: &BenchArgs) -> anyhow::Result<(f64, Stats)> {
    engine_split(path, args.packets, args.size, args.seed).map_err(crate::runtime_error)
}

pub fn main(args: BenchArgs) -> anyhow::Result<()> {
    if args.hiccups {
        crate::within("--seconds", args.seconds, 0.001..=3600.0, "above 0, up to 3600")?;
        return crate::hiccups::main(args.seconds, args.json);
    }
    if !args.live.is_empty() {
        for k in &args.live {
            pathem_lab::testbed::bed_ports(k)
                .map_err(|_| usage(format!("--live {k}: accepted: {}", pathem_lab::testbed::PORT_KINDS)))?;
        }
        if args.sizes.iter().any(|&s| !(60..=1514).contains(&s)) {
            return Err(usage("--sizes: accepted: frame sizes from 60 to 1514 bytes"));
        }
        crate::within("--seconds", args.seconds, 0.001..=3600.0, "above 0, up to 3600")?;
        crate::within("--runs", args.runs, 1..=1000, "1 to 1000")?;
        return crate::bench_live::main(
            &args.live,
            &args.sizes,
            args.seconds,
            args.runs,
            args.split,
            args.json,
        );
    }
    crate::within("--packets", args.packets, 1..=1_000_000_000_000, "1 to 10^12")?;
    crate::within("--runs", args.runs, 1..=1000, "1 to 1000")?;
    crate::within("--size", args.size, 14..=65_536, "14 to 65536 bytes")?;
    if let Some(cpu) = args.core {
        let mut set = nix::sched::CpuSet::new();
        set.set(cpu).map_err(|_| usage(format!("--core {cpu}: no such CPU")))?;
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
            .map_err(|e| usage(format!("--core {cpu}: cannot pin to it ({e})")))?;
    }
    let path = args.path.to_config().map_err(usage)?;
    if args.split {
        return split(&path, &args);
    }
    if args.offloads {
        return offloads(&args);
    }
    if args.disciplines {
        return disciplines(&path, &args);
    }
    let baseline = PathConfig::default();
    let mut with = Vec::new();
    let mut without = Vec::new();
    let mut last = Stats::default();
    for round in 0..args.runs {
        let (ns, stats) = measure(&path, &args)?;
        with.push(ns);
        last = stats;
        without.push(measure(&baseline, &args)?.0);
        if !args.json {
            eprintln!(
                "  round {}: {:.1} ns/frame with the path, {:.1} without",
                round + 1,
                with[round],
                without[round]
            );
        }
    }
    let (m, b) = (median(&with), median(&without));
    let report = BenchReport {
        packets: args.packets,
        size: args.size,
        runs: args.runs,
        path: path.to_string(),
        mpps: 1e3 / m,
        ns_per_packet: m,
        baseline_mpps: 1e3 / b,
        baseline_ns_per_packet: b,
        ratio: median(&with.iter().zip(&without).map(|(w, b)| w / b).collect::<Vec<_>>()),
        ratio_of_medians: m / b,
        ns_per_packet_runs: with,
        baseline_ns_per_packet_runs: without,
        last_run: last,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "pathem bench: {} frames of {} B per run, {} rounds, one thread",
            report.packets, report.size, report.runs
        );
        println!("  path      {}", report.path);
        println!(
            "  with path       {:>7.1} ns/frame  {:>7.2} Mpps (median)",
            report.ns_per_packet, report.mpps
        );
        println!(
            "  no impairment   {:>7.1} ns/frame  {:>7.2} Mpps (median)",
            report.baseline_ns_per_packet, report.baseline_mpps
        );
        println!(
            "  ratio           {:>7.2} (median of paired rounds; of medians {:.2})",
            report.ratio, report.ratio_of_medians
        );
        let d = &report.last_run.dropped;
        println!(
            "  last run: forwarded {}, dropped loss {} queue {} delay_line {}",
            report.last_run.tx_packets, d.loss, d.queue, d.delay_line
        );
    }
    Ok(())
}

/// One queue discipline as `bench --disciplines` measured it.
#[derive(Serialize, Debug)]
struct DisciplineCost {
    aqm: &'static str,
    ns_per_packet: f64,
    /// Median over rounds of its cost over drop-tail's in the same round.
    ratio_to_droptail: f64,
    runs: Vec<f64>,
    last_run_tx: u64,
    last_run_dropped: u64,
}

/// `bench --disciplines`: the path with each queue discipline (drop-tail first), every round,
/// as ratios to drop-tail in the same round.
fn disciplines(path: &PathConfig, args: &BenchArgs) -> anyhow::Result<()> {
    use pathem_model::aqm::AqmConfig;
    if path.link.is_none() {
        return Err(usage(
            "--disciplines needs --rate or --rate-trace: a queue discipline needs a bottleneck",
        ));
    }
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); AqmConfig::KINDS.len()];
    let mut last = Vec::new();
    for round in 0..args.runs {
        last.clear();
        for (k, kind) in AqmConfig::KINDS.iter().enumerate() {
            let aqm = kind.parse().map_err(usage)?;
            let (cost, stats) = measure(&PathConfig { aqm, ..path.clone() }, args)?;
            ns[k].push(cost);
            last.push(stats);
        }
        if !args.json {
            let each: Vec<String> =
                AqmConfig::KINDS.iter().zip(&ns).map(|(k, v)| format!("{k} {:.1}", v[round])).collect();
            eprintln!("  round {}: ns/frame {}", round + 1, each.join(", "));
        }
    }
    let rows: Vec<DisciplineCost> = AqmConfig::KINDS
        .iter()
        .zip(&ns)
        .zip(&last)
        .map(|((&aqm, v), stats)| DisciplineCost {
            aqm,
            ns_per_packet: median(v),
            ratio_to_droptail: median(&v.iter().zip(&ns[0]).map(|(a, b)| a / b).collect::<Vec<_>>()),
            runs: v.clone(),
            last_run_tx: stats.tx_packets,
            last_run_dropped: stats.dropped.total(),
        })
        .collect();
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "path": path.to_string(), "packets": args.packets, "size": args.size, "disciplines": rows })
        );
        return Ok(());
    }
    println!(
        "pathem bench --disciplines: {} frames of {} B per run, {} rounds, one thread",
        args.packets, args.size, args.runs
    );
    println!("  path  {path}");
    println!("  {:>9}  {:>9}  {:>8}  {:>10}  {:>10}", "aqm", "ns/frame", "ratio", "sent", "dropped");
    for r in &rows {
        println!(
            "  {:>9}  {:>9.1}  {:>8.2}  {:>10}  {:>10}",
            r.aqm, r.ns_per_packet, r.ratio_to_droptail, r.last_run_tx, r.last_run_dropped
        );
    }
    println!("  (medians; ratio: median over rounds of the cost over drop-tail's in the same round)");
    Ok(())
}

/// `bench --offloads`: the ports' offload work per frame, medians over the rounds.
fn offloads(args: &BenchArgs) -> anyhow::Result<()> {
    if let Some(cpu) = args.core {
        pathem_io::host::pin_to_cpu(cpu).map_err(|e| anyhow::anyhow!(e))?;
    }
    let frames = args.packets.min(2_000_000);
    let mut rows = Vec::new();
    for &size in &args.sizes {
        if !(64..=9000).contains(&size) {
            return Err(usage(format!("--sizes {size}: accepted: 64 to 9000 bytes with --offloads")));
        }
        let runs: Vec<_> =
            (0..args.runs.max(1)).map(|_| pathem_lab::bench::offload_costs(size, frames)).collect();
        let m =
            |f: fn(&pathem_lab::bench::OffloadCosts) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        rows.push(pathem_lab::bench::OffloadCosts {
            size,
            copy_ns: m(|r| r.copy_ns),
            check_ns: m(|r| r.check_ns),
            complete_ns: m(|r| r.complete_ns),
            segment_ns: m(|r| r.segment_ns),
        });
    }
    if args.json {
        println!("{}", serde_json::json!({ "frames": frames, "runs": args.runs, "offloads": rows }));
        return Ok(());
    }
    println!(
        "pathem bench --offloads: {frames} frames per measure, {} rounds, medians, ns per frame",
        args.runs
    );
    println!(
        "  {:>6}  {:>10}  {:>16}  {:>18}  {:>16}",
        "size", "copy (old)", "+ checksum rule", "+ complete partial", "cut from 64 KB"
    );
    for r in rows {
        println!(
            "  {:>4} B  {:>10.1}  {:>16.1}  {:>18.1}  {:>16.1}",
            r.size, r.copy_ns, r.check_ns, r.complete_ns, r.segment_ns
        );
    }
    Ok(())
}

/// `bench --split`: the path on one thread and split over two, alternating, same round.
fn split(path: &PathConfig, args: &BenchArgs) -> anyhow::Result<()> {
    if std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) < 2 {
        return Err(usage("--split needs two CPUs"));
    }
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for round in 0..args.runs {
        pathem_runtime::link::pin(0).map_err(usage)?;
        one.push(measure(path, args)?.0);
        let (ns, stats) = measure_split(path, args)?;
        two.push(ns);
        if stats.tx_packets + stats.dropped.total() != args.packets {
            anyhow::bail!("split run lost track of frames: {stats:?}");
        }
        if !args.json {
            eprintln!(
                "  round {}: {:.1} ns/frame on one thread, {:.1} split over two",
                round + 1,
                one[round],
                two[round]
            );
        }
    }
    let (m1, m2) = (median(&one), median(&two));
    let ratio = median(&one.iter().zip(&two).map(|(a, b)| b / a).collect::<Vec<_>>());
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "path": path.to_string(), "one_thread_ns_per_packet": m1, "split_ns_per_packet": m2,
                "one_thread_runs": one, "split_runs": two, "ratio": ratio })
        );
    } else {
        println!(
            "pathem bench --split: {} frames of {} B per run, {} rounds",
            args.packets, args.size, args.runs
        );
        println!("  path            {path}");
        println!("  one thread      {m1:>7.1} ns/frame  {:>7.2} Mpps (median)", 1e3 / m1);
        println!("  split over two  {m2:>7.1} ns/frame  {:>7.2} Mpps (median)", 1e3 / m2);
        println!("  ratio           {ratio:>7.2} (split / one thread, median of paired rounds)");
    }
    Ok(())
}
