//! A probe run: what the sender sends (a [`Plan`]), the two ends, and both ends on one host
//! ([`pair`]), in network namespaces if asked, so both read the same clock.

use crate::analysis::{analyse, Sample, Summary};
use crate::error::Error;
pub use crate::net::sender_for;
use crate::net::{self, Arrivals};
use crate::packet::Run;
use crate::pattern::{Pattern, Schedule};
use crate::plot;
use pathem_io::udp::TimestampedUdp;
use pathem_model::loss::LossConfig;
use pathem_model::units::{Rate, UnitError};
use pathem_model::Nanos;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of Ethernet, IPv4 and UDP headers around the probe's payload.
pub const HEADERS: usize = net::IPV4_HEADERS;
/// Most datagrams one probe sends: a day at 100 kpps is 8.6 · 10^9.
pub const MAX_COUNT: u64 = 10_000_000_000;
/// How long the receiver waits for stragglers after the sender's end marker.
const LINGER: Duration = Duration::from_millis(300);

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
            return match num.parse::<f64>().map(|v| v * scale) {
                Ok(v) if v > 0.0 && v.is_finite() => Ok(ProbeRate::Pps(v)),
                _ => Err(UnitError {
                    value: s.into(),
                    reason: "is not a finite rate above 0".into(),
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

/// What a sender sends: how many datagrams of which size, when.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub pattern: Pattern,
    /// Datagrams per second (the mean, for bursts and Poisson).
    pub pps: f64,
    /// Frame size on the wire, without FCS.
    pub size: usize,
    pub count: u64,
    pub seed: u64,
    /// The run its datagrams carry: drawn at random unless the sender names one (`--run`).
    pub run: Run,
}

impl Plan {
    /// Checks the sender's settings (size 62 to 1514 bytes, count 1 to [`MAX_COUNT`],
    /// duration up to a day; five seconds' worth when neither is given). The error is one line.
    pub fn new(
        pattern: Pattern,
        rate: ProbeRate,
        size: usize,
        count: Option<u64>,
        duration: Option<Nanos>,
        seed: u64,
    ) -> Result<Plan, Error> {
        let bad = |flag, value: String, accepted| Err(Error::Setting { flag, value, accepted });
        if !(HEADERS + crate::packet::HEADER..=1514).contains(&size) {
            return bad("--size", size.to_string(), "62 to 1514 bytes (frame on the wire)");
        }
        let pps = match (rate, pattern) {
            (_, Pattern::Burst { n, every }) => f64::from(n) * 1e9 / every.as_nanos() as f64,
            (ProbeRate::Pps(p), _) => p,
            (ProbeRate::Bits(r), _) => r.bits_per_sec() as f64 / (size as f64 * 8.0),
        };
        let count = match (count, duration) {
            (Some(n), _) if n == 0 || n > MAX_COUNT => {
                return bad("--count", n.to_string(), "1 to 10000000000 datagrams");
            }
            // A count at a rate that takes longer than a day (`--rate 1e-300pps`) would
            // sleep past any run's end.
            (Some(n), _) if (n as f64 - 1.0) / pps > 86_400.0 => {
                return bad(
                    "--count",
                    format!("{n} (at {pps:e} datagrams a second: {:e} s)", (n as f64 - 1.0) / pps),
                    "a count the rate sends within 1 day (86400s)",
                );
            }
            (Some(n), _) => n,
            (None, Some(d)) if d == Nanos::ZERO || d > Nanos::from_secs(86_400) => {
                return bad("--duration", d.to_string(), "above 0, up to 1 day (86400s)");
            }
            (None, d) => {
                // The rate times the duration (five seconds when none is given), checked
                // before it becomes a count: a rate of 10tbit sends 10^11 datagrams in five.
                let secs = d.map_or(5.0, |d| d.as_secs_f64());
                let n = (secs * pps).ceil();
                if (n.is_nan() || n > MAX_COUNT as f64) && matches!(pattern, Pattern::Burst { .. }) {
                    return bad(
                        "--pattern",
                        format!("({pps:e} datagrams a second for {secs}s: {n:e} datagrams)"),
                        "a burst:N,every=DUR that sends at most 10000000000 datagrams in --duration (5s without it), or --count",
                    );
                }
                if n.is_nan() || n > MAX_COUNT as f64 {
                    return bad(
                        "--rate",
                        format!("({pps:e} datagrams a second for {secs}s: {n:e} datagrams)"),
                        "a rate that sends at most 10000000000 datagrams in --duration (5s without it), or --count",
                    );
                }
                (n as u64).max(1)
            }
        };
        Ok(Plan { pattern, pps, size, count, seed, run: crate::packet::new_run() })
    }

    /// Checks the plan against its receiver: a port (1 to 65535), and a frame that holds
    /// the probe's header behind that address's headers (an IPv6 header is 20 bytes longer
    /// than IPv4's, so `--size` 62 to IPv4, 82 to IPv6).
    pub fn check_to(&self, to: SocketAddr) -> Result<(), Error> {
        if to.port() == 0 {
            return Err(Error::Setting {
                flag: "--to",
                value: to.to_string(),
                accepted: "IP:PORT with a port 1 to 65535",
            });
        }
        if self.size < net::frame_headers(to) + crate::packet::HEADER {
            let accepted = "62 to 1514 bytes to an IPv4 address, 82 to 1514 to an IPv6 one";
            return Err(Error::Setting {
                flag: "--size",
                value: format!("{} (to {to})", self.size),
                accepted,
            });
        }
        Ok(())
    }
}

/// Sends `plan` to `to`; returns the kernel transmit timestamps by sequence number.
pub fn send(sock: &UdpSocket, to: SocketAddr, plan: &Plan) -> std::io::Result<Vec<Option<Nanos>>> {
    let schedule = Schedule::new(plan.pattern, plan.pps, plan.seed);
    let progress = plan.count as f64 / plan.pps > 3.0;
    // `--size` is the frame: an IPv6 header takes 20 bytes more of it than IPv4's.
    plan.check_to(to).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    net::send(sock, to, plan.run, plan.size - net::frame_headers(to), plan.count, schedule, progress)
}

/// Receives until the end marker of run `want` (without it, of a run it saw begin; a moment
/// for stragglers after) or `idle` without a datagram that keeps it waiting (of `want`; or of
/// a run not yet ended that began under it, or any while none did); the samples of
/// the run measured ([`net::Collector`] says which), the count its sender announced, what
/// else came and what the socket dropped.
pub fn receive(
    sock: &TimestampedUdp,
    want: Option<Run>,
    idle: Duration,
    progress: bool,
) -> std::io::Result<Arrivals> {
    net::receive(sock, want, LINGER, idle, None, progress)
}

/// With both ends on one host: the kernel's transmit timestamps replace the sender's own;
/// returns how many samples took one.
pub fn with_tx_stamps(samples: &mut [Sample], tx: &[Option<Nanos>]) -> u64 {
    let mut stamped = 0;
    for s in samples {
        if let Some(Some(t)) = tx.get(s.seq as usize) {
            s.sent = *t;
            stamped += 1;
        }
    }
    stamped
}

/// Runs a sender and a receiver on this host (each in its namespace if given, both pinned to
/// `cpu` if given); returns the samples, stamped on both ends by the kernel, and the count
/// (the sender's own where its end marker was lost).
pub fn pair(
    to: SocketAddr,
    send_ns: Option<String>,
    recv_ns: Option<String>,
    cpu: Option<usize>,
    plan: &Plan,
    idle: Duration,
) -> Result<Arrivals, Error> {
    plan.check_to(to)?;
    let place = move |ns: &Option<String>| -> Result<(), Error> {
        if let Some(n) = ns {
            pathem_io::host::enter_netns(n)?;
        }
        Ok(cpu.map_or(Ok(()), pathem_io::host::pin_to_cpu)?)
    };
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    // While the sender is at work, a pause in arrivals longer than `idle` (a sparse pattern,
    // a path holding frames) does not end the receiver.
    let sending = Arc::new(AtomicBool::new(true));
    let busy = sending.clone();
    // The receiver takes this run's datagrams only: another sender's to the same port are foreign.
    let run = plan.run;
    let receiver = std::thread::spawn(move || -> Result<Arrivals, Error> {
        place(&recv_ns)?;
        let sock = TimestampedUdp::bind(to)?;
        let _ = ready_tx.send(());
        net::receive(&sock, Some(run), LINGER, idle, Some(&busy), false).map_err(Error::io("receiving"))
    });
    if ready_rx.recv().is_err() {
        receiver.join().map_err(|_| Error::Stopped("receiver"))??;
        return Err(Error::Stopped("receiver"));
    }
    let plan = *plan;
    let sender = std::thread::spawn(move || -> Result<Vec<Option<Nanos>>, Error> {
        struct Done(Arc<AtomicBool>);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _done = Done(sending);
        place(&send_ns)?;
        let sock = net::sender_for(to).map_err(Error::io("cannot bind the sender"))?;
        send(&sock, to, &plan).map_err(Error::io("sending"))
    });
    let tx = sender.join().map_err(|_| Error::Stopped("sender"))??;
    let mut got = receiver.join().map_err(|_| Error::Stopped("receiver"))??;
    let stamped = with_tx_stamps(&mut got.samples, &tx);
    Ok(Arrivals { total: Some(got.total.unwrap_or(plan.count)), kernel_send_stamps: Some(stamped), ..got })
}

/// What a receiver does with what arrived, besides returning its summary.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outputs<'a> {
    /// The model the path should apply: its loss rate goes in the summary, its burst CDF in
    /// the figure.
    pub expect_loss: Option<&'a LossConfig>,
    /// Write the summary as JSON here.
    pub json: Option<&'a Path>,
    /// Write the figures into this folder.
    pub figures: Option<&'a Path>,
}

/// Analyses what arrived against `expect_delay` and writes `outputs`; returns the summary and
/// the figures written. Nothing of the run arrived: [`Error::Silence`] after `idle`. Without the
/// sender's end marker, the count sent is the highest number seen, and the summary says so.
pub fn conclude(
    got: &Arrivals,
    expect_delay: Nanos,
    idle: Nanos,
    outputs: Outputs,
) -> Result<(Summary, Vec<PathBuf>), Error> {
    let samples = &got.samples[..];
    if samples.is_empty() {
        return Err(Error::Silence { idle, foreign: got.foreign });
    }
    let sent =
        got.total.unwrap_or_else(|| samples.iter().map(|s| s.seq.saturating_add(1)).max().unwrap_or(0));
    let (mut summary, series) = analyse(samples, sent, expect_delay);
    (summary.sent_known, summary.socket_drops) = (got.total.is_some(), got.socket_drops);
    (summary.kernel_send_stamps, summary.run, summary.foreign) =
        (got.kernel_send_stamps, got.run, got.foreign);
    if let Some(p) = outputs.json {
        let rate = outputs.expect_loss.map(|l| l.loss_rate());
        let json = serde_json::json!({ "summary": summary, "expected_loss_rate": rate });
        let text = serde_json::to_string_pretty(&json).expect("a summary serialises") + "\n";
        std::fs::write(p, text).map_err(|e| Error::Write { path: p.into(), reason: e.to_string() })?;
    }
    let figures = match outputs.figures {
        Some(dir) => plot::all(&series, outputs.expect_loss.and_then(theory).as_deref(), dir, "")?,
        None => Vec::new(),
    };
    Ok((summary, figures))
}

/// The loss-burst CDF a model predicts, where it has a closed form.
pub fn theory(model: &LossConfig) -> Option<Box<dyn Fn(u64) -> f64>> {
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
