use std::collections::HashMap;

use qlinear::gguf::GgufFile;
use serde_json::Value;

use crate::{Error, Result};

/// A model file's metadata as JSON values, by GGUF key: read from a GGUF
/// file, or from the `gguf.KEY` entries `qlinear convert` writes into a
/// converted file (`docs/FORMAT.md`, "GGUF input").
pub struct Meta {
    values: HashMap<String, Value>,
}

impl Meta {
    /// The metadata of a GGUF file.
    pub fn from_gguf(file: &GgufFile) -> Meta {
        let values = file
            .metadata()
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), serde_json::from_str(&v.to_json()).ok()?)))
            .collect();
        Meta { values }
    }

    /// The GGUF metadata a converted safetensors file carries.
    pub fn from_converted(meta: &HashMap<String, String>) -> Result<Meta> {
        let mut values = HashMap::new();
        for (k, v) in meta {
            if let Some(key) = k.strip_prefix("gguf.") {
                let value = serde_json::from_str(v).map_err(|e| Error::Metadata {
                    key: k.clone(),
                    reason: format!("not JSON text ({e})"),
                })?;
                values.insert(key.to_string(), value);
            }
        }
        if values.is_empty() {
            return Err(Error::Metadata {
                key: "gguf.*".into(),
                reason: "the file carries no GGUF metadata: convert the model from its GGUF file".into(),
            });
        }
        Ok(Meta { values })
    }

    /// The entries a converted file carries for this metadata: each key as
    /// `gguf.KEY`, its value as JSON text (what [`Meta::from_converted`]
    /// reads back).
    pub fn to_converted(&self) -> HashMap<String, String> {
        self.values
            .iter()
            .map(|(k, v)| (format!("gguf.{k}"), v.to_string()))
            .collect()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.values.get(key)
    }

    fn need(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| Error::Metadata {
            key: key.into(),
            reason: "missing".into(),
        })
    }

    /// `key` as a non-negative integer.
    pub fn usize(&self, key: &str) -> Result<usize> {
        self.need(key)?
            .as_u64()
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| Error::Metadata {
                key: key.into(),
                reason: "is not a non-negative integer".into(),
            })
    }

    /// `key` as a float.
    pub fn f32(&self, key: &str) -> Result<f32> {
        self.need(key)?
            .as_f64()
            .map(|v| v as f32)
            .ok_or_else(|| Error::Metadata {
                key: key.into(),
                reason: "is not a number".into(),
            })
    }

    /// `key` as a string.
    pub fn str(&self, key: &str) -> Result<&str> {
        self.need(key)?.as_str().ok_or_else(|| Error::Metadata {
            key: key.into(),
            reason: "is not a string".into(),
        })
    }

    /// `key` as an array.
    pub fn array(&self, key: &str) -> Result<&Vec<Value>> {
        self.need(key)?.as_array().ok_or_else(|| Error::Metadata {
            key: key.into(),
            reason: "is not an array".into(),
        })
    }
}
