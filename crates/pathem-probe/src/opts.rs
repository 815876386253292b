//! The flags of `pathem probe`'s two ends (clap reads them; the CLI only dispatches).

use crate::packet::{parse_run, Run};
use crate::session::{Plan, ProbeRate};
use crate::{Error, Pattern};
use clap::Args;
use pathem_model::loss::LossConfig;
use pathem_model::units::Duration;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct SendOpts {
    /// Sending pattern: cbr, poisson, or burst:N,every=DUR.
    #[arg(long, value_name = "PATTERN", default_value = "cbr")]
    pub pattern: Pattern,
    /// Mean rate: 1000pps, 100kpps, or bits per second of frames (10mbit) [default: 1000pps;
    /// a burst pattern sets its own].
    #[arg(long, value_name = "RATE")]
    pub rate: Option<ProbeRate>,
    /// Frame size on the wire in bytes (Ethernet + IP + UDP + payload): 62 to 1514 to an IPv4
    /// address, 82 to 1514 to an IPv6 one [default: 64 to IPv4, 84 to IPv6 (the same payload)].
    #[arg(long, value_name = "BYTES")]
    pub size: Option<usize>,
    /// Datagrams to send.
    #[arg(long, value_name = "N", conflicts_with = "duration")]
    pub count: Option<u64>,
    /// Or: send for this long.
    #[arg(long, value_name = "DUR", allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// Seed of the Poisson pattern.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// The run number the datagrams carry, 1 to 4 hexadecimal digits, for a receiver's --run
    /// [default: drawn at random].
    #[arg(long, value_name = "HEX", value_parser = parse_run, allow_hyphen_values = true)]
    pub run: Option<Run>,
}

#[derive(Args, Debug, Clone)]
pub struct RecvOpts {
    /// The delay the path should add; deviations are measured from it.
    #[arg(long, value_name = "DUR", default_value = "0ns", allow_hyphen_values = true)]
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
    /// Give up when nothing of the run arrives for this long (without --run, of a run not yet
    /// ended).
    #[arg(long, value_name = "DUR", default_value = "5s", allow_hyphen_values = true)]
    pub idle: Duration,
}

/// Where a lone receiver listens, and which run it measures.
#[derive(Args, Debug, Clone)]
pub struct ListenOpts {
    /// Address to listen on, IP:PORT.
    #[arg(long, value_name = "IP:PORT")]
    pub listen: SocketAddr,
    /// Measure this sender's run only (as it prints it, e.g. a38d), every other datagram
    /// foreign [default: the first to end of the runs seen begin; failing that, the first to
    /// end; without an end marker, the one most datagrams came from].
    #[arg(long, value_name = "HEX", value_parser = parse_run, allow_hyphen_values = true)]
    pub run: Option<Run>,
}

impl ListenOpts {
    /// Checks `--listen`: a port a sender can name (1 to 65535, not "any").
    pub fn check(&self) -> Result<(), Error> {
        match self.listen.port() {
            0 => Err(Error::Setting {
                flag: "--listen",
                value: self.listen.to_string(),
                accepted: "IP:PORT with a port 1 to 65535 (the one the sender's --to names)",
            }),
            _ => Ok(()),
        }
    }
}

impl RecvOpts {
    /// Checks the receiver's settings: `--expect-delay` 0 to 1 h, `--idle` 1 ms to 1 h.
    pub fn check(&self) -> Result<(), Error> {
        use pathem_model::{limits::within, Nanos};
        within("expect-delay", self.expect_delay.0, Nanos::ZERO..=Nanos::from_secs(3600), "0ns to 1h")?;
        Ok(within("idle", self.idle.0, Nanos::from_millis(1)..=Nanos::from_secs(3600), "1ms to 1h")?)
    }
}

impl SendOpts {
    /// The sender's plan from its flags, for receiver `to` (checked, with
    /// [`Plan::check_to`] too: the error is one line).
    pub fn plan(&self, to: SocketAddr) -> Result<Plan, Error> {
        let rate = match (self.pattern, self.rate) {
            (Pattern::Burst { .. }, Some(r)) => {
                let accepted = "no --rate with --pattern burst:N,every=DUR (N every DUR is its rate)";
                let value = match r {
                    ProbeRate::Pps(p) => format!("{p}pps"),
                    ProbeRate::Bits(b) => b.to_string(),
                };
                return Err(Error::Setting { flag: "--rate", value, accepted });
            }
            (_, r) => r.unwrap_or(ProbeRate::Pps(1000.0)),
        };
        let size = self.size.unwrap_or(if to.is_ipv6() { 84 } else { 64 });
        let mut plan =
            Plan::new(self.pattern, rate, size, self.count, self.duration.map(|d| d.0), self.seed)?;
        plan.run = self.run.unwrap_or(plan.run);
        plan.check_to(to).map(|()| plan)
    }
}
