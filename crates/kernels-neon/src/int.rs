//! The integer kernels of both aarch64 tiers, generated from one body over the
//! tier's 16-byte dot primitive `$dot16(acc, a, b)` (`acc += Σ a·b` in four
//! i32 lanes, exact): `smull`/`sadalp` for NEON, `sdot` for NEON SDOT.
//!
//! Q4 bytes unpack to natural column order with a mask, a shift and a zip
//! (`zip1`/`zip2` of low and high nibbles), so activations need no relayout.

macro_rules! int_kernels {
    ($feature:literal, $dot16:ident) => {

        use qlinear_kernels_scalar::{dot_i8_i8 as tail_i8, dot_i8_q4_biased as tail_biased};

        #[inline]
        #[target_feature(enable = $feature)]
        fn load16(v: &[i8], at: usize) -> int8x16_t {
            assert!(at + 16 <= v.len());
            // SAFETY: bounded by the assert above.
            unsafe { vld1q_s8(v.as_ptr().add(at)) }
        }

        /// `Σ a·b` of two equal-length int8 rows.
        #[target_feature(enable = $feature)]
        pub(crate) fn dot_i8_i8(a: &[i8], b: &[i8]) -> i32 {
            assert_eq!(a.len(), b.len());
            let mut acc = vdupq_n_s32(0);
            let mut c = 0;
            while c + 16 <= a.len() {
                acc = $dot16(acc, load16(a, c), load16(b, c));
                c += 16;
            }
            vaddvq_s32(acc) + tail_i8(&a[c..], &b[c..])
        }

        /// `Σ x·b` over biased nibbles (no correction), 32 columns per step.
        #[target_feature(enable = $feature)]
        pub(crate) fn dot_biased(x: &[i8], p: &[u8]) -> i32 {
            assert_eq!(p.len(), x.len().div_ceil(2));
            let mask = vdupq_n_u8(0x0F);
            let mut acc = vdupq_n_s32(0);
            let mut c = 0;
            while c + 32 <= x.len() {
                // SAFETY: c + 32 <= x.len(), so 16 bytes at c / 2 lie inside p.
                let b = unsafe { vld1q_u8(p.as_ptr().add(c / 2)) };
                let (lo, hi) = (vandq_u8(b, mask), vshrq_n_u8::<4>(b));
                let c0 = vreinterpretq_s8_u8(vzip1q_u8(lo, hi)); // columns c..c+16
                let c1 = vreinterpretq_s8_u8(vzip2q_u8(lo, hi)); // columns c+16..c+32
                acc = $dot16($dot16(acc, c0, load16(x, c)), c1, load16(x, c + 16));
                c += 32;
            }
            vaddvq_s32(acc) + tail_biased(&x[c..], &p[c / 2..])
        }

        #[target_feature(enable = $feature)]
        pub(crate) fn dot_i8_q4(x: &[i8], p: &[u8]) -> i32 {
            dot_biased(x, p) - 8 * x.iter().map(|&v| i32::from(v)).sum::<i32>()
        }

        qlinear_kernels_scalar::int_gemms_over_dots!(#[target_feature(enable = $feature)]);
    };
}
