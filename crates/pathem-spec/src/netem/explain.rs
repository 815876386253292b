//! A netem spec as pathem flags and config lines ([`explain`]), and a pathem path as a netem
//! spec ([`to_netem`]).

use super::*;

/// A netem spec explained in pathem's terms.
#[derive(Clone, Debug, PartialEq)]
pub struct Explained {
    /// The equivalent flags, e.g. `--delay 100ms --jitter 10ms --delay-correlation 25% --reorder`.
    pub flags: String,
    /// The same as the lines of a config file's direction table (`delay = "100ms"`).
    pub toml: String,
    /// How tc's words were read, and where pathem's meaning differs from NetEm's.
    pub notes: Vec<String>,
    /// The path both make.
    pub path: PathConfig,
}

/// The flags (without dashes) and values that say what `f`'s netem-expressible fields say, in
/// the order the help lists them; a switch has no value.
fn flag_values(f: &PathSpec) -> Vec<(&'static str, Option<String>)> {
    let mut out: Vec<(&'static str, Option<String>)> = Vec::new();
    let mut put = |key, value: Option<String>| {
        if let Some(v) = value {
            out.push((key, Some(v)));
        }
    };
    put("delay", f.delay.map(|d| d.0.to_string()));
    put("jitter", f.jitter.map(|d| d.0.to_string()));
    put("delay-dist", f.delay_dist.as_ref().map(|d| d.to_string()));
    put("delay-correlation", f.delay_correlation.map(|c| c.spec()));
    put("skip-delay", f.skip_delay.map(|s| s.spec()));
    put(
        "loss",
        f.loss.as_ref().and_then(|l| match l {
            LossSpec::Model(m) => m.spec(),
            LossSpec::Trace(p) => Some(format!("trace:{}", p.display())),
        }),
    );
    put("rate", f.rate.map(|r| r.to_string()));
    put("overhead", f.overhead.map(|o| o.to_string()));
    put("cell", f.cell.map(|c| format!("{},{}", c.size, c.overhead)));
    put("limit", f.limit.map(|n| n.to_string()));
    put(
        "queue",
        f.queue.map(|q| match q {
            QueueLimit::Packets(n) => format!("{n}pkt"),
            QueueLimit::Bytes(b) => format!("{b}B"),
        }),
    );
    put("slot", f.slot.as_ref().map(|s| s.to_string()));
    put("duplicate", f.duplicate.map(|p| p.spec()));
    put("duplicate-correlation", f.duplicate_correlation.map(|p| p.spec()));
    put("corrupt", f.corrupt.map(|p| p.spec()));
    put("corrupt-correlation", f.corrupt_correlation.map(|p| p.spec()));
    if f.reorder {
        out.push(("reorder", None));
    }
    if f.ecn {
        out.push(("ecn", None));
    }
    out
}

/// Explains a netem spec: the pathem flags and config lines that make the same path, and the
/// notes on how it was read and where the meanings differ. Reads the tc tables it names.
pub fn explain(spec: &str) -> Result<Explained, SpecError> {
    let netem = NetemSpec::parse(spec).map_err(|error| SpecError::Netem { spec: spec.into(), error })?;
    let flags = netem.flags();
    let path = flags.to_config().map_err(|e| netem.blame(e))?;
    let values = flag_values(&flags);
    let words: Vec<String> = values
        .iter()
        .map(|(k, v)| match v {
            Some(v) => format!("--{k} {}", quote_word(v)),
            None => format!("--{k}"),
        })
        .collect();
    let lines: Vec<String> = values
        .iter()
        .map(|(k, v)| match v {
            // The overhead and the limit are TOML integers; everything else a string.
            Some(v) if *k == "overhead" || *k == "limit" => format!("{k} = {v}"),
            Some(v) => format!("{k} = \"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")),
            None => format!("{k} = true"),
        })
        .collect();
    Ok(Explained { flags: words.join(" "), toml: lines.join("\n"), notes: netem.notes(), path })
}

/// A percentage as tc reads it back exactly where one does (a netem PERCENT is always a
/// percentage), else the nearest.
fn percent(p: Probability) -> String {
    p.percent().unwrap_or_else(|| format!("{}%", p.get() * 100.0))
}

/// Percentages, without the trailing ones that equal tc's defaults (`loss state`, `loss
/// gemodel`): tc computes those itself, exactly as the netem reader does.
fn percents(values: &[Probability], defaults: &[Option<f64>]) -> String {
    let mut n = values.len();
    while n > 1 && defaults[n - 1].and_then(Probability::new) == Some(values[n - 1]) {
        n -= 1;
    }
    values[..n].iter().map(|p| percent(*p)).collect::<Vec<_>>().join(" ")
}

/// The word tc reads the table NAME by: tc takes a NAME and opens NAME.dist in its own folder,
/// never a path, so a table given as a FILE is written as its NAME only when it lies in one of
/// tc's folders.
fn table_word(name: &str) -> Result<String, SpecError> {
    table_word_among(name, &crate::path::tc_table_search())
}

/// [`table_word`] with tc's folders `tc_dirs`.
pub(super) fn table_word_among(name: &str, tc_dirs: &[std::path::PathBuf]) -> Result<String, SpecError> {
    let no = |reason: &str| Err(SpecError::NotNetem { setting: format!("tc:{name}"), reason: reason.into() });
    let word = match crate::path::names_a_file(name) {
        false => name.to_string(),
        true => {
            let path = std::path::Path::new(name);
            let in_tc = path.extension().is_some_and(|e| e == "dist")
                && path.parent().is_some_and(|d| tc_dirs.iter().any(|t| t == d));
            match (in_tc, path.file_stem()) {
                (true, Some(stem)) => stem.to_string_lossy().into_owned(),
                _ => return no(
                    "tc reads a table only by its NAME, as NAME.dist in its own folder: put the file there \
                         and give tc:NAME",
                ),
            }
        }
    };
    if word.contains(char::is_whitespace) {
        return no("its name has white space, which a netem spec cannot hold");
    }
    Ok(word)
}

/// The netem spec that makes `spec`'s path, where NetEm has the words for everything in it;
/// the error names the first setting it has none for. Reads the files `spec` names.
pub fn to_netem(spec: &PathSpec) -> Result<String, SpecError> {
    let flags = spec.resolved()?;
    let cfg = flags.to_config()?;
    let no = |setting: String, reason: &str| Err(SpecError::NotNetem { setting, reason: reason.into() });
    if spec.has_classes() {
        return no(
            "--class".into(),
            "one netem is one path; per-flow paths take a prio qdisc, filters and a netem per band",
        );
    }
    if let Some(p) = &cfg.police {
        return no(format!("--police {p}"), "NetEm has no policer");
    }
    if cfg.aqm != pathem_model::aqm::AqmConfig::DropTail {
        return no(format!("--aqm {}", cfg.aqm.name()), "NetEm's queue is drop-tail");
    }
    if let Some(b) = cfg.ber {
        return no(
            format!("--ber {}", b.get()),
            "NetEm corrupts frames, it does not drop them for bit errors",
        );
    }
    if let Some(LossConfig::Trace(_)) = &cfg.loss {
        return no("--loss trace:".into(), "NetEm has no loss trace");
    }
    if cfg.delay.trace.is_some() {
        return no("--delay-trace".into(), "NetEm's delay does not follow a trace");
    }
    if let Some(h) = cfg.delay.half_life {
        return no(
            format!("--delay-half-life {h}"),
            "NetEm correlates delays frame to frame (--delay-correlation)",
        );
    }
    let mut words: Vec<String> = Vec::new();
    match (cfg.limit, &cfg.link) {
        (Some(n), None) => words.push(format!("limit {n}")),
        (Some(n), Some(_)) => {
            return no(
                format!("--limit {n} with a rate"),
                "a netem spec's limit with a rate is read as the rate's queue (--queue Npkt)",
            )
        }
        (None, _) => {}
    }
    if let Some(link) = &cfg.link {
        let Server::Rate(rate) = &link.server else {
            return no("--rate-trace".into(), "NetEm's rate is fixed");
        };
        if rate.0 % 8 != 0 {
            return no(format!("--rate {rate}"), "NetEm's rate is whole bytes per second");
        }
        match link.queue {
            Some(QueueLimit::Packets(n)) if n <= u64::from(u32::MAX) => words.push(format!("limit {n}")),
            Some(QueueLimit::Packets(n)) => {
                return no(format!("--queue {n}pkt"), "NetEm's limit is at most 4294967295")
            }
            Some(QueueLimit::Bytes(b)) => return no(format!("--queue {b}B"), "NetEm's limit counts frames"),
            None => return no(
                format!("--rate {rate} without --queue"),
                "NetEm always bounds the rate's queue (limit, 1000 frames unless given): add --queue Npkt",
            ),
        }
    }
    let d = &cfg.delay;
    if d.jitter > super::JITTER_CAP {
        return no(
            format!("--jitter {}", d.jitter),
            "NetEm's jitter is at most 2.147483647s (a 32-bit draw)",
        );
    }
    if d.base > Nanos::ZERO || d.jitter > Nanos::ZERO {
        let mut w = format!("delay {}", d.base);
        if d.jitter > Nanos::ZERO {
            w.push_str(&format!(" {}", d.jitter));
            if let Some(c) = d.correlation {
                w.push_str(&format!(" {}", percent(c)));
            }
        }
        words.push(w);
        if d.jitter > Nanos::ZERO {
            match &d.dist {
                Dist::Uniform => {}
                Dist::Normal | Dist::Pareto | Dist::ParetoNormal => {
                    words.push(format!("distribution {}", d.dist))
                }
                Dist::Custom(_) => match &flags.delay_dist {
                    Some(DistSpec::Tc(name)) => words.push(format!("distribution {}", table_word(name)?)),
                    _ => return no("--delay-dist".into(), "the tc table's name is unknown"),
                },
                Dist::Exponential | Dist::Table(_) => {
                    return no(
                        format!("--delay-dist {}", d.dist),
                        "NetEm has uniform, normal, pareto, paretonormal and tc tables",
                    )
                }
            }
        }
    }
    match &cfg.loss {
        Some(LossConfig::Random(p)) => words.push(format!("loss random {}", percent(*p))),
        Some(LossConfig::Correlated { p, corr }) => {
            words.push(format!("loss random {} {}", percent(*p), percent(*corr)))
        }
        Some(LossConfig::GilbertElliott { p, r, loss_bad, loss_good }) => words.push(format!(
            "loss gemodel {}",
            percents(&[*p, *r, *loss_bad, *loss_good], &[None, Some(1.0 - p.get()), Some(1.0), Some(0.0)])
        )),
        Some(LossConfig::FourState { p13, p31, p32, p23, p14 }) => words.push(format!(
            "loss state {}",
            percents(
                &[*p13, *p31, *p32, *p23, *p14],
                &[None, Some(1.0 - p13.get()), Some(0.0), Some(1.0), Some(0.0)]
            )
        )),
        Some(LossConfig::Trace(_)) | None => {}
    }
    if cfg.ecn {
        // As tc (and pathem's netem parser): a random loss of 0% is no loss model.
        let loses = match &cfg.loss {
            Some(LossConfig::Random(p) | LossConfig::Correlated { p, .. }) => p.get() > 0.0,
            other => other.is_some(),
        };
        if !loses {
            let what = if cfg.loss.is_some() { "--ecn with a loss of 0%" } else { "--ecn without --loss" };
            return no(what.into(), "NetEm marks only frames its loss model would lose");
        }
        words.push("ecn".into());
    }
    for (name, p, c) in [
        ("corrupt", cfg.corrupt, cfg.corrupt_correlation),
        ("duplicate", cfg.duplicate, cfg.duplicate_correlation),
    ] {
        if let Some(p) = p {
            let corr = c.map(|c| format!(" {}", percent(c))).unwrap_or_default();
            words.push(format!("{name} {}{corr}", percent(p)));
        }
    }
    if let Some(s) = &cfg.skip_delay {
        if d.base == Nanos::ZERO {
            return no(format!("--skip-delay {}", s.spec()), "NetEm's reorder needs a delay above 0");
        }
        let corr = s.corr.map(|c| format!(" {}", percent(c))).unwrap_or_default();
        let gap = if s.gap > 1 { format!(" gap {}", s.gap) } else { String::new() };
        words.push(format!("reorder {}{corr}{gap}", percent(s.p)));
    }
    if let Some(link) = &cfg.link {
        if let Server::Rate(rate) = &link.server {
            let mut w = format!("rate {rate}");
            if link.overhead != 0 || link.cell.is_some() {
                w.push_str(&format!(" {}", link.overhead));
            }
            if let Some(c) = link.cell {
                w.push_str(&format!(" {} {}", c.size, c.overhead));
            }
            words.push(w);
        }
    }
    if let Some(s) = &cfg.slot {
        let mut w = match &s.spacing {
            Spacing::Uniform { min, max } if *max == Nanos::ZERO => {
                let _ = min;
                return no("--slot 0ns".into(), "NetEm takes slot 0 as no slots");
            }
            Spacing::Uniform { min, max } if min == max => format!("slot {min}"),
            Spacing::Uniform { min, max } => format!("slot {min} {max}"),
            Spacing::Dist { delay, jitter, dist } => {
                let name = match dist {
                    // tc has no uniform table (iproute2 ships normal, pareto, paretonormal and
                    // experimental), so `slot distribution uniform` is refused there.
                    Dist::Uniform => {
                        return no("--slot dist=uniform".into(), "tc has no uniform table and refuses it")
                    }
                    Dist::Normal | Dist::Pareto | Dist::ParetoNormal => dist.to_string(),
                    Dist::Custom(_) => match flags.slot.as_ref().and_then(|s| s.table.as_deref()) {
                        Some(name) => table_word(name)?,
                        None => return no("--slot".into(), "the tc table's name is unknown"),
                    },
                    Dist::Exponential | Dist::Table(_) => {
                        return no(
                            format!("--slot dist={dist}"),
                            "NetEm has uniform, normal, pareto, paretonormal and tc tables",
                        )
                    }
                };
                format!("slot distribution {name} {delay} {jitter}")
            }
        };
        match s.packets {
            Some(n) if n > i32::MAX as u64 => {
                return no(format!("--slot packets={n}"), "NetEm's is at most 2147483647")
            }
            Some(n) => w.push_str(&format!(" packets {n}")),
            None => {}
        }
        match s.bytes {
            Some(n) if n > i32::MAX as u64 => {
                return no(format!("--slot bytes={n}B"), "NetEm's is at most 2147483647")
            }
            Some(n) => w.push_str(&format!(" bytes {n}")),
            None => {}
        }
        words.push(w);
    }
    // Frames sent at once (--skip-delay) overtake in both; delayed frames overtake each other
    // in NetEm exactly when they have jitter and no rate.
    let overtakes = d.jitter > Nanos::ZERO && cfg.link.is_none();
    if cfg.reorder != overtakes {
        let setting = match (cfg.reorder, d.jitter > Nanos::ZERO) {
            (true, true) => "--reorder with a rate",
            (true, false) => "--reorder without --jitter",
            (false, _) => "--jitter without --reorder",
        };
        return no(
            setting.into(),
            "NetEm lets delayed frames overtake each other exactly when they have jitter and no rate",
        );
    }
    Ok(words.join(" "))
}
