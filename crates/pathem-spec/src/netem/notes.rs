//! Notes on a netem spec: how its words were read, and where pathem's meaning differs from
//! NetEm's for it.

use super::*;

impl NetemSpec {
    /// How tc's words were read, and where pathem's meaning differs from NetEm's for this spec.
    pub fn notes(&self) -> Vec<String> {
        let p = &self.parsed;
        let mut n = self.reading.clone();
        let jitter = p.delay.as_ref().and_then(|(_, d)| d.jitter).unwrap_or_default();
        if let Some((_, w)) = &p.rate {
            if w.overhead.is_none() {
                n.push(format!(
                    "rate {} counts frames without framing (--overhead 0), as NetEm does unless PACKETOVERHEAD is \
                     given; pathem's --rate alone adds 24 bytes",
                    w.rate
                ));
            }
            let limit = p.limit.map_or(DEFAULT_LIMIT, |(_, l)| l);
            let default = if p.limit.is_none() { ", NetEm's default" } else { "" };
            n.push(format!(
                "the rate's queue holds {limit} frames (--queue {limit}pkt{default}); NetEm counts the frames held \
                 in delay against its limit too, pathem only those waiting for the rate"
            ));
            if jitter > Nanos::ZERO {
                n.push(
                    "with a rate NetEm keeps jittered frames in order, and so does pathem here; NetEm adds the jitter \
                     before the rate's queue, pathem after it"
                        .into(),
                );
            }
            if p.loss.is_some() {
                n.push(
                    "a lost frame has used the rate here (loss comes after the link); NetEm loses it before"
                        .into(),
                );
            }
        } else {
            if let Some((_, l)) = p.limit {
                n.push(format!("limit {l} bounds the frames held in delay (--limit {l}), as NetEm's does"));
            }
            if jitter > Nanos::ZERO {
                n.push(
                    "jitter lets frames overtake, as NetEm sends frames in order of their send time: --reorder \
                     (add --no-reorder to keep them in order)"
                        .into(),
                );
            }
        }
        if jitter > JITTER_CAP {
            n.push(format!(
                "jitter {jitter} is above NetEm's cap of 2.147483647s, which NetEm would use instead"
            ));
        }
        if let Some((_, DelayWords { corr: Some(c), .. })) = &p.delay {
            if c.get() > 0.0 && jitter > Nanos::ZERO {
                let narrow = ((1.0 - c.get()) / (1.0 + c.get())).sqrt();
                n.push(format!(
                    "delay correlation {c}: NetEm's correlated draw narrows the variation (a uniform jitter's spread \
                     ×{narrow:.2}); pathem takes the draw through the distribution's quantile, so the delays are \
                     correlated as the spec says, where NetEm's kernel keeps little of it"
                ));
            }
        }
        let effective = |what: &str, c: &Chance| {
            c.corr().map(|corr| {
                let got = Correlated::hit_rate(c.p.get(), corr.get());
                format!(
                    "{what} {} {corr}: NetEm's correlated draw makes that {} of frames, not {} (its known weakness, \
                     kept as NetEm does it)",
                    c.p,
                    four_figures(got),
                    c.p
                )
            })
        };
        if let Some((_, kind, cfg)) = &p.loss {
            match (kind, cfg) {
                (_, LossConfig::Correlated { p: lp, corr }) => {
                    n.extend(effective("loss", &Chance { p: *lp, corr: Some(*corr) }));
                    n.push("for bursts at a chosen rate, loss gemodel or loss state".into());
                }
                (LossKind::Gemodel { r_given }, LossConfig::GilbertElliott { p: gp, r, loss_bad, loss_good }) => {
                    if !r_given {
                        n.push(format!(
                            "loss gemodel {gp}: R defaults to 1 − p = {r} as tc sets it, so a bad spell lasts about one \
                             frame: nearly random loss"
                        ));
                    }
                    n.push(format!(
                        "loss gemodel: the third value (1-H, {loss_bad}) is the loss probability in the bad state and \
                         the fourth (1-K, {loss_good}) in the good state, as NetEm uses them (--loss ge:…,loss-bad=…,\
                         loss-good=…); long-run loss {}; pathem starts in the likelier state, NetEm in the good one",
                        four_figures(cfg.loss_rate())
                    ));
                }
                (LossKind::State, _) => n.push(format!(
                    "loss state: what is not given defaults as tc sets it (p31 = 1 − p13, p32 = 0, p23 = 100%, \
                     p14 = 0); long-run loss {}",
                    four_figures(cfg.loss_rate())
                )),
                _ => {}
            }
        }
        for (what, c) in [("duplicate", &p.duplicate), ("corrupt", &p.corrupt), ("reorder", &p.reorder)] {
            if let Some(line) = c.as_ref().and_then(|(_, c)| effective(what, c)) {
                n.push(line);
            }
        }
        if let Some((_, c)) = p.reorder.as_ref().filter(|(_, c)| c.p.get() > 0.0) {
            let gap = p.gap.map_or(1, |(_, g)| g.max(1));
            let after = if gap > 1 { format!(" once {} were delayed", gap - 1) } else { String::new() };
            n.push(format!(
                "reorder {}: a frame is sent at once with probability {}{after} (--skip-delay); it skips the delay \
                 and the slots, not the rate, and overtakes the delayed frames",
                c.p, c.p
            ));
        }
        if let Some((_, d)) = &p.distribution {
            n.push(dist_note("distribution", d));
        }
        // tc reads the same tables for slots (and has no uniform one).
        if let Some((_, SlotWords { spacing: SlotSpacing::Dist { name, .. }, .. })) = &p.slot {
            n.push(dist_note("slot distribution", name));
        }
        if p.ecn.is_some() {
            n.push(
                "ecn: a loss-model drop of an ECN-capable frame becomes a CE mark, as in NetEm; pathem marks instead of \
                 dropping at the rate's queue limit too"
                    .into(),
            );
        }
        if p.duplicate.is_some() {
            n.push(
                "duplicate: the copy leaves with the original, where NetEm sends it through again (its own delay); a \
                 frame both duplicated and lost is lost here, sent once by NetEm"
                    .into(),
            );
        }
        n
    }
}

/// How pathem draws the distribution `d` that `what` (`distribution`, `slot distribution`)
/// names, against NetEm's table of that name.
fn dist_note(what: &str, d: &DistName) -> String {
    match d {
        DistName::Named(Dist::Uniform) => format!(
            "{what} uniform is pathem's (delay ± jitter, evenly); tc has no uniform table and refuses it"
        ),
        DistName::Named(Dist::Pareto) => format!(
            "{what} pareto is pathem's exact one (mean 0, std 1 jitter); NetEm's pareto.dist table is scaled by \
             4/3 and clipped at 4 jitters (mean −0.03, std 0.82 jitter); give the table's path to use NetEm's"
        ),
        DistName::Named(d) => format!(
            "{what} {d} is pathem's exact one; NetEm's {d}.dist table has 4096 steps and is clipped at ±4 jitters; \
             give the table's path ({}) to use NetEm's",
            tc_table_path(&d.to_string())
        ),
        DistName::Table(..) => {
            format!("a tc table for the {what} is drawn entry by entry as NetEm does (delay + jitter · value / 8192)")
        }
    }
}

/// Where tc keeps the table NAME on this machine (its first folder holding it), or where
/// upstream tc does.
fn tc_table_path(name: &str) -> String {
    let found = crate::path::tc_table_candidates(name).into_iter().find(|p| p.exists());
    let path = found.unwrap_or_else(|| std::path::Path::new("/usr/lib/tc").join(format!("{name}.dist")));
    path.to_string_lossy().into_owned()
}

/// A fraction as a percentage to four significant figures (`0.0002513` → `0.02513%`,
/// `0.6666` → `66.67%`), for what a model works out rather than what the user wrote.
fn four_figures(x: f64) -> String {
    pathem_model::units::percent(x, 4)
}

#[cfg(test)]
mod tests {
    #[test]
    fn four_figures_are_percentages() {
        for (x, want) in [
            (0.0, "0%"),
            (1.0, "100%"),
            (0.01, "1%"),
            (2.0 / 3.0, "66.67%"),
            (0.000_251_332_527_786, "0.02513%"),
            (0.064_545_454_545, "6.455%"),
            (1e-12, "0.0000000001%"),
        ] {
            assert_eq!(super::four_figures(x), want, "{x}");
        }
    }
}
