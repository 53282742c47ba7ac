//! The proof's random rows' generator.

/// A small deterministic generator (xorshift64*): the proof needs no crate.
/// Seeded, so every run draws the same rows.
pub struct Rng(u64);
impl Rng {
    /// The generator of `seed` (any value; 0 too).
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A value in [−1, 1) from the next draw's top 24 bits.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    /// `len` codes in −127..=127, eight from each draw (each byte mod 255:
    /// −127 comes up 2/256 of the time, which a proof does not mind). The
    /// random rows draw about a million a selftest.
    pub fn codes(&mut self, len: usize) -> Vec<i8> {
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            v.extend(self.next_u64().to_le_bytes().map(|b| ((b % 255) as i32 - 127) as i8));
        }
        v.truncate(len);
        v
    }
    /// A packed row of `k` random nibbles (two from each random byte), the
    /// odd-K pad nibble 8 where the format needs it.
    pub fn packed(&mut self, k: usize) -> Vec<u8> {
        let len = k.div_ceil(2);
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            v.extend(self.next_u64().to_le_bytes());
        }
        v.truncate(len);
        if k % 2 == 1 {
            v[len - 1] = (v[len - 1] & 0x0F) | 8 << 4;
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn random_codes_are_codes_and_cover_the_range() {
        let codes = Rng::new(1).codes(100_003);
        assert_eq!(codes.len(), 100_003);
        assert!(codes.iter().all(|&c| (-127..=127).contains(&c)));
        assert!(codes.contains(&-127) && codes.contains(&127) && codes.contains(&0));
    }

    #[test]
    fn random_packed_rows_carry_the_pad_nibble_at_odd_k() {
        for k in [1, 2, 15, 16, 17, 4097] {
            let p = Rng::new(k as u64).packed(k);
            assert_eq!(p.len(), k.div_ceil(2), "k = {k}");
            if k % 2 == 1 {
                assert_eq!(p[k / 2] >> 4, 8, "k = {k}");
            }
        }
        let p = Rng::new(3).packed(4096);
        assert!((0..16).all(|n| p.iter().any(|&b| b & 0x0F == n)));
    }
}
