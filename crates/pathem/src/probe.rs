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
use pathem_probe::session::{self, Outputs, Plan, ProbeRate};
use pathem_probe::{Pattern, Sample, Summary};
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

/// Analyses what arrived, prints it and writes what `o` asks for; returns the summary.
fn conclude(samples: &[Sample], sent: Option<u64>, o: &RecvOpts) -> anyhow::Result<Summary> {
    let outputs = Outputs {
        expect_loss: o.expect_loss.as_ref(),
        json: o.json.as_deref(),
        figures: o.figures.as_deref(),
    };
    let (summary, figures) = session::conclude(samples, sent, o.expect_delay.0, o.idle.0, outputs)?;
    print!("{}", summary.describe(o.expect_loss.as_ref().map(|l| l.loss_rate())));
    figures.iter().for_each(|f| println!("  figure     {}", f.display()));
    Ok(summary)
}

pub fn main(args: ProbeArgs) -> anyhow::Result<()> {
    use pathem_model::Nanos;
    if let ProbeCommand::Recv { recv: r, .. } | ProbeCommand::Pair { recv: r, .. } = &args.command {
        crate::within("--expect-delay", r.expect_delay.0, Nanos::ZERO..=Nanos::from_secs(3600), "0ns to 1h")?;
        crate::within("--idle", r.idle.0, Nanos::from_millis(1)..=Nanos::from_secs(3600), "1ms to 1h")?;
    }
    match args.command {
        ProbeCommand::Send { to, send } => {
            let sock = UdpSocket::bind(("0.0.0.0", 0)).context("cannot bind the sender")?;
            let n = session::send(&sock, to, &plan(&send)?).context("sending")?.len();
            eprintln!("pathem probe: sent {n} datagrams to {to}");
        }
        ProbeCommand::Recv { listen, recv } => {
            let sock = TimestampedUdp::bind(listen).map_err(usage)?;
            let idle = std::time::Duration::from_nanos(recv.idle.0.as_nanos());
            let (samples, total) = session::receive(&sock, idle, true).context("receiving")?;
            conclude(&samples, total, &recv)?;
        }
        ProbeCommand::Pair { to, send_netns, recv_netns, cpu, send, recv } => {
            let idle = std::time::Duration::from_nanos(recv.idle.0.as_nanos());
            let (samples, total) = session::pair(to, send_netns, recv_netns, cpu, &plan(&send)?, idle)?;
            conclude(&samples, Some(total), &recv)?;
        }
    }
    Ok(())
}
