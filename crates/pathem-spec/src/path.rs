//! The impairment settings of one direction, as flags and as TOML keys.
//!
//! One struct serves both: clap reads it from the command line, serde from a `[a_to_b]` or
//! `[b_to_a]` table, with the same names (`--delay-half-life` ⇔ `delay-half-life`) and the
//! same value parsers, so the two can never drift apart. Flags override the file key by key.
//! Files named by specs (loss, delay and rate traces, delay tables) are read here, so the
//! models stay free of I/O.

use crate::error::SpecError;
use clap::Args;
use pathem_model::aqm::AqmConfig;
use pathem_model::delay::{DelayConfig, DelayTrace};
use pathem_model::dist::{DelayTable, Dist};
use pathem_model::link::{Cell, LinkConfig, RateTrace, Server, ETHERNET_OVERHEAD};
use pathem_model::loss::{LossConfig, LossTrace};
use pathem_model::police::PolicerConfig;
use pathem_model::slot::SlotConfig;
use pathem_model::units::{Duration, Probability, QueueLimit, Rate, UnitError};
use pathem_model::PathConfig;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// `--loss`: a model, or `trace:FILE`.
#[derive(Clone, Debug, PartialEq)]
pub enum LossSpec {
    Model(LossConfig),
    Trace(PathBuf),
}

impl FromStr for LossSpec {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        match s.trim().strip_prefix("trace:") {
            Some("") => Err(UnitError {
                value: s.into(),
                reason: "names no file".into(),
                accepted: "trace:FILE with FILE a 0/1 loss pattern",
            }),
            Some(f) => Ok(LossSpec::Trace(f.into())),
            None => s.parse().map(LossSpec::Model),
        }
    }
}

/// `--delay-dist`: a named distribution, or `table:FILE`.
#[derive(Clone, Debug, PartialEq)]
pub enum DistSpec {
    Named(Dist),
    Table(PathBuf),
}

impl FromStr for DistSpec {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        match s.trim().strip_prefix("table:") {
            Some("") => Err(UnitError {
                value: s.into(),
                reason: "names no file".into(),
                accepted: "table:FILE with FILE one delay per line",
            }),
            Some(f) => Ok(DistSpec::Table(f.into())),
            None => s.parse().map(DistSpec::Named),
        }
    }
}

pathem_model::deserialize_from_str!(LossSpec, DistSpec);

/// Impairments of one direction. Every field is optional: unset means "not impaired".
#[derive(Args, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PathSpec {
    /// One-way delay (ns, us, ms, s), e.g. 10ms.
    #[arg(long, value_name = "DUR", help_heading = "Delay", allow_hyphen_values = true)]
    pub delay: Option<Duration>,

    /// Delay variation: half-width for uniform, std for normal/pareto/paretonormal, mean excess for exponential.
    #[arg(long, value_name = "DUR", help_heading = "Delay", allow_hyphen_values = true)]
    pub jitter: Option<Duration>,

    /// Shape of the variation: uniform (default), normal, pareto, paretonormal, exponential, table:FILE.
    #[arg(long, value_name = "DIST", help_heading = "Delay")]
    pub delay_dist: Option<DistSpec>,

    /// Correlate delays: frames this far apart have delays correlated 0.5, at any packet rate.
    #[arg(long, value_name = "DUR", help_heading = "Delay", allow_hyphen_values = true)]
    pub delay_half_life: Option<Duration>,

    /// Base delay over time from FILE of `TIME DELAY` lines (step-wise, repeating).
    #[arg(long, value_name = "FILE", help_heading = "Delay")]
    pub delay_trace: Option<PathBuf>,

    /// Let frames overtake each other when their delays say so (default: never reorder).
    #[arg(long, help_heading = "Delay", overrides_with = "no_reorder")]
    #[serde(default)]
    pub reorder: bool,
    /// Keep frames in order (turns --reorder off: on a running link, a schedule line, ctl set).
    #[arg(long, help_heading = "Delay", overrides_with = "reorder")]
    #[serde(skip)]
    pub no_reorder: bool,

    /// The loss model: random, Gilbert-Elliott, 4-state or a trace (the help text gives the
    /// syntax; clap shows `help`, rustdoc this line).
    #[arg(
        long,
        value_name = "SPEC",
        help_heading = "Loss",
        allow_hyphen_values = true,
        help = "Loss: P (1% or 0.01), random:P, ge:p=P,r=R[,loss-bad=X][,loss-good=Y], ge:loss=P,burst=B, \
                gi:p13=P[,p31=..,p32=..,p23=..,p14=..], trace:FILE"
    )]
    pub loss: Option<LossSpec>,

    /// Bit error rate: a frame with a bit error is dropped (counted as `ber`), e.g. 1e-6.
    #[arg(long, value_name = "PROB", help_heading = "Loss", allow_hyphen_values = true)]
    pub ber: Option<Probability>,

    /// Bottleneck rate (bit, kbit, mbit, gbit; k, m, g; bps-style aliases mean bits), e.g. 100mbit.
    #[arg(long, value_name = "RATE", help_heading = "Link", allow_hyphen_values = true)]
    pub rate: Option<Rate>,

    /// Variable rate from a Mahimahi trace FILE (ms timestamps; each an opportunity for 1504 B).
    #[arg(long, value_name = "FILE", help_heading = "Link")]
    pub rate_trace: Option<PathBuf>,

    /// Bytes added to each frame for the rate, -65536 to 65536 [default: 24 = preamble+SFD, FCS, gap].
    #[arg(long, value_name = "BYTES", help_heading = "Link", allow_hyphen_values = true)]
    pub overhead: Option<i32>,

    /// Cell framing SIZE,OVERHEAD for the rate (NetEm cellsize/celloverhead), e.g. 48,5.
    #[arg(long, value_name = "SIZE,OVERHEAD", help_heading = "Link")]
    pub cell: Option<Cell>,

    /// Limit of the link queue in bytes (64KB) or frames (100pkt); needs a rate. With --aqm, the
    /// discipline's hard limit [default: 1000pkt; fq-codel 10240pkt; dualpi2 250 ms at the rate].
    #[arg(long, value_name = "SIZE", help_heading = "Link", allow_hyphen_values = true)]
    pub queue: Option<QueueLimit>,

    /// The bottleneck's queue discipline (the help lists pathem_model::aqm::KINDS).
    #[arg(long, value_name = "KIND", help_heading = "Link", help = pathem_model::aqm::help())]
    pub aqm: Option<AqmConfig>,

    /// Token-bucket policer RATE,burst=SIZE: frames over it are dropped, e.g. 10mbit,burst=15KB.
    #[arg(long, value_name = "SPEC", help_heading = "Link")]
    pub police: Option<PolicerConfig>,

    /// Transmit in slots (NetEm's `slot`); the help text gives the syntax.
    #[arg(
        long,
        value_name = "SPEC",
        help_heading = "Link",
        help = "Transmit in slots MIN[,MAX][,packets=N][,bytes=SIZE] (NetEm slot), e.g. 800us,1ms,packets=32"
    )]
    pub slot: Option<SlotConfig>,

    /// Duplicate a frame with this probability (the copy follows it), e.g. 0.1%.
    #[arg(long, value_name = "P", help_heading = "Other", allow_hyphen_values = true)]
    pub duplicate: Option<Probability>,

    /// Flip one random bit of a frame with this probability, e.g. 0.1%.
    #[arg(long, value_name = "P", help_heading = "Other", allow_hyphen_values = true)]
    pub corrupt: Option<Probability>,

    /// CE-mark ECN-capable IPv4/IPv6 frames instead of dropping them on queue (and --aqm) and loss drops.
    #[arg(long, help_heading = "Other", overrides_with = "no_ecn")]
    #[serde(default)]
    pub ecn: bool,
    /// Drop ECN-capable frames like the others (turns --ecn off: on a running link, a schedule
    /// line, ctl set).
    #[arg(long, help_heading = "Other", overrides_with = "ecn")]
    #[serde(skip)]
    pub no_ecn: bool,
}

fn read(flag: &'static str, path: &Path) -> Result<String, SpecError> {
    std::fs::read_to_string(path).map_err(|e| SpecError::File {
        flag,
        path: path.into(),
        reason: format!("cannot read it: {e}"),
    })
}

fn parse_file<T>(
    flag: &'static str,
    path: &Path,
    parse: impl Fn(&str) -> Result<T, pathem_model::trace::TraceError>,
) -> Result<Arc<T>, SpecError> {
    parse(&read(flag, path)?).map(Arc::new).map_err(|e| SpecError::File {
        flag,
        path: path.into(),
        reason: e.to_string(),
    })
}

/// One direction's flags given as a single string (`--a-to-b "--delay 10ms --loss 1%"`, a
/// schedule line, a `ctl set`).
#[derive(clap::Parser, Debug)]
#[command(no_binary_name = true)]
struct FlagWords {
    #[command(flatten)]
    path: PathSpec,
}

impl PathSpec {
    /// Parses impairment flags written in one string; the error is clap's first line.
    pub fn from_flags(text: &str) -> Result<PathSpec, SpecError> {
        let words: Vec<&str> = text.split_whitespace().collect();
        <FlagWords as clap::Parser>::try_parse_from(&words)
            .map(|f| f.path)
            .map_err(|e| SpecError::Flags(crate::error::first_line(&e)))
    }

    /// `self` with every field that `over` sets replaced by `over`'s value; a switch is turned
    /// on by `--reorder`/`--ecn` and off by `--no-reorder`/`--no-ecn`, and kept otherwise.
    pub fn overridden_by(&self, over: &PathSpec) -> PathSpec {
        fn pick<T: Clone>(over: &Option<T>, base: &Option<T>) -> Option<T> {
            over.clone().or_else(|| base.clone())
        }
        fn switch(on: bool, off: bool, base: bool) -> bool {
            (base || on) && !off
        }
        PathSpec {
            delay: pick(&over.delay, &self.delay),
            jitter: pick(&over.jitter, &self.jitter),
            delay_dist: pick(&over.delay_dist, &self.delay_dist),
            delay_half_life: pick(&over.delay_half_life, &self.delay_half_life),
            delay_trace: pick(&over.delay_trace, &self.delay_trace),
            reorder: switch(over.reorder, over.no_reorder, self.reorder),
            no_reorder: false,
            loss: pick(&over.loss, &self.loss),
            ber: pick(&over.ber, &self.ber),
            rate: pick(&over.rate, &self.rate),
            rate_trace: pick(&over.rate_trace, &self.rate_trace),
            overhead: pick(&over.overhead, &self.overhead),
            cell: pick(&over.cell, &self.cell),
            queue: pick(&over.queue, &self.queue),
            aqm: pick(&over.aqm, &self.aqm),
            police: pick(&over.police, &self.police),
            slot: pick(&over.slot, &self.slot),
            duplicate: pick(&over.duplicate, &self.duplicate),
            corrupt: pick(&over.corrupt, &self.corrupt),
            ecn: switch(over.ecn, over.no_ecn, self.ecn),
            no_ecn: false,
        }
    }

    /// Makes the file paths this spec names relative to `dir` (a config file's folder).
    pub fn relative_to(mut self, dir: &Path) -> PathSpec {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        if let Some(LossSpec::Trace(p)) = &mut self.loss {
            fix(p);
        }
        if let Some(DistSpec::Table(p)) = &mut self.delay_dist {
            fix(p);
        }
        self.delay_trace.as_mut().map(fix);
        self.rate_trace.as_mut().map(fix);
        self
    }

    /// The model configuration this spec asks for; reads the files it names.
    pub fn to_config(&self) -> Result<PathConfig, SpecError> {
        let server = match (&self.rate, &self.rate_trace) {
            (Some(_), Some(_)) => {
                return Err(SpecError::Conflict("rate", "rate-trace", "the link has one rate or one trace"))
            }
            (Some(r), None) => Some(Server::Rate(*r)),
            (None, Some(f)) => {
                if self.overhead.is_some() || self.cell.is_some() {
                    let which = if self.overhead.is_some() { "overhead" } else { "cell" };
                    return Err(SpecError::Conflict(
                        which,
                        "rate-trace",
                        "a trace counts packets as Mahimahi does",
                    ));
                }
                Some(Server::Trace(parse_file("rate-trace", f, RateTrace::parse)?))
            }
            (None, None) => None,
        };
        let link = match server {
            Some(server) => Some(LinkConfig {
                server,
                overhead: self.overhead.unwrap_or(if self.rate_trace.is_some() {
                    0
                } else {
                    ETHERNET_OVERHEAD
                }),
                cell: self.cell,
                queue: self.queue,
            }),
            None if self.queue.is_some() => return Err(SpecError::NeedsRate("queue")),
            None if self.aqm.as_ref().is_some_and(|a| *a != AqmConfig::DropTail) => {
                return Err(SpecError::NeedsRate("aqm"))
            }
            None if self.overhead.is_some() => return Err(SpecError::NeedsRate("overhead")),
            None if self.cell.is_some() => return Err(SpecError::NeedsRate("cell")),
            None => None,
        };
        let loss = match &self.loss {
            Some(LossSpec::Model(m)) => Some(m.clone()),
            Some(LossSpec::Trace(f)) => {
                Some(LossConfig::Trace(parse_file("loss trace:", f, LossTrace::parse)?))
            }
            None => None,
        };
        let jitter = self.jitter.map(|j| j.0).unwrap_or_default();
        let dist = match &self.delay_dist {
            Some(DistSpec::Table(f)) => {
                if self.jitter.is_some() {
                    return Err(SpecError::Conflict(
                        "jitter",
                        "delay-dist table:",
                        "the table is the variation",
                    ));
                }
                Dist::Table(parse_file("delay-dist table:", f, DelayTable::parse)?)
            }
            Some(DistSpec::Named(d)) if jitter.as_nanos() == 0 => {
                let _ = d;
                return Err(SpecError::NeedsJitter("delay-dist"));
            }
            Some(DistSpec::Named(d)) => d.clone(),
            None => Dist::Uniform,
        };
        let trace = match &self.delay_trace {
            Some(f) if self.delay.is_some() => {
                let _ = f;
                return Err(SpecError::Conflict("delay", "delay-trace", "the trace gives the base delay"));
            }
            Some(f) => Some(parse_file("delay-trace", f, DelayTrace::parse)?),
            None => None,
        };
        let delay = DelayConfig {
            base: self.delay.map(|d| d.0).unwrap_or_default(),
            jitter,
            dist,
            half_life: None,
            trace,
        };
        let delay = match self.delay_half_life {
            Some(_) if !delay.is_random() => return Err(SpecError::NeedsJitter("delay-half-life")),
            Some(h) if h.0.as_nanos() == 0 => {
                return Err(SpecError::File {
                    flag: "delay-half-life",
                    path: "0".into(),
                    reason: "must be above 0".into(),
                })
            }
            h => DelayConfig { half_life: h.map(|h| h.0), ..delay },
        };
        let config = PathConfig {
            police: self.police,
            link,
            aqm: self.aqm.clone().unwrap_or_default(),
            loss,
            ber: self.ber,
            delay,
            slot: self.slot,
            duplicate: self.duplicate,
            corrupt: self.corrupt,
            ecn: self.ecn,
            reorder: self.reorder,
        };
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathem_model::Nanos;

    #[test]
    fn flags_override_file_key_by_key() {
        let file: PathSpec = toml::from_str("delay = '10ms'\nloss = '1%'\necn = true").unwrap();
        let flags = PathSpec { delay: Some("20ms".parse().unwrap()), ..Default::default() };
        let merged = file.overridden_by(&flags);
        assert_eq!(merged.delay.unwrap().0, Nanos::from_millis(20));
        assert_eq!(merged.loss, file.loss);
        assert!(merged.ecn);
    }

    #[test]
    fn combinations_that_make_no_sense_are_refused() {
        let spec = |toml_text: &str| toml::from_str::<PathSpec>(toml_text).unwrap().to_config();
        assert_eq!(spec("queue = '10pkt'"), Err(SpecError::NeedsRate("queue")));
        assert_eq!(spec("cell = '48,5'"), Err(SpecError::NeedsRate("cell")));
        assert_eq!(spec("aqm = 'codel'"), Err(SpecError::NeedsRate("aqm")));
        assert!(spec("aqm = 'droptail'").is_ok(), "drop-tail needs no rate");
        assert_eq!(spec("delay = '1ms'\ndelay-dist = 'normal'"), Err(SpecError::NeedsJitter("delay-dist")));
        assert_eq!(
            spec("delay = '1ms'\ndelay-half-life = '5ms'"),
            Err(SpecError::NeedsJitter("delay-half-life"))
        );
        assert!(matches!(
            spec("rate = '1mbit'\nrate-trace = 'x'"),
            Err(SpecError::Conflict("rate", "rate-trace", _))
        ));
        assert!(matches!(spec("loss = 'trace:/nonexistent'"), Err(SpecError::File { .. })));
        assert!(
            spec("delay = '10ms'\njitter = '2ms'\ndelay-dist = 'pareto'\ndelay-half-life = '20ms'").is_ok()
        );
        assert!(spec("rate = '10mbit'\ncell = '48,5'\nqueue = '20pkt'\npolice = '5mbit,burst=10KB'").is_ok());
        for (text, says) in [
            ("delay = '18446744073s'", "--delay 18446744073s is out of range; accepted: 0ns to 1h"),
            ("delay = '1ms'\njitter = '2h'", "--jitter"),
            ("rate = '1mbit'\noverhead = 4294967295", "overhead"),
            ("rate = '1mbit'\noverhead = -70000", "--overhead -70000 is out of range"),
            ("police = '1mbit,burst=3GB'", "--police"),
        ] {
            let e = match toml::from_str::<PathSpec>(text) {
                Ok(s) => s.to_config().unwrap_err().to_string(),
                Err(e) => e.to_string(),
            };
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn switches_turn_on_and_off() {
        let on = PathSpec::from_flags("--ecn --reorder --delay 1ms").unwrap();
        assert!(on.ecn && on.reorder);
        let off = on.overridden_by(&PathSpec::from_flags("--no-ecn").unwrap());
        assert!(!off.ecn && off.reorder, "--no-ecn turns only ECN off");
        let off = off.overridden_by(&PathSpec::from_flags("--no-reorder").unwrap());
        assert!(!off.reorder && off.delay.is_some());
        let kept = off.overridden_by(&PathSpec::from_flags("--loss 1%").unwrap());
        assert!(!kept.ecn && !kept.reorder);
        // The last of the two wins, as for any flag given twice.
        assert!(PathSpec::from_flags("--ecn --no-ecn").unwrap().no_ecn);
        assert!(PathSpec::from_flags("--no-ecn --ecn").unwrap().ecn);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = toml::from_str::<PathSpec>("dealy = '10ms'").unwrap_err();
        assert!(e.to_string().contains("unknown field `dealy`"), "{e}");
    }

    #[test]
    fn trace_files_are_read_relative_to_the_config() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("l.txt"), "0 1").unwrap();
        let spec: PathSpec = toml::from_str("loss = 'trace:l.txt'").unwrap();
        let cfg = spec.relative_to(dir.path()).to_config().unwrap();
        assert!(matches!(cfg.loss, Some(LossConfig::Trace(t)) if t.len() == 2));
    }
}
