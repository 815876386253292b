//! Per-flow classes: `--class "FILTER" "FLAGS"` (repeatable, also inside a direction's string)
//! and a config file's `[[class]]` tables (`[[a_to_b.class]]` for one direction).
//!
//! A class is a whole path of its own: FLAGS (or the table's keys) say all of it, nothing is
//! inherited from the default path. Frames go to the first class whose filter (tcpdump's
//! language, [`pathem_filter`]) matches them, in the order the classes were given (a config
//! file's first, then the flags'); frames no class takes follow the default path (the bare
//! flags). Classes are named `class1`..`classN` by their place in that order unless a table
//! names them.
//!
//! ```toml
//! [[class]]
//! name = "dns"
//! match = "udp port 53"
//! loss = "10%"
//! ```

use crate::error::SpecError;
use crate::path::PathSpec;
use pathem_engine::ClassConfig;
use pathem_filter::Filter;
use pathem_model::PathConfig;
use serde::Deserialize;

/// A class as a config file's `[[class]]` table gives it: `name` (optional), `match` (the
/// filter) and the keys of a path.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(try_from = "toml::Table")]
pub struct ClassTable {
    pub name: Option<String>,
    pub filter: String,
    pub path: PathSpec,
}

impl TryFrom<toml::Table> for ClassTable {
    type Error = String;

    fn try_from(mut t: toml::Table) -> Result<ClassTable, String> {
        let text = |v: toml::Value, key: &str| match v {
            toml::Value::String(s) => Ok(s),
            other => Err(format!("class `{key}` must be a string, not {}", other.type_str())),
        };
        let name = t.remove("name").map(|v| text(v, "name")).transpose()?;
        let filter = match t.remove("match") {
            Some(v) => text(v, "match")?,
            None => return Err("a [[class]] table needs `match`, a tcpdump filter".into()),
        };
        let what =
            name.as_deref().map_or_else(|| format!("class matching {filter:?}"), |n| format!("class {n}"));
        let path =
            PathSpec::deserialize(toml::Value::Table(t)).map_err(|e| format!("{what}: {}", e.message()))?;
        Ok(ClassTable { name, filter, path })
    }
}

/// A class, resolved: its name, its compiled filter, its spec and its checked path.
#[derive(Clone, Debug)]
pub struct Class {
    pub name: String,
    pub filter: Filter,
    /// What `ctl set --class NAME` and schedule lines build on.
    pub spec: PathSpec,
    pub path: PathConfig,
    /// Its steps in `--schedule`, if any line names it.
    pub schedule: Option<pathem_engine::Schedule>,
    /// Those steps as specs, in order.
    pub schedule_specs: Vec<PathSpec>,
}

impl Class {
    /// What the engine takes.
    pub fn config(&self) -> ClassConfig {
        ClassConfig {
            name: self.name.clone(),
            filter: self.filter.clone(),
            path: self.path.clone(),
            schedule: self.schedule.clone(),
        }
    }
}

/// Most classes a direction may have.
pub const MAX_CLASSES: usize = pathem_engine::pipeline::MAX_CLASSES;

/// A class name: 1 to 32 letters, digits, `-`, `_`, `.`; not `default` (the default path's).
fn check_name(name: &str) -> Result<(), SpecError> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(SpecError::Class(format!(
            "class name {name:?}: 1 to 32 letters, digits, '-', '_' or '.' are accepted"
        )));
    }
    if name == pathem_engine::DEFAULT_CLASS {
        return Err(SpecError::Class(
            "class name \"default\" is the default path's; name the class otherwise".into(),
        ));
    }
    Ok(())
}

/// A class's own flags: a path, without classes of its own.
pub fn class_flags(filter: &str, flags: &str) -> Result<PathSpec, SpecError> {
    let spec = PathSpec::from_flags(flags)
        .map_err(|e| SpecError::Class(format!("--class {filter:?} {flags:?}: {e}")))?;
    if spec.has_classes() {
        return Err(SpecError::Class(format!(
            "--class {filter:?} {flags:?}: a class's flags cannot hold --class"
        )));
    }
    Ok(spec)
}

/// The classes `spec` names (its tables, then its `--class` pairs), in order, checked.
pub fn resolve(spec: &PathSpec) -> Result<Vec<Class>, SpecError> {
    // Each class's name if given, filter and flags: the tables' first.
    let mut given: Vec<(Option<String>, String, PathSpec)> = Vec::new();
    for t in &spec.classes {
        if t.path.has_classes() {
            return Err(SpecError::Class(format!(
                "class matching {:?}: a class cannot hold classes",
                t.filter
            )));
        }
        given.push((t.name.clone(), t.filter.clone(), t.path.clone()));
    }
    for pair in spec.class.chunks(2) {
        let [filter, flags] = pair else {
            return Err(SpecError::Class("--class needs FILTER and FLAGS".into()));
        };
        given.push((None, filter.clone(), class_flags(filter, flags)?));
    }
    if given.len() > MAX_CLASSES {
        return Err(SpecError::Class(format!(
            "{} classes: at most {MAX_CLASSES} per direction are accepted",
            given.len()
        )));
    }
    let mut out: Vec<Class> = Vec::new();
    // A class without a name is named by its place, `class{place}`, or the next such name no
    // class was given by hand (a table named class2 and a flag after it: class3).
    let named: Vec<String> = given.iter().filter_map(|g| g.0.clone()).collect();
    let tables = spec.classes.len();
    for (i, (name, filter, spec)) in given.into_iter().enumerate() {
        let from_table = i < tables;
        let name = name.unwrap_or_else(|| {
            (i + 1..)
                .map(|k| format!("class{k}"))
                .find(|n| !named.contains(n) && out.iter().all(|c| &c.name != n))
                .unwrap_or_default()
        });
        check_name(&name)?;
        if out.iter().any(|c| c.name == name) {
            return Err(SpecError::Class(format!("two classes are named {name:?}; each needs its own name")));
        }
        // A table's `match` is named by its table, not as the --class flag it is not.
        let compiled = Filter::compile(&filter).map_err(|e| match from_table {
            true => {
                SpecError::Class(format!("class {name} (a config file's [[class]] table), its match: {e}"))
            }
            false => SpecError::Filter(e),
        })?;
        let path =
            spec.to_config().map_err(|e| SpecError::Class(format!("class {name} ({filter:?}): {e}")))?;
        out.push(Class { name, filter: compiled, spec, path, schedule: None, schedule_specs: Vec::new() });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_name_classes_by_place_and_tables_by_name() {
        let mut spec = PathSpec::from_flags(
            "--delay 5ms --class 'udp port 53' '--loss 10%' --class 'host 10.0.0.3' '--delay 300ms'",
        )
        .unwrap();
        let file =
            crate::file::parse("[[a_to_b.class]]\nname = \"bulk\"\nmatch = \"tcp\"\nrate = \"10mbit\"\n")
                .unwrap();
        spec.classes = file.a_to_b.classes.clone();
        let classes = resolve(&spec).unwrap();
        let names: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["bulk", "class2", "class3"]);
        assert!(classes[0].path.link.is_some());
        assert_eq!(classes[2].path.delay.base, pathem_model::Nanos::from_millis(300));
        assert_eq!(classes[1].path.delay.base, pathem_model::Nanos::ZERO, "nothing inherited");
        assert!(!classes[1].filter.matches(&[0u8; 10], 10));
        // A table named as a flag's place would name it: the flag's class takes the next name.
        let mut spec = PathSpec::from_flags("--class 'udp port 53' '--loss 10%'").unwrap();
        let file =
            crate::file::parse("[[a_to_b.class]]\nname = \"class2\"\nmatch = \"tcp\"\nrate = \"10mbit\"\n")
                .unwrap();
        spec.classes = file.a_to_b.classes.clone();
        let names: Vec<String> = resolve(&spec).unwrap().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["class2", "class3"]);
    }

    #[test]
    fn bad_classes_get_one_line() {
        let err = |flags: &str| resolve(&PathSpec::from_flags(flags).unwrap()).unwrap_err().to_string();
        let e = err("--class 'tcp prot 80' '--delay 1ms'");
        assert!(e.contains("at ") && e.contains("prot"), "{e}");
        let e = err("--class tcp '--delay x'");
        assert!(e.contains("--class \"tcp\"") && e.contains("x"), "{e}");
        let e = err("--class tcp \"--class udp '--loss 1%'\"");
        assert!(e.contains("cannot hold --class"), "{e}");
        let e = crate::file::parse("[[class]]\nrate = \"1mbit\"\n").unwrap_err().1;
        assert!(e.contains("needs `match`"), "{e}");
        let e = crate::file::parse("[[class]]\nname = \"default\"\nmatch = \"tcp\"\n").unwrap();
        let spec = PathSpec { classes: e.classes, ..PathSpec::default() };
        assert!(resolve(&spec).unwrap_err().to_string().contains("default path"));
        let e = crate::file::parse("[[class]]\nmatch = \"tcp\"\nloss = \"150%\"\n").unwrap_err().1;
        assert!(e.contains("150%"), "{e}");
        // At most 64 per direction; names of 1 to 32 characters, each once.
        let many: String = (0..65).map(|i| format!("--class 'udp port {i}' '--delay 1ms' ")).collect();
        assert!(err(&many).contains("65 classes: at most 64"), "{}", err(&many));
        let spec = PathSpec {
            classes: vec![ClassTable {
                name: Some("x".repeat(33)),
                filter: "tcp".into(),
                ..Default::default()
            }],
            ..PathSpec::default()
        };
        assert!(resolve(&spec).unwrap_err().to_string().contains("1 to 32"));
        let twice = ClassTable { name: Some("a".into()), filter: "tcp".into(), ..Default::default() };
        let spec = PathSpec { classes: vec![twice.clone(), twice], ..PathSpec::default() };
        assert!(resolve(&spec).unwrap_err().to_string().contains("two classes are named \"a\""));
    }
}
