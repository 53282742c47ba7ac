use std::fmt;
use std::str::FromStr;

use qlinear_kernels_scalar::{KernelTable, SCALAR};

use crate::DispatchError;

/// An executable int8 dot-product route (an ISA tier). Every tier computes
/// exactly the scalar tier's bits; only proven tiers are dispatched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Int8Tier {
    /// Portable Rust: the reference.
    Scalar,
    /// x86-64 AVX2.
    Avx2,
    /// x86-64 AVX-512 (F, BW, VL) with VNNI (`vpdpbusd`).
    Avx512Vnni,
    /// aarch64 baseline ASIMD.
    Neon,
    /// aarch64 FEAT_DotProd (`sdot`).
    NeonSdot,
    /// WebAssembly SIMD128.
    WasmSimd128,
}

impl Int8Tier {
    /// Every tier, in order of preference when timings tie.
    pub const ALL: [Int8Tier; 6] = [
        Self::Scalar,
        Self::Avx2,
        Self::Avx512Vnni,
        Self::Neon,
        Self::NeonSdot,
        Self::WasmSimd128,
    ];

    /// The tier's name (`scalar`, `avx2`, `avx512-vnni`, `neon`, `neon-sdot`, `wasm-simd128`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Avx2 => "avx2",
            Self::Avx512Vnni => "avx512-vnni",
            Self::Neon => "neon",
            Self::NeonSdot => "neon-sdot",
            Self::WasmSimd128 => "wasm-simd128",
        }
    }

    /// The tier's kernel table if it is compiled in and its CPU feature is
    /// present, else why not. Proven or not: see [`crate::selftest_report`].
    pub(crate) fn table(self) -> Result<&'static KernelTable, String> {
        match self {
            Self::Scalar => Ok(&SCALAR),
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => qlinear_kernels_x86::avx2_table().ok_or_else(|| "this CPU lacks AVX2 or F16C".into()),
            #[cfg(target_arch = "x86_64")]
            Self::Avx512Vnni => qlinear_kernels_x86::avx512vnni_table()
                .ok_or_else(|| "this CPU lacks AVX-512 F/BW/VL with VNNI (or AVX2/F16C)".into()),
            #[cfg(not(target_arch = "x86_64"))]
            Self::Avx2 | Self::Avx512Vnni => Err(format!("{self} is x86-64 only")),
            #[cfg(target_arch = "aarch64")]
            Self::Neon => qlinear_kernels_neon::neon_table().ok_or_else(|| "this CPU lacks ASIMD".into()),
            #[cfg(target_arch = "aarch64")]
            Self::NeonSdot => {
                qlinear_kernels_neon::sdot_table().ok_or_else(|| "this CPU lacks FEAT_DotProd (dotprod)".into())
            }
            #[cfg(not(target_arch = "aarch64"))]
            Self::Neon | Self::NeonSdot => Err(format!("{self} is aarch64 only")),
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Self::WasmSimd128 => qlinear_kernels_wasm::simd128_table().ok_or_else(|| "not compiled in".into()),
            #[cfg(all(target_arch = "wasm32", not(target_feature = "simd128")))]
            Self::WasmSimd128 => Err("this build lacks +simd128 (WebAssembly has no run-time detection)".into()),
            #[cfg(not(target_arch = "wasm32"))]
            Self::WasmSimd128 => Err(format!("{self} is wasm32 with +simd128 only")),
        }
    }
}

pub(crate) fn tier_list(tiers: impl IntoIterator<Item = Int8Tier>) -> String {
    tiers.into_iter().map(Int8Tier::name).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for Int8Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Int8Tier {
    type Err = DispatchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let want = s.trim().to_ascii_lowercase().replace('_', "-");
        Self::ALL
            .into_iter()
            .find(|t| t.name() == want)
            .ok_or_else(|| DispatchError::UnknownTier {
                name: s.to_string(),
                valid: tier_list(Self::ALL),
            })
    }
}

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

    /// The largest K whose exact i32 reduction is proven, for integer families.
    pub fn max_k(self) -> Option<usize> {
        use qlinear_kernels_scalar::{MAX_K_W4A8, MAX_K_W8A8};
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

/// Whether the AVX2 tier is compiled in and the CPU reports AVX2.
pub fn avx2_available() -> bool {
    Int8Tier::Avx2.table().is_ok()
}
/// Whether the AVX-512 VNNI tier is compiled in and the CPU reports AVX-512 F/BW/VL and VNNI.
pub fn avx512_vnni_available() -> bool {
    Int8Tier::Avx512Vnni.table().is_ok()
}
/// Whether the SDOT island is compiled in and the CPU reports FEAT_DotProd.
pub fn neon_sdot_available() -> bool {
    Int8Tier::NeonSdot.table().is_ok()
}
/// Whether the SIMD128 island is compiled in (WebAssembly has no run-time detection).
pub fn wasm_simd128_available() -> bool {
    Int8Tier::WasmSimd128.table().is_ok()
}

/// The CPU features relevant to qlinear's tiers that this CPU reports.
#[allow(clippy::vec_init_then_push)] // each architecture pushes what it detects
pub fn cpu_features() -> Vec<&'static str> {
    let mut seen = Vec::new();
    cfg_if::cfg_if! {
        if #[cfg(target_arch = "x86_64")] {
            macro_rules! probe { ($($f:tt),*) => { $( if std::arch::is_x86_feature_detected!($f) { seen.push($f); } )* } }
            probe!("sse4.1", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avxvnni");
        } else if #[cfg(target_arch = "aarch64")] {
            macro_rules! probe { ($($f:tt),*) => { $( if std::arch::is_aarch64_feature_detected!($f) { seen.push($f); } )* } }
            probe!("neon", "dotprod", "i8mm");
        } else if #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))] {
            seen.push("simd128");
        }
    }
    seen
}
