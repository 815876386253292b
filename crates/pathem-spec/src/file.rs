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

/// Reads and checks a config file; the error is one line: `FILE:LINE: what is wrong`.
pub fn load(path: &Path) -> Result<ConfigFile, SpecError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SpecError::ConfigUnreadable { path: path.into(), reason: e.to_string() })?;
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
    toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        (line, e.message().replace('\n', " "))
    })
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
}
