//! The kernel families: one entry of [`KernelTable`] each, and the table's
//! lookup by family.

use std::fmt;

use crate::abi::activations::{MAX_K_W4A8, MAX_K_W8A8};
use crate::abi::panel::GemmQ8Panels;
use crate::abi::table::{GemmF32Q4, GemmF32Q8, GemmQ8Q4, GemmQ8Q8, KernelTable};
use crate::abi::tile::Shapes;

/// A kernel family: one entry of the kernel table, proven and planned separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelFamily {
    /// `Σ a·b` of two int8 rows.
    DotI8I8,
    /// `Σ x·q` of an int8 row against a packed Q4 row.
    DotI8Q4,
    /// The Q8 activation quantizer.
    QuantizeActivations,
    /// Q8 weights × Q8 activations.
    W8A8,
    /// Q4 per-channel weights × Q8 activations.
    W4A8,
    /// Q4 grouped weights × Q8 activations.
    W4A8Grouped,
    /// Q8 weights × f32 activations.
    W8A16,
    /// Q4 per-channel weights × f32 activations.
    W4A16,
    /// Q4 grouped weights × f32 activations.
    W4A16Grouped,
}

impl KernelFamily {
    /// Every family.
    pub const ALL: [KernelFamily; 9] = [
        Self::DotI8I8,
        Self::DotI8Q4,
        Self::QuantizeActivations,
        Self::W8A8,
        Self::W4A8,
        Self::W4A8Grouped,
        Self::W8A16,
        Self::W4A16,
        Self::W4A16Grouped,
    ];
    /// The matrix families the plan assigns a tier to.
    pub const GEMM: [KernelFamily; 6] = [
        Self::W8A8,
        Self::W4A8,
        Self::W4A8Grouped,
        Self::W8A16,
        Self::W4A16,
        Self::W4A16Grouped,
    ];

    /// Whether the family's activations are f32 (W8A16, W4A16, grouped
    /// W4A16: NUMERICS.md §6.2), not int8 codes.
    pub fn float_activations(self) -> bool {
        matches!(self, Self::W8A16 | Self::W4A16 | Self::W4A16Grouped)
    }

    /// The largest K whose exact i32 reduction is proven, for integer families.
    pub fn max_k(self) -> Option<usize> {
        match self {
            Self::DotI8I8 | Self::W8A8 => Some(MAX_K_W8A8),
            Self::DotI8Q4 | Self::W4A8 | Self::W4A8Grouped => Some(MAX_K_W4A8),
            _ => None,
        }
    }
}

impl fmt::Display for KernelFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::DotI8I8 => "dot_i8_i8",
            Self::DotI8Q4 => "dot_i8_q4",
            Self::QuantizeActivations => "quantize_q8",
            Self::W8A8 => "w8a8",
            Self::W4A8 => "w4a8",
            Self::W4A8Grouped => "w4a8_grouped",
            Self::W8A16 => "w8a16",
            Self::W4A16 => "w4a16",
            Self::W4A16Grouped => "w4a16_grouped",
        })
    }
}

/// A GEMM entry of a [`KernelTable`], by the operand types it takes.
#[derive(Debug, Clone, Copy)]
pub enum Gemm {
    /// Q8 weights × Q8 activations.
    Q8Q8(GemmQ8Q8),
    /// Q4 weights × Q8 activations.
    Q8Q4(GemmQ8Q4),
    /// Q8 weights × f32 activations.
    F32Q8(GemmF32Q8),
    /// Q4 weights × f32 activations.
    F32Q4(GemmF32Q4),
}

impl KernelTable {
    /// The entry of a matrix family; `None` for the dot and quantizer families.
    pub fn gemm(&self, family: KernelFamily) -> Option<Gemm> {
        use KernelFamily as F;
        Some(match family {
            F::W8A8 => Gemm::Q8Q8(self.gemm_w8a8),
            F::W4A8 => Gemm::Q8Q4(self.gemm_w4a8),
            F::W4A8Grouped => Gemm::Q8Q4(self.gemm_w4a8_grouped),
            F::W8A16 => Gemm::F32Q8(self.gemm_w8a16),
            F::W4A16 => Gemm::F32Q4(self.gemm_w4a16),
            F::W4A16Grouped => Gemm::F32Q4(self.gemm_w4a16_grouped),
            F::DotI8I8 | F::DotI8Q4 | F::QuantizeActivations => return None,
        })
    }

    /// The entry of a family on the weight's panel form
    /// ([`PanelsQ4`](crate::abi::panel::PanelsQ4)): W4A8 grouped or per channel where
    /// the tier has one; `None` for every other family.
    pub fn panels(&self, family: KernelFamily) -> Option<GemmQ8Panels> {
        match family {
            KernelFamily::W4A8 => self.gemm_w4a8_panels,
            KernelFamily::W4A8Grouped => self.gemm_w4a8_grouped_panels,
            _ => None,
        }
    }

    /// Whether `self` and `other` run the same entry for a matrix family (a
    /// tier that takes another's kernel for it, as AVX-512 VNNI takes
    /// AVX2's W8A16): timing the two would compare a kernel with itself.
    pub fn same_gemm(&self, other: &KernelTable, family: KernelFamily) -> bool {
        // the entries' addresses: equal exactly when both tables hold the
        // same function (or, folded by the linker, the same code)
        let address = |g: Option<Gemm>| match g {
            Some(Gemm::Q8Q8(f)) => f as usize,
            Some(Gemm::Q8Q4(f)) => f as usize,
            Some(Gemm::F32Q8(f)) => f as usize,
            Some(Gemm::F32Q4(f)) => f as usize,
            None => 0,
        };
        let a = address(self.gemm(family));
        a != 0 && a == address(other.gemm(family))
    }

    /// Whether `self` and `other` hold the same code for everything the
    /// proof of `family` runs (`crate::proof`): the family's entries (the
    /// matrix entry and its panel entry, the dot product, or the quantizer
    /// and its group sums) at the same addresses, and the same declared
    /// tiles, from which the proof's shapes come. Two such tables give the
    /// same bits for every proof row on one CPU, so one proof serves both
    /// (the selftest's sharing, `docs/NUMERICS.md` §8): a relaxed-SIMD
    /// table runs SIMD128's W8A8, quantizer and float families.
    pub fn same_family_code(&self, other: &KernelTable, family: KernelFamily) -> bool {
        use KernelFamily as F;
        let panels = |t: &KernelTable| t.panels(family).map_or(0, |f| f as usize);
        let entries = |t: &KernelTable| -> [usize; 2] {
            match family {
                F::DotI8I8 => [t.dot_i8_i8 as usize, 0],
                F::DotI8Q4 => [t.dot_i8_q4 as usize, 0],
                F::QuantizeActivations => [t.quantize_row_q8 as usize, t.group_sums as usize],
                _ => [0, panels(t)],
            }
        };
        let gemm = KernelFamily::GEMM.contains(&family) && !self.same_gemm(other, family);
        !gemm && entries(self) == entries(other) && self.shapes(family) == other.shapes(family)
    }

    /// The tiles a matrix family's entry declares (what the selftest's random
    /// shapes are derived from); [`Shapes::SINGLE`] for the other families.
    pub fn shapes(&self, family: KernelFamily) -> Shapes {
        use KernelFamily as F;
        let s = &self.shapes;
        match family {
            F::W8A8 => s.w8a8,
            F::W4A8 => s.w4a8,
            F::W4A8Grouped => s.w4a8_grouped,
            F::W8A16 => s.w8a16,
            F::W4A16 => s.w4a16,
            F::W4A16Grouped => s.w4a16_grouped,
            F::DotI8I8 | F::DotI8Q4 | F::QuantizeActivations => Shapes::SINGLE,
        }
    }
}
