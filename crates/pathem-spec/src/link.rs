//! A link's directions as every command resolves them: the config file's table, the flags
//! common to both directions, then each direction's own flags (`--a-to-b "..."`), checked into
//! a path; and the schedule of changes built on each.

use crate::change::direction;
use crate::class::Class;
use crate::error::SpecError;
use crate::file::{self, ConfigFile};
use crate::path::PathSpec;
use crate::schedule;
use pathem_engine::Schedule;
use pathem_model::PathConfig;
use std::path::Path;

/// One direction, resolved.
#[derive(Clone, Debug)]
pub struct Direction {
    /// The merged spec: what `ctl set` and the schedule's lines build on.
    pub spec: PathSpec,
    /// The checked path.
    pub path: PathConfig,
    /// `--schedule`'s changes, built on `spec`.
    pub schedule: Option<Schedule>,
    /// The schedule's steps as specs (each line on top of the ones before), in its order:
    /// what a `ctl set` that holds over the schedule builds on.
    pub schedule_specs: Vec<PathSpec>,
    /// What a `--netem` spec in the layers said of how its words were read and where pathem's
    /// meaning differs (`pathem netem` gives the same), a line each.
    pub notes: Vec<String>,
    /// The direction's classes, in the order frames are tried (`spec` and `path` are then the
    /// default path's, for frames none takes).
    pub classes: Vec<Class>,
}

impl Direction {
    /// `layers` merged in order (later ones win, field by field), checked, and the schedule
    /// in `schedule` built on the result.
    pub fn resolve(layers: &[&PathSpec], schedule: Option<&Path>) -> Result<Direction, SpecError> {
        Direction::resolve_among(layers, schedule, &[])
    }

    /// [`resolve`](Self::resolve) for one direction of a link whose other direction has the
    /// classes `elsewhere`: a schedule line's `--class NAME` for one of those changes that
    /// direction alone, and is no error here.
    pub fn resolve_among(
        layers: &[&PathSpec],
        schedule: Option<&Path>,
        elsewhere: &[String],
    ) -> Result<Direction, SpecError> {
        crate::path::reading_each_file_once(|| Direction::resolve_once(layers, schedule, elsewhere))
    }

    fn resolve_once(
        layers: &[&PathSpec],
        schedule: Option<&Path>,
        elsewhere: &[String],
    ) -> Result<Direction, SpecError> {
        let merged = merge(layers);
        let classes = crate::class::resolve(&merged)?;
        let spec = merged.without_classes();
        let path = spec.to_config()?;
        let mut classes = classes;
        let mut schedule_specs = Vec::new();
        let schedule = match schedule {
            Some(f) => {
                let named: Vec<(&str, &PathSpec)> =
                    classes.iter().map(|c| (c.name.as_str(), &c.spec)).collect();
                let s = schedule::load(f, &spec, &named, elsewhere)?;
                for (c, sched) in classes.iter_mut().zip(schedule::class_schedules(&s, f)?) {
                    c.schedule = sched;
                }
                for (c, steps) in classes.iter_mut().zip(&s.class_steps) {
                    c.schedule_specs = steps.iter().map(|step| step.2.clone()).collect();
                }
                schedule_specs = s.steps.iter().map(|step| step.2.clone()).collect();
                Some(schedule::to_schedule(&s, f)?)
            }
            None => None,
        };
        let class_netem = classes.iter().filter_map(|c| c.spec.netem.as_ref());
        let mut notes: Vec<String> = layers
            .iter()
            .filter_map(|l| l.netem.as_ref())
            .chain(class_netem)
            .flat_map(|n| n.notes())
            .chain(path_notes(&path))
            .chain(classes.iter().flat_map(|c| path_notes(&c.path)))
            .collect();
        notes.dedup();
        Ok(Direction { spec, path, schedule, schedule_specs, notes, classes })
    }

    /// The classes as the engine takes them.
    pub fn class_configs(&self) -> Vec<pathem_engine::ClassConfig> {
        self.classes.iter().map(Class::config).collect()
    }
}

/// What a path does that its flags may not say: a jitter larger than its delay, spread evenly
/// about it (the draws below 0 send at once, as NetEm's do, so the delays' mean rises above
/// the delay), a policer whose bucket is shorter than a full frame (longer frames never pass).
fn path_notes(path: &pathem_model::PathConfig) -> Vec<String> {
    let mut notes = Vec::new();
    let d = &path.delay;
    // The distributions spread evenly about the delay; an exponential one adds to it, a
    // Pareto one reaches less far below it than its jitter, a table what it holds.
    use pathem_model::dist::Dist;
    let even = matches!(d.dist, Dist::Uniform | Dist::Normal | Dist::ParetoNormal);
    if d.trace.is_none() && even && d.jitter > d.base {
        notes.push(format!(
            "jitter {} is larger than the delay {}: draws below 0 send at once, as NetEm's do, so the \
             delays' mean is above {} and their spread below the distribution's",
            d.jitter, d.base, d.base
        ));
    }
    let full = pathem_model::aqm::MTU;
    if let Some(p) = path.police.as_ref().filter(|p| p.burst.0 < u64::from(full)) {
        notes.push(format!(
            "police burst {} B holds less than a full {full}-byte frame: frames longer than it never pass",
            p.burst.0
        ));
    }
    notes
}

/// The notes of `directions` (see [`Direction::notes`]), each once, as `note: ...` lines.
pub fn notes(directions: &[&Direction]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in directions.iter().flat_map(|d| &d.notes) {
        let line = format!("note: {n}");
        if !out.contains(&line) {
            out.push(line);
        }
    }
    out
}

/// `layers` merged in order, later ones winning field by field.
fn merge(layers: &[&PathSpec]) -> PathSpec {
    layers.iter().fold(PathSpec::default(), |acc, l| acc.overridden_by(l))
}

/// The notes of a replay's one direction, and that the file's `[b_to_a]` table, if it has
/// one, is not used (a capture is replayed through a→b).
pub fn replay_notes(file: &ConfigFile, ab: &Direction) -> Vec<String> {
    let mut out = notes(&[ab]);
    if file.b_to_a != PathSpec::default() {
        out.push("note: the config's [b_to_a] table is not used: replay runs the a→b path".into());
    }
    out
}

/// The config file at `path`, or an empty one.
pub fn config(path: Option<&Path>) -> Result<ConfigFile, SpecError> {
    path.map_or_else(|| Ok(ConfigFile::default()), file::load)
}

/// Both directions of a link: each is the file's table, then `common`, then its own flags
/// (`(flag name, its string)`, e.g. `("a-to-b", Some("--delay 10ms"))`), with `schedule` built
/// on each.
pub fn directions(
    file: &ConfigFile,
    common: &PathSpec,
    own: [(&str, Option<&str>); 2],
    schedule: Option<&Path>,
) -> Result<(Direction, Direction), SpecError> {
    let [(ab_flag, ab_text), (ba_flag, ba_text)] = own;
    let both = file.common();
    let (ab_own, ba_own) = (direction(ab_flag, ab_text)?, direction(ba_flag, ba_text)?);
    let ab_layers = [&file.a_to_b, &both, common, &ab_own];
    let ba_layers = [&file.b_to_a, &both, common, &ba_own];
    // A schedule line may name a class only one direction has: it changes that one.
    let names = |layers: &[&PathSpec]| -> Result<Vec<String>, SpecError> {
        Ok(crate::class::resolve(&merge(layers))?.into_iter().map(|c| c.name).collect())
    };
    crate::path::reading_each_file_once(|| {
        let ab = Direction::resolve_among(&ab_layers, schedule, &names(&ba_layers)?)?;
        let ba = Direction::resolve_among(&ba_layers, schedule, &names(&ab_layers)?)?;
        Ok((ab, ba))
    })
}

/// The directions of an attached interface (`attach`): egress is the file's `[egress]`
/// table, the bare flags, then `--egress`; ingress is the file's `[ingress]` table then
/// `--ingress` (bare flags impair egress alone, as `tc ... root netem` does). The schedule's
/// lines change egress. The last two say whether each direction is asked for anything: one
/// that is not is left alone, unless nothing at all is asked (then egress is attached, as
/// `tc ... root netem` with no impairment would be, ready for `ctl set`).
pub fn attach_directions(
    file: &ConfigFile,
    common: &PathSpec,
    egress: Option<&str>,
    ingress: Option<&str>,
    schedule: Option<&Path>,
) -> Result<(Direction, Direction, bool, bool), SpecError> {
    let own = direction("egress", egress)?;
    let (out, into) = crate::path::reading_each_file_once(|| -> Result<_, SpecError> {
        let out = Direction::resolve(&[&file.a_to_b, &file.common(), common, &own], schedule)?;
        Ok((out, Direction::resolve(&[&file.b_to_a, &direction("ingress", ingress)?], None)?))
    })?;
    let none = PathSpec::default();
    let ingress_asked = ingress.is_some() || file.b_to_a != none;
    let egress_asked = *common != none
        || egress.is_some()
        || file.a_to_b != none
        || !file.classes.is_empty()
        || schedule.is_some()
        || !ingress_asked;
    Ok((out, into, egress_asked, ingress_asked))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathem_model::Nanos;

    #[test]
    fn own_flags_win_over_common_ones_over_the_file() {
        let file =
            file::parse("[a_to_b]\ndelay = \"5ms\"\nloss = \"1%\"\n[b_to_a]\ndelay = \"7ms\"\n").unwrap();
        let common = PathSpec::from_flags("--delay 10ms").unwrap();
        let (ab, ba) =
            directions(&file, &common, [("a-to-b", None), ("b-to-a", Some("--delay 20ms"))], None).unwrap();
        assert_eq!(ab.path.delay.base, Nanos::from_millis(10));
        assert!(ab.path.loss.is_some(), "the file's loss stays");
        assert_eq!(ba.path.delay.base, Nanos::from_millis(20));
        let e = directions(&file, &common, [("a-to-b", Some("--delay x")), ("b-to-a", None)], None);
        assert!(e.unwrap_err().to_string().contains("a-to-b"));
    }

    #[test]
    fn a_schedule_line_may_name_a_class_one_direction_has() {
        let dir = tempfile::tempdir().unwrap();
        let file = ConfigFile::default();
        let common = PathSpec::default();
        let own = [("a-to-b", Some("--class 'udp port 53' '--loss 1%'")), ("b-to-a", None)];
        let at = |text: &str| {
            let f = dir.path().join("s.txt");
            std::fs::write(&f, text).unwrap();
            directions(&file, &common, own, Some(&f))
        };
        // class1 is a->b's only: it changes there, and b->a's schedule has no step for it.
        let (ab, ba) = at("10s --class class1 \"--loss 5%\"\n").unwrap();
        let class = ab.classes[0].schedule.as_ref().expect("a->b's class follows the line");
        assert_eq!(class.steps()[0].0, Nanos::from_secs(10));
        assert!(ba.schedule.is_none_or(|s| s.steps().is_empty()));
        // A class neither direction has is still refused, both directions' classes named.
        let e = at("10s --class dns \"--loss 5%\"\n").unwrap_err().to_string();
        assert!(e.contains("--class dns: no class of that name (classes: class1)"), "{e}");
    }

    #[test]
    fn bare_flags_of_an_attach_impair_egress_alone() {
        let file = file::parse("[ingress]\nloss = \"1%\"\n").unwrap();
        let common = PathSpec::from_flags("--delay 10ms").unwrap();
        let (out, into, e, i) = attach_directions(&file, &common, Some("--rate 10mbit"), None, None).unwrap();
        assert!(e && i, "both asked");
        assert_eq!(out.path.delay.base, Nanos::from_millis(10));
        assert!(out.path.link.is_some() && out.path.loss.is_none());
        assert_eq!(into.path.delay.base, Nanos::ZERO, "bare flags stay off ingress");
        assert!(into.path.loss.is_some(), "the file's [ingress] table");
        let empty = ConfigFile::default();
        let (.., e, i) =
            attach_directions(&empty, &PathSpec::default(), None, Some("--delay 1ms"), None).unwrap();
        assert!(!e && i, "ingress alone leaves egress alone");
        let (.., e, i) = attach_directions(&empty, &PathSpec::default(), None, None, None).unwrap();
        assert!(e && !i, "nothing asked: egress, ready for ctl set");
        let e = attach_directions(&file, &common, None, Some("--delay x"), None).unwrap_err();
        assert!(e.to_string().contains("ingress"), "{e}");
    }

    #[test]
    fn a_netem_specs_notes_reach_the_direction_once() {
        let common = PathSpec::from_flags("--netem 'loss 1'").unwrap();
        let (ab, ba) =
            directions(&ConfigFile::default(), &common, [("a-to-b", None), ("b-to-a", None)], None).unwrap();
        let lines = notes(&[&ab, &ba]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("note: \"loss 1\" read as 1%"), "{lines:?}");
        assert!(notes(&[&Direction::resolve(&[&PathSpec::default()], None).unwrap()]).is_empty());
    }
}
