//! The x86-64 tiers of qlinear: `Avx2` and `Avx512Vnni`, each a complete
//! [`KernelTable`] bit-identical to the scalar tier.
//!
//! A table is handed out only after run-time feature detection
//! ([`avx2_table`], [`avx512vnni_table`]); the `#[target_feature]` kernels
//! behind it are private, so they cannot be reached on a CPU that lacks the
//! feature. The dispatch crate additionally runs the selftest before use.
//! On other architectures this crate is empty.

// Kernels walk several parallel arrays (rows, accumulators, outputs) by index.
#![allow(clippy::needless_range_loop)]

cfg_if::cfg_if! {
    if #[cfg(target_arch = "x86_64")] {
        /// The W8A8 GEMM over output rows, written once for both tiers: blocks
        /// of `ROWS` weight rows share each activation load through the tier's
        /// `dot_rows::<R>` (then single rows); the output expression is the
        /// spec's `(acc as f32) * (x_scale * w_scale)`.
        macro_rules! gemm_w8a8_over_rows {
            ($features:literal) => {
                #[target_feature(enable = $features)]
                pub(crate) fn gemm_w8a8(
                    x: &qlinear_kernels_scalar::ActivationsQ8<'_>,
                    w: &qlinear_quant_recipe::QuantizedMatrix,
                    rows: std::ops::Range<usize>,
                    y: &mut qlinear_kernels_scalar::OutputTile<'_>,
                ) {
                    x.check();
                    y.check(x.m, rows.len());
                    assert!(rows.end <= w.n() && w.k() == x.k, "W8A8 shapes");
                    let s = w.scales();
                    let mut r = rows.start;
                    while r < rows.end {
                        let j = r - rows.start;
                        if r + ROWS <= rows.end {
                            let wr: [&[i8]; ROWS] = std::array::from_fn(|q| w.row(r + q));
                            for i in 0..x.m {
                                let acc = dot_rows::<ROWS>(x.row(i), wr);
                                for q in 0..ROWS {
                                    y.set(i, j + q, acc[q] as f32 * (x.scales[i] * s[r + q]));
                                }
                            }
                            r += ROWS;
                        } else {
                            for i in 0..x.m {
                                let acc = dot_rows::<1>(x.row(i), [w.row(r)])[0];
                                y.set(i, j, acc as f32 * (x.scales[i] * s[r]));
                            }
                            r += 1;
                        }
                    }
                }
            };
        }

        mod avx2;
        mod avx512vnni;

        use qlinear_kernels_scalar::KernelTable;

        /// The AVX2 table, if this CPU reports AVX2 and F16C.
        pub fn avx2_table() -> Option<&'static KernelTable> {
            avx2::detected().then_some(&avx2::TABLE)
        }

        /// The AVX-512 VNNI table, if this CPU reports AVX-512 F, BW, VL, VNNI
        /// (and AVX2 and F16C, which its float kernels share with the AVX2 tier).
        pub fn avx512vnni_table() -> Option<&'static KernelTable> {
            avx512vnni::detected().then_some(&avx512vnni::TABLE)
        }
    }
}
