//! `--schedule FILE`: changes of the path at set times after the start.
//!
//! ```text
//! # TIME   FLAGS (the same as on the command line)
//! 0s       --delay 20ms
//! 10s      --loss 5%
//! 25s      --rate 2mbit --queue 30KB
//! repeat 30s
//! ```
//! Each line's flags apply on top of the path as it was just before (the run's own flags for
//! the first line), key by key, as `pathem ctl NAME set` does; a line with `--reset` starts
//! from no impairment instead (`40s --reset --delay 5ms`; its classes keep theirs). Times count from the start (the
//! first frame's arrival for `replay`), increase from line to line and stay within a day;
//! `repeat T` starts the schedule again every T. Every line is checked before anything runs:
//! a bad one is refused with its line number. A line may change a class as `ctl set` does,
//! `10s --class dns "--loss 50%"` (the class's flags on top of its own, and the line's bare
//! flags, if any, on the default path).

use crate::error::{ScheduleError, SpecError};
use crate::path::PathSpec;
use pathem_model::limits::MAX_TRACE_SPAN;
use pathem_model::units::{parse_duration, shown};
use pathem_model::Nanos;
use std::path::Path;

/// A schedule as written: each step's full flags (earlier lines folded in), and the period.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleSpec {
    pub steps: Vec<(Nanos, usize, PathSpec)>,
    pub period: Option<Nanos>,
    /// Each class's steps, in the order of the classes given to [`parse_with_classes`].
    pub class_steps: Vec<Vec<(Nanos, usize, PathSpec)>>,
}

/// Parses a schedule whose first step builds on `base`; file names in flags are taken
/// relative to `dir`. Errors are `line N: what is wrong`.
pub fn parse(text: &str, base: &PathSpec, dir: &Path) -> Result<ScheduleSpec, ScheduleError> {
    parse_with_classes(text, base, &[], &[], dir)
}

/// [`parse`] for a direction with classes (`(name, spec)` each): a line's `--class NAME FLAGS`
/// changes that class, building on its spec. A class only the link's other direction has
/// (`elsewhere`) is left to that direction's schedule; a name neither has is refused.
pub fn parse_with_classes(
    text: &str,
    base: &PathSpec,
    classes: &[(&str, &PathSpec)],
    elsewhere: &[String],
    dir: &Path,
) -> Result<ScheduleSpec, ScheduleError> {
    let mut steps: Vec<(Nanos, usize, PathSpec)> = Vec::new();
    let mut class_steps: Vec<Vec<(Nanos, usize, PathSpec)>> = vec![Vec::new(); classes.len()];
    let mut class_current: Vec<PathSpec> = classes.iter().map(|(_, s)| (*s).clone()).collect();
    let mut last_time: Option<Nanos> = None;
    let mut period = None;
    let mut lines = 0u64;
    let mut current = base.clone();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let line = without_comment(line).trim();
        if line.is_empty() {
            continue;
        }
        let (time, flags) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        if time == "repeat" {
            if period.is_some() {
                return Err(at(n, "a second `repeat` (a schedule has one period)".into()));
            }
            let p = parse_duration(flags.trim()).map_err(|e| at(n, format!("repeat {e}")))?;
            period = Some(p);
            continue;
        }
        if period.is_some() {
            return Err(at(n, "a step after `repeat` (put `repeat` last)".into()));
        }
        let when = parse_duration(time).map_err(|e| at(n, e.to_string()))?;
        if when > MAX_TRACE_SPAN {
            return Err(at(n, format!("{when} is past the longest schedule, 1 day")));
        }
        if let Some(last) = last_time {
            if when <= last {
                return Err(at(n, format!("time {when} is not after the previous line's {last}")));
            }
        }
        last_time = Some(when);
        lines += 1;
        if flags.trim().is_empty() {
            return Err(at(n, format!("`{}` needs TIME FLAGS, e.g. 10s --delay 20ms", shown(line))));
        }
        let (change, reset) = crate::change::flags_after_reset(flags).map_err(|e| at(n, e.to_string()))?;
        let change = change.relative_to(dir);
        let names_a_class = change.has_classes();
        for (k, pair) in change.class.chunks(2).enumerate() {
            let [name, flags] = pair else { continue };
            if change.class.chunks(2).take(k).any(|p| p[0] == *name) {
                return Err(at(
                    n,
                    format!("--class {name} is given twice on one line (put its flags in one string)"),
                ));
            }
            let Some(i) = classes.iter().position(|(c, _)| c == name) else {
                if elsewhere.contains(name) {
                    continue;
                }
                if name == "default" {
                    return Err(at(
                        n,
                        "--class default: the default path is changed by the flags without --class (`10s --delay 5ms`)"
                            .into(),
                    ));
                }
                let mut known: Vec<&str> = classes.iter().map(|(c, _)| *c).collect();
                for e in elsewhere.iter().map(String::as_str) {
                    if !known.contains(&e) {
                        known.push(e);
                    }
                }
                return Err(at(
                    n,
                    format!("--class {name}: no class of that name (classes: {})", names(&known)),
                ));
            };
            let flags =
                crate::class::class_flags(name, flags).map_err(|e| at(n, e.to_string()))?.relative_to(dir);
            class_current[i] = class_current[i].overridden_by(&flags);
            class_steps[i].push((when, n, class_current[i].clone()));
        }
        let change = change.without_classes();
        if change != PathSpec::default() || !names_a_class || reset {
            if reset {
                current = PathSpec::default();
            }
            current = current.overridden_by(&change);
            steps.push((when, n, current.clone()));
        }
    }
    let Some(last) = last_time else { return Err(ScheduleError::Empty) };
    if let Some(p) = period {
        // At least a millisecond a line: a period of nanoseconds would have the engine apply
        // changes faster than it can, and never reach its next frame.
        if p <= last || p < Nanos::from_millis(lines) || p > MAX_TRACE_SPAN {
            return Err(ScheduleError::Period { period: p, last, lines });
        }
    }
    Ok(ScheduleSpec { steps, period, class_steps })
}

/// A line up to its comment: a `#` outside quotes (`"…"` with `\` escapes, `'…'`, a `\`
/// before a character outside them, as flag strings are split).
fn without_comment(line: &str) -> &str {
    let (mut quote, mut escaped) = (None, false);
    for (i, c) in line.char_indices() {
        match (quote, c) {
            _ if escaped => escaped = false,
            (Some('\''), '\'') | (Some('"'), '"') => quote = None,
            (Some('"'), '\\') | (None, '\\') => escaped = true,
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') => return &line[..i],
            _ => {}
        }
    }
    line
}

fn names(list: &[&str]) -> String {
    if list.is_empty() {
        "none".into()
    } else {
        list.join(", ")
    }
}

fn at(line: usize, reason: String) -> ScheduleError {
    ScheduleError::Line { line, reason }
}

/// Reads and parses a schedule file for a direction with `classes`; errors are
/// `schedule FILE:LINE: …`.
pub fn load(
    file: &Path,
    base: &PathSpec,
    classes: &[(&str, &PathSpec)],
    elsewhere: &[String],
) -> Result<ScheduleSpec, SpecError> {
    let text = crate::read_text(file, crate::MAX_TEXT_FILE)
        .map_err(|reason| SpecError::ScheduleUnreadable { path: file.into(), reason })?;
    let dir = file.parent().unwrap_or(Path::new("."));
    parse_with_classes(&text, base, classes, elsewhere, dir)
        .map_err(|error| SpecError::Schedule { path: file.into(), error })
}

/// The engine's schedule for one direction: each step's flags made into a checked path.
pub fn to_schedule(spec: &ScheduleSpec, file: &Path) -> Result<pathem_engine::Schedule, SpecError> {
    steps_to_schedule(&spec.steps, spec.period, file)
}

/// Each class's schedule (`None` for a class no line names), in the classes' order.
pub fn class_schedules(
    spec: &ScheduleSpec,
    file: &Path,
) -> Result<Vec<Option<pathem_engine::Schedule>>, SpecError> {
    spec.class_steps
        .iter()
        .map(|steps| match steps.is_empty() {
            true => Ok(None),
            false => steps_to_schedule(steps, spec.period, file).map(Some),
        })
        .collect()
}

fn steps_to_schedule(
    steps_in: &[(Nanos, usize, PathSpec)],
    period: Option<Nanos>,
    file: &Path,
) -> Result<pathem_engine::Schedule, SpecError> {
    let mut steps = Vec::new();
    for (when, line, flags) in steps_in {
        let config = flags
            .to_config()
            .map_err(|e| SpecError::Schedule { path: file.into(), error: at(*line, e.to_string()) })?;
        steps.push((*when, config));
    }
    Ok(pathem_engine::Schedule::new(steps, period))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_build_on_each_other_and_repeat() {
        let base = PathSpec::from_flags("--delay 5ms --loss 1%").unwrap();
        let s = parse(
            "# test\n0s --delay 20ms\n10s --loss 5%\n\n25s --rate 2mbit --queue 30KB\nrepeat 30s\n",
            &base,
            Path::new("."),
        )
        .unwrap();
        assert_eq!(s.period, Some(Nanos::from_secs(30)));
        let times: Vec<Nanos> = s.steps.iter().map(|s| s.0).collect();
        assert_eq!(times, [Nanos(0), Nanos::from_secs(10), Nanos::from_secs(25)]);
        let last = &s.steps[2].2;
        assert_eq!(last.delay.unwrap().0, Nanos::from_millis(20), "kept from line 1");
        assert_eq!(last.loss, PathSpec::from_flags("--loss 5%").unwrap().loss, "kept from line 2");
        assert!(last.rate.is_some() && last.queue.is_some());
        let sched = to_schedule(&s, Path::new("s")).unwrap();
        assert_eq!(sched.steps().len(), 3);
    }

    /// `--reset` on a line starts it from no impairment (the run's own flags and earlier lines
    /// gone), and the next line builds on it; a class on that line keeps its own flags.
    #[test]
    fn a_reset_line_starts_from_no_impairment() {
        let base = PathSpec::from_flags("--delay 5ms --rate 10mbit").unwrap();
        let class = PathSpec::from_flags("--class c1 'tcp' --delay 1ms").unwrap();
        let text =
            "0s --loss 1%\n10s --reset --delay 7ms --class c1 '--loss 2%'\n20s --loss 3%\n30s --reset\n";
        let s = parse_with_classes(text, &base, &[("c1", &class)], &[], Path::new(".")).unwrap();
        let steps: Vec<&PathSpec> = s.steps.iter().map(|s| &s.2).collect();
        assert_eq!(steps[0].rate, base.rate, "line 1 builds on the run's flags");
        assert_eq!(steps[1], &PathSpec::from_flags("--delay 7ms").unwrap());
        assert_eq!(steps[2], &PathSpec::from_flags("--delay 7ms --loss 3%").unwrap());
        assert_eq!(steps[3], &PathSpec::default());
        assert_eq!(s.class_steps[0][0].2.delay, class.delay, "the class keeps its own");
        let e = parse("0s --reset=yes\n", &base, Path::new(".")).unwrap_err().to_string();
        assert!(e.contains("line 1:"), "{e}");
        // A `--reset` that is a class's flags is the class's (which refuses it), never the line's.
        let e = parse_with_classes(
            "0s --class c1 '--reset' --ecn\n",
            &base,
            &[("c1", &class)],
            &[],
            Path::new("."),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 1:") && e.contains("--reset"), "{e}");
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        let base = PathSpec::default();
        for (text, says) in [
            ("", "no TIME FLAGS"),
            ("0s\n", "line 1: `0s` needs TIME FLAGS"),
            ("1s --delay 1ms\n1s --delay 2ms\n", "line 2: time 1s is not after"),
            ("1x --delay 1ms\n", "line 1: `1x` has unknown unit"),
            ("0s --delay 1ms\n5s --frobnicate\n", "line 2:"),
            ("0s --delay 1ms\n5s --delay 10q\n", "line 2:"),
            ("0s --delay 1ms\nrepeat 0s\n", "repeat 0ns"),
            ("0s --delay 1ms\nrepeat 2s\n3s --delay 2ms\n", "line 3: a step after `repeat`"),
            ("90000s --delay 1ms\n", "line 1: 90000s is past"),
            // A period shorter than a millisecond a line would have changes fall due faster
            // than the engine applies them (1ns hung a replay).
            ("0s --delay 1ms\nrepeat 1ns\n", "repeat 1ns: accepted: after the last time (0ns), at least 1ms"),
            (
                "0s --delay 1ms\n1us --delay 2ms\nrepeat 1999us\n",
                "at least 1ms for each of the 2 timed lines",
            ),
            ("0s --delay 1ms\nrepeat 10s\nrepeat 1s\n", "line 3: a second `repeat`"),
        ] {
            let e = parse(text, &base, Path::new(".")).unwrap_err().to_string();
            assert!(e.contains(says), "{text:?}: {e}");
        }
        // Checked as paths too: out of range on line 2.
        let s = parse("0s --delay 1ms\n5s --delay 2h\n", &base, Path::new(".")).unwrap();
        let e = to_schedule(&s, Path::new("f")).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("--delay 7200s is out of range"), "{e}");
        // The shortest period: a millisecond a line.
        let s = parse("0s --delay 1ms\n1us --delay 2ms\nrepeat 2ms\n", &base, Path::new(".")).unwrap();
        assert_eq!(s.period, Some(Nanos::from_millis(2)));
        // A class changed twice on one line would be two steps at one time.
        let class = PathSpec::from_flags("--class c1 'tcp' --delay 1ms").unwrap();
        let e = parse_with_classes(
            "0s --class c1 '--delay 5ms' --class c1 '--delay 7ms'\n",
            &base,
            &[("c1", &class)],
            &[],
            Path::new("."),
        )
        .unwrap_err();
        assert!(e.to_string().contains("--class c1 is given twice on one line"), "{e}");
        let e = parse_with_classes(
            "0s --class default '--delay 5ms'\n",
            &base,
            &[("c1", &class)],
            &[],
            Path::new("."),
        )
        .unwrap_err();
        assert!(e.to_string().contains("the default path is changed by the flags without --class"), "{e}");
    }

    /// A `#` starts a comment outside quotes only: a file name may hold one.
    #[test]
    fn comments_start_outside_quotes() {
        assert_eq!(without_comment("0s --delay 1ms # slower"), "0s --delay 1ms ");
        assert_eq!(without_comment("#"), "");
        assert_eq!(without_comment(r#"0s --loss "trace:a#b" #c"#), r#"0s --loss "trace:a#b" "#);
        assert_eq!(without_comment("0s --loss 'trace:a#b'"), "0s --loss 'trace:a#b'");
        assert_eq!(without_comment(r"0s --loss trace:a\#b #c"), r"0s --loss trace:a\#b ");
        assert_eq!(without_comment(r#"0s --netem "delay 1ms \" #" #c"#), r#"0s --netem "delay 1ms \" #" "#);
        let s = parse("0s --loss 'trace:a#b' # c\n", &PathSpec::default(), Path::new("/d")).unwrap();
        let loss = s.steps[0].2.loss.as_ref().unwrap();
        assert!(format!("{loss:?}").contains("/d/a#b"), "{loss:?}");
    }
}
