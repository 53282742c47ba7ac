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
    // 8 bytes at a time as one little-endian word where the blocks allow:
    // byte by byte this took 8.9 instructions a byte (callgrind, the panel
    // tiles' blocks of 8), once per call and in every selftest proof
    if block == 8 {
        for (src, dst) in x[..whole].chunks_exact(8).zip(out.chunks_exact_mut(8)) {
            let (even, odd) = split_word(src);
            dst.copy_from_slice(&(u64::from(even) | u64::from(odd) << 32).to_le_bytes().map(|b| b as i8));
        }
        return;
    }
    for (src, dst) in x[..whole].chunks_exact(block).zip(out.chunks_exact_mut(block)) {
        let (even, odd) = dst.split_at_mut(block / 2);
        if block.is_multiple_of(8) {
            let (even, odd) = (even.chunks_exact_mut(4), odd.chunks_exact_mut(4));
            for ((eight, e), o) in src.chunks_exact(8).zip(even).zip(odd) {
                let (lo, hi) = split_word(eight);
                e.copy_from_slice(&lo.to_le_bytes().map(|b| b as i8));
                o.copy_from_slice(&hi.to_le_bytes().map(|b| b as i8));
            }
        } else {
            for (j, pair) in src.chunks_exact(2).enumerate() {
                even[j] = pair[0];
                odd[j] = pair[1];
            }
        }
    }
}

/// Bytes 0, 2, 4, 6 and bytes 1, 3, 5, 7 of 8 bytes (`eight.len() == 8`),
/// each as a little-endian word.
pub(crate) fn split_word(eight: &[i8]) -> (u32, u32) {
    let mut b = [0u8; 8];
    for (d, s) in b.iter_mut().zip(eight) {
        *d = *s as u8;
    }
    let v = u64::from_le_bytes(b);
    // keep every other byte, then close the gaps: 16-bit lanes to 8, 32 to 16
    let pack = |w: u64| {
        let w = w & 0x00FF_00FF_00FF_00FF;
        let w = (w | (w >> 8)) & 0x0000_FFFF_0000_FFFF;
        (w | (w >> 16)) as u32
    };
    (pack(v), pack(v >> 8))
}

/// f32 activations for the weight-only kernels: each group of `group`
/// columns (the whole row when per channel) is cut into chunks of 8 from the
/// group's start, the last chunk zero-padded, and with `q4_order` each chunk
/// is stored as columns `[0, 2, 4, 6, 1, 3, 5, 7]` to match how 4 packed bytes
/// unpack (low nibbles, then high nibbles). Adding a padded `0 · q` to a lane
/// is exact: lanes start at +0.0 and so are never -0.0.
pub fn chunked_f32(x: &[f32], group: usize, q4_order: bool) -> Vec<f32> {
    let mut out = Vec::new();
    chunked_f32_into(x, group, q4_order, &mut out);
    out
}

/// [`chunked_f32`] appended to `out`, so that a caller lays out many rows
/// into one buffer. Where the layout is the row itself (natural order,
/// groups of whole chunks that tile the row, as W8A16's rows of a multiple
/// of 8 are) it is one copy; otherwise whole chunks are moved as arrays and
/// only a short last chunk goes value by value. (Gathering every value
/// through a bounds-checked lookup, 7 instructions a value, was a twentieth
/// of a W8A16 call at 192 × 576; callgrind, AVX2, Intel Xeon, family 6
/// model 167.)
pub fn chunked_f32_into(x: &[f32], group: usize, q4_order: bool, out: &mut Vec<f32>) {
    const Q4: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];
    if x.is_empty() {
        return;
    }
    let group = group.max(1);
    if !q4_order && group.is_multiple_of(8) && x.len().is_multiple_of(group) {
        out.extend_from_slice(x);
        return;
    }
    let chunks_per_group = group.div_ceil(8);
    let start = out.len();
    out.resize(start + x.len().div_ceil(group) * chunks_per_group * 8, 0.0);
    let laid = &mut out[start..];
    for (g, src) in x.chunks(group).enumerate() {
        for (c, chunk) in src.chunks(8).enumerate() {
            let at = (g * chunks_per_group + c) * 8;
            let dst = &mut laid[at..at + 8];
            match <&[f32; 8]>::try_from(chunk) {
                Ok(v) if q4_order => dst.copy_from_slice(&[v[0], v[2], v[4], v[6], v[1], v[3], v[5], v[7]]),
                Ok(v) => dst.copy_from_slice(v),
                // the short last chunk of a group: the rest stays 0
                Err(_) => {
                    for (j, d) in dst.iter_mut().enumerate() {
                        let col = if q4_order { Q4[j] } else { j };
                        *d = chunk.get(col).copied().unwrap_or(0.0);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_odd_split() {
        let x: Vec<i8> = (0..10).collect();
        assert_eq!(split_even_odd_i8(&x, 4), vec![0, 2, 1, 3, 4, 6, 5, 7]);
        let x: Vec<i8> = (0..18).map(|v| v - 9).collect();
        assert_eq!(
            split_even_odd_i8(&x, 8),
            vec![-9, -7, -5, -3, -8, -6, -4, -2, -1, 1, 3, 5, 0, 2, 4, 6]
        );
    }

    /// The word-at-a-time path (blocks that are multiples of 8) against
    /// the pairs one at a time, over every even block to 128, lengths with
    /// and without a tail, and every byte value in every position.
    #[test]
    fn even_odd_split_by_words_equals_the_plain_loop() {
        let plain = |x: &[i8], block: usize| -> Vec<i8> {
            let mut out = vec![0i8; x.len() / block * block];
            for (src, dst) in x.chunks_exact(block).zip(out.chunks_exact_mut(block)) {
                for (j, pair) in src.chunks_exact(2).enumerate() {
                    dst[j] = pair[0];
                    dst[block / 2 + j] = pair[1];
                }
            }
            out
        };
        let x: Vec<i8> = (0..1031u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 as i8)
            .collect();
        let all: Vec<i8> = (0..=255u8).map(|b| b as i8).collect();
        for block in (2..=128).step_by(2) {
            for len in [0, block - 1, block, 3 * block + 5, x.len()] {
                let x = &x[..len.min(x.len())];
                assert_eq!(
                    split_even_odd_i8(x, block),
                    plain(x, block),
                    "block {block}, {} bytes",
                    x.len()
                );
            }
            assert_eq!(split_even_odd_i8(&all, block), plain(&all, block), "block {block}");
        }
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
        // the row itself where groups of whole chunks tile it
        let x: Vec<f32> = (0..48).map(|v| v as f32).collect();
        assert_eq!(chunked_f32(&x, 16, false), x);
        assert_eq!(chunked_f32(&x, 48, false), x);
    }

    /// The layout as its definition reads (each group's chunks of 8 from the
    /// group's start, zero-padded, Q4 order within a chunk), at every group
    /// and length up to 40, both orders, rows appended one after another.
    #[test]
    fn chunks_match_their_definition() {
        const Q4: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];
        for len in 0..40usize {
            for group in 1..=40usize {
                for q4_order in [false, true] {
                    let x: Vec<f32> = (0..len).map(|v| v as f32 + 1.0).collect();
                    let cpg = group.div_ceil(8);
                    let mut want = vec![0f32; len.div_ceil(group) * cpg * 8];
                    for (i, &v) in x.iter().enumerate() {
                        let (g, at) = (i / group, i % group);
                        let (c, j) = (at / 8, at % 8);
                        let slot = if q4_order {
                            Q4.iter().position(|&q| q == j).unwrap()
                        } else {
                            j
                        };
                        want[(g * cpg + c) * 8 + slot] = v;
                    }
                    let mut two = vec![-1.0];
                    chunked_f32_into(&x, group, q4_order, &mut two);
                    chunked_f32_into(&x, group, q4_order, &mut two);
                    let both: Vec<f32> = [&[-1.0][..], &want, &want].concat();
                    assert_eq!(two, both, "len {len} group {group} q4 {q4_order}");
                }
            }
        }
    }
}
