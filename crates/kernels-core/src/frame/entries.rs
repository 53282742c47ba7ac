//! Safe kernel-table entries over `#[target_feature]` kernels, written once
//! for every tier.

/// Defines safe functions, one per `name => kernel: kind`, that call a tier's
/// `#[target_feature]` kernel. The kernels assert their own O(1)
/// preconditions (lengths, shapes); what makes the call sound is that the
/// table holding these entries is handed out only after its CPU features were
/// detected — the invoking module states how, in its `SAFETY` note.
///
/// Kinds: `dot_i8` (`&[i8], &[i8] -> i32`), `dot_q4` (`&[i8], &[u8] -> i32`),
/// `quantize` (`&[f32], &mut [i8] -> Option<f32>`), `group_sums`
/// (`&[i8], usize, &mut [i32]`), `q8q8`, `q8q4`, `f32q8`, `f32q4`
/// (the GEMM entries of [`KernelTable`](crate::abi::table::KernelTable)), and the
/// [`frame`](crate::frame)'s micro-kernel kinds `tile_i8`, `tile_q4`,
/// `tile_grouped`, `tile_f32q8`, `tile_f32q4`, `tile_f32q4_grouped`, and
/// [`panels`](crate::abi::panel)' `tile_panel` (the invoking crate depends on
/// `half`) and `tile_panel_per_channel`.
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
        pub(crate) fn $name(x: &[f32], codes: &mut [i8]) -> Option<f32> {
            // SAFETY: as for `dot_i8` above: features detected before the table is handed out.
            unsafe { $k(x, codes) }
        }
    };
    (@one $name:ident, $k:path, group_sums) => {
        pub(crate) fn $name(codes: &[i8], group: usize, sums: &mut [i32]) {
            // SAFETY: as for `dot_i8` above: features detected before the table is handed out.
            unsafe { $k(codes, group, sums) }
        }
    };
    (@one $name:ident, $k:path, q8q8) => {
        $crate::safe_entries!(@gemm $name, $k, $crate::abi::activations::ActivationsQ8<'_>, qlinear_quant_recipe::QuantizedMatrix);
    };
    (@one $name:ident, $k:path, q8q4) => {
        $crate::safe_entries!(@gemm $name, $k, $crate::abi::activations::ActivationsQ8<'_>, qlinear_quant_recipe::QuantizedMatrixQ4);
    };
    (@one $name:ident, $k:path, f32q8) => {
        $crate::safe_entries!(@gemm $name, $k, $crate::abi::activations::ActivationsF32<'_>, qlinear_quant_recipe::QuantizedMatrix);
    };
    (@one $name:ident, $k:path, f32q4) => {
        $crate::safe_entries!(@gemm $name, $k, $crate::abi::activations::ActivationsF32<'_>, qlinear_quant_recipe::QuantizedMatrixQ4);
    };
    (@one $name:ident, $k:path, tile_i8) => {
        pub(crate) fn $name(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
            // SAFETY: as for `dot_i8` above: features detected before the table is handed out.
            unsafe { $k(x, w, acc) }
        }
    };
    (@one $name:ident, $k:path, tile_q4) => {
        pub(crate) fn $name(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
            // SAFETY: as for `dot_i8` above: features detected before the table is handed out.
            unsafe { $k(x, w, acc) }
        }
    };
    (@one $name:ident, $k:path, tile_grouped) => {
        pub(crate) fn $name(x: &[&[i8]], sums: &[&[i32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) -> usize {
            // SAFETY: as for `dot_i8` above: features detected before the table is handed out.
            unsafe { $k(x, sums, w, s, g, out) }
        }
    };
    (@one $name:ident, $k:path, tile_panel) => {
        pub(crate) fn $name(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[half::f16], out: &mut [f32]) {
            // SAFETY: as for `dot_i8` above: features detected before the table is handed out.
            unsafe { $k(x, sums, panel, s, out) }
        }
    };
    (@one $name:ident, $k:path, tile_panel_per_channel) => {
        pub(crate) fn $name(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], out: &mut [f32]) {
            // SAFETY: as for `dot_i8` above: features detected before the table is handed out.
            unsafe { $k(x, sums, panel, out) }
        }
    };
    (@one $name:ident, $k:path, tile_f32q8) => {
        pub(crate) fn $name(x: &[&[f32]], w: &[&[i8]], k: usize, out: &mut [f32]) {
            // SAFETY: as for `dot_i8` above: features detected before the table is handed out.
            unsafe { $k(x, w, k, out) }
        }
    };
    (@one $name:ident, $k:path, tile_f32q4) => {
        pub(crate) fn $name(x: &[&[f32]], w: &[&[u8]], k: usize, out: &mut [f32]) {
            // SAFETY: as for `dot_i8` above: features detected before the table is handed out.
            unsafe { $k(x, w, k, out) }
        }
    };
    (@one $name:ident, $k:path, tile_f32q4_grouped) => {
        pub(crate) fn $name(x: &[&[f32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) {
            // SAFETY: as for `dot_i8` above: features detected before the table is handed out.
            unsafe { $k(x, w, s, g, out) }
        }
    };
    (@gemm $name:ident, $k:path, $act:ty, $w:ty) => {
        pub(crate) fn $name(x: &$act, w: &$w, rows: std::ops::Range<usize>, y: &mut $crate::abi::activations::OutputTile<'_>) {
            // SAFETY: as for `dot_i8` above: features detected before the table
            // is handed out; the kernel checks every shape it relies on.
            unsafe { $k(x, w, rows, y) }
        }
    };
}

/// The GEMM entries of a tier on the [`frame`](crate::frame), one per
/// registered [`Family`](crate::frame::Family) constant (`w8a8: W8A8, …`),
/// and `SHAPES`, the table's [`GemmShapes`](crate::abi::table::GemmShapes) read off
/// those families' tiles, so that a tile is declared in one place. A
/// family left out is taken from another table, whose shapes then follow
/// the `;` (`; ..crate::neon::TABLE.shapes`); without them every family
/// must be listed (the struct literal does not compile otherwise).
#[macro_export]
macro_rules! frame_gemms {
    ($($family:ident : $value:path),* $(,)? $(; ..$base:expr)?) => {
        $( $crate::frame_gemms!(@one $family, $value); )*
        /// The declared tiles of this table's GEMM entries.
        #[allow(clippy::needless_update)]
        pub(crate) static SHAPES: $crate::abi::table::GemmShapes = $crate::abi::table::GemmShapes {
            $( $family: $value.shapes, )*
            $( ..$base )?
        };
    };
    (@one w8a8, $f:path) => {
        pub(crate) fn gemm_w8a8(x: &$crate::abi::activations::ActivationsQ8<'_>, w: &qlinear_quant_recipe::QuantizedMatrix, rows: std::ops::Range<usize>, y: &mut $crate::abi::activations::OutputTile<'_>) {
            $crate::frame::gemm_w8a8(&$f, x, w, rows, y)
        }
    };
    (@one w4a8, $f:path) => {
        pub(crate) fn gemm_w4a8(x: &$crate::abi::activations::ActivationsQ8<'_>, w: &qlinear_quant_recipe::QuantizedMatrixQ4, rows: std::ops::Range<usize>, y: &mut $crate::abi::activations::OutputTile<'_>) {
            $crate::frame::gemm_w4a8(&$f, x, w, rows, y)
        }
    };
    (@one w4a8_grouped, $f:path) => {
        pub(crate) fn gemm_w4a8_grouped(x: &$crate::abi::activations::ActivationsQ8<'_>, w: &qlinear_quant_recipe::QuantizedMatrixQ4, rows: std::ops::Range<usize>, y: &mut $crate::abi::activations::OutputTile<'_>) {
            $crate::frame::gemm_w4a8_grouped(&$f, x, w, rows, y)
        }
    };
    (@one w8a16, $f:path) => {
        pub(crate) fn gemm_w8a16(x: &$crate::abi::activations::ActivationsF32<'_>, w: &qlinear_quant_recipe::QuantizedMatrix, rows: std::ops::Range<usize>, y: &mut $crate::abi::activations::OutputTile<'_>) {
            $crate::frame::gemm_w8a16(&$f, x, w, rows, y)
        }
    };
    (@one w4a16, $f:path) => {
        pub(crate) fn gemm_w4a16(x: &$crate::abi::activations::ActivationsF32<'_>, w: &qlinear_quant_recipe::QuantizedMatrixQ4, rows: std::ops::Range<usize>, y: &mut $crate::abi::activations::OutputTile<'_>) {
            $crate::frame::gemm_w4a16(&$f, x, w, rows, y)
        }
    };
    (@one w4a16_grouped, $f:path) => {
        pub(crate) fn gemm_w4a16_grouped(x: &$crate::abi::activations::ActivationsF32<'_>, w: &qlinear_quant_recipe::QuantizedMatrixQ4, rows: std::ops::Range<usize>, y: &mut $crate::abi::activations::OutputTile<'_>) {
            $crate::frame::gemm_w4a16_grouped(&$f, x, w, rows, y)
        }
    };
}
