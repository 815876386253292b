//! `pathem bench --live KIND`: forwarding rate on a veth path, in namespaces made for it.
//!
//! ```text
//!   gen: g0 ──veth── pa  [pathem, namespace mid]  pb ──veth── s0 :sink
//! ```
//! A generator thread in `gen` floods g0 with frames of one size through a batched packet
//! socket; pathem forwards pa → pb; the frames that reach s0 are read from its interface
//! counters, so only two threads are busy (the generator and pathem) on a 2-core machine.
//! Three runs are made back to back with the same offered load: pathem's port loop with the
//! engine bypassed (the raw rate of the port type), the engine with no impairment, and the
//! engine with delay, loss and rate. Their forwarded rates are compared as ratios.

use crate::netns::{enter, ip, live_clock};
use anyhow::Context;
use pathem_engine::{monotonic_now, run, EngineConfig, Next, Pipeline, Task};
use pathem_io::afpacket::AfPacketTx;
use pathem_io::live::{self, LiveRx, LiveTx, PortOptions};
use pathem_io::mem::udp_frame;
use pathem_io::{RxPort, TxPort};
use pathem_model::{Nanos, PathConfig};
use serde::Serialize;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The three namespaces; removed on drop.
pub struct Bed {
    pub names: [String; 3],
}

impl Drop for Bed {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

pub fn bed() -> anyhow::Result<Bed> {
    let id = std::process::id();
    let b = Bed { names: [format!("pbg{id}"), format!("pbm{id}"), format!("pbs{id}")] };
    let [g, m, s] = &b.names;
    for n in &b.names {
        ip(&["netns", "add", n]).context("the live benchmark needs root (it builds network namespaces)")?;
    }
    ip(&["link", "add", "g0", "netns", g, "type", "veth", "peer", "name", "pa", "netns", m])?;
    ip(&["link", "add", "s0", "netns", s, "type", "veth", "peer", "name", "pb", "netns", m])?;
    for (n, d) in [(g, "g0"), (m, "pa"), (m, "pb"), (s, "s0")] {
        ip(&["-n", n, "link", "set", d, "up"])?;
    }
    for n in [g, s] {
        ip(&["-n", n, "link", "set", "lo", "up"])?;
    }
    // Wire-sized frames with complete checksums, as a NIC would deliver them.
    for (n, d) in [(g, "g0"), (s, "s0")] {
        let _ = Command::new("ip")
            .args([
                "netns", "exec", n, "ethtool", "-K", d, "tso", "off", "gso", "off", "gro", "off", "tx", "off",
            ])
            .output();
    }
    Ok(b)
}

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

/// One run: the generator floods for `secs`, pathem forwards in `mode`.
fn one(
    bed: &Bed,
    kind: &str,
    size: usize,
    mode: &'static str,
    path: &PathConfig,
    secs: f64,
) -> anyhow::Result<(f64, f64)> {
    let [g, m, s] = bed.names.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let (kind, path) = (kind.to_string(), path.clone());
    let (stop2, ready2) = (stop.clone(), ready.clone());
    let fwd = std::thread::spawn(move || -> anyhow::Result<()> {
        enter(&m)?;
        let a =
            live::open(&format!("{kind}:pa"), &PortOptions { max_frame: 2048, ..PortOptions::default() })?;
        let b =
            live::open(&format!("{kind}:pb"), &PortOptions { max_frame: 2048, ..PortOptions::default() })?;
        let fds = vec![a.rx.raw_fd()];
        let mut clock = live_clock(fds);
        ready2.store(true, Ordering::Relaxed);
        if mode == "bypass" {
            let mut t = Bypass { rx: a.rx, tx: b.tx };
            run(&mut [&mut t], &mut clock, &stop2)?;
        } else {
            let engine = EngineConfig { max_frame: 2048, ..EngineConfig::default() };
            let mut p = Pipeline::new(a.rx, b.tx, &path, 1, &engine)?;
            run(&mut [&mut p], &mut clock, &stop2)?;
        }
        Ok(())
    });
    while !ready.load(Ordering::Relaxed) {
        if fwd.is_finished() {
            return Err(fwd
                .join()
                .map_err(|_| anyhow::anyhow!("forwarder panicked"))?
                .err()
                .unwrap_or_else(|| anyhow::anyhow!("forwarder ended")));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let before = rx_packets(&s, "s0");
    let gen = std::thread::spawn(move || -> anyhow::Result<(u64, f64)> {
        enter(&g)?;
        let mut tx = AfPacketTx::open("g0", 2048)?;
        let frame = udp_frame(size, 0);
        let start = monotonic_now();
        let end = start + Nanos((secs * 1e9) as u64);
        let mut sent = 0u64;
        while monotonic_now() < end {
            for _ in 0..64 {
                tx.send(Nanos::ZERO, size as u32, &frame);
            }
            tx.flush()?;
            sent += 64;
        }
        Ok((sent - tx.errors, (monotonic_now() - start).as_secs_f64()))
    });
    let (sent, took) = gen.join().map_err(|_| anyhow::anyhow!("generator panicked"))??;
    std::thread::sleep(std::time::Duration::from_millis(50));
    let got = rx_packets(&bed.names[2], "s0") - before;
    stop.store(true, Ordering::Relaxed);
    fwd.join().map_err(|_| anyhow::anyhow!("forwarder panicked"))??;
    Ok((sent as f64 / took / 1e6, got as f64 / took / 1e6))
}

/// Runs the live benchmark for each port kind and frame size.
pub fn main(kinds: &[String], sizes: &[usize], secs: f64, json: bool) -> anyhow::Result<()> {
    let bed = bed()?;
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
            for (mode, path) in [
                ("bypass", PathConfig::default()),
                ("engine", PathConfig::default()),
                ("impaired", impaired.clone()),
            ] {
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
    }
    Ok(())
}
