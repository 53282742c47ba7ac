//! Activation layouts prepared once per kernel call by the SIMD tiers (portable
//! code, shared by every ISA), so their per-weight inner loops unpack nibbles
//! with a mask and a shift and nothing else.

/// De-interleaves int8 activations per block of `block` columns: the first
/// half of each output block holds the block's even columns, the second half
/// its odd columns — the order in which the low and high nibbles of
/// `block / 2` packed bytes come out of a vector register. Only whole blocks
/// are written; the tail stays in the natural layout.
pub fn split_even_odd_i8(x: &[i8], block: usize) -> Vec<i8> {
    let mut out = vec![0i8; x.len() / block * block];
    split_even_odd_into(x, block, &mut out);
    out
}

/// [`split_even_odd_i8`] into a caller's buffer (e.g. an aligned one): writes
/// the whole blocks of `x` to `out`, which must hold `x.len() / block · block`
/// bytes.
pub fn split_even_odd_into(x: &[i8], block: usize, out: &mut [i8]) {
    let whole = x.len() / block * block;
    assert_eq!(out.len(), whole, "split_even_odd_into: output length");
    for (src, dst) in x[..whole].chunks_exact(block).zip(out.chunks_exact_mut(block)) {
        let (even, odd) = dst.split_at_mut(block / 2);
        for (j, pair) in src.chunks_exact(2).enumerate() {
            even[j] = pair[0];
            odd[j] = pair[1];
        }
    }
}

/// f32 activations for the weight-only kernels: each group of `group`
/// columns (the whole row when per channel) is cut into chunks of 8 from the
/// group's start, the last chunk zero-padded, and with `q4_order` each chunk
/// is stored as columns `[0, 2, 4, 6, 1, 3, 5, 7]` to match how 4 packed bytes
/// unpack (low nibbles, then high nibbles). Adding a padded `0 · q` to a lane
/// is exact: lanes start at +0.0 and so are never -0.0.
pub fn chunked_f32(x: &[f32], group: usize, q4_order: bool) -> Vec<f32> {
    const Q4: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];
    if x.is_empty() {
        return Vec::new();
    }
    let group = group.max(1);
    let chunks_per_group = group.div_ceil(8);
    let mut out = vec![0f32; x.len().div_ceil(group) * chunks_per_group * 8];
    for (g, src) in x.chunks(group).enumerate() {
        for (c, chunk) in src.chunks(8).enumerate() {
            let dst = &mut out[(g * chunks_per_group + c) * 8..][..8];
            for (j, d) in dst.iter_mut().enumerate() {
                let col = if q4_order { Q4[j] } else { j };
                *d = chunk.get(col).copied().unwrap_or(0.0);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_odd_split() {
        let x: Vec<i8> = (0..10).collect();
        assert_eq!(split_even_odd_i8(&x, 4), vec![0, 2, 1, 3, 4, 6, 5, 7]);
    }

    #[test]
    fn chunks_pad_and_reorder() {
        let x: Vec<f32> = (0..10).map(|v| v as f32).collect();
        let c = chunked_f32(&x, 10, true);
        assert_eq!(&c[..8], &[0.0, 2.0, 4.0, 6.0, 1.0, 3.0, 5.0, 7.0]);
        assert_eq!(&c[8..], &[8.0, 0.0, 0.0, 0.0, 9.0, 0.0, 0.0, 0.0]);
        let c = chunked_f32(&x, 2, false);
        assert_eq!(c.len(), 5 * 8);
        assert_eq!(&c[8..16], &[2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    }
}
