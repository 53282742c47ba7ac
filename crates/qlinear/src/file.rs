use std::collections::HashMap;
use std::path::Path;

use qlinear_dispatch::{
    arrange_in_place, arrange_scales_in_place, Census, KernelFamily, LayerRoute, PanelsQ4, QuantLinearMode,
};
use qlinear_formats::{qscheme_key, ArrangedScales, FormatError, Q4InPlace, QScheme, QuantizedFile, QuantizedWeight};
use qlinear_quant_recipe::GroupSize;

use crate::{Error, Linear, Result};

/// A quantized safetensors model opened for a runtime, from which layers
/// and plain tensors are loaded by name.
///
/// Two ways to open it:
/// - [`ModelFile::open_in_place`] (what a runtime wants): the file is read
///   once into the process's own memory, on transparent huge pages where
///   the OS has them, and layers and quantized embeddings read their codes
///   **in place** there (each weight byte resident once, panel-form weights
///   arranged where they lie), keeping that memory alive themselves: the
///   `ModelFile` may be dropped. No file stays mapped, so no SIGBUS.
/// - [`ModelFile::open`]: one memory map, and loading **copies** what it
///   returns (a [`Linear`] or a `Vec<f32>` owns its data), so the map
///   matters only while loading: if another process truncates the file
///   meanwhile, the process receives SIGBUS (`docs/FORMAT.md`). Drop the
///   `ModelFile` once the layers are loaded.
#[derive(Debug)]
pub struct ModelFile {
    file: QuantizedFile,
}

/// A file already opened (e.g. by a tool that reports its own open errors)
/// as a model file, with the copying loads of [`ModelFile::open`] or the
/// in-place ones of [`ModelFile::open_in_place`], as it was opened.
impl From<QuantizedFile> for ModelFile {
    fn from(file: QuantizedFile) -> Self {
        ModelFile { file }
    }
}

impl ModelFile {
    /// Opens and checks the header of a safetensors file (memory-mapped;
    /// every load copies). A file larger than the memory this process can
    /// still be given is refused first, since its layers' copies would not
    /// fit ([`crate::format::check_fits_in_memory`]; a file is only read,
    /// never held, by [`QuantizedFile::open`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        crate::format::check_fits_in_memory(&path)?;
        Ok(ModelFile {
            file: QuantizedFile::open(path)?,
        })
    }

    /// Opens `path` so that its layers read their codes in place
    /// ([`QuantizedFile::open_in_place_arranged`]: the file read once into
    /// anonymous memory on transparent huge pages, the Q4 nibbles made
    /// biased there, the file never written). Every layer and quantized [`Embedding`] this value hands
    /// out then holds a share of that memory ([`Linear::codes_shared`]); plain tensors and scales are
    /// still copied. A Q4 weight that a [`Linear`] would hold in the panel
    /// form (its default mode W4A8 on tiers with panel tiles, grouped by 32
    /// or per channel, N a multiple of 16, K of 32) is put in that form
    /// where it lies, when the file is opened: a permutation of the same
    /// bytes ([`crate::tiers::arrange_in_place`]), so its layer reads its
    /// codes in place *and* runs the panel tiles ([`Linear::holds_panels`],
    /// [`Linear::codes_shared`]). Opening therefore runs the selftest
    /// and the plan, as building the first layer would: for the file's
    /// census ([`ModelFile::census`], read from its header first and given
    /// to [`crate::init_for`]), so that the process's proofs run at the
    /// file's K values and not the default census's. Errors: as
    /// [`ModelFile::open`] (a file larger than memory refused before the
    /// selftest runs or anything is read).
    pub fn open_in_place(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        // before the selftest and plan below; the in-place reader checks
        // again as it allocates (it is public on its own)
        crate::format::check_fits_in_memory(path)?;
        if let Some(meta) = QuantizedFile::header_metadata_of(path) {
            init_before_arranging(&meta);
        }
        Ok(ModelFile {
            file: QuantizedFile::open_in_place_arranged(path, &mut arrange_for_panels)?,
        })
    }

    /// Parses a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Ok(ModelFile {
            file: QuantizedFile::from_bytes(bytes)?,
        })
    }

    /// Parses a file held in memory whose layers read their codes **in
    /// place** from `bytes`, as [`ModelFile::open_in_place`] reads the
    /// file it read ([`QuantizedFile::from_bytes_in_place_arranged`]: the
    /// packed Q4 nibbles rewritten once to the kernels' biased form, the
    /// panel-form weights arranged where they lie, the bytes kept alive by
    /// the layers): a file held once, where [`ModelFile::from_bytes`] would
    /// copy every layer's codes out of it. For a runtime that has the bytes
    /// already (a browser page). Proves and plans the file's census first,
    /// as [`ModelFile::open_in_place`] does. Errors: as
    /// [`ModelFile::from_bytes`].
    pub fn from_bytes_in_place(bytes: Vec<u8>) -> Result<Self> {
        if let Some(meta) = QuantizedFile::header_metadata(&bytes) {
            init_before_arranging(&meta);
        }
        Ok(ModelFile {
            file: QuantizedFile::from_bytes_in_place_arranged(bytes, &mut arrange_for_panels)?,
        })
    }

    /// The quantized layer `prefix` (its `prefix.qweight` / `prefix.scales`,
    /// validated), with `prefix.bias` when the file has one (F32, F16 or
    /// BF16, widened exactly), in the default mode (see [`Linear::new`]).
    pub fn linear(&self, prefix: &str) -> Result<Linear> {
        let bias_name = format!("{prefix}.bias");
        let bias = match self.file.raw(&bias_name) {
            Some(_) => Some(self.file.tensor_f32(&bias_name)?),
            None => None,
        };
        if self.file.is_arranged(prefix) {
            return Linear::from_panels(prefix, self.panels(prefix)?, bias);
        }
        Linear::new(prefix, self.file.load(prefix)?, bias)
    }

    /// The panel form of `prefix`, arranged in place when the file was
    /// opened.
    fn panels(&self, prefix: &str) -> Result<PanelsQ4> {
        let a = self.file.load_arranged(prefix)?;
        match a.scales {
            ArrangedScales::Natural(scales) => PanelsQ4::from_arranged(a.n, a.k, a.codes, &scales),
            ArrangedScales::InPlace { bytes, .. } => PanelsQ4::from_arranged_scales(a.n, a.k, a.codes, bytes),
        }
        .ok_or_else(|| {
            // the file was arranged only for a panel shape, and loading
            // checked the scales as the panel form does
            FormatError::Unsupported {
                tensor: format!("{prefix}.qweight"),
                reason: format!("[{}, {}] arranged in place has no panel form", a.n, a.k),
            }
            .into()
        })
    }

    /// The lookup table `name` (e.g. `token_embd.weight`, or its prefix
    /// `token_embd`), quantized or not, for a runtime that reads rows: a
    /// 2-D plain float tensor `name` (F32, F16, BF16, widened exactly), or
    /// the quantized weight whose prefix is `name` without `.weight` (or
    /// `name` itself), validated. Errors: neither exists, or the plain
    /// tensor is not 2-D or not a float.
    pub fn embedding(&self, name: &str) -> Result<Embedding> {
        let prefix = name.strip_suffix(".weight").unwrap_or(name);
        if self.file.quantized_prefixes().iter().any(|p| p == prefix) {
            let table = if self.file.is_arranged(prefix) {
                Table::Panels(Box::new(self.panels(prefix)?))
            } else {
                Table::Quantized(self.file.load(prefix)?)
            };
            return Ok(Embedding {
                name: prefix.to_string(),
                table,
            });
        }
        let raw = self
            .file
            .raw(name)
            .ok_or_else(|| FormatError::MissingTensor { tensor: name.into() })?;
        let &[rows, dim] = raw.shape else {
            return Err(FormatError::Unsupported {
                tensor: name.into(),
                reason: format!("shape {:?} is not a 2-D table of rows", raw.shape),
            }
            .into());
        };
        Ok(Embedding {
            name: name.to_string(),
            table: Table::Float {
                rows,
                dim,
                values: self.file.tensor_f32(name)?,
            },
        })
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

    /// What the file's quantized layers need from the selftest and the
    /// plan, for [`crate::init_for`]: their K values (`P.in_features`),
    /// sorted and without repeats, and the kernel families they run in the
    /// mode a [`Linear`] takes by default
    /// ([`QuantLinearMode::for_new_layer`](crate::QuantLinearMode::for_new_layer)),
    /// in [`KernelFamily::ALL`](crate::tiers::KernelFamily::ALL) order.
    /// Read from the metadata alone; a value that does not parse is left
    /// out (loading that layer reports it). A layer run in another mode
    /// ([`Linear::with_mode`]) has its family proven when it is built.
    pub fn census(&self) -> Census {
        census_of(self.file.metadata_map())
    }

    /// The underlying reader, for raw tensors and metadata.
    pub fn file(&self) -> &QuantizedFile {
        &self.file
    }
}

/// [`ModelFile::census`] from a file's metadata: its K values
/// (`P.in_features`) and the families of its quantized layers (each `P`
/// with a `P.qscheme`) in their default modes.
fn census_of(meta: &HashMap<String, String>) -> Census {
    let mut ks: Vec<usize> = meta
        .iter()
        .filter(|(key, _)| key.ends_with(".in_features"))
        .filter_map(|(_, v)| v.parse().ok())
        .collect();
    ks.sort_unstable();
    ks.dedup();
    // a layer whose mode cannot run it fails to build: no family
    let families = meta
        .iter()
        .filter(|(key, _)| key.ends_with(&qscheme_key("")))
        .filter_map(|(_, v)| v.parse::<QScheme>().ok())
        .filter_map(|scheme| QuantLinearMode::for_new_layer(scheme).ok()?.family_for(scheme).ok())
        .collect::<Vec<_>>();
    Census {
        ks,
        families: KernelFamily::ALL.into_iter().filter(|f| families.contains(f)).collect(),
    }
}

/// Proves and plans the census of the file whose metadata is `meta`
/// before its codes are arranged in place: the arrangement asks the plan
/// where each Q4 weight runs, and the first proof of a process fixes its
/// census K values, which would otherwise be the default census's (the
/// page's q4g32 SmolLM2 file proved 80 K values, its q8 file, with
/// nothing to arrange, 71). A failure here is left to building the
/// layers, which reports it (as a plan that cannot be made leaves the
/// codes unarranged).
fn init_before_arranging(meta: &HashMap<String, String>) {
    let _ = crate::init_for(&census_of(meta));
}

/// Whether a [`Linear`] of this Q4 tensor, in the mode a layer takes by
/// default, holds the panel form; if so, arranges its codes into it where
/// they lie. Nothing is arranged when the mode or the plan cannot be
/// resolved: building the layer reports that.
fn arrange_for_panels(t: Q4InPlace<'_>) -> bool {
    let scheme = match t.group {
        GroupSize::PerChannel => QScheme::Q4,
        GroupSize::Group(g) => QScheme::Q4Grouped(g),
    };
    let runs_panels = QuantLinearMode::for_new_layer(scheme)
        .ok()
        .and_then(|mode| LayerRoute::planned_for(mode, scheme).ok())
        .is_some_and(|route| route.runs_panels());
    if !runs_panels {
        return false;
    }
    // grouped scales offered: taken too, both or neither (the same shape
    // condition, with both lengths checked first)
    match t.scales {
        Some(scales) => {
            let fits = Some(scales.len()) == (t.n * (t.k / PanelsQ4::GROUP)).checked_mul(2)
                && Some(t.codes.len()) == t.n.checked_mul(t.k / 2);
            fits && arrange_in_place(t.n, t.k, t.codes) && arrange_scales_in_place(t.n, t.k, scales)
        }
        None => arrange_in_place(t.n, t.k, t.codes),
    }
}

/// A lookup table read one row at a time (a token embedding): float, or
/// quantized with any scheme and dequantized per row, so a q8 table that
/// doubles as the LM head (loaded as a [`Linear`] from the same prefix)
/// costs its quantized bytes once. From [`ModelFile::embedding`].
#[derive(Debug, Clone)]
pub struct Embedding {
    name: String,
    table: Table,
}

#[derive(Debug, Clone)]
enum Table {
    Float {
        rows: usize,
        dim: usize,
        values: Vec<f32>,
    },
    Quantized(QuantizedWeight),
    /// A Q4 table arranged in place in the panel form (it doubles as a
    /// layer that holds that form).
    Panels(Box<PanelsQ4>),
}

impl Embedding {
    /// The table's rows (the vocabulary, for a token embedding).
    pub fn rows(&self) -> usize {
        match &self.table {
            Table::Float { rows, .. } => *rows,
            Table::Quantized(w) => w.n(),
            Table::Panels(p) => p.n(),
        }
    }

    /// The length of a row (the model's width).
    pub fn dim(&self) -> usize {
        match &self.table {
            Table::Float { dim, .. } => *dim,
            Table::Quantized(w) => w.k(),
            Table::Panels(p) => p.k(),
        }
    }

    /// Row `row` in f32 into `out` (`out.len() == dim()`): the stored
    /// values, or for a quantized table `code · scale` exactly as
    /// [`QuantizedWeight::dequantize`] gives them. Errors name the table:
    /// `row >= rows()`, or `out` of another length; `out` is untouched then.
    pub fn row(&self, row: usize, out: &mut [f32]) -> Result<()> {
        let at = |source| {
            Error::Format(FormatError::Invalid {
                tensor: self.name.clone(),
                source,
            })
        };
        match &self.table {
            Table::Float { rows, dim, values } => {
                if row >= *rows {
                    return Err(at(qlinear_quant_recipe::RecipeError::RowOutOfRange {
                        row,
                        rows: *rows,
                    }));
                }
                if out.len() != *dim {
                    return Err(at(qlinear_quant_recipe::RecipeError::LengthMismatch {
                        what: "embedding row",
                        expected: *dim,
                        actual: out.len(),
                    }));
                }
                out.copy_from_slice(&values[row * dim..(row + 1) * dim]);
                Ok(())
            }
            Table::Quantized(w) => w.dequantize_row(row, out).map_err(at),
            // the one row gathered into a natural matrix: the same checks
            // and the same values as the natural table's
            Table::Panels(p) => match p.row(row) {
                Some(one) => QuantizedWeight::Q4(one).dequantize_row(0, out).map_err(at),
                None => Err(at(qlinear_quant_recipe::RecipeError::RowOutOfRange {
                    row,
                    rows: p.n(),
                })),
            },
        }
    }
}
