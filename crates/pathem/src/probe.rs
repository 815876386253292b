//! `pathem probe`: measure what a path does, with timestamped UDP datagrams.
//!
//! `send` and `recv` run the two ends separately; `pair` runs both on one host (optionally in
//! two network namespaces), so both ends read the same clock (CLOCK_MONOTONIC) and one-way
//! delays are exact. The receiver uses the kernel's receive timestamps.

use crate::usage;
use anyhow::Context;
use clap::{Args, Subcommand};
use pathem_io::udp::TimestampedUdp;
use pathem_model::loss::LossConfig;
use pathem_model::units::Duration;
pub use pathem_probe::session::ProbeRate;
use pathem_probe::session::{self, Plan};
use pathem_probe::{analyse, plot, Pattern, Summary};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct SendOpts {
    /// Sending pattern: cbr, poisson, or burst:N,every=DUR.
    #[arg(long, value_name = "PATTERN", default_value = "cbr")]
    pub pattern: Pattern,
    /// Mean rate: 1000pps, 100kpps, or bits per second of frames (10mbit).
    #[arg(long, value_name = "RATE", default_value = "1000pps")]
    pub rate: ProbeRate,
    /// Frame size on the wire in bytes (Ethernet + IPv4 + UDP + payload), 62 to 1514.
    #[arg(long, value_name = "BYTES", default_value_t = 64)]
    pub size: usize,
    /// Datagrams to send.
    #[arg(long, value_name = "N", conflicts_with = "duration")]
    pub count: Option<u64>,
    /// Or: send for this long.
    #[arg(long, value_name = "DUR")]
    pub duration: Option<Duration>,
    /// Seed of the Poisson pattern.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
}

#[derive(Args, Debug, Clone)]
pub struct RecvOpts {
    /// The delay the path should add; deviations are measured from it.
    #[arg(long, value_name = "DUR", default_value = "0ns")]
    pub expect_delay: Duration,
    /// The loss model the path should apply, to draw its loss-burst CDF next to the measured one.
    #[arg(long, value_name = "SPEC")]
    pub expect_loss: Option<LossConfig>,
    /// Write the summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the figures (SVG) into DIR.
    #[arg(long, value_name = "DIR")]
    pub figures: Option<PathBuf>,
    /// Give up when nothing arrives for this long.
    #[arg(long, value_name = "DUR", default_value = "5s")]
    pub idle: Duration,
    /// Print nothing (callers that report on their own).
    #[arg(skip)]
    pub quiet: bool,
}

#[derive(Subcommand, Debug)]
pub enum ProbeCommand {
    /// Send timestamped datagrams to a receiver.
    Send {
        /// Receiver address, IP:PORT.
        #[arg(long, value_name = "IP:PORT")]
        to: SocketAddr,
        #[command(flatten)]
        send: SendOpts,
    },
    /// Receive datagrams and report what the path did.
    Recv {
        /// Address to listen on, IP:PORT.
        #[arg(long, value_name = "IP:PORT")]
        listen: SocketAddr,
        #[command(flatten)]
        recv: RecvOpts,
    },
    /// Both ends at once on this host, optionally in two network namespaces.
    Pair {
        /// Receiver address, IP:PORT (the receiver listens on it).
        #[arg(long, value_name = "IP:PORT")]
        to: SocketAddr,
        /// Network namespace of the sender.
        #[arg(long, value_name = "NS")]
        send_netns: Option<String>,
        /// Network namespace of the receiver.
        #[arg(long, value_name = "NS")]
        recv_netns: Option<String>,
        /// Run both ends on this CPU (leaving the others to the path under test).
        #[arg(long, value_name = "CPU")]
        cpu: Option<usize>,
        #[command(flatten)]
        send: SendOpts,
        #[command(flatten)]
        recv: RecvOpts,
    },
}

#[derive(Args, Debug)]
pub struct ProbeArgs {
    #[command(subcommand)]
    pub command: ProbeCommand,
}

/// The sender's plan from its flags; a bad one is a usage error.
fn plan(o: &SendOpts) -> anyhow::Result<Plan> {
    Plan::new(o.pattern, o.rate, o.size, o.count, o.duration.map(|d| d.0), o.seed).map_err(usage)
}

/// Receives, analyses and reports; returns the summary.
pub fn do_recv(sock: &TimestampedUdp, o: &RecvOpts, announced: Option<u64>) -> anyhow::Result<Summary> {
    let idle = std::time::Duration::from_nanos(o.idle.0.as_nanos());
    let (samples, total) = session::receive(sock, idle, !o.quiet).context("receiving")?;
    analyse_and_report(samples, total.or(announced), o)
}

fn analyse_and_report(
    samples: Vec<pathem_probe::Sample>,
    total: Option<u64>,
    o: &RecvOpts,
) -> anyhow::Result<Summary> {
    let sent = total.unwrap_or_else(|| samples.iter().map(|s| s.seq + 1).max().unwrap_or(0));
    if samples.is_empty() {
        return Err(anyhow::anyhow!(
            "no probe datagram arrived within {} (is the sender running, and the path up?)",
            o.idle.0
        ));
    }
    let (summary, series) = analyse(&samples, sent, o.expect_delay.0);
    if !o.quiet {
        print_summary(&summary, o.expect_loss.as_ref());
    }
    if let Some(p) = &o.json {
        let json = serde_json::json!({ "summary": summary, "expected_loss_rate": o.expect_loss.as_ref().map(|l| l.loss_rate()) });
        std::fs::write(p, serde_json::to_string_pretty(&json)? + "\n")
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    if let Some(dir) = &o.figures {
        let th = o.expect_loss.as_ref().and_then(session::theory);
        let files = plot::all(&series, th.as_deref(), dir, "").map_err(|e| anyhow::anyhow!(e))?;
        for f in files.iter().filter(|_| !o.quiet) {
            println!("  figure     {}", f.display());
        }
    }
    Ok(summary)
}

fn print_summary(s: &Summary, expect_loss: Option<&LossConfig>) {
    println!(
        "pathem probe: {} sent, {} received, {} lost ({:.4}%)",
        s.sent,
        s.received,
        s.lost,
        100.0 * s.loss_rate
    );
    if let Some(l) = expect_loss {
        println!(
            "  loss       expected {:.4}%, loss bursts {} (mean {:.2})",
            100.0 * l.loss_rate(),
            s.loss_bursts,
            s.mean_loss_burst
        );
    } else if s.lost > 0 {
        println!("  loss       bursts {} (mean {:.2})", s.loss_bursts, s.mean_loss_burst);
    }
    let d = &s.delay_us;
    println!(
        "  delay      min {:.1} median {:.1} mean {:.1} p99 {:.1} max {:.1} us",
        d.min, d.median, d.mean, d.p99, d.max
    );
    let v = &s.deviation_us;
    println!(
        "  deviation  from {:.1} us: median {:.1} p99 {:.1} p99.9 {:.1} p99.99 {:.1} max {:.1} us",
        s.expected_delay_us, v.median, v.p99, v.p99_9, v.p99_99, v.max
    );
    println!(
        "  gaps       sent median {:.1} us, received median {:.1} us; {:.2}% kept within ±2 us",
        s.sender_gap_us.median,
        s.receiver_gap_us.median,
        100.0 * s.gaps_kept_within_2us
    );
    println!(
        "  reordered  {}, duplicates {}, throughput {:.3} Mbit/s {:.0} pps",
        s.reordered,
        s.duplicates,
        s.throughput_bps / 1e6,
        s.throughput_pps
    );
}

/// Runs a sender and a receiver on this host; returns the receiver's summary.
pub fn pair(
    to: SocketAddr,
    send_ns: Option<String>,
    recv_ns: Option<String>,
    cpu: Option<usize>,
    s: &SendOpts,
    r: &RecvOpts,
) -> anyhow::Result<Summary> {
    let plan = plan(s)?;
    let idle = std::time::Duration::from_nanos(r.idle.0.as_nanos());
    let (samples, total) =
        session::pair(to, send_ns, recv_ns, cpu, &plan, idle).map_err(anyhow::Error::msg)?;
    analyse_and_report(samples, Some(total), r)
}

/// The receiver's settings against their documented ranges.
fn check_recv(r: &RecvOpts) -> anyhow::Result<()> {
    use pathem_model::Nanos;
    crate::within("--expect-delay", r.expect_delay.0, Nanos::ZERO..=Nanos::from_secs(3600), "0ns to 1h")?;
    crate::within("--idle", r.idle.0, Nanos::from_millis(1)..=Nanos::from_secs(3600), "1ms to 1h")
}

pub fn main(args: ProbeArgs) -> anyhow::Result<()> {
    if let ProbeCommand::Recv { recv, .. } | ProbeCommand::Pair { recv, .. } = &args.command {
        check_recv(recv)?;
    }
    match args.command {
        ProbeCommand::Send { to, send } => {
            let sock = UdpSocket::bind(("0.0.0.0", 0)).context("cannot bind the sender")?;
            let n = session::send(&sock, to, &plan(&send)?).context("sending")?.len();
            eprintln!("pathem probe: sent {n} datagrams to {to}");
        }
        ProbeCommand::Recv { listen, recv } => {
            let sock = TimestampedUdp::bind(listen).map_err(usage)?;
            do_recv(&sock, &recv, None)?;
        }
        ProbeCommand::Pair { to, send_netns, recv_netns, cpu, send, recv } => {
            pair(to, send_netns, recv_netns, cpu, &send, &recv)?;
        }
    }
    Ok(())
}
