use qlinear_quant_recipe::quantize_row_q8;

/// `Σ a[i]·b[i]` in i32. Exact for `a.len() <= MAX_K_W8A8` with codes in
/// `[-127, 127]` (the caller's bound).
pub fn dot_i8_i8(a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len(), "dot_i8_i8 lengths");
    a.iter().zip(b).map(|(&x, &w)| i32::from(x) * i32::from(w)).sum()
}

/// `Σ x[i]·q[i]` against a packed Q4 row of biased nibbles `b = q + 8`,
/// computed as `Σ x·b − 8·Σ x`: the bias costs one correction, not a
/// subtraction per weight.
pub fn dot_i8_q4(x: &[i8], packed: &[u8]) -> i32 {
    assert_eq!(packed.len(), x.len().div_ceil(2), "dot_i8_q4 packed length");
    dot_i8_q4_biased(x, packed) - 8 * x.iter().map(|&v| i32::from(v)).sum::<i32>()
}

/// `Σ x·b` over the biased nibbles `b` of `packed` (`ceil(x.len()/2)` bytes;
/// no bias correction); an odd tail reads only the low nibble. SIMD tiers use
/// it for their column tails.
pub fn dot_i8_q4_biased(x: &[i8], packed: &[u8]) -> i32 {
    let pairs = x.chunks_exact(2);
    let tail = pairs
        .remainder()
        .first()
        .map_or(0, |&lo| i32::from(lo) * i32::from(packed[x.len() / 2] & 0x0F));
    tail + pairs
        .zip(packed)
        .map(|(p, &b)| i32::from(p[0]) * i32::from(b & 0x0F) + i32::from(p[1]) * i32::from(b >> 4))
        .sum::<i32>()
}

/// The activation quantizer of the scalar tier: `quantize_row_q8` itself. The
/// caller has checked the row is finite; a non-finite row would yield zeros.
pub fn quantize_row_q8_finite(x: &[f32], codes: &mut [i8]) -> f32 {
    quantize_row_q8(x, codes).unwrap_or_else(|_| {
        codes.fill(0);
        0.0
    })
}
