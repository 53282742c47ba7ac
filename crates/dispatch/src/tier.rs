//! The tier registry: one line per tier naming its declaration
//! ([`TierSpec`]), the [`Int8Tier`] enum generated from it, the CPU's
//! features and model name as a measurement's label gives them, and the
//! checks that every tier is registered completely.

use std::fmt;
use std::str::FromStr;

use qlinear_kernels_core::{KernelTable, TierSpec};

use crate::DispatchError;

/// The registry: one line per tier, the tier's variant and the declaration
/// its folder exports ([`TierSpec`]). The enum, [`Int8Tier::ALL`] and
/// [`Int8Tier::spec`] are generated from it, and every other fact about a
/// tier (name, architecture, detection, how CI proves it) is read from the
/// declaration. A new tier is its folder plus one line here
/// (`docs/ARCHITECTURE.md`).
macro_rules! registry {
    ($($(#[doc = $doc:literal])* $variant:ident => $spec:path,)*) => {
        /// An executable int8 dot-product route (an ISA tier). Every tier computes
        /// exactly the scalar tier's bits; only proven tiers are dispatched. New
        /// tiers are added over time (hence `non_exhaustive`): iterate
        /// [`Int8Tier::ALL`] rather than matching.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Int8Tier {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl Int8Tier {
            /// Every tier, in order of preference when timings tie.
            pub const ALL: [Int8Tier; [$(stringify!($variant)),*].len()] = [$(Self::$variant),*];

            /// The tier's declaration, from its folder.
            pub const fn spec(self) -> &'static TierSpec {
                match self {
                    $( Self::$variant => &$spec, )*
                }
            }
        }
    };
}

registry! {
    /// Portable Rust: the reference.
    Scalar => qlinear_kernels_core::SCALAR_TIER,
    /// x86-64 AVX2.
    Avx2 => qlinear_kernels_x86::AVX2,
    /// x86-64 AVX-512 (F, BW, DQ, VL) with VNNI (`vpdpbusd`).
    Avx512Vnni => qlinear_kernels_x86::AVX512_VNNI,
    /// aarch64 baseline ASIMD.
    Neon => qlinear_kernels_neon::NEON,
    /// aarch64 FEAT_DotProd (`sdot`).
    NeonSdot => qlinear_kernels_neon::NEON_SDOT,
    /// aarch64 FEAT_I8MM (`smmla`) for the batch families, on top of `NeonSdot`.
    NeonI8mm => qlinear_kernels_neon::NEON_I8MM,
    /// WebAssembly SIMD128.
    WasmSimd128 => qlinear_kernels_wasm::WASM_SIMD128,
    /// WebAssembly relaxed SIMD (`i16x8.relaxed_dot_i8x16_i7x16_s` for
    /// W4A8), on top of `WasmSimd128`: a build with `+relaxed-simd`, for
    /// engines that have it.
    WasmRelaxedSimd => qlinear_kernels_wasm::WASM_RELAXED_SIMD,
}

impl Int8Tier {
    /// The tier's name (`scalar`, `avx2`, `avx512-vnni`, `neon`, `neon-sdot`,
    /// `neon-i8mm`, `wasm-simd128`, `wasm-relaxed-simd`).
    pub const fn name(self) -> &'static str {
        self.spec().name
    }

    /// The architecture the tier is built for (`target_arch`): `any` for
    /// the scalar tier. The test runner (`cargo xtask test`) forces and
    /// proves every tier of the architecture it runs on, from this list.
    pub fn arch(self) -> &'static str {
        self.spec().arch
    }

    /// Emulated CPUs (`qemu-aarch64 -cpu NAME`) that lack the tier's feature
    /// while having the baseline of its architecture: where the test runner
    /// shows the tier reported absent and never used. Empty for tiers every
    /// CPU of their architecture has, and for x86 and WebAssembly (the wasm
    /// runner builds without `+simd128`, and without `+relaxed-simd`,
    /// instead). The CPU that proves it is [`TierSpec::emulated_with`].
    pub fn emulated_without(self) -> &'static [&'static str] {
        self.spec().emulated_without
    }

    /// The `-C target-feature` list a build needs to contain the tier, for
    /// WebAssembly, which has no run-time detection (each wasm tier's list
    /// contains the one before it); empty for the tiers detected at run time.
    /// The test runner builds the wasm suites once per list.
    pub fn build_features(self) -> &'static str {
        self.spec().build_features
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
        (self.spec().detect)().map_err(str::to_string)
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

/// The CPU features the registry's tiers declare ([`TierSpec::features`])
/// that this CPU reports (on WebAssembly, that this build has), each once,
/// in the registry's order.
pub fn cpu_features() -> Vec<&'static str> {
    let mut seen = Vec::new();
    for tier in Int8Tier::ALL {
        for f in tier.spec().features {
            if !seen.contains(&f.name) && (f.present)() {
                seen.push(f.name);
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
    use qlinear_kernels_core::KernelFamily;

    use super::*;

    #[test]
    fn a_tier_is_detected_exactly_when_its_declared_features_are_present() {
        // the features are the one list: detection reads them, and
        // cpu_features reports them
        let here = std::env::consts::ARCH;
        let features = cpu_features();
        for tier in Int8Tier::ALL {
            let spec = tier.spec();
            if spec.arch != here && spec.arch != "any" {
                assert!(spec.table().is_none(), "{tier} runs outside {}", spec.arch);
                continue;
            }
            assert_eq!(
                spec.table().is_some(),
                spec.features_present(),
                "{tier}: detected against its declared features {:?}",
                spec.features.iter().map(|f| f.name).collect::<Vec<_>>()
            );
            for f in spec.features {
                assert_eq!(features.contains(&f.name), (f.present)(), "{tier}: {}", f.name);
            }
        }
        assert_eq!(Int8Tier::Scalar.spec().features.len(), 0);
        assert!(Int8Tier::ALL
            .iter()
            .all(|t| t == &Int8Tier::Scalar || !t.spec().features.is_empty()));
    }

    #[test]
    fn every_tier_is_registered_completely() {
        let mut names = std::collections::HashSet::new();
        for tier in Int8Tier::ALL {
            let spec = tier.spec();
            assert!(names.insert(tier.name()), "{tier}: name used twice");
            assert!(
                !spec.name.is_empty()
                    && spec
                        .name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{tier}: a name of lowercase ASCII, digits and '-'"
            );
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
            assert!(Int8Tier::of_arch(tier.arch()).contains(&tier));
            assert_eq!(
                tier.build_features().is_empty(),
                tier.arch() != "wasm32",
                "{tier}: wasm tiers, and only they, are chosen at build time"
            );
            // how CI proves it: aarch64 tiers under qemu (the baseline on
            // every emulated CPU, each later tier also shown absent on one
            // without it), x86-64 tiers on the CI machine's own CPU, wasm
            // tiers by their build under Node.js
            let arch = Int8Tier::of_arch(tier.arch());
            if tier.arch() == "aarch64" {
                assert!(!spec.emulated_with.is_empty(), "{tier}: no emulated CPU proves it");
                assert_eq!(
                    spec.emulated_without.is_empty(),
                    arch[0] == tier,
                    "{tier}: a tier beyond its architecture's baseline names a CPU without it"
                );
                assert!(!spec.emulated_without.contains(&spec.emulated_with), "{tier}");
            } else {
                assert!(
                    spec.emulated_with.is_empty() && spec.emulated_without.is_empty(),
                    "{tier}: qemu CPUs are aarch64's"
                );
            }
            assert_eq!(
                spec.mutants.is_empty(),
                tier == Int8Tier::Scalar,
                "{tier}: every tier but the reference names the mutants its proof fails"
            );
            // a tier is available exactly where it is compiled for
            let here = cfg!(target_arch = "x86_64") && tier.arch() == "x86_64"
                || cfg!(target_arch = "aarch64") && tier.arch() == "aarch64"
                || cfg!(target_arch = "wasm32") && tier.arch() == "wasm32"
                || tier.arch() == "any";
            assert!(here || !tier.is_available(), "{tier} available off its architecture");
            if let Err(why) = tier.table() {
                assert!(!why.is_empty(), "{tier}: detection says why not");
            }
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

    /// Each declaration's folder holds it (`spec.rs`, with the tier's name),
    /// and each mutant it names is a `#[test]` in a file of that folder. Read from
    /// the repository, so not in the WebAssembly builds (no file system).
    #[test]
    #[cfg(not(target_arch = "wasm32"))]
    fn every_tier_lives_in_its_folder_beside_its_mutants() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let read = |path: &str| std::fs::read_to_string(repo.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        for tier in Int8Tier::ALL {
            let spec = tier.spec();
            let declaration = read(&format!("{}/spec.rs", spec.folder));
            assert!(
                declaration.contains(&format!("name: \"{}\"", spec.name)),
                "{tier}: {}/spec.rs does not declare it",
                spec.folder
            );
            let (krate, inside) = spec
                .folder
                .split_once("/src")
                .unwrap_or_else(|| panic!("{tier}: a folder under a crate's src"));
            for mutant in spec.mutants {
                let (file, test) = mutant
                    .split_once("::")
                    .unwrap_or_else(|| panic!("{tier}: {mutant:?} is not FILE::TEST"));
                assert!(
                    file.starts_with(&format!("src{inside}/")),
                    "{tier}: {file} is not in the tier's folder {}",
                    spec.folder
                );
                let text = read(&format!("{krate}/{file}"));
                let is_test = text
                    .match_indices(&format!("fn {test}("))
                    .any(|(at, _)| text[..at].trim_end().ends_with("#[test]"));
                assert!(is_test, "{tier}: no #[test] fn {test} in {krate}/{file}");
            }
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
