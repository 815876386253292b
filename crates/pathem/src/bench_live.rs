//! `pathem bench --live KIND`: forwarding rate on a veth path, in namespaces made for it.
//!
//! ```text
//!   gen: g0 ──veth── pa  [pathem, namespace mid]  pb ──veth── s0 :sink
//! ```
//! A generator thread in `gen` floods g0 with frames of one size through a batched packet
//! socket; pathem forwards pa → pb; the frames that reach s0 are read from its interface
//! counters, so only two threads are busy (the generator and pathem) on a 2-core machine.
//! Three runs are made back to back with the same offered load: pathem's port loop with the
//! engine bypassed (the raw rate of the port type), then `pathem_runtime::Link` — the very
//! link `pathem run` runs, busy polling and offloads included — with no impairment, and with
//! delay, loss and rate. Their forwarded rates are compared as ratios.

use pathem_engine::{monotonic_now, run, EngineConfig, MonotonicClock, Next, Task, DEFAULT_BUSY_POLL};
use pathem_io::afpacket::AfPacketTx;
use pathem_io::live::{self, LiveRx, LiveTx, PortOptions};
use pathem_io::mem::udp_frame;
use pathem_io::{RxPort, TxPort};
use pathem_model::{Nanos, PathConfig};
use pathem_runtime::testbed::{enter, Bed};
use pathem_runtime::{Link, LinkSpec};
use serde::Serialize;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn rx_packets(ns: &str, dev: &str) -> u64 {
    let out = Command::new("ip").args(["-n", ns, "-s", "-j", "link", "show", dev]).output();
    let v: serde_json::Value =
        out.ok().and_then(|o| serde_json::from_slice(&o.stdout).ok()).unwrap_or_default();
    v[0]["stats64"]["rx"]["packets"].as_u64().unwrap_or(0)
}

/// pathem's port loop without the engine: what the port type alone can forward.
struct Bypass {
    rx: LiveRx,
    tx: LiveTx,
}

impl Task for Bypass {
    fn poll(&mut self, now: Nanos) -> Result<Next, pathem_engine::Error> {
        let tx = &mut self.tx;
        self.rx.recv_burst(now, 64, |f| {
            if !tx.send(now, f.wire_len, f.data) {
                let _ = tx.flush();
                tx.send(now, f.wire_len, f.data);
            }
        })?;
        self.tx.flush()?;
        Ok(match self.rx.poll_at() {
            pathem_io::PollAt::Now => Next::Now,
            _ => Next::Soon,
        })
    }
}

#[derive(Serialize)]
struct Row {
    port: String,
    size: usize,
    mode: &'static str,
    offered_mpps: f64,
    forwarded_mpps: f64,
    /// Forwarded rate over the bypass run's.
    of_raw: f64,
}

/// The forwarder of one run: pathem's raw port loop, or the runtime's link.
enum Forwarder {
    Raw(std::thread::JoinHandle<anyhow::Result<()>>, Arc<AtomicBool>),
    Link(Box<Link>),
}

impl Forwarder {
    fn start(bed: &Bed, kind: &str, mode: &str, path: &PathConfig) -> anyhow::Result<Forwarder> {
        let split = mode == "split";
        let ports = PortOptions { max_frame: 2048, ..PortOptions::default() };
        let (a, b, mid) = (format!("{kind}:pa"), format!("{kind}:pb"), bed.mid().to_string());
        if mode != "bypass" {
            let spec = LinkSpec {
                a,
                b,
                ab: path.clone(),
                ba: PathConfig::default(),
                // Split: a→b's input and output on CPUs 0 and 1, as `run --one-way --cores 0,1`.
                one_way: split,
                seed: 1,
                engine: EngineConfig {
                    max_frame: 2048,
                    busy_poll: DEFAULT_BUSY_POLL,
                    ..EngineConfig::default()
                },
                ports,
                cores: if split { vec![0, 1] } else { Vec::new() },
                netns: Some(mid),
                keep_offloads: false,
                schedule_ab: None,
                schedule_ba: None,
            };
            return Ok(Forwarder::Link(Box::new(Link::start(spec).map_err(crate::run::runtime_error)?)));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let stop2 = stop.clone();
        let fwd = std::thread::spawn(move || -> anyhow::Result<()> {
            enter(&mid)?;
            let a = live::open(&a, &ports)?;
            let b = live::open(&b, &ports)?;
            let mut clock = MonotonicClock::waiting_on(vec![a.rx.raw_fd()]);
            let _ = ready_tx.send(());
            let mut t = Bypass { rx: a.rx, tx: b.tx };
            run(&mut [&mut t], &mut clock, &stop2)?;
            Ok(())
        });
        if ready_rx.recv().is_err() {
            fwd.join().map_err(|_| anyhow::anyhow!("forwarder panicked"))??;
            anyhow::bail!("the forwarder ended before it was ready");
        }
        Ok(Forwarder::Raw(fwd, stop))
    }

    fn stop(self) -> anyhow::Result<()> {
        match self {
            Forwarder::Raw(h, stop) => {
                stop.store(true, Ordering::Relaxed);
                h.join().map_err(|_| anyhow::anyhow!("forwarder panicked"))?
            }
            Forwarder::Link(l) => l.stop().map(|_| ()).map_err(crate::run::runtime_error),
        }
    }
}

/// One run: the generator floods for `secs`, pathem forwards in `mode`.
fn one(
    bed: &Bed,
    kind: &str,
    size: usize,
    mode: &'static str,
    path: &PathConfig,
    secs: f64,
) -> anyhow::Result<(f64, f64)> {
    let fwd = Forwarder::start(bed, kind, mode, path)?;
    let before = rx_packets(&bed.sink, "s0");
    let g = bed.gen.clone();
    let gen = std::thread::spawn(move || -> anyhow::Result<(u64, f64)> {
        enter(&g)?;
        let mut tx = AfPacketTx::open("g0", 2048)?;
        let frame = udp_frame(size, 0);
        let start = monotonic_now();
        let end = start + Nanos((secs * 1e9) as u64);
        let mut sent = 0u64;
        while monotonic_now() < end {
            for _ in 0..64 {
                sent += u64::from(tx.send(Nanos::ZERO, size as u32, &frame));
            }
            tx.flush()?;
        }
        Ok((sent - tx.errors - tx.queued() as u64, (monotonic_now() - start).as_secs_f64()))
    });
    let (sent, took) = gen.join().map_err(|_| anyhow::anyhow!("generator panicked"))??;
    std::thread::sleep(std::time::Duration::from_millis(50));
    let got = rx_packets(&bed.sink, "s0") - before;
    fwd.stop()?;
    Ok((sent as f64 / took / 1e6, got as f64 / took / 1e6))
}

/// Runs the live benchmark for each port kind and frame size.
pub fn main(kinds: &[String], sizes: &[usize], secs: f64, split: bool, json: bool) -> anyhow::Result<()> {
    let bed = Bed::through(&format!("pb{}", std::process::id())).map_err(crate::usage)?;
    let impaired = PathConfig {
        link: Some(pathem_model::link::LinkConfig::rate("10gbit".parse()?)),
        loss: Some("1%".parse()?),
        delay: pathem_model::delay::DelayConfig::constant(Nanos::from_millis(1)),
        ..PathConfig::default()
    };
    let mut rows = Vec::new();
    for kind in kinds {
        for &size in sizes {
            let mut raw = 0.0;
            let mut modes = vec![
                ("bypass", PathConfig::default()),
                ("engine", PathConfig::default()),
                ("impaired", impaired.clone()),
            ];
            if split {
                modes.push(("split", impaired.clone()));
            }
            for (mode, path) in modes {
                let (offered, forwarded) = one(&bed, kind, size, mode, &path, secs)?;
                if mode == "bypass" {
                    raw = forwarded;
                }
                let row = Row {
                    port: kind.clone(),
                    size,
                    mode,
                    offered_mpps: offered,
                    forwarded_mpps: forwarded,
                    of_raw: forwarded / raw,
                };
                if !json {
                    println!(
                        "{:<9} {:>5} B  {:<9} offered {:>6.3} Mpps  forwarded {:>6.3} Mpps  {:>5.1}% of the raw port loop",
                        row.port,
                        row.size,
                        row.mode,
                        row.offered_mpps,
                        row.forwarded_mpps,
                        100.0 * row.of_raw
                    );
                }
                rows.push(row);
            }
        }
    }
    if json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        println!("impaired = delay 1ms, loss 1% (a loss shows as 1% less forwarded), rate 10gbit");
        if split {
            println!("split = impaired, one way, its input and output stages on CPUs 0 and 1 (the generator shares them)");
        }
    }
    Ok(())
}
