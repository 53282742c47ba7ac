//! The float-activation families on a tier's micro-kernels: W8A16, W4A16
//! per channel and grouped (`docs/NUMERICS.md` §6.2).

use super::*;

/// A per-channel float micro-kernel over weight rows of `W`.
pub(super) type TileF32<W> = fn(&[&[f32]], &[&[W]], usize, &mut [f32]);

/// W8A16 and W4A16 per channel on a tier's micro-kernels: `y = w_scale ·
/// partial` (§6.2).
#[allow(clippy::too_many_arguments)]
pub(super) fn float_per_channel<W: 'static>(
    kernels: &'static [TileF32<W>],
    f_shapes: &Shapes,
    layout: Layout,
    x: &ActivationsF32<'_>,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
    (codes, stride): (&[W], usize),
    s: &[f32],
) {
    let xs = FloatView::of(x, x.k, layout);
    let xs = xs.rows();
    let mut out = [0f32; MAX_TILE];
    let (mut xv, mut wv) = (Views::new(), Views::new());
    f_shapes.sweep_indexed(x.m, rows.clone(), |index, t, r0, i0| {
        let xv = xv.set_for((i0, t.xr, false), |d| xs.row(i0 + d));
        let wv = wv.set_rows(codes, r0, t.wr, stride, stride);
        (kernels[index])(xv, wv, x.k, &mut out[..t.wr * t.xr]);
        let s = &s[r0..r0 + t.wr];
        for d in 0..t.xr {
            let out = &mut out[d * t.wr..(d + 1) * t.wr];
            for (v, &sr) in out.iter_mut().zip(s) {
                *v *= sr;
            }
            y.set_run(i0 + d, r0 - rows.start, out);
        }
    });
}

/// W8A16 on a tier's micro-kernels: `y = w_scale · partial` (§6.2).
pub fn gemm_w8a16(
    f: &Family<TileF32Q8>,
    x: &ActivationsF32<'_>,
    w: &QuantizedMatrix,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    x.check();
    y.check(x.m, rows.len());
    assert!(rows.end <= w.n() && w.k() == x.k, "W8A16 shapes");
    let codes = (w.codes(), w.k());
    float_per_channel(f.kernels, &f.shapes, f.layout, x, rows, y, codes, w.scales());
}

/// W4A16 per channel on a tier's micro-kernels: `y = w_scale · partial` (§6.2).
pub fn gemm_w4a16(
    f: &Family<TileF32Q4>,
    x: &ActivationsF32<'_>,
    w: &QuantizedMatrixQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::PerChannel(s) = w.scales() else {
        panic!("gemm_w4a16 needs per-channel scales")
    };
    assert!(rows.end <= w.n() && w.k() == x.k, "W4A16 shapes");
    let packed = (w.packed(), w.row_stride());
    float_per_channel(f.kernels, &f.shapes, f.layout, x, rows, y, packed, s);
}

/// W4A16 grouped on a tier's micro-kernels: `y = Σ_g f32(s_g) · partial_g`
/// in increasing g, from +0 (§6.2); the micro-kernel owns the whole sum.
pub fn gemm_w4a16_grouped(
    f: &Family<TileF32Q4Grouped>,
    x: &ActivationsF32<'_>,
    w: &QuantizedMatrixQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::Grouped { group, scales } = w.scales() else {
        panic!("gemm_w4a16_grouped needs group scales")
    };
    let (g, groups) = (*group, w.k() / *group);
    assert!(rows.end <= w.n() && w.k() == x.k, "W4A16 grouped shapes");
    let xs = FloatView::of(x, g, f.layout);
    let xs = xs.rows();
    let (packed, stride) = (w.packed(), w.row_stride());
    let mut sf = ChunkScales::new(f.scales_to_f32, scales, groups, rows.clone(), &f.shapes);
    let mut out = [0f32; MAX_TILE];
    let (mut xv, mut wv) = (Views::new(), Views::new());
    sf.shapes(&f.shapes)
        .sweep_indexed(x.m, rows.clone(), |index, t, r0, i0| {
            let xv = xv.set_for((i0, t.xr, false), |d| xs.row(i0 + d));
            let wv = wv.set_rows(packed, r0, t.wr, stride, stride);
            let st = sf.rows(r0, t.wr);
            (f.kernels[index])(xv, wv, st, g, &mut out[..t.wr * t.xr]);
            for d in 0..t.xr {
                let out = &out[d * t.wr..(d + 1) * t.wr];
                y.set_run(i0 + d, r0 - rows.start, out);
            }
        });
}
