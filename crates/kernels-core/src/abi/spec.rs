//! What a tier declares about itself. Each tier's folder exports one
//! [`TierSpec`]; the registry (`qlinear_dispatch::Int8Tier`) is the list of
//! them, and the test runner (`cargo xtask test`), the CLI and the web page
//! read every fact about a tier from there, so that adding a tier is its
//! folder plus one line in that list (`docs/ARCHITECTURE.md`).

use crate::abi::table::KernelTable;

/// A tier's declaration: its name, where it runs, how it is found on a CPU,
/// how CI proves it (and shows it absent), and where its code and its
/// mutants live. Plain data, the same on every architecture; only
/// [`detect`](TierSpec::detect) looks at the CPU.
#[derive(Debug, Clone, Copy)]
pub struct TierSpec {
    /// The tier's name (`avx2`, `neon-sdot`, …): lowercase ASCII, digits
    /// and `-`; its table's [`KernelTable::name`].
    pub name: &'static str,
    /// The `target_arch` the tier is built for (`x86_64`, `aarch64`,
    /// `wasm32`), or `any` (the scalar tier only).
    pub arch: &'static str,
    /// The CPU features the tier needs, each with its run-time probe
    /// ([`cpu_features!`](crate::cpu_features)): what its detection checks,
    /// and what `qlinear_dispatch::cpu_features` reports (the union over
    /// the registry, so no second list names them). Empty for the scalar
    /// tier.
    pub features: &'static [CpuFeature],
    /// The tier's kernel table where it is compiled in and this CPU has its
    /// features, else a sentence saying which is missing. Proven or not:
    /// the dispatch crate's selftest decides that.
    pub detect: fn() -> Result<&'static KernelTable, &'static str>,
    /// The `-C target-feature` list a build needs to contain the tier:
    /// WebAssembly's, which has no run-time detection (each wasm tier's list
    /// contains the one before it); empty for the tiers detected at run
    /// time. CI builds the wasm suites once per list and runs them under
    /// Node.js.
    pub build_features: &'static str,
    /// The emulated CPU (`qemu-aarch64 -cpu NAME`) on which CI proves the
    /// tier; empty where no emulator is used: x86-64 tiers are proven on the
    /// CI machine's own CPU where it has them, wasm tiers by their build
    /// under Node.js.
    pub emulated_with: &'static str,
    /// Emulated CPUs that have the architecture's baseline but not this
    /// tier's feature, where CI shows the tier reported absent and never
    /// used; empty for the tiers every CPU of their architecture has, and
    /// for x86 and WebAssembly (the wasm runner builds without the
    /// features instead).
    pub emulated_without: &'static [&'static str],
    /// The tier's folder in the repository (`crates/kernels-x86/src/avx2`),
    /// where its tiles, table and this declaration live.
    pub folder: &'static str,
    /// The tests that show the proof catches this tier's plausible
    /// mistakes, as `FILE::TEST` with `FILE` in the tier's folder, relative
    /// to its crate (`src/avx2/mutants.rs::saturating_…`, declared by the
    /// folder's `mod.rs` as `#[cfg(test)] mod mutants;`, so the crate's
    /// `cargo test` runs them): each builds a deliberately
    /// wrong kernel in the tier's style and expects the proof to fail it.
    /// Empty for the scalar tier alone, the reference the proof compares
    /// with.
    pub mutants: &'static [&'static str],
}

impl TierSpec {
    /// [`detect`](TierSpec::detect)'s table, if any.
    pub fn table(&self) -> Option<&'static KernelTable> {
        (self.detect)().ok()
    }

    /// Whether this CPU has every feature in [`TierSpec::features`] (true
    /// for none): what a tier's detection asks before it hands out its
    /// table.
    pub fn features_present(&self) -> bool {
        self.features.iter().all(|f| (f.present)())
    }
}

/// A CPU feature a tier needs: its name as the architecture's detection
/// macro spells it (`avx2`, `dotprod`, `relaxed-simd`) and the probe that
/// asks this CPU (or, on WebAssembly, which has no run-time detection, this
/// build). Made by [`cpu_features!`](crate::cpu_features).
#[derive(Debug, Clone, Copy)]
pub struct CpuFeature {
    /// The feature's name.
    pub name: &'static str,
    /// Whether this CPU (build) has it; `false` on other architectures.
    pub present: fn() -> bool,
}

/// `&[CpuFeature]` for an architecture's features by name:
/// `cpu_features!(x86_64: "avx2", "f16c")` probes with
/// `is_x86_feature_detected!`, `aarch64:` with
/// `is_aarch64_feature_detected!`, `wasm32:` with the build's
/// `target_feature`s; every probe is `false` on another architecture.
#[macro_export]
macro_rules! cpu_features {
    (@probe x86_64, $f:tt) => {{
        #[cfg(target_arch = "x86_64")]
        fn present() -> bool {
            ::std::arch::is_x86_feature_detected!($f)
        }
        #[cfg(not(target_arch = "x86_64"))]
        fn present() -> bool {
            false
        }
        present
    }};
    (@probe aarch64, $f:tt) => {{
        #[cfg(target_arch = "aarch64")]
        fn present() -> bool {
            ::std::arch::is_aarch64_feature_detected!($f)
        }
        #[cfg(not(target_arch = "aarch64"))]
        fn present() -> bool {
            false
        }
        present
    }};
    (@probe wasm32, $f:tt) => {{
        fn present() -> bool {
            cfg!(all(target_arch = "wasm32", target_feature = $f))
        }
        present
    }};
    ($arch:ident: $($f:tt),+ $(,)?) => {
        &[$($crate::abi::spec::CpuFeature { name: $f, present: $crate::cpu_features!(@probe $arch, $f) }),+]
    };
}

/// A tier declaration's `fn detect()` for a tier detected at run time on
/// one architecture: where `cfg(...)` holds, `$table` (an
/// `Option<&'static KernelTable>`, the crate's detecting function) or the
/// sentence `missing`; elsewhere the sentence `elsewhere`.
#[macro_export]
macro_rules! detect_on {
    (cfg($($on:tt)*), $table:expr, missing: $missing:literal, elsewhere: $elsewhere:literal $(,)?) => {
        #[cfg($($on)*)]
        fn detect() -> Result<&'static $crate::abi::table::KernelTable, &'static str> {
            $table.ok_or($missing)
        }

        #[cfg(not($($on)*))]
        fn detect() -> Result<&'static $crate::abi::table::KernelTable, &'static str> {
            Err($elsewhere)
        }
    };
}
