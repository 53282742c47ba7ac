//! Nibble packing. In memory a Q4 code `c` in `[-8, 7]` is stored as the
//! unsigned nibble `c + 8` (biased), so unpacking is a shift and a mask with no
//! sign extension, and the bias cancels in a dot product as one correction term
//! (`Σ x·(q+8) − 8·Σ x`). On disk nibbles are two's complement. The two differ by
//! exactly `XOR 0x8` per nibble, so converting a whole buffer is `XOR 0x88` per
//! byte, and the odd-K pad (biased zero 8) maps to two's-complement zero 0.

/// The bias added to every Q4 code in memory.
pub const Q4_BIAS: u8 = 8;
/// The pad nibble of an odd-K row in memory: the biased zero, so a kernel that
/// reads whole bytes adds `0 · x` for it. A raw 0 nibble would decode to -8.
pub const Q4_PAD_BIASED: u8 = Q4_BIAS;

/// Bytes per packed Q4 row of `k` columns: `ceil(k / 2)`.
#[inline]
pub fn packed_row_bytes(k: usize) -> usize {
    k.div_ceil(2)
}

/// Packs codes in `[-8, 7]` two per byte, low nibble first, biased by +8;
/// an odd count pads the last high nibble with [`Q4_PAD_BIASED`].
/// `out.len()` must be `ceil(codes.len() / 2)` (checked by the callers).
pub fn pack_codes_biased(codes: &[i8], out: &mut [u8]) {
    debug_assert_eq!(out.len(), packed_row_bytes(codes.len()));
    let bias = |c: i8| (c as u8).wrapping_add(Q4_BIAS) & 0x0F;
    for (byte, pair) in out.iter_mut().zip(codes.chunks(2)) {
        let lo = bias(pair[0]);
        let hi = pair.get(1).map_or(Q4_PAD_BIASED, |&c| bias(c));
        *byte = lo | (hi << 4);
    }
}

/// The code of column `col` of a biased packed row (`[-8, 7]`).
#[inline]
pub fn unpack_code_biased(packed: &[u8], col: usize) -> i8 {
    let byte = packed[col / 2];
    let nib = if col.is_multiple_of(2) { byte & 0x0F } else { byte >> 4 };
    nib as i8 - Q4_BIAS as i8
}

/// Converts biased nibbles to two's-complement nibbles in place (`XOR 0x88`).
pub fn biased_to_twos_complement(bytes: &mut [u8]) {
    bytes.iter_mut().for_each(|b| *b ^= 0x88);
}

/// Converts two's-complement nibbles to biased nibbles in place (`XOR 0x88`,
/// the same involution as [`biased_to_twos_complement`]).
pub fn twos_complement_to_biased(bytes: &mut [u8]) {
    biased_to_twos_complement(bytes)
}
