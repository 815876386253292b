//! `pathem probe`: measure what a path does, with timestamped UDP datagrams.
//!
//! `send` and `recv` run the two ends separately; `pair` runs both on one host (optionally in
//! two network namespaces), so both ends read the same clock (CLOCK_MONOTONIC) and one-way
//! delays are exact. The receiver uses the kernel's receive timestamps.

use crate::usage;
use anyhow::Context;
use clap::{Args, Subcommand};
use pathem_io::udp::TimestampedUdp;
use pathem_probe::opts::{ListenOpts, RecvOpts, SendOpts};
use pathem_probe::session::{self, Outputs};
use pathem_probe::{Arrivals, Summary};
use std::net::SocketAddr;

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
        #[command(flatten)]
        at: ListenOpts,
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

/// Analyses what arrived, prints it and writes what `o` asks for; returns the summary.
fn conclude(got: &Arrivals, o: &RecvOpts) -> anyhow::Result<Summary> {
    let outputs = Outputs {
        expect_loss: o.expect_loss.as_ref(),
        json: o.json.as_deref(),
        figures: o.figures.as_deref(),
    };
    let (summary, figures) = session::conclude(got, o.expect_delay.0, o.idle.0, outputs)?;
    out!("{}", summary.describe(o.expect_loss.as_ref().map(|l| l.loss_rate())));
    figures.iter().for_each(|f| outln!("  figure     {}", f.display()));
    Ok(summary)
}

pub fn main(args: ProbeArgs) -> anyhow::Result<()> {
    if let ProbeCommand::Recv { recv: r, .. } | ProbeCommand::Pair { recv: r, .. } = &args.command {
        r.check().map_err(usage)?;
    }
    match args.command {
        ProbeCommand::Send { to, send } => {
            let plan = send.plan(to).map_err(usage)?;
            let sock = session::sender_for(to).context("cannot bind the sender")?;
            let n = session::send(&sock, to, &plan).context("sending")?.len();
            errln!("pathem probe: sent {n} datagrams to {to} (run {:04x})", plan.run);
        }
        ProbeCommand::Recv { at, recv } => {
            at.check().map_err(usage)?;
            let sock = TimestampedUdp::bind(at.listen).map_err(usage)?;
            let idle = std::time::Duration::from_nanos(recv.idle.0.as_nanos());
            let got = session::receive(&sock, at.run, idle, true).context("receiving")?;
            conclude(&got, &recv)?;
        }
        ProbeCommand::Pair { to, send_netns, recv_netns, cpu, send, recv } => {
            let idle = std::time::Duration::from_nanos(recv.idle.0.as_nanos());
            let plan = send.plan(to).map_err(usage)?;
            let paired = session::pair(to, send_netns, recv_netns, cpu, &plan, idle);
            conclude(&paired.map_err(|e| if e.is_usage() { usage(e) } else { e.into() })?, &recv)?;
        }
    }
    Ok(())
}
