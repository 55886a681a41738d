//! Authentication of a job's traffic (`AMNET_UDP_AUTH=1`): a keyed MAC, SipHash-2-4 with a
//! 128-bit output (the `siphasher` crate), over what the protocol put on the wire.
//!
//! The launcher draws a fresh 128-bit secret per job (`AMNET_UDP_SECRET`, [`Secret`]). Two
//! keys are derived from it, one per use, so that a tag made for one can never pass for the
//! other: [`Mac::datagrams`] tags datagrams, [`Mac::bootstrap`] the frames of the bootstrap
//! connection (`crate::boot`).
//!
//! A tagged datagram is the protocol's bytes followed by [`TAG_LEN`] bytes of tag:
//!
//! ```text
//! | header and body, as wire::encode wrote them (any length) | tag: 16 bytes |
//! tag = SipHash-2-4-128(datagram key, header and body)
//! ```
//!
//! The tag is computed as a stream over the pieces the datagram leaves in (its encoded bytes,
//! then a payload chunk sent from the caller's memory), so no piece is copied to be tagged;
//! and checked ([`Mac::open`]) on the received bytes before anything decodes them.

use std::hash::Hasher;

use siphasher::sip128::{Hasher128, SipHasher24};

/// Bytes of a tag.
pub const TAG_LEN: usize = 16;

/// A job's secret: 128 bits, drawn by the launcher.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Secret(pub [u8; 16]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// A fresh secret from the kernel's random number generator (`getrandom`).
    pub fn random() -> std::io::Result<Secret> {
        let mut k = [0u8; 16];
        let mut got = 0;
        while got < k.len() {
            let rest = &mut k[got..];
            // SAFETY: `rest` is a live buffer of `rest.len()` bytes, which the kernel fills.
            let r = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
            match usize::try_from(r) {
                Ok(n) => got += n,
                Err(_) => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        Ok(Secret(k))
    }
}

/// A keyed MAC: SipHash-2-4 with 128-bit output under a key derived from the job's secret.
#[derive(Clone, Copy)]
pub struct Mac {
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mac(..)")
    }
}

impl Mac {
    /// The key `SipHash-2-4-128(secret, label)`.
    fn derive(secret: &Secret, label: &[u8]) -> Mac {
        let mut h = SipHasher24::new_with_key(&secret.0);
        h.write(label);
        let k = h.finish128();
        Mac { k0: k.h1, k1: k.h2 }
    }

    /// The MAC of datagrams.
    pub fn datagrams(secret: &Secret) -> Mac {
        Mac::derive(secret, b"amnet udp datagram tag v1")
    }

    /// The MAC of the bootstrap connection's frames.
    pub fn bootstrap(secret: &Secret) -> Mac {
        Mac::derive(secret, b"amnet udp bootstrap frame tag v1")
    }

    /// The tag of the concatenation of `parts`.
    #[inline]
    pub fn tag(&self, parts: &[&[u8]]) -> [u8; TAG_LEN] {
        let mut h = SipHasher24::new_with_keys(self.k0, self.k1);
        for p in parts {
            h.write(p);
        }
        h.finish128().as_bytes()
    }

    /// Whether `tag` is the tag of the concatenation of `parts` (compared in constant time).
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8; TAG_LEN]) -> bool {
        let want = u128::from_ne_bytes(self.tag(parts));
        let got = u128::from_ne_bytes(*tag);
        // One comparison of the whole difference, not byte by byte.
        std::hint::black_box(want ^ got) == 0
    }

    /// A received datagram without its tag, when the tag verifies; `None` for a datagram
    /// shorter than a tag or whose tag does not verify.
    #[inline]
    pub fn open<'a>(&self, datagram: &'a [u8]) -> Option<&'a [u8]> {
        let (body, tag) = datagram.split_last_chunk::<TAG_LEN>()?;
        self.verify(&[body], tag).then_some(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Secret {
        Secret(std::array::from_fn(|i| u8::try_from(i).unwrap()))
    }

    /// The reference implementation's first 128-bit vector (key 00..0f, empty message):
    /// the crate computes SipHash-2-4-128 as specified.
    #[test]
    fn siphash_2_4_128_matches_the_reference_vector() {
        let mut h = SipHasher24::new_with_key(&secret().0);
        h.write(&[]);
        let want = [
            0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55,
            0x02, 0x93,
        ];
        assert_eq!(h.finish128().as_bytes(), want);
    }

    #[test]
    fn a_tag_covers_every_byte_wherever_the_pieces_split() {
        let mac = Mac::datagrams(&secret());
        let msg: Vec<u8> = (0..300u32)
            .map(|i| u8::try_from(i * 7 % 251).unwrap())
            .collect();
        let whole = mac.tag(&[&msg]);
        for cut in [0, 1, 7, 8, 9, 52, 299, 300] {
            let (a, b) = msg.split_at(cut);
            assert_eq!(mac.tag(&[a, b]), whole, "cut at {cut}");
            assert!(mac.verify(&[a, b], &whole));
        }
        for i in 0..msg.len() {
            let mut m = msg.clone();
            m[i] ^= 0x80;
            assert!(!mac.verify(&[&m], &whole), "flipped byte {i}");
        }
        // Length matters: a prefix or an extension has another tag.
        assert!(!mac.verify(&[&msg[..299]], &whole));
        assert!(!mac.verify(&[&msg, &[0]], &whole));
    }

    #[test]
    fn open_takes_the_tag_off_and_refuses_a_wrong_or_missing_one() {
        let mac = Mac::datagrams(&secret());
        let body = b"AMNU header and payload";
        let mut d = body.to_vec();
        d.extend_from_slice(&mac.tag(&[body]));
        assert_eq!(mac.open(&d), Some(&body[..]));
        // No tag at all: the last 16 bytes of the body are no tag.
        assert_eq!(mac.open(body), None);
        assert_eq!(mac.open(&d[..TAG_LEN - 1]), None);
        assert_eq!(mac.open(&[]), None);
        // A tag of another key: another job, or the bootstrap's key.
        let other = Mac::datagrams(&Secret([9; 16]));
        assert_eq!(other.open(&d), None);
        assert_eq!(Mac::bootstrap(&secret()).open(&d), None);
        // Any bit of the tag.
        for i in 0..TAG_LEN {
            let mut e = d.clone();
            e[body.len() + i] ^= 1;
            assert_eq!(mac.open(&e), None, "tag byte {i}");
        }
    }

    #[test]
    fn random_secrets_differ_and_never_show() {
        let a = Secret::random().unwrap();
        let b = Secret::random().unwrap();
        assert_ne!(a, b);
        assert_eq!(format!("{a:?}"), "Secret(..)");
        assert_eq!(format!("{:?}", Mac::datagrams(&a)), "Mac(..)");
    }
}
