//! The activation codes' sums per group, which cancel the nibble bias of
//! the Q4 families (docs/NUMERICS.md §6.1): the scalar tier's entry and the
//! helpers that lay the sums out for a call.

use crate::abi::table::GroupSums;

/// Sums of int8 activation codes per group of `group` columns, `[m, k / group]`
/// (`group == k` or `k == 0`: one sum per row). The Q4 kernels subtract
/// `8 · sum` to cancel the nibble bias.
pub fn activation_group_sums(codes: &[i8], m: usize, k: usize, group: usize) -> Vec<i32> {
    let mut sums = Vec::new();
    activation_group_sums_into(codes, m, k, group, &mut sums);
    sums
}

/// [`activation_group_sums`] into a caller's buffer (cleared first), so that
/// a caller running many small calls reuses one allocation.
pub fn activation_group_sums_into(codes: &[i8], m: usize, k: usize, group: usize, sums: &mut Vec<i32>) {
    activation_group_sums_with(group_sums_scalar, codes, m, k, group, sums);
}

/// [`activation_group_sums_into`] with a tier's [`GroupSums`] entry `f`
/// (`group` dividing `k`, as every caller's shape has it).
pub fn activation_group_sums_with(f: GroupSums, codes: &[i8], m: usize, k: usize, group: usize, sums: &mut Vec<i32>) {
    sums.clear();
    if k == 0 || group == 0 {
        sums.resize(m, 0);
        return;
    }
    // per channel (`group == k`) one sum a row, without a division
    sums.resize(if group == k { m } else { codes.len() / group }, 0);
    f(&codes[..sums.len() * group], group, sums);
}

/// The scalar tier's [`GroupSums`]: the plain sum of each group.
pub fn group_sums_scalar(codes: &[i8], group: usize, sums: &mut [i32]) {
    assert!(group > 0 && codes.len() == group * sums.len(), "group sums shape");
    for (s, g) in sums.iter_mut().zip(codes.chunks_exact(group)) {
        *s = group_sum(g);
    }
}

/// `Σ c` of one group of codes, exact: 32 codes at a time into 16 i16
/// lanes (two codes a lane per 32, at most 2 · 128 = 256 in magnitude), so
/// up to 127 of them (32 512 at most) before the lanes are widened and
/// added: the compiler turns the lanes into vector code. Widened per 32,
/// a per-channel row of 576 codes took 1.1 instructions a code, 3 % of a
/// W4A8 decode call at 192 × 576 (callgrind, AVX2, Intel Xeon, family 6
/// model 167); one code at a time, 1.7 (AMD EPYC Zen 4, family 25 model 17).
fn group_sum(g: &[i8]) -> i32 {
    let mut chunks = g.chunks_exact(32);
    let mut sum = 0i32;
    loop {
        let mut lanes = [0i16; 16];
        let mut taken = 0;
        for c in (&mut chunks).take(127) {
            for (j, l) in lanes.iter_mut().enumerate() {
                *l += i16::from(c[j]) + i16::from(c[j + 16]);
            }
            taken += 1;
        }
        sum += lanes.iter().map(|&v| i32::from(v)).sum::<i32>();
        if taken < 127 {
            break;
        }
    }
    sum + chunks.remainder().iter().map(|&c| i32::from(c)).sum::<i32>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_sums_are_the_plain_sums_at_every_length_and_extreme() {
        // lengths across the 32-code steps and their remainders, codes at
        // both ends of i8 (a lane of two is then ±256) and in between
        // (127 steps of 32 fill the i16 lanes: 4064 codes and past it)
        for len in [
            0usize, 1, 31, 32, 33, 63, 64, 100, 576, 4063, 4064, 4096, 4127, 8128, 12345,
        ] {
            for fill in [i8::MIN, i8::MAX, -1, 0] {
                let mut codes = vec![fill; len];
                for (i, c) in codes.iter_mut().enumerate().skip(1).step_by(7) {
                    *c = (i as i32 * 37 % 255 - 127) as i8;
                }
                let want: i32 = codes.iter().map(|&c| i32::from(c)).sum();
                assert_eq!(group_sum(&codes), want, "len {len} fill {fill}");
            }
        }
        // and by group: two rows of 64 in groups of 32
        let codes: Vec<i8> = (0..128).map(|i| (i as i8).wrapping_mul(3)).collect();
        let want: Vec<i32> = codes
            .chunks(32)
            .map(|g| g.iter().map(|&c| i32::from(c)).sum())
            .collect();
        assert_eq!(activation_group_sums(&codes, 2, 64, 32), want);
    }
}
