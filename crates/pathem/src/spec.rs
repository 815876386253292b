//! The impairment settings of one direction, as flags and as TOML keys.
//!
//! One struct serves both: clap reads it from the command line, serde from a `[a_to_b]` or
//! `[b_to_a]` table, with the same names (`--queue` ⇔ `queue`) and the same value parsers,
//! so the two can never drift apart. Flags override the file key by key.

use clap::Args;
use pathem_model::delay::DelayConfig;
use pathem_model::link::{LinkConfig, ETHERNET_OVERHEAD};
use pathem_model::loss::LossConfig;
use pathem_model::units::{Duration, QueueLimit, Rate};
use pathem_model::PathConfig;
use serde::Deserialize;

/// Impairments of one direction. Every field is optional: unset means "not impaired".
#[derive(Args, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PathSpec {
    /// Constant one-way delay added to every frame (ns, us, ms, s), e.g. 10ms.
    #[arg(long, value_name = "DUR", help_heading = "Impairments", allow_hyphen_values = true)]
    pub delay: Option<Duration>,

    /// Independent random loss: a probability as 1% or 0.01 (also random:P).
    #[arg(long, value_name = "P", help_heading = "Impairments", allow_hyphen_values = true)]
    pub loss: Option<LossConfig>,

    /// Bottleneck rate (bit, kbit, mbit, gbit; k, m, g; bps-style aliases mean bits), e.g. 100mbit.
    #[arg(long, value_name = "RATE", help_heading = "Impairments", allow_hyphen_values = true)]
    pub rate: Option<Rate>,

    /// Bytes added to each frame's length for the rate [default: 24 = preamble+SFD, FCS, gap].
    #[arg(long, value_name = "BYTES", help_heading = "Impairments", allow_hyphen_values = true)]
    pub overhead: Option<u32>,

    /// Drop-tail limit of the link queue in bytes (64KB) or frames (100pkt); needs --rate.
    #[arg(long, value_name = "SIZE", help_heading = "Impairments", allow_hyphen_values = true)]
    pub queue: Option<QueueLimit>,
}

/// A setting that makes no sense as given.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    #[error("--{0} needs --rate: without a bottleneck rate nothing ever waits in the link")]
    NeedsRate(&'static str),
}

impl PathSpec {
    /// `self` with every field that `over` sets replaced by `over`'s value.
    pub fn overridden_by(&self, over: &PathSpec) -> PathSpec {
        PathSpec {
            delay: over.delay.or(self.delay),
            loss: over.loss.clone().or_else(|| self.loss.clone()),
            rate: over.rate.or(self.rate),
            overhead: over.overhead.or(self.overhead),
            queue: over.queue.or(self.queue),
        }
    }

    /// The model configuration this spec asks for.
    pub fn to_config(&self) -> Result<PathConfig, SpecError> {
        let link = match self.rate {
            Some(rate) => Some(LinkConfig {
                rate,
                overhead: self.overhead.unwrap_or(ETHERNET_OVERHEAD),
                queue: self.queue,
            }),
            None if self.queue.is_some() => return Err(SpecError::NeedsRate("queue")),
            None if self.overhead.is_some() => return Err(SpecError::NeedsRate("overhead")),
            None => None,
        };
        Ok(PathConfig {
            link,
            loss: self.loss.clone(),
            delay: DelayConfig { base: self.delay.map(|d| d.0).unwrap_or_default() },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathem_model::Nanos;

    #[test]
    fn flags_override_file_key_by_key() {
        let file: PathSpec = toml::from_str("delay = '10ms'\nloss = '1%'").unwrap();
        let flags = PathSpec { delay: Some("20ms".parse().unwrap()), ..Default::default() };
        let merged = file.overridden_by(&flags);
        assert_eq!(merged.delay.unwrap().0, Nanos::from_millis(20));
        assert_eq!(merged.loss, file.loss);
    }

    #[test]
    fn queue_without_rate_is_refused() {
        let spec = PathSpec { queue: Some("10pkt".parse().unwrap()), ..Default::default() };
        assert_eq!(spec.to_config(), Err(SpecError::NeedsRate("queue")));
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = toml::from_str::<PathSpec>("dealy = '10ms'").unwrap_err();
        assert!(e.to_string().contains("unknown field `dealy`"), "{e}");
    }
}
