//! `pathem bench`: reads the flags, runs the lab's rounds (`pathem_lab::rounds`: every
//! variant once per round, back to back; medians and ratios within rounds) and prints them.

use crate::usage;
use clap::Args;
use pathem_lab::rounds::{self, Plan};
use pathem_spec::PathSpec;

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

pub fn main(args: BenchArgs) -> anyhow::Result<()> {
    if args.hiccups {
        crate::within("--seconds", args.seconds, 0.001..=3600.0, "above 0, up to 3600")?;
        return crate::hiccups::main(args.seconds, args.json);
    }
    // Rounds print a line each on stderr unless the output is JSON.
    let json = args.json;
    let progress = move |line: String| {
        if !json {
            eprintln!("  {line}");
        }
    };
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
        return live(&args, progress);
    }
    crate::within("--packets", args.packets, 1..=1_000_000_000_000, "1 to 10^12")?;
    crate::within("--runs", args.runs, 1..=1000, "1 to 1000")?;
    crate::within("--size", args.size, 14..=65_536, "14 to 65536 bytes")?;
    if let Some(cpu) = args.core {
        pathem_runtime::link::pin(cpu).map_err(|e| usage(format!("--core {cpu}: {e}")))?;
    }
    let path = args.path.to_config().map_err(usage)?;
    let plan = Plan { packets: args.packets, size: args.size, runs: args.runs, seed: args.seed };
    if args.offloads {
        return offloads(&args);
    }
    if args.split {
        let r = rounds::split(&path, plan, progress).map_err(crate::runtime_error)?;
        if json {
            println!("{}", serde_json::to_string(&r)?);
            return Ok(());
        }
        println!(
            "pathem bench --split: {} frames of {} B per run, {} rounds",
            args.packets, args.size, args.runs
        );
        println!("  path            {path}");
        let (m1, m2) = (r.one_thread_ns_per_packet, r.split_ns_per_packet);
        println!("  one thread      {m1:>7.1} ns/frame  {:>7.2} Mpps (median)", 1e3 / m1);
        println!("  split over two  {m2:>7.1} ns/frame  {:>7.2} Mpps (median)", 1e3 / m2);
        println!("  ratio           {:>7.2} (split / one thread, median of paired rounds)", r.ratio);
        return Ok(());
    }
    if args.disciplines {
        if path.link.is_none() {
            return Err(usage(
                "--disciplines needs --rate or --rate-trace: a queue discipline needs a bottleneck",
            ));
        }
        let rows = rounds::disciplines(&path, plan, progress).map_err(crate::runtime_error)?;
        if json {
            let v = serde_json::json!({ "path": path.to_string(), "packets": args.packets, "size": args.size, "disciplines": rows });
            println!("{v}");
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
        return Ok(());
    }
    let r = rounds::engine(&path, plan, progress).map_err(crate::runtime_error)?;
    if json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    println!("pathem bench: {} frames of {} B per run, {} rounds, one thread", r.packets, r.size, r.runs);
    println!("  path      {}", r.path);
    println!("  with path       {:>7.1} ns/frame  {:>7.2} Mpps (median)", r.ns_per_packet, r.mpps);
    println!(
        "  no impairment   {:>7.1} ns/frame  {:>7.2} Mpps (median)",
        r.baseline_ns_per_packet, r.baseline_mpps
    );
    println!(
        "  ratio           {:>7.2} (median of paired rounds; of medians {:.2})",
        r.ratio, r.ratio_of_medians
    );
    println!("  last run: forwarded {}, dropped {}", r.last_run.tx_packets, r.last_run.dropped.describe());
    Ok(())
}

/// `bench --offloads`: the ports' offload work per frame.
fn offloads(args: &BenchArgs) -> anyhow::Result<()> {
    if let Some(&size) = args.sizes.iter().find(|s| !(64..=9000).contains(*s)) {
        return Err(usage(format!("--sizes {size}: accepted: 64 to 9000 bytes with --offloads")));
    }
    let frames = args.packets.min(2_000_000);
    let rows = rounds::offloads(&args.sizes, frames, args.runs);
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

/// `bench --live KINDS`: forwarding rates through the lab's bed, a row per mode.
fn live(args: &BenchArgs, progress: impl FnMut(String)) -> anyhow::Result<()> {
    let json = args.json;
    let print = |row: &rounds::LiveRow| {
        if json {
            return;
        }
        let pct = |r: Option<f64>, of: &str| r.map(|r| format!("  {:>5.1}% of {of}", 100.0 * r));
        println!(
            "{:<9} {:>5} B  {:<9} offered {:>6.3} Mpps  forwarded {:>6.3} Mpps{}{}",
            row.port,
            row.size,
            row.mode,
            row.offered_mpps,
            row.forwarded_mpps,
            pct(row.of_raw, "the raw port loop").unwrap_or_default(),
            pct(row.of_testpmd, "testpmd").unwrap_or_default(),
        );
    };
    let rows = rounds::live(&args.live, &args.sizes, args.seconds, args.runs, args.split, progress, print)
        .map_err(crate::runtime_error)?;
    if json {
        println!("{}", serde_json::to_string(&rows)?);
        return Ok(());
    }
    println!("medians of {} rounds; ratios are taken within each round, then the median", args.runs);
    println!("impaired = delay 1ms, loss 1% (a loss shows as 1% less forwarded), rate 10gbit");
    println!("the generator runs on CPU 0, the forwarder on CPU 1");
    if args.live.iter().any(|k| k.starts_with("dpdk")) {
        println!("testpmd = dpdk-testpmd --forward-mode=io on the same virtual devices (DPDK's own forwarder, no copy)");
    }
    if args.split {
        println!("split = impaired, one way, its input and output stages on CPUs 0 and 1 (the generator shares them)");
    }
    Ok(())
}
