//! The row-parallel driver: rayon over output features in ranges that are
//! multiples of 8. Each output is computed entirely by one worker with the
//! tier's fixed arithmetic, so the thread count never changes the bits.

use std::ops::Range;

use qlinear_kernels_scalar::OutputTile;
use rayon::prelude::*;

/// Output features per parallel granule (docs/NUMERICS.md §7, law 3).
pub(crate) const ROW_GRANULE: usize = 8;
/// Below this many multiply-adds a call runs on the calling thread: the work is
/// shorter than waking workers.
pub(crate) const DEFAULT_PARALLEL_THRESHOLD: usize = 1 << 18;

/// Runs `kernel` over output features `0..n` of a `[m, n]` output `y`.
pub(crate) fn drive(
    m: usize,
    n: usize,
    k: usize,
    threshold: usize,
    y: &mut [f32],
    kernel: impl Fn(Range<usize>, &mut OutputTile<'_>) + Sync,
) {
    let threads = rayon::current_num_threads();
    let work = m.saturating_mul(n).saturating_mul(k.max(1));
    if work < threshold || n <= ROW_GRANULE || threads == 1 {
        kernel(0..n, &mut OutputTile { y, ld: n });
        return;
    }
    let chunk = n.div_ceil(threads * 4).div_ceil(ROW_GRANULE) * ROW_GRANULE;
    if m == 1 {
        y.par_chunks_mut(chunk).enumerate().for_each(|(c, ys)| {
            let r0 = c * chunk;
            let width = ys.len();
            kernel(r0..r0 + width, &mut OutputTile { y: ys, ld: width });
        });
        return;
    }
    // M > 1: each task writes a contiguous [m, width] tile, scattered after.
    let mut tiles = vec![0f32; m * n];
    tiles.par_chunks_mut(chunk * m).enumerate().for_each(|(c, buf)| {
        let r0 = c * chunk;
        let width = buf.len() / m;
        kernel(r0..r0 + width, &mut OutputTile { y: buf, ld: width });
    });
    for (c, buf) in tiles.chunks(chunk * m).enumerate() {
        let (r0, width) = (c * chunk, buf.len() / m);
        for (i, tile_row) in buf.chunks_exact(width).enumerate() {
            y[i * n + r0..i * n + r0 + width].copy_from_slice(tile_row);
        }
    }
}
