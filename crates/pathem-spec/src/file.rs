//! The `--config FILE.toml` file: per-direction tables with the same keys as the flags.
//!
//! ```toml
//! seed = 42            # optional
//! buffer = "64MiB"     # optional: delay line size per direction
//! [a_to_b]
//! delay = "10ms"
//! loss = "1%"
//! rate = "100mbit"
//! queue = "64KB"
//! [b_to_a]
//! delay = "10ms"
//! ```

use crate::error::SpecError;
use crate::path::PathSpec;
use pathem_model::units::Size;
use serde::Deserialize;
use std::path::Path;

/// The whole file.
#[derive(Deserialize, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// A TOML integer (up to 2^63 − 1) or a string, so every seed pathem prints (up to
    /// 2^64 − 1) can be written here.
    #[serde(default, deserialize_with = "seed")]
    pub seed: Option<u64>,
    pub buffer: Option<Size>,
    /// DPDK's EAL arguments (`--eal`).
    pub eal: Option<String>,
    /// `[a_to_b]`; `[egress]` for `attach` (frames the host sends).
    #[serde(default, alias = "egress")]
    pub a_to_b: PathSpec,
    /// `[b_to_a]`; `[ingress]` for `attach` (frames the host receives).
    #[serde(default, alias = "ingress")]
    pub b_to_a: PathSpec,
    /// `[[class]]` tables: classes of both directions (of egress for `attach`); see
    /// [`crate::class`].
    #[serde(default, rename = "class")]
    pub classes: Vec<crate::class::ClassTable>,
}

impl ConfigFile {
    /// The file's classes for both directions, as a layer.
    pub fn common(&self) -> PathSpec {
        PathSpec { classes: self.classes.clone(), ..PathSpec::default() }
    }
}

fn seed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Seed {
        Number(i64),
        Text(String),
    }
    let bad = |v: &dyn std::fmt::Display| {
        serde::de::Error::custom(format!("seed = {v}: accepted: a whole number from 0 to {}", u64::MAX))
    };
    match Seed::deserialize(d).map_err(|_| {
        serde::de::Error::custom(format!(
            "seed: accepted: a whole number from 0 to {} (a string past 2^63 - 1)",
            u64::MAX
        ))
    })? {
        Seed::Number(n) => u64::try_from(n).map(Some).map_err(|_| bad(&n)),
        Seed::Text(t) => t.trim().parse().map(Some).map_err(|_| bad(&format!("{t:?}"))),
    }
}

/// Reads and checks a config file; the error is one line: `FILE:LINE: what is wrong`.
pub fn load(path: &Path) -> Result<ConfigFile, SpecError> {
    let text = crate::read_text(path, crate::MAX_TEXT_FILE)
        .map_err(|reason| SpecError::ConfigUnreadable { path: path.into(), reason })?;
    let file =
        parse(&text).map_err(|(line, message)| SpecError::Config { path: path.into(), line, message })?;
    // Trace files named in the config are found next to it.
    let dir = path.parent().unwrap_or(Path::new("."));
    let classes = file.classes.iter().cloned().map(|mut c| {
        c.path = c.path.relative_to(dir);
        c
    });
    Ok(ConfigFile {
        classes: classes.collect(),
        a_to_b: file.a_to_b.clone().relative_to(dir),
        b_to_a: file.b_to_a.clone().relative_to(dir),
        ..file
    })
}

/// Parses config text; errors carry the 1-based line they point at.
pub fn parse(text: &str) -> Result<ConfigFile, (usize, String)> {
    refuse_vanishing_floats(text)?;
    let file: ConfigFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_at(text, s.start));
        let mut message = e.message().replace('\n', " ");
        if message.contains("number too large") {
            // TOML's integers stop at 2^63 - 1; half of all seeds are larger.
            message.push_str(
                " (TOML's integers end at 2^63 - 1: write a larger seed as a string, seed = \"…\")",
            );
        }
        (line, message)
    })?;
    // A table has no order between its keys: a switch and its opposite together say nothing
    // (on the command line the later one wins, as it does across layers).
    let tables = [("[a_to_b]", &file.a_to_b), ("[b_to_a]", &file.b_to_a)].into_iter();
    let classes = file.classes.iter().map(|c| ("[[class]]", &c.path));
    for (table, spec) in tables.chain(classes) {
        // (`no-ecn` is no key of the file: ECN is off unless `ecn = true`.)
        if spec.reorder && spec.no_reorder {
            let line = text.find(table).map_or(1, |at| line_at(text, at));
            return Err((line, format!("{table} sets both `reorder` and `no-reorder`: keep one")));
        }
    }
    Ok(file)
}

/// TOML reads a float literal above 0 too small for an f64 (`loss = 1e-400`) as 0 before serde
/// sees it, where the command line and a quoted value refuse it (units.rs): such a literal is
/// refused here, naming its key and line. Text TOML cannot parse is left to `toml`'s message.
fn refuse_vanishing_floats(text: &str) -> Result<(), (usize, String)> {
    fn value(text: &str, key: &str, v: &toml_edit::Value) -> Result<(), (usize, String)> {
        match v {
            toml_edit::Value::Float(f) => {
                let written = f.span().and_then(|span| Some((span.start, text.get(span)?)));
                match written {
                    Some((at, raw)) if pathem_model::units::vanished(raw, *f.value()) => Err((
                        line_at(text, at),
                        format!("{key} = {raw} is too small to represent (it is not 0); write 0 for none"),
                    )),
                    _ => Ok(()),
                }
            }
            toml_edit::Value::Array(a) => a.iter().try_for_each(|v| value(text, key, v)),
            toml_edit::Value::InlineTable(t) => t.iter().try_for_each(|(k, v)| value(text, k, v)),
            _ => Ok(()),
        }
    }
    fn table(text: &str, t: &toml_edit::Table) -> Result<(), (usize, String)> {
        t.iter().try_for_each(|(key, item)| match item {
            toml_edit::Item::Value(v) => value(text, key, v),
            toml_edit::Item::Table(t) => table(text, t),
            toml_edit::Item::ArrayOfTables(a) => a.iter().try_for_each(|t| table(text, t)),
            toml_edit::Item::None => Ok(()),
        })
    }
    match toml_edit::ImDocument::parse(text) {
        Ok(doc) => table(text, &doc),
        Err(_) => Ok(()),
    }
}

/// The 1-based line of `text` that byte offset `at` falls on.
fn line_at(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathem_model::Nanos;

    #[test]
    fn full_file() {
        let c = parse("seed = 7\nbuffer = '8MiB'\n[a_to_b]\ndelay = '10ms'\nrate = '100mbit'\nqueue = '100pkt'\n[b_to_a]\nloss = 0.01\n")
            .unwrap();
        assert_eq!(c.seed, Some(7));
        assert_eq!(c.buffer, Some(Size(8 << 20)));
        assert_eq!(c.a_to_b.delay.unwrap().0, Nanos::from_millis(10));
        assert!(c.b_to_a.loss.is_some());
    }

    #[test]
    fn a_switch_and_its_opposite_in_one_table_are_refused() {
        let (line, msg) =
            parse("seed = 1\n[b_to_a]\ndelay = '1ms'\nreorder = true\nno-reorder = true\n").unwrap_err();
        assert_eq!(line, 2, "{msg}");
        assert!(msg.contains("[b_to_a]") && msg.contains("`reorder` and `no-reorder`"), "{msg}");
        assert!(parse("[a_to_b]\nreorder = true\n[b_to_a]\nno-reorder = true\n").is_ok());
    }

    #[test]
    fn every_seed_can_be_written() {
        assert_eq!(parse("seed = \"18446744073709551615\"\n").unwrap().seed, Some(u64::MAX));
        assert_eq!(parse("seed = 9223372036854775807\n").unwrap().seed, Some(i64::MAX as u64));
        assert!(parse("seed = 18446744073709551615\n").unwrap_err().1.contains("as a string"));
        for bad in ["seed = -1", "seed = \"x\"", "seed = 1.5", "seed = \"18446744073709551616\""] {
            let (line, msg) = parse(bad).unwrap_err();
            assert!(line == 1 && msg.contains("seed") && msg.contains("accepted"), "{bad}: {msg}");
        }
    }

    #[test]
    fn errors_name_the_line_and_the_key() {
        let (line, msg) = parse("[a_to_b]\ndelay = '10ms'\nloss = '150%'\n").unwrap_err();
        assert_eq!(line, 3);
        assert!(msg.contains("150%") && msg.contains("above 100%"), "{msg}");
        let (line, msg) = parse("[a_to_b]\n\nfoo = 1\n").unwrap_err();
        assert_eq!(line, 3);
        assert!(msg.contains("unknown field `foo`"), "{msg}");
        let (_, msg) = parse("[sideways]\n").unwrap_err();
        assert!(msg.contains("unknown field `sideways`"), "{msg}");
    }

    /// A bare float too small for an f64 reaches serde as 0: refused as the same value quoted
    /// is, wherever it stands; a written zero in any form is 0.
    #[test]
    fn a_bare_float_too_small_to_hold_is_not_zero() {
        for (text, line, key) in [
            ("[a_to_b]\nloss = 1e-400\n", 2, "loss"),
            ("[b_to_a]\ndelay = '1ms'\nduplicate = 0.000_001e-399\n", 3, "duplicate"),
            ("[[class]]\nmatch = 'udp'\ncorrupt = 5E-500\n", 3, "corrupt"),
        ] {
            let (at, msg) = parse(text).unwrap_err();
            assert_eq!(at, line, "{text}");
            assert!(msg.starts_with(&format!("{key} = ")) && msg.contains("too small"), "{text}: {msg}");
        }
        assert!(parse("[a_to_b]\nloss = 0.0\nduplicate = 0e-400\ncorrupt = -0.0\n").is_ok());
        assert!(parse("[a_to_b]\nloss = 1e-300\n").is_ok());
    }
}
