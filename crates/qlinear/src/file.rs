use std::path::Path;

use qlinear_formats::QuantizedFile;

use crate::{Linear, Result};

/// A quantized safetensors model opened for a runtime: one memory map, from
/// which layers and plain tensors are loaded by name.
///
/// Loading copies what it returns (a [`Linear`] or a `Vec<f32>` owns its
/// data), so the map matters only while loading: if another process
/// truncates the file meanwhile, the process receives SIGBUS
/// (`docs/FORMAT.md`). Drop the `ModelFile` once the layers are loaded.
#[derive(Debug)]
pub struct ModelFile {
    file: QuantizedFile,
}

impl ModelFile {
    /// Opens and checks the header of a safetensors file (memory-mapped).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Ok(ModelFile {
            file: QuantizedFile::open(path)?,
        })
    }

    /// Parses a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Ok(ModelFile {
            file: QuantizedFile::from_bytes(bytes)?,
        })
    }

    /// The quantized layer `prefix` (its `prefix.qweight` / `prefix.scales`,
    /// validated), with `prefix.bias` when the file has one (F32, F16 or
    /// BF16, widened exactly), in the default mode (see [`Linear::new`]).
    pub fn linear(&self, prefix: &str) -> Result<Linear> {
        let weight = self.file.load(prefix)?;
        let bias_name = format!("{prefix}.bias");
        let bias = match self.file.raw(&bias_name) {
            Some(_) => Some(self.file.tensor_f32(&bias_name)?),
            None => None,
        };
        Linear::new(prefix, weight, bias)
    }

    /// Any plain float tensor (F32, F16, BF16) widened exactly to f32.
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        Ok(self.file.tensor_f32(name)?)
    }

    /// The shape of tensor `name`, if the file has it.
    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.file.raw(name).map(|r| r.shape.to_vec())
    }

    /// The prefixes of the quantized layers, sorted.
    pub fn linears(&self) -> Vec<String> {
        self.file.quantized_prefixes().to_vec()
    }

    /// The K values (input features, `P.in_features`) of the file's quantized
    /// layers, sorted and without repeats: the census for [`crate::init_for`].
    /// Read from the metadata alone; a value that is not a number is left out
    /// (loading that layer reports it).
    pub fn census(&self) -> Vec<usize> {
        let mut ks: Vec<usize> = self
            .file
            .metadata_map()
            .iter()
            .filter(|(key, _)| key.ends_with(".in_features"))
            .filter_map(|(_, v)| v.parse().ok())
            .collect();
        ks.sort_unstable();
        ks.dedup();
        ks
    }

    /// The underlying reader, for raw tensors and metadata.
    pub fn file(&self) -> &QuantizedFile {
        &self.file
    }
}
