//! Queue disciplines against their RFCs: each is written out again here as a slow, obvious
//! transcription of its RFC's pseudo-code (drop-tail and drop-head as plain FIFOs; CoDel, RFC
//! 8289; FQ-CoDel, RFC 8290; RED with gentle mode; PIE, RFC 8033; DualPI2, RFC 9332), run by a
//! plain event loop on the same arrivals as `pathem replay`. Replay's output must agree frame
//! for frame: the same frames sent, at the same instants, the same ones dropped and marked.
//! The randomised disciplines draw from the same seeded stream (the path generator's
//! discipline stream) at the same points, so they agree exactly too; on top, each is checked against what its RFC promises (the queue delay
//! held near target under a steady overload), and a simple AIMD source closes the loop to show
//! what the disciplines are for: a short queue where drop-tail builds a long one.

mod common;
use common::{pathem, refused, Dir};
use pathem_io::mem::{ipv4_checksum, udp_frame};
use pathem_io::pcap::{read_capture, write_capture};
use pathem_model::aqm::{AqmConfig, Bottleneck, Decision, Entry, RNG_STREAM};
use pathem_model::frame::flow_hash;
use pathem_model::link::LinkConfig;
use pathem_model::rng::{direction_seed, Rng};
use pathem_model::Nanos;
use std::collections::{BTreeMap, VecDeque};

/// The bottleneck of every test: 10 Mbit/s, so a frame of `len` bytes (+24 B of Ethernet
/// framing) takes a whole number of nanoseconds, `(len + 24) · 800`.
const RATE: u64 = 10_000_000;
const MS: u64 = 1_000_000;

fn wire(len: u32) -> u64 {
    (u64::from(len) + 24) * 8 * 1_000_000_000 / RATE
}

/// A frame of the test traffic.
#[derive(Clone, Copy, Debug)]
struct Pkt {
    id: u64,
    t: u64,
    len: u32,
    /// Which source sent it (its UDP source port is 1000 + src).
    src: u32,
    /// Its flow hash, as pathem classifies the frame.
    hash: u32,
    ecn: u8,
}

/// The bytes of a test frame: UDP from port 1000 + src, the ECN codepoint in its IP header,
/// its id in the payload.
fn frame(p: &Pkt) -> Vec<u8> {
    let mut f = udp_frame(p.len as usize, p.id);
    f[15] = p.ecn;
    f[34..36].copy_from_slice(&(1000 + p.src as u16).to_be_bytes());
    let sum = ipv4_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    f
}

/// Sources, each `(bit/s, frame length, ECN codepoint)`, sending for `secs` with each gap drawn
/// uniformly between half and one and a half times the mean; merged in time order.
fn traffic(sources: &[(f64, u32, u8)], secs: f64, seed: u64) -> Vec<Pkt> {
    let mut rng = Rng::seeded(seed);
    let mut all = Vec::new();
    for (src, &(bps, len, ecn)) in sources.iter().enumerate() {
        let gap = f64::from(len) * 8.0 / bps * 1e9;
        let mut t = 1e9 + rng.unit() * gap;
        while t < 1e9 + secs * 1e9 {
            all.push(Pkt { id: 0, t: t as u64, len, src: src as u32, hash: 0, ecn });
            t += gap * (0.5 + rng.unit());
        }
    }
    all.sort_by_key(|p| (p.t, p.src));
    for (i, p) in all.iter_mut().enumerate() {
        p.id = i as u64;
        p.hash = flow_hash(&frame(p));
    }
    all
}

/// What a discipline did: per frame sent, (service start, exit, marked); the frames dropped.
#[derive(Debug, Default, PartialEq)]
struct Outcome {
    sent: BTreeMap<u64, (u64, u64, bool)>,
    dropped: Vec<u64>,
}

impl Outcome {
    fn sojourns(&self, arrivals: &[Pkt], from: u64, to: u64) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .sent
            .iter()
            .filter(|(_, &(start, _, _))| (from..to).contains(&start))
            .map(|(&id, &(start, _, _))| start - arrivals[id as usize].t)
            .collect();
        v.sort_unstable();
        v
    }
}

/// A reference transcription: its own queue(s), driven by [`simulate`].
trait Reference {
    fn enqueue(&mut self, now: u64, p: Pkt, rng: &mut Rng, drops: &mut Vec<u64>);
    fn dequeue(&mut self, now: u64, rng: &mut Rng, drops: &mut Vec<u64>) -> Option<(Pkt, bool)>;
    /// Arrival of the oldest frame waiting.
    fn oldest(&self) -> Option<u64>;
    fn t_update(&self) -> Option<u64> {
        None
    }
    fn update(&mut self, _now: u64) {}
}

/// The server and the clock around a reference: the next event is an update, a service start
/// (when the server is free and a frame waits) or an arrival, in that order on a tie.
fn simulate(r: &mut dyn Reference, arrivals: &[Pkt], seed: u64) -> Outcome {
    let mut rng = Rng::seeded(seed).stream(RNG_STREAM);
    let mut out = Outcome::default();
    let (mut free, mut next, mut update) = (0u64, 0usize, None::<u64>);
    loop {
        let start = r.oldest().map(|o| free.max(o));
        let arrival = arrivals.get(next).map(|p| p.t);
        if start.is_none() && arrival.is_none() {
            return out;
        }
        let event = [update.map(|u| (u, 0)), start.map(|s| (s, 1)), arrival.map(|t| (t, 2))];
        match event.into_iter().flatten().min().expect("an event") {
            (u, 0) => {
                r.update(u);
                update = Some(u + r.t_update().expect("periodic"));
            }
            (s, 1) => {
                if let Some((p, mark)) = r.dequeue(s, &mut rng, &mut out.dropped) {
                    free = s + wire(p.len);
                    out.sent.insert(p.id, (s, free, mark));
                }
            }
            (t, _) => {
                let p = arrivals[next];
                next += 1;
                if update.is_none() {
                    update = r.t_update().map(|u| t + u);
                }
                r.enqueue(t, p, &mut rng, &mut out.dropped);
            }
        }
    }
}

/// The same arrivals through the model's [`Bottleneck`] directly, as the engine drives it.
fn through_model(aqm: &AqmConfig, limit: Option<&str>, ecn: bool, arrivals: &[Pkt], seed: u64) -> Outcome {
    let link = LinkConfig {
        queue: limit.map(|l| l.parse().unwrap()),
        ..LinkConfig::rate(pathem_model::units::Rate(RATE))
    };
    let mut b = Bottleneck::new(aqm, &link, ecn);
    let mut rng = Rng::seeded(seed).stream(RNG_STREAM);
    let mut out = Outcome::default();
    let mut take = |d: Decision| match d {
        Decision::Send { entry, start, exit, mark } => {
            out.sent.insert(entry.seq, (start.as_nanos(), exit.as_nanos(), mark));
        }
        Decision::Drop { entry, .. } => out.dropped.push(entry.seq),
    };
    for p in arrivals {
        b.serve(Nanos(p.t), &mut rng, &mut take);
        let e = Entry {
            seq: p.id,
            arrival: Nanos(p.t),
            len: p.len,
            caplen: p.len,
            ecn: p.ecn,
            flow: p.hash,
            marked: false,
        };
        b.enqueue(e, &mut rng, &mut take);
    }
    b.serve(Nanos::MAX, &mut rng, &mut take);
    out
}

/// The same arrivals through `pathem replay` (rate 10mbit, no delay: each frame leaves at its
/// exit), read back: the frames sent with their exit and CE mark, the rest dropped.
fn through_replay(flags: &[&str], arrivals: &[Pkt], seed: u64) -> (Outcome, serde_json::Value) {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), arrivals.iter().map(|p| (Nanos(p.t), frame(p)))).unwrap();
    let seed_text = seed.to_string();
    let mut args = vec!["replay", "--rate", "10mbit", "--seed", &seed_text, "--stats"];
    let (stats, input, output) = (d.s("stats.json"), d.s("in.pcap"), d.s("out.pcap"));
    args.extend([stats.as_str(), input.as_str(), output.as_str()]);
    args.extend_from_slice(flags);
    let run = pathem(&args);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let mut out = Outcome::default();
    for (t, _, f) in read_capture(&d.path("out.pcap")).unwrap() {
        let id = u64::from_be_bytes(f[42..50].try_into().unwrap());
        let p = &arrivals[id as usize];
        let mark = f[15] & 3 == 3 && p.ecn != 3;
        out.sent.insert(id, (t.as_nanos() - wire(p.len), t.as_nanos(), mark));
    }
    out.dropped = arrivals.iter().map(|p| p.id).filter(|id| !out.sent.contains_key(id)).collect();
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("stats.json")).unwrap()).unwrap();
    (out, stats)
}

/// Drops in the order they were decided, compared as sets (replay cannot see the order).
fn same(a: &Outcome, b: &Outcome, what: &str) {
    let (mut da, mut db) = (a.dropped.clone(), b.dropped.clone());
    da.sort_unstable();
    db.sort_unstable();
    assert_eq!(da, db, "{what}: dropped frames differ");
    for (id, x) in &a.sent {
        assert_eq!(Some(x), b.sent.get(id), "{what}: frame {id}");
    }
    assert_eq!(a.sent.len(), b.sent.len(), "{what}: frames sent");
}

// ---- Drop-tail and drop-head: a FIFO with a limit in frames. ----

struct Fifo {
    q: VecDeque<Pkt>,
    limit: usize,
    drop_head: bool,
}

impl Reference for Fifo {
    fn enqueue(&mut self, _now: u64, p: Pkt, _rng: &mut Rng, drops: &mut Vec<u64>) {
        if !self.drop_head && self.q.len() >= self.limit {
            drops.push(p.id);
            return;
        }
        self.q.push_back(p);
        if self.q.len() > self.limit {
            drops.push(self.q.pop_front().unwrap().id);
        }
    }
    fn dequeue(&mut self, _now: u64, _rng: &mut Rng, _drops: &mut Vec<u64>) -> Option<(Pkt, bool)> {
        self.q.pop_front().map(|p| (p, false))
    }
    fn oldest(&self) -> Option<u64> {
        self.q.front().map(|p| p.t)
    }
}

// ---- CoDel, RFC 8289's pseudo-code (its section 5 and appendix), line for line. ----

const TARGET: i64 = 5 * MS as i64;
const INTERVAL: i64 = 100 * MS as i64;
const MAXPACKET: u64 = 1514;

/// RFC 8289's per-queue variables; time 0 stands for "unset" as in the RFC.
#[derive(Default, Clone)]
struct CodelVars {
    first_above_time: i64,
    drop_next: i64,
    count: u64,
    lastcount: u64,
    dropping: bool,
}

/// A queue as CoDel dequeues it: `bytes` is the backlog CoDel's MAXPACKET test reads (the
/// whole queue for CoDel, the whole FQ-CoDel backlog for a flow's CoDel, as Linux does).
struct CodelQ<'a> {
    q: &'a mut VecDeque<Pkt>,
    bytes: &'a mut u64,
}

impl CodelVars {
    fn control_law(&self, t: i64) -> i64 {
        t + (INTERVAL as f64 / (self.count as f64).sqrt()) as i64
    }

    fn dodequeue(&mut self, now: i64, q: &mut CodelQ) -> (Option<Pkt>, bool) {
        let Some(p) = q.q.pop_front() else {
            self.first_above_time = 0;
            return (None, false);
        };
        *q.bytes -= u64::from(p.len);
        let sojourn_time = now - p.t as i64;
        let mut ok_to_drop = false;
        if sojourn_time < TARGET || *q.bytes <= MAXPACKET {
            self.first_above_time = 0;
        } else if self.first_above_time == 0 {
            self.first_above_time = now + INTERVAL;
        } else if now >= self.first_above_time {
            ok_to_drop = true;
        }
        (Some(p), ok_to_drop)
    }

    fn dequeue(&mut self, now: i64, q: &mut CodelQ, drops: &mut Vec<u64>) -> Option<Pkt> {
        let (mut p, mut ok_to_drop) = self.dodequeue(now, q);
        if p.is_none() {
            self.dropping = false;
            return None;
        }
        if self.dropping {
            if !ok_to_drop {
                self.dropping = false;
            }
            while now >= self.drop_next && self.dropping {
                drops.push(p.unwrap().id);
                self.count += 1;
                (p, ok_to_drop) = self.dodequeue(now, q);
                if p.is_none() || !ok_to_drop {
                    self.dropping = false;
                } else {
                    self.drop_next = self.control_law(self.drop_next);
                }
            }
        } else if ok_to_drop {
            drops.push(p.unwrap().id);
            (p, _) = self.dodequeue(now, q);
            self.dropping = true;
            let delta = self.count as i64 - self.lastcount as i64;
            self.count = 1;
            if delta > 1 && now - self.drop_next < 16 * INTERVAL {
                self.count = delta as u64;
            }
            self.drop_next = self.control_law(now);
            self.lastcount = self.count;
        }
        p
    }
}

struct Codel {
    q: VecDeque<Pkt>,
    bytes: u64,
    limit: usize,
    vars: CodelVars,
}

impl Reference for Codel {
    fn enqueue(&mut self, _now: u64, p: Pkt, _rng: &mut Rng, drops: &mut Vec<u64>) {
        if self.q.len() >= self.limit {
            drops.push(p.id);
            return;
        }
        self.bytes += u64::from(p.len);
        self.q.push_back(p);
    }
    fn dequeue(&mut self, now: u64, _rng: &mut Rng, drops: &mut Vec<u64>) -> Option<(Pkt, bool)> {
        let mut q = CodelQ { q: &mut self.q, bytes: &mut self.bytes };
        self.vars.dequeue(now as i64, &mut q, drops).map(|p| (p, false))
    }
    fn oldest(&self) -> Option<u64> {
        self.q.front().map(|p| p.t)
    }
}

// ---- FQ-CoDel, RFC 8290 section 4. ----

const FLOWS: usize = 1024;
const QUANTUM: i64 = 1514;

#[derive(Clone, Default)]
struct FqFlow {
    q: VecDeque<Pkt>,
    bytes: u64,
    deficit: i64,
    vars: CodelVars,
    /// On the new or the old list.
    listed: bool,
}

struct FqCodel {
    flows: Vec<FqFlow>,
    new_flows: VecDeque<usize>,
    old_flows: VecDeque<usize>,
    total: u64,
    packets: usize,
    limit: usize,
}

impl Reference for FqCodel {
    fn enqueue(&mut self, _now: u64, p: Pkt, _rng: &mut Rng, drops: &mut Vec<u64>) {
        // Classify, enqueue, and a flow not on a list joins the new list with a full quantum.
        // The queue of a hash as Linux's fq_codel finds it: reciprocal_scale(hash, flows).
        let i = ((u64::from(p.hash) * FLOWS as u64) >> 32) as usize;
        let f = &mut self.flows[i];
        f.q.push_back(p);
        f.bytes += u64::from(p.len);
        self.total += u64::from(p.len);
        self.packets += 1;
        if !f.listed {
            f.listed = true;
            f.deficit = QUANTUM;
            self.new_flows.push_back(i);
        }
        // Over the limit, RFC 8290 §4.1 as Linux's fq_codel_drop does it: the longest queue
        // in bytes (the first such) loses frames from its head, one at least, until half its
        // bytes are gone or 64 frames are, and its CoDel count rises by as many.
        if self.packets > self.limit {
            let mut fattest = 0;
            for j in 0..FLOWS {
                if self.flows[j].bytes > self.flows[fattest].bytes {
                    fattest = j;
                }
            }
            let f = &mut self.flows[fattest];
            let threshold = f.bytes / 2;
            let (mut n, mut len) = (0, 0);
            loop {
                let d = f.q.pop_front().unwrap();
                f.bytes -= u64::from(d.len);
                self.total -= u64::from(d.len);
                self.packets -= 1;
                drops.push(d.id);
                (n, len) = (n + 1, len + u64::from(d.len));
                if n == 64 || len >= threshold {
                    break;
                }
            }
            f.vars.count += n;
        }
    }

    fn dequeue(&mut self, now: u64, _rng: &mut Rng, drops: &mut Vec<u64>) -> Option<(Pkt, bool)> {
        loop {
            let from_new = !self.new_flows.is_empty();
            let i = if from_new { *self.new_flows.front()? } else { *self.old_flows.front()? };
            if self.flows[i].deficit <= 0 {
                self.flows[i].deficit += QUANTUM;
                if from_new {
                    self.new_flows.pop_front()
                } else {
                    self.old_flows.pop_front()
                };
                self.old_flows.push_back(i);
                continue;
            }
            let f = &mut self.flows[i];
            let before = f.q.len();
            let mut q = CodelQ { q: &mut f.q, bytes: &mut self.total };
            let p = f.vars.dequeue(now as i64, &mut q, drops);
            let taken = before - f.q.len();
            self.packets -= taken;
            let mut flow_bytes = 0;
            for x in &f.q {
                flow_bytes += u64::from(x.len);
            }
            f.bytes = flow_bytes;
            match p {
                None => {
                    if from_new {
                        self.new_flows.pop_front()
                    } else {
                        self.old_flows.pop_front()
                    };
                    if from_new && !self.old_flows.is_empty() {
                        self.old_flows.push_back(i);
                    } else {
                        self.flows[i].listed = false;
                    }
                }
                Some(p) => {
                    f.deficit -= i64::from(p.len);
                    return Some((p, false));
                }
            }
        }
    }

    fn oldest(&self) -> Option<u64> {
        self.flows.iter().filter_map(|f| f.q.front().map(|p| p.t)).min()
    }
}

// ---- RED (Floyd and Jacobson 1993, figure 2), with gentle mode (Floyd 2000). ----

struct Red {
    q: VecDeque<Pkt>,
    bytes: u64,
    limit: usize,
    avg: f64,
    count: i64,
    q_time: u64,
    min_th: f64,
    max_th: f64,
    max_p: f64,
    w_q: f64,
    /// Transmission time of a 1514-byte frame, the `s` of the idle-time aging.
    s: f64,
}

impl Reference for Red {
    fn enqueue(&mut self, now: u64, p: Pkt, rng: &mut Rng, drops: &mut Vec<u64>) {
        if !self.q.is_empty() {
            self.avg = (1.0 - self.w_q) * self.avg + self.w_q * self.bytes as f64;
        } else {
            let m = (now - self.q_time) as f64 / self.s;
            self.avg *= (1.0 - self.w_q).powf(m);
        }
        let mut drop = false;
        if self.min_th <= self.avg && self.avg < 2.0 * self.max_th {
            self.count += 1;
            let pb = if self.avg < self.max_th {
                self.max_p * (self.avg - self.min_th) / (self.max_th - self.min_th)
            } else {
                self.max_p + (1.0 - self.max_p) * (self.avg - self.max_th) / self.max_th
            };
            let pa = if self.count as f64 * pb >= 1.0 { 1.0 } else { pb / (1.0 - self.count as f64 * pb) };
            if rng.unit() < pa {
                drop = true;
                self.count = 0;
            }
        } else if self.avg >= 2.0 * self.max_th {
            drop = true;
            self.count = 0;
        } else {
            self.count = -1;
        }
        if drop || self.q.len() >= self.limit {
            drops.push(p.id);
            return;
        }
        self.bytes += u64::from(p.len);
        self.q.push_back(p);
    }
    fn dequeue(&mut self, now: u64, _rng: &mut Rng, _drops: &mut Vec<u64>) -> Option<(Pkt, bool)> {
        let p = self.q.pop_front()?;
        self.bytes -= u64::from(p.len);
        if self.q.is_empty() {
            self.q_time = now;
        }
        Some((p, false))
    }
    fn oldest(&self) -> Option<u64> {
        self.q.front().map(|p| p.t)
    }
}

// ---- PIE, RFC 8033 section 5 (timestamps for the queue delay). ----

const QDELAY_REF: f64 = 0.015;
const T_UPDATE: u64 = 15 * MS;
const MAX_BURST: f64 = 0.150;
const MEAN_PKTSIZE: u64 = 1514;

struct Pie {
    q: VecDeque<Pkt>,
    bytes: u64,
    limit: usize,
    drop_prob: f64,
    qdelay: f64,
    qdelay_old: f64,
    burst_allowance: f64,
    accu_prob: f64,
}

impl Pie {
    fn drop_early(&mut self, rng: &mut Rng) -> bool {
        if (self.qdelay_old < QDELAY_REF / 2.0 && self.drop_prob < 0.2) || self.bytes <= 2 * MEAN_PKTSIZE {
            return false;
        }
        if self.drop_prob == 0.0 {
            self.accu_prob = 0.0;
        }
        self.accu_prob += self.drop_prob;
        if self.accu_prob < 0.85 {
            return false;
        }
        if self.accu_prob >= 8.5 {
            return true;
        }
        if rng.unit() < self.drop_prob {
            self.accu_prob = 0.0;
            return true;
        }
        false
    }
}

impl Reference for Pie {
    fn enqueue(&mut self, _now: u64, p: Pkt, rng: &mut Rng, drops: &mut Vec<u64>) {
        if self.q.len() >= self.limit {
            drops.push(p.id);
        } else if self.drop_early(rng) && self.burst_allowance == 0.0 {
            drops.push(p.id);
            self.accu_prob = 0.0;
        } else {
            self.bytes += u64::from(p.len);
            self.q.push_back(p);
        }
    }
    fn dequeue(&mut self, now: u64, _rng: &mut Rng, _drops: &mut Vec<u64>) -> Option<(Pkt, bool)> {
        let p = self.q.pop_front()?;
        self.bytes -= u64::from(p.len);
        self.qdelay = (now - p.t) as f64 / 1e9;
        Some((p, false))
    }
    fn oldest(&self) -> Option<u64> {
        self.q.front().map(|p| p.t)
    }
    fn t_update(&self) -> Option<u64> {
        Some(T_UPDATE)
    }
    fn update(&mut self, _now: u64) {
        let qdelay = if self.q.is_empty() { 0.0 } else { self.qdelay };
        let mut p = 0.125 * (qdelay - QDELAY_REF) + 1.25 * (qdelay - self.qdelay_old);
        if self.drop_prob < 0.000001 {
            p /= 2048.0;
        } else if self.drop_prob < 0.00001 {
            p /= 512.0;
        } else if self.drop_prob < 0.0001 {
            p /= 128.0;
        } else if self.drop_prob < 0.001 {
            p /= 32.0;
        } else if self.drop_prob < 0.01 {
            p /= 8.0;
        } else if self.drop_prob < 0.1 {
            p /= 2.0;
        }
        if self.drop_prob >= 0.1 && p > 0.02 {
            p = 0.02;
        }
        self.drop_prob += p;
        if qdelay == 0.0 && self.qdelay_old == 0.0 {
            self.drop_prob *= 0.98;
        }
        self.drop_prob = self.drop_prob.clamp(0.0, 1.0);
        self.burst_allowance = (self.burst_allowance - T_UPDATE as f64 / 1e9).max(0.0);
        if self.burst_allowance < 1e-12 {
            self.burst_allowance = 0.0;
        }
        if self.drop_prob == 0.0 && qdelay < QDELAY_REF / 2.0 && self.qdelay_old < QDELAY_REF / 2.0 {
            self.burst_allowance = MAX_BURST;
        }
        self.qdelay_old = qdelay;
    }
}

// ---- DualPI2, RFC 9332 appendix A. ----

struct DualPi2 {
    lq: VecDeque<Pkt>,
    cq: VecDeque<Pkt>,
    limit_bytes: u64,
    ecn: bool,
    p: f64,
    p_cl: f64,
    p_c: f64,
    prevq: f64,
    l_count: f64,
}

const K: f64 = 2.0;
const PI2_TARGET: f64 = 0.015;
const MIN_TH: f64 = 0.000_800;
const RANGE: f64 = 0.000_400;
const TSHIFT: u64 = 30 * MS;

impl Reference for DualPi2 {
    fn enqueue(&mut self, _now: u64, p: Pkt, _rng: &mut Rng, drops: &mut Vec<u64>) {
        let bytes: u64 = self.lq.iter().chain(&self.cq).map(|x| u64::from(x.len)).sum();
        if bytes + u64::from(p.len) > self.limit_bytes {
            drops.push(p.id);
            return;
        }
        if p.ecn % 2 == 1 {
            self.lq.push_back(p);
        } else {
            self.cq.push_back(p);
        }
    }
    fn dequeue(&mut self, now: u64, rng: &mut Rng, drops: &mut Vec<u64>) -> Option<(Pkt, bool)> {
        let p_cmax = (1.0 / (K * K)).min(1.0);
        let overload = self.p_c >= p_cmax;
        while !self.lq.is_empty() || !self.cq.is_empty() {
            let l_first = match (self.lq.front(), self.cq.front()) {
                (Some(l), Some(c)) => l.t <= c.t + TSHIFT,
                (Some(_), None) => true,
                _ => false,
            };
            if l_first {
                let several = self.lq.len() > 1;
                let pkt = self.lq.pop_front().unwrap();
                if overload {
                    if self.p_c > rng.unit() {
                        drops.push(pkt.id);
                        continue;
                    }
                    return Some((pkt, false));
                }
                let qdelay = (now - pkt.t) as f64 / 1e9;
                let laqm = if !several {
                    0.0
                } else if qdelay >= MIN_TH + RANGE {
                    1.0
                } else if qdelay > MIN_TH {
                    (qdelay - MIN_TH) / RANGE
                } else {
                    0.0
                };
                let p_l = laqm.max(self.p_cl);
                self.l_count += p_l;
                if self.l_count > 1.0 {
                    self.l_count -= 1.0;
                    return Some((pkt, true));
                }
                return Some((pkt, false));
            }
            let pkt = self.cq.pop_front().unwrap();
            // No draw while p_C is 0 (`p_C > rand()` cannot hold).
            if self.p_c > 0.0 && self.p_c > rng.unit() {
                if !(self.ecn && pkt.ecn != 0) || overload {
                    drops.push(pkt.id);
                    continue;
                }
                return Some((pkt, true));
            }
            return Some((pkt, false));
        }
        None
    }
    fn oldest(&self) -> Option<u64> {
        self.lq.iter().chain(&self.cq).map(|p| p.t).min()
    }
    fn t_update(&self) -> Option<u64> {
        Some(15 * MS)
    }
    fn update(&mut self, now: u64) {
        let curq = self.cq.front().map_or(0.0, |h| (now - h.t) as f64 / 1e9);
        self.p += 0.15 * (curq - PI2_TARGET) + 3.0 * (curq - self.prevq);
        self.p = self.p.clamp(0.0, 1.0);
        self.p_cl = (K * self.p).min(1.0);
        self.p_c = self.p * self.p;
        self.prevq = curq;
    }
}

fn fifo(limit: usize, drop_head: bool) -> Box<dyn Reference> {
    Box::new(Fifo { q: VecDeque::new(), limit, drop_head })
}
fn codel() -> Box<dyn Reference> {
    Box::new(Codel { q: VecDeque::new(), bytes: 0, limit: 1000, vars: CodelVars::default() })
}
fn fq_codel() -> Box<dyn Reference> {
    fq_codel_limited(10_240)
}
fn fq_codel_limited(limit: usize) -> Box<dyn Reference> {
    Box::new(FqCodel {
        flows: vec![FqFlow::default(); FLOWS],
        new_flows: VecDeque::new(),
        old_flows: VecDeque::new(),
        total: 0,
        packets: 0,
        limit,
    })
}
fn red() -> Box<dyn Reference> {
    let s = wire(1514) as f64;
    Box::new(Red {
        q: VecDeque::new(),
        bytes: 0,
        limit: 1000,
        avg: 0.0,
        count: -1,
        q_time: 0,
        min_th: 5.0 * 1514.0,
        max_th: 15.0 * 1514.0,
        max_p: 0.1,
        w_q: 0.002,
        s,
    })
}
fn pie() -> Box<dyn Reference> {
    Box::new(Pie {
        q: VecDeque::new(),
        bytes: 0,
        limit: 1000,
        drop_prob: 0.0,
        qdelay: 0.0,
        qdelay_old: 0.0,
        burst_allowance: MAX_BURST,
        accu_prob: 0.0,
    })
}
fn dualpi2(ecn: bool) -> Box<dyn Reference> {
    Box::new(DualPi2 {
        lq: VecDeque::new(),
        cq: VecDeque::new(),
        limit_bytes: RATE / 8 / 4,
        ecn,
        p: 0.0,
        p_cl: 0.0,
        p_c: 0.0,
        prevq: 0.0,
        l_count: 0.0,
    })
}

/// One bulk source at 12 Mbit/s into the 10 Mbit/s link for 4 s: a standing queue.
fn one_flow() -> Vec<Pkt> {
    traffic(&[(12e6, 1500, 0)], 4.0, 11)
}

/// Four sources of different rates and sizes (one sparse), 13 Mbit/s in all.
fn four_flows() -> Vec<Pkt> {
    traffic(&[(6e6, 1500, 0), (4e6, 1000, 0), (2.5e6, 600, 0), (0.5e6, 200, 0)], 4.0, 12)
}

const SEED: u64 = 42;

/// Replay, the model and the reference agree on every frame; returns the reference's outcome.
fn agree(
    name: &str,
    aqm: &str,
    extra: &[&str],
    mut reference: Box<dyn Reference>,
    arrivals: &[Pkt],
) -> (Outcome, serde_json::Value) {
    let seed = direction_seed(SEED, 0);
    let want = simulate(reference.as_mut(), arrivals, seed);
    let ecn = extra.contains(&"--ecn");
    let limit = extra.iter().position(|&f| f == "--queue").map(|i| extra[i + 1]);
    let model = through_model(&aqm.parse().unwrap(), limit, ecn, arrivals, seed);
    same(&want, &model, &format!("{name}: model"));
    let mut flags = vec!["--aqm", aqm];
    flags.extend_from_slice(extra);
    let (replayed, stats) = through_replay(&flags, arrivals, SEED);
    same(&want, &replayed, &format!("{name}: replay"));
    let s = &stats;
    let dropped = s["dropped"]["aqm_drop"].as_u64().unwrap() + s["dropped"]["overlimit"].as_u64().unwrap();
    assert_eq!(dropped, want.dropped.len() as u64, "{name}: drops counted");
    assert_eq!(s["tx_packets"].as_u64().unwrap(), want.sent.len() as u64, "{name}: sent counted");
    assert_eq!(s["in_flight"].as_u64().unwrap(), 0, "{name}");
    (want, stats)
}

#[test]
fn drop_tail_and_drop_head_agree_with_a_plain_fifo() {
    let arrivals = one_flow();
    // Drop-tail as a real FIFO in the model equals the link's formula that replay uses.
    let want = simulate(fifo(50, false).as_mut(), &arrivals, 1);
    let model = through_model(&AqmConfig::DropTail, Some("50pkt"), false, &arrivals, 1);
    same(&want, &model, "droptail: model");
    let (formula, _) = through_replay(&["--queue", "51pkt"], &arrivals, 1);
    // The formula's limit counts the frame on the wire too: 51 there is 50 waiting here.
    same(&want, &formula, "droptail: formula");
    let (out, _) = agree("drophead", "drophead", &["--queue", "50pkt"], fifo(50, true), &arrivals);
    assert!(out.dropped.len() > 300, "{}", out.dropped.len());
    // The same number of frames go, but drop-head loses the oldest: its drops come earlier.
    assert_eq!(out.dropped.len(), want.dropped.len());
    assert!(out.dropped.iter().sum::<u64>() < want.dropped.iter().sum::<u64>());
}

#[test]
fn codel_agrees_with_rfc_8289_frame_for_frame() {
    for (name, arrivals) in [("one flow", one_flow()), ("four flows", four_flows())] {
        let (out, stats) = agree(name, "codel", &[], codel(), &arrivals);
        assert!(out.dropped.len() > 50, "{name}: {}", out.dropped.len());
        assert!(stats["sojourn"]["p50_ns"].as_u64().unwrap() > 0);
    }
}

#[test]
fn fq_codel_agrees_with_rfc_8290_frame_for_frame() {
    for (name, arrivals) in [("one flow", one_flow()), ("four flows", four_flows())] {
        let (out, _) = agree(name, "fq-codel", &[], fq_codel(), &arrivals);
        assert!(!out.dropped.is_empty(), "{name}");
    }
    // At a hard limit of 200 frames, twice the rate offered: the fattest flow loses a batch
    // from its head (half its bytes, at most 64 frames) each time an arrival passes the limit.
    let heavy = traffic(&[(10e6, 1500, 0), (6e6, 1000, 0), (4e6, 600, 0), (0.5e6, 200, 0)], 4.0, 13);
    let (out, stats) =
        agree("at its limit", "fq-codel", &["--queue", "200pkt"], fq_codel_limited(200), &heavy);
    let overlimit = stats["dropped"]["overlimit"].as_u64().unwrap();
    assert!(
        overlimit > 1_000 && out.dropped.len() as u64 >= overlimit,
        "{overlimit} of {}",
        out.dropped.len()
    );
    // The sparse flow (source 3, 0.5 Mbit/s) is served as a new flow: its frames barely wait,
    // while the bulk flows' frames queue.
    let arrivals = four_flows();
    let out = through_model(&"fq-codel".parse().unwrap(), None, false, &arrivals, 1);
    let wait = |src: u32| {
        let mut v: Vec<u64> = out
            .sent
            .iter()
            .filter(|(id, _)| arrivals[**id as usize].src == src)
            .map(|(id, s)| s.0 - arrivals[*id as usize].t)
            .collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    assert!(wait(3) < 2 * MS, "sparse flow median wait {} ns", wait(3));
    assert!(wait(0) > 5 * MS, "bulk flow median wait {} ns", wait(0));
}

#[test]
fn red_agrees_with_floyd_and_jacobson_and_holds_its_average_between_the_thresholds() {
    for (name, arrivals) in [("one flow", one_flow()), ("four flows", four_flows())] {
        let (out, _) = agree(name, "red", &[], red(), &arrivals);
        // Unresponsive traffic 20–30% over the rate: RED drops about that share, early.
        let share = out.dropped.len() as f64 / arrivals.len() as f64;
        assert!((0.1..0.35).contains(&share), "{name}: dropped {share}");
        // The queue (and so the wait) stays around the thresholds, 5–30 frames: 6–37 ms.
        let late = out.sojourns(&arrivals, 3_000 * MS, 5_000 * MS);
        let median = late[late.len() / 2];
        assert!((4 * MS..40 * MS).contains(&median), "{name}: median sojourn {median}");
    }
}

#[test]
fn pie_agrees_with_rfc_8033_and_holds_the_delay_near_its_target() {
    for (name, arrivals) in [("one flow", one_flow()), ("four flows", four_flows())] {
        agree(name, "pie", &[], pie(), &arrivals);
    }
    // A steady overload for 12 s: PIE's start overshoots (its probability starts at 0 and
    // climbs in small steps), then the controller settles; from 5 s on the mean queue delay
    // stays near the 15 ms target.
    for (name, sources) in [
        ("one flow", vec![(12e6, 1500, 0)]),
        ("four flows", vec![(6e6, 1500, 0), (4e6, 1000, 0), (2.5e6, 600, 0)]),
    ] {
        let arrivals = traffic(&sources, 12.0, 15);
        let out = simulate(pie().as_mut(), &arrivals, 1);
        let late = out.sojourns(&arrivals, 6_000 * MS, 13_000 * MS);
        let mean = late.iter().sum::<u64>() / late.len() as u64;
        assert!((8 * MS..25 * MS).contains(&mean), "{name}: mean sojourn {mean} ns, target 15 ms");
    }
}

#[test]
fn dualpi2_agrees_with_rfc_9332_and_keeps_each_queue_near_its_target() {
    // Classic traffic alone: the PI controller holds C's delay near 15 ms.
    let classic = one_flow();
    let (out, _) = agree("classic", "dualpi2", &[], dualpi2(false), &classic);
    let late = out.sojourns(&classic, 3_000 * MS, 5_000 * MS);
    let mean = late.iter().sum::<u64>() / late.len() as u64;
    assert!((5 * MS..30 * MS).contains(&mean), "classic mean sojourn {mean}");
    // L4S (ECT(1)) and Classic ECN (ECT(0)) together, with --ecn: L frames are marked, never
    // dropped while the load is not an overload, and wait far less than C frames.
    let mixed = traffic(&[(6e6, 1500, 1), (6e6, 1500, 2)], 4.0, 13);
    let (out, stats) = agree("mixed", "dualpi2", &["--ecn"], dualpi2(true), &mixed);
    let marked_l = out.sent.iter().filter(|(id, s)| s.2 && mixed[**id as usize].ecn == 1).count();
    assert!(marked_l > 100, "L frames marked: {marked_l}");
    assert_eq!(stats["aqm_mark"].as_u64().unwrap(), out.sent.values().filter(|s| s.2).count() as u64);
    let wait = |ecn: u8| {
        let v: Vec<u64> = out
            .sent
            .iter()
            .filter(|(id, s)| mixed[**id as usize].ecn == ecn && s.0 > 3_000 * MS)
            .map(|(id, s)| s.0 - mixed[*id as usize].t)
            .collect();
        v.iter().sum::<u64>() / v.len().max(1) as u64
    };
    assert!(wait(1) * 3 < wait(2), "L waits {} ns, C {} ns", wait(1), wait(2));
}

#[test]
fn ecn_marks_instead_of_dropping_ecn_capable_frames() {
    let arrivals = traffic(&[(12e6, 1500, 2)], 4.0, 14);
    for aqm in ["codel", "fq-codel", "pie", "red"] {
        let (out, stats) = through_replay(&["--aqm", aqm, "--ecn"], &arrivals, 1);
        let s = &stats;
        let marks = s["aqm_mark"].as_u64().unwrap();
        // PIE marks only while its probability is at most 10% (RFC 8033 §5.1): against
        // unresponsive traffic it soon drops instead.
        assert!(marks > if aqm == "pie" { 0 } else { 20 }, "{aqm}: {marks} marks");
        assert_eq!(marks, out.sent.values().filter(|x| x.2).count() as u64, "{aqm}: marks seen on the wire");
        let drops = s["dropped"]["aqm_drop"].as_u64().unwrap() + s["dropped"]["overlimit"].as_u64().unwrap();
        assert_eq!(drops as usize, out.dropped.len(), "{aqm}");
        if aqm.contains("codel") {
            // CoDel never drops an ECN-capable frame by its control law: it marks it.
            assert_eq!(s["dropped"]["aqm_drop"].as_u64().unwrap(), 0, "{aqm}");
        }
    }
}

// ---- A closed loop: AIMD sources through the model's bottleneck. ----

/// Runs `sources` AIMD flows (window +1 per round trip, halved at most once per round trip on
/// a drop or mark) of 1500-byte frames with a 20 ms base round trip through the bottleneck for
/// `secs`; returns each flow's frames delivered and the sojourn times after the first 2 s.
fn aimd(aqm: &str, limit: Option<&str>, sources: usize, secs: u64) -> (Vec<u64>, Vec<u64>) {
    let link = LinkConfig {
        queue: limit.map(|l| l.parse().unwrap()),
        ..LinkConfig::rate(pathem_model::units::Rate(RATE))
    };
    let ecn = false;
    let mut b = Bottleneck::new(&aqm.parse().unwrap(), &link, ecn);
    let mut rng = Rng::seeded(3);
    let rtt = 20 * MS;
    let mut cwnd = vec![2.0f64; sources];
    let mut inflight = vec![0u64; sources];
    let mut last_cut = vec![0u64; sources];
    let mut delivered = vec![0u64; sources];
    let mut sojourn = Vec::new();
    // Acks (and loss signals) in flight: (time, flow, lost).
    let mut events: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize, bool)>> = Default::default();
    let mut seq = 0u64;
    let mut flow_of = BTreeMap::new();
    let mut now = 0u64;
    let end = secs * 1_000 * MS;
    while now < end {
        // Each flow sends while its window allows.
        for f in 0..sources {
            while (inflight[f] as f64) < cwnd[f] {
                inflight[f] += 1;
                flow_of.insert(seq, f);
                let e = Entry {
                    seq,
                    arrival: Nanos(now),
                    len: 1500,
                    caplen: 1500,
                    ecn: 0,
                    flow: f as u32 * 7919,
                    marked: false,
                };
                let mut ds = Vec::new();
                b.serve(Nanos(now), &mut rng, &mut |d| ds.push(d));
                b.enqueue(e, &mut rng, &mut |d| ds.push(d));
                for d in ds {
                    handle(d, &flow_of, &mut events, &mut sojourn, rtt, now);
                }
                seq += 1;
            }
        }
        let next_service = b.next_event().map_or(u64::MAX, |t| t.as_nanos());
        let next_ack = events.peek().map_or(u64::MAX, |e| e.0 .0);
        now = next_service.min(next_ack).max(now);
        let mut ds = Vec::new();
        b.serve(Nanos(now), &mut rng, &mut |d| ds.push(d));
        for d in ds {
            handle(d, &flow_of, &mut events, &mut sojourn, rtt, now);
        }
        while let Some(&std::cmp::Reverse((t, f, lost))) = events.peek() {
            if t > now {
                break;
            }
            events.pop();
            inflight[f] -= 1;
            if lost {
                if t > last_cut[f] + rtt {
                    cwnd[f] = (cwnd[f] / 2.0).max(1.0);
                    last_cut[f] = t;
                }
            } else {
                delivered[f] += 1;
                cwnd[f] += 1.0 / cwnd[f];
            }
        }
    }
    let late: Vec<u64> = sojourn.iter().filter(|(t, _)| *t > 2_000 * MS).map(|s| s.1).collect();
    (delivered, late)
}

fn handle(
    d: Decision,
    flow_of: &BTreeMap<u64, usize>,
    events: &mut std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize, bool)>>,
    sojourn: &mut Vec<(u64, u64)>,
    rtt: u64,
    now: u64,
) {
    match d {
        Decision::Send { entry, start, exit, .. } => {
            sojourn.push((start.as_nanos(), (start - entry.arrival).as_nanos()));
            events.push(std::cmp::Reverse((exit.as_nanos() + rtt, flow_of[&entry.seq], false)));
        }
        // The sender learns of a loss about a round trip later (three later frames' acks).
        Decision::Drop { entry, .. } => {
            events.push(std::cmp::Reverse((now + rtt, flow_of[&entry.seq], true)))
        }
    }
}

fn median(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v[v.len() / 2]
}

#[test]
fn responsive_traffic_keeps_a_short_queue_with_an_aqm_and_a_long_one_with_drop_tail() {
    let (tail_rate, tail) = aimd("droptail", Some("400pkt"), 2, 20);
    let tail_q = median(&tail);
    // 400 frames of 1500 B at 10 Mbit/s are 490 ms: drop-tail fills it (bufferbloat).
    assert!(tail_q > 150 * MS, "drop-tail median queue delay {tail_q}");
    for (aqm, bound) in
        [("codel", 25 * MS), ("fq-codel", 25 * MS), ("pie", 40 * MS), ("dualpi2", 40 * MS), ("red", 50 * MS)]
    {
        let (rate, q) = aimd(aqm, Some("400pkt"), 2, 20);
        let m = median(&q);
        assert!(m < bound, "{aqm}: median queue delay {m} ns");
        // The link stays busy: at least 80% of what drop-tail delivered.
        let (sum, tail_sum) = (rate.iter().sum::<u64>(), tail_rate.iter().sum::<u64>());
        assert!(sum * 100 > tail_sum * 80, "{aqm}: delivered {sum}, drop-tail {tail_sum}");
    }
}

#[test]
fn fq_codel_shares_the_link_fairly_between_two_flows() {
    let (rate, _) = aimd("fq-codel", None, 2, 20);
    let (a, b) = (rate[0] as f64, rate[1] as f64);
    let jain = (a + b).powi(2) / (2.0 * (a * a + b * b));
    assert!(jain > 0.98, "Jain index {jain} ({a} vs {b})");
}

/// Every frame accounted for: `rx + duplicated = tx + dropped + in flight`, and what replay
/// wrote is what it counted as sent.
fn balances(stats: &serde_json::Value, written: usize, what: &str) {
    let n = |k: &str| stats[k].as_u64().unwrap();
    let dropped: u64 = stats["dropped"].as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
    assert_eq!(
        n("rx_packets") + n("duplicated"),
        n("tx_packets") + dropped + n("in_flight"),
        "{what}: {stats}"
    );
    assert_eq!(n("in_flight"), 0, "{what}");
    assert_eq!(n("tx_packets") as usize, written, "{what}");
}

#[test]
fn a_discipline_composes_with_the_steps_after_the_link() {
    let arrivals = traffic(&[(12e6, 1500, 2), (2e6, 200, 0)], 3.0, 16);
    for aqm in ["codel", "fq-codel", "pie", "dualpi2", "red", "drophead"] {
        let d = Dir::new();
        write_capture(&d.path("in.pcap"), arrivals.iter().map(|p| (Nanos(p.t), frame(p)))).unwrap();
        let (input, output, stats) = (d.s("in.pcap"), d.s("out.pcap"), d.s("s.json"));
        let run = pathem(&[
            "replay",
            &input,
            &output,
            "--seed",
            "5",
            "--stats",
            &stats,
            "--rate",
            "10mbit",
            "--aqm",
            aqm,
            "--ecn",
            "--loss",
            "1%",
            "--delay",
            "20ms",
            "--jitter",
            "5ms",
            "--duplicate",
            "2%",
            "--corrupt",
            "1%",
        ]);
        assert!(run.status.success(), "{aqm}: {}", String::from_utf8_lossy(&run.stderr));
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.path("s.json")).unwrap()).unwrap();
        let out = read_capture(&d.path("out.pcap")).unwrap();
        balances(&s, out.len(), aqm);
        assert!(s["duplicated"].as_u64().unwrap() > 0 && s["corrupted"].as_u64().unwrap() > 0, "{aqm}: {s}");
        // Released in order (no --reorder), each at least the delay after it arrived.
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "{aqm}: out of order");
        for (t, _, f) in &out {
            let id = u64::from_be_bytes(f[42..50].try_into().unwrap());
            if let Some(p) = arrivals.get(id as usize) {
                assert!(t.as_nanos() >= p.t + 15 * MS, "{aqm}: frame {id} early");
            }
        }
    }
}

#[test]
fn a_schedule_switches_disciplines_keeping_every_frame() {
    let arrivals = one_flow();
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), arrivals.iter().map(|p| (Nanos(p.t), frame(p)))).unwrap();
    std::fs::write(
        d.path("plan"),
        "0s --rate 10mbit --queue 300pkt\n1s --rate 10mbit --aqm codel\n2s --rate 10mbit --aqm fq-codel,target=2ms\n3s --rate 8mbit\n",
    )
    .unwrap();
    let (input, output, stats, plan) = (d.s("in.pcap"), d.s("out.pcap"), d.s("s.json"), d.s("plan"));
    let run = pathem(&["replay", &input, &output, "--seed", "1", "--stats", &stats, "--schedule", &plan]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("s.json")).unwrap()).unwrap();
    let out = read_capture(&d.path("out.pcap")).unwrap();
    balances(&s, out.len(), "schedule");
    assert!(s["dropped"]["aqm_drop"].as_u64().unwrap() > 0, "{s}");
    assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "out of order");
    // Sent at most at the link's rate: never two frames closer than 1500 B at 10 Mbit/s.
    assert!(out.windows(2).all(|w| (w[1].0 - w[0].0).as_nanos() >= wire(1500)), "faster than the link");
}

#[test]
fn bad_disciplines_get_one_line_and_exit_2() {
    let d = Dir::new();
    write_capture(&d.path("in.pcap"), one_flow().iter().take(10).map(|p| (Nanos(p.t), frame(p)))).unwrap();
    let (i, o) = (d.s("in.pcap"), d.s("out.pcap"));
    for (aqm, says) in [
        ("bogus", "names no queue discipline"),
        ("drophead,limit=5", "takes no parameters"),
        ("codel,target=200ms", "not below the interval"),
        ("codel,interval=2h", "over 1h"),
        ("fq-codel,flows=0", "1 to 65536"),
        ("fq-codel,quantum=10", "64B to 64KiB"),
        ("fq-codel,memory=2TiB", "1B to 1TiB"),
        ("red,min=10kB,max=5kB", "0 < min < max"),
        ("red,weight=2", "weight"),
        ("pie,alpha=1000", "gain over 100"),
        ("pie,t-update=0ms", "duration of 0"),
        ("dualpi2,k=0.5", "k outside 1 to 64"),
        ("codel,foo=1", "unknown key `foo`"),
    ] {
        let err = refused(&d, &["replay", &i, &o, "--rate", "10mbit", "--aqm", aqm], 2);
        assert!(err.contains("--aqm") && err.contains(says) && err.contains("accepted"), "{aqm}: {err}");
    }
    let err = refused(&d, &["replay", &i, &o, "--aqm", "codel"], 2);
    assert!(err.contains("--aqm needs --rate"), "{err}");
    let cfg = d.path("c.toml");
    std::fs::write(&cfg, "[a_to_b]\naqm = 'pie'\n").unwrap();
    let err = refused(&d, &["replay", &i, &o, "--config", cfg.to_str().unwrap()], 2);
    assert!(err.contains("--aqm needs --rate"), "{err}");
    std::fs::write(&cfg, "[a_to_b]\nrate = '1mbit'\naqm = 'fq-codel,flows=1.5'\n").unwrap();
    let err = refused(&d, &["replay", &i, &o, "--config", cfg.to_str().unwrap()], 2);
    assert!(err.contains("flows") && err.contains("accepted"), "{err}");
}

/// `bench --disciplines --json` has a row per discipline and load, with what issue readers
/// compare: drop-tail's own ratio is 1, every other ratio is a cost over drop-tail's in the
/// same round; at 95% nothing is dropped, at 150% every discipline drops and every frame is
/// sent or dropped. (Timings are not asserted: they are the machine's.)
#[test]
fn bench_disciplines_reports_each_discipline_at_both_loads() {
    let out = pathem(&[
        "bench",
        "--disciplines",
        "--rate",
        "10gbit",
        "--packets",
        "20000",
        "--runs",
        "2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["disciplines"].as_array().expect("a `disciplines` array");
    let kinds = ["droptail", "drophead", "red", "codel", "fq-codel", "pie", "dualpi2"];
    assert_eq!(rows.len(), 2 * kinds.len(), "{v}");
    for (i, r) in rows.iter().enumerate() {
        let (aqm, load) = (r["aqm"].as_str().unwrap(), r["load"].as_f64().unwrap());
        assert_eq!(aqm, kinds[i % kinds.len()], "{r}");
        assert_eq!(load, [0.95, 1.5][i / kinds.len()], "{r}");
        let (ns, ratio) = (r["ns_per_packet"].as_f64().unwrap(), r["ratio_to_droptail"].as_f64().unwrap());
        assert!(ns > 0.0 && ratio > 0.0 && ratio.is_finite(), "{r}");
        // Drop-tail runs between every two others: seven runs a round.
        let runs = r["runs"].as_array().unwrap().len();
        match aqm {
            "droptail" => assert!(runs == 14 && ratio == 1.0, "{r}"),
            _ => assert_eq!(runs, 2, "{r}"),
        }
        let (sent, dropped) = (r["sent"].as_u64().unwrap(), r["dropped"].as_u64().unwrap());
        assert_eq!(sent + dropped, 20_000, "{r}");
        assert_eq!(dropped > 0, load > 1.0, "{r}");
        assert_eq!(r["marked"], 0, "frames that are not ECN-capable are never marked: {r}");
    }
}
