//! Deterministic data patterns, so that every receiver can check what it got.

/// Argument `i` of a message with `seed` (argument 0 is the seed itself).
#[allow(clippy::cast_possible_truncation)] // i <= 16
pub fn arg(seed: u32, i: usize) -> u32 {
    if i == 0 {
        seed
    } else {
        seed.wrapping_mul(2_654_435_761)
            .wrapping_add(i as u32 * 40_503)
    }
}

/// `n` arguments for `seed`.
pub fn args(seed: u32, n: usize) -> Vec<u32> {
    (0..n).map(|i| arg(seed, i)).collect()
}

/// Byte `j` of a payload with `seed`.
#[allow(clippy::cast_possible_truncation)] // reduced modulo 251
pub fn byte(seed: u32, j: usize) -> u8 {
    let x = (seed as usize)
        .wrapping_mul(131)
        .wrapping_add(j.wrapping_mul(7))
        ^ (j >> 8);
    (x % 251) as u8
}

/// A payload of `n` bytes for `seed`.
pub fn bytes(seed: u32, n: usize) -> Vec<u8> {
    (0..n).map(|j| byte(seed, j)).collect()
}

/// Index of the first byte of `got` that differs from the pattern, if any.
pub fn first_bad(seed: u32, got: &[u8]) -> Option<usize> {
    got.iter()
        .enumerate()
        .position(|(j, &b)| b != byte(seed, j))
}
