//! Safe kernel-table entries over `#[target_feature]` kernels, written once
//! for every tier.

/// Defines safe functions, one per `name => kernel: kind`, that call a tier's
/// `#[target_feature]` kernel. The kernels assert their own O(1)
/// preconditions (lengths, shapes); what makes the call sound is that the
/// table holding these entries is handed out only after its CPU features were
/// detected — the invoking module states how, in its `SAFETY` note.
///
/// Kinds: `dot_i8` (`&[i8], &[i8] -> i32`), `dot_q4` (`&[i8], &[u8] -> i32`),
/// `quantize` (`&[f32], &mut [i8] -> f32`), `q8q8`, `q8q4`, `f32q8`, `f32q4`
/// (the GEMM entries of [`KernelTable`](crate::KernelTable)).
#[macro_export]
macro_rules! safe_entries {
    ($($name:ident => $kernel:path : $kind:ident),* $(,)?) => {
        $( $crate::safe_entries!(@one $name, $kernel, $kind); )*
    };
    (@one $name:ident, $k:path, dot_i8) => {
        pub(crate) fn $name(a: &[i8], b: &[i8]) -> i32 {
            // SAFETY: this entry is reachable only through a table handed out
            // after its CPU features were detected (see the invoking module).
            unsafe { $k(a, b) }
        }
    };
    (@one $name:ident, $k:path, dot_q4) => {
        pub(crate) fn $name(x: &[i8], packed: &[u8]) -> i32 {
            // SAFETY: as for `dot_i8` above: features detected before the table is handed out.
            unsafe { $k(x, packed) }
        }
    };
    (@one $name:ident, $k:path, quantize) => {
        pub(crate) fn $name(x: &[f32], codes: &mut [i8]) -> f32 {
            // SAFETY: as for `dot_i8` above: features detected before the table is handed out.
            unsafe { $k(x, codes) }
        }
    };
    (@one $name:ident, $k:path, q8q8) => {
        $crate::safe_entries!(@gemm $name, $k, $crate::ActivationsQ8<'_>, qlinear_quant_recipe::QuantizedMatrix);
    };
    (@one $name:ident, $k:path, q8q4) => {
        $crate::safe_entries!(@gemm $name, $k, $crate::ActivationsQ8<'_>, qlinear_quant_recipe::QuantizedMatrixQ4);
    };
    (@one $name:ident, $k:path, f32q8) => {
        $crate::safe_entries!(@gemm $name, $k, $crate::ActivationsF32<'_>, qlinear_quant_recipe::QuantizedMatrix);
    };
    (@one $name:ident, $k:path, f32q4) => {
        $crate::safe_entries!(@gemm $name, $k, $crate::ActivationsF32<'_>, qlinear_quant_recipe::QuantizedMatrixQ4);
    };
    (@gemm $name:ident, $k:path, $act:ty, $w:ty) => {
        pub(crate) fn $name(x: &$act, w: &$w, rows: std::ops::Range<usize>, y: &mut $crate::OutputTile<'_>) {
            // SAFETY: as for `dot_i8` above: features detected before the table
            // is handed out; the kernel checks every shape it relies on.
            unsafe { $k(x, w, rows, y) }
        }
    };
}

/// The three weight-only GEMMs (W8A16, W4A16, W4A16 grouped) of a tier whose
/// float arithmetic is written as three functions in scope:
/// `partial(x_chunks, chunks, codes8)` (the 8-lane partial of one group, the
/// activations laid out by [`chunked_f32`](crate::layout::chunked_f32)
/// in natural order), `q8_codes(row, col)` and `q4_codes(packed, byte, end)`
/// (8 codes from a column or byte, the zero code past the end). The loops and
/// the order `y = s · partial` / `y += s_g · partial_g` are the scalar tier's.
/// Optional attributes (e.g. `#[target_feature(enable = "neon")]`) go on each.
#[macro_export]
macro_rules! weight_only_gemms {
    ($(#[$attr:meta])*) => {
        $(#[$attr])*
        pub(crate) fn gemm_w8a16(
            x: &$crate::ActivationsF32<'_>,
            w: &qlinear_quant_recipe::QuantizedMatrix,
            rows: std::ops::Range<usize>,
            y: &mut $crate::OutputTile<'_>,
        ) {
            x.check();
            y.check(x.m, rows.len());
            assert!(rows.end <= w.n() && w.k() == x.k, "W8A16 shapes");
            let (k, chunks) = (x.k, x.k.div_ceil(8));
            let xc: Vec<Vec<f32>> = (0..x.m).map(|i| $crate::layout::chunked_f32(x.row(i), k, false)).collect();
            for (j, r) in rows.enumerate() {
                let wr = w.row(r);
                for (i, xi) in xc.iter().enumerate() {
                    y.set(i, j, w.scales()[r] * partial(xi, chunks, |c| q8_codes(wr, c * 8)));
                }
            }
        }

        $(#[$attr])*
        pub(crate) fn gemm_w4a16(
            x: &$crate::ActivationsF32<'_>,
            w: &qlinear_quant_recipe::QuantizedMatrixQ4,
            rows: std::ops::Range<usize>,
            y: &mut $crate::OutputTile<'_>,
        ) {
            x.check();
            y.check(x.m, rows.len());
            let qlinear_quant_recipe::Q4Scales::PerChannel(s) = w.scales() else {
                panic!("gemm_w4a16 needs per-channel scales")
            };
            assert!(rows.end <= w.n() && w.k() == x.k, "W4A16 shapes");
            let (k, chunks) = (x.k, x.k.div_ceil(8));
            let xc: Vec<Vec<f32>> = (0..x.m).map(|i| $crate::layout::chunked_f32(x.row(i), k, false)).collect();
            for (j, r) in rows.enumerate() {
                let wr = w.row_packed(r);
                for (i, xi) in xc.iter().enumerate() {
                    y.set(i, j, s[r] * partial(xi, chunks, |c| q4_codes(wr, c * 4, wr.len())));
                }
            }
        }

        $(#[$attr])*
        pub(crate) fn gemm_w4a16_grouped(
            x: &$crate::ActivationsF32<'_>,
            w: &qlinear_quant_recipe::QuantizedMatrixQ4,
            rows: std::ops::Range<usize>,
            y: &mut $crate::OutputTile<'_>,
        ) {
            x.check();
            y.check(x.m, rows.len());
            let qlinear_quant_recipe::Q4Scales::Grouped { group, scales } = w.scales() else {
                panic!("gemm_w4a16_grouped needs group scales")
            };
            let (g, groups) = (*group, w.k() / *group);
            assert!(rows.end <= w.n() && w.k() == x.k, "W4A16 grouped shapes");
            let per_group = g.div_ceil(8);
            let xc: Vec<Vec<f32>> = (0..x.m).map(|i| $crate::layout::chunked_f32(x.row(i), g, false)).collect();
            for (j, r) in rows.enumerate() {
                let (wr, sr) = (w.row_packed(r), &scales[r * groups..(r + 1) * groups]);
                for (i, xi) in xc.iter().enumerate() {
                    let mut acc = 0f32;
                    for gi in 0..groups {
                        let (b0, end) = (gi * g / 2, (gi + 1) * g / 2);
                        let xg = &xi[gi * per_group * 8..(gi + 1) * per_group * 8];
                        acc += f32::from(sr[gi]) * partial(xg, per_group, |c| q4_codes(wr, b0 + c * 4, end));
                    }
                    y.set(i, j, acc);
                }
            }
        }
    };
}

/// The three integer GEMMs (W8A8, W4A8 per channel, W4A8 grouped) of a tier
/// whose dot products are written as `dot_i8_i8(a, b)` and
/// `dot_biased(x, packed)` (`Σ x·b` over biased nibbles, uncorrected) in
/// scope; one output row at a time, with the spec's output expressions.
/// Optional attributes (e.g. a `target_feature`) go on each function.
#[macro_export]
macro_rules! int_gemms_over_dots {
    ($(#[$attr:meta])*) => {
        $(#[$attr])*
        pub(crate) fn gemm_w8a8(
            x: &$crate::ActivationsQ8<'_>,
            w: &qlinear_quant_recipe::QuantizedMatrix,
            rows: std::ops::Range<usize>,
            y: &mut $crate::OutputTile<'_>,
        ) {
            x.check();
            y.check(x.m, rows.len());
            assert!(rows.end <= w.n() && w.k() == x.k, "W8A8 shapes");
            for (j, r) in rows.enumerate() {
                for i in 0..x.m {
                    let acc = dot_i8_i8(x.row(i), w.row(r));
                    y.set(i, j, acc as f32 * (x.scales[i] * w.scales()[r]));
                }
            }
        }

        $(#[$attr])*
        pub(crate) fn gemm_w4a8(
            x: &$crate::ActivationsQ8<'_>,
            w: &qlinear_quant_recipe::QuantizedMatrixQ4,
            rows: std::ops::Range<usize>,
            y: &mut $crate::OutputTile<'_>,
        ) {
            x.check();
            y.check(x.m, rows.len());
            let qlinear_quant_recipe::Q4Scales::PerChannel(s) = w.scales() else {
                panic!("gemm_w4a8 needs per-channel scales")
            };
            assert!(rows.end <= w.n() && w.k() == x.k && (x.sum_group == x.k || x.k == 0), "W4A8 shapes");
            for (j, r) in rows.enumerate() {
                for i in 0..x.m {
                    let acc = dot_biased(x.row(i), w.row_packed(r)) - 8 * x.row_sums(i)[0];
                    y.set(i, j, acc as f32 * (x.scales[i] * s[r]));
                }
            }
        }

        $(#[$attr])*
        pub(crate) fn gemm_w4a8_grouped(
            x: &$crate::ActivationsQ8<'_>,
            w: &qlinear_quant_recipe::QuantizedMatrixQ4,
            rows: std::ops::Range<usize>,
            y: &mut $crate::OutputTile<'_>,
        ) {
            x.check();
            y.check(x.m, rows.len());
            let qlinear_quant_recipe::Q4Scales::Grouped { group, scales } = w.scales() else {
                panic!("gemm_w4a8_grouped needs group scales")
            };
            let (g, groups) = (*group, w.k() / *group);
            assert!(rows.end <= w.n() && w.k() == x.k && x.sum_group == g, "W4A8 grouped shapes");
            for (j, r) in rows.enumerate() {
                let (wr, sr) = (w.row_packed(r), &scales[r * groups..(r + 1) * groups]);
                for i in 0..x.m {
                    let (xr, sums) = (x.row(i), x.row_sums(i));
                    let mut sum = 0f32;
                    for gi in 0..groups {
                        let acc = dot_biased(&xr[gi * g..(gi + 1) * g], &wr[gi * g / 2..(gi + 1) * g / 2]) - 8 * sums[gi];
                        sum += acc as f32 * f32::from(sr[gi]);
                    }
                    y.set(i, j, sum * x.scales[i]);
                }
            }
        }
    };
}
