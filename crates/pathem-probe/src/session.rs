//! A probe run: what the sender sends (a [`Plan`]), the two ends, and both ends on one host
//! ([`pair`]), in network namespaces if asked, so both read the same clock.

use crate::analysis::Sample;
use crate::net;
use crate::pattern::{Pattern, Schedule};
use pathem_io::udp::TimestampedUdp;
use pathem_model::loss::LossConfig;
use pathem_model::units::{Rate, UnitError};
use pathem_model::Nanos;
use std::net::{SocketAddr, UdpSocket};
use std::str::FromStr;
use std::time::Duration;

/// Bytes of Ethernet, IPv4 and UDP headers around the probe's payload.
pub const HEADERS: usize = 42;
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
    ) -> Result<Plan, String> {
        if !(HEADERS + crate::packet::HEADER..=1514).contains(&size) {
            return Err(format!("--size {size}: accepted: 62 to 1514 bytes (frame on the wire)"));
        }
        let pps = match (rate, pattern) {
            (_, Pattern::Burst { n, every }) => f64::from(n) * 1e9 / every.as_nanos() as f64,
            (ProbeRate::Pps(p), _) => p,
            (ProbeRate::Bits(r), _) => r.bits_per_sec() as f64 / (size as f64 * 8.0),
        };
        let count = match (count, duration) {
            (Some(n), _) if n == 0 || n > MAX_COUNT => {
                return Err(format!("--count {n}: accepted: 1 to {MAX_COUNT} datagrams"))
            }
            (Some(n), _) => n,
            (None, Some(d)) if d > Nanos::from_secs(86_400) => {
                return Err(format!("--duration {d}: accepted: up to 1 day (86400s)"))
            }
            (None, Some(d)) => ((d.as_secs_f64() * pps).ceil() as u64).max(1),
            (None, None) => (pps * 5.0).ceil() as u64,
        };
        Ok(Plan { pattern, pps, size, count, seed })
    }
}

/// Sends `plan` to `to`; returns the kernel transmit timestamps by sequence number.
pub fn send(sock: &UdpSocket, to: SocketAddr, plan: &Plan) -> std::io::Result<Vec<Option<Nanos>>> {
    let schedule = Schedule::new(plan.pattern, plan.pps, plan.seed);
    let progress = plan.count as f64 / plan.pps > 3.0;
    net::send(sock, to, plan.size - HEADERS, plan.count, schedule, progress)
}

/// Receives until the sender's end marker (and a moment for stragglers) or `idle` without a
/// datagram; the samples and the count the sender announced.
pub fn receive(
    sock: &TimestampedUdp,
    idle: Duration,
    progress: bool,
) -> std::io::Result<(Vec<Sample>, Option<u64>)> {
    net::receive(sock, LINGER, idle, progress)
}

/// With both ends on one host: the kernel's transmit timestamps replace the sender's own.
pub fn with_tx_stamps(mut samples: Vec<Sample>, tx: &[Option<Nanos>]) -> Vec<Sample> {
    for s in &mut samples {
        if let Some(Some(t)) = tx.get(s.seq as usize) {
            s.sent = *t;
        }
    }
    samples
}

/// Runs a sender and a receiver on this host (each in its namespace if given, both pinned to
/// `cpu` if given); returns the samples, stamped on both ends by the kernel, and the count.
pub fn pair(
    to: SocketAddr,
    send_ns: Option<String>,
    recv_ns: Option<String>,
    cpu: Option<usize>,
    plan: &Plan,
    idle: Duration,
) -> Result<(Vec<Sample>, u64), String> {
    let place = move |ns: &Option<String>| -> Result<(), String> {
        if let Some(n) = ns {
            pathem_io::host::enter_netns(n)?;
        }
        cpu.map_or(Ok(()), pathem_io::host::pin_to_cpu)
    };
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = std::thread::spawn(move || -> Result<(Vec<Sample>, Option<u64>), String> {
        place(&recv_ns)?;
        let sock = TimestampedUdp::bind(to).map_err(|e| e.to_string())?;
        let _ = ready_tx.send(());
        receive(&sock, idle, false).map_err(|e| format!("receiving: {e}"))
    });
    if ready_rx.recv().is_err() {
        receiver.join().map_err(|_| "the receiver panicked".to_string())??;
        return Err("the receiver stopped before the sender started".into());
    }
    let plan = *plan;
    let sender = std::thread::spawn(move || -> Result<Vec<Option<Nanos>>, String> {
        place(&send_ns)?;
        let sock = UdpSocket::bind(("0.0.0.0", 0)).map_err(|e| format!("cannot bind the sender: {e}"))?;
        send(&sock, to, &plan).map_err(|e| format!("sending: {e}"))
    });
    let tx = sender.join().map_err(|_| "the sender panicked".to_string())??;
    let (samples, total) = receiver.join().map_err(|_| "the receiver panicked".to_string())??;
    Ok((with_tx_stamps(samples, &tx), total.unwrap_or(plan.count)))
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
