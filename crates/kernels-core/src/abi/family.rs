//! The kernel families: their declaration ([`FAMILIES`], one row a
//! family: what it reads, its bound, its entry and tiles in a
//! [`KernelTable`]), and the table's lookup by family.

use std::fmt;

use qlinear_quant_recipe::QScheme;

use crate::abi::activations::{MAX_K_W4A8, MAX_K_W8A8};
use crate::abi::panel::GemmQ8Panels;
use crate::abi::table::{GemmF32Q4, GemmF32Q8, GemmQ8Q4, GemmQ8Q8, GemmShapes, KernelTable};
use crate::abi::tile::Shapes;

/// A kernel family: one entry of the kernel table, proven and planned
/// separately. Each is declared once, by its row of [`FAMILIES`] (the
/// variant here names it): everything the proof, the plan and the dispatch
/// layer ask of a family (its weights, its activations, its K bound, its
/// entry and tiles in a [`KernelTable`]) is read from that row.
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

/// The weights a family reads: a quantized matrix type and its grouping.
/// Families that read the same kind are proven on the same patterns and
/// timed on the same matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Weights {
    /// Int8 codes with one f32 scale per output row ([`QuantizedMatrix`](qlinear_quant_recipe::QuantizedMatrix), `QScheme::Q8`).
    Q8,
    /// Biased 4-bit codes with one f32 scale per output row
    /// ([`QuantizedMatrixQ4`](qlinear_quant_recipe::QuantizedMatrixQ4) per channel, `QScheme::Q4`).
    Q4,
    /// Biased 4-bit codes with one f16 scale per group of columns
    /// ([`QuantizedMatrixQ4`](qlinear_quant_recipe::QuantizedMatrixQ4) grouped, `QScheme::Q4Grouped`).
    Q4Grouped,
}

impl Weights {
    /// Every kind.
    pub const ALL: [Weights; 3] = [Weights::Q8, Weights::Q4, Weights::Q4Grouped];

    /// The kind a weight of `scheme` is.
    pub fn of(scheme: QScheme) -> Weights {
        match scheme {
            QScheme::Q8 => Weights::Q8,
            QScheme::Q4 => Weights::Q4,
            QScheme::Q4Grouped(_) => Weights::Q4Grouped,
        }
    }

    /// Bits a code: 8 or 4.
    pub fn bits(self) -> u32 {
        match self {
            Weights::Q8 => 8,
            Weights::Q4 | Weights::Q4Grouped => 4,
        }
    }
}

/// What a family takes for activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activations {
    /// Int8 codes the caller hands over (the dot products).
    Codes,
    /// F32 rows that a call quantizes to int8 codes first
    /// (`quantize_row_q8`, `docs/NUMERICS.md` §3.2): the family's calls
    /// rely on the quantizer's proof as well as their own.
    Quantized,
    /// F32 rows, used as they are (§6.2); the quantizer's input too.
    F32,
}

/// One kernel family's declaration, a row of [`FAMILIES`].
#[derive(Debug, Clone, Copy)]
pub struct FamilySpec {
    /// The family this row declares (its index in [`FAMILIES`]).
    pub family: KernelFamily,
    /// Its name in reports, plans and environment variables.
    pub name: &'static str,
    /// The weights it reads; `None` for the activation quantizer.
    pub weights: Option<Weights>,
    /// The activations it takes.
    pub activations: Activations,
    /// The largest K whose exact i32 reduction is proven, for integer
    /// families (`docs/NUMERICS.md` §6.1); `None` for the float ones.
    pub max_k: Option<usize>,
    /// Its matrix entry in a table; `None` for the dot and quantizer
    /// families, which are not matrix families.
    pub gemm: Option<fn(&KernelTable) -> Gemm>,
    /// Its entry on the weight's panel form, where a table has one.
    pub panels: fn(&KernelTable) -> Option<GemmQ8Panels>,
    /// The tiles its matrix entry declares ([`Shapes::SINGLE`] for the
    /// others).
    pub shapes: fn(&GemmShapes) -> Shapes,
}

/// The declaration of every kernel family, in [`KernelFamily`]'s order. A
/// new family is a variant, a row here and its entry's field in
/// [`KernelTable`] and [`GemmShapes`]; the proof's patterns, the plan's
/// timing matrices, the mode that runs it and the proofs its calls need are
/// derived from `weights` and `activations` (`docs/ARCHITECTURE.md`,
/// "Adding a kernel family").
pub const FAMILIES: [FamilySpec; 9] = [
    FamilySpec {
        family: KernelFamily::DotI8I8,
        name: "dot_i8_i8",
        weights: Some(Weights::Q8),
        activations: Activations::Codes,
        max_k: Some(MAX_K_W8A8),
        gemm: None,
        panels: |_| None,
        shapes: |_| Shapes::SINGLE,
    },
    FamilySpec {
        family: KernelFamily::DotI8Q4,
        name: "dot_i8_q4",
        weights: Some(Weights::Q4),
        activations: Activations::Codes,
        max_k: Some(MAX_K_W4A8),
        gemm: None,
        panels: |_| None,
        shapes: |_| Shapes::SINGLE,
    },
    FamilySpec {
        family: KernelFamily::QuantizeActivations,
        name: "quantize_q8",
        weights: None,
        activations: Activations::F32,
        max_k: None,
        gemm: None,
        panels: |_| None,
        shapes: |_| Shapes::SINGLE,
    },
    FamilySpec {
        family: KernelFamily::W8A8,
        name: "w8a8",
        weights: Some(Weights::Q8),
        activations: Activations::Quantized,
        max_k: Some(MAX_K_W8A8),
        gemm: Some(|t| Gemm::Q8Q8(t.gemm_w8a8)),
        panels: |_| None,
        shapes: |s| s.w8a8,
    },
    FamilySpec {
        family: KernelFamily::W4A8,
        name: "w4a8",
        weights: Some(Weights::Q4),
        activations: Activations::Quantized,
        max_k: Some(MAX_K_W4A8),
        gemm: Some(|t| Gemm::Q8Q4(t.gemm_w4a8)),
        panels: |t| t.gemm_w4a8_panels,
        shapes: |s| s.w4a8,
    },
    FamilySpec {
        family: KernelFamily::W4A8Grouped,
        name: "w4a8_grouped",
        weights: Some(Weights::Q4Grouped),
        activations: Activations::Quantized,
        max_k: Some(MAX_K_W4A8),
        gemm: Some(|t| Gemm::Q8Q4(t.gemm_w4a8_grouped)),
        panels: |t| t.gemm_w4a8_grouped_panels,
        shapes: |s| s.w4a8_grouped,
    },
    FamilySpec {
        family: KernelFamily::W8A16,
        name: "w8a16",
        weights: Some(Weights::Q8),
        activations: Activations::F32,
        max_k: None,
        gemm: Some(|t| Gemm::F32Q8(t.gemm_w8a16)),
        panels: |_| None,
        shapes: |s| s.w8a16,
    },
    FamilySpec {
        family: KernelFamily::W4A16,
        name: "w4a16",
        weights: Some(Weights::Q4),
        activations: Activations::F32,
        max_k: None,
        gemm: Some(|t| Gemm::F32Q4(t.gemm_w4a16)),
        panels: |_| None,
        shapes: |s| s.w4a16,
    },
    FamilySpec {
        family: KernelFamily::W4A16Grouped,
        name: "w4a16_grouped",
        weights: Some(Weights::Q4Grouped),
        activations: Activations::F32,
        max_k: None,
        gemm: Some(|t| Gemm::F32Q4(t.gemm_w4a16_grouped)),
        panels: |_| None,
        shapes: |s| s.w4a16_grouped,
    },
];

// Each row sits at its family's index, so that `spec` is an index and the
// declaration's order is the enum's (checked when the crate compiles).
const _: () = {
    let mut i = 0;
    while i < FAMILIES.len() {
        assert!(
            FAMILIES[i].family as usize == i,
            "FAMILIES must follow KernelFamily's order"
        );
        i += 1;
    }
};

/// How many rows of [`FAMILIES`] declare a matrix entry.
const fn gemm_count() -> usize {
    let (mut n, mut i) = (0, 0);
    while i < FAMILIES.len() {
        if FAMILIES[i].gemm.is_some() {
            n += 1;
        }
        i += 1;
    }
    n
}

impl KernelFamily {
    /// Every family, in [`FAMILIES`]' order.
    pub const ALL: [KernelFamily; FAMILIES.len()] = {
        let mut all = [KernelFamily::DotI8I8; FAMILIES.len()];
        let mut i = 0;
        while i < FAMILIES.len() {
            all[i] = FAMILIES[i].family;
            i += 1;
        }
        all
    };
    /// The matrix families the plan assigns a tier to: those that declare a
    /// matrix entry, in [`FAMILIES`]' order.
    pub const GEMM: [KernelFamily; gemm_count()] = {
        let mut gemm = [KernelFamily::W8A8; gemm_count()];
        let (mut n, mut i) = (0, 0);
        while i < FAMILIES.len() {
            if FAMILIES[i].gemm.is_some() {
                gemm[n] = FAMILIES[i].family;
                n += 1;
            }
            i += 1;
        }
        gemm
    };

    /// The family's declaration, its row of [`FAMILIES`].
    pub const fn spec(self) -> &'static FamilySpec {
        &FAMILIES[self as usize]
    }

    /// The weights the family reads; `None` for the activation quantizer.
    pub fn weights(self) -> Option<Weights> {
        self.spec().weights
    }

    /// Whether the family is a matrix family whose activations are f32
    /// (W8A16, W4A16, grouped W4A16: NUMERICS.md §6.2), not int8 codes.
    pub fn float_activations(self) -> bool {
        let spec = self.spec();
        spec.gemm.is_some() && spec.activations == Activations::F32
    }

    /// The largest K whose exact i32 reduction is proven, for integer families.
    pub fn max_k(self) -> Option<usize> {
        self.spec().max_k
    }

    /// The families whose proofs a call of this one relies on: itself, and
    /// the activation quantizer where the call quantizes its activations
    /// ([`Activations::Quantized`]).
    pub fn needs(self) -> &'static [KernelFamily] {
        if self.spec().activations == Activations::Quantized {
            &NEEDS_WITH_QUANTIZER[self as usize]
        } else {
            &NEEDS_ALONE[self as usize]
        }
    }
}

/// `[f]` for every family `f`, for [`KernelFamily::needs`].
const NEEDS_ALONE: [[KernelFamily; 1]; FAMILIES.len()] = {
    let mut out = [[KernelFamily::DotI8I8]; FAMILIES.len()];
    let mut i = 0;
    while i < FAMILIES.len() {
        out[i] = [FAMILIES[i].family];
        i += 1;
    }
    out
};

/// `[f, QuantizeActivations]` for every family `f`, for [`KernelFamily::needs`].
const NEEDS_WITH_QUANTIZER: [[KernelFamily; 2]; FAMILIES.len()] = {
    let mut out = [[KernelFamily::DotI8I8; 2]; FAMILIES.len()];
    let mut i = 0;
    while i < FAMILIES.len() {
        out[i] = [FAMILIES[i].family, KernelFamily::QuantizeActivations];
        i += 1;
    }
    out
};

impl fmt::Display for KernelFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.spec().name)
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

impl Gemm {
    /// Whether the entry takes `weights`' codes and `activations` (an entry
    /// of int8 activations takes the rows a call quantizes; one of f32 the
    /// rows as they are): how a family's row of [`FAMILIES`] is checked
    /// against the entry it names.
    pub fn takes(self, weights: Weights, activations: Activations) -> bool {
        use Activations as A;
        matches!(
            (self, weights.bits(), activations),
            (Gemm::Q8Q8(_), 8, A::Quantized)
                | (Gemm::F32Q8(_), 8, A::F32)
                | (Gemm::Q8Q4(_), 4, A::Quantized)
                | (Gemm::F32Q4(_), 4, A::F32)
        )
    }
}

impl KernelTable {
    /// The entry of a matrix family; `None` for the dot and quantizer families.
    pub fn gemm(&self, family: KernelFamily) -> Option<Gemm> {
        family.spec().gemm.map(|entry| entry(self))
    }

    /// The entry of a family on the weight's panel form
    /// ([`PanelsQ4`](crate::abi::panel::PanelsQ4)): W4A8 grouped or per channel where
    /// the tier has one; `None` for every other family.
    pub fn panels(&self, family: KernelFamily) -> Option<GemmQ8Panels> {
        (family.spec().panels)(self)
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
        (family.spec().shapes)(&self.shapes)
    }
}
