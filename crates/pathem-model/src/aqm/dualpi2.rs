//! DualPI2 (RFC 9332, the example of its Appendix A): two queues that share the link. ECT(1)
//! and CE frames (L4S) go to the L queue, the rest to the Classic (C) queue. A PI controller
//! updates a base probability `p'` every `t_update` from the C queue's delay; the C queue
//! drops (or marks) with `p'²`, the L queue marks with `max(k·p', ramp)` where the ramp is L's
//! own shallow marking from `min-th` over `range` of its sojourn time, applied linearly (the
//! RFC's `recur`, not a random draw). Under overload (`p'²` at its cap of `1/k²`), both queues
//! drop with `p'²` instead of marking. The scheduler is a time-shifted FIFO: L's head goes
//! first unless C's head has waited `tshift` longer.

use super::{AqmDrop, Discipline, Entry, Fifo};
use crate::rng::Rng;
use crate::spec::{error, KeyValues, Number};
use crate::time::Nanos;
use crate::units::{Duration, UnitError};
use std::str::FromStr;

/// DualPI2's parameters (RFC 9332 Appendix A.1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DualPi2Config {
    /// The Classic queue's delay target (15 ms).
    pub target: Nanos,
    /// PI update interval: min(target, RTT_max / 3) with RTT_max 100 ms (15 ms).
    pub t_update: Nanos,
    /// Integral gain, 0.1 · t_update / RTT_max² (0.15 Hz), and proportional gain,
    /// 0.3 / RTT_max (3 Hz).
    pub alpha: f64,
    pub beta: f64,
    /// Coupling factor (2).
    pub k: f64,
    /// The L queue's marking ramp: from `min_th` (800 µs) over `range` (400 µs) of sojourn.
    pub min_th: Nanos,
    pub range: Nanos,
    /// How much longer a C frame must have waited to go before L's head (2 × target).
    pub tshift: Nanos,
}

impl Default for DualPi2Config {
    fn default() -> Self {
        DualPi2Config {
            target: Nanos::from_millis(15),
            t_update: Nanos::from_millis(15),
            alpha: 0.15,
            beta: 3.0,
            k: 2.0,
            min_th: Nanos::from_micros(800),
            range: Nanos::from_micros(400),
            tshift: Nanos::from_millis(30),
        }
    }
}

const DUALPI2_ACCEPTED: &str =
    "dualpi2[,target=DUR][,t-update=DUR][,alpha=HZ][,beta=HZ][,k=N][,min-th=DUR][,range=DUR][,tshift=DUR] \
     (defaults 15ms, 15ms, 0.15, 3, 2, 800us, 400us, 30ms; durations up to 1h, target and t-update above 0, \
     gains up to 100, k from 1 to 64)";

impl FromStr for DualPi2Config {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let body = s.trim().strip_prefix("dualpi2").filter(|b| b.is_empty() || b.starts_with(','));
        let body = body.ok_or_else(|| error(s, "is not a DualPI2 spec", DUALPI2_ACCEPTED))?;
        let mut kv = KeyValues::parse(s, body, DUALPI2_ACCEPTED)?;
        let d = DualPi2Config::default();
        let dur = |kv: &mut KeyValues, k: &str, d: Nanos| kv.get::<Duration>(k).map(|v| v.map_or(d, |v| v.0));
        let target = dur(&mut kv, "target", d.target)?;
        let t_update = dur(&mut kv, "t-update", d.t_update)?;
        let alpha = kv.get::<Number>("alpha")?.map_or(d.alpha, |v| v.0);
        let beta = kv.get::<Number>("beta")?.map_or(d.beta, |v| v.0);
        let k = kv.get::<Number>("k")?.map_or(d.k, |v| v.0);
        let min_th = dur(&mut kv, "min-th", d.min_th)?;
        let range = dur(&mut kv, "range", d.range)?;
        let tshift_given = kv.get::<Duration>("tshift")?.map(|v| v.0);
        let tshift = tshift_given.unwrap_or(Nanos(target.as_nanos().saturating_mul(2)));
        kv.finish()?;
        if target == Nanos::ZERO || t_update == Nanos::ZERO {
            return Err(error(s, "has a target or t-update of 0", DUALPI2_ACCEPTED));
        }
        let max = crate::limits::MAX_DELAY;
        let durations = [("target", target), ("t-update", t_update), ("min-th", min_th), ("range", range)];
        if let Some((key, t)) = durations.into_iter().find(|&(_, t)| t > max) {
            return Err(error(s, format!("has {key} {t}, over 1h"), DUALPI2_ACCEPTED));
        }
        if tshift > max {
            let why = if tshift_given.is_some() { "" } else { " (2 × target, as no tshift is given)" };
            return Err(error(s, format!("has tshift {tshift}{why}, over 1h"), DUALPI2_ACCEPTED));
        }
        if alpha > 100.0 || beta > 100.0 || !(1.0..=64.0).contains(&k) {
            return Err(error(s, "has a gain over 100 or k outside 1 to 64", DUALPI2_ACCEPTED));
        }
        // A whole coupling factor, as Linux's dualpi2 takes it (`k=N`).
        if k.fract() != 0.0 {
            return Err(error(s, format!("has k {k}, not a whole number"), DUALPI2_ACCEPTED));
        }
        Ok(DualPi2Config { target, t_update, alpha, beta, k, min_th, range, tshift })
    }
}

/// DualPI2's two queues and its controller.
#[derive(Debug)]
pub struct DualPi2 {
    cfg: DualPi2Config,
    /// Mark ECT(0) frames in the C queue instead of dropping them.
    ecn: bool,
    l: Fifo,
    c: Fifo,
    /// The base probability p', and what it gives: p_CL = k·p' and p_C = p'².
    p: f64,
    p_cl: f64,
    p_c: f64,
    prevq: Nanos,
    /// The last update changed neither p' nor `prevq`.
    unchanged: bool,
    /// The L queue's `recur` accumulator.
    l_count: f64,
    /// The classic probability's cap, 1/k² (at most 1), worked out once.
    p_cmax: f64,
}

impl DualPi2 {
    pub fn new(cfg: DualPi2Config, ecn: bool) -> DualPi2 {
        DualPi2 {
            cfg,
            ecn,
            l: Fifo::default(),
            c: Fifo::default(),
            p: 0.0,
            p_cl: 0.0,
            p_c: 0.0,
            prevq: Nanos::ZERO,
            unchanged: false,
            l_count: 0.0,
            p_cmax: (1.0 / (cfg.k * cfg.k)).min(1.0),
        }
    }

    pub fn config(&self) -> &DualPi2Config {
        &self.cfg
    }

    /// The classifier: ECT(1) and CE to L, the rest to C.
    #[inline]
    fn classify(&mut self, e: Entry) {
        if e.ecn & 1 == 1 {
            self.l.push(e)
        } else {
            self.c.push(e)
        }
    }

    /// The native L4S ramp on a sojourn time.
    fn laqm(&self, sojourn: Nanos) -> f64 {
        let max_th = self.cfg.min_th + self.cfg.range;
        if sojourn >= max_th {
            1.0
        } else if sojourn > self.cfg.min_th {
            (sojourn - self.cfg.min_th).as_nanos() as f64 / self.cfg.range.as_nanos() as f64
        } else {
            0.0
        }
    }

    /// RFC 9332's `dualpi2_dequeue` at `now`.
    #[inline(always)]
    fn serve(&mut self, now: Nanos, rng: &mut Rng, dropped: &mut dyn FnMut(Entry)) -> Option<(Entry, bool)> {
        let overload = self.p_c >= self.p_cmax;
        loop {
            let from_l = match (self.l.front(), self.c.front()) {
                (Some(l), Some(c)) => l.arrival <= c.arrival.saturating_add(self.cfg.tshift),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return None,
            };
            if from_l {
                let several = self.l.len() > 1;
                let e = self.l.pop()?;
                if overload {
                    if self.p_c > rng.unit() {
                        dropped(e);
                        continue;
                    }
                    return Some((e, false));
                }
                let native = if several { self.laqm(now.saturating_sub(e.arrival)) } else { 0.0 };
                let p_l = native.max(self.p_cl);
                self.l_count += p_l;
                let mark = self.l_count > 1.0;
                if mark {
                    self.l_count -= 1.0;
                }
                return Some((e, mark));
            }
            let e = self.c.pop()?;
            // No draw while p_C is 0: nothing could come of it.
            if self.p_c > 0.0 && self.p_c > rng.unit() {
                if !super::ecn::marks(self.ecn, e.ect(), !overload) {
                    dropped(e);
                    continue;
                }
                return Some((e, true));
            }
            return Some((e, false));
        }
    }

    /// RFC 9332's `dualpi2_update` at `now`: the PI controller on the C queue's head delay.
    fn pi_update(&mut self, now: Nanos) {
        let curq = self.c.front().map_or(Nanos::ZERO, |h| now.saturating_sub(h.arrival));
        let secs = |t: Nanos| t.as_nanos() as f64 / 1e9;
        let before = (self.p, self.prevq);
        self.p += self.cfg.alpha * (secs(curq) - secs(self.cfg.target))
            + self.cfg.beta * (secs(curq) - secs(self.prevq));
        self.p = self.p.clamp(0.0, 1.0);
        self.p_cl = (self.cfg.k * self.p).min(1.0);
        self.p_c = self.p * self.p;
        self.prevq = curq;
        self.unchanged = before == (self.p, self.prevq);
    }

    fn take_every(&mut self) -> Vec<Entry> {
        let mut all = Vec::with_capacity(self.l.len() + self.c.len());
        while let Some(e) = self.l.pop() {
            all.push(e);
        }
        while let Some(e) = self.c.pop() {
            all.push(e);
        }
        all
    }
}

impl Discipline for DualPi2 {
    fn backlog(&self) -> (usize, u64) {
        (self.l.len() + self.c.len(), self.l.bytes() + self.c.bytes())
    }
    #[inline]
    fn enqueue(&mut self, e: Entry, _: bool, _: bool, _: &mut Rng) -> Result<(), (Entry, AqmDrop)> {
        self.classify(e);
        Ok(())
    }
    #[inline(always)]
    fn dequeue(
        &mut self,
        now: Nanos,
        rng: &mut Rng,
        dropped: &mut dyn FnMut(Entry),
    ) -> Option<(Entry, bool)> {
        self.serve(now, rng, dropped)
    }
    fn update_interval(&self) -> Option<Nanos> {
        Some(self.cfg.t_update)
    }
    fn update(&mut self, at: Nanos) {
        self.pi_update(at)
    }
    /// True when an update with empty queues would change nothing.
    fn steady(&self) -> bool {
        self.p == 0.0 && self.prevq == Nanos::ZERO
    }
    /// At p = 1 with the classic queue's head already past the target, every update until a
    /// frame leaves adds more than nothing (the head's sojourn only grows) and p stays 1: only
    /// `prevq` moves, to the sojourn at the last update, which that update alone sets. With
    /// the classic queue empty, an update that changed nothing is followed by more of the same
    /// until a frame arrives (the idle update's step alpha·target may vanish: alpha = 0, or
    /// too small a step to move p' in floating point, which `steady` does not cover).
    fn settled(&self) -> bool {
        (self.p >= 1.0 && !self.c.is_empty() && self.prevq > self.cfg.target)
            || (self.c.is_empty() && self.unchanged)
    }
    fn take_all(&mut self) -> Vec<Entry> {
        self.take_every()
    }
    fn requeue(&mut self, e: Entry) {
        self.classify(e)
    }
    /// Keeps the controller's state.
    fn inherit(&mut self, old: DualPi2) {
        (self.p, self.p_cl, self.p_c, self.prevq, self.l_count) =
            (old.p, old.p_cl, old.p_c, old.prevq, old.l_count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_defaults_and_ranges() {
        assert_eq!("dualpi2".parse::<DualPi2Config>().unwrap(), DualPi2Config::default());
        let c: DualPi2Config = "dualpi2,target=10ms,k=4,range=0us".parse().unwrap();
        assert_eq!(
            (c.target, c.k, c.range, c.tshift),
            (Nanos::from_millis(10), 4.0, Nanos::ZERO, Nanos::from_millis(20))
        );
        for bad in
            ["dualpi2,target=0ms", "dualpi2,k=0.5", "dualpi2,alpha=1000", "dualpi2,min-th=2h", "dualpi3"]
        {
            assert!(bad.parse::<DualPi2Config>().is_err(), "{bad}");
        }
        // A fractional k, and a gain above 0 too small to hold, are refused as such.
        for (bad, says) in
            [("dualpi2,k=1.5", "k 1.5, not a whole number"), ("dualpi2,alpha=1e-400", "too small")]
        {
            let e = bad.parse::<DualPi2Config>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        // A target within its 1 h whose default tshift (twice it) is not: the refusal names
        // tshift and where its value came from; given, a tshift of 1 h or less is taken.
        let e = "dualpi2,target=31min".parse::<DualPi2Config>().unwrap_err().to_string();
        assert!(e.contains("tshift") && e.contains("2 × target"), "{e}");
        let c: DualPi2Config = "dualpi2,target=31min,tshift=1h".parse().unwrap();
        assert_eq!((c.target, c.tshift), (Nanos::from_secs(31 * 60), Nanos::from_secs(3600)));
        let e = "dualpi2,min-th=2h".parse::<DualPi2Config>().unwrap_err().to_string();
        assert!(e.contains("min-th"), "{e}");
    }
}
