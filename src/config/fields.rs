//! A typed reader of the config's JSON object: each key's value or the CNI error naming
//! it.

use super::*;

/// Typed access to the config's fields, with errors that name the field and its value.
pub(super) struct Fields<'a>(pub(super) &'a Map<String, Value>);

impl Fields<'_> {
    pub(super) fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    pub(super) fn string(&self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Error::config(format!(
                "{key} must be a string, got {other}"
            ))),
        }
    }

    pub(super) fn number(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| Error::config(format!("{key} must be a whole number, got {v}"))),
        }
    }

    pub(super) fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(Error::config(format!(
                "{key} must be true or false, got {other}"
            ))),
        }
    }

    pub(super) fn ip(&self, key: &str) -> Result<Option<IpAddr>> {
        match self.string(key)? {
            None => Ok(None),
            Some(s) => s
                .parse()
                .map(Some)
                .map_err(|_| Error::config(format!("{key} {s:?} is not an IP address"))),
        }
    }
}
