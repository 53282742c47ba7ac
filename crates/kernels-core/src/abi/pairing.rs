//! How a panel pairs the nibbles of 4 packed bytes (docs/NUMERICS.md §4):
//! the one permutation within a piece that the panel form
//! (`abi/panel.rs`) applies to a natural row's bytes, and its inverse.

/// The 8 nibbles of 4 naturally packed bytes (byte `j`: columns `2j`,
/// `2j + 1`) re-paired as a panel holds them (byte `j`: columns `j`, `j +
/// 4`; docs/NUMERICS.md §4), so that a load's low nibbles meet an
/// activation row's first 4 codes of the 8 and its high nibbles the last 4,
/// in the row's own order.
pub(crate) fn repair(natural: [u8; 4]) -> [u8; 4] {
    // As nibbles of one u32, column i sits at nibble i; the panel wants
    // nibble 2j to hold column j and nibble 2j + 1 column j + 4: the
    // perfect shuffle of the low and the high 16 bits, two swaps of the
    // middle pieces (bytes 1 and 2, then nibbles 1·2 and 5·6).
    let mut x = u32::from_le_bytes(natural);
    let t = (x ^ (x >> 8)) & 0x0000_FF00;
    x ^= t ^ (t << 8);
    let t = (x ^ (x >> 4)) & 0x00F0_00F0;
    x ^= t ^ (t << 4);
    x.to_le_bytes()
}

/// [`repair`]'s inverse: a panel's 4 bytes in the natural pairing (the
/// same two swaps in the other order).
pub(crate) fn unpair(panel: [u8; 4]) -> [u8; 4] {
    let mut x = u32::from_le_bytes(panel);
    let t = (x ^ (x >> 4)) & 0x00F0_00F0;
    x ^= t ^ (t << 4);
    let t = (x ^ (x >> 8)) & 0x0000_FF00;
    x ^= t ^ (t << 8);
    x.to_le_bytes()
}
