//! Where a weight's codes live: in a buffer of their own, or in place in a
//! buffer that several weights share (a model file's memory map), which the
//! weight keeps alive.

use std::fmt;
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
/// by value.
#[derive(Clone)]
pub struct Codes<T: Byte> {
    inner: Inner<T>,
}

#[derive(Clone)]
enum Inner<T> {
    Owned(Vec<T>),
    Shared { buffer: SharedBuffer, range: Range<usize> },
}

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
    /// Codes in a buffer of their own.
    pub fn owned(codes: Vec<T>) -> Self {
        Codes {
            inner: Inner::Owned(codes),
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
            Inner::Owned(v) => v,
            // one-byte plain types: every byte is a value, the alignment is 1
            Inner::Shared { buffer, range } => bytemuck::cast_slice(&(**buffer).as_ref()[range.clone()]),
        }
    }

    /// Whether the codes are read in place from a shared buffer.
    pub fn is_shared(&self) -> bool {
        matches!(self.inner, Inner::Shared { .. })
    }

    /// The codes in a vector of their own (a copy when they are shared).
    pub fn into_vec(self) -> Vec<T> {
        match self.inner {
            Inner::Owned(v) => v,
            Inner::Shared { .. } => self.as_slice().to_vec(),
        }
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
