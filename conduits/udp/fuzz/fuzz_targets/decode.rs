//! Fuzzes the datagram decoder: no input may panic it, and whatever decodes must re-encode to
//! exactly the same bytes (the format is canonical). Run from `conduits/udp/fuzz` with
//! `cargo +nightly fuzz run decode`.

#![no_main]

use amnet_udp::wire;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(pkt) = wire::decode(data) {
        assert_eq!(pkt.encoded_len(), data.len());
        let mut out = vec![0u8; data.len()];
        let n = wire::encode(&pkt, &mut out).expect("a decoded packet encodes");
        assert_eq!(&out[..n], data);
    }
});
