//! The hash of the engine's maps.
//!
//! The engine looks collectives, groups and handles up by small integer keys (team id and
//! sequence number, handle number) several times per call and per poll. std's default
//! SipHash-1-3 costs about as much as the rest of an idle poll; these keys need no protection
//! against chosen collisions (they come from this rank's own numbering, or from peers of the
//! same job, whose messages are checked on arrival), so a multiply-and-fold hash serves.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A hasher for small integer keys: each word is folded in with a multiplication by an odd
/// constant and a rotation, and `finish` mixes the high bits down so that hashbrown's
/// control bytes (the top 7 bits) and bucket index (the low bits) both vary.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl FastHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ (rest.len() as u64) << 56);
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        let x = (self.0 ^ (self.0 >> 32)).wrapping_mul(K);
        x ^ (x >> 29)
    }
}

/// `HashMap` with [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// `HashSet` with [`FastHasher`].
pub(crate) type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn h<T: Hash>(v: T) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(v)
    }

    #[test]
    fn keys_that_differ_in_one_field_hash_apart() {
        // (team, seq) pairs as the engine forms them: sequence numbers of one team and the
        // same sequence number on many teams spread over buckets and control bytes.
        let mut low = HashSet::new();
        let mut top = HashSet::new();
        for team in 0..64u64 {
            for seq in 0..64u64 {
                let x = h((team.wrapping_mul(0x1234_5678_9abc), seq));
                low.insert(x & 0xfff);
                top.insert(x >> 57);
            }
        }
        // 4096 random values take about 2,589 of 4096 patterns.
        assert!(low.len() > 2450, "{} of 4096 low patterns", low.len());
        assert_eq!(top.len(), 128);
        assert_ne!(h(&[1u8, 2, 3][..]), h(&[1u8, 2, 3, 0][..]));
    }

    #[test]
    fn maps_work() {
        let mut m: FastMap<(u64, u64), u32> = FastMap::default();
        for i in 0..10_000u64 {
            m.insert((i % 7, i), u32::try_from(i).unwrap());
        }
        assert_eq!(m.len(), 10_000);
        assert_eq!(m.get(&(3, 9_999)), Some(&9_999));
        let s: FastSet<u64> = (0..100).collect();
        assert!(s.contains(&42));
    }
}
