//! Where a weight's codes live: in a buffer of their own, or in place in a
//! buffer that several weights share (a model file's memory map), which the
//! weight keeps alive.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use crate::RecipeError;

/// A read-only byte buffer that weights can read their codes from in place:
/// anything that derefs to bytes and may be shared between threads (a
/// memory map, a `Vec<u8>`). Every weight holding a region of it keeps it
/// alive, so the buffer outlives the file handle that made it.
pub type SharedBuffer = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// The codes of a weight: `len` one-byte values (`i8` codes, or packed `u8`
/// nibbles), owned, or read in place from a region of a [`SharedBuffer`].
/// Both read the same; [`Codes::is_shared`] tells them apart. Equality is
/// by value. Owned codes start on a 64-byte boundary (a cache line), so
/// that a kernel's 64-byte loads of a row that starts there each touch one
/// line, not two: W8A8 and W4A8 calls on weights in L2 took 5–15 % less
/// where K is 576 or 1536 on an AMD EPYC Zen 4 (`docs/BENCHMARKS.md`,
/// "Owned codes on cache lines").
#[derive(Clone)]
pub struct Codes<T: Byte> {
    inner: Inner<T>,
}

#[derive(Clone)]
enum Inner<T> {
    /// The codes in cache lines, the last one zero past `len`.
    Owned {
        lines: Vec<Line>,
        len: usize,
        kind: PhantomData<T>,
    },
    Shared {
        buffer: SharedBuffer,
        range: Range<usize>,
    },
}

/// 64 bytes on a 64-byte boundary: the unit owned codes are stored in.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// The one-byte code types a [`Codes`] holds: `i8` (Q8 codes) and `u8`
/// (packed Q4 nibbles). Every byte pattern is a value of each.
pub trait Byte: bytemuck::Pod + PartialEq + sealed::Sealed {}
impl Byte for i8 {}
impl Byte for u8 {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for i8 {}
    impl Sealed for u8 {}
}

impl<T: Byte> Codes<T> {
    /// Codes in a buffer of their own, starting on a 64-byte boundary
    /// (copied into it: a `Vec`'s start is wherever the allocator put it).
    pub fn owned(codes: Vec<T>) -> Self {
        Self::copied(&codes)
    }

    /// A copy of `codes` in a buffer of their own, starting on a 64-byte
    /// boundary.
    pub fn copied(codes: &[T]) -> Self {
        let mut c = Self::zeroed(codes.len());
        if let Some(dst) = c.as_mut_slice() {
            dst.copy_from_slice(codes);
        }
        c
    }

    /// `len` zero codes in a buffer of their own, starting on a 64-byte
    /// boundary, for a caller to write ([`Codes::as_mut_slice`]). The
    /// memory is asked for zeroed, so a large buffer's pages are touched
    /// first by those writes.
    pub fn zeroed(len: usize) -> Self {
        Codes {
            inner: Inner::Owned {
                lines: bytemuck::zeroed_vec(len.div_ceil(64)),
                len,
                kind: PhantomData,
            },
        }
    }

    /// The codes to write, where they are owned; `None` where they are read
    /// in place from a shared buffer (which is read-only).
    pub fn as_mut_slice(&mut self) -> Option<&mut [T]> {
        match &mut self.inner {
            Inner::Owned { lines, len, .. } => Some(&mut bytemuck::cast_slice_mut(lines)[..*len]),
            Inner::Shared { .. } => None,
        }
    }

    /// The same bytes as the other one-byte code type (`i8` codes as `u8`
    /// or the reverse), moved: no copy, owned or shared as they were.
    pub fn cast<U: Byte>(self) -> Codes<U> {
        Codes {
            inner: match self.inner {
                Inner::Owned { lines, len, .. } => Inner::Owned {
                    lines,
                    len,
                    kind: PhantomData,
                },
                Inner::Shared { buffer, range } => Inner::Shared { buffer, range },
            },
        }
    }

    /// The bytes `range` of `buffer`, read in place (no copy). Errors: a
    /// range that does not lie within the buffer
    /// ([`RecipeError::LengthMismatch`], naming the buffer's length).
    pub fn shared(buffer: SharedBuffer, range: Range<usize>) -> Result<Self, RecipeError> {
        let len = (*buffer).as_ref().len();
        if range.start > range.end || range.end > len {
            return Err(RecipeError::LengthMismatch {
                what: "shared code bytes (the end of the range against the buffer)",
                expected: len,
                actual: range.end,
            });
        }
        Ok(Codes {
            inner: Inner::Shared { buffer, range },
        })
    }

    /// The codes.
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        match &self.inner {
            Inner::Owned { lines, len, .. } => &bytemuck::cast_slice(lines)[..*len],
            // one-byte plain types: every byte is a value, the alignment is 1
            Inner::Shared { buffer, range } => bytemuck::cast_slice(&(**buffer).as_ref()[range.clone()]),
        }
    }

    /// Whether the codes are read in place from a shared buffer.
    pub fn is_shared(&self) -> bool {
        matches!(self.inner, Inner::Shared { .. })
    }

    /// The codes in a vector of their own (a copy).
    pub fn into_vec(self) -> Vec<T> {
        self.as_slice().to_vec()
    }
}

impl<T: Byte> PartialEq for Codes<T> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Byte> fmt::Debug for Codes<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Codes")
            .field("len", &self.as_slice().len())
            .field("shared", &self.is_shared())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_codes_start_on_a_cache_line_and_keep_their_values() {
        for len in [0usize, 1, 63, 64, 65, 1000] {
            let v: Vec<i8> = (0..len).map(|i| (i % 255) as i8).collect();
            let c = Codes::owned(v.clone());
            assert!(!c.is_shared());
            assert_eq!(c.as_slice(), &v[..], "{len}");
            assert_eq!(c.as_slice().as_ptr() as usize % 64, 0, "{len}");
            assert_eq!(c.clone().as_slice().as_ptr() as usize % 64, 0, "a clone, {len}");
            assert_eq!(c.into_vec(), v);
        }
        let unaligned = [7u8; 200];
        assert_eq!(Codes::copied(&unaligned[3..]).as_slice(), &unaligned[3..]);
        let mut z = Codes::<u8>::zeroed(70);
        assert_eq!(z.as_slice(), &[0u8; 70][..]);
        z.as_mut_slice().unwrap()[69] = 0x80;
        let at = z.as_slice().as_ptr();
        let i: Codes<i8> = z.cast();
        assert_eq!(
            (i.as_slice()[69], i.as_slice().as_ptr() as usize),
            (-128, at as usize),
            "moved, not copied"
        );
        let buffer: SharedBuffer = Arc::new(vec![1u8, 2, 3]);
        let mut shared = Codes::<u8>::shared(buffer, 1..3).unwrap();
        assert!(shared.as_mut_slice().is_none());
        assert_eq!(shared.cast::<i8>().as_slice(), &[2, 3]);
    }

    #[test]
    fn shared_codes_read_the_region_in_place() {
        let bytes: Vec<u8> = (0..16).collect();
        let buffer: SharedBuffer = Arc::new(bytes);
        let at = (*buffer).as_ref().as_ptr() as usize;
        let c = Codes::<i8>::shared(buffer.clone(), 4..9).unwrap();
        assert!(c.is_shared());
        assert_eq!(c.as_slice(), &[4, 5, 6, 7, 8]);
        assert_eq!(c.as_slice().as_ptr() as usize, at + 4, "read in place");
        assert_eq!(c, Codes::owned(vec![4i8, 5, 6, 7, 8]));
        assert_eq!(c.clone().into_vec(), vec![4, 5, 6, 7, 8]);
        assert!(Codes::<u8>::shared(buffer.clone(), 0..16).is_ok());
        for bad in [9..17, 12..20] {
            assert_eq!(
                Codes::<u8>::shared(buffer.clone(), bad.clone()).unwrap_err(),
                RecipeError::LengthMismatch {
                    what: "shared code bytes (the end of the range against the buffer)",
                    expected: 16,
                    actual: bad.end,
                }
            );
        }
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 5..4;
        assert!(Codes::<u8>::shared(buffer, reversed).is_err());
    }
}
