//! The reader's cursor: little-endian values, each checked against the
//! bytes that remain.

use super::*;

/// Reads little-endian values, each checked against the bytes that remain.
pub(super) struct Cursor<'b> {
    pub(super) b: &'b [u8],
    pub(super) at: usize,
}

impl<'b> Cursor<'b> {
    pub(super) fn take(&mut self, n: u64, what: &str) -> Result<&'b [u8], FormatError> {
        let left = self.b.len() - self.at;
        if n > left as u64 {
            return Err(gguf(
                what,
                format!(
                    "needs {n} bytes at byte {}, and the file ends {left} bytes later",
                    self.at
                ),
            ));
        }
        let s = &self.b[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }

    /// `count` items of at least `min` bytes each fit in what remains.
    pub(super) fn fits(&self, count: u64, min: u64, what: &str) -> Result<(), FormatError> {
        let left = (self.b.len() - self.at) as u64;
        if count.checked_mul(min).is_none_or(|need| need > left) {
            return Err(gguf(
                what,
                format!("{count} items need at least {min} bytes each, and {left} bytes remain"),
            ));
        }
        Ok(())
    }

    pub(super) fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], FormatError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(super) fn u32(&mut self, what: &str) -> Result<u32, FormatError> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub(super) fn u64(&mut self, what: &str) -> Result<u64, FormatError> {
        self.array(what).map(u64::from_le_bytes)
    }

    pub(super) fn string(&mut self, what: &str) -> Result<String, FormatError> {
        let len = self.u64(what)?;
        let s = self.take(len, what)?;
        String::from_utf8(s.to_vec()).map_err(|e| gguf(what, format!("a string that is not UTF-8 ({e})")))
    }

    pub(super) fn value(&mut self, ty: GgufValueType, key: &str, depth: usize) -> Result<GgufValue, FormatError> {
        use GgufValueType as T;
        Ok(match ty {
            T::U8 => GgufValue::U8(self.array::<1>(key)?[0]),
            T::I8 => GgufValue::I8(i8::from_le_bytes(self.array(key)?)),
            T::U16 => GgufValue::U16(u16::from_le_bytes(self.array(key)?)),
            T::I16 => GgufValue::I16(i16::from_le_bytes(self.array(key)?)),
            T::U32 => GgufValue::U32(self.u32(key)?),
            T::I32 => GgufValue::I32(i32::from_le_bytes(self.array(key)?)),
            T::F32 => GgufValue::F32(f32::from_le_bytes(self.array(key)?)),
            T::Bool => match self.array::<1>(key)?[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => return Err(gguf(key, format!("a bool byte {b} (neither 0 nor 1)"))),
            },
            T::String => GgufValue::String(self.string(key)?),
            T::U64 => GgufValue::U64(self.u64(key)?),
            T::I64 => GgufValue::I64(i64::from_le_bytes(self.array(key)?)),
            T::F64 => GgufValue::F64(f64::from_le_bytes(self.array(key)?)),
            T::Array => {
                if depth >= GGUF_MAX_ARRAY_DEPTH {
                    return Err(gguf(key, format!("arrays nested deeper than {GGUF_MAX_ARRAY_DEPTH}")));
                }
                let t = self.u32(key)?;
                let item = GgufValueType::from_id(t)
                    .ok_or_else(|| gguf(key, format!("an array of unknown value type {t}")))?;
                let count = self.u64(key)?;
                self.fits(count, item.min_bytes(), key)?;
                // reserved up to a bound: the items' own bytes, read one by
                // one, are what may grow it further
                let mut values = Vec::with_capacity((count as usize).min(1 << 16));
                for _ in 0..count {
                    values.push(self.value(item, key, depth + 1)?);
                }
                GgufValue::Array { item, values }
            }
        })
    }

    pub(super) fn tensor_info(&mut self, alignment: usize) -> Result<GgufTensorInfo, FormatError> {
        let name = self.string("a tensor name")?;
        let n_dims = self.u32(&name)?;
        if n_dims == 0 || n_dims as usize > GGML_MAX_DIMS {
            return Err(gguf(
                &name,
                format!("{n_dims} dimensions (ggml tensors have 1 to {GGML_MAX_DIMS})"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64(&name)?);
        }
        let t = self.u32(&name)?;
        let ggml_type = GgmlType::from_id(t).ok_or_else(|| gguf(&name, format!("unknown ggml tensor type {t}")))?;
        let offset = self.u64(&name)?;
        if dims.contains(&0) {
            return Err(gguf(&name, format!("dimensions {dims:?}: a tensor with no elements")));
        }
        let elements = dims
            .iter()
            .try_fold(1usize, |acc, &d| {
                usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
            })
            .filter(|&e| e <= i64::MAX as usize)
            .ok_or_else(|| {
                gguf(
                    &name,
                    format!("dimensions {dims:?}: too many elements for this machine"),
                )
            })?;
        let per_block = ggml_type.block_weights() as u64;
        if !dims[0].is_multiple_of(per_block) {
            return Err(gguf(
                &name,
                format!(
                    "its first dimension {} is not a multiple of {ggml_type}'s block of {per_block}",
                    dims[0]
                ),
            ));
        }
        let n_bytes = (elements / ggml_type.block_weights())
            .checked_mul(ggml_type.block_bytes())
            .ok_or_else(|| gguf(&name, format!("dimensions {dims:?}: too many bytes for this machine")))?;
        if !offset.is_multiple_of(alignment as u64) {
            return Err(gguf(
                &name,
                format!("its data offset {offset} is not a multiple of the alignment {alignment}"),
            ));
        }
        Ok(GgufTensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            n_bytes,
        })
    }
}
