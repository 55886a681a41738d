//! `include/amnet.h` is what cbindgen generates from this crate with `cbindgen.toml`.
//!
//! `UPDATE_HEADER=1 cargo test -p amnet-capi --test header` rewrites it.

use std::path::Path;

#[test]
fn committed_header_is_generated_from_the_crate() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    let want = String::from_utf8(out).expect("the header is UTF-8");
    let path = dir.join("include/amnet.h");
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have == want {
        return;
    }
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&path, want).expect("write include/amnet.h");
        return;
    }
    let line = have
        .lines()
        .zip(want.lines())
        .position(|(a, b)| a != b)
        .map_or(have.lines().count().min(want.lines().count()), |i| i)
        + 1;
    panic!(
        "capi/include/amnet.h differs from what cbindgen generates (first at line {line}); \
         run UPDATE_HEADER=1 cargo test -p amnet-capi --test header and commit the header"
    );
}
