//! The impairment settings of one direction, as flags and as TOML keys.
//!
//! One struct serves both: clap reads it from the command line, serde from a `[a_to_b]` or
//! `[b_to_a]` table, with the same names (`--delay-half-life` ⇔ `delay-half-life`) and the
//! same value parsers, so the two can never drift apart. Flags override the file key by key.
//! Files named by specs (loss, delay and rate traces, delay tables, tc's distribution tables)
//! are read here, so the models stay free of I/O.
//!
//! `--netem "SPEC"` (key `netem`) says in tc-netem(8)'s words what the other flags say; it is
//! turned into those flags ([`crate::netem`]) before anything else, so a netem spec and its
//! equivalent flags make the same path. With a netem spec, the flags netem has words for
//! (delay, jitter, delay-dist, delay-correlation, loss, rate, overhead, cell, queue, slot,
//! skip-delay, duplicate, corrupt and their correlations, ecn) are refused; the others (aqm,
//! police, ber, traces, delay-half-life…) combine with it, and `--reorder`/`--no-reorder`
//! decide over the overtaking the netem spec implies.

use crate::error::SpecError;
use crate::netem::NetemSpec;
use clap::Args;
use pathem_model::aqm::AqmConfig;
use pathem_model::delay::{DelayConfig, DelayTrace};
use pathem_model::dist::{CustomTable, DelayTable, Dist};
use pathem_model::link::{Cell, LinkConfig, RateTrace, Server, ETHERNET_OVERHEAD};
use pathem_model::loss::{LossConfig, LossTrace};
use pathem_model::police::PolicerConfig;
use pathem_model::skip::SkipConfig;
use pathem_model::slot::{SlotConfig, Spacing};
use pathem_model::units::{shown, Duration, Probability, QueueLimit, Rate, UnitError};
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

/// `--delay-dist`: a named distribution, `table:FILE` (recorded delays) or `tc:NAME` (a
/// distribution table in tc's format: a FILE, or NAME.dist in tc's folder).
#[derive(Clone, Debug, PartialEq)]
pub enum DistSpec {
    Named(Dist),
    Table(PathBuf),
    Tc(String),
}

impl FromStr for DistSpec {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let t = s.trim();
        let names_none = |accepted| UnitError { value: s.into(), reason: "names no file".into(), accepted };
        if let Some(f) = t.strip_prefix("table:") {
            return match f {
                "" => Err(names_none("table:FILE with FILE one delay per line")),
                f => Ok(DistSpec::Table(f.into())),
            };
        }
        match t.strip_prefix("tc:") {
            Some("") => Err(names_none("tc:NAME with NAME a table of tc's (normal) or its FILE")),
            Some(name) => Ok(DistSpec::Tc(name.into())),
            None => s.parse().map(DistSpec::Named),
        }
    }
}

impl std::fmt::Display for DistSpec {
    /// The text that parses back to it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DistSpec::Named(d) => write!(f, "{d}"),
            DistSpec::Table(p) => write!(f, "table:{}", p.display()),
            DistSpec::Tc(name) => write!(f, "tc:{name}"),
        }
    }
}

/// `--slot`: the model's spec, whose `dist=tc:NAME` table is read here.
#[derive(Clone, Debug, PartialEq)]
pub struct SlotSpec {
    /// With a table, its distribution stands in until the table is read.
    pub config: SlotConfig,
    /// The tc table (`dist=tc:NAME`) the spacing draws from.
    pub table: Option<String>,
}

impl FromStr for SlotSpec {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let mut table = None;
        let mut items = Vec::new();
        for item in s.split(',') {
            match item.trim().strip_prefix("dist=tc:") {
                Some(name) if table.is_none() && !name.is_empty() => {
                    table = Some(name.to_string());
                    items.push("dist=uniform");
                }
                _ => items.push(item),
            }
        }
        let config = if table.is_some() { items.join(",").parse() } else { s.parse() }
            .map_err(|e| UnitError { value: s.into(), ..e })?;
        Ok(SlotSpec { config, table })
    }
}

impl std::fmt::Display for SlotSpec {
    /// The text that parses back to it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.table, &self.config.spacing) {
            (Some(name), Spacing::Dist { delay, jitter, .. }) => {
                write!(f, "dist=tc:{name},delay={delay},jitter={jitter}")?;
                if let Some(p) = self.config.packets {
                    write!(f, ",packets={p}")?;
                }
                if let Some(b) = self.config.bytes {
                    write!(f, ",bytes={b}B")?;
                }
                Ok(())
            }
            _ => f.write_str(&self.config.spec().unwrap_or_default()),
        }
    }
}

pathem_model::deserialize_from_str!(LossSpec, DistSpec, SlotSpec);

/// Where tc keeps its distribution tables, after `$TC_LIB_DIR` (which tc reads first): the
/// folder tc was built with, which is `/usr/lib/tc` upstream, `/usr/lib/ARCH-linux-gnu/tc` on
/// Debian and Ubuntu, `/usr/lib64/tc` on Fedora and RHEL; and `/lib/tc`.
pub fn tc_table_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/lib/tc"), PathBuf::from("/usr/lib64/tc")];
    let mut multiarch: Vec<PathBuf> = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("-linux-"))
        .map(|e| e.path().join("tc"))
        .filter(|d| d.is_dir())
        .collect();
    multiarch.sort();
    dirs.extend(multiarch);
    dirs.push(PathBuf::from("/lib/tc"));
    dirs
}

/// The folders a tc table NAME is looked for in: `$TC_LIB_DIR`, then [`tc_table_dirs`].
pub fn tc_table_search() -> Vec<PathBuf> {
    let env = std::env::var_os("TC_LIB_DIR").map(PathBuf::from);
    env.into_iter().chain(tc_table_dirs()).collect()
}

/// True when a tc table's NAME is a file's path rather than a name in tc's folder.
pub fn names_a_file(name: &str) -> bool {
    name.contains('/') || name.ends_with(".dist")
}

/// Where the tc table NAME may lie, in the order it is looked for: the FILE itself when it is
/// a path, else NAME.dist in [`tc_table_search`]'s folders.
pub fn tc_table_candidates(name: &str) -> Vec<PathBuf> {
    match names_a_file(name) {
        true => vec![name.into()],
        false => tc_table_search().into_iter().map(|d| d.join(format!("{name}.dist"))).collect(),
    }
}

/// Reads the tc distribution table NAME from the first of [`tc_table_candidates`] that opens.
/// The error is the reason, naming where it looked.
pub fn read_tc_table(name: &str) -> Result<Arc<CustomTable>, String> {
    let candidates = tc_table_candidates(name);
    // A table holds at most 16384 numbers: what is longer than this is not one (/dev/zero).
    const MAX_TABLE_TEXT: u64 = 1 << 20;
    for path in &candidates {
        let read = std::fs::File::open(path).and_then(|f| {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_TABLE_TEXT + 1), &mut text)?;
            Ok(text)
        });
        match read {
            Ok(text) if text.len() as u64 > MAX_TABLE_TEXT => {
                return Err(format!("{} is longer than a table (1 MiB)", path.display()))
            }
            Ok(text) => {
                return CustomTable::parse(&text)
                    .map(Arc::new)
                    .map_err(|e| format!("{}: {e}", path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        }
    }
    let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    Err(format!("no such table (looked for {})", looked.join(", ")))
}

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

    /// Shape of the variation: uniform (default), normal, pareto, paretonormal, exponential, table:FILE, tc:NAME.
    #[arg(long, value_name = "DIST", help_heading = "Delay", allow_hyphen_values = true)]
    pub delay_dist: Option<DistSpec>,

    /// Correlate delays: frames this far apart have delays correlated 0.5, at any packet rate.
    #[arg(long, value_name = "DUR", help_heading = "Delay", allow_hyphen_values = true)]
    pub delay_half_life: Option<Duration>,

    /// Correlate delays frame to frame as NetEm does (delay CORRELATION), e.g. 25%; needs --jitter.
    #[arg(long, value_name = "P", help_heading = "Delay", allow_hyphen_values = true)]
    pub delay_correlation: Option<Probability>,

    /// Base delay over time from FILE of `TIME DELAY` lines (step-wise, repeating).
    #[arg(long, value_name = "FILE", help_heading = "Delay", allow_hyphen_values = true)]
    pub delay_trace: Option<PathBuf>,

    /// Let frames overtake each other when their delays say so (default: never reorder; frames --skip-delay sends at once overtake either way).
    #[arg(long, help_heading = "Delay", overrides_with = "no_reorder")]
    #[serde(default)]
    pub reorder: bool,
    /// Keep frames in order (turns --reorder off: on a running link, a schedule line, ctl set,
    /// or against the overtaking a --netem spec implies).
    #[arg(long, help_heading = "Delay", overrides_with = "reorder")]
    #[serde(default)]
    pub no_reorder: bool,

    /// Send some frames without their delay (NetEm's reorder; clap shows `help`, rustdoc this line).
    #[arg(
        long,
        value_name = "SPEC",
        help_heading = "Delay",
        allow_hyphen_values = true,
        help = "Send some frames without their delay, overtaking the delayed ones: P[,corr=C][,gap=N] (NetEm reorder), e.g. 10%,gap=5"
    )]
    pub skip_delay: Option<SkipConfig>,

    /// The loss model: random, Gilbert-Elliott, 4-state or a trace (the help text gives the
    /// syntax; clap shows `help`, rustdoc this line).
    #[arg(
        long,
        value_name = "SPEC",
        help_heading = "Loss",
        allow_hyphen_values = true,
        help = "Loss: P (1% or 0.01), random:P[,corr=C], ge:p=P,r=R[,loss-bad=X][,loss-good=Y], ge:loss=P,burst=B, \
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
    #[arg(long, value_name = "FILE", help_heading = "Link", allow_hyphen_values = true)]
    pub rate_trace: Option<PathBuf>,

    /// Bytes added to each frame for the rate, -65536 to 65536 [default: 24 = preamble+SFD, FCS, gap].
    #[arg(long, value_name = "BYTES", help_heading = "Link", allow_hyphen_values = true)]
    pub overhead: Option<i64>,

    /// Cell framing SIZE,OVERHEAD for the rate (NetEm cellsize/celloverhead), e.g. 48,5.
    #[arg(long, value_name = "SIZE,OVERHEAD", help_heading = "Link", allow_hyphen_values = true)]
    pub cell: Option<Cell>,

    /// Limit of the link queue in bytes (64KB) or frames (100pkt); needs a rate. With --aqm, the
    /// discipline's hard limit [default: unbounded for drop-tail; 1000pkt; fq-codel 10240pkt;
    /// dualpi2 250 ms at the rate].
    #[arg(long, value_name = "SIZE", help_heading = "Link", allow_hyphen_values = true)]
    pub queue: Option<QueueLimit>,

    /// At most N frames held at once, waiting for the rate or in their delay, as NetEm's
    /// limit counts them: an arrival beyond is dropped (a queue drop); 1 to 4294967295, not
    /// with --aqm [default: unbounded].
    #[arg(long, value_name = "N", help_heading = "Link", value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub limit: Option<u32>,

    /// The bottleneck's queue discipline (the help lists pathem_model::aqm::KINDS).
    #[arg(long, value_name = "KIND", help_heading = "Link", help = pathem_model::aqm::help(), allow_hyphen_values = true)]
    pub aqm: Option<AqmConfig>,

    /// Token-bucket policer RATE,burst=SIZE: frames over it are dropped, e.g. 10mbit,burst=15KB.
    #[arg(long, value_name = "SPEC", help_heading = "Link", allow_hyphen_values = true)]
    pub police: Option<PolicerConfig>,

    /// Transmit in slots (NetEm's `slot`); the help text gives the syntax.
    #[arg(
        long,
        value_name = "SPEC",
        help_heading = "Link",
        allow_hyphen_values = true,
        help = "Transmit in slots MIN[,MAX][,packets=N][,bytes=SIZE] (NetEm slot), e.g. 800us,1ms,packets=32, \
                or dist=DIST,delay=TIME,jitter=TIME[,packets=N][,bytes=SIZE] (NetEm slot distribution)"
    )]
    pub slot: Option<SlotSpec>,

    /// Duplicate a frame with this probability (the copy follows it), e.g. 0.1%.
    #[arg(long, value_name = "P", help_heading = "Other", allow_hyphen_values = true)]
    pub duplicate: Option<Probability>,

    /// Correlate --duplicate's draws frame to frame as NetEm does, e.g. 25%.
    #[arg(long, value_name = "P", help_heading = "Other", allow_hyphen_values = true)]
    pub duplicate_correlation: Option<Probability>,

    /// Flip one random bit of a frame with this probability, e.g. 0.1%.
    #[arg(long, value_name = "P", help_heading = "Other", allow_hyphen_values = true)]
    pub corrupt: Option<Probability>,

    /// Correlate --corrupt's draws frame to frame as NetEm does, e.g. 25%.
    #[arg(long, value_name = "P", help_heading = "Other", allow_hyphen_values = true)]
    pub corrupt_correlation: Option<Probability>,

    /// CE-mark ECN-capable IPv4/IPv6 frames instead of dropping them on queue (and --aqm) and loss drops.
    #[arg(long, help_heading = "Other", overrides_with = "no_ecn")]
    #[serde(default)]
    pub ecn: bool,
    /// Drop ECN-capable frames like the others (turns --ecn off: on a running link, a schedule
    /// line, ctl set).
    #[arg(long, help_heading = "Other", overrides_with = "ecn")]
    #[serde(skip)]
    pub no_ecn: bool,

    /// Impairments in tc-netem(8)'s words, e.g. "delay 100ms 10ms 25% loss 1%" (pathem netem explains one).
    #[arg(long, value_name = "SPEC", help_heading = "NetEm", allow_hyphen_values = true)]
    pub netem: Option<NetemSpec>,

    /// A class (repeatable): frames a tcpdump FILTER matches follow FLAGS' own path (clap shows
    /// `help`, rustdoc this line).
    #[arg(
        long = "class",
        num_args = 2,
        value_names = ["FILTER", "FLAGS"],
        action = clap::ArgAction::Append,
        allow_hyphen_values = true,
        help_heading = "Classes",
        help = "A per-flow path (repeatable): frames the tcpdump FILTER matches take FLAGS' own path, \
                e.g. --class \"udp port 53\" \"--loss 10%\"; the first match wins, the rest take the bare \
                flags. In ctl set and schedules: --class NAME FLAGS changes that class"
    )]
    #[serde(skip)]
    pub class: Vec<String>,

    /// A config file's `[[class]]` tables (see [`crate::class`]).
    #[arg(skip)]
    #[serde(default, rename = "class")]
    pub classes: Vec<crate::class::ClassTable>,
}

fn read(flag: &'static str, path: &Path) -> Result<String, SpecError> {
    crate::read_text(path, crate::MAX_TRACE_FILE).map_err(|e| SpecError::File {
        flag,
        path: path.into(),
        reason: format!("cannot read it: {e}"),
    })
}

fn parse_file<T: PartialEq + Send + Sync + 'static>(
    flag: &'static str,
    path: &Path,
    parse: impl Fn(&str) -> Result<T, pathem_model::trace::TraceError>,
) -> Result<Arc<T>, SpecError> {
    let key = (flag, path.to_path_buf());
    let cached = LOADING.with_borrow(|l| l.as_ref().and_then(|files| files.get(&key).cloned()));
    if let Some(parsed) = cached.and_then(|any| any.downcast::<T>().ok()) {
        return Ok(parsed);
    }
    let parsed = parse(&read(flag, path)?).map(shared).map_err(|e| SpecError::File {
        flag,
        path: path.into(),
        reason: e.to_string(),
    })?;
    LOADING.with_borrow_mut(|l| {
        if let Some(files) = l.as_mut() {
            files.insert(key, parsed.clone());
        }
    });
    Ok(parsed)
}

type Loaded = std::collections::HashMap<(&'static str, PathBuf), Arc<dyn std::any::Any + Send + Sync>>;

std::thread_local! {
    /// The files read so far in the load [`reading_each_file_once`] runs, if one runs.
    static LOADING: std::cell::RefCell<Option<Loaded>> = const { std::cell::RefCell::new(None) };
}

/// Runs `load` reading each trace file (and `table:` file) once, however many of its specs
/// name it (tc's tables, small, are read where named; a
/// schedule's steps each name the files of the lines before; a 17 MB trace took 66 ms a
/// step): one load sees one version of each file. Outside such a load, every conversion
/// reads the file anew. Nested calls share the outermost load.
pub fn reading_each_file_once<R>(load: impl FnOnce() -> R) -> R {
    struct Ends;
    impl Drop for Ends {
        fn drop(&mut self) {
            LOADING.with_borrow_mut(|l| *l = None);
        }
    }
    if LOADING.with_borrow(Option::is_some) {
        return load();
    }
    LOADING.with_borrow_mut(|l| *l = Some(Loaded::new()));
    let _ends = Ends;
    load()
}

/// One copy of each trace (or table) per contents in the process: a file is read anew each
/// time a spec becomes a configuration (every `ctl set`, every schedule step), and a trace
/// named again must be the copy the running path follows, which the models tell by
/// `Arc::ptr_eq` between two frames (keeping their place in it; README, "kept across a
/// change"). A file whose contents changed is another trace. Copies no configuration holds any
/// more are forgotten.
fn shared<T: PartialEq + Send + Sync + 'static>(parsed: T) -> Arc<T> {
    type Seen = Vec<std::sync::Weak<dyn std::any::Any + Send + Sync>>;
    static SEEN: std::sync::Mutex<Seen> = std::sync::Mutex::new(Vec::new());
    // The list holds no invariant a panic elsewhere could have broken halfway.
    let mut seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    seen.retain(|w| w.strong_count() > 0);
    let same = seen
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .filter_map(|a| a.downcast::<T>().ok())
        .find(|a| **a == parsed);
    same.unwrap_or_else(|| {
        let new = Arc::new(parsed);
        let any: Arc<dyn std::any::Any + Send + Sync> = new.clone();
        seen.push(Arc::downgrade(&any));
        new
    })
}

/// One direction's flags given as a single string (`--a-to-b "--delay 10ms --loss 1%"`, a
/// schedule line, a `ctl set`).
#[derive(clap::Parser, Debug)]
#[command(no_binary_name = true, disable_help_flag = true, disable_version_flag = true)]
struct FlagWords {
    #[command(flatten)]
    path: PathSpec,
}

/// Splits a flags string into words as a shell would, for what flags need: white space
/// separates words; '…' keeps everything literally; "…" keeps everything but `\"` and `\\`;
/// a backslash outside quotes keeps the next character. So `--netem "delay 10ms 1ms"` is two
/// words. An unclosed quote is refused.
pub fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err(format!("`{}` has a ' that is not closed", shown(text))),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => w.push(c),
                            Some(c) => {
                                w.push('\\');
                                w.push(c);
                            }
                            None => return Err(format!("`{}` has a \" that is not closed", shown(text))),
                        },
                        Some(c) => w.push(c),
                        None => return Err(format!("`{}` has a \" that is not closed", shown(text))),
                    }
                }
            }
            '\\' => {
                let w = word.get_or_insert_with(String::new);
                if let Some(c) = chars.next() {
                    w.push(c);
                }
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

/// A word as [`split_words`] reads it back: quoted when it holds what would split it.
pub fn quote_word(word: &str) -> String {
    if !word.is_empty() && !word.contains(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '\\')) {
        return word.to_string();
    }
    format!("\"{}\"", word.replace('\\', "\\\\").replace('"', "\\\""))
}

impl PathSpec {
    /// Parses impairment flags written in one string (words as [`split_words`] makes them, so
    /// `--netem "delay 10ms 1ms"` is one flag); the error is clap's first line.
    pub fn from_flags(text: &str) -> Result<PathSpec, SpecError> {
        let words = split_words(text).map_err(SpecError::Flags)?;
        <FlagWords as clap::Parser>::try_parse_from(&words)
            .map(|f| f.path)
            .map_err(|e| SpecError::Flags(crate::error::first_line(&e)))
    }

    /// `self` with every field that `over` sets replaced by `over`'s value (a rate trace
    /// replaces a rate and the other way round, as a delay trace and a delay do); a switch is turned
    /// on by `--reorder`/`--ecn` and off by `--no-reorder`/`--no-ecn`, and kept otherwise. A
    /// `--no-reorder` or `--no-ecn` stays said (the first decides against a netem spec's
    /// overtaking, the second is refused with one) until `--reorder` or `--ecn` turns it on.
    /// A netem spec in `over` replaces everything netem has words for, whether an earlier
    /// netem spec or flags said it, the reorder and ECN switches included; an empty one
    /// (`--netem ""`) does too and says nothing, as `tc qdisc change ... netem` without
    /// words, so flags can follow.
    pub fn overridden_by(&self, over: &PathSpec) -> PathSpec {
        fn pick<T: Clone>(over: &Option<T>, base: &Option<T>) -> Option<T> {
            over.clone().or_else(|| base.clone())
        }
        fn switch(on: bool, off: bool, base: bool) -> bool {
            (base || on) && !off
        }
        // Of two settings a path has one or the other of (a rate or a rate trace, a delay or
        // a delay trace), the one `over` names replaces the other; naming both in one layer
        // stays refused (`to_config`).
        fn either<T: Clone>(over: &Option<T>, base: &Option<T>, other_over: bool) -> Option<T> {
            match (over, other_over) {
                (None, true) => None,
                _ => pick(over, base),
            }
        }
        // What stays under a new netem spec: the settings netem has no words for. Flags on
        // top of an earlier layer's netem spec (a `ctl set --delay 5ms` on a link started with
        // `--netem`, `--egress` flags over a file's `netem = ...`) change it word for word: the
        // earlier spec is read as its flags first. Within one layer, the two stay refused.
        let (cleared, resolved);
        let this = match &over.netem {
            // A trace replaces the rate or delay a netem spec gave as it replaces flags.
            None if self.netem.as_ref().is_some_and(|n| !n.is_empty())
                && (over.said_by_netem_too().is_some()
                    || over.rate_trace.is_some()
                    || over.delay_trace.is_some()) =>
            {
                match self.resolved() {
                    Ok(r) => {
                        resolved = r;
                        &resolved
                    }
                    Err(_) => self,
                }
            }
            Some(_) => {
                cleared = PathSpec {
                    delay_half_life: self.delay_half_life,
                    delay_trace: self.delay_trace.clone(),
                    rate_trace: self.rate_trace.clone(),
                    aqm: self.aqm.clone(),
                    police: self.police,
                    ber: self.ber,
                    ..PathSpec::default()
                };
                &cleared
            }
            _ => self,
        };
        PathSpec {
            delay: either(&over.delay, &this.delay, over.delay_trace.is_some()),
            jitter: pick(&over.jitter, &this.jitter),
            delay_dist: pick(&over.delay_dist, &this.delay_dist),
            delay_half_life: pick(&over.delay_half_life, &this.delay_half_life),
            delay_correlation: pick(&over.delay_correlation, &this.delay_correlation),
            delay_trace: either(&over.delay_trace, &this.delay_trace, over.delay.is_some()),
            reorder: switch(over.reorder, over.no_reorder, this.reorder),
            no_reorder: switch(over.no_reorder, over.reorder, this.no_reorder),
            skip_delay: pick(&over.skip_delay, &this.skip_delay),
            loss: pick(&over.loss, &this.loss),
            ber: pick(&over.ber, &this.ber),
            rate: either(&over.rate, &this.rate, over.rate_trace.is_some()),
            rate_trace: either(&over.rate_trace, &this.rate_trace, over.rate.is_some()),
            overhead: pick(&over.overhead, &this.overhead),
            cell: pick(&over.cell, &this.cell),
            queue: pick(&over.queue, &this.queue),
            limit: pick(&over.limit, &this.limit),
            aqm: pick(&over.aqm, &this.aqm),
            police: pick(&over.police, &this.police),
            slot: pick(&over.slot, &this.slot),
            duplicate: pick(&over.duplicate, &this.duplicate),
            duplicate_correlation: pick(&over.duplicate_correlation, &this.duplicate_correlation),
            corrupt: pick(&over.corrupt, &this.corrupt),
            corrupt_correlation: pick(&over.corrupt_correlation, &this.corrupt_correlation),
            ecn: switch(over.ecn, over.no_ecn, this.ecn),
            no_ecn: switch(over.no_ecn, over.ecn, this.no_ecn),
            // An empty spec stays said: a layer on top of the start (`ctl set`'s) keeps
            // hiding what the start's flags said with netem's words.
            netem: pick(&over.netem, &this.netem),
            // Classes add up, layer after layer (a file's, the common flags', a direction's).
            class: [&self.class[..], &over.class[..]].concat(),
            classes: [&self.classes[..], &over.classes[..]].concat(),
        }
    }

    /// True when the spec names classes (`--class` or `[[class]]`).
    pub fn has_classes(&self) -> bool {
        !self.class.is_empty() || !self.classes.is_empty()
    }

    /// The spec without its classes: the default path's.
    pub fn without_classes(&self) -> PathSpec {
        PathSpec { class: Vec::new(), classes: Vec::new(), ..self.clone() }
    }

    /// Makes the file paths this spec names relative to `dir` (a config file's folder).
    pub fn relative_to(mut self, dir: &Path) -> PathSpec {
        for c in &mut self.classes {
            c.path = std::mem::take(&mut c.path).relative_to(dir);
        }
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
        let fix_name = |name: &mut String| {
            if names_a_file(name) && Path::new(name.as_str()).is_relative() {
                *name = dir.join(name.as_str()).to_string_lossy().into_owned();
            }
        };
        if let Some(DistSpec::Tc(name)) = &mut self.delay_dist {
            fix_name(name);
        }
        if let Some(name) = self.slot.as_mut().and_then(|s| s.table.as_mut()) {
            fix_name(name);
        }
        if let Some(n) = self.netem.take() {
            self.netem = Some(n.relative_to(dir));
        }
        self.delay_trace.as_mut().map(fix);
        self.rate_trace.as_mut().map(fix);
        self
    }

    /// The first flag a netem spec says too (its name without dashes), if any is set.
    fn said_by_netem_too(&self) -> Option<&'static str> {
        let set = [
            ("delay", self.delay.is_some()),
            ("jitter", self.jitter.is_some()),
            ("delay-dist", self.delay_dist.is_some()),
            ("delay-correlation", self.delay_correlation.is_some()),
            ("skip-delay", self.skip_delay.is_some()),
            ("loss", self.loss.is_some()),
            ("rate", self.rate.is_some()),
            ("overhead", self.overhead.is_some()),
            ("cell", self.cell.is_some()),
            ("queue", self.queue.is_some()),
            ("limit", self.limit.is_some()),
            ("slot", self.slot.is_some()),
            ("duplicate", self.duplicate.is_some()),
            ("duplicate-correlation", self.duplicate_correlation.is_some()),
            ("corrupt", self.corrupt.is_some()),
            ("corrupt-correlation", self.corrupt_correlation.is_some()),
            ("ecn", self.ecn),
            ("no-ecn", self.no_ecn),
        ];
        set.iter().find(|(_, on)| *on).map(|(name, _)| *name)
    }

    /// The flags this spec means: a netem spec replaced by its equivalent flags (with the
    /// flags netem has no words for kept, and `--reorder`/`--no-reorder` deciding over the
    /// overtaking the netem spec implies). A flag the netem spec says too is refused.
    pub fn resolved(&self) -> Result<PathSpec, SpecError> {
        let Some(netem) = self.netem.as_ref().filter(|n| !n.is_empty()) else { return Ok(self.clone()) };
        if let Some(flag) = self.said_by_netem_too() {
            return Err(SpecError::Conflict(
                "netem",
                flag,
                "the netem spec says everything netem has words for; say it there, or give flags alone",
            ));
        }
        let from = netem.flags();
        if from.delay_correlation.is_some() && self.delay_half_life.is_some() {
            return Err(SpecError::Conflict(
                "netem",
                "delay-half-life",
                "the netem spec's delay CORRELATION already correlates the delays; keep one",
            ));
        }
        if from.delay.is_some() && self.delay_trace.is_some() {
            return Err(SpecError::Conflict(
                "netem",
                "delay-trace",
                "the netem spec's delay and the trace both give the base delay",
            ));
        }
        Ok(PathSpec {
            reorder: !self.no_reorder && (self.reorder || from.reorder),
            no_reorder: self.no_reorder,
            netem: None,
            delay_half_life: self.delay_half_life,
            delay_trace: self.delay_trace.clone(),
            rate_trace: self.rate_trace.clone(),
            aqm: self.aqm.clone(),
            police: self.police,
            ber: self.ber,
            ..from
        })
    }

    /// The model configuration this spec asks for; reads the files it names.
    pub fn to_config(&self) -> Result<PathConfig, SpecError> {
        match self.netem.as_ref().filter(|n| !n.is_empty()) {
            None => self.flags_to_config(),
            Some(netem) => self.resolved()?.flags_to_config().map_err(|e| netem.blame(e)),
        }
    }

    /// The configuration the flags alone make (the netem spec aside).
    fn flags_to_config(&self) -> Result<PathConfig, SpecError> {
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
        // Read as any whole number, so a value past an i32 is told the range, not the type's.
        let overhead = self
            .overhead
            .map(|o| {
                let most = i64::from(pathem_model::limits::MAX_OVERHEAD);
                pathem_model::limits::within("overhead", o, -most..=most, "-65536 to 65536 bytes")?;
                Ok::<i32, SpecError>(i32::try_from(o).unwrap_or_default())
            })
            .transpose()?;
        let link = match server {
            Some(server) => Some(LinkConfig {
                server,
                overhead: overhead.unwrap_or(if self.rate_trace.is_some() { 0 } else { ETHERNET_OVERHEAD }),
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
        let dist =
            match &self.delay_dist {
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
                Some(DistSpec::Named(_) | DistSpec::Tc(_)) if jitter.as_nanos() == 0 => {
                    return Err(SpecError::NeedsJitter("delay-dist"));
                }
                Some(DistSpec::Tc(name)) => Dist::Custom(read_tc_table(name).map_err(|reason| {
                    SpecError::File { flag: "delay-dist tc:", path: name.into(), reason }
                })?),
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
            // No correlation draws as the plain variation does (the same decisions).
            correlation: self.delay_correlation.filter(|c| c.get() > 0.0),
            trace,
        };
        if delay.correlation.is_some() && !delay.is_random() {
            return Err(SpecError::NeedsJitter("delay-correlation"));
        }
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
        let slot = match &self.slot {
            Some(SlotSpec { config, table: Some(name) }) => {
                let mut config = config.clone();
                if let Spacing::Dist { dist, .. } = &mut config.spacing {
                    *dist = Dist::Custom(read_tc_table(name).map_err(|reason| SpecError::File {
                        flag: "slot dist=tc:",
                        path: name.into(),
                        reason,
                    })?);
                }
                Some(config)
            }
            Some(s) => Some(s.config.clone()),
            None => None,
        };
        // No correlation draws as no correlation does (the same decisions).
        let positive = |c: Option<Probability>| c.filter(|c| c.get() > 0.0);
        let config = PathConfig {
            police: self.police,
            link,
            aqm: self.aqm.clone().unwrap_or_default(),
            loss,
            ber: self.ber,
            delay,
            slot,
            duplicate: self.duplicate,
            duplicate_correlation: positive(self.duplicate_correlation),
            corrupt: self.corrupt,
            corrupt_correlation: positive(self.corrupt_correlation),
            skip_delay: self.skip_delay,
            ecn: self.ecn,
            reorder: self.reorder,
            limit: self.limit,
        };
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathem_model::Nanos;

    /// Every path flag that takes a value takes one starting with `-` (`--cell -48,5`,
    /// `--limit -5`), so that the flag refuses it by name rather than clap taking it for a
    /// flag: a flag added without `allow_hyphen_values` fails here.
    #[test]
    fn every_path_flag_with_a_value_takes_a_leading_hyphen() {
        let cmd = <FlagWords as clap::CommandFactory>::command();
        let valued: Vec<_> = cmd.get_arguments().filter(|a| a.get_action().takes_values()).collect();
        assert!(valued.len() >= 20, "{} flags with values", valued.len());
        for a in valued {
            assert!(a.is_allow_hyphen_values_set(), "--{} refuses values starting with '-'", a.get_id());
        }
    }

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
            (
                "rate = '1mbit'\noverhead = 4294967295",
                "--overhead 4294967295 is out of range; accepted: -65536 to 65536",
            ),
            (
                "rate = '1mbit'\noverhead = 9223372036854775807",
                "--overhead 9223372036854775807 is out of range",
            ),
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
        // On a command line the later of the two wins (as across layers); a config table,
        // whose keys have no order, refuses both (`file::parse`).
        assert!(PathSpec::from_flags("--ecn --no-ecn").unwrap().no_ecn);
        assert!(PathSpec::from_flags("--no-ecn --ecn").unwrap().ecn);
    }

    /// A later layer (a `ctl set`, a schedule line, flags over a file) that names a rate trace
    /// replaces the rate, and the other way round; the same for a delay and a delay trace.
    /// Both in one layer stay refused.
    #[test]
    fn a_trace_and_its_plain_setting_replace_each_other_across_layers() {
        let f = |s: &str| PathSpec::from_flags(s).unwrap();
        let started = f("--rate 10mbit --delay 5ms --loss 1%");
        let traced = started.overridden_by(&f("--rate-trace t1 --delay-trace t2"));
        assert_eq!((traced.rate, traced.delay), (None, None));
        assert_eq!(traced.rate_trace.as_deref(), Some(Path::new("t1")));
        assert_eq!(traced.delay_trace.as_deref(), Some(Path::new("t2")));
        assert!(traced.loss.is_some(), "what the layer does not name stays");
        let back = traced.overridden_by(&f("--rate 5mbit"));
        assert_eq!((back.rate.is_some(), back.rate_trace.is_some()), (true, false));
        assert_eq!(back.delay_trace.as_deref(), Some(Path::new("t2")), "the delay trace stays");
        let back = back.overridden_by(&f("--delay 1ms"));
        assert_eq!((back.delay.is_some(), back.delay_trace.is_some()), (true, false));
        // Over a netem spec's rate and delay too (the spec is read as its flags first).
        let netem = f("--netem \"delay 10ms rate 10mbit loss 1%\"").overridden_by(&f("--rate-trace t1"));
        assert_eq!((netem.netem, netem.rate, netem.rate_trace.is_some()), (None, None, true));
        assert!(netem.delay.is_some() && netem.loss.is_some(), "the rest of the spec stays");
        let both = started.overridden_by(&f("--rate 1mbit --rate-trace t1"));
        assert!(matches!(both.to_config(), Err(SpecError::Conflict("rate", "rate-trace", _))));
    }

    /// A trace file read again is the same copy while a configuration holds it; changed, or
    /// parsed as another type, it is another.
    #[test]
    fn trace_files_are_one_copy_per_contents() {
        let f = std::env::temp_dir().join(format!("pathem-shared-{}.trace", std::process::id()));
        std::fs::write(&f, "1\n1\n").unwrap();
        let a = parse_file("rate-trace", &f, RateTrace::parse).unwrap();
        let b = parse_file("rate-trace", &f, RateTrace::parse).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let other = parse_file("loss trace:", &f, LossTrace::parse).unwrap();
        assert_ne!(Arc::as_ptr(&other).cast::<u8>(), Arc::as_ptr(&a).cast::<u8>());
        std::fs::write(&f, "0\n1\n").unwrap();
        let c = parse_file("rate-trace", &f, RateTrace::parse).unwrap();
        assert!(!Arc::ptr_eq(&a, &c) && *a != *c);
        std::fs::remove_file(&f).unwrap();
    }

    /// A byte order mark before a trace, schedule or config is left out, not taken as part of
    /// the first value; `--help` in a flag string is an unexpected argument, not clap's help.
    #[test]
    fn a_byte_order_mark_is_not_text_and_help_is_not_a_flag_here() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("rate.trace");
        std::fs::write(&f, "\u{feff}1\n").unwrap();
        let c = PathSpec::from_flags(&format!("--rate-trace {}", f.display())).unwrap().to_config().unwrap();
        assert!(matches!(c.link.unwrap().server, Server::Trace(t) if t.period() == Nanos::from_millis(1)));
        let s = dir.path().join("s.txt");
        std::fs::write(&s, "\u{feff}0s --delay 5ms\n").unwrap();
        assert!(crate::schedule::load(&s, &PathSpec::default(), &[], &[]).is_ok());
        let toml = dir.path().join("c.toml");
        std::fs::write(&toml, "\u{feff}[a_to_b]\ndelay = \"5ms\"\n").unwrap();
        assert!(crate::file::load(&toml).is_ok());
        for help in ["--help", "-h", "--delay 5ms --version"] {
            let e = PathSpec::from_flags(help).unwrap_err().to_string();
            assert!(e.starts_with("unexpected argument '-"), "{help}: {e}");
        }
    }

    /// In one load a file is read once: a schedule of many steps naming it reads it once, and
    /// sees one version of it. The next load reads it again.
    #[test]
    fn a_load_reads_each_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("rate.trace");
        std::fs::write(&f, "1\n").unwrap();
        let spec = PathSpec::from_flags(&format!("--rate-trace {}", f.display())).unwrap();
        let trace = |c: PathConfig| match c.link.unwrap().server {
            Server::Trace(t) => t,
            Server::Rate(_) => unreachable!(),
        };
        let (first, second) = reading_each_file_once(|| {
            let first = trace(spec.to_config().unwrap());
            std::fs::write(&f, "2\n").unwrap();
            (first, trace(spec.to_config().unwrap()))
        });
        assert!(Arc::ptr_eq(&first, &second), "read once in a load");
        let next = trace(spec.to_config().unwrap());
        assert_eq!(next.period(), Nanos::from_millis(2), "read again in the next");
        // A load that fails ends too: the next reads anew.
        std::fs::write(&f, "3\n").unwrap();
        let failed: Result<(), SpecError> = reading_each_file_once(|| {
            spec.to_config()?;
            Err(SpecError::Flags("stop".into()))
        });
        assert!(failed.is_err());
        std::fs::write(&f, "4\n").unwrap();
        assert_eq!(trace(spec.to_config().unwrap()).period(), Nanos::from_millis(4));
    }

    #[test]
    fn flag_strings_split_as_a_shell_would() {
        let w = |t: &str| split_words(t).unwrap();
        assert_eq!(
            w("--netem \"delay 10ms 1ms\" --ber 1e-6"),
            ["--netem", "delay 10ms 1ms", "--ber", "1e-6"]
        );
        assert_eq!(w("--netem 'delay 10ms'"), ["--netem", "delay 10ms"]);
        assert_eq!(w("--netem=\"a b\"c"), ["--netem=a bc"]);
        assert_eq!(w("  a\\ b  \"x\\\"y\" '' "), ["a b", "x\"y", ""]);
        assert_eq!(w("\"it's\" 'say \"hi\"'"), ["it's", "say \"hi\""]);
        assert!(w("").is_empty());
        for bad in ["--netem 'delay", "--netem \"delay", "\"a\\"] {
            assert!(split_words(bad).unwrap_err().contains("not closed"), "{bad}");
        }
        assert!(PathSpec::from_flags("--netem 'delay").unwrap_err().to_string().contains("not closed"));
        for word in ["plain", "two words", "it's", "say \"hi\"", "back\\slash", ""] {
            assert_eq!(split_words(&quote_word(word)).unwrap(), [word], "{word}");
        }
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

    #[test]
    fn flags_over_an_earlier_netem_spec_change_it_word_for_word() {
        let started = PathSpec::from_flags("--netem 'delay 40ms loss 1%'").unwrap();
        let changed = started.overridden_by(&PathSpec::from_flags("--delay 20ms").unwrap());
        let cfg = changed.to_config().unwrap();
        assert_eq!(cfg.delay.base, pathem_model::Nanos::from_millis(20));
        assert!(cfg.loss.is_some(), "the spec's loss stays");
        // Within one layer, the two are refused.
        let both = PathSpec::from_flags("--netem 'delay 40ms' --delay 20ms").unwrap();
        assert!(both.to_config().unwrap_err().to_string().contains("cannot be used together"));
    }
}
