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
use pathem_model::units::{Duration, Rate, UnitError};
use pathem_probe::{analyse, net, plot, Pattern, Schedule, Summary};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::str::FromStr;

/// Bytes of Ethernet, IPv4 and UDP headers around the probe's payload.
const HEADERS: usize = 42;

/// `--rate`: datagrams per second (`100kpps`) or bits per second of frames (`10mbit`).
#[derive(Clone, Copy, Debug)]
pub enum ProbeRate {
    Pps(f64),
    Bits(Rate),
}

impl FromStr for ProbeRate {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let t = s.trim().to_ascii_lowercase();
        if let Some(n) = t.strip_suffix("pps") {
            let (num, scale) = match n.strip_suffix('k') {
                Some(k) => (k, 1e3),
                None => match n.strip_suffix('m') {
                    Some(m) => (m, 1e6),
                    None => (n, 1.0),
                },
            };
            return match num.parse::<f64>() {
                Ok(v) if v > 0.0 && v.is_finite() => Ok(ProbeRate::Pps(v * scale)),
                _ => Err(UnitError {
                    value: s.into(),
                    reason: "is not a rate above 0".into(),
                    accepted: "datagrams per second like 1000pps, 100kpps, or a bit rate like 10mbit",
                }),
            };
        }
        s.parse::<Rate>().map(ProbeRate::Bits).map_err(|e| UnitError {
            accepted: "datagrams per second like 1000pps, 100kpps, or a bit rate like 10mbit",
            ..e
        })
    }
}

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

/// Most datagrams one probe sends: a day at 100 kpps is 8.6 · 10^9.
const MAX_COUNT: u64 = 10_000_000_000;

/// Datagrams per second and the count to send.
fn plan(o: &SendOpts) -> anyhow::Result<(f64, u64)> {
    if !(HEADERS + pathem_probe::packet::HEADER..=1514).contains(&o.size) {
        return Err(usage(format!("--size {}: accepted: 62 to 1514 bytes (frame on the wire)", o.size)));
    }
    let pps = match (o.rate, o.pattern) {
        (_, Pattern::Burst { n, every }) => f64::from(n) * 1e9 / every.as_nanos() as f64,
        (ProbeRate::Pps(p), _) => p,
        (ProbeRate::Bits(r), _) => r.bits_per_sec() as f64 / (o.size as f64 * 8.0),
    };
    let count = match (o.count, o.duration) {
        (Some(n), _) if n == 0 || n > MAX_COUNT => {
            return Err(usage(format!("--count {n}: accepted: 1 to {MAX_COUNT} datagrams")))
        }
        (Some(n), _) => n,
        (None, Some(d)) if d.0 > pathem_model::Nanos::from_secs(86_400) => {
            return Err(usage(format!("--duration {}: accepted: up to 1 day (86400s)", d.0)))
        }
        (None, Some(d)) => ((d.0.as_secs_f64() * pps).ceil() as u64).max(1),
        (None, None) => (pps * 5.0).ceil() as u64,
    };
    Ok((pps, count))
}

/// Sends; returns the kernel transmit timestamps by sequence number (where given).
fn do_send(
    sock: &UdpSocket,
    to: SocketAddr,
    o: &SendOpts,
) -> anyhow::Result<Vec<Option<pathem_model::Nanos>>> {
    let (pps, count) = plan(o)?;
    let schedule = Schedule::new(o.pattern, pps, o.seed);
    let progress = count as f64 / pps > 3.0;
    net::send(sock, to, o.size - HEADERS, count, schedule, progress).context("sending")
}

fn theory(model: &LossConfig) -> Option<Box<dyn Fn(u64) -> f64>> {
    match *model {
        // A burst continues while each next frame is lost too.
        LossConfig::Random(p) => {
            let p = p.get();
            Some(Box::new(move |k| 1.0 - p.powi(k as i32)))
        }
        LossConfig::GilbertElliott { r, loss_bad, loss_good, .. }
            if loss_bad.get() == 1.0 && loss_good.get() == 0.0 =>
        {
            let r = r.get();
            Some(Box::new(move |k| 1.0 - (1.0 - r).powi(k as i32)))
        }
        _ => None,
    }
}

/// Receives, analyses and reports; returns the summary.
pub fn do_recv(sock: &TimestampedUdp, o: &RecvOpts, announced: Option<u64>) -> anyhow::Result<Summary> {
    let idle = std::time::Duration::from_nanos(o.idle.0.as_nanos());
    let (samples, total) =
        net::receive(sock, std::time::Duration::from_millis(300), idle, !o.quiet).context("receiving")?;
    analyse_and_report(samples, total.or(announced), o)
}

/// With both ends on one host: the kernel's transmit timestamps replace the sender's own.
fn with_tx_stamps(
    mut samples: Vec<pathem_probe::Sample>,
    tx: &[Option<pathem_model::Nanos>],
) -> Vec<pathem_probe::Sample> {
    for s in &mut samples {
        if let Some(Some(t)) = tx.get(s.seq as usize) {
            s.sent = *t;
        }
    }
    samples
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
        let th = o.expect_loss.as_ref().and_then(theory);
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

fn enter(ns: &Option<String>) -> anyhow::Result<()> {
    ns.as_deref().map_or(Ok(()), |n| pathem_runtime::testbed::enter(n).map_err(usage))
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
    let (_, count) = plan(s)?;
    let pin = move || cpu.map_or(Ok(()), crate::run::pin);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let r2 = r.clone();
    let receiver = std::thread::spawn(move || -> anyhow::Result<(Vec<pathem_probe::Sample>, Option<u64>)> {
        enter(&recv_ns)?;
        pin()?;
        let sock = TimestampedUdp::bind(to)?;
        let _ = ready_tx.send(());
        let idle = std::time::Duration::from_nanos(r2.idle.0.as_nanos());
        let (samples, total) =
            net::receive(&sock, std::time::Duration::from_millis(300), idle, false).context("receiving")?;
        Ok((samples, total.or(Some(count))))
    });
    if ready_rx.recv().is_err() {
        receiver.join().map_err(|_| anyhow::anyhow!("receiver panicked"))??;
        anyhow::bail!("the receiver stopped before the sender started");
    }
    let s2 = s.clone();
    let sender = std::thread::spawn(move || -> anyhow::Result<Vec<Option<pathem_model::Nanos>>> {
        enter(&send_ns)?;
        pin()?;
        let sock = UdpSocket::bind(("0.0.0.0", 0)).context("cannot bind the sender")?;
        do_send(&sock, to, &s2)
    });
    let tx = sender.join().map_err(|_| anyhow::anyhow!("sender panicked"))??;
    let (samples, total) = receiver.join().map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    analyse_and_report(with_tx_stamps(samples, &tx), total, r)
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
            let n = do_send(&sock, to, &send)?.len();
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
