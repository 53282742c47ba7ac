use std::fmt;
use std::str::FromStr;

use qlinear_kernels_scalar::{KernelTable, SCALAR};

use crate::DispatchError;

/// An executable int8 dot-product route (an ISA tier). Every tier computes
/// exactly the scalar tier's bits; only proven tiers are dispatched. New
/// tiers are added over time (hence `non_exhaustive`): iterate
/// [`Int8Tier::ALL`] rather than matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
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
    /// aarch64 FEAT_I8MM (`smmla`) for the batch families, on top of `NeonSdot`.
    NeonI8mm,
    /// WebAssembly SIMD128.
    WasmSimd128,
    /// WebAssembly relaxed SIMD (`i16x8.relaxed_dot_i8x16_i7x16_s` for
    /// W4A8), on top of `WasmSimd128`: a build with `+relaxed-simd`, for
    /// engines that have it.
    WasmRelaxedSimd,
}

impl Int8Tier {
    /// Every tier, in order of preference when timings tie.
    pub const ALL: [Int8Tier; 8] = [
        Self::Scalar,
        Self::Avx2,
        Self::Avx512Vnni,
        Self::Neon,
        Self::NeonSdot,
        Self::NeonI8mm,
        Self::WasmSimd128,
        Self::WasmRelaxedSimd,
    ];

    /// The tier's name (`scalar`, `avx2`, `avx512-vnni`, `neon`, `neon-sdot`,
    /// `neon-i8mm`, `wasm-simd128`, `wasm-relaxed-simd`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Avx2 => "avx2",
            Self::Avx512Vnni => "avx512-vnni",
            Self::Neon => "neon",
            Self::NeonSdot => "neon-sdot",
            Self::NeonI8mm => "neon-i8mm",
            Self::WasmSimd128 => "wasm-simd128",
            Self::WasmRelaxedSimd => "wasm-relaxed-simd",
        }
    }

    /// The architecture the tier is built for (`target_arch`): `any` for
    /// the scalar tier. The test runner (`cargo xtask test`) forces and
    /// proves every tier of the architecture it runs on, from this list.
    pub fn arch(self) -> &'static str {
        match self {
            Self::Scalar => "any",
            Self::Avx2 | Self::Avx512Vnni => "x86_64",
            Self::Neon | Self::NeonSdot | Self::NeonI8mm => "aarch64",
            Self::WasmSimd128 | Self::WasmRelaxedSimd => "wasm32",
        }
    }

    /// Emulated CPUs (`qemu-aarch64 -cpu NAME`) that lack the tier's feature
    /// while having the baseline of its architecture: where the test runner
    /// shows the tier reported absent and never used. Empty for tiers every
    /// CPU of their architecture has, and for x86 and WebAssembly (the wasm
    /// runner builds without `+simd128`, and without `+relaxed-simd`,
    /// instead). `-cpu max` has them all.
    pub fn emulated_without(self) -> &'static [&'static str] {
        match self {
            Self::NeonSdot => &["cortex-a72"],
            Self::NeonI8mm => &["cortex-a72", "neoverse-n1"],
            _ => &[],
        }
    }

    /// The `-C target-feature` list a build needs to contain the tier, for
    /// WebAssembly, which has no run-time detection (each wasm tier's list
    /// contains the one before it); empty for the tiers detected at run time.
    /// The test runner builds the wasm suites once per list.
    pub fn build_features(self) -> &'static str {
        match self {
            Self::WasmSimd128 => "+simd128",
            Self::WasmRelaxedSimd => "+simd128,+relaxed-simd",
            _ => "",
        }
    }

    /// The tiers built for `arch` (see [`Int8Tier::arch`]), in [`Int8Tier::ALL`] order.
    pub fn of_arch(arch: &str) -> Vec<Int8Tier> {
        Self::ALL.into_iter().filter(|t| t.arch() == arch).collect()
    }

    /// Whether the tier is compiled in and its CPU feature is present
    /// (proven or not: see [`crate::selftest_report`]).
    pub fn is_available(self) -> bool {
        self.table().is_ok()
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
            #[cfg(target_arch = "aarch64")]
            Self::NeonI8mm => qlinear_kernels_neon::i8mm_table()
                .ok_or_else(|| "this CPU lacks FEAT_I8MM (i8mm) or FEAT_DotProd".into()),
            #[cfg(not(target_arch = "aarch64"))]
            Self::Neon | Self::NeonSdot | Self::NeonI8mm => Err(format!("{self} is aarch64 only")),
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Self::WasmSimd128 => qlinear_kernels_wasm::simd128_table().ok_or_else(|| "not compiled in".into()),
            #[cfg(all(target_arch = "wasm32", not(target_feature = "simd128")))]
            Self::WasmSimd128 => Err("this build lacks +simd128 (WebAssembly has no run-time detection)".into()),
            #[cfg(not(target_arch = "wasm32"))]
            Self::WasmSimd128 => Err(format!("{self} is wasm32 with +simd128 only")),
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128", target_feature = "relaxed-simd"))]
            Self::WasmRelaxedSimd => qlinear_kernels_wasm::relaxed_simd_table().ok_or_else(|| "not compiled in".into()),
            #[cfg(all(
                target_arch = "wasm32",
                not(all(target_feature = "simd128", target_feature = "relaxed-simd"))
            ))]
            Self::WasmRelaxedSimd => {
                Err("this build lacks +simd128,+relaxed-simd (WebAssembly has no run-time detection)".into())
            }
            #[cfg(not(target_arch = "wasm32"))]
            Self::WasmRelaxedSimd => Err(format!("{self} is wasm32 with +simd128,+relaxed-simd only")),
        }
    }
}

/// The width of the longest tier name, for the reports' columns.
pub(crate) const NAME_WIDTH: usize = {
    let mut w = 0;
    let mut i = 0;
    while i < Int8Tier::ALL.len() {
        let n = Int8Tier::ALL[i].name().len();
        if n > w {
            w = n;
        }
        i += 1;
    }
    w
};

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

/// The CPU features relevant to qlinear's tiers that this CPU reports.
// each architecture pushes what it detects (a wasm32 build without SIMD128: nothing)
#[allow(clippy::vec_init_then_push, unused_mut)]
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
            if cfg!(target_feature = "relaxed-simd") {
                seen.push("relaxed-simd");
            }
        }
    }
    seen
}

/// The CPU as the OS names it, for the label of a measurement: the `model
/// name` of `/proc/cpuinfo` (`Model` on some ARM systems), with the `cpu
/// family` and `model` numbers where the OS gives them, since a name such as
/// "AMD EPYC" says nothing of the generation ("AMD EPYC (family 25 model
/// 1)"). The architecture's name where there is no `/proc/cpuinfo` or no
/// name in it.
pub fn cpu_model() -> String {
    match std::fs::read_to_string("/proc/cpuinfo") {
        Ok(info) => cpu_model_of(&info),
        Err(_) => std::env::consts::ARCH.to_string(),
    }
}

/// [`cpu_model`] from the text of a `/proc/cpuinfo`.
fn cpu_model_of(info: &str) -> String {
    let field = |key: &str| {
        info.lines()
            .find(|l| l.split(':').next().map(str::trim) == Some(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let name = field("model name")
        .or_else(|| field("Model"))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    match (field("cpu family"), field("model")) {
        (Some(f), Some(m)) => format!("{name} (family {f} model {m})"),
        _ => name,
    }
}

#[cfg(test)]
mod cpu_model_tests {
    use super::cpu_model_of;

    #[test]
    fn names_carry_the_family_and_model_where_the_os_gives_them() {
        let x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n";
        assert_eq!(cpu_model_of(x86), "AMD EPYC (family 25 model 1)");
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n\nModel\t\t: Raspberry Pi 5\n";
        assert_eq!(cpu_model_of(arm), "Raspberry Pi 5");
        assert_eq!(cpu_model_of(""), std::env::consts::ARCH);
    }
}

/// The new-tier checklist of `docs/ARCHITECTURE.md`, checked for every tier
/// in the registry (those compiled in and present here in full).
#[cfg(test)]
mod checklist {
    use qlinear_kernels_scalar::KernelFamily;

    use super::*;

    #[test]
    fn every_tier_is_registered_completely() {
        let mut names = std::collections::HashSet::new();
        for tier in Int8Tier::ALL {
            assert!(names.insert(tier.name()), "{tier}: name used twice");
            assert_eq!(tier.name().parse::<Int8Tier>().unwrap(), tier);
            assert_eq!(tier.to_string(), tier.name());
            assert!(
                ["any", "x86_64", "aarch64", "wasm32"].contains(&tier.arch()),
                "{tier}: arch"
            );
            assert_eq!(
                tier.arch() == "any",
                tier == Int8Tier::Scalar,
                "{tier}: only the scalar tier runs anywhere"
            );
            assert!(
                tier.emulated_without().is_empty() || tier.arch() == "aarch64",
                "{tier}: qemu CPUs are aarch64's"
            );
            assert!(Int8Tier::of_arch(tier.arch()).contains(&tier));
            assert_eq!(
                tier.build_features().is_empty(),
                tier.arch() != "wasm32",
                "{tier}: wasm tiers, and only they, are chosen at build time"
            );
            // a tier is available exactly where it is compiled for
            let here = cfg!(target_arch = "x86_64") && tier.arch() == "x86_64"
                || cfg!(target_arch = "aarch64") && tier.arch() == "aarch64"
                || cfg!(target_arch = "wasm32") && tier.arch() == "wasm32"
                || tier.arch() == "any";
            assert!(here || !tier.is_available(), "{tier} available off its architecture");
        }
        assert!(Int8Tier::Scalar.is_available());
        // each wasm build contains the tiers before it (the runner's expectations rely on it)
        let wasm = Int8Tier::of_arch("wasm32");
        for pair in wasm.windows(2) {
            let (before, after) = (pair[0].build_features(), pair[1].build_features());
            assert!(
                before.split(',').all(|f| after.split(',').any(|g| g == f)),
                "{} must build on {}",
                pair[1],
                pair[0]
            );
        }
    }

    #[test]
    fn every_available_table_is_named_for_its_tier_and_declares_valid_tiles() {
        for tier in Int8Tier::ALL.into_iter().filter(|t| t.is_available()) {
            let table = tier.table().unwrap();
            assert_eq!(table.name, tier.name());
            for family in KernelFamily::ALL {
                let shapes = table.shapes(family);
                if let Err(why) = shapes.validate() {
                    panic!("{tier} {family}: {why}");
                }
                assert_eq!(table.gemm(family).is_some(), KernelFamily::GEMM.contains(&family));
            }
        }
    }
}
