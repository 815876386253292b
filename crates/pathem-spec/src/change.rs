//! A change of a running link, in the words of `pathem ctl NAME set`: flags for both
//! directions, and `--a-to-b "FLAGS"` / `--b-to-a "FLAGS"` for one. The same per-direction
//! strings serve `run` and `shell` at start ([`direction`]).

use crate::error::{first_line, SpecError};
use crate::path::PathSpec;

/// The words of `ctl set`.
#[derive(clap::Parser, Debug)]
#[command(no_binary_name = true, disable_help_flag = true, disable_version_flag = true)]
struct SetWords {
    #[command(flatten)]
    path: PathSpec,
    #[arg(long)]
    reset: bool,
    #[arg(long, alias = "egress", allow_hyphen_values = true)]
    a_to_b: Option<String>,
    #[arg(long, alias = "ingress", allow_hyphen_values = true)]
    b_to_a: Option<String>,
}

/// A class a change names: its name, its flags, and the directions it may change (0: a→b,
/// 1: b→a).
pub type ClassChange = (String, PathSpec, &'static [usize]);

/// What `ctl set` asks: flags for both directions, then each direction's own.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Change {
    pub both: PathSpec,
    pub a_to_b: PathSpec,
    pub b_to_a: PathSpec,
    /// `--reset`: both directions (egress alone on an attached interface) start from no
    /// impairment before the flags apply, rather than from what they run; classes keep theirs.
    pub reset: bool,
    /// `--reset` among a direction's own words (`--a-to-b "--reset --delay 5ms"`): that
    /// direction (0: a→b, 1: b→a) starts from no impairment.
    pub reset_own: [bool; 2],
}

impl Change {
    /// Parses the words of `ctl set`; the error is one line naming what is wrong.
    pub fn parse(words: &[String]) -> Result<Change, SpecError> {
        let set = <SetWords as clap::Parser>::try_parse_from(words)
            .map_err(|e| SpecError::Flags(first_line(&e)))?;
        let (a_to_b, reset_ab) = changed_direction("a-to-b", set.a_to_b.as_deref())?;
        let (b_to_a, reset_ba) = changed_direction("b-to-a", set.b_to_a.as_deref())?;
        Ok(Change { both: set.path, a_to_b, b_to_a, reset: set.reset, reset_own: [reset_ab, reset_ba] })
    }

    /// Whether the change starts direction `d` (0: a→b, 1: b→a) from no impairment: its own
    /// `--reset`, or the common one, which is both directions' (on an attached interface
    /// egress's alone, as the common words are).
    pub fn resets(&self, d: usize, attached: bool) -> bool {
        self.reset_own[d] || (self.reset && (d == 0 || !attached))
    }

    /// Whether the change asks anything of direction `d` by its own words.
    pub fn asks_own(&self, d: usize) -> bool {
        let own = if d == 0 { &self.a_to_b } else { &self.b_to_a };
        self.reset_own[d] || *own != PathSpec::default()
    }

    /// The two directions after the change: each one's current spec (none where it
    /// [resets](Change::resets)) with the common flags on top, then its own. On an attached
    /// interface (`attach`), the common flags are egress's (a→b) alone, as they are at its
    /// start.
    pub fn apply(&self, current: &(PathSpec, PathSpec), attached: bool) -> (PathSpec, PathSpec) {
        let none = PathSpec::default();
        let both_ba = if attached { &none } else { &self.both };
        let (both, both_ba) = (self.both.without_classes(), both_ba.without_classes());
        let base = |d: usize, current: &PathSpec| {
            if self.resets(d, attached) {
                none.clone()
            } else {
                current.clone()
            }
        };
        (
            base(0, &current.0).overridden_by(&both).overridden_by(&self.a_to_b.without_classes()),
            base(1, &current.1).overridden_by(&both_ba).overridden_by(&self.b_to_a.without_classes()),
        )
    }

    /// The classes the change names (`--class NAME FLAGS`): each with its flags and the
    /// directions it may change (0: a→b, 1: b→a). A name among the common words changes the
    /// class of that name in each direction that has one (egress alone when attached); one in
    /// `--a-to-b`/`--b-to-a` that direction's.
    pub fn classes(&self, attached: bool) -> Result<Vec<ClassChange>, SpecError> {
        let both: &'static [usize] = if attached { &[0] } else { &[0, 1] };
        let mut out = Vec::new();
        for (spec, dirs) in [(&self.both, both), (&self.a_to_b, &[0][..]), (&self.b_to_a, &[1][..])] {
            for pair in spec.class.chunks(2) {
                if let [name, flags] = pair {
                    out.push((name.clone(), crate::class::class_flags(name, flags)?, dirs));
                }
            }
        }
        Ok(out)
    }
}

/// One direction's words in `ctl set`: [`direction`]'s flags, and whether `--reset` is among
/// them (`--b-to-a "--reset --delay 5ms"`: that direction from no impairment).
fn changed_direction(flag: &str, text: Option<&str>) -> Result<(PathSpec, bool), SpecError> {
    let Some(text) = text else { return Ok((PathSpec::default(), false)) };
    let refused = |e| SpecError::Direction { flag: flag.into(), text: text.into(), reason: Box::new(e) };
    flags_after_reset(text).map_err(refused)
}

/// Flags that may hold `--reset` among them (a direction's words in `ctl set`, a schedule's
/// line): the path they name, and whether `--reset` was there. Parsed as flags, so a
/// `--reset` that is another flag's value (`--class c1 "--reset"`) stays that flag's.
pub(crate) fn flags_after_reset(text: &str) -> Result<(PathSpec, bool), SpecError> {
    #[derive(clap::Parser, Debug)]
    #[command(no_binary_name = true, disable_help_flag = true, disable_version_flag = true)]
    struct ResetWords {
        #[command(flatten)]
        path: PathSpec,
        #[arg(long)]
        reset: bool,
    }
    let words = crate::path::split_words(text).map_err(SpecError::Flags)?;
    let w =
        <ResetWords as clap::Parser>::try_parse_from(&words).map_err(|e| SpecError::Flags(first_line(&e)))?;
    Ok((w.path, w.reset))
}

/// One direction's flags given as a string (`--a-to-b "--delay 10ms --loss 1%"`): nothing
/// when absent; the error names the flag and the string.
pub fn direction(flag: &str, text: Option<&str>) -> Result<PathSpec, SpecError> {
    let Some(text) = text else { return Ok(PathSpec::default()) };
    PathSpec::from_flags(text).map_err(|e| SpecError::Direction {
        flag: flag.into(),
        text: text.into(),
        reason: Box::new(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathem_model::Nanos;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn common_flags_then_each_directions_own() {
        let current =
            (PathSpec::from_flags("--delay 5ms").unwrap(), PathSpec::from_flags("--loss 1%").unwrap());
        let mut w = words("--rate 10mbit --a-to-b");
        w.push("--delay 20ms".into());
        let (ab, ba) = Change::parse(&w).unwrap().apply(&current, false);
        assert_eq!(ab.delay.unwrap().0, Nanos::from_millis(20));
        assert!(ab.rate.is_some() && ba.rate.is_some());
        assert_eq!(ba.loss, current.1.loss);
        assert!(Change::parse(&words("--frobnicate")).unwrap_err().to_string().contains("--frobnicate"));
        let mut w = words("--a-to-b");
        w.push("--delay 1x".into());
        assert!(Change::parse(&w).unwrap_err().to_string().starts_with("--a-to-b \"--delay 1x\""));
    }

    /// `--reset` drops what each direction ran (egress alone when attached) before the flags.
    #[test]
    fn a_reset_starts_from_no_impairment() {
        let current = (
            PathSpec::from_flags("--delay 5ms --rate 1mbit").unwrap(),
            PathSpec::from_flags("--loss 1%").unwrap(),
        );
        let change = Change::parse(&words("--reset --delay 10ms")).unwrap();
        let (ab, ba) = change.apply(&current, false);
        assert_eq!(ab, PathSpec::from_flags("--delay 10ms").unwrap());
        assert_eq!(ba, ab);
        let (ab, ba) = change.apply(&current, true);
        assert_eq!(ab, PathSpec::from_flags("--delay 10ms").unwrap());
        assert_eq!(ba, current.1, "attached: the common words are egress's");
        let (ab, ba) = Change::parse(&words("--reset")).unwrap().apply(&current, false);
        assert_eq!((ab, ba), (PathSpec::default(), PathSpec::default()));
        assert!(!Change::parse(&words("--delay 1ms")).unwrap().reset);
        assert!(Change::parse(&words("--reset=yes")).is_err());
        // A direction's own: that direction alone, on an attach's ingress too.
        let mut w = words("--b-to-a");
        w.push("--reset --loss 2%".into());
        let change = Change::parse(&w).unwrap();
        assert_eq!((change.resets(0, false), change.resets(1, true)), (false, true));
        let (ab, ba) = change.apply(&current, true);
        assert_eq!((ab, ba), (current.0.clone(), PathSpec::from_flags("--loss 2%").unwrap()));
        assert!(change.asks_own(1) && !change.asks_own(0));
        let mut w = words("--a-to-b");
        w.push("--reset".into());
        assert!(Change::parse(&w).unwrap().asks_own(0), "a reset alone asks");
        let mut w = words("--a-to-b");
        w.push("--reset --delay 1x".into());
        let e = Change::parse(&w).unwrap_err().to_string();
        assert!(e.starts_with("--a-to-b \"--reset --delay 1x\""), "the words as given: {e}");
    }

    #[test]
    fn classes_named_in_a_change_go_where_they_are_asked() {
        let current = (PathSpec::from_flags("--delay 5ms").unwrap(), PathSpec::default());
        let w: Vec<String> = ["--class", "dns", "--loss 50%", "--b-to-a", "--class video '--delay 1ms'"]
            .map(String::from)
            .into();
        let change = Change::parse(&w).unwrap();
        // The default paths are not touched by a class's flags.
        let (ab, ba) = change.apply(&current, false);
        assert_eq!((ab, ba), current);
        let classes = change.classes(false).unwrap();
        let got: Vec<(&str, &[usize])> = classes.iter().map(|(n, _, d)| (n.as_str(), *d)).collect();
        assert_eq!(got, [("dns", &[0, 1][..]), ("video", &[1][..])]);
        assert!(classes[0].1.loss.is_some());
        // Attached, the common words are egress's alone.
        assert_eq!(change.classes(true).unwrap()[0].2, &[0]);
        let w: Vec<String> = ["--class", "dns", "--class x '--loss 1%'"].map(String::from).into();
        let e = Change::parse(&w).unwrap().classes(false).unwrap_err().to_string();
        assert!(e.contains("cannot hold --class"), "{e}");
    }
}
