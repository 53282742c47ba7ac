//! Reading a file's codes **in place** (`docs/FORMAT.md`, "Reading codes in
//! place"): the file's bytes read once into the process's own memory, with
//! the packed Q4 nibbles made biased there, and optionally rearranged by the caller into
//! the layout its kernels read (a permutation of the same bytes, so no
//! second copy of them is ever made).

use std::collections::HashSet;
use std::ops::Range;
use std::path::Path;

use qlinear_quant_recipe::{Codes, GroupSize, Q4Scales, QScheme, QuantizedWeight, SharedBuffer};
use safetensors::Dtype;

use crate::mapped::Bytes;
use crate::reader::{read_header, QuantizedFile};
use crate::{in_features_key, FormatError};

/// A packed Q4 tensor of a file being opened in place, offered to the
/// caller's arrangement ([`QuantizedFile::open_in_place_arranged`]) before
/// any weight reads it. Offered only when the header describes it
/// consistently: its `P.qscheme` a Q4 scheme whose group divides K, its
/// `P.in_features` K even (every byte two columns of one row, no pad),
/// `P.qweight` U8 `[n, k / 2]`.
#[derive(Debug)]
pub struct Q4InPlace<'a> {
    /// The tensor's prefix `P` (its codes are `P.qweight`).
    pub prefix: &'a str,
    /// Rows (output features).
    pub n: usize,
    /// Columns (input features), even.
    pub k: usize,
    /// The scheme's grouping: per channel (`q4`) or by G (`q4g<G>`).
    pub group: GroupSize,
    /// The `n · k / 2` packed bytes, already biased (`docs/NUMERICS.md` §4)
    /// and in the natural order (row after row): the arrangement may
    /// permute them in place.
    pub codes: &'a mut [u8],
    /// A grouped tensor's scales, `P.scales`' bytes (`n · k / G`
    /// little-endian f16, row after row) when the header describes them
    /// consistently (F16 `[n, k / G]`); `None` per channel. An arrangement
    /// that takes the codes (returns `true`) takes these too: it permutes
    /// them in place as well, and [`QuantizedFile::load_arranged`] hands
    /// them out read in place, in its order ([`ArrangedScales::InPlace`]).
    pub scales: Option<&'a mut [u8]>,
}

/// A Q4 tensor whose codes its caller rearranged when the file was opened
/// ([`QuantizedFile::load_arranged`]): checked as [`QuantizedFile::load`]
/// checks it, its codes in the caller's order and read in place from the
/// file's bytes; its scales too where the arrangement took them (grouped),
/// else copied in the natural row order.
#[derive(Debug)]
pub struct ArrangedQ4 {
    /// Rows (output features).
    pub n: usize,
    /// Columns (input features).
    pub k: usize,
    /// The `n · k / 2` code bytes as the arrangement left them, shared.
    pub codes: Codes<u8>,
    /// The scales.
    pub scales: ArrangedScales,
}

/// The scales of an [`ArrangedQ4`].
#[derive(Debug)]
pub enum ArrangedScales {
    /// Copied, in the natural row order: per channel, or grouped scales
    /// the arrangement was not offered ([`Q4InPlace::scales`]).
    Natural(Q4Scales),
    /// Grouped by `group`: `P.scales`' `n · k / group` little-endian f16
    /// bytes as the arrangement left them, read in place from the file's
    /// bytes (checked as [`QuantizedFile::load`] checks the scales).
    InPlace {
        /// Columns per scale.
        group: usize,
        /// The bytes, shared.
        bytes: Codes<u8>,
    },
}

/// A caller's arrangement: rearranges a tensor's codes in place and says
/// so (`true`), or leaves them in the natural order (`false`).
pub type Arrange<'a> = &'a mut dyn FnMut(Q4InPlace<'_>) -> bool;

/// A packed Q4 tensor's bytes in the file, and its shape when the header
/// describes it consistently enough to offer it to an arrangement.
struct Q4Tensor {
    prefix: String,
    range: Range<usize>,
    shape: Option<(usize, usize, GroupSize)>,
    /// Where a grouped tensor's scales are, when the header describes them
    /// consistently and apart from the codes.
    scales: Option<Range<usize>>,
}

impl QuantizedFile {
    /// Opens `path` so that [`QuantizedFile::load`] hands out weights whose
    /// codes are read **in place** from the file's bytes, held once in
    /// this process's memory: no copy of them per weight (a weight keeps
    /// the memory alive, so it may outlive this value; its codes report
    /// `codes_shared()`/`packed_shared()`). The file is **read** whole,
    /// once (a large file by up to four threads, each its part), into
    /// anonymous memory advised for transparent huge pages (Linux), not
    /// mapped: every weight byte is resident once, a decode
    /// step reads its weights over 2 MiB pages, and nothing done to the file
    /// afterwards (truncated, rewritten) reaches the weights, so there is no
    /// SIGBUS to fear. The packed Q4 tensors' nibbles, stored in two's
    /// complement (`docs/FORMAT.md`), are rewritten there once to the biased
    /// form the kernels read. The file itself is never written. Scales are
    /// copied, unless an arrangement takes them
    /// ([`QuantizedFile::open_in_place_arranged`], [`Q4InPlace::scales`]).
    ///
    /// Errors: as [`QuantizedFile::open`], and
    /// [`FormatError::ShrankWhileRead`] when the file ends before the length
    /// it had when it was opened.
    pub fn open_in_place(path: impl AsRef<Path>) -> Result<Self, FormatError> {
        Self::open_in_place_arranged(path, &mut |_| false)
    }

    /// [`QuantizedFile::open_in_place`], offering each packed Q4 tensor
    /// ([`Q4InPlace`]) to `arrange` once its nibbles are biased: a tensor
    /// it rearranges (returning `true`) is then read with
    /// [`QuantizedFile::load_arranged`], the others with
    /// [`QuantizedFile::load`]. For a runtime whose kernels read a
    /// permutation of the natural layout (`qlinear::ModelFile`'s panel
    /// form): the codes then take it without a second copy. Errors: as
    /// [`QuantizedFile::open`].
    pub fn open_in_place_arranged(path: impl AsRef<Path>, arrange: Arrange<'_>) -> Result<Self, FormatError> {
        let path = path.as_ref();
        let mut bytes = crate::mapped::read_private(path)?;
        let arranged = rewrite(bytes.as_mut_slice(), arrange)?;
        Self::in_place(bytes.freeze(path)?, arranged)
    }

    /// [`QuantizedFile::open_in_place`] on a file held in memory: weights
    /// read their codes from `bytes`, which they keep alive.
    pub fn from_bytes_in_place(bytes: Vec<u8>) -> Result<Self, FormatError> {
        Self::from_bytes_in_place_arranged(bytes, &mut |_| false)
    }

    /// [`QuantizedFile::open_in_place_arranged`] on a file held in memory.
    pub fn from_bytes_in_place_arranged(mut bytes: Vec<u8>, arrange: Arrange<'_>) -> Result<Self, FormatError> {
        let arranged = rewrite(&mut bytes, arrange)?;
        Self::in_place(Bytes::Owned(bytes), arranged)
    }

    fn in_place(bytes: Bytes, (arranged, scales): (HashSet<String>, HashSet<String>)) -> Result<Self, FormatError> {
        let mut file = Self::from_bytes_inner(bytes)?;
        file.in_place = true;
        file.arranged = arranged;
        file.arranged_scales = scales;
        Ok(file)
    }

    /// Whether the quantized tensor `prefix` had its codes rearranged when
    /// the file was opened ([`QuantizedFile::open_in_place_arranged`]).
    pub fn is_arranged(&self, prefix: &str) -> bool {
        self.arranged.contains(prefix)
    }

    /// The rearranged Q4 tensor `prefix`, checked as
    /// [`QuantizedFile::load`] checks a tensor (the same errors, word for
    /// word). Errors also: [`FormatError::NotArranged`] for a tensor whose
    /// codes are in the natural order ([`QuantizedFile::load`] reads it).
    pub fn load_arranged(&self, prefix: &str) -> Result<ArrangedQ4, FormatError> {
        if !self.is_arranged(prefix) {
            return Err(FormatError::NotArranged {
                tensor: format!("{prefix}.qweight"),
            });
        }
        match self.load_checked(prefix)? {
            QuantizedWeight::Q4(w) => {
                let (n, k) = (w.n(), w.k());
                let (codes, scales) = w.into_codes();
                let scales = match scales {
                    // checked in the arrangement's order (each value alone)
                    Q4Scales::Grouped { group, .. } if self.arranged_scales.contains(prefix) => {
                        let name = format!("{prefix}.scales");
                        let data = self.raw(&name).map(|t| t.data).unwrap_or_default();
                        ArrangedScales::InPlace {
                            group,
                            bytes: self.shared(&name, data)?,
                        }
                    }
                    natural => ArrangedScales::Natural(natural),
                };
                Ok(ArrangedQ4 { n, k, codes, scales })
            }
            // only Q4 tensors are arranged, and the metadata said Q4 then
            QuantizedWeight::Q8(_) => Err(FormatError::NotArranged {
                tensor: format!("{prefix}.qweight"),
            }),
        }
    }

    /// `data`, a tensor's bytes in this file, as codes read in place.
    pub(crate) fn shared<T: qlinear_quant_recipe::Byte>(
        &self,
        tensor: &str,
        data: &[u8],
    ) -> Result<Codes<T>, FormatError> {
        // `data` is a slice of this file's bytes; were it not, the wrapped
        // offset would lie outside them and `Codes::shared` refuse it
        let start = (data.as_ptr() as usize).wrapping_sub(self.bytes.as_slice().as_ptr() as usize);
        let buffer: SharedBuffer = self.bytes.clone();
        Codes::shared(buffer, start..start + data.len()).map_err(|source| FormatError::Invalid {
            tensor: tensor.to_string(),
            source,
        })
    }
}

/// Makes every packed Q4 tensor's nibbles biased in `bytes`, then offers
/// those with a consistent header to `arrange`; returns the prefixes it
/// rearranged, and those of them whose scales it took too.
fn rewrite(bytes: &mut [u8], arrange: Arrange<'_>) -> Result<(HashSet<String>, HashSet<String>), FormatError> {
    let (mut arranged, mut with_scales) = (HashSet::new(), HashSet::new());
    for t in q4_tensors(bytes)? {
        let (codes, scales) = match t.scales.clone() {
            Some(s) => {
                let (codes, scales) = apart(bytes, t.range.clone(), s);
                (codes, Some(scales))
            }
            None => (&mut bytes[t.range.clone()], None),
        };
        qlinear_quant_recipe::twos_complement_to_biased(codes);
        if let Some((n, k, group)) = t.shape {
            let offered = scales.is_some();
            if arrange(Q4InPlace {
                prefix: &t.prefix,
                n,
                k,
                group,
                codes,
                scales,
            }) {
                if offered {
                    with_scales.insert(t.prefix.clone());
                }
                arranged.insert(t.prefix);
            }
        }
    }
    Ok((arranged, with_scales))
}

/// `bytes[a]` and `bytes[b]`, two ranges that do not overlap, borrowed
/// mutably at once.
fn apart(bytes: &mut [u8], a: Range<usize>, b: Range<usize>) -> (&mut [u8], &mut [u8]) {
    if a.start <= b.start {
        let (low, high) = bytes.split_at_mut(b.start);
        (&mut low[a], &mut high[..b.len()])
    } else {
        let (low, high) = bytes.split_at_mut(a.start);
        (&mut high[..a.len()], &mut low[b])
    }
}

/// Where the packed Q4 codes are in a file's bytes: the `P.qweight` tensors
/// of dtype U8 whose `P.qscheme` names a Q4 scheme. The header's tensors
/// are contiguous and do not overlap (the `safetensors` crate checks it),
/// so each byte is rewritten at most once.
fn q4_tensors(bytes: &[u8]) -> Result<Vec<Q4Tensor>, FormatError> {
    let (header_len, metadata) = read_header(bytes)?;
    let base = 8 + header_len;
    let meta = metadata.metadata().clone().unwrap_or_default();
    let mut tensors = vec![];
    for (key, value) in &meta {
        let Some(prefix) = key.strip_suffix(".qscheme") else {
            continue;
        };
        let group = match value.parse() {
            Ok(QScheme::Q4) => GroupSize::PerChannel,
            Ok(QScheme::Q4Grouped(g)) => GroupSize::Group(g),
            _ => continue,
        };
        let Some(info) = metadata.info(&format!("{prefix}.qweight")) else {
            continue;
        };
        if info.dtype != Dtype::U8 {
            continue;
        }
        let (s, e) = info.data_offsets;
        // K as `load` reads it (digits only); a shape the header does not
        // describe consistently is only made biased, and `load` reports it
        let k = meta
            .get(&in_features_key(prefix))
            .filter(|v| v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<usize>().ok());
        let shape = match (k, info.shape.as_slice()) {
            (Some(k), &[n, half]) if k.is_multiple_of(2) && half == k / 2 && Some(e - s) == n.checked_mul(half) => {
                let divides = match group {
                    GroupSize::Group(g) => g > 0 && k.is_multiple_of(g),
                    GroupSize::PerChannel => true,
                };
                divides.then_some((n, k, group))
            }
            _ => None,
        };
        let codes = base + s..base + e;
        // a grouped tensor's scales, F16 [n, k / g], apart from its codes
        let scales = match shape {
            Some((n, k, GroupSize::Group(g))) => metadata
                .info(&format!("{prefix}.scales"))
                .filter(|i| i.dtype == Dtype::F16 && i.shape == [n, k / g])
                .map(|i| base + i.data_offsets.0..base + i.data_offsets.1)
                .filter(|r| Some(r.len()) == (n * (k / g)).checked_mul(2))
                .filter(|r| r.end <= codes.start || codes.end <= r.start),
            _ => None,
        };
        tensors.push(Q4Tensor {
            prefix: prefix.to_string(),
            range: codes,
            shape,
            scales,
        });
    }
    Ok(tensors)
}
