//! `pathem`: the command-line front end of the path emulator.
//!
//! Exit codes: 0 success, 1 a run failed (unreadable capture, I/O error), 2 bad usage (a flag,
//! a value or a config key that pathem does not accept). Every error is one line on stderr.
//!
//! The doc comments of the flags are clap's help text, where `[a_to_b]` is a table's name,
//! not a link.
#![allow(rustdoc::broken_intra_doc_links)]

// print!, println!, eprint!, eprintln! without their panic (`pathem_runtime::stdio` says how).
macro_rules! out { ($($a:tt)*) => { pathem_runtime::stdio::out(format_args!($($a)*)) } }
macro_rules! outln { ($($a:tt)*) => { out!("{}\n", format_args!($($a)*)) } }
macro_rules! err { ($($a:tt)*) => { pathem_runtime::stdio::err(format_args!($($a)*)) } }
macro_rules! errln { ($($a:tt)*) => { err!("{}\n", format_args!($($a)*)) } }

mod attach;
mod bench;
mod ctl;
mod demo;
mod docs;
mod netem;
mod probe;
mod replay;
mod run;
mod shell;
mod validate;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// pathem — a software network path emulator.
///
/// Forwards Ethernet frames and imposes, per direction, the properties of a chosen path:
/// rate and queue, loss, delay. Reproducible with --seed.
#[derive(Parser, Debug)]
#[command(name = "pathem", version = env!("PATHEM_VERSION"), about, long_about = None, max_term_width = 110)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Emulate a path offline: read IN.pcap, write OUT.pcap stamped with release times.
    Replay(replay::ReplayArgs),
    /// Emulate a path live between two interfaces, both directions.
    Run(Box<run::RunArgs>),
    /// Emulate in place on an interface (egress, as tc netem; --ingress too); nothing on it moves.
    Attach(Box<attach::AttachArgs>),
    /// Watch or change a running `run`, `attach` or `shell`: ctl list, ctl NAME show, ctl NAME set FLAGS.
    Ctl(ctl::CtlArgs),
    /// Run a command in a network namespace behind an emulated link (uplink = a→b).
    Shell(shell::ShellArgs),
    /// Measure what a path does: timestamped datagrams, delays, gaps, losses, figures.
    Probe(probe::ProbeArgs),
    /// Check pathem against what it is asked, for a matrix of paths, in namespaces (root).
    Validate(validate::ValidateArgs),
    /// Measure the engine alone: synthetic frames through the real stages, real clock.
    Bench(bench::BenchArgs),
    /// Generate a small capture, replay it through a typical path, and show what happened.
    Demo(demo::DemoArgs),
    /// Say a tc-netem(8) spec in pathem's flags and config lines, or (--from-flags) the reverse.
    Netem(netem::NetemArgs),
    /// Print the completion script of SHELL (bash, zsh, fish, elvish, powershell) on stdout.
    Completions { shell: clap_complete::Shell },
    /// Write the man pages (pathem.1, pathem-run.1, ...) into DIR (for packages).
    #[command(hide = true)]
    Manpages { dir: std::path::PathBuf },
}

/// Bad usage: reported on one line, exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Wraps a message as a usage error.
pub fn usage(msg: impl std::fmt::Display) -> anyhow::Error {
    UsageError(msg.to_string()).into()
}

/// Checks a value the command line alone uses against its documented range (`flag` with its
/// dashes); outside it, the one-line usage error every range refusal has.
pub fn within<T: PartialOrd + std::fmt::Display>(
    flag: &'static str,
    value: T,
    range: std::ops::RangeInclusive<T>,
    accepted: &str,
) -> anyhow::Result<()> {
    pathem_model::limits::within(flag.trim_start_matches("--"), value, range, accepted).map_err(usage)
}

/// A library's error as the command line reports it: what the user named wrongly (a setting
/// out of range, a CPU, a port, a name) is bad usage (exit 2); what failed is a failed run.
pub fn runtime_error(e: pathem_runtime::Error) -> anyhow::Error {
    lab_error(e.into())
}

/// As [`runtime_error`], for the lab's (which says a runtime error's kind as it is).
pub fn lab_error(e: pathem_lab::Error) -> anyhow::Error {
    if e.is_usage() {
        usage(e)
    } else {
        e.into()
    }
}

fn main() -> ExitCode {
    pathem_io::default_sigpipe();
    let matches = negative_numbers_as_values(Cli::command()).try_get_matches();
    let cli = match matches.and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m)) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                return end(anyhow::Context::context(e.print(), "cannot write to standard output"));
            }
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                let _ = e.print();
                return ExitCode::from(2);
            }
            errln!("pathem: {}", pathem_runtime::stdio::usage_line(&e.render().to_string()));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Replay(args) => replay::main(args),
        Command::Run(args) => run::main(*args),
        Command::Attach(args) => attach::main(*args),
        Command::Shell(args) => shell::main(args),
        Command::Ctl(args) => ctl::main(args),
        Command::Probe(args) => probe::main(args),
        Command::Validate(args) => validate::main(args),
        Command::Bench(args) => bench::main(args),
        Command::Demo(args) => demo::main(args),
        Command::Netem(args) => netem::main(args),
        Command::Completions { shell } => docs::completions(shell, Cli::command()),
        Command::Manpages { dir } => docs::manpages(&dir, Cli::command()),
    };
    end(result)
}

/// `--count -5` is a count refused for its sign (one line naming the flag), not `-5` taken
/// for an unknown flag: in every subcommand, as clap's settings are each command's own.
fn negative_numbers_as_values(c: clap::Command) -> clap::Command {
    c.allow_negative_numbers(true).mut_subcommands(negative_numbers_as_values)
}

/// A run's exit code and error line; what it printed must have reached standard output.
fn end(result: anyhow::Result<()>) -> ExitCode {
    let written = pathem_runtime::stdio::stdout_result().map_err(anyhow::Error::new);
    match result.and(written.map_err(|e| e.context("cannot write to standard output"))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = if e.downcast_ref::<UsageError>().is_some() { 2 } else { 1 };
            errln!("pathem: {}", pathem_runtime::stdio::one_line(e.chain()));
            ExitCode::from(code)
        }
    }
}
