//! Parsing of `name:key=value,...` model specifications, shared by every model's `FromStr`.

use crate::units::{shown, UnitError};
use std::str::FromStr;

/// The `key=value` pairs of a spec body, checked against the keys a model accepts.
pub struct KeyValues<'a> {
    spec: &'a str,
    accepted: &'static str,
    pairs: Vec<(&'a str, &'a str)>,
    used: Vec<bool>,
}

impl<'a> KeyValues<'a> {
    /// Splits `body` (`k=v,k=v`) of the whole `spec`; `accepted` says what the model takes.
    pub fn parse(spec: &'a str, body: &'a str, accepted: &'static str) -> Result<KeyValues<'a>, UnitError> {
        let mut pairs = Vec::new();
        for item in body.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = item.split_once('=').ok_or_else(|| {
                error(spec, format!("has `{}` where key=value was expected", shown(item)), accepted)
            })?;
            let k = k.trim();
            if pairs.iter().any(|&(seen, _)| seen == k) {
                return Err(error(spec, format!("gives `{}` twice", shown(k)), accepted));
            }
            pairs.push((k, v.trim()));
        }
        let used = vec![false; pairs.len()];
        Ok(KeyValues { spec, accepted, pairs, used })
    }

    /// The value of `key` parsed as `T`, if present.
    pub fn get<T: FromStr<Err = UnitError>>(&mut self, key: &str) -> Result<Option<T>, UnitError> {
        let Some(i) = self.pairs.iter().position(|&(k, _)| k == key) else { return Ok(None) };
        self.used[i] = true;
        let v = self.pairs[i].1;
        v.parse::<T>().map(Some).map_err(|e| {
            error(
                self.spec,
                format!("has {key}={}: {} {}", shown(v), e.value_or_empty(), e.reason),
                self.accepted,
            )
        })
    }

    /// Like [`get`](Self::get) but the key must be there.
    pub fn require<T: FromStr<Err = UnitError>>(&mut self, key: &str) -> Result<T, UnitError> {
        self.get(key)?.ok_or_else(|| error(self.spec, format!("is missing `{key}`"), self.accepted))
    }

    /// Fails on any key no `get` asked for.
    pub fn finish(self) -> Result<(), UnitError> {
        match self.pairs.iter().zip(&self.used).find(|(_, &u)| !u) {
            Some(((k, _), _)) => {
                Err(error(self.spec, format!("has unknown key `{}`", shown(k)), self.accepted))
            }
            None => Ok(()),
        }
    }
}

impl UnitError {
    fn value_or_empty(&self) -> String {
        format!("`{}`", shown(&self.value))
    }
}

/// A spec error in the usual one-line form.
pub fn error(spec: &str, reason: impl Into<String>, accepted: &'static str) -> UnitError {
    UnitError { value: spec.to_string(), reason: reason.into(), accepted }
}

/// A plain non-negative number (a count, a shape parameter), for `key=value` bodies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Number(pub f64);

impl FromStr for Number {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let accepted = "a non-negative number";
        // The checks every unit has: finite, not negative, and above 0 if written so (`1e-400`
        // is not 0).
        let (v, unit) = crate::units::split_number(s, accepted)?;
        if !unit.is_empty() {
            return Err(error(s, "is not a non-negative number", accepted));
        }
        Ok(Number(v))
    }
}
