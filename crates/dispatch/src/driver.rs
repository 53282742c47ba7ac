//! The row-parallel driver: rayon over output features in ranges that are
//! multiples of 16. Each output is computed entirely by one worker with the
//! tier's fixed arithmetic, so the thread count never changes the bits.

use std::cell::RefCell;
use std::ops::Range;

use qlinear_kernels_core::OutputTile;
use rayon::prelude::*;

/// Output features per parallel granule (docs/NUMERICS.md §7, law 3): a
/// multiple of 8, and of a weight panel's 16 rows (`PanelsQ4`), so that no
/// task computes a panel that another task also computes for its other half.
pub(crate) const ROW_GRANULE: usize = 16;
/// Below this many multiply-adds a call runs on the calling thread: the work is
/// shorter than waking workers.
pub(crate) const DEFAULT_PARALLEL_THRESHOLD: usize = 1 << 18;

/// Runs `kernel` over output features `0..n` of a `[m, n]` output `y`, each
/// task's tile carrying its features' part of `bias` (`[n]`, or empty).
pub(crate) fn drive(
    m: usize,
    n: usize,
    k: usize,
    threshold: usize,
    bias: &[f32],
    y: &mut [f32],
    kernel: impl Fn(Range<usize>, &mut OutputTile<'_>) + Sync,
) {
    let part = |r: Range<usize>| bias.get(r).unwrap_or(&[]);
    let work = m.saturating_mul(n).saturating_mul(k.max(1));
    // the pool's size only when the call might split: asking rayon for it
    // outside a pool goes through its global registry's set-up check each
    // time, about 45 instructions of a small decode call's
    if work < threshold || n <= ROW_GRANULE || rayon::current_num_threads() == 1 {
        kernel(0..n, &mut OutputTile { y, ld: n, bias });
        return;
    }
    let threads = rayon::current_num_threads();
    let chunk = n.div_ceil(threads * 4).div_ceil(ROW_GRANULE) * ROW_GRANULE;
    if m == 1 {
        y.par_chunks_mut(chunk).enumerate().for_each(|(c, ys)| {
            let r0 = c * chunk;
            let width = ys.len();
            let bias = part(r0..r0 + width);
            kernel(r0..r0 + width, &mut OutputTile { y: ys, ld: width, bias });
        });
        return;
    }
    // M > 1: each task writes a contiguous [m, width] tile, scattered after,
    // in a buffer the calling thread keeps (at M = 64, N = 1536 a fresh one
    // is 384 KiB of new pages on every call)
    TILES.with(|cell| match cell.try_borrow_mut() {
        Ok(mut tiles) => scatter_tiles(m, n, chunk, y, &mut tiles, &part, &kernel),
        // a call nested in another on this thread (a rayon worker that
        // stole a second layer's call) takes a buffer of its own
        Err(_) => scatter_tiles(m, n, chunk, y, &mut Vec::new(), &part, &kernel),
    });
}

thread_local! {
    static TILES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

#[allow(clippy::too_many_arguments)]
fn scatter_tiles<'b>(
    m: usize,
    n: usize,
    chunk: usize,
    y: &mut [f32],
    tiles: &mut Vec<f32>,
    bias: &(impl Fn(Range<usize>) -> &'b [f32] + Sync),
    kernel: &(impl Fn(Range<usize>, &mut OutputTile<'_>) + Sync),
) {
    // every element is written by its task before the scatter reads it
    tiles.clear();
    tiles.resize(m * n, 0.0);
    tiles.par_chunks_mut(chunk * m).enumerate().for_each(|(c, buf)| {
        let r0 = c * chunk;
        let width = buf.len() / m;
        let bias = bias(r0..r0 + width);
        kernel(
            r0..r0 + width,
            &mut OutputTile {
                y: buf,
                ld: width,
                bias,
            },
        );
    });
    for (c, buf) in tiles.chunks(chunk * m).enumerate() {
        let (r0, width) = (c * chunk, buf.len() / m);
        for (i, tile_row) in buf.chunks_exact(width).enumerate() {
            y[i * n + r0..i * n + r0 + width].copy_from_slice(tile_row);
        }
    }
}
